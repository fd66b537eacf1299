//! `dsh` against a real Restate server (`crates/restate/server/install.sh`)
//! served by a real `dsh worker`, each test in its own private network
//! namespace (`dsh_test_support::restate`): a tree filled into the cluster
//! reads there exactly as in the session directory it came from (`agents`,
//! `show`, `replay`), and exports back to the same bytes; a server that
//! does not answer, a bad URL, a worker with a bad dsh.toml are each one
//! line; `dsh send` and `dsh resume` work on the cluster too, and a worker
//! that does not answer is named and waited on within a bound.

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

/// `dsh export [tree] --to DIR` from the cluster, which must succeed: DIR.
fn export(scratch: &Scratch, tree: Option<&str>) -> std::path::PathBuf {
    let to = scratch.dir.path().join("exported");
    let args = [
        tree.unwrap_or_default(),
        "--to",
        to.to_str().unwrap(),
        "--engine",
        "restate",
    ];
    let args: Vec<&str> = std::iter::once("export")
        .chain(args.into_iter().filter(|arg| !arg.is_empty()))
        .collect();
    let export = scratch.dsh(&args, &[]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    to
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

        let to = export(&scratch, None);
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

/// A server and a worker, and the output of `dsh run --json --engine
/// restate` (the demo's lead) run there.
async fn demo_on_cluster(scratch: &Scratch) -> (Server, restate::Worker, Output) {
    let (server, worker) =
        Server::with_worker(scratch.bare(&["worker", "--listen", WORKER_ADDR], &[])).await;
    let run = scratch.dsh(&["run", "--json", "--engine", "restate"], &[]);
    (server, worker, run)
}

/// `dsh run --engine restate` runs the demo model's lead on the cluster,
/// follows its tree into the `--json` view and exits as a local run does;
/// the cluster's logs then read back (`show`) and export whole.
#[test]
fn the_demo_runs_on_the_cluster_and_reads_back_as_it_ran() {
    if !restate::isolated("the_demo_runs_on_the_cluster_and_reads_back_as_it_ran") {
        return;
    }
    restate::run(async {
        let scratch = Scratch::new();
        let (server, _worker, run) = demo_on_cluster(&scratch).await;
        let stderr = text(&run.stderr);
        let lines: Vec<serde_json::Value> = text(&run.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let kinds: Vec<&str> = lines
            .iter()
            .map(|line| line["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds[..2], ["run_started", "agent_started"], "{stderr}");
        let lead = lines[1]["session"].as_str().unwrap().to_owned();
        assert_eq!(lines[1]["agent"], "lead");
        // The lead's end is the last line, and the command's end as a
        // local run's: its error on stderr, exit 1; none, exit 0.
        let last = lines.last().unwrap();
        assert_eq!(
            (&last["type"], &last["session"]),
            (&"settled".into(), &lead.clone().into())
        );
        match last["error"].as_str() {
            Some(error) => {
                assert_eq!(stderr, format!("dsh: {error}\n"));
                assert_eq!(run.status.code(), Some(1));
            }
            None => assert!(run.status.success(), "{stderr}"),
        }
        // The lead's child was started on the cluster, followed, and
        // settled before the lead's end.
        let child = lines
            .iter()
            .position(|line| line["type"] == "agent_started" && line["parent"] == "lead")
            .unwrap_or_else(|| panic!("no child in {kinds:?}"));
        let child_id = lines[child]["session"].as_str().unwrap().to_owned();
        assert_eq!(child_id, format!("{lead}.1"));
        assert!(
            lines[child..lines.len() - 1]
                .iter()
                .any(|line| line["type"] == "settled" && line["session"] == child_id.as_str()),
            "{kinds:?}"
        );
        assert!(!scratch.sessions().exists(), "nothing was written locally");

        // The cluster's logs read back: `show` the lead, and export the
        // tree, which reads the same from its directory.
        let show = scratch.dsh(
            &["show", "lead", "--root", &lead, "--engine", "restate"],
            &[],
        );
        assert!(show.status.success(), "{}", text(&show.stderr));
        let to = export(&scratch, Some(&lead));
        let exported = JsonlStore::new(&to, dsh_core::Durability::None).unwrap();
        let mut ids: Vec<String> = exported
            .list()
            .await
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        ids.sort();
        let started: Vec<String> = lines
            .iter()
            .filter(|line| line["type"] == "agent_started")
            .map(|line| line["session"].as_str().unwrap().to_owned())
            .collect();
        let mut expected = started.clone();
        expected.sort();
        assert_eq!(ids, expected);
        let from_dir = scratch
            .bare(&["show", "lead", "--dir", to.to_str().unwrap()], &[])
            .output()
            .unwrap();
        assert_eq!(text(&from_dir.stdout), text(&show.stdout));
        drop(server);
    });
}

/// A lead started on the cluster in `cwd`, which does not exist: its
/// first turn (`first`) fails for good before it starts, and the inbox
/// no longer waits for it (the input waits, no turn is scheduled).
async fn stuck_lead(
    client: &dsh_restate::client::RestateClient,
    cwd: &std::path::Path,
) -> dsh_core::SessionId {
    let header = dsh_core::SessionHeader::new(dsh_core::SessionId::generate(), cwd);
    let id = header.id.clone();
    client
        .start(&header, dsh_core::UserMessage::user_text("first"))
        .await
        .unwrap();
    loop {
        let failed = client.check_turns(&id).await.is_err();
        let status = client.status(&id).await.unwrap();
        if failed && !status.inbox.turn_scheduled {
            return id;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A turn that fails for good before it starts (here the worker cannot
/// open the session's working directory) does not leave its inbox
/// waiting for it: the next message schedules a turn, which runs once the
/// directory is there; both messages are answered, one turn each.
#[test]
fn a_turn_that_failed_before_its_start_does_not_block_the_next() {
    if !restate::isolated("a_turn_that_failed_before_its_start_does_not_block_the_next") {
        return;
    }
    restate::run(async {
        let scratch = Scratch::new();
        let (server, _worker) =
            Server::with_worker(scratch.bare(&["worker", "--listen", WORKER_ADDR], &[])).await;
        let client = &server.client;
        let cwd = scratch.dir.path().join("later");
        let id = stuck_lead(client, &cwd).await;
        std::fs::create_dir(&cwd).unwrap();
        let request = dsh_restate::state::inbox::AcceptRequest {
            request_id: "second".to_owned(),
            message: dsh_core::UserMessage::user_text("second"),
            target: dsh_core::InboxTarget::NextTurn,
            wake: true,
        };
        client.accept(&id, &request).await.unwrap();
        // Turns ran again, one for each message, in order.
        let store = dsh_restate::store::RestateSessionStore::new(client.clone());
        let events = loop {
            let events = store.load(&id).await.unwrap().events;
            let ends = events
                .iter()
                .filter(|event| matches!(event.payload, dsh_core::EventPayload::TurnEnd(_)))
                .count();
            if ends == 2 {
                break events;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let users: Vec<String> = events
            .iter()
            .filter_map(|event| match &event.payload {
                // The user's, not the demo's children's notices.
                dsh_core::EventPayload::UserMessage(entry)
                    if entry.message.source == dsh_core::MessageSource::User =>
                {
                    Some(dsh_core::content::joined_text(&entry.message.content))
                }
                _ => None,
            })
            .collect();
        assert_eq!(users, ["first", "second"]);
        drop(server);
    });
}

#[test]
fn a_silent_server_a_bad_url_and_a_bad_worker_config_are_one_line() {
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

    // dsh.toml's engine sends `dsh send` to the cluster (silent here).
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        "[engine]\nkind = \"restate\"\ningress_url = \"http://127.0.0.1:1\"\nadmin_url = \"http://127.0.0.1:1\"\n",
    )
    .unwrap();
    let run = scratch.dsh(&["send", "lead", "hello"], &[]);
    assert_eq!(run.status.code(), Some(5));
    assert_eq!(
        text(&run.stderr),
        "dsh: the Restate server at http://127.0.0.1:1/health did not answer: Connection refused (os error 111)\n"
    );
    assert!(!scratch.sessions().exists(), "nothing ran");
    // A request id is a cluster's, and never empty.
    for (request, said) in [
        ("", "dsh: bad --request-id: it is empty\n"),
        (
            "r-1",
            "dsh: bad --request-id: it names a message in a Restate cluster's inbox; add `--engine restate` (or dsh.toml's engine.kind)\n",
        ),
    ] {
        let engine = if request.is_empty() {
            "restate"
        } else {
            "local"
        };
        let refused = scratch.dsh(
            &[
                "send",
                "lead",
                "hello",
                "--request-id",
                request,
                "--engine",
                engine,
            ],
            &[],
        );
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
        assert_eq!(text(&refused.stderr), said);
    }
    // `--engine local` overrides the file: the demo runs as ever.
    let local = scratch.dsh(&["run", "--engine", "local"], &[]);
    assert!(local.status.success(), "{}", text(&local.stderr));
}

/// The user messages of `id`'s log on the cluster, in order, and how many
/// turns it ended.
async fn user_texts(client: &dsh_restate::client::RestateClient, id: &str) -> (Vec<String>, usize) {
    let store = dsh_restate::store::RestateSessionStore::new(client.clone());
    let events = store
        .load(&dsh_core::SessionId::new(id).unwrap())
        .await
        .unwrap()
        .events;
    let users = events
        .iter()
        .filter_map(|event| match &event.payload {
            // The user's, not the children's notices.
            dsh_core::EventPayload::UserMessage(entry)
                if entry.message.source == dsh_core::MessageSource::User =>
            {
                Some(dsh_core::content::joined_text(&entry.message.content))
            }
            _ => None,
        })
        .collect();
    let ends = events
        .iter()
        .filter(|event| matches!(event.payload, dsh_core::EventPayload::TurnEnd(_)))
        .count();
    (users, ends)
}

/// The `--json` lines of a cluster command that ran the lead end as a
/// local run's: the lead's `settled` last, its error (if any) the command's
/// one line on stderr and exit 1, or exit 0.
fn ended_as_a_run(output: &Output, lead: &str) {
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    let last: serde_json::Value = serde_json::from_str(
        stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("no output; stderr: {stderr}")),
    )
    .unwrap();
    assert_eq!(
        (&last["type"], &last["session"]),
        (&"settled".into(), &lead.into()),
        "{stderr}"
    );
    match last["error"].as_str() {
        Some(error) => {
            assert!(stderr.ends_with(&format!("dsh: {error}\n")), "{stderr}");
            assert_eq!(output.status.code(), Some(1), "{stderr}");
        }
        None => assert!(output.status.success(), "{stderr}"),
    }
}

/// A lead whose first turn failed before its start (the worker could not
/// open its working directory) is stuck: its input waits, no turn is
/// scheduled. Once the directory is there, `dsh resume --engine restate`
/// re-drives it and follows the tree until it is done; the failed turn,
/// history now, is not reported as failing. `dsh send lead` then puts a
/// message in its inbox under a request id and follows the tree again;
/// sent again with the same `--request-id`, the message is not delivered
/// twice.
#[test]
fn resume_re_drives_a_stuck_lead_and_send_follows_the_tree_on_the_cluster() {
    if !restate::isolated("resume_re_drives_a_stuck_lead_and_send_follows_the_tree_on_the_cluster")
    {
        return;
    }
    restate::run(async {
        let scratch = Scratch::new();
        let (server, _worker) =
            Server::with_worker(scratch.bare(&["worker", "--listen", WORKER_ADDR], &[])).await;
        let client = &server.client;
        let cwd = scratch.dir.path().join("later");
        let id = stuck_lead(client, &cwd).await;
        std::fs::create_dir(&cwd).unwrap();

        let resume = scratch.dsh(
            &["resume", id.as_str(), "--json", "--engine", "restate"],
            &[],
        );
        let said = text(&resume.stderr);
        assert!(
            said.contains("resume: lead: resumed: it continues with the input it had queued"),
            "{said}"
        );
        ended_as_a_run(&resume, id.as_str());
        assert_eq!(
            user_texts(client, id.as_str()).await,
            (vec!["first".to_owned()], 1)
        );
        // The failed turn was followed by one that ran: nothing fails now.
        client.check_turns(&id).await.unwrap();

        let send = |request: &'static str| {
            scratch.dsh(
                &[
                    "send",
                    "lead",
                    "second",
                    "--root",
                    id.as_str(),
                    "--request-id",
                    request,
                    "--json",
                    "--engine",
                    "restate",
                ],
                &[],
            )
        };
        let sent = send("r-second");
        assert!(
            text(&sent.stderr).contains("dsh: sending as request r-second"),
            "{}",
            text(&sent.stderr)
        );
        ended_as_a_run(&sent, id.as_str());
        let (users, ends) = user_texts(client, id.as_str()).await;
        assert_eq!(
            (users, ends),
            (vec!["first".to_owned(), "second".to_owned()], 2)
        );
        // The same request again: acknowledged, not delivered twice.
        ended_as_a_run(&send("r-second"), id.as_str());
        assert_eq!(user_texts(client, id.as_str()).await.1, 2);

        // A tree the cluster does not hold is one line, exit 3.
        let missing = scratch.dsh(&["resume", "s-nowhere", "--engine", "restate"], &[]);
        assert_eq!(missing.status.code(), Some(3), "{}", text(&missing.stderr));
        assert_eq!(
            text(&missing.stderr),
            "dsh: no session `s-nowhere` on the Restate cluster (see `dsh agents --engine restate`)\n"
        );
        drop(server);
    });
}

/// With the worker registered but gone, a cluster command does not wait
/// silently for the server's retries: one line names the worker's URL and
/// the server's last failure, and the command ends after the bound set
/// with `--worker-timeout`, naming the call (exit 5).
#[test]
fn a_registered_worker_that_does_not_answer_is_named_and_bounded() {
    if !restate::isolated("a_registered_worker_that_does_not_answer_is_named_and_bounded") {
        return;
    }
    restate::run(async {
        let scratch = Scratch::new();
        let (server, worker) =
            Server::with_worker(scratch.bare(&["worker", "--listen", WORKER_ADDR], &[])).await;
        let uri = worker.uri.clone();
        worker.kill9();
        let run = scratch.dsh(
            &["run", "--engine", "restate", "--worker-timeout", "2"],
            &[],
        );
        let said = text(&run.stderr);
        assert_eq!(run.status.code(), Some(5), "{said}");
        let lines: Vec<&str> = said.lines().collect();
        assert_eq!(lines.len(), 2, "{said}");
        assert!(
            lines[0].starts_with("dsh: no worker has answered `dsh.Worker/version` yet")
                && lines[0].contains(uri.trim_end_matches('/'))
                && lines[0].contains("failed: "),
            "{said}"
        );
        assert!(
            lines[1].starts_with("dsh: no worker answered `dsh.Worker/version` within "),
            "{said}"
        );
        assert!(!scratch.sessions().exists(), "nothing ran");
        drop(server);
    });
}

/// `dsh send CHILD` on the cluster: the message goes into the child's
/// inbox as the user's, the tree is followed until it is done, and the
/// command answers with the turn that took the message (its answer on
/// stdout, or its failure), never an older turn's.
#[test]
fn send_to_a_child_on_the_cluster_answers_with_the_turn_that_took_it() {
    if !restate::isolated("send_to_a_child_on_the_cluster_answers_with_the_turn_that_took_it") {
        return;
    }
    restate::run(async {
        let scratch = Scratch::new();
        let (server, _worker, run) = demo_on_cluster(&scratch).await;
        let lead = text(&run.stdout)
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .find(|line| line["type"] == "agent_started")
            .and_then(|line| line["session"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("no lead: {}", text(&run.stderr)));
        let child = format!("{lead}.1");
        let (before, _) = user_texts(&server.client, &child).await;

        let sent = scratch.dsh(
            &[
                "send", &child, "hello", "--root", &lead, "--engine", "restate",
            ],
            &[],
        );
        let (users, _) = user_texts(&server.client, &child).await;
        assert_eq!(users.len(), before.len() + 1, "{users:?}");
        assert_eq!(users.last().map(String::as_str), Some("hello"));
        // Its answer is the last turn's: the one that took `hello`.
        let store = dsh_restate::store::RestateSessionStore::new(server.client.clone());
        let events = store
            .load(&dsh_core::SessionId::new(&child).unwrap())
            .await
            .unwrap()
            .events;
        let last_end = events
            .iter()
            .rev()
            .find_map(|event| match &event.payload {
                dsh_core::EventPayload::TurnEnd(end) => Some(end.stop_reason.to_string()),
                _ => None,
            })
            .unwrap();
        let stdout = text(&sent.stdout);
        let stderr = text(&sent.stderr);
        if last_end == "completed" {
            assert!(sent.status.success(), "{stderr}");
            // The tree's lines as it ran, then the reply, last.
            let reply = stdout
                .lines()
                .rfind(|line| !line.starts_with(' '))
                .unwrap_or_default();
            // Named as its catalog entry names it (the demo's first child).
            assert!(reply.starts_with("researcher: "), "{stdout}");
        } else {
            assert_eq!(sent.status.code(), Some(1), "{stderr}");
            assert!(
                stderr.contains(&format!("dsh: `{child}` stopped ({last_end})")),
                "{stderr}"
            );
        }
        drop(server);
    });
}

/// The offline demo finishes on a worker as it does locally: the lead
/// starts `researcher` (`subagent`) and `reviewer` (`fork`) in the
/// background, lists them, messages `researcher` by name and waits for
/// both notices; its summary quotes both children, word for word what a
/// local run in the same workspace says.
#[test]
fn the_demo_finishes_on_a_worker_with_the_summary_a_local_run_prints() {
    if !restate::isolated("the_demo_finishes_on_a_worker_with_the_summary_a_local_run_prints") {
        return;
    }
    restate::run(async {
        let scratch = Scratch::new();
        std::fs::write(
            scratch.dir.path().join("README.md"),
            "# A workspace for the demo\n\nOne heading, one file.\n",
        )
        .unwrap();
        let summary = |output: &str| {
            output.lines().find_map(|line| {
                line.split_once("Summary: ")
                    .map(|(_, said)| said.to_owned())
            })
        };
        let local = summary(&scratch.demo()).expect("a local run's summary");
        assert!(local.contains("README.md"), "{local}");
        let (server, _worker) =
            Server::with_worker(scratch.bare(&["worker", "--listen", WORKER_ADDR], &[])).await;
        let run = scratch.dsh(&["run", "--engine", "restate"], &[]);
        let stdout = text(&run.stdout);
        assert!(run.status.success(), "{stdout}{}", text(&run.stderr));
        assert_eq!(summary(&stdout), Some(local), "{stdout}");
        drop(server);
    });
}
