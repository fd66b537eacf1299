//! JSON text kept as text: the inside of [`ExtensionPayload`] and
//! [`ToolInput`], values that most readers of a log pass through untouched
//! and only their owner parses. The text is always one valid JSON value on
//! one line (a session log holds one event per line): text that breaks a
//! line between its tokens is kept without that whitespace, everything
//! else exactly as it was given.
//!
//! [`ExtensionPayload`]: crate::ExtensionPayload
//! [`ToolInput`]: crate::ToolInput

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// One JSON value's text, on one line.
#[derive(Clone)]
pub(crate) struct JsonText(Box<RawValue>);

impl JsonText {
    /// `value` serialised.
    pub(crate) fn new<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Self> {
        // Compact, unless `value` holds raw text written across lines.
        serde_json::value::to_raw_value(value).map(Self::on_one_line)
    }

    /// A value tree serialised.
    pub(crate) fn from_value(value: &Value) -> Self {
        // Every `Value` serialises (its map keys are strings); the fallback
        // is never taken.
        Self::new(value).unwrap_or_else(|_| Self(RawValue::NULL.to_owned()))
    }

    /// The text `text`, checked to be one JSON value; the whitespace around
    /// it is not kept.
    pub(crate) fn from_json(text: &str) -> serde_json::Result<Self> {
        serde_json::from_str::<&RawValue>(text).map(|raw| Self::on_one_line(raw.to_owned()))
    }

    /// `raw` as it is: the codec's writer's text, one value on one line.
    pub(crate) fn from_raw(raw: Box<RawValue>) -> Self {
        Self(raw)
    }

    /// The text.
    pub(crate) fn get(&self) -> &str {
        self.0.get()
    }

    /// The text parsed into `T`.
    pub(crate) fn parse<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        serde_json::from_str(self.0.get())
    }

    /// `raw`, without the whitespace between its tokens if any of it
    /// breaks a line.
    fn on_one_line(raw: Box<RawValue>) -> Self {
        if memchr::memchr2(b'\n', b'\r', raw.get().as_bytes()).is_none() {
            return Self(raw);
        }
        // Valid JSON stays valid without its insignificant whitespace.
        Self(RawValue::from_string(crate::codec::compact(raw.get())).unwrap_or(raw))
    }
}

/// Equal when the texts are.
impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for JsonText {}

/// The text itself.
impl std::fmt::Debug for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Self::on_one_line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_across_lines_loses_only_the_whitespace_between_tokens() {
        let text = "{\n  \"p\": \"a \\\" b\\n\\\\\",\r\n\t\"q\": [ 1 , {} ]\n}";
        let kept = r#"{"p":"a \" b\n\\","q":[1,{}]}"#;
        assert_eq!(JsonText::from_json(text).unwrap().get(), kept);
        assert_eq!(serde_json::from_str::<JsonText>(text).unwrap().get(), kept);
        // Raw text inside a value being serialised.
        let inner: Box<RawValue> = serde_json::from_str(text).unwrap();
        assert_eq!(JsonText::new(&[inner]).unwrap().get(), format!("[{kept}]"));
        // On one line, nothing changes, spacing, key order and all.
        let one_line = r#"{ "z" : 1, "a": [1e400], "z": 2 }"#;
        assert_eq!(JsonText::from_json(one_line).unwrap().get(), one_line);
        assert_eq!(
            serde_json::from_str::<JsonText>(one_line).unwrap().get(),
            one_line
        );
    }

    #[test]
    fn only_one_json_value_is_json_text() {
        assert_eq!(JsonText::from_json(" [1] ").unwrap().get(), "[1]");
        for bad in ["", "{} {}", r#"{"a":"#, "nope", "\"open"] {
            assert!(JsonText::from_json(bad).is_err(), "{bad:?}");
        }
    }
}
