//! Checks every tool crate runs over what the model is shown: a tool's
//! spec as JSON (name, description, input schema), the committed
//! `tools/<name>.json` files kept equal to the live tools, and a tool's
//! input struct checked against its own published schema with valid and
//! invalid examples. One copy, so the tool crates' spec tests cannot drift
//! apart.

use std::path::Path;
use std::sync::Arc;

use dsh_core::Tool;
use dsh_core::schema::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A tool's spec as the model is shown it and the catalogue reads it, in
/// canonical form: every object's keys sorted, so that the committed files
/// and snapshots are the same whether or not something in the build turned
/// on `serde_json`'s `preserve_order` (a crate tested alone and the whole
/// workspace build the tools with different features).
pub fn spec(tool: &dyn Tool) -> Value {
    canonical(json!({
        "name": tool.name(),
        "description": tool.description(),
        "input_schema": tool.input_schema(),
    }))
}

/// `value` with every object's keys in sorted order, under either
/// `serde_json` map implementation.
pub fn canonical(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key, canonical(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

/// Assert that each `tools/<name>.json` under `manifest_dir` equals the live
/// tool's [`spec`]. With `UPDATE_TOOL_SPECS` set, rewrite them first (after
/// a reviewed wording change); `rerun` is the command the failure names.
///
/// # Panics
/// When a committed spec is missing or stale, or cannot be written.
#[allow(clippy::expect_used)]
pub fn assert_committed_specs(manifest_dir: &str, tools: &[Arc<dyn Tool>], rerun: &str) {
    let dir = Path::new(manifest_dir).join("tools");
    for tool in tools {
        let path = dir.join(format!("{}.json", tool.name()));
        let text = format!(
            "{}\n",
            serde_json::to_string_pretty(&spec(tool.as_ref())).expect("a spec serialises")
        );
        if std::env::var_os("UPDATE_TOOL_SPECS").is_some() {
            std::fs::write(&path, &text).expect("the spec file is written");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            committed,
            text,
            "{} is stale: run `UPDATE_TOOL_SPECS=1 {rerun}`",
            path.display()
        );
    }
}

/// Check the input struct `T` of the tool `name` against its published
/// schema: valid examples pass both the schema and the struct; structural
/// mistakes (unknown, missing or mistyped fields) fail both; value bounds
/// the struct cannot express fail the schema (the tool re-checks them).
///
/// # Panics
/// When no tool is called `name`, its schema does not compile, or an
/// example is judged wrongly.
#[allow(clippy::expect_used)]
pub fn check_input<T: DeserializeOwned + std::fmt::Debug>(
    tools: &[Arc<dyn Tool>],
    name: &str,
    valid: &[Value],
    structural: &[Value],
    bounds: &[Value],
) {
    let tool = tools
        .iter()
        .find(|tool| tool.name() == name)
        .expect("a tool of that name");
    let schema = JsonSchema::compile(tool.input_schema()).expect("the schema compiles");
    for example in valid {
        assert!(schema.is_valid(example), "{name}: schema refused {example}");
        serde_json::from_value::<T>(example.clone())
            .unwrap_or_else(|e| panic!("{name}: struct refused {example}: {e}"));
    }
    for example in structural {
        assert!(!schema.is_valid(example), "{name}: schema took {example}");
        assert!(
            serde_json::from_value::<T>(example.clone()).is_err(),
            "{name}: struct took {example}"
        );
    }
    for example in bounds {
        assert!(!schema.is_valid(example), "{name}: schema took {example}");
    }
}
