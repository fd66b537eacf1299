//! The scoped tool registry (behaviour H7): the host's tools with their input
//! schemas compiled once, narrowed for one agent by its preset's tool set and
//! its tool restriction, plus the agent's own extra tools. A restricted tool
//! vanishes from the model-visible list AND refuses to execute if called
//! anyway; naming an unknown tool in a preset or restriction is an error.
//! Running a call must never fail or panic outward: every call, whatever goes
//! wrong (unknown or hidden tool, arguments that fail the schema, a tool error,
//! a panic, cancellation), produces a [`ToolOutput`] for the model, and a tool
//! that is hidden or given invalid arguments must never execute.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use dsh_core::schema::JsonSchema;
use dsh_core::{Agent, Tool, ToolCall, ToolContext, ToolOutput, ToolRestriction, ToolSpec};
use futures::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A registered tool: the tool, its compiled input schema and its spec.
struct Entry {
    tool: Arc<dyn Tool>,
    schema: JsonSchema,
    spec: ToolSpec,
}

impl Entry {
    /// Compile `tool`'s input schema and take its spec.
    fn compile(tool: Arc<dyn Tool>) -> Result<Self, ToolRegistryError> {
        let name = tool.name().to_owned();
        let input_schema = tool.input_schema();
        let schema = JsonSchema::compile(input_schema.clone()).map_err(|err| {
            ToolRegistryError::InvalidSchema {
                name: name.clone(),
                message: err.to_string(),
            }
        })?;
        let spec = ToolSpec {
            name,
            description: tool.description(),
            input_schema,
        };
        Ok(Self { tool, schema, spec })
    }
}

/// The host's tools, with their input schemas compiled once.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    entries: BTreeMap<String, Arc<Entry>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ToolRegistry")
            .field(&self.names().collect::<Vec<_>>())
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `tool`, compiling its input schema.
    ///
    /// # Errors
    /// [`ToolRegistryError::Duplicate`] when a tool of that name is already
    /// registered, [`ToolRegistryError::InvalidSchema`] when its input schema
    /// does not compile. The registry is unchanged on error.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolRegistryError> {
        if self.entries.contains_key(tool.name()) {
            return Err(ToolRegistryError::Duplicate(tool.name().to_owned()));
        }
        let entry = Entry::compile(tool)?;
        self.entries
            .insert(entry.spec.name.clone(), Arc::new(entry));
        Ok(())
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Why a tool could not be registered or a tool scope composed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolRegistryError {
    /// Two tools share a name (in the registry, among an agent's extra tools,
    /// or an extra tool and a visible host tool).
    #[error("tool `{0}` is already registered")]
    Duplicate(String),
    /// The tool's input schema does not compile.
    #[error("tool `{name}` has an invalid input schema: {message}")]
    InvalidSchema {
        /// The tool's name.
        name: String,
        /// What the schema compiler said.
        message: String,
    },
    /// A preset or restriction names tools that do not exist (sorted).
    #[error("tool restriction names unknown tool(s): {}", .0.join(", "))]
    UnknownTools(Vec<String>),
}

impl ToolRegistryError {
    /// A stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Duplicate(_) => "DUPLICATE_TOOL",
            Self::InvalidSchema { .. } => "INVALID_TOOL_SCHEMA",
            Self::UnknownTools(_) => "UNKNOWN_TOOL",
        }
    }
}

/// A tool in one agent's scope, and whether the agent may see and run it.
struct Slot {
    entry: Arc<Entry>,
    visible: bool,
}

impl Slot {
    /// Visible to this agent and available now.
    fn offered(&self) -> bool {
        self.visible && self.entry.tool.is_available()
    }
}

/// One agent's view of the tools: the host registry narrowed by a preset's
/// tool set and a restriction, plus the agent's own extra tools. Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct ScopedTools {
    slots: Arc<BTreeMap<String, Slot>>,
}

impl fmt::Debug for ScopedTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (visible, hidden): (Vec<_>, Vec<_>) = self.slots.iter().partition(|(_, s)| s.visible);
        let names = |slots: Vec<(&String, &Slot)>| -> Vec<String> {
            slots.into_iter().map(|(name, _)| name.clone()).collect()
        };
        f.debug_struct("ScopedTools")
            .field("visible", &names(visible))
            .field("hidden", &names(hidden))
            .finish()
    }
}

impl ScopedTools {
    /// Compose an agent's scope. `preset`: the names the preset exposes
    /// (`None` = all host tools); `restriction`: allow/deny on top; `extra`:
    /// per-agent tools that are always visible, whatever the preset or
    /// restriction says. Extra tools shadow nothing: a name clash with a
    /// visible host tool (or another extra tool) is
    /// [`ToolRegistryError::Duplicate`]; an extra tool may take the name of a
    /// hidden host tool, which it then replaces for this agent.
    ///
    /// # Errors
    /// [`ToolRegistryError::UnknownTools`] listing (sorted) every name in
    /// `preset` or `restriction` that is neither a host tool nor an extra
    /// tool; [`ToolRegistryError::Duplicate`] as above;
    /// [`ToolRegistryError::InvalidSchema`] for an extra tool whose input
    /// schema does not compile.
    pub fn compose(
        registry: &ToolRegistry,
        preset: Option<&BTreeSet<String>>,
        restriction: Option<&ToolRestriction>,
        extra: &[Arc<dyn Tool>],
    ) -> Result<Self, ToolRegistryError> {
        let extra_names: BTreeSet<&str> = extra.iter().map(|tool| tool.name()).collect();
        let unknown: BTreeSet<&String> = preset
            .into_iter()
            .flatten()
            .chain(restriction.into_iter().flat_map(ToolRestriction::names))
            .filter(|name| {
                !registry.entries.contains_key(name.as_str())
                    && !extra_names.contains(name.as_str())
            })
            .collect();
        if !unknown.is_empty() {
            return Err(ToolRegistryError::UnknownTools(
                unknown.into_iter().cloned().collect(),
            ));
        }

        let mut slots: BTreeMap<String, Slot> = registry
            .entries
            .iter()
            .map(|(name, entry)| {
                let visible = preset.is_none_or(|names| names.contains(name))
                    && restriction.is_none_or(|r| r.permits(name));
                let slot = Slot {
                    entry: Arc::clone(entry),
                    visible,
                };
                (name.clone(), slot)
            })
            .collect();
        let mut extras = BTreeSet::new();
        for tool in extra {
            let name = tool.name();
            let clashes = slots.get(name).is_some_and(|slot| slot.visible);
            if clashes || !extras.insert(name) {
                return Err(ToolRegistryError::Duplicate(name.to_owned()));
            }
            let entry = Arc::new(Entry::compile(Arc::clone(tool))?);
            let slot = Slot {
                entry,
                visible: true,
            };
            slots.insert(name.to_owned(), slot);
        }
        Ok(Self {
            slots: Arc::new(slots),
        })
    }

    /// Model-visible specs (name, description, input schema), sorted by name:
    /// the visible tools that are available now ([`Tool::is_available`]) and
    /// offered to `agent` ([`Tool::offered_to`]), each with its current
    /// description.
    pub fn specs(&self, agent: &dyn Agent) -> Vec<ToolSpec> {
        self.slots
            .values()
            .filter(|slot| slot.offered() && slot.entry.tool.offered_to(agent))
            .map(|slot| ToolSpec {
                description: slot.entry.tool.description(),
                ..slot.entry.spec.clone()
            })
            .collect()
    }

    /// Whether the agent may see and run the tool called `name` now.
    pub fn is_visible(&self, name: &str) -> bool {
        self.slots.get(name).is_some_and(Slot::offered)
    }

    /// Run one call; always produces a result for the model, never an error
    /// or an escaping panic:
    /// - a name that is neither a host nor an extra tool: "Unknown tool `x`.
    ///   Available tools: a, b." (the visible ones);
    /// - a host tool hidden by the preset or restriction: "Tool `x` is not
    ///   available to this agent." (it does not execute);
    /// - input failing the schema: "Invalid arguments for `x`: `path`:
    ///   `message`; ... . Fix the arguments and call the tool again." with
    ///   every violation, sorted by path (it does not execute);
    /// - a [`dsh_core::ToolError`]: an error result with its message;
    /// - a panic inside `execute`: "Tool `x` failed unexpectedly." (logged);
    /// - `cancel` fired before or while it runs: "Tool `x` was cancelled."
    ///   (the tool's future is dropped, or never started).
    ///
    /// # Cancel safety
    /// Dropping the future drops the tool's `execute` future where it
    /// stands (see [`Tool`]'s own cancel safety); nothing is recorded here.
    pub async fn call(
        &self,
        call: &ToolCall,
        agent: Arc<dyn Agent>,
        cancel: CancellationToken,
    ) -> ToolOutput {
        self.run(call, self.prepare(call, agent.as_ref()), agent, cancel)
            .await
    }

    /// Run a step's calls; the results are in call order. Consecutive calls
    /// to tools whose [`Tool::concurrency_safe`] is true run concurrently;
    /// any other call runs alone, after everything before it and before
    /// everything after it. Unknown, hidden and invalid calls count as safe
    /// (they do not execute).
    ///
    /// # Cancel safety
    /// As [`ScopedTools::call`], for every call still running; calls after
    /// the drop point never start.
    pub async fn call_all(
        &self,
        calls: &[ToolCall],
        agent: Arc<dyn Agent>,
        cancel: CancellationToken,
    ) -> Vec<ToolOutput> {
        let mut results = Vec::with_capacity(calls.len());
        let mut batch = Vec::new();
        for call in calls {
            let prepared = self.prepare(call, agent.as_ref());
            let safe = prepared
                .as_ref()
                .map_or(true, |(entry, _)| entry.tool.concurrency_safe());
            let run = self.run(call, prepared, Arc::clone(&agent), cancel.clone());
            if safe {
                batch.push(run);
            } else {
                results.extend(futures::future::join_all(std::mem::take(&mut batch)).await);
                results.push(run.await);
            }
        }
        results.extend(futures::future::join_all(batch).await);
        results
    }

    /// The tool to execute for `call` and its parsed input, or the result
    /// that replaces executing it.
    fn prepare(
        &self,
        call: &ToolCall,
        agent: &dyn Agent,
    ) -> Result<(Arc<Entry>, Value), ToolOutput> {
        let name = &call.name;
        let Some(slot) = self.slots.get(name) else {
            let visible: Vec<&str> = self
                .slots
                .iter()
                .filter(|(_, slot)| slot.offered())
                .map(|(name, _)| name.as_str())
                .collect();
            let available = if visible.is_empty() {
                "No tools are available.".to_owned()
            } else {
                format!("Available tools: {}.", visible.join(", "))
            };
            return Err(ToolOutput::error(format!(
                "Unknown tool `{name}`. {available}"
            )));
        };
        if !slot.visible {
            tracing::warn!(tool = %name, call_id = %call.call_id, "call to a tool hidden from this agent refused");
            return Err(ToolOutput::error(format!(
                "Tool `{name}` is not available to this agent."
            )));
        }
        if !slot.entry.tool.is_available() {
            return Err(ToolOutput::error(format!(
                "Tool `{name}` is not available right now."
            )));
        }
        if !slot.entry.tool.offered_to(agent) {
            return Err(ToolOutput::error(format!(
                "Tool `{name}` is not available to this agent."
            )));
        }
        // The one place a call's input is parsed: the log and the
        // transcript keep it as text.
        let input = call.input.to_value().map_err(|err| {
            ToolOutput::error(format!(
                "Invalid arguments for `{name}`: {err}. Fix the arguments and call the tool again."
            ))
        })?;
        if let Err(err) = slot.entry.schema.validate(&input) {
            return Err(ToolOutput::error(invalid_arguments(name, err)));
        }
        Ok((Arc::clone(&slot.entry), input))
    }

    /// Execute a prepared call, turning every outcome into a result.
    async fn run(
        &self,
        call: &ToolCall,
        prepared: Result<(Arc<Entry>, Value), ToolOutput>,
        agent: Arc<dyn Agent>,
        cancel: CancellationToken,
    ) -> ToolOutput {
        let (entry, input) = match prepared {
            Ok(prepared) => prepared,
            Err(output) => return output,
        };
        let name = &call.name;
        let cancelled = || ToolOutput::error(format!("Tool `{name}` was cancelled."));
        if cancel.is_cancelled() {
            return cancelled();
        }
        let ctx = ToolContext {
            agent,
            call_id: call.call_id.clone(),
            cancel: cancel.clone(),
        };
        let execution = AssertUnwindSafe(entry.tool.execute(input, ctx)).catch_unwind();
        let outcome = tokio::select! {
            biased;
            () = cancel.cancelled() => return cancelled(),
            outcome = execution => outcome,
        };
        match outcome {
            Ok(Ok(output)) => output,
            Ok(Err(err)) => ToolOutput::error(err.0),
            Err(payload) => {
                tracing::error!(
                    tool = %name,
                    call_id = %call.call_id,
                    panic = panic_message(payload.as_ref()),
                    "tool panicked"
                );
                ToolOutput::error(format!("Tool `{name}` failed unexpectedly."))
            }
        }
    }
}

/// The text of a panic payload, when it has one.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-text panic payload)")
}

/// What a call whose input fails its tool's schema gets: every violation,
/// sorted by path (so the text does not depend on the validator's keyword
/// order). A host that runs a tool outside [`ScopedTools`] (a Restate
/// worker's engine tools) answers its calls alike.
pub fn invalid_arguments(name: &str, err: dsh_core::schema::ValueError) -> String {
    let mut violations = err.violations;
    violations.sort_by(|a, b| (&a.instance_path, &a.message).cmp(&(&b.instance_path, &b.message)));
    let violations: Vec<String> = violations
        .iter()
        .map(|v| {
            let path = if v.instance_path.is_empty() {
                "(root)"
            } else {
                v.instance_path.as_str()
            };
            format!("{path}: {}", v.message)
        })
        .collect();
    format!(
        "Invalid arguments for `{name}`: {}. Fix the arguments and call the tool again.",
        violations.join("; ")
    )
}

#[cfg(test)]
mod tests;
