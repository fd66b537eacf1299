#![doc = include_str!("../README.md")]

pub mod agent;
pub mod attachment;
pub mod clock;
pub mod codec;
pub mod content;
pub mod error;
pub mod id;
mod json_text;
pub mod message;
pub mod model;
pub mod observe;
pub mod options;
pub mod projection;
pub mod registry;
pub mod schema;
pub mod session;
pub mod stop;
pub mod store;
pub mod tool;

pub use agent::{
    Agent, AgentError, AgentFactory, AgentHandle, AgentRef, AgentSetup, AgentStatus, CancelCause,
    CancelOptions, CreateAgent, Dispose, Epoch, InboxArrival, ResumeAgent,
};
pub use attachment::{
    AdmittedAttachment, AttachmentError, AttachmentId, AttachmentInput, AttachmentRef,
    AttachmentStore,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use content::ContentBlock;
pub use error::CoreError;
pub use id::{CallId, IdSource, MessageId, RandomIds, SeededIds, SessionId};
pub use message::{
    InboxTarget, Message, MessageSource, PromptProvenance, ToolCall, ToolInput, Transcript, Usage,
    UserMessage,
};
pub use model::{
    FinishReason, Model, ModelError, ModelErrorKind, ModelEvent, ModelRequest, ModelStream,
    ToolSpec,
};
pub use options::{AgentOptions, Composition, Preset, PresetCatalog, ToolRestriction};
pub use registry::{AgentRegistry, EpochClaim, Publication, RegistryEvent};
pub use session::{EventPayload, ExtensionPayload, SessionEvent, SessionHeader};
pub use stop::StopReason;
pub use store::{
    Durability, KindEvents, LoadedSession, LogLayer, SessionLog, SessionStore, StoreError,
    StoreLayer, TornTail,
};
pub use tool::{Tool, ToolContext, ToolError, ToolOutput};

/// The cancellation token used across the workspace.
pub use tokio_util::sync::CancellationToken;
