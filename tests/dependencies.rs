//! How the workspace's crates depend on each other, read from Cargo itself
//! (`cargo metadata`, `cargo tree`) rather than from the manifests' text:
//! no tool crate depends on another tool crate, not even for its tests (the
//! scenarios that use several live in this package), and the example host
//! that brings its own agent has no `dsh-harness` anywhere in its tree.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(cargo)
        .current_dir(root)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn no_tool_crate_depends_on_another_tool_crate() {
    let metadata: Value = serde_json::from_str(&cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ]))
    .unwrap();
    let mut found = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        if !name.starts_with("dsh-tool-") {
            continue;
        }
        for dep in package["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            if dep_name.starts_with("dsh-tool-") {
                found.push(format!("{name} -> {dep_name} ({})", dep["kind"]));
            }
        }
    }
    assert!(
        found.is_empty(),
        "tool crates depending on each other: {found:?}"
    );
}
