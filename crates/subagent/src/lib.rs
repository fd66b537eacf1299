//! `dsh-subagent` is the runtime behind the delegation seam: a registry of
//! named providers, capability checks made before any provider code runs,
//! activations (a local continuable child created through the core
//! [`AgentFactory`](dsh_core::AgentFactory), or an external run), the
//! parent-owned durable catalog, agent names, results and settlement
//! notices. It works with any implementation of the core traits; it never
//! depends on a particular agent loop, store or provider.
//!
//! Ownership: before publication the caller's cancellation token (or the
//! caller dropping its future) stops a start and a failure leaves nothing
//! behind; once begun, the work is the runtime's and finishes on its task
//! tracker however the caller goes away; from publication on, the runtime
//! owns each child, its token and its teardown, and callers reach it only
//! through [`SubagentActivation::dispose`].

mod activation;
mod admission;
mod capture;
pub mod catalog;
mod compose;
mod drain;
mod error;
mod events;
mod external;
mod messaging;
mod names;
mod notice;
mod owned;
pub mod progress;
mod provider;
mod request;
pub mod result;
mod runtime;
mod start;
mod tree;

pub use activation::SubagentActivation;
pub use capture::CAPTURE_TOOL;
pub use catalog::{CATALOG_EVENT, Catalog, CatalogEntry, ChildMode, catalog_payload, fold_catalog};
pub use error::{AdmissionError, DeliveryError, InfraError, RegistryError, SubagentError};
pub use events::{RunInfo, RunOutcome, SubagentEvent};
pub use external::RESUME_EVENT;
pub use messaging::{
    InterruptAuthority, PromptDelivery, SessionAuthoriser, TrustedHost, UserPrompt,
};
pub use names::{ROOT_NAME, validate_name};
pub use progress::{
    PROGRESS_BUFFER, ProgressEvent, ProgressItem, ProgressKind, ProgressMember, ProgressSink,
    ProgressStream,
};
pub use provider::{
    AgentRoute, ContinuableCreateRequest, ContinuableCreateSpec, PrepareContinuable,
    ProviderDescriptor, ResolvedStartRequest, StartExternal, SubagentCapabilities,
    SubagentProvider, SubagentRun,
};
pub use request::{ActivationSpec, DEFAULT_MAX_DEPTH, Delivery, MaxDepth, StartRequest};
pub use result::SubagentResult;
pub use runtime::{MemberNames, ProviderRegistration, RuntimeConfig, SubagentRuntime};
pub use tree::{ChildActivity, DescendantRow, RowDiagnostic};
