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
    // One pass that reads and accumulates the digits (a scan for the end
    // then `str::parse` went over them twice, a fifth of an event line's
    // envelope cost); a value past `u64::MAX` overflows the checked steps.
    let bytes = text.as_bytes();
    let mut value: u64 = 0;
    let mut digits = 0;
    while let Some(&byte) = bytes.get(digits) {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
        digits += 1;
    }
    let leading_zero = digits > 1 && bytes.first() == Some(&b'0');
    if digits == 0 || leading_zero || matches!(bytes.get(digits), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    // Every byte before `digits` is an ASCII digit: a character boundary.
    Some((value, text.get(digits..)?))
}

/// The text of a JSON string whose opening quote was consumed, up to its
/// closing quote, and the text after that quote; `None` when it holds an
/// escape or a control character before the quote (or has none).
pub fn string(text: &str) -> Option<(&str, &str)> {
    // The closing quote (or an escape) found with SIMD, then the text
    // before it checked for control characters in a loop the compiler
    // vectorises: a byte-by-byte search for all three was most of the cost
    // of a message's text.
    let end = memchr::memchr2(b'"', b'\\', text.as_bytes())?;
    let (value, rest) = text.split_at(end);
    if value.bytes().any(|byte| byte < 0x20) {
        return None;
    }
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

    /// The one-pass reader agrees with reading the digits and then
    /// `str::parse`, around every length and the `u64` boundary.
    #[test]
    fn numbers_agree_with_parse() {
        fn by_parse(text: &str) -> Option<(u64, &str)> {
            let end = text
                .bytes()
                .position(|byte| !byte.is_ascii_digit())
                .unwrap_or(text.len());
            let (number, rest) = text.split_at(end);
            let leading_zero = number.len() > 1 && number.starts_with('0');
            if number.is_empty() || leading_zero || rest.starts_with(['.', 'e', 'E']) {
                return None;
            }
            Some((number.parse().ok()?, rest))
        }
        let mut texts = vec![
            "18446744073709551615".to_owned(),
            "18446744073709551616".to_owned(),
            "18446744073709551620".to_owned(),
            "99999999999999999999".to_owned(),
            "184467440737095516150".to_owned(),
        ];
        for length in 1..=22 {
            texts.push("9".repeat(length));
            texts.push(format!("1{}", "0".repeat(length)));
            texts.push(format!("0{}", "7".repeat(length)));
        }
        for text in texts.clone() {
            for suffix in ["", ",", "}", ".5", "e1", "E1", "x", "\u{e9}"] {
                texts.push(format!("{text}{suffix}"));
            }
        }
        for text in &texts {
            assert_eq!(number(text), by_parse(text), "{text}");
        }
    }

    /// The SIMD search agrees with a byte-by-byte one, before, at and after
    /// a vector's width.
    #[test]
    fn strings_agree_with_a_byte_search() {
        fn by_bytes(text: &str) -> Option<(&str, &str)> {
            let end = text
                .bytes()
                .position(|byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
            let (value, rest) = text.split_at(end);
            Some((value, rest.strip_prefix('"')?))
        }
        for length in [0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200] {
            let run = "a\u{e9}\u{7f}".repeat(length / 4 + 1);
            for odd in ["", "\"", "\\", "\n", "\t", "\u{1f}", "\u{0}", "\u{7f}"] {
                for end in ["", "\"", "\",", "\\\"\""] {
                    let text = format!("{run}{odd}{run}{end}");
                    assert_eq!(string(&text), by_bytes(&text), "{text:?}");
                }
            }
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
