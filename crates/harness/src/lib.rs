#![doc = include_str!("../README.md")]

pub mod agent;
mod chunked;
mod finish;
pub mod harness;
pub mod prompt;
pub mod replay;
pub mod scripted;
pub mod store;
pub mod tools;
pub mod turn;

pub use agent::LoopAgent;
pub use harness::{Harness, HarnessBuilder, ModelRoutes, TextObserver};
pub use prompt::SystemPrompt;
pub use scripted::{Scripted, ScriptedModel};
pub use store::{JsonlStore, MemoryStore};
pub use tools::{ScopedTools, ToolRegistry, ToolRegistryError};
