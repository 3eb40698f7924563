//! Merges the rounds of a run into medians, matches every tidelog row with its ceiling and
//! its best peer, and renders the tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::ceiling;
use super::processes;
use super::row::{Row, size_label};
use super::visible;

/// Targets from the issue: each tidelog row at least this share of its ceiling...
pub(crate) const CEILING_TARGET: f64 = 0.8;
/// ...and this many times the best peer of its durability class.
pub(crate) const PEER_TARGET: f64 = 2.0;
/// Append to visible with the reader in another process: from Rust, p50 and p99 at most...
pub(crate) const VISIBLE_P50_TARGET_US: f64 = 10.0;
pub(crate) const VISIBLE_P99_TARGET_US: f64 = 100.0;
/// ...and from Python, p99 at most this.
pub(crate) const VISIBLE_PY_P99_TARGET_US: f64 = 1000.0;

/// A row's medians over the rounds, with what it is compared against.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Merged {
    #[serde(flatten)]
    pub row: Row,
    /// records/s of each round that measured it.
    pub runs: Vec<f64>,
    pub ceiling_name: Option<String>,
    /// Median over rounds of (row ÷ ceiling in the same round).
    pub ratio_ceiling: Option<f64>,
    pub best_peer: Option<String>,
    pub ratio_best_peer: Option<f64>,
    pub ratio_walrus: Option<f64>,
    /// Latency rows (append to visible): median over rounds of (row's p50 ÷ its baseline's
    /// p50 in the same round), and the same for p99.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_ceiling_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_ceiling_p99: Option<f64>,
}

/// The whole run, as written to results.json.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub machine: BTreeMap<String, String>,
    /// Memory-copy MB/s at the start and at the end of each round.
    pub probes: Vec<(f64, f64)>,
    /// Rounds whose probes differ by more than `DRIFT_MAX` (left out of the medians when
    /// enough rounds remain).
    pub drifted_rounds: Vec<usize>,
    pub notes: Vec<String>,
    pub rows: Vec<Merged>,
}

/// A round whose speed probe moved more than this between its start and end is suspect.
const DRIFT_MAX: f64 = 0.25;

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The ceiling a row is held against: its own choice, else the rule for its class.
fn ceiling_for(row: &Row) -> Option<&str> {
    if let Some(c) = &row.ceiling {
        return Some(c);
    }
    Some(match (row.op.as_str(), row.class.as_str()) {
        // Each many-processes row names its own baseline; one that names none has none.
        (processes::OP, _) => return None,
        (visible::OP, _) => visible::PIPE_WAKE,
        ("read", _) => ceiling::PAGE_CACHE_READ,
        (_, "D0") => ceiling::MMAP_WRITE,
        (_, "D1") => ceiling::FSYNC_BATCH,
        (_, "D2") => ceiling::FSYNC_RECORD,
        (_, "D2a") => ceiling::DIRECT_BLOCKS,
        _ => return None,
    })
}

/// A tidelog row compares with peer rows of the same operation and record size, with no more
/// threads than it has and, for appends, the same durability class.
fn comparable(ours: &Row, peer: &Row) -> bool {
    ours.op == peer.op
        && ours.record_bytes == peer.record_bytes
        && peer.threads <= ours.threads
        && (ours.op == "read" || ours.class == peer.class)
}

pub(crate) fn merge(
    rounds: &[Vec<Row>],
    probes: Vec<(f64, f64)>,
    machine: BTreeMap<String, String>,
    notes: Vec<String>,
) -> Report {
    let drifted: Vec<usize> = probes
        .iter()
        .enumerate()
        .filter(|(_, (a, b))| (a - b).abs() / a.max(*b).max(1e-9) > DRIFT_MAX)
        .map(|(i, _)| i)
        .collect();
    // Keep drifted rounds only if dropping them would leave fewer than two.
    let kept: Vec<usize> = if rounds.len() - drifted.len() >= 2 {
        (0..rounds.len()).filter(|i| !drifted.contains(i)).collect()
    } else {
        (0..rounds.len()).collect()
    };

    let mut order = Vec::new();
    let mut by_key: BTreeMap<String, Vec<(usize, &Row)>> = BTreeMap::new();
    for &r in &kept {
        for row in &rounds[r] {
            let key = row.key();
            if !by_key.contains_key(&key) {
                order.push(key.clone());
            }
            by_key.entry(key).or_default().push((r, row));
        }
    }
    // Every (ceiling name, size) per round, for per-round ratios; a many-processes row's
    // baseline may also be another tidelog row of that section, named by its configuration.
    let ceiling_row = |round: usize, name: &str, size: u64| -> Option<&Row> {
        rounds[round].iter().find(|c| {
            c.record_bytes == size
                && ((c.kind == "ceiling" && c.system == name) || processes::is_baseline(c, name))
        })
    };
    let ceiling_at = |round: usize, name: &str, size: u64| -> Option<f64> {
        ceiling_row(round, name, size).and_then(|c| c.records_per_s)
    };

    let mut merged: Vec<Merged> = order
        .iter()
        .map(|key| {
            let runs = &by_key[key];
            let first = runs[0].1;
            let measured: Vec<&(usize, &Row)> =
                runs.iter().filter(|(_, r)| r.skipped.is_none()).collect();
            let mut row = first.clone();
            if measured.is_empty() {
                return Merged {
                    row,
                    runs: Vec::new(),
                    ceiling_name: None,
                    ratio_ceiling: None,
                    best_peer: None,
                    ratio_best_peer: None,
                    ratio_walrus: None,
                    ratio_ceiling_p50: None,
                    ratio_ceiling_p99: None,
                };
            }
            row.skipped = None;
            let pick = |f: fn(&Row) -> Option<f64>| {
                median(measured.iter().filter_map(|(_, r)| f(r)).collect())
            };
            row.records_per_s = pick(|r| r.records_per_s);
            row.mb_per_s = pick(|r| r.mb_per_s);
            row.p50_us = pick(|r| r.p50_us);
            row.p99_us = pick(|r| r.p99_us);
            row.seconds = pick(|r| r.seconds);
            row.records = pick(|r| r.records.map(|n| n as f64)).map(|n| n as u64);
            row.disk_bytes = pick(|r| r.disk_bytes.map(|n| n as f64)).map(|n| n as u64);
            let runs_rate: Vec<f64> = measured
                .iter()
                .filter_map(|(_, r)| r.records_per_s)
                .collect();
            let (ceiling_name, ratio_ceiling) = if row.kind == "ceiling" {
                (None, None)
            } else {
                let name = ceiling_for(&row).map(str::to_owned);
                let ratio = name.as_deref().and_then(|name| {
                    median(
                        measured
                            .iter()
                            .filter_map(|(round, r)| {
                                Some(r.records_per_s? / ceiling_at(*round, name, r.record_bytes)?)
                            })
                            .collect(),
                    )
                });
                (name, ratio)
            };
            // Latency rows against their baseline's latency, round by round.
            let latency_ratio = |f: fn(&Row) -> Option<f64>| {
                let name = ceiling_name.as_deref().filter(|_| row.op == visible::OP)?;
                median(
                    measured
                        .iter()
                        .filter_map(|(round, r)| {
                            Some(f(r)? / f(ceiling_row(*round, name, r.record_bytes)?)?)
                        })
                        .collect(),
                )
            };
            let ratio_ceiling_p50 = latency_ratio(|r| r.p50_us);
            let ratio_ceiling_p99 = latency_ratio(|r| r.p99_us);
            Merged {
                row,
                runs: runs_rate,
                ceiling_name,
                ratio_ceiling,
                best_peer: None,
                ratio_best_peer: None,
                ratio_walrus: None,
                ratio_ceiling_p50,
                ratio_ceiling_p99,
            }
        })
        .collect();

    // Peers by median; each tidelog row against the best comparable one and against walrus.
    let peers: Vec<(Row, f64)> = merged
        .iter()
        .filter(|m| m.row.kind == "peer")
        .filter_map(|m| Some((m.row.clone(), m.row.records_per_s?)))
        .collect();
    for m in merged.iter_mut().filter(|m| m.row.kind == "tidelog") {
        let Some(rate) = m.row.records_per_s else {
            continue;
        };
        let best = peers
            .iter()
            .filter(|(p, _)| comparable(&m.row, p))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((p, peer_rate)) = best {
            m.best_peer = Some(format!("{} ({}, {} thr)", p.system, p.config, p.threads));
            m.ratio_best_peer = Some(rate / peer_rate);
        }
        let walrus = peers
            .iter()
            .filter(|(p, _)| p.system == "walrus" && comparable(&m.row, p))
            .map(|(_, r)| *r)
            .max_by(f64::total_cmp);
        m.ratio_walrus = walrus.map(|w| rate / w);
    }
    Report {
        machine,
        probes,
        drifted_rounds: drifted,
        notes,
        rows: merged,
    }
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 1e6 => format!("{:.2} M", v / 1e6),
        Some(v) if v >= 1e4 => format!("{:.0} k", v / 1e3),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// The report as markdown: machine, ceilings, tidelog rows with their ratios, peers.
pub(crate) fn markdown(report: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Machine:");
    for (k, v) in &report.machine {
        let _ = writeln!(s, "- {k}: {v}");
    }
    let probes: Vec<String> = report
        .probes
        .iter()
        .map(|(a, b)| format!("{:.0}/{:.0}", a, b))
        .collect();
    let _ = writeln!(
        s,
        "- memcpy MB/s at start/end of each round: {}{}",
        probes.join(", "),
        if report.drifted_rounds.is_empty() {
            String::new()
        } else {
            format!(
                " (rounds {:?} drifted more than 25 %)",
                report
                    .drifted_rounds
                    .iter()
                    .map(|r| r + 1)
                    .collect::<Vec<_>>()
            )
        }
    );
    for n in &report.notes {
        let _ = writeln!(s, "- note: {n}");
    }

    let _ = writeln!(s, "\n### Ceilings\n");
    let _ = writeln!(
        s,
        "| ceiling | how | size | records/s | MB/s | p50 µs | p99 µs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for m in report.rows.iter().filter(|m| m.row.kind == "ceiling") {
        let r = &m.row;
        if let Some(why) = &r.skipped {
            skipped_line(
                &mut s,
                &[&r.system, &r.config, &size_label(r.record_bytes)],
                why,
                4,
            );
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.system,
            r.config,
            size_label(r.record_bytes),
            num(r.records_per_s),
            num(r.mb_per_s),
            num(r.p50_us),
            num(r.p99_us)
        );
    }

    let _ = writeln!(s, "\n### tidelog\n");
    let _ = writeln!(
        s,
        "| lang | class | how | size | thr | records/s | MB/s | p50 µs | p99 µs | ceiling | x ceiling | best peer | x peer | x walrus | met? |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for m in report
        .rows
        .iter()
        .filter(|m| m.row.kind == "tidelog" && m.row.op != visible::OP && m.row.op != processes::OP)
    {
        let r = &m.row;
        if let Some(why) = &r.skipped {
            skipped_line(
                &mut s,
                &[
                    &r.lang,
                    &r.class,
                    &r.config,
                    &size_label(r.record_bytes),
                    &r.threads.to_string(),
                ],
                why,
                9,
            );
            continue;
        }
        let met = match (m.ratio_ceiling, m.ratio_best_peer) {
            (Some(c), Some(p)) => yes_no(c >= CEILING_TARGET && p >= PEER_TARGET),
            (Some(c), None) => yes_no(c >= CEILING_TARGET),
            (None, Some(p)) => yes_no(p >= PEER_TARGET),
            (None, None) => "-",
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {met} |",
            r.lang,
            r.class,
            r.config,
            size_label(r.record_bytes),
            r.threads,
            num(r.records_per_s),
            num(r.mb_per_s),
            num(r.p50_us),
            num(r.p99_us),
            m.ceiling_name.as_deref().unwrap_or("-"),
            ratio(m.ratio_ceiling),
            m.best_peer.as_deref().unwrap_or("-"),
            ratio(m.ratio_best_peer),
            ratio(m.ratio_walrus),
        );
    }

    visible_table(&mut s, report);
    processes_table(&mut s, report);

    let _ = writeln!(s, "\n### Peers\n");
    let _ = writeln!(
        s,
        "| system | lang | class | how | size | thr | records/s | MB/s | p50 µs | p99 µs | disk/payload |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for m in report.rows.iter().filter(|m| m.row.kind == "peer") {
        let r = &m.row;
        if let Some(why) = &r.skipped {
            skipped_line(
                &mut s,
                &[
                    &r.system,
                    &r.lang,
                    &r.class,
                    &r.config,
                    &size_label(r.record_bytes),
                    &r.threads.to_string(),
                ],
                why,
                5,
            );
            continue;
        }
        let amp = match (r.disk_bytes, r.records) {
            (Some(d), Some(n)) if n > 0 && r.op == "append" => {
                format!("{:.2}", d as f64 / (n * r.record_bytes) as f64)
            }
            _ => "-".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {amp} |",
            r.system,
            r.lang,
            r.class,
            r.config,
            size_label(r.record_bytes),
            r.threads,
            num(r.records_per_s),
            num(r.mb_per_s),
            num(r.p50_us),
            num(r.p99_us),
        );
    }
    s
}

/// The targets a latency row is held to, as (p50, p99) bounds in µs: the issue sets them for
/// the reader in another process only.
fn visible_targets(row: &Row) -> Option<(Option<f64>, f64)> {
    if row.kind != "tidelog"
        || row.op != visible::OP
        || !row.config.contains(visible::OTHER_PROCESS)
    {
        return None;
    }
    match row.lang.as_str() {
        "rust" => Some((Some(VISIBLE_P50_TARGET_US), VISIBLE_P99_TARGET_US)),
        "python" => Some((None, VISIBLE_PY_P99_TARGET_US)),
        _ => None,
    }
}

/// A table line for a row that did not run: its `lead` cells, the reason, then `empty`
/// closing bars for the cells its table has left.
fn skipped_line(s: &mut String, lead: &[&str], why: &str, empty: usize) {
    let _ = writeln!(
        s,
        "| {} | skipped: {why} {}",
        lead.join(" | "),
        "|".repeat(empty)
    );
}

/// The append-to-visible rows: their latency, their baseline's, the ratios and the targets.
fn visible_table(s: &mut String, report: &Report) {
    let ours: Vec<&Merged> = report
        .rows
        .iter()
        .filter(|m| m.row.kind == "tidelog" && m.row.op == visible::OP)
        .collect();
    if ours.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n### Append to visible\n");
    let _ = writeln!(
        s,
        "| lang | how | size | samples | p50 µs | p99 µs | baseline | its p50 µs | its p99 µs | x baseline p50 | x baseline p99 | target | met? |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for m in ours {
        let r = &m.row;
        if let Some(why) = &r.skipped {
            skipped_line(
                s,
                &[&r.lang, &r.config, &size_label(r.record_bytes)],
                why,
                10,
            );
            continue;
        }
        let baseline = m.ceiling_name.as_deref().and_then(|name| {
            report.rows.iter().find(|c| {
                c.row.kind == "ceiling"
                    && c.row.system == name
                    && c.row.record_bytes == r.record_bytes
            })
        });
        let (target, met) = match visible_targets(r) {
            None => ("-".to_owned(), "-"),
            Some((p50, p99)) => {
                let mut text = Vec::new();
                let mut ok = true;
                if let Some(t) = p50 {
                    text.push(format!("p50 ≤ {t:.0} µs"));
                    ok &= r.p50_us.is_some_and(|v| v <= t);
                }
                text.push(format!("p99 ≤ {p99:.0} µs"));
                ok &= r.p99_us.is_some_and(|v| v <= p99);
                (text.join(", "), yes_no(ok))
            }
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {target} | {met} |",
            r.lang,
            r.config,
            size_label(r.record_bytes),
            r.records.map_or("-".into(), |n| n.to_string()),
            num(r.p50_us),
            num(r.p99_us),
            m.ceiling_name.as_deref().unwrap_or("-"),
            num(baseline.and_then(|b| b.row.p50_us)),
            num(baseline.and_then(|b| b.row.p99_us)),
            ratio(m.ratio_ceiling_p50),
            ratio(m.ratio_ceiling_p99),
        );
    }
}

/// The many-processes rows: aggregate rates, their baseline's, the ratios and the targets.
fn processes_table(s: &mut String, report: &Report) {
    let ours: Vec<&Merged> = report
        .rows
        .iter()
        .filter(|m| m.row.kind == "tidelog" && m.row.op == processes::OP)
        .collect();
    if ours.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n### Many processes\n");
    let _ = writeln!(
        s,
        "| class | how | size | procs | records/s | MB/s | p50 µs | p99 µs | baseline | its records/s | x baseline | target | met? |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for m in ours {
        let r = &m.row;
        if let Some(why) = &r.skipped {
            skipped_line(
                s,
                &[
                    &r.class,
                    processes::label(&r.config),
                    &size_label(r.record_bytes),
                    &r.threads.to_string(),
                ],
                why,
                9,
            );
            continue;
        }
        let baseline = m.ceiling_name.as_deref().and_then(|name| {
            report.rows.iter().find(|c| {
                c.row.record_bytes == r.record_bytes
                    && ((c.row.kind == "ceiling" && c.row.system == name)
                        || processes::is_baseline(&c.row, name))
            })
        });
        let (target, met) = match processes::target(&r.config) {
            None => ("-".to_owned(), "-"),
            Some(t) => (
                format!("≥ {t:.1}x"),
                m.ratio_ceiling.map_or("-", |x| yes_no(x >= t)),
            ),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {target} | {met} |",
            r.class,
            processes::label(&r.config),
            size_label(r.record_bytes),
            r.threads,
            num(r.records_per_s),
            num(r.mb_per_s),
            num(r.p50_us),
            num(r.p99_us),
            m.ceiling_name.as_deref().map_or("-", processes::label),
            num(baseline.and_then(|b| b.row.records_per_s)),
            ratio(m.ratio_ceiling),
        );
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, system: &str, class: &str, size: u64, rate: f64) -> Row {
        Row::new(kind, system, "c", class, "append", size, 1).measured(
            rate as u64,
            rate as u64 * size,
            1.0,
        )
    }

    #[test]
    fn ratios_are_per_round_medians_and_peers_match_class_and_size() {
        let rounds = vec![
            vec![
                row("ceiling", ceiling::MMAP_WRITE, "D0", 100, 1000.0),
                row("tidelog", "tidelog", "D0", 100, 900.0),
                row("peer", "sqlite3", "D0", 100, 300.0),
                row("peer", "walrus", "D0", 100, 100.0),
                row("peer", "lmdb", "D1", 100, 5000.0),
            ],
            vec![
                row("ceiling", ceiling::MMAP_WRITE, "D0", 100, 500.0),
                row("tidelog", "tidelog", "D0", 100, 400.0),
                row("peer", "sqlite3", "D0", 100, 300.0),
                row("peer", "walrus", "D0", 100, 100.0),
                row("peer", "lmdb", "D1", 100, 5000.0),
            ],
        ];
        let report = merge(&rounds, vec![(1.0, 1.0); 2], BTreeMap::new(), Vec::new());
        let t = report
            .rows
            .iter()
            .find(|m| m.row.kind == "tidelog")
            .expect("tidelog row");
        // Per round: 0.9 and 0.8; their median, not 650 / 750.
        assert!((t.ratio_ceiling.expect("ratio") - 0.85).abs() < 1e-9);
        assert_eq!(t.row.records_per_s, Some(650.0));
        // lmdb is faster but D1: not comparable with a D0 row.
        assert!(t.best_peer.as_deref().expect("peer").starts_with("sqlite3"));
        assert!((t.ratio_best_peer.expect("ratio") - 650.0 / 300.0).abs() < 1e-9);
        assert!((t.ratio_walrus.expect("ratio") - 6.5).abs() < 1e-9);
        let md = markdown(&report);
        assert!(md.contains("| rust | D0 | c | 100 B | 1 | 650 |"), "{md}");
    }

    #[test]
    fn a_drifted_round_is_left_out_when_two_remain() {
        let r = |rate| vec![row("tidelog", "tidelog", "D0", 100, rate)];
        let rounds = vec![r(100.0), r(1000.0), r(120.0)];
        let probes = vec![(10.0, 10.0), (10.0, 5.0), (10.0, 11.0)];
        let report = merge(&rounds, probes, BTreeMap::new(), Vec::new());
        assert_eq!(report.drifted_rounds, vec![1]);
        assert_eq!(report.rows[0].row.records_per_s, Some(110.0));
    }

    #[test]
    fn latency_rows_are_held_against_their_baseline_round_by_round() {
        let latency = |kind: &str, system: &str, config: &str, lang: &str, p50: u32, p99: u32| {
            let mut row = Row::new(kind, system, config, "D0", visible::OP, 100, 1);
            row.lang = lang.to_owned();
            // 100 samples: p50 is the 51st, p99 the 99th.
            let mut ns = vec![p50 * 1000; 60];
            ns.extend(vec![p99 * 1000; 40]);
            row.latency(ns, "record")
        };
        let other = "append to visible: reader in another process blocked in x";
        let round = |pipe50, pipe99, ours50, ours99| {
            vec![
                latency(
                    "ceiling",
                    visible::PIPE_WAKE,
                    "pipe",
                    "rust",
                    pipe50,
                    pipe99,
                ),
                latency("tidelog", "tidelog", other, "rust", ours50, ours99)
                    .against(visible::PIPE_WAKE),
                latency("tidelog", "tidelog", "reader thread", "rust", 3, 30)
                    .against(visible::PIPE_WAKE),
                latency("tidelog", "tidelog", other, "python", 50, 900).against(visible::PIPE_WAKE),
            ]
        };
        let rounds = vec![
            round(2, 10, 6, 40),
            round(4, 20, 6, 40),
            round(3, 10, 6, 40),
        ];
        let report = merge(&rounds, vec![(1.0, 1.0); 3], BTreeMap::new(), Vec::new());
        let ours = report
            .rows
            .iter()
            .find(|m| m.row.kind == "tidelog" && m.row.lang == "rust")
            .expect("row");
        // Per round 3, 1.5 and 2 (median 2), not 6 / 3; p99 4, 2, 4.
        assert_eq!(ours.ratio_ceiling_p50, Some(2.0));
        assert_eq!(ours.ratio_ceiling_p99, Some(4.0));
        assert!(ours.ratio_ceiling.is_none() && ours.best_peer.is_none());
        let md = markdown(&report);
        assert!(md.contains("### Append to visible"), "{md}");
        assert!(
            md.contains("| 6.0 | 40.0 | pipe wake-up | 3.0 | 10.0 | 2.00 | 4.00 | p50 ≤ 10 µs, p99 ≤ 100 µs | yes |"),
            "{md}"
        );
        // No target for a reader in the writer's process; Python's is p99 only.
        assert!(
            md.contains("| 3.0 | 30.0 | pipe wake-up | 3.0 | 10.0 | 1.00 | 3.00 | - | - |"),
            "{md}"
        );
        assert!(md.contains("| p99 ≤ 1000 µs | yes |"), "{md}");
        // Latency rows stay out of the throughput table.
        let throughput = md.split("### Append to visible").next().expect("md");
        assert!(!throughput.contains(other), "{md}");
    }

    #[test]
    fn many_processes_rows_are_held_against_their_baselines_round_by_round() {
        let procs = |kind: &str, system: &str, config: &str, n: u32, rate: f64| {
            Row::new(kind, system, config, "D0", processes::OP, 100, n).measured(
                rate as u64,
                rate as u64 * 100,
                1.0,
            )
        };
        let exclusive = "many processes: 1 process, exclusive mode, fsync interval";
        let shared = "many processes: 1 process, shared mode (the default), fsync interval";
        let four = "many processes: 4 processes, 1 topic, shared mode, fsync interval";
        let round = |excl, one, many| {
            vec![
                row("ceiling", ceiling::MMAP_WRITE, "D0", 100, 1e9),
                procs("tidelog", "tidelog", exclusive, 1, excl),
                procs("tidelog", "tidelog", shared, 1, one).against(exclusive),
                procs("tidelog", "tidelog", four, 4, many).against(shared),
            ]
        };
        let rounds = vec![
            round(100.0, 90.0, 90.0),
            round(200.0, 100.0, 50.0),
            round(100.0, 100.0, 70.0),
        ];
        let report = merge(&rounds, vec![(1.0, 1.0); 3], BTreeMap::new(), Vec::new());
        let find = |config: &str| {
            report
                .rows
                .iter()
                .find(|m| m.row.config == config)
                .expect("row")
        };
        // Shared against exclusive per round: 0.9, 0.5, 1.0; four against shared: 1, 0.5, 0.7.
        assert_eq!(find(shared).ratio_ceiling, Some(0.9));
        assert_eq!(find(shared).ceiling_name.as_deref(), Some(exclusive));
        assert_eq!(find(four).ratio_ceiling, Some(0.7));
        // The exclusive row is a baseline only, never held against the mmap ceiling.
        assert!(find(exclusive).ceiling_name.is_none() && find(exclusive).ratio_ceiling.is_none());
        let md = markdown(&report);
        assert!(md.contains("### Many processes"), "{md}");
        assert!(
            md.contains("| D0 | 1 process, shared mode (the default), fsync interval | 100 B | 1 | 100 | 0.0 | - | - | 1 process, exclusive mode, fsync interval | 100 | 0.90 | ≥ 0.9x | yes |"),
            "{md}"
        );
        assert!(md.contains("| 0.70 | ≥ 0.8x | no |"), "{md}");
        // They stay out of the tidelog table.
        let main = md.split("### Many processes").next().expect("md");
        assert!(!main.contains(four), "{md}");
    }

    #[test]
    fn a_skipped_line_fills_the_cells_its_table_has_left() {
        let mut s = String::new();
        skipped_line(&mut s, &["a", "b", "100 B"], "no peer", 4);
        assert_eq!(s, "| a | b | 100 B | skipped: no peer ||||\n");
    }

    #[test]
    fn skipped_everywhere_stays_skipped() {
        let rounds = vec![vec![
            Row::new("peer", "lmdb", "c", "D1", "append", 100, 1).skip("lmdb is not installed"),
        ]];
        let report = merge(&rounds, vec![(1.0, 1.0)], BTreeMap::new(), Vec::new());
        assert_eq!(
            report.rows[0].row.skipped.as_deref(),
            Some("lmdb is not installed")
        );
        assert!(markdown(&report).contains("skipped: lmdb is not installed"));
    }
}
