//! SIGINT, SIGTERM and SIGHUP stop `dsh` alike (field run item 6): the
//! real binary, driven by a loopback OpenAI-compatible server, is signalled
//! while its lead waits for the model, or while an ACP child (the ACP
//! suite's test-only agent, standard-library Python) hangs inside its
//! prompt with a grandchild in its process group; `dsh` exits `128 + n`
//! with one line, keeps its sessions, and leaves no process behind. SIGKILL
//! cannot be handled by any process; what it leaves is the kill test's
//! subject (`kill.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_test_support::skip_or_fail;
use rustix::process::{Pid, Signal, kill_process};
use support::model::{FakeModel, Reply};
use support::{BOUND, Scratch, processes, text, wait_bounded, wait_for};

const SIGNALS: [(Signal, i32, &str); 3] = [
    (Signal::TERM, 143, "terminated (SIGTERM)"),
    (Signal::HUP, 129, "hung up (SIGHUP)"),
    (Signal::INT, 130, "interrupted"),
];

fn signal(child: &std::process::Child, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    kill_process(pid, signal).unwrap();
}

fn model_env(model: &FakeModel) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_API_KEY", "sk-test".to_owned()),
        ("OPENAI_BASE_URL", model.base_url.clone()),
    ]
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The stopped command's output: exit `code`, its last stderr line `what`.
fn stopped(output: &std::process::Output, code: i32, what: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert_eq!(
        stderr.lines().last(),
        Some(format!("dsh: {what}; the tree was stopped and its sessions kept").as_str()),
        "{stderr}"
    );
    assert!(text(&output.stdout).contains("interrupted: stopping the tree"));
}

#[test]
fn each_stopping_signal_interrupts_a_waiting_lead_and_exits_128_plus_n() {
    for (sig, code, what) in SIGNALS {
        let scratch = Scratch::new();
        let model = FakeModel::start(vec![Reply::Hang]);
        let env = model_env(&model);
        let child = scratch.spawn(&["run", "--model", "openai:fake", "hi"], &env_refs(&env));
        // The lead is waiting for the model: the tree is live.
        model.next_request(BOUND);
        signal(&child, sig);
        let output = wait_bounded(child, BOUND, "dsh run after a signal");
        stopped(&output, code, what);
        let agents = scratch.dsh(&["agents"], &[]);
        assert!(agents.status.success(), "{}", text(&agents.stderr));
        assert_eq!(text(&agents.stdout).matches("tree s-").count(), 1);
    }
}

#[test]
fn a_signal_during_an_acp_turn_leaves_no_agent_process_running() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    for (sig, code, what) in SIGNALS {
        let scratch = Scratch::new();
        let marker = format!("--dsh-signal-test-{}", std::process::id());
        let model = FakeModel::start(vec![Reply::ToolCall {
            name: "acp".to_owned(),
            arguments: serde_json::json!({
                "description": "hang",
                "prompt": "say working; grandchild; hang",
            }),
        }]);
        let env = model_env(&model);
        let mut args = support::acp_run(&agent);
        args.extend(["--acp-arg", &marker, "delegate"]);
        let child = scratch.spawn(&args, &env_refs(&env));
        // The agent and its grandchild (`sleep`, in its process group).
        let dsh = child.id();
        wait_for("the ACP agent and its grandchild start", || {
            processes(&marker, dsh).len() >= 2
        });
        signal(&child, sig);
        let output = wait_bounded(child, BOUND, "dsh run after a signal");
        stopped(&output, code, what);
        wait_for("every ACP process is gone", || {
            processes(&marker, dsh).is_empty()
        });
    }
}

/// A second Ctrl-C while the tree is stopping quits at once: the ACP
/// agent ignores SIGTERM and its stdin closing, so the orderly stop would
/// wait out the whole teardown ladder; the second SIGINT, sent once `dsh`
/// says it is stopping, ends it with exit 130 and the line that says it
/// did not wait, and the agent's process group is killed with `dsh`.
#[test]
fn a_second_ctrl_c_while_stopping_quits_at_once_and_leaves_no_agent_process() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let marker = format!("--dsh-second-signal-{}", std::process::id());
    let model = FakeModel::start(vec![Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": "hang",
            "prompt": "say working; grandchild; hang",
        }),
    }]);
    let env = model_env(&model);
    let mut args = support::acp_run(&agent);
    // Both, so that the orderly stop really waits out the ladder (3 s of
    // EOF grace, then 2 s after SIGTERM): with the agent leaving at EOF,
    // a loaded machine could finish the stop before the second signal.
    args.extend([
        "--acp-arg",
        "--ignore-term",
        "--acp-arg",
        "--ignore-eof",
        "--acp-arg",
        &marker,
        "delegate",
    ]);
    let mut child = scratch.spawn(&args, &env_refs(&env));
    let dsh = child.id();
    wait_for("the ACP agent and its grandchild start", || {
        processes(&marker, dsh).len() >= 2
    });
    // Stdout line by line, to send the second signal while it stops.
    let (lines, seen) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = lines.send(line);
        }
        all
    });
    signal(&child, Signal::INT);
    loop {
        let line = seen
            .recv_timeout(BOUND)
            .expect("dsh never said it was stopping");
        if line.starts_with("interrupted: stopping the tree") {
            break;
        }
    }
    signal(&child, Signal::INT);
    let output = wait_bounded(child, BOUND, "dsh run after a second signal");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert_eq!(
        stderr.lines().last(),
        Some(
            "dsh: interrupted again; quit at once without waiting for the tree to stop (its sessions are kept)"
        ),
        "{stderr}"
    );
    assert!(reader.join().unwrap().contains("(again to quit at once)"));
    wait_for("every ACP process is gone", || {
        processes(&marker, dsh).is_empty()
    });
    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
}
