#![doc = include_str!("../README.md")]

mod activation;
mod admission;
pub mod budget;
mod capture;
pub mod catalog;
mod cold;
mod compose;
mod drain;
mod error;
mod events;
mod external;
mod footprint;
mod ids;
mod input;
mod list_entry;
mod messaging;
mod names;
mod notice;
mod owned;
pub mod progress;
mod prompt;
mod provider;
mod recovery;
mod request;
pub mod result;
pub mod resume;
mod runtime;
mod start;
mod tree;

pub use activation::SubagentActivation;
pub use budget::{BudgetPolicy, ChildUsage, Limits, USAGE_EVENT, UsageRecord};
pub use capture::CAPTURE_TOOL;
pub use catalog::{
    CATALOG_EVENT, CATALOG_KINDS, Catalog, CatalogEntry, ChildMode, catalog_payload, fold_catalog,
};
pub use error::{AdmissionError, DeliveryError, InfraError, RegistryError, SubagentError};
pub use events::{RunInfo, RunOutcome, SubagentEvent};
pub use external::{
    ExternalOutcome, FOREGROUND_EVENT, MAX_OUTCOME_OUTPUT_BYTES, OUTCOME_EVENT, RESUME_EVENT,
    heard_from,
};
pub use footprint::RuntimeFootprint;
pub use messaging::{
    InterruptAuthority, PromptDelivery, SessionAuthoriser, TrustedHost, UserPrompt,
};
pub use names::{MemberNames, ROOT_NAME, validate_name};
pub use notice::{QuietTree, render_notice};
pub use progress::{
    CurrentActivity, PROGRESS_BUFFER, ProgressEvent, ProgressItem, ProgressKind, ProgressMember,
    ProgressSink, ProgressStream, TextFeed, ToolInProgress,
};
pub use prompt::{PromptReceipt, canonical_time_zone};
pub use provider::{
    AgentRoute, ContinuableCreateRequest, ContinuableCreateSpec, PrepareContinuable,
    ProviderDescriptor, ResolvedStartRequest, StartExternal, SubagentCapabilities,
    SubagentProvider, SubagentRun,
};
pub use request::{ActivationSpec, DEFAULT_MAX_DEPTH, Delivery, MaxDepth, StartRequest};
pub use result::SubagentResult;
pub use resume::{
    MemberResume, PARKED_EVENT, ResumeReason, ResumedMember, ResumedTree, TreeResume,
};
pub use runtime::{ProviderRegistration, RuntimeConfig, SubagentRuntime, TREE_EVENTS_BUFFER};
pub use tree::{ChildActivity, DescendantRow, RowDiagnostic, list_stored_descendants};
