//! A small server-sent-events parser over bytes, as the WHATWG HTML standard
//! describes the format: lines end in LF, CR or CRLF (a CR at the end of one
//! chunk is held until the next shows whether an LF follows), a leading BOM is
//! skipped, `:` lines are comments, `data` lines of one event are joined with
//! LF, and a blank line dispatches the event. It decodes UTF-8 only once a
//! line is complete, so a character split across network chunks is never
//! mangled. It never buffers more than [`SseParser::MAX_EVENT_BYTES`] for one
//! event: past that it reports an error instead of growing without bound.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event` field, empty when the server sent none (the default type `message`).
    pub event: String,
    /// The `data` lines, joined with `\n`.
    pub data: String,
}

/// A parse failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One event grew past [`SseParser::MAX_EVENT_BYTES`].
    #[error("an event is larger than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A line is not valid UTF-8.
    #[error("a line of the event stream is not valid UTF-8")]
    InvalidUtf8,
}

/// Incremental parser state: feed it the body chunk by chunk.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The previous chunk ended in CR: an LF opening the next one belongs to it.
    pending_cr: bool,
    /// Whether any byte was seen yet (for the BOM).
    started: bool,
    /// Fields of the event being built.
    event: String,
    data: String,
    has_data: bool,
    /// Bytes held for the current event (line and fields).
    held: usize,
}

impl SseParser {
    /// The most one event may hold, in bytes.
    pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

    /// Parse `bytes`, appending each event they complete to `out`.
    ///
    /// # Errors
    /// [`SseError`] when an event is too large or a line is not UTF-8; the
    /// parser should not be fed again after that.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.started && !bytes.is_empty() {
            // A BOM can be split across chunks only in pathological streams;
            // checking the first chunk is what every server needs.
            self.started = true;
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        if self.pending_cr {
            self.pending_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (line, rest) = bytes.split_at(end);
            let cr = rest[0] == b'\r';
            bytes = &rest[1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.pending_cr = true,
                    Some(_) => {}
                }
            }
            if self.line.is_empty() {
                self.line_done(line, out)?;
            } else {
                self.reserve(line.len())?;
                let mut whole = std::mem::take(&mut self.line);
                whole.extend_from_slice(line);
                let result = self.line_done(&whole, out);
                whole.clear();
                self.line = whole;
                result?;
            }
        }
        if !bytes.is_empty() {
            self.reserve(bytes.len())?;
            self.line.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn reserve(&mut self, more: usize) -> Result<(), SseError> {
        self.held += more;
        if self.held > Self::MAX_EVENT_BYTES {
            Err(SseError::TooLarge {
                limit: Self::MAX_EVENT_BYTES,
            })
        } else {
            Ok(())
        }
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            self.held = 0;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                let value = std::str::from_utf8(value).map_err(|_| SseError::InvalidUtf8)?;
                self.held += value.len() + 1;
                if self.held > Self::MAX_EVENT_BYTES {
                    return Err(SseError::TooLarge {
                        limit: Self::MAX_EVENT_BYTES,
                    });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            b"event" => {
                let value = std::str::from_utf8(value).map_err(|_| SseError::InvalidUtf8)?;
                self.event.clear();
                self.event.push_str(value);
            }
            // `id` and `retry` matter only to a reconnecting browser; unknown fields are ignored.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            parser.feed(chunk, &mut out).unwrap();
        }
        out
    }

    fn data(text: &str) -> SseEvent {
        SseEvent {
            event: String::new(),
            data: text.to_owned(),
        }
    }

    #[test]
    fn every_line_ending_and_every_split_give_the_same_events() {
        let text = "data: {\"a\":\"é€😀\"}\n\n: keep-alive\n\ndata:x\ndata: y\n\nevent: error\ndata: z\n\n";
        let expected = vec![
            data("{\"a\":\"é€😀\"}"),
            data("x\ny"),
            SseEvent {
                event: "error".into(),
                data: "z".into(),
            },
        ];
        for ending in ["\n", "\r\n", "\r"] {
            let input = text.replace('\n', ending);
            for piece in [1, 2, 3, 5, 7, 64, input.len()] {
                assert_eq!(
                    parse_in_pieces(input.as_bytes(), piece),
                    expected,
                    "{ending:?} in pieces of {piece}"
                );
            }
        }
    }

    #[test]
    fn a_bom_is_skipped_and_an_unfinished_event_waits_for_its_blank_line() {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        parser
            .feed(b"\xEF\xBB\xBFdata: 1\n\ndata: 2\n", &mut out)
            .unwrap();
        assert_eq!(out, [data("1")]);
        parser.feed(b"\n", &mut out).unwrap();
        assert_eq!(out, [data("1"), data("2")]);
    }

    #[test]
    fn events_without_data_and_unknown_fields_are_ignored() {
        assert_eq!(
            parse_in_pieces(b"id: 7\nretry: 10\n\nevent: ping\n\nfoo\ndata\n\n", 4),
            [data("")]
        );
    }

    #[test]
    fn invalid_utf8_and_oversized_events_are_errors() {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        assert_eq!(
            parser.feed(b"data: \xFF\n", &mut out),
            Err(SseError::InvalidUtf8)
        );
        let mut parser = SseParser::default();
        let big = vec![b'x'; 1024 * 1024];
        let mut result = parser.feed(b"data: ", &mut out);
        for _ in 0..20 {
            if result.is_err() {
                break;
            }
            result = parser.feed(&big, &mut out);
        }
        assert_eq!(
            result,
            Err(SseError::TooLarge {
                limit: SseParser::MAX_EVENT_BYTES
            })
        );
    }
}
