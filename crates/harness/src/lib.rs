//! `dsh-harness` is the reference implementation of the `dsh-core` seams,
//! what a host runs when it does not bring its own agent loop: the agent loop
//! ([`LoopAgent`], driven by [`Harness`], the [`AgentFactory`](dsh_core::AgentFactory)),
//! the scoped tool registry, system-prompt sections with strict `{{var}}`
//! templates, the durable JSONL session store (the embedded default) and an
//! in-memory one, and a scripted model for tests and offline demos. It knows
//! nothing of subagents: the subagent runtime drives it only through the core
//! traits, so any other loop can take its place.

pub mod agent;
pub mod harness;
pub mod prompt;
pub mod scripted;
pub mod store;
pub mod tools;

pub use agent::LoopAgent;
pub use harness::{Harness, HarnessBuilder, ModelRoutes};
pub use prompt::SystemPrompt;
pub use scripted::{Scripted, ScriptedModel};
pub use store::{JsonlStore, MemoryStore};
pub use tools::{ScopedTools, ToolRegistry, ToolRegistryError};
