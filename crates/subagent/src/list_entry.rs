//! The fast path of a catalog entry's read: a `subagent/child` payload as
//! the runtime writes it (a flat JSON object of string fields, `child_id`,
//! `label`, `mode`, `provider` and an optional `name`, in either key order
//! `serde_json` gives them, no whitespace, no escapes, a mode this runtime
//! knows) is read by hand. Anything else gets `None` and goes through
//! serde, so an entry is accepted or refused exactly as the derived
//! `Deserialize` decides. A cold listing reads one entry per child from
//! its parent's log; this path costs a fraction of the general one. It
//! only reads: it never writes a catalog.

use dsh_core::SessionId;
use dsh_core::codec::flat_strings;

use crate::catalog::{CatalogEntry, ChildMode};

/// Each field's key, in the order of the slots `written_entry` fills.
const KEYS: [&str; 5] = ["child_id", "name", "label", "provider", "mode"];

/// The entry `payload` holds when it is in the written form; `None`
/// whenever serde must decide.
pub(crate) fn written_entry(payload: &str) -> Option<CatalogEntry> {
    let fields = flat_strings(payload, KEYS)?;
    let [
        Some(child_id),
        name,
        Some(label),
        Some(provider),
        Some(mode),
    ] = fields
    else {
        return None;
    };
    let mode = [
        ChildMode::CONTINUABLE,
        ChildMode::ONE_SHOT,
        ChildMode::EXTERNAL,
        ChildMode::UNKNOWN,
    ]
    .into_iter()
    .find(|known| known.as_str() == mode)?;
    Some(CatalogEntry {
        child_id: SessionId::new(child_id).ok()?,
        name: name.map(str::to_owned),
        label: label.to_owned(),
        provider: provider.to_owned(),
        mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::catalog_payload;

    fn general(payload: &str) -> Option<CatalogEntry> {
        serde_json::from_str(payload).ok()
    }

    #[test]
    fn written_entries_take_the_fast_path_and_agree_with_serde() {
        let mut entry = CatalogEntry {
            child_id: SessionId::new("s-1").unwrap(),
            name: Some("worker".into()),
            label: "a task".into(),
            provider: "spawn".into(),
            mode: ChildMode::CONTINUABLE,
        };
        let mut lines = vec![
            catalog_payload(&entry).get().to_owned(),
            serde_json::to_string(&entry).unwrap(),
        ];
        entry.name = None;
        entry.mode = ChildMode::EXTERNAL;
        lines.push(catalog_payload(&entry).get().to_owned());
        lines.push(serde_json::to_string(&entry).unwrap());
        // Both key orders serde_json writes (sorted, and the struct's).
        lines.push(
            r#"{"child_id":"s-1","label":"l","mode":"one-shot","name":"n","provider":"p"}"#.into(),
        );
        lines.push(
            r#"{"child_id":"s-1","name":"n","label":"l","provider":"p","mode":"unknown"}"#.into(),
        );
        for line in lines {
            let fast = written_entry(&line);
            assert!(fast.is_some(), "{line}");
            assert_eq!(fast, general(&line), "{line}");
        }
    }

    #[test]
    fn anything_unusual_is_left_to_serde() {
        for line in [
            // An unknown mode, an unknown key, a null name, a bad id.
            r#"{"child_id":"s-1","label":"l","mode":"quantum","provider":"p"}"#,
            r#"{"child_id":"s-1","label":"l","mode":"continuable","provider":"p","x":"y"}"#,
            r#"{"child_id":"s-1","label":"l","mode":"continuable","name":null,"provider":"p"}"#,
            r#"{"child_id":"..","label":"l","mode":"continuable","provider":"p"}"#,
            // A missing field, a repeated one, an escape, whitespace.
            r#"{"child_id":"s-1","label":"l","mode":"continuable"}"#,
            r#"{"child_id":"s-1","label":"l","label":"m","mode":"continuable","provider":"p"}"#,
            r#"{"child_id":"s-1","label":"\u0041","mode":"continuable","provider":"p"}"#,
            r#"{"child_id":"s-1", "label":"l","mode":"continuable","provider":"p"}"#,
            r#"{"child_id":"s-1","label":"l","mode":"continuable","provider":"p"} "#,
            r#"{"child_id":"s-1","label":"l","mode":"continuable","provider":"p""#,
            r#"{}"#,
            r#"[]"#,
        ] {
            assert_eq!(written_entry(line), None, "{line}");
        }
    }
}
