//! How the workspace's crates depend on each other, read from Cargo itself
//! (`cargo metadata`, `cargo tree`) rather than from the manifests' text:
//! no tool crate depends on another tool crate, not even for its tests (the
//! scenarios that use several live in this package), a crate that never
//! validates a value does not build `jsonschema`, and none of ours turns on
//! `serde_json`'s `preserve_order` for its users, and the example host
//! that brings its own agent has no `dsh-harness` anywhere in its tree, nor
//! `dsh` built without its `acp` feature any ACP crate.

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

/// The packages in `package`'s normal dependency tree, one name per line.
fn tree(package: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "tree",
        "--offline",
        "--locked",
        "-p",
        package,
        "-e",
        "normal",
        "--prefix",
        "none",
    ];
    args.extend_from_slice(extra);
    cargo(&args)
}

#[test]
fn crates_that_validate_nothing_do_not_build_jsonschema() {
    for package in ["dsh-llm-openai", "dsh-tool-workspace"] {
        let tree = tree(package, &[]);
        assert!(tree.contains("dsh-core"), "{tree}");
        assert!(
            !tree.contains("jsonschema"),
            "{package} builds jsonschema:\n{tree}"
        );
    }
    assert!(tree("dsh-harness", &[]).contains("jsonschema"));
}

#[test]
fn no_crate_of_ours_turns_on_preserve_order() {
    for package in [
        "dsh-core",
        "dsh-harness",
        "dsh-subagent",
        "dsh-tool-subagent",
    ] {
        let features = tree(package, &["-e", "features", "-i", "serde_json"]);
        assert!(
            !features.contains("preserve_order"),
            "{package} turns on serde_json/preserve_order:\n{features}"
        );
    }
}

#[test]
fn the_custom_host_example_has_no_harness_in_its_tree() {
    let tree = tree("dsh-example-custom-host", &["-e", "normal,build"]);
    assert!(tree.contains("dsh-subagent"), "{tree}");
    assert!(
        !tree.contains("dsh-harness"),
        "the custom host pulls dsh-harness:\n{tree}"
    );
}

#[test]
fn dsh_without_the_acp_feature_has_no_acp_in_its_tree() {
    let with = tree("dsh-cli", &[]);
    for acp in ["dsh-subagent-acp", "dsh-acp-agent", "agent-client-protocol"] {
        assert!(with.contains(acp), "the default dsh lacks {acp}:\n{with}");
    }
    let without = tree("dsh-cli", &["--no-default-features"]);
    assert!(without.contains("dsh-subagent-spawn"), "{without}");
    for acp in ["dsh-subagent-acp", "dsh-acp-agent", "agent-client-protocol"] {
        assert!(
            !without.contains(acp),
            "dsh without `acp` still pulls {acp}:\n{without}"
        );
    }
}
