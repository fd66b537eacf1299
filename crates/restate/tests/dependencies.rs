//! Where `dsh-restate` sits in the workspace, read from Cargo itself
//! (`cargo tree`): no other crate's build has it, not even for tests (the
//! SDK's ~55 extra crates stay out of every other build until a feature of
//! `dsh` asks for them); only the test harness depends on it, behind its
//! `restate` feature, which this crate's own tests and benches turn on;
//! and the SDK comes without its heavy defaults (no aws-lc-rs C build, no
//! tracing-subscriber).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn cargo_tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--offline", "--locked", "--prefix", "none"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn no_other_crate_depends_on_dsh_restate() {
    let dependents = cargo_tree(&[
        "--workspace",
        "-i",
        "dsh-restate",
        "-e",
        "normal,build,dev",
        "--depth",
        "1",
    ]);
    let names: Vec<&str> = dependents
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(!names.is_empty(), "cargo tree listed nothing");
    assert!(
        names
            .iter()
            .all(|name| ["dsh-restate", "dsh-test-support"].contains(name)),
        "{dependents}"
    );
    // Every other crate, tests and all, builds without it or the SDK.
    let others = cargo_tree(&[
        "--workspace",
        "--exclude",
        "dsh-restate",
        "-e",
        "normal,build,dev",
    ]);
    for name in ["dsh-restate", "restate-sdk"] {
        assert!(
            !others
                .lines()
                .any(|line| line.starts_with(&format!("{name} "))),
            "{name} in another crate's build:\n{others}"
        );
    }
}

#[test]
fn the_sdk_comes_without_its_heavy_defaults() {
    let tree = cargo_tree(&["-p", "dsh-restate", "-e", "normal"]);
    assert!(tree.contains("restate-sdk v0.13.0"), "{tree}");
    for heavy in ["aws-lc-rs", "aws-lc-sys", "tracing-subscriber"] {
        assert!(
            !tree
                .lines()
                .any(|line| line.starts_with(&format!("{heavy} "))),
            "dsh-restate builds {heavy}:\n{tree}"
        );
    }
}
