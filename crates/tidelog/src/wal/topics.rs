//! The topic table: each live topic by name, and the next topic id.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::alloc::SHARED_LOCK_WAIT;
use crate::error::{Error, Result};
use crate::format::validate_name;
use crate::poison::Recover;
use crate::shared::{HeaderLock, SharedState, TopicSlot};
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
    /// Shared mode: other processes create topics too; names and ids come from the shared
    /// state file, under its topic lock.
    shared_mode: bool,
}

/// How a new table's topics get their slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slots {
    /// The first opener (or an exclusive one): each topic claims a slot and reports its
    /// state there.
    Claim,
    /// A shared-mode handle that joined others: each topic takes the slot they report in.
    Find,
}

/// Shared mode: `topic`'s slot, which every topic there has (one created when the table was
/// full could not be: the limit).
pub(super) fn slot_of(topic: &Topic) -> Result<&TopicSlot> {
    topic.slot().ok_or_else(|| {
        Error::limit(
            "topics with a slot (shared mode)",
            crate::shared::SLOTS as u64 + 1,
            crate::shared::SLOTS as u64,
        )
    })
}

impl Topics {
    /// A table holding `topics`, with new ids from `next_id` up (and above every id given).
    /// With the writer's `shared` state file, every topic gets its slot there.
    pub fn new(
        topics: Vec<Arc<Topic>>,
        next_id: u32,
        shared: Option<Arc<SharedState>>,
        slots: Slots,
        shared_mode: bool,
    ) -> Result<Topics> {
        let mut table = Table {
            by_name: HashMap::new(),
            next_id,
        };
        for topic in topics {
            table.next_id = table.next_id.max(topic.id.saturating_add(1));
            if let Some(s) = shared.as_ref() {
                match slots {
                    Slots::Claim => {
                        if let Some(slot) = s.claim(topic.id, &topic.name)? {
                            topic.attach_slot(slot);
                        }
                    }
                    Slots::Find => match s.find(topic.id) {
                        Some(slot) if !slot.is_gone() => topic.set_slot(slot),
                        // Deleted by another process since this open read the directory
                        // (its slot released, or its deletion begun): not this handle's.
                        _ if shared_mode => continue,
                        _ => {}
                    },
                }
            }
            table.by_name.insert(topic.name.clone(), topic);
        }
        Ok(Topics {
            table: RwLock::new(table),
            shared: RwLock::new(shared),
            shared_mode,
        })
    }

    /// The topic `name`, or [`Error::UnknownTopic`].
    /// In shared mode, a topic another process created since is found too.
    pub fn get(&self, name: &str) -> Result<Arc<Topic>> {
        validate_name(name)?;
        let found = self.table.read().recover().by_name.get(name).cloned();
        match found {
            Some(t) if !self.deleted_elsewhere(&t) => return Ok(t),
            // Another process deleted it: the topic of the name now, if any.
            Some(t) => self.forget(&t),
            None => {}
        }
        self.find_shared(name).ok_or_else(|| Error::UnknownTopic {
            topic: name.to_owned(),
        })
    }

    /// Another process deleted `topic` (in shared mode, or the writer a read-only handle
    /// follows). This handle appends to it no more
    /// (its readers and writers get `UnknownTopic`), drops its extents (their deleter
    /// marked them) and no longer lists it, so a later append of the name makes a new
    /// topic.
    pub fn forget(&self, topic: &Topic) {
        if topic.drop_deleted() {
            self.remove(topic);
        }
    }

    /// [`Topics::get`] for a topic to read or describe: one another process began to
    /// delete is `UnknownTopic`.
    pub fn get_live(&self, name: &str) -> Result<Arc<Topic>> {
        let topic = self.get(name)?;
        if self.deleted_elsewhere(&topic) {
            return Err(Error::UnknownTopic {
                topic: name.to_owned(),
            });
        }
        Ok(topic)
    }

    /// The topic `name`, created with a new id if missing (at most `topics_max` topics).
    pub fn get_or_create(&self, name: &str, topics_max: u64) -> Result<Arc<Topic>> {
        if let Some(t) = self.table.read().recover().by_name.get(name)
            && !self.deleted_elsewhere(t)
        {
            return Ok(Arc::clone(t));
        }
        validate_name(name)?;
        let mut table = self.table.write().recover();
        if let Some(t) = table.by_name.get(name) {
            if !self.deleted_elsewhere(t) {
                return Ok(Arc::clone(t));
            }
            // Another process deleted it: a new topic of the name, or the one under
            // deletion (whose appends then fail) until its slot is released.
            let gone = Arc::clone(t);
            table.by_name.remove(name);
            gone.drop_deleted();
        }
        if self.shared_mode {
            return self.create_shared(&mut table, name, topics_max);
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
        if let Some(shared) = shared
            && let Some(slot) = shared.claim(id, name)?
        {
            topic.attach_slot(slot);
        }
        table.by_name.insert(name.to_owned(), Arc::clone(&topic));
        Ok(topic)
    }

    /// Shared mode: the topic `name` as another process created it, or created here with
    /// the next id of the shared state file and a slot there (under its topic lock).
    fn create_shared(&self, table: &mut Table, name: &str, topics_max: u64) -> Result<Arc<Topic>> {
        let shared = self.shared.read().recover().clone().ok_or(Error::Closed)?;
        let _lock = shared.lock(HeaderLock::Topics, SHARED_LOCK_WAIT)?;
        if let Some((id, slot)) = shared.find_name(name) {
            let topic = Arc::new(Topic::new(name.to_owned(), id));
            topic.set_slot(slot);
            table.by_name.insert(name.to_owned(), Arc::clone(&topic));
            return Ok(topic);
        }
        let count = shared.topic_count();
        if count >= topics_max {
            return Err(Error::limit("max_topics", count + 1, topics_max));
        }
        let id = shared.take_topic_id().ok_or_else(|| {
            Error::limit("topic ids", u64::from(u32::MAX) + 1, u64::from(u32::MAX))
        })?;
        let slot = shared.claim(id, name)?.ok_or_else(|| {
            Error::limit(
                "topics with a slot (shared mode)",
                count + 1,
                crate::shared::SLOTS as u64,
            )
        })?;
        let topic = Arc::new(Topic::new(name.to_owned(), id));
        topic.attach_slot(slot);
        table.next_id = table.next_id.max(id.saturating_add(1));
        table.by_name.insert(name.to_owned(), Arc::clone(&topic));
        Ok(topic)
    }

    /// Shared mode: the topic `name` if another process created it since this handle
    /// looked (a reader's lookup), with its slot.
    pub fn find_shared(&self, name: &str) -> Option<Arc<Topic>> {
        if !self.shared_mode {
            return None;
        }
        let shared = self.shared.read().recover().clone()?;
        let (id, slot) = shared.find_name(name)?;
        let mut table = self.table.write().recover();
        if let Some(t) = table.by_name.get(name) {
            return Some(Arc::clone(t));
        }
        let topic = Arc::new(Topic::new(name.to_owned(), id));
        topic.set_slot(slot);
        table.by_name.insert(name.to_owned(), Arc::clone(&topic));
        Some(topic)
    }

    /// Every live topic, those other processes created included (shared mode), by name.
    pub fn every(&self) -> Result<Vec<Arc<Topic>>> {
        let mut out = Vec::new();
        for name in self.names() {
            match self.get(&name) {
                Ok(topic) => out.push(topic),
                // Deleted since it was listed.
                Err(Error::UnknownTopic { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Shared mode: the names of the topics other processes report, with their ids (with
    /// `deleting`, those whose deletion began instead).
    pub fn shared_named(&self, deleting: bool) -> Vec<(String, u32)> {
        if !self.shared_mode {
            return Vec::new();
        }
        self.shared
            .read()
            .recover()
            .as_ref()
            .map(|s| s.named(deleting))
            .unwrap_or_default()
    }

    /// Shared mode.
    pub fn is_shared_mode(&self) -> bool {
        self.shared_mode
    }

    /// The topic `name` with id `id` as a read-only refresh found it. A known topic under
    /// another id was deleted and created again by the writer: it is replaced, and dropped
    /// as deleted (its readers get `UnknownTopic`).
    pub fn get_or_insert_found(&self, name: &str, id: u32) -> Arc<Topic> {
        let (found, replaced) = {
            let mut table = self.table.write().recover();
            table.next_id = table.next_id.max(id.saturating_add(1));
            let replaced = match table.by_name.get(name) {
                Some(old) if old.id != id => table.by_name.remove(name),
                _ => None,
            };
            let found = table
                .by_name
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(Topic::new(name.to_owned(), id)));
            (Arc::clone(found), replaced)
        };
        if let Some(old) = replaced {
            old.drop_deleted();
        }
        found
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

    /// The names of every live topic, sorted (in shared mode, those other processes
    /// created included).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .table
            .read()
            .recover()
            .by_name
            .iter()
            .filter(|(_, t)| !self.deleted_elsewhere(t))
            .map(|(name, _)| name.clone())
            .collect();
        names.extend(self.shared_named(false).into_iter().map(|(name, _)| name));
        names.sort();
        names.dedup();
        names
    }

    /// Shared mode: whether another process deleted `topic` (see
    /// [`crate::shared::TopicSlot::is_gone`]).
    pub fn deleted_elsewhere(&self, topic: &Topic) -> bool {
        self.shared_mode && topic.slot().is_none_or(TopicSlot::is_gone)
    }

    /// Takes `name` out of the table if it is still `topic`.
    pub fn remove(&self, topic: &Topic) {
        let mut table = self.table.write().recover();
        if table
            .by_name
            .get(&topic.name)
            .is_some_and(|t| std::ptr::eq(Arc::as_ptr(t), topic))
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
