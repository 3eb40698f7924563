//! Goal: with many threads appending to many topics at once, every topic keeps dense offsets
//! in each writer's order, and holds only its own records.
//!
//! Method: 8 threads each append 400 self-checking values to each of 16 topics, in an order
//! that differs per thread, through shared `Writer` clones and `Wal::append` by name, while the
//! background flush seals extents. Values carry (thread, topic, sequence). Each topic's
//! returned offsets must be exactly 0..3,200 and increase per thread; reading a topic must give
//! back exactly the value appended at each offset, naming that topic. The check is repeated
//! after close and reopen.

use std::sync::{Arc, Barrier};

use crate::common::{parse_tagged, small, tagged_value, tempdir};
use tidelog::{Config, ReaderOptions, StartPosition, Wal, Writer};

const THREADS: u32 = 8;
const TOPICS: u32 = 16;
const PER_TOPIC_PER_THREAD: u64 = 400;
const PER_TOPIC: u64 = THREADS as u64 * PER_TOPIC_PER_THREAD;

fn config() -> Config {
    small().sync_interval_ms(5)
}

fn topic_name(t: u32) -> String {
    format!("topic-{t:02}")
}

/// Tag of a value: writer thread and topic, so a record in the wrong topic is detected.
fn tag(thread: u32, topic: u32) -> u32 {
    thread * 1_000 + topic
}

/// `offsets[thread][topic]`: offsets in the order the appends returned them.
type Offsets = Vec<Vec<Vec<u64>>>;

fn write_concurrently(wal: &Wal) -> Offsets {
    let writers: Vec<Writer> = (0..TOPICS)
        .map(|t| wal.writer(&topic_name(t)).expect("writer"))
        .collect();
    let start = Arc::new(Barrier::new(THREADS as usize));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let writers = writers.clone();
                let start = Arc::clone(&start);
                s.spawn(move || {
                    start.wait();
                    let mut offsets = vec![Vec::new(); TOPICS as usize];
                    for seq in 0..PER_TOPIC_PER_THREAD {
                        for k in 0..TOPICS {
                            // Each thread walks the topics in its own rotation.
                            let topic = (k + thread * 5) % TOPICS;
                            let value = tagged_value(tag(thread, topic), seq, 300);
                            let offset = if (seq + u64::from(k)) % 3 == 0 {
                                wal.append(&topic_name(topic), &value)
                                    .expect("append by name")
                            } else {
                                writers[topic as usize].append(&value).expect("append")
                            };
                            offsets[topic as usize].push(offset);
                        }
                    }
                    offsets
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect()
    })
}

/// Per topic: offset -> (tag, seq), checking density and per-thread order.
fn check_offsets(offsets: &Offsets) -> Vec<Vec<(u32, u64)>> {
    (0..TOPICS)
        .map(|topic| {
            let mut owner = vec![None; PER_TOPIC as usize];
            for thread in 0..THREADS {
                let list = &offsets[thread as usize][topic as usize];
                assert_eq!(list.len() as u64, PER_TOPIC_PER_THREAD);
                assert!(
                    list.windows(2).all(|w| w[0] < w[1]),
                    "thread {thread} topic {topic}: offsets increase"
                );
                for (seq, &o) in list.iter().enumerate() {
                    let slot = owner
                        .get_mut(o as usize)
                        .unwrap_or_else(|| panic!("topic {topic}: offset {o} past the total"));
                    assert!(slot.is_none(), "topic {topic}: offset {o} returned twice");
                    *slot = Some((tag(thread, topic), seq as u64));
                }
            }
            owner
                .into_iter()
                .enumerate()
                .map(|(o, x)| x.unwrap_or_else(|| panic!("topic {topic}: offset {o} missing")))
                .collect()
        })
        .collect()
}

fn check_contents(wal: &Wal, owners: &[Vec<(u32, u64)>]) {
    let mut names = wal.topics();
    names.sort();
    assert_eq!(names, (0..TOPICS).map(topic_name).collect::<Vec<_>>());
    for topic in 0..TOPICS {
        let name = topic_name(topic);
        assert_eq!(wal.topic_info(&name).expect("info").next_offset, PER_TOPIC);
        let mut reader = wal
            .reader_with(
                &name,
                ReaderOptions::default().start(StartPosition::Earliest),
            )
            .expect("reader");
        let mut n = 0u64;
        while let Some(rec) = reader.next().expect("next") {
            assert_eq!(rec.offset, n);
            let (got_tag, seq) =
                parse_tagged(rec.value).unwrap_or_else(|| panic!("{name}@{n}: damaged value"));
            assert_eq!(
                got_tag % 1_000,
                topic,
                "{name}@{n} holds another topic's record"
            );
            assert_eq!(
                (got_tag, seq),
                owners[topic as usize][n as usize],
                "{name}@{n}"
            );
            n += 1;
        }
        assert_eq!(n, PER_TOPIC, "{name}");
    }
}

#[test]
fn eight_writers_sixteen_topics() {
    let dir = tempdir();
    let owners;
    {
        let wal = Wal::open_with(dir.path(), config()).expect("open");
        let offsets = write_concurrently(&wal);
        owners = check_offsets(&offsets);
        check_contents(&wal, &owners);
        wal.close().expect("close");
    }
    let wal = Wal::open_with(dir.path(), config()).expect("reopen");
    let report = wal.recovery_report();
    assert_eq!(
        (report.torn_tails, report.dropped_extents),
        (0, 0),
        "{report:?}"
    );
    check_contents(&wal, &owners);
}
