//! Content blocks: what a message carries. Text and images are the two kinds
//! every part of the system understands; this module holds data only.

use serde::{Deserialize, Deserializer, Serialize};

/// One block of message content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

// Hand-written so that a block parses in one pass: serde's derive for an
// internally tagged enum buffers every block before it reads the tag, which
// made content the costliest part of replaying a log.
impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Kind {
            Text,
            Image,
        }
        #[derive(Deserialize)]
        struct Flat {
            #[serde(rename = "type")]
            kind: Kind,
            text: Option<String>,
            media_type: Option<String>,
            data: Option<String>,
        }
        use serde::de::Error;
        let flat = Flat::deserialize(deserializer)?;
        Ok(match flat.kind {
            Kind::Text => Self::Text {
                text: flat.text.ok_or_else(|| D::Error::missing_field("text"))?,
            },
            Kind::Image => Self::Image {
                media_type: flat
                    .media_type
                    .ok_or_else(|| D::Error::missing_field("media_type"))?,
                data: flat.data.ok_or_else(|| D::Error::missing_field("data"))?,
            },
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_in_any_key_order_and_reject_unknown_kinds() {
        let image = ContentBlock::Image {
            media_type: "image/png".into(),
            data: "AAAA".into(),
        };
        for block in [ContentBlock::text("hi"), image] {
            let json = serde_json::to_string(&block).unwrap();
            assert_eq!(serde_json::from_str::<ContentBlock>(&json).unwrap(), block);
        }
        let reordered: ContentBlock =
            serde_json::from_str(r#"{"text":"x","type":"text"}"#).unwrap();
        assert_eq!(reordered, ContentBlock::text("x"));
        assert!(serde_json::from_str::<ContentBlock>(r#"{"type":"audio"}"#).is_err());
        let missing = serde_json::from_str::<ContentBlock>(r#"{"type":"text"}"#).unwrap_err();
        assert!(missing.to_string().contains("text"), "{missing}");
        for bad in [
            r#"{"text":"x"}"#,
            r#"{"type":"text","text":"x","text":"y"}"#,
            r#"{"type":"text","type":"text","text":"x"}"#,
            r#"{"type":"text","text":null}"#,
            r#"{"type":"image","data":"AAAA"}"#,
            r#"["text","x"]"#,
        ] {
            assert!(serde_json::from_str::<ContentBlock>(bad).is_err(), "{bad}");
        }
        let extra: ContentBlock =
            serde_json::from_str(r#"{"type":"text","text":"x","cache":true}"#).unwrap();
        assert_eq!(extra, ContentBlock::text("x"));
        let escaped: ContentBlock =
            serde_json::from_str(r#"{"type":"text","text":"a\nb\u00e9"}"#).unwrap();
        assert_eq!(escaped, ContentBlock::text("a\nbé"));
    }
}
