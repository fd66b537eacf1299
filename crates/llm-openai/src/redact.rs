//! Keeping the API key out of every text this crate produces. A server's
//! error message may quote the key, whole or masked (`sk-abc1****wxyz`): any
//! word that shares [`WINDOW`] consecutive characters with the key is
//! replaced, which over-redacts a little and never leaks more than a few
//! characters of it. Texts are also cut to a readable length.

/// Shared characters that make a word suspect.
const WINDOW: usize = 6;

/// The longest server text kept in an error, in characters.
const MAX_CHARS: usize = 500;

/// What replaces a suspect word.
pub(crate) const REDACTED: &str = "[redacted]";

/// Whether `word` holds the key or a run of [`WINDOW`] of its characters.
fn leaks(word: &str, key: &str) -> bool {
    if word.contains(key) {
        return true;
    }
    if key.len() < WINDOW || word.len() < WINDOW {
        return false;
    }
    let key = key.as_bytes();
    word.as_bytes()
        .windows(WINDOW)
        .any(|window| key.windows(WINDOW).any(|part| part == window))
}

/// `text` with every word that could reveal `key` replaced, cut to a readable length.
pub(crate) fn redact(text: &str, key: Option<&str>) -> String {
    let text = text.trim();
    let mut cut: String = text.chars().take(MAX_CHARS).collect();
    if cut.len() < text.len() {
        cut.push_str(" ...");
    }
    let Some(key) = key.filter(|key| !key.is_empty()) else {
        return cut;
    };
    let mut out = String::with_capacity(cut.len());
    for piece in cut.split_inclusive(char::is_whitespace) {
        let word = piece.trim_end();
        if leaks(word, key) {
            out.push_str(REDACTED);
            out.push_str(&piece[word.len()..]);
        } else {
            out.push_str(piece);
        }
    }
    // A key with whitespace in it (unusual, but possible) is caught whole too.
    if out.contains(key) {
        out = out.replace(key, REDACTED);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_masked_keys_are_redacted_and_the_rest_kept() {
        let key = "sk-test-0123456789abcdefXYZ";
        let text = format!(
            "Incorrect API key provided: sk-test-0***********cdefXYZ. You sent \"{key}\".\nSee the docs."
        );
        let redacted = redact(&text, Some(key));
        assert_eq!(
            redacted,
            "Incorrect API key provided: [redacted] You sent [redacted]\nSee the docs."
        );
        assert_eq!(redact("nothing here", Some(key)), "nothing here");
        assert_eq!(redact("  plain  ", None), "plain");
    }

    #[test]
    fn long_texts_are_cut() {
        let long = "x ".repeat(1000);
        let cut = redact(&long, None);
        assert!(cut.ends_with(" ..."));
        assert!(cut.chars().count() <= MAX_CHARS + 4);
    }
}
