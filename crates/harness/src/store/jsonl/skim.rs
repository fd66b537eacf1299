//! Skimming a log for one extension event type: the header is parsed in
//! full, every other line only as an event skeleton (its seq, time and type,
//! with the payload checked to be JSON and borrowed, never built), and only
//! the lines of the wanted type are parsed whole. A listing folds catalogs
//! this way without parsing message content. Anything unusual (bytes that
//! are not UTF-8, a line that is not a well-formed event, a seq out of
//! place, a last line without its `\n`) falls back to the full parse, so a
//! skimmed log fails exactly where and how [`super::load_log`] would.

use std::borrow::Cow;
use std::path::Path;

use dsh_core::{KindEvents, SessionEvent, SessionId, StoreError};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::parse::{parse_header, parse_log};

/// What an event line must hold, read without building its payload.
#[derive(Deserialize)]
struct Skeleton<'a> {
    seq: u64,
    #[allow(dead_code, reason = "checked to be a number, as the full parse does")]
    time: u64,
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[allow(dead_code, reason = "checked to be JSON, never built")]
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// Read the log of `id` at `path` keeping its header and its extension
/// events of the types in `kinds`.
pub(super) fn skim_log(
    id: &SessionId,
    path: &Path,
    kinds: &[&str],
) -> Result<KindEvents, StoreError> {
    // Plain or sealed, as `load` reads it.
    let (path, bytes) = super::sealed::read_either(id, path)?;
    let path = path.as_path();
    if let Some(skimmed) = skim(id, path, &bytes, kinds)? {
        return Ok(skimmed);
    }
    let parsed = parse_log(id, path, bytes)?;
    Ok(KindEvents::of_kinds(
        dsh_core::LoadedSession {
            header: parsed.header,
            events: parsed.events,
            torn_tail: parsed.torn_tail,
        },
        kinds,
    ))
}

/// The happy path: `None` whenever the full parse must decide.
fn skim(
    id: &SessionId,
    path: &Path,
    bytes: &[u8],
    kinds: &[&str],
) -> Result<Option<KindEvents>, StoreError> {
    // A last line without `\n` (torn or not) is the full parse's call.
    if bytes.last() != Some(&b'\n') {
        return Ok(None);
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok(None);
    };
    let body = &text[..text.len() - 1];
    let (header_line, rest) = body.split_once('\n').unwrap_or((body, ""));
    let header = parse_header(id, path, header_line.as_bytes())?;
    let mut events = Vec::new();
    if body.len() > header_line.len() {
        for (index, line) in (0_u64..).zip(rest.split('\n')) {
            let Ok(skeleton) = serde_json::from_str::<Skeleton<'_>>(line) else {
                return Ok(None);
            };
            if skeleton.seq != index {
                return Ok(None);
            }
            if kinds.contains(&skeleton.kind.as_ref()) {
                let Ok(event) = SessionEvent::from_json_line(line) else {
                    return Ok(None);
                };
                events.push(event);
            }
        }
    }
    Ok(Some(KindEvents { header, events }))
}

#[cfg(test)]
mod tests {
    use dsh_core::session::{EventPayload, TurnStart};
    use dsh_core::{SessionHeader, SessionStore as _};

    use super::*;
    use crate::JsonlStore;

    fn event(seq: u64, payload: EventPayload) -> SessionEvent {
        SessionEvent {
            seq,
            time: 7,
            payload,
        }
    }

    fn extension(seq: u64, kind: &str) -> SessionEvent {
        event(
            seq,
            EventPayload::Extension {
                kind: kind.into(),
                payload: serde_json::json!({ "n": seq }).into(),
            },
        )
    }

    async fn store_with(events: &[SessionEvent]) -> (tempfile::TempDir, JsonlStore, SessionId) {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path(), dsh_core::Durability::None).unwrap();
        let id = SessionId::new("skimmed").unwrap();
        let log = store
            .create(&SessionHeader::new(id.clone(), "/"), &[])
            .await
            .unwrap();
        if !events.is_empty() {
            log.append(events).await.unwrap();
        }
        drop(log);
        (dir, store, id)
    }

    #[tokio::test]
    async fn a_skim_keeps_only_the_kinds_at_their_seqs_as_the_full_load_does() {
        const KINDS: &[&str] = &["subagent/child", "subagent/usage"];
        let events = vec![
            event(0, EventPayload::TurnStart(TurnStart { turn: 0 })),
            extension(1, "subagent/child"),
            extension(2, "other/kind"),
            extension(3, "subagent/usage"),
            extension(4, "subagent/child"),
        ];
        let (_dir, store, id) = store_with(&events).await;
        let skimmed = skim_log(&id, &store.log_path(&id), KINDS).unwrap();
        let seqs: Vec<u64> = skimmed.events.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, [1, 3, 4]);
        let loaded = store.load(&id).await.unwrap();
        let whole = KindEvents::of_kinds(loaded, KINDS);
        assert_eq!(skimmed.events, whole.events);
        assert_eq!(skimmed.header.id, whole.header.id);
        let from_trait = store.load_kind_many(std::slice::from_ref(&id), KINDS).await;
        assert_eq!(from_trait.len(), 1);
        assert_eq!(from_trait[0].as_ref().unwrap().events, whole.events);
    }

    #[tokio::test]
    async fn a_skim_fails_where_the_full_load_fails() {
        let (_dir, store, id) = store_with(&[extension(0, "subagent/child")]).await;
        let path = store.log_path(&id);
        let mut bytes = std::fs::read(&path).unwrap();
        // A middle line that is not JSON, and one whose seq is out of place.
        for bad in [
            b"{not json\n".as_slice(),
            b"{\"seq\":9,\"time\":1,\"type\":\"x\",\"payload\":{}}\n",
        ] {
            let mut damaged = bytes.clone();
            damaged.extend_from_slice(bad);
            damaged.extend_from_slice(b"{\"seq\":2,\"time\":1,\"type\":\"x\",\"payload\":{}}\n");
            std::fs::write(&path, &damaged).unwrap();
            let skimmed = skim_log(&id, &path, &["subagent/child"]).unwrap_err();
            let loaded = store.load(&id).await.unwrap_err();
            assert_eq!(skimmed.to_string(), loaded.to_string());
        }
        // A known type whose payload has the wrong shape fails the full
        // load, but a skim never builds that payload: it is not parsed.
        let mut unbuilt = bytes.clone();
        unbuilt.extend_from_slice(
            b"{\"seq\":1,\"time\":1,\"type\":\"turn/start\",\"payload\":{\"turn\":\"x\"}}\n",
        );
        std::fs::write(&path, &unbuilt).unwrap();
        assert_eq!(store.load(&id).await.unwrap_err().code(), "SESSION_CORRUPT");
        let skimmed = skim_log(&id, &path, &["subagent/child"]).unwrap();
        assert_eq!(skimmed.events.len(), 1);
        // A torn last line is ignored by both.
        bytes.extend_from_slice(b"{\"seq\":1,\"ti");
        std::fs::write(&path, &bytes).unwrap();
        let skimmed = skim_log(&id, &path, &["subagent/child"]).unwrap();
        assert_eq!(skimmed.events.len(), 1);
        let missing = SessionId::new("missing").unwrap();
        let err = skim_log(&missing, &store.log_path(&missing), &["x"]).unwrap_err();
        assert_eq!(err.code(), "SESSION_NOT_FOUND");
    }
}
