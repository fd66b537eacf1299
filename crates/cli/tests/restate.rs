//! `dsh` against a real Restate server (`crates/restate/server/install.sh`)
//! served by a real `dsh worker`, each test in its own private network
//! namespace (`dsh_test_support::restate`): a tree filled into the cluster
//! reads there exactly as in the session directory it came from (`agents`,
//! `show`, `replay`), and exports back to the same bytes; a server that
//! does not answer, a bad URL, a worker with a bad dsh.toml and a command
//! not built on Restate yet are each one line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use dsh_core::SessionStore as _;
use dsh_harness::JsonlStore;
use dsh_restate::object::SessionSeed;
use dsh_test_support::restate::{self, Server, WORKER_ADDR};
use support::*;

/// The flags that address the test's server.
const ENGINE: [&str; 2] = ["--engine", "restate"];

/// `dsh args...` against the session directory, then against the cluster:
/// both outputs, each checked to have succeeded.
fn both(scratch: &Scratch, args: &[&str]) -> (String, String) {
    let ok = |output: Output| {
        assert!(
            output.status.success(),
            "{args:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    };
    let local = ok(scratch.dsh(args, &[]));
    let cluster = ok(scratch.dsh(&[args, &ENGINE].concat(), &[]));
    (local, cluster)
}

#[test]
fn a_tree_in_the_cluster_reads_and_exports_as_its_session_directory() {
    if !restate::isolated("a_tree_in_the_cluster_reads_and_exports_as_its_session_directory") {
        return;
    }
    restate::run(async {
        let scratch = Scratch::new();
        scratch.demo();
        let (server, _worker) =
            Server::with_worker(scratch.bare(&["worker", "--listen", WORKER_ADDR], &[])).await;
        // Every log of the demo's tree, created whole in its object.
        let local = JsonlStore::new(scratch.sessions(), dsh_core::Durability::None).unwrap();
        let ids = local.list().await.unwrap();
        assert!(ids.len() > 1, "the demo leaves a tree");
        for id in &ids {
            let loaded = local.load(id).await.unwrap();
            server
                .client
                .create_session(&SessionSeed {
                    header: loaded.header,
                    seed: loaded.events,
                })
                .await
                .unwrap();
        }

        let (local, cluster) = both(&scratch, &["agents"]);
        assert_eq!(cluster, local);
        for name in ["lead", "researcher"] {
            let (local, cluster) = both(&scratch, &["show", name]);
            assert_eq!(cluster, local, "{name}");
        }
        let (local, cluster) = both(&scratch, &["replay"]);
        assert_eq!(cluster, local);

        let to = scratch.dir.path().join("exported");
        let export = scratch.dsh(
            &[
                "export",
                "--to",
                to.to_str().unwrap(),
                "--engine",
                "restate",
            ],
            &[],
        );
        assert!(export.status.success(), "{}", text(&export.stderr));
        for id in &ids {
            let name = format!("{id}.jsonl");
            let original = std::fs::read(scratch.sessions().join(&name)).unwrap();
            let exported = std::fs::read(to.join(&name)).unwrap();
            assert!(
                exported == original,
                "{name} differs:\n{}\n---\n{}",
                String::from_utf8_lossy(&original),
                String::from_utf8_lossy(&exported)
            );
        }

        // A session the cluster does not hold is named.
        let missing = scratch.dsh(
            &["show", "lead", "--root", "s-nowhere", "--engine", "restate"],
            &[],
        );
        assert_eq!(missing.status.code(), Some(3), "{}", text(&missing.stderr));
        drop(server);
    });
}

#[test]
fn a_silent_server_a_bad_url_and_a_command_not_built_on_restate_are_one_line() {
    let scratch = Scratch::new();
    // Port 1 on loopback: nothing listens there.
    let silent = scratch.dsh(
        &[
            "agents",
            "--engine",
            "restate",
            "--ingress",
            "http://127.0.0.1:1",
            "--admin",
            "http://127.0.0.1:1",
        ],
        &[],
    );
    assert_eq!(silent.status.code(), Some(5), "{}", text(&silent.stderr));
    let said = text(&silent.stderr);
    assert_eq!(
        said,
        "dsh: the Restate server at http://127.0.0.1:1/health did not answer: Connection refused (os error 111)\n"
    );

    let bad = scratch.dsh(
        &[
            "show",
            "lead",
            "--engine",
            "restate",
            "--admin",
            "127.0.0.1:9070",
        ],
        &[],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(
        text(&bad.stderr),
        "dsh: bad --admin `127.0.0.1:9070`: not an http:// URL\n"
    );

    // A worker with a bad dsh.toml stops before it listens, in one line.
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        "sandbox = \"everything\"\n",
    )
    .unwrap();
    let worker = scratch
        .bare(&["worker", "--listen", "127.0.0.1:0"], &[])
        .output()
        .unwrap();
    assert_eq!(worker.status.code(), Some(2), "{}", text(&worker.stderr));
    assert_eq!(text(&worker.stdout), "");
    assert!(
        text(&worker.stderr).starts_with("dsh: ")
            && text(&worker.stderr).contains("dsh.toml: sandbox: "),
        "{}",
        text(&worker.stderr)
    );

    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        "[engine]\nkind = \"restate\"\n",
    )
    .unwrap();
    let run = scratch.dsh(&["run"], &[]);
    assert_eq!(run.status.code(), Some(1));
    assert!(
        text(&run.stderr).contains("`dsh run` on Restate is not built yet"),
        "{}",
        text(&run.stderr)
    );
    assert!(!scratch.sessions().exists(), "nothing ran");
    // `--engine local` overrides the file: the demo runs as ever.
    let local = scratch.dsh(&["run", "--engine", "local"], &[]);
    assert!(local.status.success(), "{}", text(&local.stderr));
}
