//! Hand-reading JSON as this workspace writes it: the pieces a fast path
//! uses to read a line or payload in its written form (no whitespace,
//! numbers in their shortest form, strings without escapes) without going
//! through serde. Each returns `None` for anything outside that form, and
//! a caller then hands the whole text to its general (serde) parser, which
//! reads or refuses it; these never decide that a text is invalid.
//! [`compact`] is the one writer here: JSON text put back on one line.

/// A JSON unsigned integer at the start of `text` in its only valid form
/// (no sign, no leading zero, no fraction or exponent after it) that fits
/// a `u64`, and the text after it.
pub(super) fn number(text: &str) -> Option<(u64, &str)> {
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
pub(super) fn string(text: &str) -> Option<(&str, &str)> {
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

/// Where the closing quote of a JSON string whose opening quote was
/// consumed stands in `text`: the first `"` not escaped. The byte after a
/// backslash never ends the string (a `"` or `\` byte is never part of a
/// multi-byte character, so skipping one byte stays in step). `None` when
/// there is none.
pub(super) fn closing_quote(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = 0;
    loop {
        let found = at + memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
        if bytes[found] == b'"' {
            return Some(found);
        }
        at = found + 2;
    }
}

/// The value of a JSON string whose opening quote was consumed, escapes
/// decoded, and the text after its closing quote: what serde reads for the
/// same string, into one `String` allocated once at its final size or
/// less (a decoded string is never longer than its escaped form), where
/// serde grows a scratch buffer by doubling and then copies it out.
/// `None` for a control character, an unknown escape, a surrogate escape
/// (paired or not: serde decides those) or no closing quote.
pub(super) fn unescaped(text: &str) -> Option<(String, &str)> {
    let end = closing_quote(text)?;
    // Both ends are ASCII quotes or text boundaries: character boundaries.
    let mut body = text.get(..end)?;
    let rest = text.get(end + 1..)?;
    // One pass over every byte for control characters, without stopping
    // early, so that the compiler vectorises it.
    if body
        .bytes()
        .fold(false, |control, byte| control | (byte < 0x20))
    {
        return None;
    }
    let mut value = String::with_capacity(end);
    while let Some(escape) = memchr::memchr(b'\\', body.as_bytes()) {
        value.push_str(body.get(..escape)?);
        let after = body.as_bytes().get(escape + 1)?;
        let (decoded, width) = match after {
            b'"' => ('"', 2),
            b'\\' => ('\\', 2),
            b'/' => ('/', 2),
            b'b' => ('\u{8}', 2),
            b'f' => ('\u{c}', 2),
            b'n' => ('\n', 2),
            b'r' => ('\r', 2),
            b't' => ('\t', 2),
            b'u' => {
                let hex = body.get(escape + 2..escape + 6)?;
                // `from_str_radix` also takes a leading `+`, which JSON
                // does not.
                if !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                    return None;
                }
                // A surrogate is `None` here: not a `char`.
                (char::from_u32(u32::from_str_radix(hex, 16).ok()?)?, 6)
            }
            _ => return None,
        };
        value.push(decoded);
        body = body.get(escape + width..)?;
    }
    value.push_str(body);
    Some((value, rest))
}

/// `json` (valid JSON) without the whitespace between its tokens.
pub(crate) fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
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
    /// Decoding by hand reads every string serde reads to the same text,
    /// or leaves it to serde (`None`), and finds the same end.
    #[test]
    fn unescaped_strings_agree_with_serde() {
        let pieces = [
            "",
            "a",
            "\u{e9}",
            "\u{1f600}",
            "\\\"",
            "\\\\",
            "\\/",
            "\\b",
            "\\f",
            "\\n",
            "\\r",
            "\\t",
            "\\u0041",
            "\\u00e9",
            "\\u00E9",
            "\\u20ac",
            "\\uffff",
            "\\u0000",
            "\\u001f",
            "\\ud83d\\ude00",
            "\\ud800",
            "\\udc00",
            "\\u12",
            "\\u12g4",
            "\\x",
            "\\",
            "\t",
            "\u{1f}",
            "\u{7f}",
            "\\\u{e9}",
        ];
        let mut texts = Vec::new();
        for first in pieces {
            for second in pieces {
                for end in ["\"", "\",", "\"}", "", "\\\""] {
                    texts.push(format!("{first}x{second}{end}"));
                    texts.push(format!("{first}{second}{end}"));
                }
            }
        }
        let mut decoded = 0;
        for text in &texts {
            let quoted = format!("\"{text}");
            let mut deserializer = serde_json::Deserializer::from_str(&quoted);
            let serde: Option<String> = serde::Deserialize::deserialize(&mut deserializer).ok();
            match unescaped(text) {
                Some((value, rest)) => {
                    decoded += 1;
                    assert_eq!(Some(&value), serde.as_ref(), "{text:?}");
                    let consumed = text.len() - rest.len();
                    let quoted = format!("\"{}", &text[..consumed]);
                    let whole: String = serde_json::from_str(&quoted).unwrap();
                    assert_eq!(whole, value, "{text:?} ends where serde's string ends");
                    assert!(value.capacity() <= consumed, "{text:?} sized once");
                }
                None => assert!(
                    serde.is_none() || text.contains("\\ud8") || text.contains("\\udc"),
                    "{text:?} is read by serde as {serde:?} but refused here"
                ),
            }
        }
        // Most of the corpus is read: the bound above is not met vacuously.
        assert!(decoded > texts.len() / 4, "{decoded} of {}", texts.len());
    }
}
