//! The hand writer of a small payload: a flat JSON object of strings,
//! integers and [`Usage`]s, written field by field into one `String`, byte
//! for byte what `serde_json` writes for a struct with the same fields in
//! the same order. A record written once per child (a usage record, an
//! activation record) went through serde's serializer, which passes every
//! key through its escaper and grows and then shrinks its buffer; here a
//! text is checked once for a byte to escape and copied whole when it has
//! none, the object is written into a buffer kept between objects and
//! copied out once at its size, and the text becomes a payload without
//! being parsed again: what this writer writes is one JSON value whatever
//! it is given (the property tests below hold it to `serde_json`'s bytes).

use std::cell::Cell;

use serde_json::value::RawValue;

use crate::json_text::JsonText;
use crate::message::Usage;
use crate::session::ExtensionPayload;

/// A JSON object written field by field; see the module's doc. Keys and
/// string values are escaped as `serde_json` escapes them.
#[derive(Debug)]
pub struct ObjectWriter {
    text: String,
}

thread_local! {
    /// The text of the object last written on this thread, kept for the
    /// next one: writing an object then allocates only its payload, at its
    /// final size (where a buffer of its own was allocated, grown and shrunk
    /// for each).
    static SCRATCH: Cell<String> = const { Cell::new(String::new()) };
}

/// The largest scratch text kept for the next object (a long label's is
/// dropped with its object).
const SCRATCH_KEPT: usize = 4096;

impl ObjectWriter {
    /// An empty object.
    pub fn new() -> Self {
        let mut text = SCRATCH.take();
        text.clear();
        text.push('{');
        Self { text }
    }

    /// Write `"key":` after a comma if a field came before.
    fn key(&mut self, key: &str) {
        if self.text.len() > 1 {
            self.text.push(',');
        }
        escaped(&mut self.text, key);
        self.text.push(':');
    }

    /// A string field.
    pub fn string(&mut self, key: &str, value: &str) -> &mut Self {
        self.key(key);
        escaped(&mut self.text, value);
        self
    }

    /// An unsigned integer field.
    pub fn number(&mut self, key: &str, value: u64) -> &mut Self {
        self.key(key);
        decimal(&mut self.text, value);
        self
    }

    /// A [`Usage`] field, as `Usage` serialises (the cached and reasoning
    /// counts only when they are not zero).
    pub fn usage(&mut self, key: &str, usage: &Usage) -> &mut Self {
        self.key(key);
        let text = &mut self.text;
        text.push_str(r#"{"input_tokens":"#);
        decimal(text, usage.input_tokens);
        text.push_str(r#","output_tokens":"#);
        decimal(text, usage.output_tokens);
        if usage.cached_input_tokens != 0 {
            text.push_str(r#","cached_input_tokens":"#);
            decimal(text, usage.cached_input_tokens);
        }
        if usage.reasoning_tokens != 0 {
            text.push_str(r#","reasoning_tokens":"#);
            decimal(text, usage.reasoning_tokens);
        }
        text.push('}');
        self
    }

    /// The object as a payload.
    pub fn finish(mut self) -> ExtensionPayload {
        self.text.push('}');
        // Allocated at its length, so the payload keeps it as it is.
        let text = String::from(self.text.as_str());
        if self.text.capacity() <= SCRATCH_KEPT {
            SCRATCH.set(self.text);
        }
        // SAFETY: the text is one JSON object without whitespace around
        // it: `{`, then fields each written whole (a key and a string
        // escaped by `escaped`, an integer in decimal, a usage as a nested
        // object of integers) and joined by commas, then `}`. The property
        // tests below check it against `serde_json`'s own output, and
        // serde_json checks it again in debug builds.
        #[allow(unsafe_code)]
        let raw = unsafe { RawValue::from_string_unchecked(text) };
        ExtensionPayload::from_text(JsonText::from_raw(raw))
    }
}

impl Default for ObjectWriter {
    fn default() -> Self {
        Self::new()
    }
}

/// `value` in decimal, as `serde_json` writes a `u64`.
fn decimal(out: &mut String, mut value: u64) {
    let mut digits = [0_u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // A remainder below 10: one ASCII digit.
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        out.push(char::from(digit));
    }
}

/// Whether `byte` is escaped in a JSON string as `serde_json` writes one.
fn must_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// `value` as a JSON string, escaped as `serde_json` escapes it: `"` and
/// `\`, the short escapes `\b \t \n \f \r`, any other control character as
/// `\u00xx` (lower-case hex), everything else as it is.
pub(super) fn escaped(out: &mut String, value: &str) {
    out.push('"');
    // One pass over every byte, without stopping early, so that the
    // compiler vectorises it; most texts (ids, names, labels) have nothing
    // to escape and are copied whole.
    if !value
        .bytes()
        .fold(false, |escape, byte| escape | must_escape(byte))
    {
        out.push_str(value);
        out.push('"');
        return;
    }
    let mut plain = 0;
    for (at, byte) in value.bytes().enumerate() {
        let short = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // An escaped byte is ASCII: both ends are character boundaries.
        out.push_str(&value[plain..at]);
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        } else {
            out.push_str(short);
        }
        plain = at + 1;
    }
    out.push_str(&value[plain..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::Serialize;

    use super::*;

    /// Text hard for an escaper: every control character, quotes,
    /// backslashes, DEL, multi-byte and non-BMP characters.
    fn text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            2 => (0_u8..0x20).prop_map(|byte| char::from(byte).to_string()),
            2 => proptest::sample::select(vec!["\"", "\\", "\u{7f}", "/", "\u{2028}", "\u{1d11e}", "é"])
                .prop_map(str::to_owned),
            3 => "[a-z ]{0,40}",
            1 => any::<char>().prop_map(String::from),
        ];
        proptest::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
    }

    fn usage() -> impl Strategy<Value = Usage> {
        let count = prop_oneof![Just(0_u64), 0_u64..1000, any::<u64>()];
        (count.clone(), count.clone(), count.clone(), count).prop_map(
            |(input_tokens, output_tokens, cached_input_tokens, reasoning_tokens)| Usage {
                input_tokens,
                output_tokens,
                cached_input_tokens,
                reasoning_tokens,
            },
        )
    }

    /// Every kind of field, in an order the writer is given.
    #[derive(Serialize)]
    struct Sample {
        id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        count: u64,
        usage: Usage,
        label: String,
    }

    fn written(sample: &Sample) -> ExtensionPayload {
        let mut object = ObjectWriter::new();
        object.string("id", &sample.id);
        if let Some(name) = &sample.name {
            object.string("name", name);
        }
        object
            .number("count", sample.count)
            .usage("usage", &sample.usage)
            .string("label", &sample.label);
        object.finish()
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 2000,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// A string is escaped to serde_json's bytes.
        #[test]
        fn strings_are_escaped_as_serde_json_escapes_them(value in text()) {
            let mut out = String::new();
            escaped(&mut out, &value);
            prop_assert_eq!(out, serde_json::to_string(&value).unwrap());
        }

        /// An object is serde_json's bytes for the same struct, and reads
        /// back as one JSON value.
        #[test]
        fn objects_are_serde_jsons_bytes(
            id in text(),
            name in proptest::option::of(text()),
            count in any::<u64>(),
            usage in usage(),
            label in text(),
        ) {
            let sample = Sample { id, name, count, usage, label };
            let payload = written(&sample);
            prop_assert_eq!(payload.get(), serde_json::to_string(&sample).unwrap());
            let read: serde_json::Value = serde_json::from_str(payload.get()).unwrap();
            prop_assert_eq!(read, serde_json::to_value(&sample).unwrap());
        }
    }

    #[test]
    fn an_empty_object_and_the_edges_of_a_number() {
        assert_eq!(ObjectWriter::new().finish().get(), "{}");
        for value in [0, 9, 10, u64::MAX] {
            let mut object = ObjectWriter::new();
            object.number("n", value);
            assert_eq!(object.finish().get(), format!(r#"{{"n":{value}}}"#));
        }
    }
}
