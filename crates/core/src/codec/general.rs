//! The general path of a line's read: serde over the whole line, in any key
//! order, with whitespace and unknown keys. A repeated key is refused, as
//! serde's derive refuses it. One visitor serves the full read, the skim and
//! `impl Deserialize for SessionEvent`; this module must never hold a second
//! one.

use std::borrow::Cow;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::Skimmed;
use crate::session::{EventPayload, SessionEvent};

/// Parses a payload straight into the type its `type` tag names (the
/// implementation is generated from the kind table).
pub(super) struct PayloadSeed<'k>(pub(super) &'k str);

/// Which payloads a read builds.
#[derive(Clone, Copy)]
pub(super) enum Build<'w> {
    /// Every payload.
    All,
    /// Only those of these types; any other is checked to be JSON.
    Only(&'w [&'w str]),
}

impl Build<'_> {
    fn wants(self, kind: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(wanted) => wanted.contains(&kind),
        }
    }
}

/// What [`LineVisitor`] read of a line.
pub(super) struct Line {
    pub(super) seq: u64,
    pub(super) time: u64,
    /// The payload, when it was built.
    pub(super) payload: Option<EventPayload>,
}

/// Read `line` as an event.
pub(super) fn event(line: &str) -> serde_json::Result<SessionEvent> {
    let mut deserializer = serde_json::Deserializer::from_str(line);
    let event = SessionEvent::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(event)
}

/// Read `line`'s envelope, building the payloads of the `wanted` types.
pub(super) fn skim(line: &str, wanted: &[&str]) -> serde_json::Result<Skimmed> {
    let mut deserializer = serde_json::Deserializer::from_str(line);
    let read = deserializer.deserialize_map(LineVisitor(Build::Only(wanted)))?;
    deserializer.end()?;
    let event = read.payload.map(|payload| SessionEvent {
        seq: read.seq,
        time: read.time,
        payload,
    });
    Ok(Skimmed {
        seq: read.seq,
        event,
    })
}

/// The fields of an event line.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum LineField {
    Seq,
    Time,
    #[serde(rename = "type")]
    Kind,
    Payload,
    #[serde(other)]
    Unknown,
}

/// One pass over an event line. Lines this crate writes put `type` before
/// `payload`, so the payload is parsed once, straight into its type; a
/// payload met before the type is kept as text and parsed at the end.
pub(super) struct LineVisitor<'w>(pub(super) Build<'w>);

impl<'de> Visitor<'de> for LineVisitor<'_> {
    type Value = Line;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a session event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Line, A::Error> {
        let build = self.0;
        let mut seq: Option<u64> = None;
        let mut time: Option<u64> = None;
        let mut kind: Option<Cow<'de, str>> = None;
        let mut payload: Option<Option<EventPayload>> = None;
        let mut early: Option<Box<RawValue>> = None;
        while let Some(field) = map.next_key::<LineField>()? {
            match field {
                LineField::Seq => once(&mut seq, "seq", || map.next_value())?,
                LineField::Time => once(&mut time, "time", || map.next_value())?,
                LineField::Kind => once(&mut kind, "type", || {
                    map.next_value::<BorrowedStr<'de>>().map(|text| text.0)
                })?,
                LineField::Payload => {
                    if payload.is_some() || early.is_some() {
                        return Err(A::Error::duplicate_field("payload"));
                    }
                    match kind.as_deref() {
                        Some(kind) if build.wants(kind) => {
                            payload = Some(Some(map.next_value_seed(PayloadSeed(kind))?));
                        }
                        Some(_) => {
                            map.next_value::<IgnoredAny>()?;
                            payload = Some(None);
                        }
                        None => early = Some(map.next_value()?),
                    }
                }
                LineField::Unknown => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let seq = seq.ok_or_else(|| A::Error::missing_field("seq"))?;
        let time = time.ok_or_else(|| A::Error::missing_field("time"))?;
        let kind = kind.ok_or_else(|| A::Error::missing_field("type"))?;
        let payload = match (payload, early) {
            (Some(payload), _) => payload,
            (None, Some(raw)) if build.wants(&kind) => {
                let mut deserializer = serde_json::Deserializer::from_str(raw.get());
                let payload = PayloadSeed(&kind)
                    .deserialize(&mut deserializer)
                    .map_err(A::Error::custom)?;
                Some(payload)
            }
            (None, Some(_)) => None,
            (None, None) => return Err(A::Error::missing_field("payload")),
        };
        Ok(Line { seq, time, payload })
    }
}

/// Fill `slot` with `read()`, refusing a field met twice.
fn once<T, E: serde::de::Error>(
    slot: &mut Option<T>,
    name: &'static str,
    read: impl FnOnce() -> Result<T, E>,
) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(read()?);
    Ok(())
}

/// A string borrowed from the input when it has no escapes.
pub(crate) struct BorrowedStr<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for BorrowedStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = BorrowedStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(Text)
    }
}
