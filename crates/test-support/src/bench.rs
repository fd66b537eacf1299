//! Measurements that are not a time per iteration (bytes per event on
//! disk, heap bytes per idle child, a ratio of two runs), recorded by the
//! benches where `cargo xtask bench` finds them next to criterion's own
//! estimates: one JSON file per measurement under
//! `target/bench-results/`.

use std::path::PathBuf;

use serde::Serialize;

/// One measurement a bench made outside criterion's timing.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement<'a> {
    /// What was measured, as the `cargo xtask bench` table names it, for
    /// example `"resident idle child, heap"`.
    pub workload: &'a str,
    /// The size of the workload (children, events), if it has one.
    pub n: Option<u64>,
    /// The measured value, in `unit`.
    pub value: f64,
    /// The unit of `value`, for example `"B/child"` or `"B/event"`.
    pub unit: &'a str,
}

/// Where measurements go: `$DSH_BENCH_RESULTS` when set, otherwise
/// `bench-results/` in the target directory the running bench was built
/// into.
pub fn results_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DSH_BENCH_RESULTS") {
        return PathBuf::from(dir);
    }
    // A bench runs as `<target>/<profile>/deps/<name>-<hash>`.
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .nth(3)
                .map(|target| target.join("bench-results"))
        })
        .unwrap_or_else(|| PathBuf::from("target/bench-results"))
}

/// Records `measurement` (replacing an earlier one of the same workload
/// and size) and prints it, so a plain `cargo bench` shows it too.
///
/// # Errors
/// When the results directory cannot be created or written.
pub fn record(measurement: &Measurement<'_>) -> std::io::Result<()> {
    let dir = results_dir();
    std::fs::create_dir_all(&dir)?;
    let slug: String = measurement
        .workload
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = match measurement.n {
        Some(n) => format!("{slug}-{n}.json"),
        None => format!("{slug}.json"),
    };
    let json = serde_json::to_vec(measurement).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(name), json)?;
    println!(
        "{}{}: {:.3} {}",
        measurement.workload,
        measurement
            .n
            .map(|n| format!(" (N={n})"))
            .unwrap_or_default(),
        measurement.value,
        measurement.unit
    );
    Ok(())
}
