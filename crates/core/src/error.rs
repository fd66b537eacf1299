//! Errors of the core vocabulary itself (the seams define their own: see
//! [`AgentError`](crate::agent::AgentError), [`StoreError`](crate::store::StoreError),
//! [`SchemaError`](crate::schema::SchemaError)).

/// A value that the core vocabulary refuses to construct.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A session id that could not safely name a file.
    #[error("invalid session id {id:?}: {reason}")]
    InvalidSessionId {
        /// The offending text (cut to a bounded length).
        id: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
}

impl CoreError {
    /// A stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidSessionId { .. } => "INVALID_SESSION_ID",
        }
    }
}
