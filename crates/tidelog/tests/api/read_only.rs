//! Goal: a read-only handle, in another process or in this one, sees exactly the records the
//! writer has published (through the shared state file), its durable readers exactly the
//! records the writer has made durable; it picks up more with `refresh`, and refuses every
//! write.
//!
//! Method: the parent writes and flushes, then re-executes this test binary as a child that
//! opens the directory read-only and answers commands on stdin with the record count and a
//! checksum of everything it reads, by default readers and by durable ones
//! (`child_process_entry`; a no-op in a normal run, without `TIDELOG_CHILD_DIR`). The parent
//! then appends without flushing (the child's default readers must see those records, its
//! durable readers must not), flushes (the durable readers must see them too, including
//! new topics, extents and files, and a reader kept from before reads on), and compares
//! each answer with its own model. In-process tests cover the same rules and the refused
//! writes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{
    ChildSession, Fnv, child_command, child_commands, child_env, reply, small, stream_payload,
    tempdir,
};
use tidelog::{CommitMode, Error, Reader, ReaderOptions, Visibility, Wal};

const WAIT: Duration = Duration::from_secs(30);

fn value(topic: &str, i: u64) -> Vec<u8> {
    let salt = topic.bytes().map(u64::from).sum::<u64>();
    stream_payload(salt, i, 20 + (i * 31 % 900) as usize)
}

fn earliest(wal: &Wal, topic: &str) -> Reader {
    earliest_with(wal, topic, Visibility::Published)
}

fn earliest_with(wal: &Wal, topic: &str, visibility: Visibility) -> Reader {
    crate::common::earliest(wal, topic, visibility)
}

/// Count and checksum of every record of every topic, read from the start.
fn summary(wal: &Wal) -> (u64, u64) {
    summary_with(wal, Visibility::Published)
}

/// [`summary`] as readers with `visibility` see it.
fn summary_with(wal: &Wal, visibility: Visibility) -> (u64, u64) {
    let mut count = 0;
    let mut sum = Fnv::default();
    for topic in wal.topics() {
        let mut r = earliest_with(wal, &topic, visibility);
        while let Some(rec) = r.next().expect("next") {
            sum.record(&topic, rec.offset, rec.value);
            count += 1;
        }
    }
    (count, sum.0)
}

/// Count and checksum of the model (topics sorted, as `Wal::topics` lists them).
fn model_summary(model: &BTreeMap<String, u64>) -> (u64, u64) {
    let mut sum = Fnv::default();
    let mut count = 0;
    for (topic, &n) in model {
        for i in 0..n {
            sum.record(topic, i, &value(topic, i));
            count += 1;
        }
    }
    (count, sum.0)
}

fn append(wal: &Wal, model: &mut BTreeMap<String, u64>, topic: &str, n: u64) {
    let next = model.entry(topic.to_owned()).or_insert(0);
    for _ in 0..n {
        assert_eq!(
            wal.append(topic, &value(topic, *next)).expect("append"),
            *next
        );
        *next += 1;
    }
}

/// Child: opens read-only and answers `peek` (refresh once), `wait <count>` (refresh until at
/// least that many records are visible, bounded in time) and `kept` (records seen by a reader
/// of topic "a" created at the first command and kept across refreshes).
#[test]
fn child_process_entry() {
    let Some((dir, _mode)) = child_env() else {
        return;
    };
    let wal = Wal::open_read_only_with(&dir, small()).expect("child: read-only open");
    assert!(wal.is_read_only());
    let mut kept: Option<Reader> = None;
    let mut kept_seen = 0u64;
    for command in child_commands() {
        let mut words = command.split_whitespace();
        match words.next() {
            Some("peek") => wal.refresh().expect("child: refresh"),
            Some("wait") => {
                let want: u64 = words.next().and_then(|w| w.parse().ok()).expect("count");
                let deadline = Instant::now() + WAIT;
                wal.refresh().expect("child: refresh");
                while summary(&wal).0 < want && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                    wal.refresh().expect("child: refresh");
                }
            }
            Some("kept") => {
                let r = kept.as_mut().expect("a kept reader");
                while let Some(rec) = r.next().expect("child: kept next") {
                    assert_eq!(rec.offset, kept_seen, "kept reader reads densely");
                    assert_eq!(rec.value, value("a", kept_seen), "kept reader value");
                    kept_seen += 1;
                }
                reply(&format!("kept={kept_seen}"));
                continue;
            }
            _ => panic!("child: unknown command {command:?}"),
        }
        if kept.is_none() {
            kept = Some(earliest(&wal, "a"));
        }
        let (count, sum) = summary(&wal);
        let (durable, durable_sum) = summary_with(&wal, Visibility::Durable);
        reply(&format!(
            "count={count} sum={sum:x} durable={durable} durable_sum={durable_sum:x}"
        ));
    }
}

/// Expects the child to see `model` published and `durable` durable.
fn expect_summary(
    child: &mut ChildSession,
    model: &BTreeMap<String, u64>,
    durable: &BTreeMap<String, u64>,
) {
    let (count, sum) = model_summary(model);
    let (dcount, dsum) = model_summary(durable);
    assert_eq!(
        child.recv(WAIT),
        format!("count={count} sum={sum:x} durable={dcount} durable_sum={dsum:x}"),
        "model {model:?}, durable {durable:?}"
    );
}

#[test]
fn read_only_child_process_follows_the_writer() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).expect("open");
    let mut model = BTreeMap::new();
    append(&wal, &mut model, "a", 300);
    append(&wal, &mut model, "b", 50);
    wal.flush().expect("flush");

    let mut child = ChildSession::spawn(&mut child_command(module_path!(), dir.path(), ""));
    child.send("peek");
    expect_summary(&mut child, &model, &model);

    // Appended but not flushed: published, so the child's readers see them (a new topic
    // too), its durable readers do not.
    let durable = model.clone();
    append(&wal, &mut model, "a", 100);
    append(&wal, &mut model, "c", 10);
    child.send("peek");
    expect_summary(&mut child, &model, &durable);

    // Flushed, then enough more (unflushed) to fill new extents and files.
    wal.flush().expect("flush");
    child.send(&format!("wait {}", model_summary(&model).0));
    expect_summary(&mut child, &model, &model);
    let durable = model.clone();
    append(&wal, &mut model, "a", 3_000);
    append(&wal, &mut model, "d", 700);
    child.send(&format!("wait {}", model_summary(&model).0));
    expect_summary(&mut child, &model, &durable);
    child.send("kept");
    assert_eq!(child.recv(WAIT), format!("kept={}", model["a"]));
    wal.flush().expect("flush");
    child.send("peek");
    expect_summary(&mut child, &model, &model);

    // After the writer closes (extents marked clean), the child still sees everything.
    wal.close().expect("close");
    child.send("peek");
    expect_summary(&mut child, &model, &model);
    child.finish(WAIT);
    let files = std::fs::read_dir(dir.path())
        .expect("list")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "tdl"))
        })
        .count();
    assert!(files > 1, "the records spread over several files");
}

#[test]
fn read_only_sees_published_records_and_durable_readers_only_flushed_ones() {
    let dir = tempdir();
    let wal = Wal::open_with(dir.path(), small()).expect("open");
    let mut model = BTreeMap::new();
    append(&wal, &mut model, "a", 10);

    let ro = Wal::open_read_only_with(dir.path(), small()).expect("read-only open");
    assert!(ro.is_read_only());
    // Published, never flushed: readers see the records, durable readers none.
    assert_eq!(ro.topic_info("a").expect("info").next_offset, 10);
    assert_eq!(summary(&ro), model_summary(&model));
    assert_eq!(summary_with(&ro, Visibility::Durable).0, 0);
    let mut durable_reader = earliest_with(&ro, "a", Visibility::Durable);
    assert!(durable_reader.next().expect("next").is_none());
    assert_eq!(durable_reader.lag(), 0);

    wal.flush().expect("flush");
    ro.refresh().expect("refresh");
    assert_eq!(
        summary_with(&ro, Visibility::Durable),
        model_summary(&model)
    );
    assert_eq!(durable_reader.lag(), 10);
    let mut kept = earliest(&ro, "a");
    for i in 0..10 {
        assert_eq!(
            kept.next().expect("next").expect("record").value,
            value("a", i)
        );
    }
    assert!(kept.next().expect("next").is_none());

    // More records, not flushed: published (across new extents) after a refresh, not
    // durable.
    let durable = model.clone();
    append(&wal, &mut model, "a", 2_000);
    ro.refresh().expect("refresh");
    assert_eq!(summary(&ro), model_summary(&model));
    assert_eq!(
        summary_with(&ro, Visibility::Durable),
        model_summary(&durable)
    );
    assert_eq!(ro.read("a", 10).expect("read").value(), value("a", 10));

    // Flushed: durable readers see them too; the kept reader reads on across extents.
    wal.flush().expect("flush");
    ro.refresh().expect("refresh");
    assert_eq!(
        summary_with(&ro, Visibility::Durable),
        model_summary(&model)
    );
    assert!(ro.topic_info("a").expect("info").extents > 1);
    let mut n = 10;
    while let Some(rec) = kept.next().expect("next") {
        assert_eq!((rec.offset, rec.value), (n, value("a", n).as_slice()));
        n += 1;
    }
    assert_eq!(n, model["a"]);
    assert_eq!(
        ro.read("a", 1_234).expect("read").value(),
        value("a", 1_234)
    );
}

#[test]
fn read_only_refuses_writes() {
    let dir = tempdir();
    {
        let wal = Wal::open_with(dir.path(), small()).expect("open");
        wal.append("a", b"x").expect("append");
    }
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("read-only open");
    assert!(matches!(ro.writer("a"), Err(Error::ReadOnly)));
    assert!(matches!(ro.writer("new-topic"), Err(Error::ReadOnly)));
    assert!(matches!(ro.append("a", b"y"), Err(Error::ReadOnly)));
    assert!(matches!(
        ro.append_batch("a", &[b"y"]),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(
        ro.append_record("a", tidelog::Append::value(b"y")),
        Err(Error::ReadOnly)
    ));
    assert!(
        ro.topic_info("new-topic").is_err(),
        "a refused write creates no topic"
    );
    ro.flush().expect("flush is a no-op on a read-only handle");

    // Readers work; a group reader can read but not commit.
    let mut g = ro.reader("a", "g").expect("group reader");
    assert_eq!(g.next().expect("next").expect("record").value, b"x");
    assert!(matches!(g.commit(), Err(Error::ReadOnly)));
    // A reader that commits by itself is refused when made, not at a later read.
    for mode in [
        CommitMode::Strict,
        CommitMode::AutoEvery(1),
        CommitMode::AutoEvery(100),
    ] {
        assert!(matches!(
            ro.reader_with("a", ReaderOptions::group("s").commit(mode)),
            Err(Error::ReadOnly)
        ));
    }
    let cursors = dir.path().join("cursors");
    let cursor_files = std::fs::read_dir(&cursors).map_or(0, |d| d.count());
    assert_eq!(cursor_files, 0, "a read-only handle writes no cursor");

    // The writer can open while a read-only handle is open.
    let wal = Wal::open_with(dir.path(), small()).expect("writable open beside a reader");
    assert_eq!(wal.append("a", b"z").expect("append"), 1);
}

#[test]
fn read_only_open_of_a_missing_directory_fails() {
    let parent = tempdir();
    let missing = parent.path().join("missing");
    assert!(Wal::open_read_only(&missing).is_err());
    assert!(Wal::open_read_only_with(&missing, small()).is_err());
    assert!(!missing.exists(), "a read-only open creates nothing");
    // A file in place of the directory is refused too.
    let file = parent.path().join("file");
    std::fs::write(&file, b"not a log").expect("write");
    assert!(Wal::open_read_only_with(&file, small()).is_err());
    assert!(exists_only(parent.path(), &["file"]));
}

fn exists_only(dir: &Path, names: &[&str]) -> bool {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found == names
}

#[test]
fn a_read_only_handle_finds_a_topic_the_writer_created_after_it_opened() {
    let dir = tempdir();
    let writer = Wal::open_with(dir.path(), small()).expect("open");
    writer.append("early", b"e").expect("append");
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("open read-only");
    writer.append("late", b"first").expect("append");
    writer.append("late", b"second").expect("append");
    // No refresh: the lookup of a name it does not know reads the directory again.
    let info = ro.topic_info("late").expect("topic_info of a later topic");
    assert_eq!(info.next_offset, 2);
    let mut reader = earliest(&ro, "late");
    assert_eq!(
        reader.next().expect("read").expect("a record").value,
        b"first"
    );
    assert!(matches!(
        ro.reader_with("never", ReaderOptions::default()),
        Err(Error::UnknownTopic { .. })
    ));
}

/// The writer deletes a topic and creates it again: once the read-only handle sees the new
/// topic, a new reader reads it (never the old one's records), and a reader of the old one
/// gets `UnknownTopic`, as beside a deletion in shared mode.
#[test]
fn a_read_only_handle_reads_a_topic_created_again_not_the_deleted_one() {
    let dir = tempdir();
    let writer = Wal::open_with(dir.path(), small()).expect("open");
    for i in 0..3 {
        writer.append("x", &value("old", i)).expect("append");
    }
    writer.flush().expect("flush");
    let ro = Wal::open_read_only_with(dir.path(), small()).expect("open read-only");
    let mut old = earliest(&ro, "x");
    assert_eq!(
        old.next().expect("read").expect("a record").value,
        value("old", 0)
    );
    writer.delete_topic("x").expect("delete");
    for i in 0..5 {
        writer.append("x", &value("new", i)).expect("append");
    }
    writer.flush().expect("flush");
    let mut new = earliest(&ro, "x");
    let mut got = Vec::new();
    while let Some(rec) = new.next().expect("read the new topic") {
        got.push((rec.offset, rec.value.to_vec()));
    }
    let want: Vec<_> = (0..5).map(|i| (i, value("new", i))).collect();
    assert_eq!(got, want);
    assert_eq!(ro.topic_info("x").expect("info").next_offset, 5);
    assert!(matches!(old.next(), Err(Error::UnknownTopic { .. })));
}
