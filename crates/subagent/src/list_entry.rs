//! The fast path of a catalog entry's read: a `subagent/child` payload as
//! the runtime writes it (a flat JSON object of string fields, `child_id`,
//! `label`, `mode`, `provider` and an optional `name`, in either key order
//! `serde_json` gives them, no whitespace, no escapes, a mode this runtime
//! knows) is read by hand, through [`dsh_core::codec::flat_strings`]; this
//! file only maps the fields. Anything else gets `None` and goes through
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
    use proptest::prelude::*;

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

    /// Text hard for a hand reader: quotes, escapes, control and non-BMP
    /// characters, pieces of the written form.
    fn text() -> impl Strategy<Value = String> {
        let pieces = [
            "a",
            "task ",
            "\"",
            "\\",
            "\n",
            "\u{1f}",
            "\u{2028}",
            "\u{1d11e}",
            "\":\"",
            ",",
            "}",
        ];
        let piece = prop_oneof![
            3 => proptest::sample::select(pieces.to_vec()).prop_map(str::to_owned),
            1 => any::<char>().prop_map(String::from),
        ];
        proptest::collection::vec(piece, 0..4).prop_map(|pieces| pieces.concat())
    }

    fn entry() -> impl Strategy<Value = CatalogEntry> {
        let ids = ["s-1", "child-a", "c"];
        let modes = [
            ChildMode::CONTINUABLE,
            ChildMode::ONE_SHOT,
            ChildMode::EXTERNAL,
            ChildMode::UNKNOWN,
        ];
        (
            proptest::sample::select(ids.to_vec()),
            proptest::option::of(text()),
            text(),
            text(),
            proptest::sample::select(modes.to_vec()),
        )
            .prop_map(|(id, name, label, provider, mode)| CatalogEntry {
                child_id: SessionId::new(id).unwrap(),
                name,
                label,
                provider,
                mode,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 500,
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::Direct(
                    "proptest-regressions/list_entry.txt",
                ),
            )),
            ..ProptestConfig::default()
        })]

        /// What the hand reader reads of an entry, written or cut at any
        /// byte or with a byte flipped, serde reads to the same entry; an
        /// entry written without escapes is read by hand.
        #[test]
        fn the_hand_reader_reads_only_what_serde_reads_alike(
            entry in entry(),
            flips in proptest::collection::vec((any::<usize>(), 0..8_u8), 4),
        ) {
            let written = catalog_payload(&entry).get().to_owned();
            // The hand writer writes serde's bytes for the entry.
            prop_assert_eq!(&written, &serde_json::to_string(&entry).unwrap());
            let plain = [&entry.label, &entry.provider]
                .into_iter()
                .chain(&entry.name)
                .all(|field| !field.contains(['"', '\\']) && !field.chars().any(|c| u32::from(c) < 0x20));
            prop_assert_eq!(written_entry(&written).is_some(), plain, "{:?}", written);
            let mut damaged: Vec<Vec<u8>> = (0..=written.len())
                .map(|end| written.as_bytes()[..end].to_vec())
                .collect();
            for (at, bit) in flips {
                let mut bytes = written.clone().into_bytes();
                bytes[at % written.len()] ^= 1 << bit;
                damaged.push(bytes);
            }
            for bytes in damaged {
                let Ok(text) = std::str::from_utf8(&bytes) else { continue };
                if let Some(read) = written_entry(text) {
                    prop_assert_eq!(Some(read), general(text), "{:?}", text);
                }
            }
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
