//! The structured-output capture tool. A child asked for structured output
//! gets this tool, bound to the exact schema: arguments that do not match go
//! back to the model as an error it can fix (the harness validates them
//! against the tool's input schema), and a valid capture is kept and ends the
//! turn. The runtime reads the captured value when the activation settles.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use dsh_core::schema::ObjectSchema;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;

/// The capture tool's name.
pub const CAPTURE_TOOL: &str = "submit_result";

/// A capture tool and the slot it fills.
#[derive(Debug)]
pub struct CaptureTool {
    schema: ObjectSchema,
    slot: Mutex<Option<Value>>,
}

impl CaptureTool {
    /// A capture tool for `schema`.
    pub fn new(schema: ObjectSchema) -> Arc<Self> {
        Arc::new(Self {
            schema,
            slot: Mutex::new(None),
        })
    }

    /// The captured value, if the model submitted one.
    pub fn captured(&self) -> Option<Value> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl Tool for CaptureTool {
    fn name(&self) -> &str {
        CAPTURE_TOOL
    }

    fn description(&self) -> String {
        "Submit your final result. Call this once, when the task is done, with arguments \
         that match the schema; your turn ends when the result is accepted."
            .into()
    }

    fn input_schema(&self) -> Value {
        self.schema.as_value().clone()
    }

    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        // The harness validated `input` already; check again so the slot can
        // never hold a value outside the schema whatever loop runs the tool.
        self.schema
            .validate(&input)
            .map_err(|err| ToolError::new(format!("{err}. Fix the arguments and call again.")))?;
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(input);
        Ok(ToolOutput {
            end_turn: true,
            ..ToolOutput::text("Result recorded.")
        })
    }
}
