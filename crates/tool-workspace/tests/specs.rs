//! What the model is shown before it calls anything: every tool's name,
//! description and input schema (JSON snapshots), the committed spec files
//! under `tools/` kept equal to the live tools, and each tool's input struct
//! checked against its own published schema with valid and invalid
//! examples (unknown fields are refused by both).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::Tool;
use dsh_test_support::specs::{assert_committed_specs, check_input, spec};
use dsh_tool_workspace::{
    EditFileInput, GrepInput, ListFilesInput, Policy, ReadFileInput, ShellInput, WorkspaceTools,
    WriteFileInput,
};
use serde_json::{Value, json};

fn tools() -> Vec<Arc<dyn Tool>> {
    WorkspaceTools::new(env!("CARGO_MANIFEST_DIR"), Policy::default()).unwrap()
}

#[test]
fn the_six_tools_in_order() {
    let names: Vec<String> = tools().iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(
        names,
        [
            "read_file",
            "list_files",
            "grep",
            "edit_file",
            "write_file",
            "shell"
        ]
    );
    let safe: Vec<bool> = tools().iter().map(|t| t.concurrency_safe()).collect();
    assert_eq!(safe, [true, true, true, false, false, false]);
    // Only the readers may run again after a worker died mid-call (B60).
    let idempotent: Vec<bool> = tools().iter().map(|t| t.idempotent()).collect();
    assert_eq!(idempotent, [true, true, true, false, false, false]);
}

#[test]
fn specs_snapshot() {
    for tool in tools() {
        insta::assert_json_snapshot!(format!("spec_{}", tool.name()), spec(tool.as_ref()));
    }
}

/// The committed `tools/<name>.json` equals the live tool. Run with
/// `UPDATE_TOOL_SPECS=1` to rewrite them after a reviewed wording change.
#[test]
fn committed_specs_match_live_tools() {
    assert_committed_specs(
        env!("CARGO_MANIFEST_DIR"),
        &tools(),
        "cargo test -p dsh-tool-workspace --test specs",
    );
}

/// Check the input struct `T` of `name` against its schema.
fn check<T: serde::de::DeserializeOwned + std::fmt::Debug>(
    name: &str,
    valid: &[Value],
    structural: &[Value],
    bounds: &[Value],
) {
    check_input::<T>(&tools(), name, valid, structural, bounds);
}

#[test]
fn input_structs_match_their_schemas() {
    check::<ReadFileInput>(
        "read_file",
        &[
            json!({"path": "a"}),
            json!({"path": "a", "start_line": 3, "line_count": 10}),
        ],
        &[
            json!({}),
            json!({"path": "a", "offset": 1}),
            json!({"path": 1}),
            json!({"path": "a", "start_line": "3"}),
        ],
        &[
            json!({"path": ""}),
            json!({"path": "a", "start_line": 0}),
            json!({"path": "a", "line_count": 0}),
        ],
    );
    check::<ListFilesInput>(
        "list_files",
        &[
            json!({}),
            json!({"path": "src", "patterns": ["*.rs"], "limit": 10}),
        ],
        &[
            json!({"glob": "*.rs"}),
            json!({"patterns": "*.rs"}),
            json!({"limit": -1}),
        ],
        &[
            json!({"limit": 0}),
            json!({"limit": 1001}),
            json!({"patterns": [""]}),
        ],
    );
    check::<GrepInput>(
        "grep",
        &[
            json!({"pattern": "fn"}),
            json!({"pattern": "fn", "path": "src", "globs": ["*.rs"], "context": 2, "case_insensitive": true, "max_matches": 5}),
        ],
        &[
            json!({}),
            json!({"pattern": "fn", "regex": true}),
            json!({"pattern": "fn", "context": "2"}),
        ],
        &[
            json!({"pattern": ""}),
            json!({"pattern": "fn", "context": 11}),
            json!({"pattern": "fn", "max_matches": 0}),
            json!({"pattern": "fn", "max_matches": 201}),
        ],
    );
    check::<EditFileInput>(
        "edit_file",
        &[json!({"path": "a", "old_string": "x", "new_string": ""})],
        &[
            json!({"path": "a", "old_string": "x"}),
            json!({"path": "a", "old_string": "x", "new_string": "y", "replace_all": true}),
        ],
        &[json!({"path": "a", "old_string": "", "new_string": "y"})],
    );
    check::<WriteFileInput>(
        "write_file",
        &[json!({"path": "a", "content": ""})],
        &[
            json!({"path": "a"}),
            json!({"path": "a", "content": "x", "mode": 420}),
        ],
        &[json!({"path": "", "content": "x"})],
    );
    check::<ShellInput>(
        "shell",
        &[
            json!({"command": "ls"}),
            json!({"command": "ls", "cwd": "src", "timeout_ms": 1000}),
        ],
        &[
            json!({}),
            json!({"command": "ls", "env": {}}),
            json!({"command": ["ls"]}),
        ],
        &[
            json!({"command": ""}),
            json!({"command": "ls", "timeout_ms": 0}),
            json!({"command": "ls", "timeout_ms": 600001}),
        ],
    );
}
