//! What the model is shown before it calls anything: every tool's name,
//! description and input schema (JSON snapshots), the committed spec files
//! under `tools/` kept equal to the live tools (the API catalogue reads
//! them), and each tool's input struct checked against its own published
//! schema with valid and invalid examples.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::Tool;
use dsh_test_support::specs::{assert_committed_specs, check_input, spec};
use dsh_tool_subagent_control::{
    ControlTools, InterruptAgentInput, ListAgentsInput, ReportInput, RuntimeBinding,
    SendMessageInput, WaitInput,
};
use serde_json::{Value, json};

fn tools() -> Vec<Arc<dyn Tool>> {
    ControlTools::with_binding(&RuntimeBinding::new())
}

#[test]
fn the_five_tools_in_order() {
    let names: Vec<String> = tools().iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(
        names,
        [
            "list_agents",
            "send_message",
            "wait",
            "interrupt_agent",
            "report"
        ]
    );
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
        "cargo test -p dsh-tool-subagent-control --test specs",
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
    check::<ListAgentsInput>(
        "list_agents",
        &[json!({})],
        &[json!({"scope": "children"}), json!("x")],
        // serde reads an empty struct from an empty array too; the schema
        // (checked by the harness before `execute`) does not.
        &[json!([])],
    );
    check::<SendMessageInput>(
        "send_message",
        &[
            json!({"to": "a", "message": "hi"}),
            json!({"to": "a/a1", "message": "hi"}),
        ],
        &[
            json!({"to": "a"}),
            json!({"message": "hi"}),
            json!({"to": "a", "message": "hi", "urgent": true}),
            json!({"to": 1, "message": "hi"}),
            json!({"subagent_id": "a", "message": "hi"}),
        ],
        &[
            json!({"to": "", "message": "hi"}),
            json!({"to": "a", "message": ""}),
        ],
    );
    check::<WaitInput>(
        "wait",
        &[
            json!({}),
            json!({"timeout_ms": 1}),
            json!({"timeout_ms": 600000}),
        ],
        &[
            json!({"timeout_ms": "5"}),
            json!({"timeout_ms": 1.5}),
            json!({"timeout_ms": -1}),
            json!({"timeout": 5}),
        ],
        &[json!({"timeout_ms": 0}), json!({"timeout_ms": 600001})],
    );
    check::<InterruptAgentInput>(
        "interrupt_agent",
        &[json!({"to": "a"})],
        &[
            json!({}),
            json!({"to": "a", "reason": "x"}),
            json!({"to": ["a"]}),
        ],
        &[json!({"to": ""})],
    );
    check::<ReportInput>(
        "report",
        &[json!({"message": "done: see out.txt"})],
        &[
            json!({}),
            json!({"output": "x"}),
            json!({"message": "x", "final": true}),
        ],
        &[json!({"message": ""})],
    );
}
