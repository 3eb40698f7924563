//! The topic table: each live topic by name, and the next topic id.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};
use crate::format::validate_name;
use crate::poison::Recover;
use crate::shared::SharedState;
use crate::topic::Topic;

#[derive(Debug, Default)]
struct Table {
    by_name: HashMap<String, Arc<Topic>>,
    next_id: u32,
}

/// The live topics of a handle.
#[derive(Debug, Default)]
pub(crate) struct Topics {
    table: RwLock<Table>,
    /// The writer's shared state file: each topic gets its slot there before its first
    /// append. `None` once the table was cleared (close).
    shared: RwLock<Option<Arc<SharedState>>>,
}

impl Topics {
    /// A table holding `topics`, with new ids from `next_id` up (and above every id given).
    /// With the writer's `shared` state file, every topic gets its slot there.
    pub fn new(topics: Vec<Arc<Topic>>, next_id: u32, shared: Option<Arc<SharedState>>) -> Topics {
        let mut table = Table {
            by_name: HashMap::new(),
            next_id,
        };
        for topic in topics {
            table.next_id = table.next_id.max(topic.id.saturating_add(1));
            if let Some(slot) = shared.as_ref().and_then(|s| s.claim(topic.id)) {
                topic.attach_slot(slot);
            }
            table.by_name.insert(topic.name.clone(), topic);
        }
        Topics {
            table: RwLock::new(table),
            shared: RwLock::new(shared),
        }
    }

    /// The topic `name`, or [`Error::UnknownTopic`].
    pub fn get(&self, name: &str) -> Result<Arc<Topic>> {
        validate_name(name)?;
        let table = self.table.read().recover();
        table
            .by_name
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopic {
                topic: name.to_owned(),
            })
    }

    /// The topic `name`, created with a new id if missing (at most `topics_max` topics).
    pub fn get_or_create(&self, name: &str, topics_max: u64) -> Result<Arc<Topic>> {
        if let Some(t) = self.table.read().recover().by_name.get(name) {
            return Ok(Arc::clone(t));
        }
        validate_name(name)?;
        let mut table = self.table.write().recover();
        if let Some(t) = table.by_name.get(name) {
            return Ok(Arc::clone(t));
        }
        let count = table.by_name.len() as u64;
        if count >= topics_max {
            return Err(Error::limit("max_topics", count + 1, topics_max));
        }
        let id = table.next_id;
        table.next_id = table.next_id.checked_add(1).ok_or_else(|| {
            Error::limit("topic ids", u64::from(u32::MAX) + 1, u64::from(u32::MAX))
        })?;
        let topic = Arc::new(Topic::new(name.to_owned(), id));
        let shared = self.shared.read().recover().clone();
        if let Some(slot) = shared.and_then(|s| s.claim(id)) {
            topic.attach_slot(slot);
        }
        table.by_name.insert(name.to_owned(), Arc::clone(&topic));
        Ok(topic)
    }

    /// The topic `name` with id `id` as a read-only refresh found it: a known topic under
    /// another id was deleted and created again by the writer, and is replaced (its readers
    /// keep their own handle).
    pub fn get_or_insert_found(&self, name: &str, id: u32) -> Arc<Topic> {
        let mut table = self.table.write().recover();
        table.next_id = table.next_id.max(id.saturating_add(1));
        if table.by_name.get(name).is_some_and(|old| old.id != id) {
            table.by_name.remove(name);
        }
        Arc::clone(
            table
                .by_name
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(Topic::new(name.to_owned(), id))),
        )
    }

    /// Every live topic.
    pub fn all(&self) -> Vec<Arc<Topic>> {
        self.table
            .read()
            .recover()
            .by_name
            .values()
            .cloned()
            .collect()
    }

    /// The names of every live topic, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .table
            .read()
            .recover()
            .by_name
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Takes `name` out of the table if it is still `topic`.
    pub fn remove(&self, topic: &Arc<Topic>) {
        let mut table = self.table.write().recover();
        if table
            .by_name
            .get(&topic.name)
            .is_some_and(|t| Arc::ptr_eq(t, topic))
        {
            table.by_name.remove(&topic.name);
        }
    }

    /// Empties the table (close: releases the mappings the topics hold, the shared state
    /// file's included).
    pub fn clear(&self) {
        self.table.write().recover().by_name.clear();
        drop(self.shared.write().recover().take());
    }
}
