//! Content blocks: what a message carries. Text and images are the two kinds
//! every part of the system understands; this module holds data only.

use serde::{Deserialize, Serialize};

/// One block of message content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, inline as base64.
    Image {
        /// IANA media type, for example `image/png`.
        media_type: String,
        /// The image bytes, base64-encoded.
        data: String,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The text of a text block, `None` for other kinds.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            Self::Image { .. } => None,
        }
    }

    /// Whether this is an image block.
    pub fn is_image(&self) -> bool {
        matches!(self, Self::Image { .. })
    }
}

/// Concatenate the text blocks of `content`, ignoring other kinds.
pub fn joined_text(content: &[ContentBlock]) -> String {
    content.iter().filter_map(ContentBlock::as_text).collect()
}

/// Whether `content` says nothing: no blocks, or only empty text.
pub fn is_blank(content: &[ContentBlock]) -> bool {
    content.iter().all(|block| match block {
        ContentBlock::Text { text } => text.is_empty(),
        ContentBlock::Image { .. } => false,
    })
}
