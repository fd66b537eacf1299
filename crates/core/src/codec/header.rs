//! The fast path of a header read: a session header line exactly as a
//! store writes it (`serde_json` of [`SessionHeader`]: its fields in
//! declaration order, no whitespace, numbers in their shortest form,
//! strings without escapes) is read by hand, and only a non-empty
//! composition goes through serde. Any other line (another key order,
//! whitespace, an escape, an unknown key, extensions, a header naming
//! another session or a newer format) gets `None`, and the caller's
//! general parser reads or refuses it, so a header is accepted or refused
//! exactly as serde's derive decides. A listing reads one header per
//! child; this path costs a fraction of the general one.

use super::written::{number, string};
use crate::id::SessionId;
use crate::options::Composition;
use crate::session::{FORMAT_VERSION, SessionHeader};

/// The header of `id`'s log when `line` (without its `\n`) is exactly in
/// the written form, names `id` and a format this build reads; `None`
/// whenever the general parser must decide. A parent equal to `known` (an
/// id already validated, a sibling's parent say) is shared, not validated
/// and allocated again.
pub(super) fn written_header(
    id: &SessionId,
    line: &str,
    known: Option<&SessionId>,
) -> Option<SessionHeader> {
    let rest = line.strip_prefix(r#"{"format":"#)?;
    let (format, rest) = number(rest)?;
    let format = u32::try_from(format).ok()?;
    if format > FORMAT_VERSION {
        return None;
    }
    // The id is compared in place (a valid id holds no quote, escape or
    // control character, so this is the string's whole value), not scanned.
    let rest = rest
        .strip_prefix(r#","id":""#)?
        .strip_prefix(id.as_str())?
        .strip_prefix('"')?;
    let (parent_session, rest) = match rest.strip_prefix(r#","parent_session":""#) {
        Some(rest) => match known
            .and_then(|known| Some((known, rest.strip_prefix(known.as_str())?.strip_prefix('"')?)))
        {
            Some((known, rest)) => (Some(known.clone()), rest),
            None => {
                let (parent, rest) = string(rest)?;
                (Some(SessionId::new(parent).ok()?), rest)
            }
        },
        None => (None, rest),
    };
    let (origin, rest) = match rest.strip_prefix(r#","origin":""#) {
        Some(rest) => {
            let (origin, rest) = string(rest)?;
            (Some(origin.to_owned()), rest)
        }
        None => (None, rest),
    };
    let (delegation_depth, rest) = number(rest.strip_prefix(r#","delegation_depth":"#)?)?;
    let delegation_depth = u32::try_from(delegation_depth).ok()?;
    let (cwd, rest) = string(rest.strip_prefix(r#","cwd":""#)?)?;
    let (seed_len, rest) = number(rest.strip_prefix(r#","seed_len":"#)?)?;
    let (created_at, rest) = number(rest.strip_prefix(r#","created_at":"#)?)?;
    let composition = rest.strip_prefix(r#","composition":"#)?.strip_suffix('}')?;
    let composition = if composition == "{}" {
        Composition::default()
    } else {
        // Exactly one composition value, or the general parser decides
        // (extensions after it, say).
        serde_json::from_str(composition).ok()?
    };
    Some(SessionHeader {
        format,
        id: id.clone(),
        parent_session,
        origin,
        delegation_depth,
        cwd: cwd.into(),
        seed_len,
        created_at,
        composition,
        extensions: serde_json::Map::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> SessionId {
        SessionId::new("s-1").unwrap()
    }

    /// The general parser's answer, as an option.
    fn general(line: &str) -> Option<SessionHeader> {
        serde_json::from_str(line).ok()
    }

    #[test]
    fn written_headers_take_the_fast_path_and_agree_with_the_general_one() {
        let mut header = SessionHeader::new(id(), "/work/dir");
        let plain = serde_json::to_string(&header).unwrap();
        header.parent_session = Some(SessionId::new("s-0").unwrap());
        header.origin = Some("project".into());
        header.delegation_depth = 2;
        header.seed_len = 7;
        let child = serde_json::to_string(&header).unwrap();
        header.composition.preset = Some("reviewer".into());
        let composed = serde_json::to_string(&header).unwrap();
        for line in [plain, child, composed] {
            let fast = written_header(&id(), &line, None);
            assert!(fast.is_some(), "{line}");
            assert_eq!(fast, general(&line), "{line}");
        }
    }

    #[test]
    fn anything_unusual_is_left_to_the_general_parser() {
        let lines = [
            // Extensions, which the fast path never reads.
            r#"{"format":1,"id":"s-1","cwd":"/","delegation_depth":0,"seed_len":0,"created_at":1,"composition":{},"extensions":{"a":1}}"#,
            r#"{"format":1,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{},"extensions":{"a":1}}"#,
            // Another session (one the id only begins too), a newer
            // format, a bad parent id.
            r#"{"format":1,"id":"s-2","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}}"#,
            r#"{"format":1,"id":"s-10","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}}"#,
            r#"{"format":1,"id":"s-1"","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}}"#,
            r#"{"format":2,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}}"#,
            r#"{"format":1,"id":"s-1","parent_session":"..","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}}"#,
            // Escapes, whitespace, number forms, overflow.
            r#"{"format":1,"id":"s-1","delegation_depth":0,"cwd":"\/a","seed_len":0,"created_at":1,"composition":{}}"#,
            r#"{"format":1, "id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}}"#,
            r#"{"format":01,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}}"#,
            r#"{"format":1,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":1e2,"created_at":1,"composition":{}}"#,
            r#"{"format":1,"id":"s-1","delegation_depth":4294967296,"cwd":"/","seed_len":0,"created_at":1,"composition":{}}"#,
            r#"{"format":1,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":18446744073709551616,"composition":{}}"#,
            // A repeated key, a bad composition, trailing text, a torn line.
            r#"{"format":1,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{"preset":"a","preset":"b"}}"#,
            r#"{"format":1,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{"preset":1}}"#,
            r#"{"format":1,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}} "#,
            r#"{"format":1,"id":"s-1","delegation_depth":0,"cwd":"/","seed_len":0,"created_at":1,"composition":{}"#,
            "{\"format\":1,\"id\":\"s-1\",\"delegation_depth\":0,\"cwd\":\"a\tb\",\"seed_len\":0,\"created_at\":1,\"composition\":{}}",
        ];
        for line in lines {
            assert_eq!(written_header(&id(), line, None), None, "{line}");
        }
    }

    #[test]
    fn a_known_parent_is_shared_only_when_the_header_names_it() {
        let mut header = SessionHeader::new(id(), "/");
        let parent = SessionId::new("s-0").unwrap();
        header.parent_session = Some(parent.clone());
        let line = serde_json::to_string(&header).unwrap();
        let shared = written_header(&id(), &line, Some(&parent)).unwrap();
        let named = shared.parent_session.unwrap();
        assert_eq!(named, parent);
        assert_eq!(named.as_str().as_ptr(), parent.as_str().as_ptr());
        // A known id that only begins the named one is not taken for it.
        let prefix = SessionId::new("s").unwrap();
        let read = written_header(&id(), &line, Some(&prefix)).unwrap();
        assert_eq!(read.parent_session.as_ref(), Some(&parent));
        // Another known id is not taken for the one the header names.
        let other = SessionId::new("s-9").unwrap();
        let read = written_header(&id(), &line, Some(&other)).unwrap();
        assert_eq!(read, general(&line).unwrap());
        assert_eq!(read.parent_session, Some(parent));
        // A header without a parent stays without one.
        header.parent_session = None;
        let line = serde_json::to_string(&header).unwrap();
        let read = written_header(&id(), &line, Some(&other)).unwrap();
        assert_eq!(read.parent_session, None);
    }
}
