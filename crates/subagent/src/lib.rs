#![doc = include_str!("../README.md")]

mod activation;
mod admission;
mod capture;
pub mod catalog;
mod cold;
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
