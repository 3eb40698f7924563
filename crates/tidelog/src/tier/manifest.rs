//! The manifest in the bucket: numbered deltas, each written once (put-if-absent), that say
//! which producer holds the prefix (claims, by epoch), which topics exist and which extent
//! objects hold which offsets. Applying every delta in order gives the [`Manifest`]. See
//! docs/FORMAT.md, "The tier".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bucket::Bucket;
use crate::config::Retention;
use crate::error::{Error, Result};
use crate::format;

/// Where the deltas live under the prefix.
pub const MANIFEST_DIR: &str = "_tidelog/manifest";
/// First line of a delta object: magic, CRC-32 and length of the JSON body that follows.
pub const DELTA_MAGIC: &str = "TLDELTA1";
/// The JSON body's `format` field: bumped whenever an entry changes meaning or one is
/// added. Format 2 added `trim`; a delta without one is still written as format 1, so
/// builds that read only format 1 read it.
pub const DELTA_FORMAT: u32 = 2;
/// The format of a delta without `trim` entries (and of checkpoints).
pub const DELTA_FORMAT_FIRST: u32 = 1;
/// Width of the zero-padded decimal numbers in object names (they sort as numbers).
pub const NUMBER_DIGITS: usize = 20;
/// Most bytes one delta object may hold: a bigger one is damage, not a delta.
pub const DELTA_BYTES_MAX: usize = 64 << 20;
/// Where checkpoints live: the whole manifest at one version, so an open reads one object
/// and the deltas after it instead of every delta.
pub const CHECKPOINT_DIR: &str = "_tidelog/checkpoint";
/// First line of a checkpoint object (then CRC-32 and length of its JSON body).
pub const CHECKPOINT_MAGIC: &str = "TLCHKPT1";
/// The newest checkpoint's version (a hint: a reader that cannot use it reads every delta).
pub const HINT_KEY: &str = "_tidelog/last_checkpoint";
/// First word of the hint.
pub const HINT_MAGIC: &str = "TLHINT1";
/// A checkpoint is written after every delta whose version is a multiple of this.
pub const CHECKPOINT_EVERY: u64 = 100;
/// Most bytes one checkpoint may hold.
pub const CHECKPOINT_BYTES_MAX: usize = 1 << 30;

/// One extent uploaded whole: where its object is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentObject {
    /// The topic's id in the manifest (its `topic` entry's).
    pub topic: u32,
    /// The object's key under the prefix.
    pub key: String,
    /// Offset of its first record.
    pub first_offset: u64,
    /// The extent's salt (its identity slot's): which extent of which directory it is.
    pub salt: u32,
    /// Records it holds (from `first_offset` on, dense).
    pub records: u64,
    /// Its size in bytes: the extent's header, frames and index footer.
    pub bytes: u64,
    /// An upper bound of its records' timestamps.
    pub max_timestamp_us: u64,
    /// Where its index footer starts (the end of its records), its entries and their CRC.
    pub footer_position: u64,
    pub footer_count: u64,
    pub footer_crc: u32,
}

impl ExtentObject {
    /// The offset after its last record.
    pub fn next_offset(&self) -> u64 {
        self.first_offset.saturating_add(self.records)
    }
}

/// One change a delta makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// A producer takes the prefix from this epoch on; deltas of older epochs that come
    /// after it are refused.
    Claim { epoch: u64, producer: String },
    /// A topic joins the manifest under an id of the manifest's own (the next after the
    /// largest): producers' directories number their topics each their own way.
    Topic { id: u32, name: String },
    /// An extent object joins its topic, right after the topic's last object.
    Add(ExtentObject),
    /// Retention drops the topic's objects before `first_offset`, which must be where one
    /// of its objects starts (never past its last object). Their bytes are deleted later.
    Trim { topic: u32, first_offset: u64 },
}

/// The format a delta of `entries` is written in: the first that has every entry's kind.
pub fn format_for(entries: &[Entry]) -> u32 {
    if entries.iter().any(|e| matches!(e, Entry::Trim { .. })) {
        DELTA_FORMAT
    } else {
        DELTA_FORMAT_FIRST
    }
}

/// What [`Manifest::apply`] undoes when a delta breaks a rule part way.
#[derive(Debug)]
enum Undo {
    Topic(u32),
    Object(u32, u64),
    Trimmed(u32, Vec<ExtentObject>),
}

/// One delta: the changes one commit made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// [`DELTA_FORMAT`].
    pub format: u32,
    /// Its number: the object's name says the same.
    pub version: u64,
    /// The epoch of the producer that wrote it.
    pub epoch: u64,
    /// That producer's id.
    pub producer: String,
    /// A number of the writer's choosing, so a retry of a put that did land knows it.
    pub nonce: u64,
    pub entries: Vec<Entry>,
}

/// A topic as the manifest knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteTopic {
    pub name: String,
    /// Its objects by first offset; each starts where the one before ends.
    pub objects: BTreeMap<u64, ExtentObject>,
}

impl RemoteTopic {
    /// Where `retention` trims this topic at `now_us`: the first offset of the first object
    /// it keeps, if it drops any. The same rules as on disk: an object goes when its newest
    /// record is older than the age limit, or while the topic's records would still total
    /// the byte limit without it; objects go oldest first, and the last always stays (the
    /// topic's end is where the next object goes).
    pub fn trim_point(&self, retention: Retention, now_us: u64) -> Option<u64> {
        let record_bytes =
            |o: &ExtentObject| o.footer_position.saturating_sub(format::BLOCK_HEADER_BYTES);
        let mut remaining: u64 = self
            .objects
            .values()
            .map(record_bytes)
            .fold(0, u64::saturating_add);
        let candidates = self.objects.len().saturating_sub(1);
        let mut kept = None;
        for (i, object) in self.objects.values().enumerate() {
            let by_age = retention.max_age_ms.is_some_and(|age_ms| {
                object
                    .max_timestamp_us
                    .saturating_add(age_ms.saturating_mul(1000))
                    < now_us
            });
            let bytes = record_bytes(object);
            let by_bytes = retention
                .max_bytes
                .is_some_and(|max| remaining.saturating_sub(bytes) >= max);
            if i >= candidates || !(by_age || by_bytes) {
                kept = Some((i, object.first_offset));
                break;
            }
            remaining = remaining.saturating_sub(bytes);
        }
        kept.filter(|(i, _)| *i > 0).map(|(_, first)| first)
    }

    /// Where a trim for the log start `start` (`Wal::delete_records`) cuts: at the first
    /// object holding a record at or after it; never past the last object, and `None` when
    /// the first object holds one.
    pub fn trim_below(&self, start: u64) -> Option<u64> {
        let candidates = self.objects.len().saturating_sub(1);
        let below = self
            .objects
            .values()
            .take(candidates)
            .take_while(|o| o.next_offset() <= start)
            .count();
        if below == 0 {
            return None;
        }
        self.objects.values().nth(below).map(|o| o.first_offset)
    }

    /// The offset after its last object's records, if it has one.
    pub fn next_offset(&self) -> Option<u64> {
        self.objects
            .values()
            .next_back()
            .map(ExtentObject::next_offset)
    }
}

/// Every delta up to `version`, applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The last delta applied (0: none).
    pub version: u64,
    /// The epoch of the last claim (0: none).
    pub epoch: u64,
    /// The producer of the last claim.
    pub producer: Option<String>,
    pub topics: BTreeMap<u32, RemoteTopic>,
    /// Topic ids by name.
    pub ids: BTreeMap<String, u32>,
}

impl Manifest {
    /// Applies `delta`, the next one; an entry that breaks the manifest's rules is damage.
    pub fn apply(&mut self, delta: &Delta, key: &str) -> Result<()> {
        if delta.version != self.version + 1 {
            return Err(corrupt(
                key,
                format!("delta {} follows delta {}", delta.version, self.version),
            ));
        }
        // Applied in place (a manifest holds every object: no copy per delta); a delta that
        // breaks a rule part way is undone, so nothing of it stays.
        let before = (self.epoch, self.producer.clone());
        let mut undo = Vec::new();
        match self.apply_entries(delta, &mut undo) {
            Ok(()) => {
                self.version = delta.version;
                Ok(())
            }
            Err(reason) => {
                for step in undo.into_iter().rev() {
                    self.undo(step);
                }
                (self.epoch, self.producer) = before;
                Err(corrupt(key, reason))
            }
        }
    }

    fn undo(&mut self, step: Undo) {
        match step {
            Undo::Object(topic, first) => {
                if let Some(t) = self.topics.get_mut(&topic) {
                    t.objects.remove(&first);
                }
            }
            Undo::Topic(topic) => {
                if let Some(t) = self.topics.remove(&topic) {
                    self.ids.remove(&t.name);
                }
            }
            Undo::Trimmed(topic, objects) => {
                if let Some(t) = self.topics.get_mut(&topic) {
                    t.objects
                        .extend(objects.into_iter().map(|o| (o.first_offset, o)));
                }
            }
        }
    }

    /// Applies `delta`'s entries to this manifest, noting in `undo` how to take each back;
    /// the reason of the first that breaks a rule.
    fn apply_entries(
        &mut self,
        delta: &Delta,
        undo: &mut Vec<Undo>,
    ) -> std::result::Result<(), String> {
        for entry in &delta.entries {
            match entry {
                Entry::Claim { epoch, producer } => {
                    if *epoch <= self.epoch || *epoch != delta.epoch {
                        return Err(format!("claim of epoch {epoch} after epoch {}", self.epoch));
                    }
                    self.epoch = *epoch;
                    self.producer = Some(producer.clone());
                }
                Entry::Topic { id, name } => {
                    self.check_writer(delta)?;
                    if self.topics.contains_key(id) || self.ids.contains_key(name) {
                        return Err(format!("topic {name:?} ({id}) added twice"));
                    }
                    self.topics.insert(
                        *id,
                        RemoteTopic {
                            name: name.clone(),
                            objects: BTreeMap::new(),
                        },
                    );
                    self.ids.insert(name.clone(), *id);
                    undo.push(Undo::Topic(*id));
                }
                Entry::Add(object) => {
                    self.check_writer(delta)?;
                    let Some(topic) = self.topics.get_mut(&object.topic) else {
                        return Err(format!("an object of unknown topic {}", object.topic));
                    };
                    if object.records == 0 || object.bytes == 0 {
                        return Err(format!("an empty object {:?}", object.key));
                    }
                    if let Some(end) = topic.next_offset()
                        && end != object.first_offset
                    {
                        return Err(format!(
                            "object {:?} starts at offset {} where its topic's end at {end}",
                            object.key, object.first_offset
                        ));
                    }
                    topic.objects.insert(object.first_offset, object.clone());
                    undo.push(Undo::Object(object.topic, object.first_offset));
                }
                Entry::Trim {
                    topic: id,
                    first_offset,
                } => {
                    self.check_writer(delta)?;
                    if delta.format < DELTA_FORMAT {
                        return Err(format!("a trim in a delta of format {}", delta.format));
                    }
                    let Some(topic) = self.topics.get_mut(id) else {
                        return Err(format!("a trim of unknown topic {id}"));
                    };
                    let first = topic.objects.keys().next().copied();
                    if first.is_none_or(|f| f >= *first_offset)
                        || !topic.objects.contains_key(first_offset)
                    {
                        return Err(format!(
                            "a trim of topic {id} to offset {first_offset}, where none of its \
                             objects after the first starts"
                        ));
                    }
                    let kept = topic.objects.split_off(first_offset);
                    let dropped = std::mem::replace(&mut topic.objects, kept);
                    undo.push(Undo::Trimmed(*id, dropped.into_values().collect()));
                }
            }
        }
        Ok(())
    }

    /// Only the producer of the last claim, in its epoch, changes topics and objects.
    fn check_writer(&self, delta: &Delta) -> std::result::Result<(), String> {
        if self.producer.as_deref() != Some(delta.producer.as_str()) || delta.epoch != self.epoch {
            return Err(format!(
                "a delta of epoch {} by {:?} where epoch {} by {:?} holds the prefix",
                delta.epoch, delta.producer, self.epoch, self.producer
            ));
        }
        Ok(())
    }

    /// The topic named `name`, if the manifest has it.
    pub fn topic(&self, name: &str) -> Option<(u32, &RemoteTopic)> {
        let id = *self.ids.get(name)?;
        Some((id, self.topics.get(&id)?))
    }

    /// The id a new topic gets: the next after the largest.
    pub fn next_topic_id(&self) -> u32 {
        self.topics.keys().next_back().map_or(0, |id| id + 1)
    }

    /// Whether the extent of topic `name` from `first_offset` with `salt` is in an object.
    pub fn holds(&self, name: &str, first_offset: u64, salt: u32) -> bool {
        self.topic(name)
            .and_then(|(_, t)| t.objects.get(&first_offset))
            .is_some_and(|o| o.salt == salt)
    }

    /// Reads the deltas after this manifest's version from `bucket` and applies them; a
    /// manifest that has read nothing yet starts from the newest checkpoint that checks.
    /// Deltas a checkpoint covers may have been pruned ([`prune`]): a manifest behind them
    /// starts again from the newest checkpoint (the same manifest at that version). A gap
    /// no checkpoint covers is damage.
    pub fn refresh(&mut self, bucket: &Bucket) -> Result<()> {
        if self.version == 0
            && let Some(start) = newest_checkpoint(bucket)?
        {
            *self = start;
        }
        let after = (self.version > 0).then(|| delta_name(self.version));
        for name in bucket.list_after(MANIFEST_DIR, after.as_deref())? {
            let Some(version) = parse_delta_name(&name) else {
                // Not a delta (a checkpoint directory, a stray object): not ours to judge.
                continue;
            };
            if version <= self.version {
                continue;
            }
            let key = delta_key(version);
            let bytes = match bucket.get(&key)? {
                Some(bytes) if version == self.version + 1 => bytes,
                // Pruned under a checkpoint, between the listing and now or before it.
                got => {
                    if !self.catch_up(bucket, version)? {
                        let reason = match got {
                            None => "listed but gone".to_owned(),
                            Some(_) => format!("delta {} is missing", self.version + 1),
                        };
                        return Err(corrupt(&key, reason));
                    }
                    if version <= self.version {
                        continue;
                    }
                    match bucket.get(&key)? {
                        Some(bytes) => bytes,
                        None => return Err(corrupt(&key, "listed but gone".into())),
                    }
                }
            };
            let delta = decode_delta(&bytes, &key)?;
            if delta.version != version {
                return Err(corrupt(&key, format!("holds delta {}", delta.version)));
            }
            self.apply(&delta, &key)?;
        }
        Ok(())
    }

    /// Moves to the newest checkpoint when it is at least `version - 1` and past this
    /// manifest (the deltas up to it were pruned): true when it did.
    fn catch_up(&mut self, bucket: &Bucket, version: u64) -> Result<bool> {
        match newest_checkpoint(bucket)? {
            Some(start) if start.version > self.version && start.version + 1 >= version => {
                *self = start;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// The manifest as the newest checkpoint that checks has it: the one the hint names, else
/// (a hint or checkpoint that does not check) the newest listed that does.
fn newest_checkpoint(bucket: &Bucket) -> Result<Option<Manifest>> {
    if let Some(version) = bucket.get(HINT_KEY)?.and_then(|hint| decode_hint(&hint))
        && let Some(manifest) = checkpoint_at(bucket, version)?
    {
        return Ok(Some(manifest));
    }
    for version in checkpoint_versions(bucket)?.into_iter().rev() {
        if let Some(manifest) = checkpoint_at(bucket, version)? {
            return Ok(Some(manifest));
        }
    }
    Ok(None)
}

/// The checkpoint of `version`, if it is there and checks.
fn checkpoint_at(bucket: &Bucket, version: u64) -> Result<Option<Manifest>> {
    let key = checkpoint_key(version);
    let Some(bytes) = bucket.get(&key)? else {
        return Ok(None);
    };
    Ok(decode_checkpoint(&bytes, &key)
        .ok()
        .filter(|m| m.version == version))
}

/// The versions of the checkpoints under the prefix, in order.
fn checkpoint_versions(bucket: &Bucket) -> Result<Vec<u64>> {
    Ok(bucket
        .list_after(CHECKPOINT_DIR, None)?
        .iter()
        .filter_map(|name| {
            let digits = name.strip_suffix(".checkpoint")?;
            (digits.len() == NUMBER_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse().ok())
                .flatten()
        })
        .collect())
}

/// Deletes what the two newest checkpoints make needless: the deltas up to the older one
/// and the checkpoints before it. Two stay, so a damaged newest one still has the older
/// and every delta after it behind it. Returns how many objects it deleted.
pub fn prune(bucket: &Bucket) -> Result<usize> {
    let versions = checkpoint_versions(bucket)?;
    let Some(&keep) = versions.len().checked_sub(2).and_then(|i| versions.get(i)) else {
        return Ok(0);
    };
    // Only once the older one checks: it is what a reader behind the newest falls back on.
    if checkpoint_at(bucket, keep)?.is_none() {
        return Ok(0);
    }
    let mut deleted = 0;
    for version in versions.iter().filter(|v| **v < keep) {
        bucket.delete(&checkpoint_key(*version))?;
        deleted += 1;
    }
    for name in bucket.list_after(MANIFEST_DIR, None)? {
        match parse_delta_name(&name) {
            Some(version) if version <= keep => {
                bucket.delete(&delta_key(version))?;
                deleted += 1;
            }
            _ => {}
        }
    }
    Ok(deleted)
}

/// Writes the checkpoint `bytes` (`encode_checkpoint` of the manifest at `version`) and then
/// the hint naming it. Plain puts: the manifest at one version is the same whoever writes it.
pub fn write_checkpoint(bucket: &Bucket, version: u64, bytes: Vec<u8>) -> Result<()> {
    bucket.put(&checkpoint_key(version), bytes)?;
    bucket.put(HINT_KEY, format!("{HINT_MAGIC} {version}\n").into_bytes())
}

/// A checkpoint object's key.
pub fn checkpoint_key(version: u64) -> String {
    format!("{CHECKPOINT_DIR}/{version:0NUMBER_DIGITS$}.checkpoint")
}

fn decode_hint(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let digits = text.strip_prefix(HINT_MAGIC)?.strip_prefix(' ')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&v| v > 0)
}

/// A checkpoint's body: the manifest at `version`.
#[derive(Debug, Serialize, Deserialize)]
struct Checkpoint {
    format: u32,
    version: u64,
    epoch: u64,
    producer: Option<String>,
    topics: Vec<CheckpointTopic>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CheckpointTopic {
    id: u32,
    name: String,
    objects: Vec<ExtentObject>,
}

/// A checkpoint's bytes: `TLCHKPT1 <crc32> <length>\n<JSON body>`.
pub fn encode_checkpoint(manifest: &Manifest) -> Vec<u8> {
    let body = Checkpoint {
        format: DELTA_FORMAT_FIRST,
        version: manifest.version,
        epoch: manifest.epoch,
        producer: manifest.producer.clone(),
        topics: manifest
            .topics
            .iter()
            .map(|(id, t)| CheckpointTopic {
                id: *id,
                name: t.name.clone(),
                objects: t.objects.values().cloned().collect(),
            })
            .collect(),
    };
    frame(
        CHECKPOINT_MAGIC,
        &serde_json::to_vec(&body).unwrap_or_default(),
    )
}

/// Decodes and checks a checkpoint: its frame, and the manifest's rules over its topics.
pub fn decode_checkpoint(bytes: &[u8], key: &str) -> Result<Manifest> {
    let body = unframe(bytes, CHECKPOINT_MAGIC, CHECKPOINT_BYTES_MAX, key)?;
    let c: Checkpoint =
        serde_json::from_slice(body).map_err(|e| corrupt(key, format!("bad JSON: {e}")))?;
    if c.format != DELTA_FORMAT_FIRST {
        return Err(corrupt(key, format!("checkpoint format {}", c.format)));
    }
    let mut m = Manifest {
        version: c.version,
        epoch: c.epoch,
        producer: c.producer,
        ..Manifest::default()
    };
    for t in c.topics {
        if m.topics.contains_key(&t.id) || m.ids.contains_key(&t.name) {
            return Err(corrupt(key, format!("topic {:?} ({}) twice", t.name, t.id)));
        }
        let mut objects = BTreeMap::new();
        let mut end: Option<u64> = None;
        for o in t.objects {
            let follows = end.is_none_or(|e| e == o.first_offset);
            if o.topic != t.id || o.records == 0 || !follows {
                return Err(corrupt(key, format!("object {:?} out of place", o.key)));
            }
            end = Some(o.next_offset());
            objects.insert(o.first_offset, o);
        }
        m.ids.insert(t.name.clone(), t.id);
        m.topics.insert(
            t.id,
            RemoteTopic {
                name: t.name,
                objects,
            },
        );
    }
    Ok(m)
}

/// `MAGIC <crc32 of body, 8 lowercase hex digits> <body length>\n<body>`.
fn frame(magic: &str, body: &[u8]) -> Vec<u8> {
    let crc = crc32fast::hash(body);
    let mut out = format!("{magic} {crc:08x} {}\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// The body of a [`frame`]d object, checked: magic, checksum (lowercase hex), length.
fn unframe<'b>(bytes: &'b [u8], magic: &str, max: usize, key: &str) -> Result<&'b [u8]> {
    let bad = |reason: &str| corrupt(key, reason.to_owned());
    if bytes.len() > max {
        return Err(bad("larger than any such object"));
    }
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| bad("no header line"))?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| bad("header is not text"))?;
    let mut fields = header.split(' ');
    if fields.next() != Some(magic) {
        return Err(bad("bad magic"));
    }
    let crc = fields
        .next()
        .filter(|s| {
            s.len() == 8
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .and_then(|s| u32::from_str_radix(s, 16).ok())
        .ok_or_else(|| bad("bad checksum field"))?;
    let len: usize = fields
        .next()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad length field"))?;
    if fields.next().is_some() {
        return Err(bad("extra header fields"));
    }
    let body = &bytes[newline + 1..];
    if body.len() != len {
        return Err(bad("length does not match"));
    }
    if crc32fast::hash(body) != crc {
        return Err(bad("checksum mismatch"));
    }
    Ok(body)
}

/// A delta object's name.
pub fn delta_name(version: u64) -> String {
    format!("{version:0NUMBER_DIGITS$}.delta")
}

/// A delta object's key under the prefix.
pub fn delta_key(version: u64) -> String {
    format!("{MANIFEST_DIR}/{}", delta_name(version))
}

fn parse_delta_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".delta")?;
    if digits.len() != NUMBER_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn corrupt(key: &str, reason: String) -> Error {
    Error::TierCorruption {
        key: key.to_owned(),
        reason,
    }
}

/// A delta's bytes: `TLDELTA1 <crc32 of the body> <body length>\n<JSON body>`.
pub fn encode_delta(delta: &Delta) -> Vec<u8> {
    frame(DELTA_MAGIC, &serde_json::to_vec(delta).unwrap_or_default())
}

/// Decodes and checks a delta's bytes; `key` names it in errors.
pub fn decode_delta(bytes: &[u8], key: &str) -> Result<Delta> {
    let body = unframe(bytes, DELTA_MAGIC, DELTA_BYTES_MAX, key)?;
    let delta: Delta =
        serde_json::from_slice(body).map_err(|e| corrupt(key, format!("bad JSON: {e}")))?;
    if !(DELTA_FORMAT_FIRST..=DELTA_FORMAT).contains(&delta.format) {
        return Err(corrupt(
            key,
            format!(
                "delta format {} (this build reads {DELTA_FORMAT})",
                delta.format
            ),
        ));
    }
    Ok(delta)
}

/// Writes `delta` under its version's number, once. `Ok(false)` when another writer took
/// that number first (the caller refreshes and judges); `Ok(true)` when this one did, a
/// retry of a put that landed included. The caller applies it.
pub fn put_delta(bucket: &Bucket, delta: &Delta) -> Result<bool> {
    let key = delta_key(delta.version);
    let ours = bucket.put_new(&key, encode_delta(delta))?
        || bucket
            .get(&key)?
            .is_some_and(|bytes| decode_delta(&bytes, &key).is_ok_and(|d| d.nonce == delta.nonce));
    // A number pruned under a checkpoint is free to put again, but it is not the next
    // delta: a writer that far behind lost the number (and reads the manifest again).
    let behind = bucket
        .get(HINT_KEY)?
        .and_then(|hint| decode_hint(&hint))
        .is_some_and(|checkpoint| checkpoint >= delta.version);
    Ok(ours && !behind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn object(topic: u32, first: u64, records: u64) -> ExtentObject {
        ExtentObject {
            topic,
            key: format!("topics/{topic}/{first:020}-1.extent"),
            first_offset: first,
            salt: 5,
            records,
            bytes: 4096 + records * 128,
            max_timestamp_us: 7,
            footer_position: 4096 + records * 128,
            footer_count: 1,
            footer_crc: 9,
        }
    }

    fn delta(version: u64, epoch: u64, entries: Vec<Entry>) -> Delta {
        Delta {
            format: DELTA_FORMAT,
            version,
            epoch,
            producer: "p".into(),
            nonce: version,
            entries,
        }
    }

    #[test]
    fn deltas_apply_in_order_and_refuse_gaps_and_strangers() {
        let mut m = Manifest::default();
        let claim = Entry::Claim {
            epoch: 1,
            producer: "p".into(),
        };
        m.apply(&delta(1, 1, vec![claim]), "k").expect("claim");
        let topic = Entry::Topic {
            id: 3,
            name: "orders".into(),
        };
        m.apply(&delta(2, 1, vec![topic, Entry::Add(object(3, 0, 10))]), "k")
            .expect("add");
        assert!(m.holds("orders", 0, 5) && !m.holds("orders", 0, 6));
        let again = Entry::Topic {
            id: 4,
            name: "orders".into(),
        };
        assert!(m.clone().apply(&delta(3, 1, vec![again]), "k").is_err());
        // A gap between objects, a repeated version, an old epoch: damage, nothing applied.
        let before = m.clone();
        assert!(
            m.apply(&delta(3, 1, vec![Entry::Add(object(3, 11, 5))]), "k")
                .is_err()
        );
        assert!(
            m.apply(&delta(2, 1, vec![Entry::Add(object(3, 10, 5))]), "k")
                .is_err()
        );
        let mut stranger = delta(3, 1, vec![Entry::Add(object(3, 10, 5))]);
        stranger.producer = "q".into();
        assert!(m.apply(&stranger, "k").is_err());
        assert_eq!(m, before);
        m.apply(&delta(3, 1, vec![Entry::Add(object(3, 10, 5))]), "k")
            .expect("next");
        assert_eq!(m.topics[&3].next_offset(), Some(15));
    }

    #[test]
    fn checkpoints_hold_the_manifest_whole() {
        let mut m = Manifest::default();
        let claim = Entry::Claim {
            epoch: 1,
            producer: "p".into(),
        };
        let topic = Entry::Topic {
            id: 0,
            name: "t".into(),
        };
        m.apply(&delta(1, 1, vec![claim, topic]), "k")
            .expect("claim");
        m.apply(&delta(2, 1, vec![Entry::Add(object(0, 0, 4))]), "k")
            .expect("add");
        m.apply(&delta(3, 1, vec![Entry::Add(object(0, 4, 2))]), "k")
            .expect("add");
        let bytes = encode_checkpoint(&m);
        assert_eq!(decode_checkpoint(&bytes, "k").expect("decode"), m);
        assert_eq!(decode_hint(b"TLHINT1 300\n"), Some(300));
        for bad in [
            &b"TLHINT1 0\n"[..],
            b"TLHINT1 +3\n",
            b"TLHINT1 3",
            b"TLHINT2 3\n",
        ] {
            assert_eq!(decode_hint(bad), None);
        }
    }

    fn trim(version: u64, topic: u32, first_offset: u64) -> Delta {
        Delta {
            format: format_for(&[Entry::Trim {
                topic,
                first_offset,
            }]),
            ..delta(
                version,
                1,
                vec![Entry::Trim {
                    topic,
                    first_offset,
                }],
            )
        }
    }

    /// A manifest with topic 3 holding objects from 0, 10 and 20 (10 records each).
    fn three_objects() -> Manifest {
        let mut m = Manifest::default();
        let claim = Entry::Claim {
            epoch: 1,
            producer: "p".into(),
        };
        let topic = Entry::Topic {
            id: 3,
            name: "t".into(),
        };
        let adds = [0, 10, 20].map(|first| Entry::Add(object(3, first, 10)));
        m.apply(&delta(1, 1, vec![claim, topic]), "k")
            .expect("claim");
        m.apply(&delta(2, 1, adds.to_vec()), "k").expect("adds");
        m
    }

    #[test]
    fn trims_drop_a_prefix_of_objects_and_keep_the_last() {
        let mut m = three_objects();
        assert_eq!(format_for(&trim(3, 3, 10).entries), DELTA_FORMAT);
        assert_eq!(
            format_for(&[Entry::Add(object(3, 30, 1))]),
            DELTA_FORMAT_FIRST
        );
        // Not at an object's start, at the first object, or of an unknown topic.
        for bad in [
            trim(3, 3, 15),
            trim(3, 3, 0),
            trim(3, 4, 10),
            trim(3, 3, 30),
        ] {
            let before = m.clone();
            assert!(m.apply(&bad, "k").is_err(), "{bad:?}");
            assert_eq!(m, before);
        }
        // A trim in a delta of the first format is refused.
        let old = Delta {
            format: DELTA_FORMAT_FIRST,
            ..trim(3, 3, 10)
        };
        assert!(m.apply(&old, "k").is_err());
        m.apply(&trim(3, 3, 20), "k").expect("trim");
        let t = m.topic("t").expect("topic").1;
        assert_eq!(t.objects.keys().copied().collect::<Vec<_>>(), [20]);
        assert_eq!(t.next_offset(), Some(30));
        // A delta that trims, then breaks a rule, leaves nothing of the trim.
        let mut m = three_objects();
        let before = m.clone();
        let mixed = Delta {
            format: DELTA_FORMAT,
            ..delta(
                3,
                1,
                vec![
                    Entry::Trim {
                        topic: 3,
                        first_offset: 10,
                    },
                    Entry::Add(object(3, 99, 1)),
                ],
            )
        };
        assert!(m.apply(&mixed, "k").is_err());
        assert_eq!(m, before);
        // The trims survive a checkpoint.
        m.apply(&trim(3, 3, 10), "k").expect("trim");
        let again = decode_checkpoint(&encode_checkpoint(&m), "c").expect("checkpoint");
        assert_eq!(again, m);
    }

    #[test]
    fn trim_points_follow_the_disk_rules() {
        let m = three_objects();
        let t = m.topic("t").expect("topic").1;
        let records = |o: &ExtentObject| o.footer_position - crate::format::BLOCK_HEADER_BYTES;
        let each = records(&object(3, 0, 10));
        let bytes = |max| Retention::default().max_bytes(max);
        // While the rest would still hold the limit, oldest first; never the last.
        assert_eq!(t.trim_point(bytes(3 * each), 0), None);
        assert_eq!(t.trim_point(bytes(2 * each), 0), Some(10));
        assert_eq!(t.trim_point(bytes(each), 0), Some(20));
        assert_eq!(t.trim_point(bytes(0), 0), Some(20));
        // By age: every object's newest record is at 7 us.
        let age = Retention::default().max_age_ms(1);
        assert_eq!(t.trim_point(age, 1_007), None);
        assert_eq!(t.trim_point(age, 1_008), Some(20));
        assert_eq!(t.trim_point(Retention::default(), u64::MAX), None);
        // By a log start: at the first object holding a record at or past it, never past
        // the last object.
        assert_eq!(t.trim_below(0), None);
        assert_eq!(t.trim_below(9), None);
        assert_eq!(t.trim_below(10), Some(10));
        assert_eq!(t.trim_below(25), Some(20));
        assert_eq!(t.trim_below(30), Some(20));
        assert_eq!(t.trim_below(u64::MAX), Some(20));
    }

    proptest! {
        /// Any flipped bit or cut of a checkpoint is refused.
        #[test]
        fn damaged_checkpoints_are_refused(at in 0usize..2000, bit in 0u8..8, cut in 0usize..2000) {
            let mut m = Manifest { version: 7, epoch: 2, producer: Some("p".into()), ..Manifest::default() };
            m.ids.insert("t".into(), 0);
            m.topics.insert(0, RemoteTopic {
                name: "t".into(),
                objects: [(0, object(0, 0, 3))].into_iter().collect(),
            });
            let bytes = encode_checkpoint(&m);
            let mut flipped = bytes.clone();
            let i = at % flipped.len();
            flipped[i] ^= 1 << bit;
            prop_assert!(decode_checkpoint(&flipped, "k").is_err());
            prop_assert!(decode_checkpoint(&bytes[..cut % bytes.len()], "k").is_err());
        }

        /// Any flipped byte or cut of a delta's bytes is reported, never read as another delta.
        #[test]
        fn damaged_deltas_are_refused(at in 0usize..400, bit in 0u8..8, cut in 0usize..400) {
            let d = delta(5, 2, vec![Entry::Topic { id: 1, name: "t".into() }, Entry::Add(object(1, 0, 3))]);
            let bytes = encode_delta(&d);
            prop_assert_eq!(decode_delta(&bytes, "k").ok(), Some(d.clone()));
            let mut flipped = bytes.clone();
            let i = at % flipped.len();
            flipped[i] ^= 1 << bit;
            prop_assert!(decode_delta(&flipped, "k").is_err());
            let cut = cut % bytes.len();
            prop_assert!(decode_delta(&bytes[..cut], "k").is_err());
        }

        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn arbitrary_bytes_do_not_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_delta(&bytes, "k");
        }
    }
}
