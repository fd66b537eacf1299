//! Identifiers: the session id that names an agent, its log and its file, and
//! the ids of inbox messages and tool calls. A [`SessionId`] is validated
//! before it can exist, so that no id can ever name a path outside a store's
//! directory; this module must never accept an id it would not be safe to use
//! as a file name.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::CoreError;

/// The longest session id accepted, in bytes.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// The identity shared by a live agent, its session and its durable log.
///
/// A session id is 1 to [`MAX_SESSION_ID_LEN`] bytes of ASCII letters, digits,
/// `-`, `_` and `.`, and does not start with `.`: it can never be `..`, hold a
/// path separator or name a hidden file, so a store may use it as a file name
/// as it is. Cloning is cheap (a shared string).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// Validate `id` and wrap it.
    ///
    /// # Errors
    /// [`CoreError::InvalidSessionId`] saying which rule the text breaks.
    pub fn new(id: impl AsRef<str>) -> Result<Self, CoreError> {
        let id = id.as_ref();
        validate_session_id(id)?;
        Ok(Self(Arc::from(id)))
    }

    /// Mint a fresh random id (`s-` followed by 32 hex digits).
    pub fn generate() -> Self {
        Self(minted("s-"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `prefix` (at most 8 bytes) followed by the 32 lower-case hex digits of
/// a fresh random UUID, in one allocation: composed on the stack and copied
/// once into the shared text (a `format!` grew a `String` several times and
/// then copied it into the `Arc`).
fn minted(prefix: &str) -> Arc<str> {
    const HEX: usize = uuid::fmt::Simple::LENGTH;
    let mut text = [0u8; 8 + HEX];
    let (head, tail) = text.split_at_mut(prefix.len());
    head.copy_from_slice(prefix.as_bytes());
    let hex = uuid::Uuid::new_v4()
        .simple()
        .encode_lower(&mut tail[..HEX])
        .len();
    let text = &text[..prefix.len() + hex];
    // ASCII prefix and hex digits: always UTF-8.
    Arc::from(std::str::from_utf8(text).unwrap_or_default())
}

fn validate_session_id(id: &str) -> Result<(), CoreError> {
    let reason = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_SESSION_ID_LEN {
        Some("it is longer than 128 bytes")
    } else if id.starts_with('.') {
        Some("it starts with `.`")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        Some("only ASCII letters, digits, `-`, `_` and `.` are allowed")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(CoreError::InvalidSessionId {
            id: id.chars().take(MAX_SESSION_ID_LEN + 8).collect(),
            reason,
        }),
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.0)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for SessionId {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Validated straight from the input text: no intermediate `String`.
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SessionId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a session id")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<SessionId, E> {
                SessionId::new(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

macro_rules! opaque_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        // Straight from the input text into the shared form: serde's own
        // `Arc<str>` goes through a `String` and copies it again.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " string"))
                    }
                    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<$name, E> {
                        Ok($name(Arc::from(text)))
                    }
                }
                deserializer.deserialize_str(Visitor)
            }
        }

        impl $name {
            /// Wrap an existing id (any non-empty text; ids minted elsewhere are kept as they are).
            pub fn new(id: impl Into<Arc<str>>) -> Self {
                Self(id.into())
            }

            /// Mint a fresh random id.
            pub fn generate() -> Self {
                Self(minted($prefix))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }
    };
}

opaque_id!(
    /// The durable identity of one inbox message: accepted, claimed and
    /// discarded events name it, and it is the receipt a sender gets.
    MessageId,
    "m-"
);

opaque_id!(
    /// Correlates a model's tool call with its result.
    CallId,
    "c-"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_ids() {
        for ok in ["a", "s-0123abcd", "lead", "A.b_c-9", &"x".repeat(128)] {
            assert_eq!(
                SessionId::new(ok).map(|id| id.to_string()).ok(),
                Some(ok.to_string())
            );
        }
    }

    #[test]
    fn rejects_ids_that_could_escape_a_directory() {
        let long = "x".repeat(129);
        for (bad, why) in [
            ("", "empty"),
            ("..", "starts with"),
            (".hidden", "starts with"),
            ("a/b", "only ASCII"),
            ("a\\b", "only ASCII"),
            ("a b", "only ASCII"),
            ("é", "only ASCII"),
            ("a\0b", "only ASCII"),
            (long.as_str(), "longer"),
        ] {
            let err = SessionId::new(bad).expect_err(bad);
            assert_eq!(err.code(), "INVALID_SESSION_ID");
            assert!(err.to_string().contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<SessionId>("\"../etc\"").is_err());
        let id: SessionId = serde_json::from_str("\"child-1\"").unwrap();
        assert_eq!(id.as_str(), "child-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"child-1\"");
    }

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = SessionId::generate();
        let b = SessionId::generate();
        assert_ne!(a, b);
        assert!(SessionId::new(a.as_str()).is_ok());
        assert_ne!(MessageId::generate(), MessageId::generate());
        // The documented forms: a prefix and 32 lower-case hex digits.
        let hex = |text: &str| {
            text.len() == 32
                && text
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        for (id, prefix) in [
            (a.as_str().to_owned(), "s-"),
            (MessageId::generate().as_str().to_owned(), "m-"),
            (CallId::generate().as_str().to_owned(), "c-"),
        ] {
            let digits = id.strip_prefix(prefix).unwrap_or_else(|| panic!("{id}"));
            assert!(hex(digits), "{id}");
        }
    }
}
