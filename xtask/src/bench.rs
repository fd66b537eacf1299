//! `cargo xtask bench`: runs the workspace's benches and prints one table
//! of the performance aims the issues set (workload, N, result, aim, met
//! or not), then every other result.
//!
//! Nothing here times anything itself. Criterion leaves, for every
//! benchmark it ran, `benchmark.json` (its id and declared throughput) and
//! `estimates.json` (nanoseconds per iteration) under
//! `target/criterion/<id>/new/`; measurements that are not times (bytes
//! per event, heap bytes per idle child) are left by
//! `dsh_test_support::bench::record` as one JSON object per file under
//! `target/bench-results/`. [`collect`] reads both, [`AIMS`] says what
//! each aim reads, and [`render`] judges and prints. A result that is
//! missing (its bench was filtered out, or renamed) is shown as "not run",
//! never as met.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::Error;

/// One measured result: a criterion benchmark or a recorded measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Criterion's full id (`group/function/parameter`), or the recorded
    /// workload followed by `/N` when it has a size.
    pub id: String,
    /// Nanoseconds per iteration (criterion's median), when timed.
    pub nanos: Option<f64>,
    /// The declared throughput per iteration, when timed with one.
    pub throughput: Option<Throughput>,
    /// The recorded value and its unit, for a measurement that is not a
    /// time.
    pub recorded: Option<(f64, String)>,
}

/// What one iteration of a timed benchmark processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throughput {
    /// Items: children, messages, steps.
    Elements(u64),
    /// Bytes of input.
    Bytes(u64),
}

impl Measured {
    /// Items per second, for a benchmark with an element throughput.
    fn per_second(&self) -> Option<f64> {
        match (self.nanos, self.throughput) {
            (Some(nanos), Some(Throughput::Elements(n))) if nanos > 0.0 => {
                Some(n as f64 * 1e9 / nanos)
            }
            _ => None,
        }
    }

    /// Megabytes (10^6) per second, for a benchmark with a byte
    /// throughput.
    fn megabytes_per_second(&self) -> Option<f64> {
        match (self.nanos, self.throughput) {
            (Some(nanos), Some(Throughput::Bytes(n))) if nanos > 0.0 => {
                Some(n as f64 * 1e3 / nanos)
            }
            _ => None,
        }
    }

    /// Microseconds per item (per iteration without a throughput).
    fn micros_each(&self) -> Option<f64> {
        let nanos = self.nanos?;
        let items = match self.throughput {
            Some(Throughput::Elements(n)) if n > 0 => n as f64,
            _ => 1.0,
        };
        Some(nanos / items / 1e3)
    }

    /// The result in its natural unit, for the table of results without
    /// an aim.
    fn natural(&self) -> String {
        if let Some((value, unit)) = &self.recorded {
            return format!("{} {unit}", number(*value));
        }
        if let Some(rate) = self.per_second() {
            return format!("{}/s", number(rate));
        }
        if let Some(rate) = self.megabytes_per_second() {
            return format!("{} MB/s", number(rate));
        }
        match self.micros_each() {
            Some(micros) => format!("{} µs", number(micros)),
            None => "no estimate".to_owned(),
        }
    }
}

/// How an aim reads its result.
#[derive(Debug, Clone, Copy)]
pub enum Reading {
    /// Items per second of one benchmark.
    Rate(&'static str),
    /// Megabytes per second of one benchmark.
    Bandwidth(&'static str),
    /// Microseconds per item (or per iteration) of one benchmark.
    Micros(&'static str),
    /// Milliseconds per iteration of one benchmark.
    Millis(&'static str),
    /// Time per item of the first over the second.
    Ratio(&'static str, &'static str),
    /// A recorded measurement, by its id (workload, then `/N`).
    Recorded(&'static str),
}

/// Which side of the aim's bound is good.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    /// The result must be at least this.
    AtLeast(f64),
    /// The result must be at most this.
    AtMost(f64),
    /// Reported only: the issue asks for the number, not a bound.
    Report,
}

/// One aim of the table.
#[derive(Debug, Clone, Copy)]
pub struct Aim {
    /// The workload, as the table names it.
    pub workload: &'static str,
    /// Its size, as the table prints it.
    pub n: &'static str,
    /// What the result is read from.
    pub reading: Reading,
    /// The bound the result must keep.
    pub bound: Bound,
    /// The unit the result and the bound are in.
    pub unit: &'static str,
}

/// The aims of the performance issues (18: the persisted path; 16 and 19:
/// ACP teardown and progress; 35: the Restate engine, whose bench needs
/// its server installed and root), in the order the table prints them. Each
/// names the criterion id or recorded workload it reads; a bench renamed
/// without this table shows up as "not run".
pub const AIMS: &[Aim] = &[
    Aim {
        workload: "durable spawn children, batched (write-behind) commit, sequential, flushed",
        n: "1,000",
        reading: Reading::Rate("spawn/jsonl-batched/sequential/1000"),
        bound: Bound::AtLeast(12_000.0),
        unit: "children/s",
    },
    Aim {
        workload: "durable spawn children, batched (write-behind) commit, concurrent, flushed",
        n: "1,000",
        reading: Reading::Rate("spawn/jsonl-batched/concurrent/1000"),
        bound: Bound::AtLeast(12_000.0),
        unit: "children/s",
    },
    Aim {
        workload: "durable child logs (create, turn, checkpoint), batched, sequential, flushed",
        n: "1,000",
        reading: Reading::Rate("create/child/batched-sequential/1000"),
        bound: Bound::AtLeast(12_000.0),
        unit: "logs/s",
    },
    Aim {
        workload: "durable child logs (create, turn, checkpoint), batched, concurrent, flushed",
        n: "1,000",
        reading: Reading::Rate("create/child/batched-concurrent/1000"),
        bound: Bound::AtLeast(12_000.0),
        unit: "logs/s",
    },
    Aim {
        workload: "durable spawn children, grouped commit (each write acknowledged synced), sequential",
        n: "1,000",
        reading: Reading::Rate("spawn/jsonl-grouped/sequential/1000"),
        bound: Bound::Report,
        unit: "children/s",
    },
    Aim {
        workload: "durable spawn children, grouped commit (each write acknowledged synced), concurrent",
        n: "1,000",
        reading: Reading::Rate("spawn/jsonl-grouped/concurrent/1000"),
        bound: Bound::Report,
        unit: "children/s",
    },
    Aim {
        workload: "durable child logs (create, turn, checkpoint), grouped, concurrent",
        n: "1,000",
        reading: Reading::Rate("create/child/grouped-concurrent/1000"),
        bound: Bound::Report,
        unit: "logs/s",
    },
    Aim {
        workload: "TurnBoundary create over its floor (create, fdatasync, directory fsync)",
        n: "1",
        reading: Reading::Ratio(
            "create/store/turn-boundary",
            "create/floor/create-fdatasync-dirsync",
        ),
        bound: Bound::AtMost(1.5),
        unit: "×",
    },
    Aim {
        workload: "TurnBoundary create over a file-only floor (create, fdatasync)",
        n: "1",
        reading: Reading::Ratio(
            "create/store/turn-boundary",
            "create/floor/create-fdatasync",
        ),
        bound: Bound::Report,
        unit: "×",
    },
    Aim {
        workload: "sequential in-memory spawn child (hand-offs)",
        n: "100",
        reading: Reading::Micros("handoff/memory/sequential/100"),
        bound: Bound::AtMost(25.0),
        unit: "µs/child",
    },
    Aim {
        workload: "sequential in-memory spawn child (hand-offs)",
        n: "10,000",
        reading: Reading::Micros("handoff/memory/sequential/10000"),
        bound: Bound::AtMost(25.0),
        unit: "µs/child",
    },
    Aim {
        workload: "hand-off cost at 10,000 children over 100 (flat)",
        n: "10,000 / 100",
        reading: Reading::Ratio(
            "handoff/memory/sequential/10000",
            "handoff/memory/sequential/100",
        ),
        bound: Bound::AtMost(1.1),
        unit: "×",
    },
    Aim {
        workload: "model step at 10,000 prior messages over 10",
        n: "10,000 / 10",
        reading: Reading::Ratio("step/history/10000", "step/history/10"),
        bound: Bound::AtMost(1.5),
        unit: "×",
    },
    Aim {
        workload: "replay (load) of a plain JSONL log",
        n: "100,000 events",
        reading: Reading::Bandwidth("replay/load/100000"),
        bound: Bound::AtLeast(600.0),
        unit: "MB/s",
    },
    Aim {
        workload: "cold resume until a follow-up is accepted",
        n: "100,000 events",
        reading: Reading::Millis("replay/cold-resume/100000"),
        bound: Bound::AtMost(20.0),
        unit: "ms",
    },
    Aim {
        workload: "replay (load) of a plain JSONL log, under dsh's allocator (mimalloc)",
        n: "100,000 events",
        reading: Reading::Bandwidth("dsh-alloc/load/100000"),
        bound: Bound::AtLeast(600.0),
        unit: "MB/s",
    },
    Aim {
        workload: "cold resume until a follow-up is accepted, under dsh's allocator (mimalloc)",
        n: "100,000 events",
        reading: Reading::Millis("dsh-alloc/cold-resume/100000"),
        bound: Bound::AtMost(20.0),
        unit: "ms",
    },
    Aim {
        workload: "message to a cold child (resume, turn, settle)",
        n: "1,000",
        reading: Reading::Rate("message/1000-cold"),
        bound: Bound::AtLeast(2_000.0),
        unit: "messages/s",
    },
    Aim {
        workload: "list cold children",
        n: "100,000",
        reading: Reading::Millis("list/100000-cold"),
        bound: Bound::AtMost(500.0),
        unit: "ms",
    },
    Aim {
        workload: "resident idle child (parked), JSONL store, heap besides its history",
        n: "10,000",
        reading: Reading::Recorded(
            "resident idle child (parked), heap besides its history, jsonl store/10000",
        ),
        bound: Bound::AtMost(8_192.0),
        unit: "B/child",
    },
    Aim {
        workload: "idle agent (no runtime), empty history, JSONL store, heap",
        n: "10,000",
        reading: Reading::Recorded("idle agent, empty history, heap, jsonl store/10000"),
        bound: Bound::Report,
        unit: "B/agent",
    },
    Aim {
        workload: "resident child mid-turn, JSONL store, heap (with its log)",
        n: "10,000",
        reading: Reading::Recorded("resident child mid-turn, heap, jsonl store/10000"),
        bound: Bound::Report,
        unit: "B/child",
    },
    Aim {
        workload: "disk bytes per event, plain JSONL",
        n: "100,000 events",
        reading: Reading::Recorded("replay log on disk, plain JSONL/100000"),
        bound: Bound::Report,
        unit: "B/event",
    },
    Aim {
        workload: "step cost with a progress listener over without",
        n: "51 steps",
        reading: Reading::Ratio(
            "progress/steps/listener/50",
            "progress/steps/no_listener/50",
        ),
        bound: Bound::Report,
        unit: "×",
    },
    Aim {
        workload: "ACP teardown after a reply, agent ignores EOF",
        n: "1",
        reading: Reading::Millis("dispose/after_reply_ignoring_eof"),
        bound: Bound::AtMost(200.0),
        unit: "ms",
    },
    Aim {
        workload: "journaled step on Restate over loopback (real server and workers), from the log",
        n: "10 steps",
        reading: Reading::Millis("restate/journaled_step"),
        bound: Bound::AtMost(10.0),
        unit: "ms",
    },
    Aim {
        workload: "children started through the Restate cluster, one step of a lead",
        n: "10",
        reading: Reading::Rate("restate/children_started"),
        bound: Bound::Report,
        unit: "children/s",
    },
    Aim {
        workload: "Restate worker killed mid-step until the step runs on another (50 ms retry)",
        n: "1",
        reading: Reading::Millis("restate/failover"),
        bound: Bound::AtMost(2_000.0),
        unit: "ms",
    },
];

/// Reads every criterion estimate under `target/criterion` and every
/// recorded measurement under `target/bench-results` of `target`.
///
/// # Errors
/// When a file criterion or a bench wrote cannot be read or is not the
/// JSON it should be; a missing directory is no error (nothing ran).
pub fn collect(target: &Path) -> Result<BTreeMap<String, Measured>, Error> {
    let mut found = BTreeMap::new();
    collect_criterion(&target.join("criterion"), &mut found)?;
    let recorded = target.join("bench-results");
    if recorded.is_dir() {
        for path in read_dir(&recorded)? {
            if path.extension().is_some_and(|ext| ext == "json") {
                let value = read_json(&path)?;
                let workload = value["workload"].as_str().unwrap_or_default();
                let id = match value["n"].as_u64() {
                    Some(n) => format!("{workload}/{n}"),
                    None => workload.to_owned(),
                };
                let (Some(number), Some(unit)) = (value["value"].as_f64(), value["unit"].as_str())
                else {
                    return Err(Error::Bench {
                        path,
                        message: "not a recorded measurement (workload, n, value, unit)".into(),
                    });
                };
                found.insert(
                    id.clone(),
                    Measured {
                        id,
                        nanos: None,
                        throughput: None,
                        recorded: Some((number, unit.to_owned())),
                    },
                );
            }
        }
    }
    Ok(found)
}

fn collect_criterion(dir: &Path, found: &mut BTreeMap<String, Measured>) -> Result<(), Error> {
    if !dir.is_dir() {
        return Ok(());
    }
    for path in read_dir(dir)? {
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|name| name == "new") {
            let benchmark = path.join("benchmark.json");
            let estimates = path.join("estimates.json");
            if benchmark.is_file() && estimates.is_file() {
                let measured = criterion_result(&benchmark, &estimates)?;
                found.insert(measured.id.clone(), measured);
            }
        } else if path
            .file_name()
            .is_some_and(|name| name != "base" && name != "report")
        {
            collect_criterion(&path, found)?;
        }
    }
    Ok(())
}

fn criterion_result(benchmark: &Path, estimates: &Path) -> Result<Measured, Error> {
    let id = read_json(benchmark)?;
    let times = read_json(estimates)?;
    let bad = |message: &str| Error::Bench {
        path: benchmark.to_path_buf(),
        message: message.to_owned(),
    };
    let group = id["group_id"].as_str().ok_or_else(|| bad("no group_id"))?;
    let mut full = group.to_owned();
    for part in ["function_id", "value_str"] {
        if let Some(text) = id[part].as_str() {
            full.push('/');
            full.push_str(text);
        }
    }
    let throughput = match &id["throughput"] {
        Value::Object(map) => map.iter().find_map(|(kind, n)| {
            let n = n.as_u64()?;
            match kind.as_str() {
                "Elements" | "ElementsAndBytes" => Some(Throughput::Elements(n)),
                "Bytes" | "BytesDecimal" => Some(Throughput::Bytes(n)),
                _ => None,
            }
        }),
        _ => None,
    };
    let nanos = times["median"]["point_estimate"]
        .as_f64()
        .ok_or_else(|| Error::Bench {
            path: estimates.to_path_buf(),
            message: "no median point estimate".into(),
        })?;
    Ok(Measured {
        id: full,
        nanos: Some(nanos),
        throughput,
        recorded: None,
    })
}

fn read_dir(dir: &Path) -> Result<Vec<std::path::PathBuf>, Error> {
    let mut paths = Vec::new();
    for entry in fs::read_dir(dir).map_err(|err| Error::io(dir, err))? {
        paths.push(entry.map_err(|err| Error::io(dir, err))?.path());
    }
    paths.sort();
    Ok(paths)
}

fn read_json(path: &Path) -> Result<Value, Error> {
    let text = fs::read_to_string(path).map_err(|err| Error::io(path, err))?;
    serde_json::from_str(&text).map_err(|err| Error::Bench {
        path: path.to_path_buf(),
        message: err.to_string(),
    })
}

/// The verdict of one aim against the results.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The result in the aim's unit, when everything it reads was measured.
    pub result: Option<f64>,
    /// Whether the result keeps the bound (`None`: not run, or report only).
    pub met: Option<bool>,
}

/// Judges `aim` against `results`.
pub fn judge(aim: &Aim, results: &BTreeMap<String, Measured>) -> Verdict {
    let get = |id: &str| results.get(id);
    let result = match aim.reading {
        Reading::Rate(id) => get(id).and_then(Measured::per_second),
        Reading::Bandwidth(id) => get(id).and_then(Measured::megabytes_per_second),
        Reading::Micros(id) => get(id).and_then(Measured::micros_each),
        Reading::Millis(id) => get(id).and_then(|m| m.nanos.map(|nanos| nanos / 1e6)),
        Reading::Ratio(over, under) => match (
            get(over).and_then(Measured::micros_each),
            get(under).and_then(Measured::micros_each),
        ) {
            (Some(over), Some(under)) if under > 0.0 => Some(over / under),
            _ => None,
        },
        Reading::Recorded(id) => get(id).and_then(|m| m.recorded.as_ref().map(|(v, _)| *v)),
    };
    let met = result.and_then(|value| match aim.bound {
        Bound::AtLeast(bound) => Some(value >= bound),
        Bound::AtMost(bound) => Some(value <= bound),
        Bound::Report => None,
    });
    Verdict { result, met }
}

/// The table of aims, then every result no aim reads, as Markdown.
pub fn render(aims: &[Aim], results: &BTreeMap<String, Measured>) -> String {
    let mut out = String::from("| workload | N | result | aim | met |\n|---|---|---|---|---|\n");
    let mut read = std::collections::BTreeSet::new();
    for aim in aims {
        match aim.reading {
            Reading::Rate(id)
            | Reading::Bandwidth(id)
            | Reading::Micros(id)
            | Reading::Millis(id)
            | Reading::Recorded(id) => {
                read.insert(id);
            }
            Reading::Ratio(over, under) => {
                read.insert(over);
                read.insert(under);
            }
        }
        let verdict = judge(aim, results);
        let result = verdict.result.map_or_else(
            || "not run".to_owned(),
            |v| format!("{} {}", number(v), aim.unit),
        );
        let bound = match aim.bound {
            Bound::AtLeast(b) => format!("≥ {} {}", number(b), aim.unit),
            Bound::AtMost(b) => format!("≤ {} {}", number(b), aim.unit),
            Bound::Report => "report".to_owned(),
        };
        let met = match verdict.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {result} | {bound} | {met} |",
            aim.workload, aim.n
        );
    }
    let others: Vec<&Measured> = results
        .values()
        .filter(|m| !read.contains(m.id.as_str()))
        .collect();
    if !others.is_empty() {
        out.push_str("\nWithout an aim:\n\n| benchmark | result |\n|---|---|\n");
        for measured in others {
            let _ = writeln!(out, "| {} | {} |", measured.id, measured.natural());
        }
    }
    out
}

/// A number rounded for reading: whole units from 100 up, thousands
/// separated; one or two decimals below.
fn number(value: f64) -> String {
    if value >= 100.0 {
        let whole = value.round() as u64;
        let digits = whole.to_string();
        let mut grouped = String::new();
        for (i, digit) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(digit);
        }
        grouped
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}
