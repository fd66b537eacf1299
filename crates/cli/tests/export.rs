//! `dsh export`: a tree's logs written as a session directory of the local
//! JSONL store. Exported from a session directory, every file is byte for
//! byte the original (the store writes them itself, from the loaded
//! header and events), and the export reads back as the same tree.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

/// Every `*.jsonl` of `dir` by name, with its bytes.
fn logs(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

#[test]
fn an_exported_tree_is_byte_for_byte_its_logs_and_reads_back_the_same() {
    let scratch = Scratch::new();
    scratch.demo();
    let to = scratch.dir.path().join("exported");
    let export = scratch.dsh(&["export", "--to", to.to_str().unwrap()], &[]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    let original = logs(&scratch.sessions());
    let exported = logs(&to);
    assert!(original.len() > 1, "the demo leaves a tree");
    assert_eq!(
        exported.keys().collect::<Vec<_>>(),
        original.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &original {
        assert!(
            exported[name] == *bytes,
            "{name} differs:\n{}\n---\n{}",
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&exported[name])
        );
    }
    assert_eq!(
        text(&export.stdout),
        format!(
            "exported {} sessions of tree {} to {}\n",
            original.len(),
            scratch.root_id(),
            to.display()
        )
    );
    // The export is a session directory every command reads.
    let shown = |dir: &std::path::Path| {
        let out = scratch
            .bare(&["show", "researcher", "--dir", dir.to_str().unwrap()], &[])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(shown(&to), shown(&scratch.sessions()));

    // A second export into the same directory refuses and writes nothing.
    let again = scratch.dsh(&["export", "--to", to.to_str().unwrap()], &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("is already in the export directory; nothing was written"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(logs(&to), exported);
}
