//! Attachments: images a client sends with a prompt, admitted through a
//! store the host provides ([`AttachmentStore`]) before the message is
//! delivered, and referenced from the durable message by [`AttachmentRef`]
//! (in [`crate::MessageSource::UserPrompt`]); the model sees the content
//! block the store hands back. This module holds the data and the seam
//! only; it stores nothing and never decodes an image itself.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::content::ContentBlock;
use crate::id::SessionId;

/// An attachment's identity in the host's store: opaque (never a path or a
/// URL to be parsed), stable for as long as the store keeps the object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AttachmentId(String);

impl AttachmentId {
    /// An id as the store minted it.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for AttachmentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The durable reference to one admitted attachment, written with the
/// message that carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRef {
    /// Its identity in the store.
    pub id: AttachmentId,
    /// IANA media type the store verified, for example `image/png`.
    pub media_type: String,
    /// Its exact size in bytes.
    pub bytes: u64,
    /// A display name without path information, when the client gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One attachment a prompt asks the store to admit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachmentInput {
    /// An image part of the prompt's content, inline.
    Inline {
        /// Its declared IANA media type.
        media_type: String,
        /// Its bytes, base64-encoded.
        data: String,
    },
    /// An object the client uploaded to the store before prompting.
    Stored(AttachmentId),
}

/// What the store admitted for one input: the durable reference, and the
/// content block the model is shown in its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedAttachment {
    /// The reference the message records.
    pub reference: AttachmentRef,
    /// The block delivered in the message's content.
    pub block: ContentBlock,
}

/// Why an attachment store refused a batch. Each refusal has a stable code
/// ([`AttachmentError::code`]); all but [`AttachmentError::Store`] are the
/// caller's to correct.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttachmentError {
    /// One attachment (or the batch) is larger than the store accepts.
    #[error("an attachment of {bytes} bytes is larger than the {limit} bytes allowed")]
    TooLarge {
        /// Its size.
        bytes: u64,
        /// The store's limit.
        limit: u64,
    },
    /// The store does not accept this media type (or the bytes are not of
    /// the type they declare).
    #[error("attachments of type `{0}` are not accepted")]
    UnsupportedType(String),
    /// No attachment with this id is in the store (or it is not the
    /// session's to use).
    #[error("no attachment `{0}`")]
    Unknown(AttachmentId),
    /// The store itself failed (or none is configured); nothing was
    /// referenced.
    #[error("the attachment store failed: {0}")]
    Store(String),
}

impl AttachmentError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "ATTACHMENT_TOO_LARGE",
            Self::UnsupportedType(_) => "ATTACHMENT_UNSUPPORTED_TYPE",
            Self::Unknown(_) => "ATTACHMENT_NOT_FOUND",
            Self::Store(_) => "ATTACHMENT_STORE_FAILED",
        }
    }
}

/// The host's attachment store: validates and durably keeps what a prompt
/// attaches before the message that references it is written.
#[async_trait]
pub trait AttachmentStore: Send + Sync {
    /// Validate and keep every input of one message to `session`, in
    /// order, all or none: the result has one admitted attachment per
    /// input, in the inputs' order, or the refusal of the batch.
    ///
    /// # Errors
    /// [`AttachmentError::TooLarge`], [`AttachmentError::UnsupportedType`],
    /// [`AttachmentError::Unknown`] for a caller's mistake;
    /// [`AttachmentError::Store`] when the store fails.
    ///
    /// # Cancel safety
    /// A drop may leave objects kept but unreferenced (no message names
    /// them); it never leaves a reference in a log, because the message is
    /// written only after this returns.
    async fn admit(
        &self,
        session: &SessionId,
        inputs: Vec<AttachmentInput>,
    ) -> Result<Vec<AdmittedAttachment>, AttachmentError>;
}
