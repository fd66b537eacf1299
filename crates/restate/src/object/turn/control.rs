//! What the engine's tools on the cluster share: their input checked
//! against their schema as a local harness checks it (the same error
//! texts) and parsed as the local tools parse it, and a refusal as the
//! error result the local tools give ([`ControlError`]'s sentences).

use std::collections::HashMap;
use std::sync::OnceLock;

use dsh_core::schema::JsonSchema;
use dsh_core::{ToolCall, ToolOutput};
use dsh_harness::tools::invalid_arguments;
use dsh_tool_subagent_control::ControlError;
use serde::de::DeserializeOwned;

use super::specs::engine_specs;

/// The engine tools' input schemas, compiled once.
fn schemas() -> &'static HashMap<String, JsonSchema> {
    static SCHEMAS: OnceLock<HashMap<String, JsonSchema>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        engine_specs()
            .into_iter()
            .filter_map(|spec| {
                // The local tools' schemas compile (their own tests say so).
                let schema = JsonSchema::compile(spec.input_schema).ok()?;
                Some((spec.name, schema))
            })
            .collect()
    })
}

/// Whether `call`'s input fits its tool's schema; the local harness's
/// error result when it does not.
pub(super) fn checked(call: &ToolCall) -> Result<(), ToolOutput> {
    let name = &call.name;
    let input = call.input.to_value().map_err(|bad| {
        ToolOutput::error(format!(
            "Invalid arguments for `{name}`: {bad}. Fix the arguments and call the tool again."
        ))
    })?;
    match schemas().get(name) {
        Some(schema) => schema
            .validate(&input)
            .map_err(|bad| ToolOutput::error(invalid_arguments(name, bad))),
        None => Ok(()),
    }
}

/// The input of `call`, or the local tools' error result for input that
/// does not fit their struct.
pub(super) fn input<T: DeserializeOwned>(call: &ToolCall) -> Result<T, ToolOutput> {
    call.input.parse().map_err(|bad| {
        ToolOutput::error(format!(
            "Invalid arguments for `{}`: {bad}. Fix the arguments and call the tool again.",
            call.name
        ))
    })
}

/// A refusal as the model reads it.
pub(super) fn refused(error: ControlError) -> ToolOutput {
    ToolOutput::error(error.to_string())
}
