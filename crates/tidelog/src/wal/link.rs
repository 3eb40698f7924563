//! A handle's link to the shared state file (`tidelog.state`): the writer's file, whose
//! slots its topics hold, or a read-only handle's attachment and the slots it found.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::io::Storage;
use crate::poison::Recover;
use crate::recovery::Published;
use crate::shared::{SharedState, TopicSlot};
use crate::topic::Topic;

/// How often a reader without a current state file tries to attach again.
const ATTACH_EVERY: Duration = Duration::from_millis(50);

/// A handle's side of the shared state file.
#[derive(Debug)]
pub(crate) struct SharedLink {
    role: Role,
    /// One catch-up at a time per handle (they move publication words forward only), and
    /// when the last one read the directory.
    pub catching_up: Mutex<Option<Instant>>,
}

#[derive(Debug)]
enum Role {
    /// The writer built the file; its topics hold their slots. `None` once closed.
    Writer(Mutex<Option<Arc<SharedState>>>),
    /// A read-only handle: the file (attached again when a new writer rebuilt it) and the
    /// slots found so far, by topic id.
    Reader(Mutex<ReaderLink>),
}

#[derive(Debug)]
struct ReaderLink {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    shared: Option<Arc<SharedState>>,
    slots: HashMap<u32, TopicSlot>,
    attached_at: Option<Instant>,
    /// The handle closed: nothing attaches again.
    closed: bool,
}

impl SharedLink {
    pub fn writer(shared: SharedState) -> SharedLink {
        SharedLink {
            role: Role::Writer(Mutex::new(Some(Arc::new(shared)))),
            catching_up: Mutex::new(None),
        }
    }

    /// A read-only handle's link: attaches to the file of `dir` if a writer of this boot
    /// built it (and again later, when one does).
    pub fn reader(storage: Arc<dyn Storage>, dir: &Path) -> SharedLink {
        let shared = SharedState::attach(&storage, dir);
        let link = ReaderLink {
            storage,
            dir: dir.to_owned(),
            shared: shared.map(Arc::new),
            slots: HashMap::new(),
            attached_at: Some(Instant::now()),
            closed: false,
        };
        SharedLink {
            role: Role::Reader(Mutex::new(link)),
            catching_up: Mutex::new(None),
        }
    }

    /// What every slot of the state file reports published (a reader's refresh and open).
    pub fn reported(&self) -> Published {
        let mut published = Published::default();
        if let Role::Reader(link) = &self.role
            && let Some(shared) = {
                let mut link = link.lock().recover();
                link.attach_again();
                link.shared.clone()
            }
        {
            let (ends, next) = shared.reported();
            for e in ends {
                published.add_end(e.file_seq, e.block_index, e.end);
            }
            published.next.extend(next);
        }
        published
    }

    /// The writer's state file, for its topic table.
    pub fn writer_state(&self) -> Option<Arc<SharedState>> {
        match &self.role {
            Role::Writer(shared) => shared.lock().recover().clone(),
            Role::Reader(_) => None,
        }
    }

    /// The state file as this handle maps it now: the writer's, or the one a read-only
    /// handle attached to while it is current (attached again when a writer rebuilt it).
    pub fn state(&self) -> Option<Arc<SharedState>> {
        match &self.role {
            Role::Writer(shared) => shared.lock().recover().clone(),
            Role::Reader(link) => {
                let mut link = link.lock().recover();
                if link.closed {
                    return None;
                }
                link.attach_again();
                link.shared.clone().filter(|s| s.is_current())
            }
        }
    }

    /// Drops this handle's mapping of the file (close; slots its topics hold go with them).
    pub fn release(&self) {
        match &self.role {
            Role::Writer(shared) => drop(shared.lock().recover().take()),
            Role::Reader(link) => {
                let mut link = link.lock().recover();
                link.shared = None;
                link.slots.clear();
                // Never again: a closed handle attaches to nothing.
                link.attached_at = None;
                link.closed = true;
            }
        }
    }

    /// A read-only handle: the state file is current and no slot names `topic` (its
    /// writer deleted it, or found the table full), so only the directory tells what the
    /// topic of that name is now. False for a writer, and while no state file is current.
    pub fn lacks_slot(&self, topic: &Topic) -> bool {
        matches!(self.role, Role::Reader(_)) && self.slot(topic).is_none() && self.state().is_some()
    }

    /// The slot `topic` has now: the writer's own, or the one a reader finds (attaching to
    /// the file again, at most every `ATTACH_EVERY`, when a writer rebuilt it).
    pub fn slot(&self, topic: &Topic) -> Option<TopicSlot> {
        let link = match &self.role {
            Role::Writer(_) => return topic.slot().cloned(),
            Role::Reader(link) => link,
        };
        let mut link = link.lock().recover();
        if link.closed {
            return None;
        }
        if let Some(slot) = link.slots.get(&topic.id) {
            if slot.is_valid() {
                return Some(slot.clone());
            }
            link.slots.remove(&topic.id);
        }
        link.attach_again();
        let slot = link.shared.as_ref()?.find(topic.id)?;
        link.slots.insert(topic.id, slot.clone());
        Some(slot)
    }
}

impl ReaderLink {
    /// Attaches to the state file again when the one held is no longer current (a writer
    /// rebuilt it), at most every `ATTACH_EVERY`.
    fn attach_again(&mut self) {
        if !self.shared.as_ref().is_some_and(|s| s.is_current())
            && self
                .attached_at
                .is_none_or(|at| at.elapsed() >= ATTACH_EVERY)
        {
            self.shared = SharedState::attach(&self.storage, &self.dir).map(Arc::new);
            self.slots.clear();
            self.attached_at = Some(Instant::now());
        }
    }
}
