//! Identifiers: the session id that names an agent, its log and its file, and
//! the ids of inbox messages and tool calls. A [`SessionId`] is validated
//! before it can exist, so that no id can ever name a path outside a store's
//! directory; this module must never accept an id it would not be safe to use
//! as a file name. Fresh ids are minted from an [`IdSource`]: the OS random
//! generator by default ([`RandomIds`], what `generate` uses), or a source a
//! host injects so that a replay or a journaling engine mints the same ids
//! again ([`SeededIds`]).

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
        Self::mint(&RandomIds)
    }

    /// Mint an id from `source` (`s-` followed by 32 hex digits).
    pub fn mint(source: &dyn IdSource) -> Self {
        Self(minted("s-", source.next_bits()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Where fresh ids come from: 128 bits per id, which are minted as a
/// version-4 UUID (so an id has the same form whatever its source).
pub trait IdSource: Send + Sync + fmt::Debug {
    /// The bits of the next id.
    fn next_bits(&self) -> u128;
}

/// The OS random generator: ids no other process mints.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomIds;

impl IdSource for RandomIds {
    fn next_bits(&self) -> u128 {
        uuid::Uuid::new_v4().as_u128()
    }
}

/// A deterministic source: the same seed mints the same ids in the same
/// order (splitmix64, two draws per id), for tests and replays.
#[derive(Debug, Default)]
pub struct SeededIds {
    state: std::sync::atomic::AtomicU64,
}

impl SeededIds {
    /// A source that starts from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: std::sync::atomic::AtomicU64::new(seed),
        }
    }

    fn next_u64(&self) -> u64 {
        const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut z = self
            .state
            .fetch_add(GAMMA, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl IdSource for SeededIds {
    fn next_bits(&self) -> u128 {
        (u128::from(self.next_u64()) << 64) | u128::from(self.next_u64())
    }
}

/// `prefix` (at most 8 bytes) followed by the 32 lower-case hex digits of
/// the version-4 UUID made of `bits`, in one allocation: composed on the
/// stack and copied once into the shared text (a `format!` grew a `String`
/// several times and then copied it into the `Arc`).
fn minted(prefix: &str, bits: u128) -> Arc<str> {
    const HEX: usize = uuid::fmt::Simple::LENGTH;
    let mut text = [0u8; 8 + HEX];
    let (head, tail) = text.split_at_mut(prefix.len());
    head.copy_from_slice(prefix.as_bytes());
    let hex = uuid::Builder::from_random_bytes(bits.to_be_bytes())
        .into_uuid()
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
                Self::mint(&RandomIds)
            }

            /// Mint an id from `source`.
            pub fn mint(source: &dyn IdSource) -> Self {
                Self(minted($prefix, source.next_bits()))
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

    /// A seeded source mints the same ids again, in the form random ids
    /// have (a version-4 UUID); another seed mints others.
    #[test]
    fn seeded_ids_repeat_and_keep_the_minted_form() {
        let mint = |seed| {
            let source = SeededIds::new(seed);
            (0..50)
                .map(|_| CallId::mint(&source).as_str().to_owned())
                .collect::<Vec<_>>()
        };
        let first = mint(1);
        assert_eq!(first, mint(1));
        assert_ne!(first, mint(2));
        let distinct: std::collections::HashSet<_> = first.iter().collect();
        assert_eq!(distinct.len(), first.len());
        for id in &first {
            let uuid = uuid::Uuid::parse_str(&id[2..]).unwrap();
            assert_eq!(uuid.get_version_num(), 4, "{id}");
        }
        let random = RandomIds.next_bits();
        let random = uuid::Uuid::from_u128(random);
        assert_eq!(random.get_version_num(), 4);
        let session = SessionId::mint(&SeededIds::new(9));
        assert_eq!(session, SessionId::mint(&SeededIds::new(9)));
        assert!(SessionId::new(session.as_str()).is_ok());
    }
}
