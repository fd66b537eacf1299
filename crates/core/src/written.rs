//! Hand-reading JSON as this workspace writes it: the pieces a fast path
//! uses to read a line or payload in its written form (no whitespace,
//! numbers in their shortest form, strings without escapes) without going
//! through serde. Each returns `None` for anything outside that form, and
//! a caller then hands the whole text to its general (serde) parser, which
//! reads or refuses it; these never decide that a text is invalid.

/// A JSON unsigned integer at the start of `text` in its only valid form
/// (no sign, no leading zero, no fraction or exponent after it) that fits
/// a `u64`, and the text after it.
pub fn number(text: &str) -> Option<(u64, &str)> {
    let digits = text
        .bytes()
        .position(|byte| !byte.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, rest) = text.split_at(digits);
    let leading_zero = number.len() > 1 && number.starts_with('0');
    if number.is_empty() || leading_zero || rest.starts_with(['.', 'e', 'E']) {
        return None;
    }
    // `parse` refuses a value past `u64::MAX`.
    Some((number.parse().ok()?, rest))
}

/// The text of a JSON string whose opening quote was consumed, up to its
/// closing quote, and the text after that quote; `None` when it holds an
/// escape or a control character before the quote (or has none).
pub fn string(text: &str) -> Option<(&str, &str)> {
    let end = text
        .bytes()
        .position(|byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
    let (value, rest) = text.split_at(end);
    Some((value, rest.strip_prefix('"')?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_their_only_form() {
        assert_eq!(number("0,"), Some((0, ",")));
        assert_eq!(number("42}"), Some((42, "}")));
        assert_eq!(
            number("18446744073709551615"),
            Some((u64::MAX, "")),
            "the largest u64"
        );
        for refused in [
            "",
            "-1",
            "01",
            "1.0",
            "1e2",
            "1E2",
            "18446744073709551616",
            "x",
        ] {
            assert_eq!(number(refused), None, "{refused}");
        }
    }

    #[test]
    fn strings_without_escapes() {
        assert_eq!(string(r#"abc","#), Some(("abc", ",")));
        assert_eq!(string(r#"""#), Some(("", "")));
        for refused in [r#"a\"b""#, "a\tb\"", "no end"] {
            assert_eq!(string(refused), None, "{refused}");
        }
    }
}
