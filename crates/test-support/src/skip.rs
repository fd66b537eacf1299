//! What a test does when this machine lacks something it needs (a tmpfs
//! mount, `setpriv`, Python, `script`, Landlock, enough file descriptors):
//! [`skip_or_fail`]. CI has everything, so there a missing need is a failure
//! (a test that printed "skipped" and passed would let CI pass having
//! checked nothing); anywhere else the test says why on stderr, written
//! past libtest's capture (which swallows `eprintln!` of a passing test) so
//! the skip shows in the run's output, and returns.

use std::io::Write;

/// Whether this run is CI's: `CI` is set to anything but `false`, `0` or
/// the empty string (`.ci/run` and the common CI services set `CI=true`).
fn on_ci() -> bool {
    is_ci(std::env::var("CI").ok().as_deref())
}

/// Whether a value of `CI` (`None` when unset) means CI.
fn is_ci(value: Option<&str>) -> bool {
    value.is_some_and(|value| !matches!(value, "" | "0" | "false"))
}

/// The calling test cannot run here because of `reason`: under CI
/// (`CI=true`) this panics, failing the test; elsewhere it prints
/// `skipped: {reason}` on the process's stderr (not captured by libtest,
/// so visible in a passing run) and the caller returns.
///
/// # Panics
/// Under CI, always; elsewhere when stderr cannot be written.
#[track_caller]
#[allow(clippy::expect_used)]
pub fn skip_or_fail(reason: &str) {
    assert!(!on_ci(), "cannot run where CI runs (CI is set): {reason}");
    writeln!(std::io::stderr(), "skipped: {reason}").expect("stderr takes a line");
}

#[cfg(test)]
mod tests {
    use super::is_ci;

    #[test]
    fn ci_is_any_value_of_the_variable_but_false_0_or_empty() {
        for (value, ci) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("false"), false),
            (Some("true"), true),
            (Some("1"), true),
            (Some("yes"), true),
        ] {
            assert_eq!(is_ci(value), ci, "{value:?}");
        }
    }
}
