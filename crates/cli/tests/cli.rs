//! The `dsh` command run as a process, each test in its own temporary
//! directory with the model variables cleared: the offline demo's plain
//! output (stdout is a pipe here, so never the live view), the persisted
//! tree (`agents`), a user's message to a cold child (`send`), a child's
//! transcript (`show`), and every bad-input path, which must exit non-zero
//! with exactly one line on stderr, no panic, and the session directory
//! byte for byte as it was. Snapshots redact session ids, the temporary
//! directory and token counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use support::{Scratch, copy_fixture, text};

#[test]
fn the_offline_demo_runs_the_whole_tree_and_leaves_it_to_list_message_and_read() {
    let scratch = Scratch::new();
    // The demo's tools search and read the directory it runs in: a fixture.
    copy_fixture("greeter", scratch.dir.path());
    let run = scratch.demo();
    snapshot!(&scratch, "run_demo", &run);

    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    snapshot!(&scratch, "agents", &text(&agents.stdout));

    // The researcher is cold (the run ended); `send` resumes it for one turn.
    let researcher = scratch.child_id("researcher");
    let before = scratch.user_messages(&researcher);
    let send = scratch.dsh(
        &["send", "researcher", "Which crate owns the catalog?"],
        &[],
    );
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert_eq!(text(&send.stderr), "");
    let reply = text(&send.stdout);
    assert!(
        reply.starts_with("researcher: You asked: \"Which crate owns the catalog?\"."),
        "{reply}"
    );
    assert_eq!(reply.lines().count(), 1, "{reply}");
    assert_eq!(scratch.user_messages(&researcher), before + 1);

    let show = scratch.dsh(&["show", "researcher"], &[]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    snapshot!(&scratch, "show_researcher", &text(&show.stdout));

    // The forked reviewer shows its own turns only.
    let show = scratch.dsh(&["show", "reviewer"], &[]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    snapshot!(&scratch, "show_reviewer", &text(&show.stdout));
    dsh_test_support::replays::assert_dir_replays(&scratch.sessions());
}

#[test]
fn a_second_run_adds_a_second_tree_and_names_resolve_in_the_latest() {
    let scratch = Scratch::new();
    let first = scratch.demo();
    let second = scratch.demo();
    // The same demo, the same output but for the lead's id and its token
    // counts: the lead's `list_agents` shows what each running child is
    // doing at that moment, which depends on timing, and the scripted
    // model counts the tokens of what it is shown.
    let redact = |text: &str| {
        text.lines()
            .filter(|line| !line.starts_with("lead s-"))
            .map(|line| {
                let mut words: Vec<&str> = line.split_whitespace().collect();
                for at in 1..words.len() {
                    if words[at - 1] == "tokens" && matches!(words[0], "lead" | "total") {
                        words[at] = "[n]";
                    }
                }
                words.join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(redact(&first), redact(&second));
    let agents = text(&scratch.dsh(&["agents"], &[]).stdout);
    assert_eq!(agents.matches("tree s-").count(), 2, "{agents}");
    assert_eq!(agents.matches("(most recent)").count(), 1, "{agents}");
    let latest = agents
        .lines()
        .find(|line| line.ends_with("(most recent)"))
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap()
        .to_owned();
    let oldest = agents
        .lines()
        .find(|line| line.starts_with("tree ") && !line.ends_with("(most recent)"))
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap()
        .to_owned();
    assert!(second.contains(&latest) && first.contains(&oldest));
    let show = scratch.dsh(&["show", "lead", "--root", &oldest], &[]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    assert!(text(&show.stdout).starts_with("lead\n"));
}

#[test]
fn unknown_names_and_roots_are_refused_without_touching_the_sessions() {
    let scratch = Scratch::new();
    scratch.demo();
    let err = scratch.refused(&["send", "nobody", "hello"], &[], 3);
    assert!(err.contains("no agent named `nobody`"), "{err}");
    let err = scratch.refused(&["show", "researcher/nobody"], &[], 3);
    assert!(err.contains("no agent named `researcher/nobody`"), "{err}");
    let err = scratch.refused(&["show", "lead", "--root", "s-nope"], &[], 3);
    let place = scratch.sessions();
    assert!(
        err.contains(&format!("no root session `s-nope` in {}", place.display())),
        "the refusal names where it looked: {err}"
    );
}

#[test]
fn a_missing_session_directory_is_refused_and_not_created() {
    let scratch = Scratch::new();
    for args in [&["agents"][..], &["show", "lead"], &["send", "a", "b"]] {
        let err = scratch.refused(args, &[], 3);
        assert!(err.contains("no session directory at"), "{err}");
        assert!(!scratch.sessions().exists());
    }
}

#[test]
fn a_missing_api_key_is_refused_before_anything_is_written() {
    let scratch = Scratch::new();
    scratch.demo();
    let err = scratch.refused(&["run", "--model", "openai:gpt-4o-mini"], &[], 2);
    assert!(err.contains("OPENAI_API_KEY"), "{err}");
    let err = scratch.refused(&["send", "researcher", "hi", "--model", "openai:x"], &[], 2);
    assert!(err.contains("OPENAI_API_KEY"), "{err}");
    // Also when the model comes from DSH_MODEL.
    scratch.refused(&["run"], &[("DSH_MODEL", "openai:x")], 2);
}

#[test]
fn an_unreachable_base_url_fails_naming_it_without_leaking_the_key() {
    let scratch = Scratch::new();
    scratch.demo();
    let key = "sk-test-0123456789abcdef";
    let env = [
        ("OPENAI_API_KEY", key),
        ("OPENAI_BASE_URL", "http://user:secret@127.0.0.1:9/v1"),
    ];
    let err = scratch.refused(&["run", "--model", "openai:x"], &env, 5);
    assert!(err.contains("unreachable"), "{err}");
    assert!(err.contains("http://127.0.0.1:9"), "{err}");
    assert!(!err.contains("secret") && !err.contains(key), "{err}");
    let err = scratch.refused(
        &["send", "researcher", "hi", "--model", "openai:x"],
        &env,
        5,
    );
    assert!(err.contains("unreachable"), "{err}");
}

#[test]
fn a_bad_model_spec_is_refused() {
    let scratch = Scratch::new();
    scratch.demo();
    for spec in ["gpt-4o", "openai:", "anthropic:claude"] {
        let err = scratch.refused(&["run", "--model", spec], &[], 2);
        assert!(err.contains("bad --model"), "{err}");
    }
    let err = scratch.refused(&["run"], &[("DSH_MODEL", "nonsense")], 2);
    assert!(err.contains("bad --model `nonsense`"), "{err}");
    // clap's own refusals are one line too.
    let err = scratch.refused(&["run", "--frobnicate"], &[], 2);
    assert!(err.contains("--frobnicate"), "{err}");
}

#[test]
fn agents_marks_a_child_whose_log_is_gone_and_lists_the_rest() {
    let scratch = Scratch::new();
    scratch.demo();
    let reviewer = scratch.child_id("reviewer");
    std::fs::remove_file(scratch.sessions().join(format!("{reviewer}.jsonl"))).unwrap();
    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    snapshot!(&scratch, "agents_unavailable", &text(&agents.stdout));
}

#[test]
fn an_acp_agent_can_be_offered_and_a_stray_acp_arg_is_refused() {
    let scratch = Scratch::new();
    scratch.demo();
    // The ACP provider is only registered: the demo's lead does not call the
    // `acp` tool, so no process is started and the run is the same demo.
    let output = scratch.dsh(
        &[
            "run",
            "--acp-command",
            "/nonexistent/acp-agent",
            "--acp-arg",
            "--stdio",
        ],
        &[],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("finished reviewer: completed"));
    let err = scratch.refused(&["run", "--acp-arg", "x"], &[], 2);
    assert!(
        err.contains("--acp-arg: no ACP agent is configured"),
        "{err}"
    );
}

/// Offline, a typed prompt is still the lead's task (shown as such), the
/// banner and the lead's first words say what is scripted, and in a
/// directory with no Markdown the researcher's answer is what the real
/// grep found: nothing.
#[test]
fn a_typed_prompt_is_the_demo_leads_task_and_the_demo_says_what_is_scripted() {
    let scratch = Scratch::new();
    let run = scratch.dsh(&["run", "fix the failing test"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("dsh: offline demo: a scripted model plays every agent"),
        "{stdout}"
    );
    assert!(lines[1].ends_with(": fix the failing test"), "{stdout}");
    assert!(
        stdout.contains("the researcher reports: grep found no Markdown heading in this workspace"),
        "{stdout}"
    );
    let lead = text(&scratch.dsh(&["show", "lead"], &[]).stdout);
    assert!(
        lead.contains(
            "(Offline demo: my words are scripted and do not follow your task; the tools are real.)"
        ),
        "{lead}"
    );
}
