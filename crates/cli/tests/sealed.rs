//! `dsh` over sealed logs: after the demo's logs are sealed (the opt-in
//! zstd form of `JsonlStore::seal`), `dsh agents` and `dsh show` print what
//! they printed over the plain logs, and `dsh send` resumes a sealed child
//! (its log unsealed before the turn is written). Real processes over a
//! real session directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::{Durability, SessionStore};
use dsh_harness::store::JsonlStore;
use support::{Scratch, text};

/// Seal every log under the scratch's session directory; how many.
fn seal_all(scratch: &Scratch) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = JsonlStore::new(scratch.sessions(), Durability::TurnBoundary).unwrap();
        let ids = store.list().await.unwrap();
        for id in &ids {
            store.seal(id).await.unwrap();
        }
        ids.len()
    })
}

/// The names of the files in the session directory with `suffix`.
fn files_ending(scratch: &Scratch, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(scratch.sessions())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(suffix))
        .collect();
    names.sort();
    names
}

#[test]
fn agents_show_and_send_read_sealed_logs_transparently() {
    let scratch = Scratch::new();
    scratch.demo();
    let read = |args: &[&str]| {
        let output = scratch.dsh(args, &[]);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    };
    let agents = read(&["agents"]);
    let show = read(&["show", "researcher"]);
    let plain = files_ending(&scratch, ".jsonl");
    let researcher = scratch.child_id("researcher");
    let before = scratch.user_messages(&researcher);

    assert_eq!(seal_all(&scratch), plain.len());
    assert_eq!(files_ending(&scratch, ".jsonl"), Vec::<String>::new());
    let sealed: Vec<String> = plain.iter().map(|name| format!("{name}.zst")).collect();
    assert_eq!(files_ending(&scratch, ".jsonl.zst"), sealed);
    assert_eq!(read(&["agents"]), agents);
    assert_eq!(read(&["show", "researcher"]), show);

    // A message to the sealed child resumes it; its log is plain again.
    let send = scratch.dsh(
        &["send", "researcher", "Which crate owns the catalog?"],
        &[],
    );
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert!(
        files_ending(&scratch, ".jsonl").contains(&format!("{researcher}.jsonl")),
        "{:?}",
        files_ending(&scratch, "")
    );
    assert!(!files_ending(&scratch, ".zst").contains(&format!("{researcher}.jsonl.zst")));
    assert_eq!(scratch.user_messages(&researcher), before + 1);
}
