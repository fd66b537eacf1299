//! `cargo xtask bench`'s table, read from a target directory laid out as
//! criterion and `dsh_test_support::bench::record` leave it: every kind of
//! reading, a missed bound, a result no bench produced, and results that
//! no aim reads.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use xtask::bench::{Aim, Bound, Reading, collect, judge, render};

fn criterion(
    target: &Path,
    dir: &str,
    group: &str,
    function: &str,
    value: Option<&str>,
    throughput: &str,
    median_ns: f64,
) {
    let new = target.join("criterion").join(dir).join("new");
    std::fs::create_dir_all(&new).unwrap();
    let value = value.map_or("null".to_owned(), |v| format!("{v:?}"));
    std::fs::write(
        new.join("benchmark.json"),
        format!(
            r#"{{"group_id":{group:?},"function_id":{function:?},"value_str":{value},"throughput":{throughput},"full_id":"x","directory_name":{dir:?},"title":"x"}}"#
        ),
    )
    .unwrap();
    std::fs::write(
        new.join("estimates.json"),
        format!(r#"{{"mean":{{"point_estimate":1.0}},"median":{{"point_estimate":{median_ns}}}}}"#),
    )
    .unwrap();
    // Criterion keeps the previous run beside it; it must not be read.
    let base = target.join("criterion").join(dir).join("base");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("estimates.json"), "not json").unwrap();
}

fn fixture() -> tempfile::TempDir {
    let target = tempfile::tempdir().unwrap();
    let t = target.path();
    // 1,000 children in 50 ms: 20,000/s.
    criterion(
        t,
        "children/durable/1000",
        "children",
        "durable",
        Some("1000"),
        r#"{"Elements":1000}"#,
        50e6,
    );
    // 1,000 children in 125 ms: 8,000/s, under its bound.
    criterion(
        t,
        "children/concurrent/1000",
        "children",
        "concurrent",
        Some("1000"),
        r#"{"Elements":1000}"#,
        125e6,
    );
    // 100 MB in 125 ms: 800 MB/s.
    criterion(
        t,
        "replay/100000",
        "replay",
        "100000",
        None,
        r#"{"Bytes":100000000}"#,
        125e6,
    );
    // Steps at 10 and 10,000 prior messages: 2 µs and 2.5 µs each.
    criterion(
        t,
        "step/10",
        "step",
        "10",
        None,
        r#"{"Elements":1}"#,
        2_000.0,
    );
    criterion(
        t,
        "step/10000",
        "step",
        "10000",
        None,
        r#"{"Elements":1}"#,
        2_500.0,
    );
    // A cold resume: 12.5 ms per iteration, no throughput.
    criterion(t, "resume/cold", "resume", "cold", None, "null", 12.5e6);
    // Read by no aim.
    criterion(
        t,
        "walk/tree",
        "walk",
        "tree",
        None,
        r#"{"Elements":10}"#,
        1e6,
    );
    let results = t.join("bench-results");
    std::fs::create_dir_all(&results).unwrap();
    std::fs::write(
        results.join("idle-child-1000.json"),
        r#"{"workload":"idle child","n":1000,"value":7400.0,"unit":"B/child"}"#,
    )
    .unwrap();
    std::fs::write(
        results.join("bytes-per-event.json"),
        r#"{"workload":"bytes per event","n":null,"value":178.2,"unit":"B/event"}"#,
    )
    .unwrap();
    target
}

const AIMS: &[Aim] = &[
    Aim {
        workload: "durable children",
        n: "1,000",
        reading: Reading::Rate("children/durable/1000"),
        bound: Bound::AtLeast(12_000.0),
        unit: "children/s",
    },
    Aim {
        workload: "concurrent children",
        n: "1,000",
        reading: Reading::Rate("children/concurrent/1000"),
        bound: Bound::AtLeast(12_000.0),
        unit: "children/s",
    },
    Aim {
        workload: "replay",
        n: "100,000 events",
        reading: Reading::Bandwidth("replay/100000"),
        bound: Bound::AtLeast(600.0),
        unit: "MB/s",
    },
    Aim {
        workload: "step cost, long over short",
        n: "10,000 / 10",
        reading: Reading::Ratio("step/10000", "step/10"),
        bound: Bound::AtMost(1.5),
        unit: "×",
    },
    Aim {
        workload: "one step",
        n: "10",
        reading: Reading::Micros("step/10"),
        bound: Bound::AtMost(25.0),
        unit: "µs",
    },
    Aim {
        workload: "cold resume",
        n: "",
        reading: Reading::Millis("resume/cold"),
        bound: Bound::AtMost(20.0),
        unit: "ms",
    },
    Aim {
        workload: "idle child",
        n: "1,000",
        reading: Reading::Recorded("idle child/1000"),
        bound: Bound::AtMost(8192.0),
        unit: "B",
    },
    Aim {
        workload: "bytes per event",
        n: "",
        reading: Reading::Recorded("bytes per event"),
        bound: Bound::Report,
        unit: "B",
    },
    Aim {
        workload: "never benched",
        n: "1",
        reading: Reading::Rate("nothing/here"),
        bound: Bound::AtLeast(1.0),
        unit: "/s",
    },
];

#[test]
fn the_table_judges_every_kind_of_reading_and_lists_the_rest() {
    let target = fixture();
    let results = collect(target.path()).unwrap();
    insta::assert_snapshot!(render(AIMS, &results));
}

#[test]
fn a_result_that_no_bench_produced_is_not_run_never_met() {
    let target = fixture();
    let results = collect(target.path()).unwrap();
    let verdict = judge(&AIMS[8], &results);
    assert_eq!((verdict.result, verdict.met), (None, None));
    let verdict = judge(&AIMS[1], &results);
    assert_eq!(verdict.met, Some(false));
}

#[test]
fn an_empty_target_is_a_table_of_aims_not_run() {
    let target = tempfile::tempdir().unwrap();
    let results = collect(target.path()).unwrap();
    assert!(results.is_empty());
    let table = render(AIMS, &results);
    assert_eq!(table.matches("not run").count(), AIMS.len(), "{table}");
}

#[test]
fn a_damaged_estimate_names_its_file() {
    let target = fixture();
    let estimates = target
        .path()
        .join("criterion/replay/100000/new/estimates.json");
    std::fs::write(&estimates, "{").unwrap();
    let err = collect(target.path()).unwrap_err().to_string();
    assert!(err.contains("replay/100000/new/estimates.json"), "{err}");
}
