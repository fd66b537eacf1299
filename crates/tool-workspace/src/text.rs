//! Text helpers shared by the tools: telling text from binary content and
//! cutting long output at a character boundary.

/// How many leading bytes are scanned for a NUL byte.
const SNIFF_BYTES: usize = 8192;

/// The text of `bytes`, or `None` when they look binary (a NUL byte near
/// the start, or not UTF-8).
pub(crate) fn as_text(bytes: Vec<u8>) -> Option<String> {
    if bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// The longest prefix of `text` of at most `max` bytes ending on a
/// character boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
