//! `dsh --durability` (dsh.toml `durability`): under `batched` the demo's
//! tree runs as under the default, every log is whole and readable when
//! `dsh` has exited (batched writes reach the OS at once, so this shows no
//! sync; the store's own tests do), and `dsh send` continues
//! a child under it; an unknown mode is refused before anything runs.
//! Real processes over a real session directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::{Durability, SessionStore};
use dsh_harness::store::JsonlStore;
use support::{Scratch, text};

#[test]
fn the_batched_demo_runs_and_leaves_every_log_whole() {
    let scratch = Scratch::new();
    let output = scratch.dsh(&["run", "--durability", "batched"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stderr), "");
    let default = Scratch::new();
    default.demo();
    let agents = |scratch: &Scratch| text(&scratch.dsh(&["agents"], &[]).stdout).lines().count();
    assert_eq!(agents(&scratch), agents(&default));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let logs = runtime.block_on(async {
        let store = JsonlStore::new(scratch.sessions(), Durability::TurnBoundary).unwrap();
        let ids = store.list().await.unwrap();
        for loaded in store.load_many(&ids).await {
            assert!(loaded.unwrap().torn_tail.is_none());
        }
        ids.len()
    });
    assert!(logs > 1, "{logs}");

    let researcher = scratch.child_id("researcher");
    let before = scratch.user_messages(&researcher);
    let send = scratch.dsh(
        &[
            "send",
            "--durability",
            "batched",
            "researcher",
            "Which crate owns the catalog?",
        ],
        &[],
    );
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert_eq!(scratch.user_messages(&researcher), before + 1);
}

#[test]
fn an_unknown_durability_in_dsh_toml_is_refused_before_anything_runs() {
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        "durability = \"fast\"\n",
    )
    .unwrap();
    let refused = scratch.refused(&["run"], &[], 2);
    assert!(
        refused.contains("durability: `fast` is not one of"),
        "{refused}"
    );
    assert!(!scratch.sessions().exists());
    // The flag wins over the file.
    let output = scratch.dsh(&["run", "--durability", "grouped"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
}
