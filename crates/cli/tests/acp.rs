//! An external (ACP) child as a user meets it through `dsh` (field run item
//! 9, the command's part): the real binary, driven by a loopback
//! OpenAI-compatible server whose lead starts the ACP suite's test-only
//! agent in the background. The run waits for that child to settle (the
//! runtime cannot join an external member, which has no local agent); its
//! summary names the child `external` with the tokens its agent reported
//! (its transcript is the agent program's, not an unreadable log);
//! `dsh agents` lists it; `dsh show` prints what its creator heard; `dsh
//! send` refuses it in one line that says why, in English a person reads
//! ("an external child").

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_test_support::skip_or_fail;
use support::model::{FakeModel, Reply};
use support::{Scratch, text};

#[test]
fn an_external_child_is_listed_summarised_and_refused_in_words_for_a_person() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let mut replies = vec![Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": "say hello",
            "name": "helper",
            // The agent's pause only makes it outlive the lead's turn (as
            // any real agent would), so a run that does not wait for it
            // fails for certain; nothing here waits on time.
            "prompt": "sleep 0.3; usage 300 200; say hello from the helper",
            "run_in_background": true,
        }),
    }];
    replies.extend((0..8).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let env = support::fake_env(&model);
    let run = support::run_with_rogue(&scratch, &model, &agent);
    let stdout = text(&run.stdout);
    assert!(run.status.success(), "{}{stdout}", text(&run.stderr));
    // The run waited for the background child: it finished, and the lead
    // heard of it, before the summary.
    let finished = stdout
        .find("finished helper: completed")
        .unwrap_or(usize::MAX);
    let tree = stdout.find("\ntree:").unwrap();
    assert!(
        finished < tree,
        "the run returned before its external child settled:\n{stdout}"
    );
    let summary = stdout
        .lines()
        .find(|line| line.trim_start().starts_with("helper "))
        .unwrap_or_else(|| panic!("no helper in the summary:\n{stdout}"));
    assert!(summary.contains(" external "), "{summary}");
    assert!(!summary.contains("unreadable"), "{summary}");
    // Its tokens are what its agent reported.
    assert!(summary.contains(" tokens 300/200"), "{summary}");

    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    let listing = text(&agents.stdout);
    assert!(
        listing
            .lines()
            .any(|line| line.trim_start().starts_with("helper ") && line.contains(" external ")),
        "{listing}"
    );

    // `show` prints what is known of it (tests/external.rs has the text).
    let show = scratch.dsh(&["show", "helper"], &[]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    assert!(text(&show.stdout).contains("hello from the helper"));
    // `send` uses the tree's recorded model (`openai:fake`), so its key.
    let err = scratch.refused(&["send", "helper", "hi"], &env, 1);
    assert!(
        err.contains("`helper` is an external child and cannot receive messages"),
        "{err}"
    );
}

/// `--acp-permission ask` (dsh.toml `acp.permission = "ask"`) shares the
/// terminal asker: the agent's request is one question naming the agent
/// and its action, `y` grants it once; without anything to ask, the
/// request is rejected and dsh says so on stderr.
#[test]
fn an_acp_agents_permission_request_is_put_to_the_person_with_ask() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let run = |extra: &[&str], input: &str| {
        let mut replies = vec![Reply::ToolCall {
            name: "acp".to_owned(),
            arguments: serde_json::json!({
                "description": "build it",
                "prompt": "ask cargo build; say built",
                "run_in_background": false,
            }),
        }];
        replies.extend((0..4).map(|_| Reply::Text("Noted.".to_owned())));
        let model = FakeModel::start(replies);
        let env = model.env();
        let mut args = support::acp_run(&agent);
        args.extend(["--acp-permission", "ask", "delegate"]);
        args.extend_from_slice(extra);
        let output = scratch.dsh_with_input(&args, &env, input);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let _first = model.next_request(std::time::Duration::from_secs(60));
        let second = model.next_request(std::time::Duration::from_secs(60));
        (text(&output.stderr), second)
    };
    let (stderr, request) = run(&["--ask"], "y\n");
    assert_eq!(
        stderr,
        "dsh: the ACP agent `acp` asks permission for: cargo build (execute). Allow? [y/a(lways)/N] "
    );
    assert!(request.contains("granted yes"), "{request}");

    let (stderr, request) = run(&["--no-ask"], "y\n");
    assert!(
        stderr.starts_with(
            "dsh: warning: the permission of the ACP agent `acp` is `ask` but nothing asks"
        ),
        "{stderr}"
    );
    assert!(!request.contains("granted"), "{request}");
}

/// Two named agents of dsh.toml (`[acp.agents.<name>]`), each offered as
/// the tool of its name: the model picks one per child; each runs with its
/// own arguments, passed-through variables and permission policy.
#[test]
fn named_acp_agents_are_picked_per_child_each_with_its_own_settings() {
    let Some((python, rogue)) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let agent = |name: &str, extra: &str| {
        format!(
            "[acp.agents.{name}]\ncommand = {:?}\nargs = [{:?}]\n{extra}",
            python.display().to_string(),
            rogue.display().to_string()
        )
    };
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        format!(
            "{}{}",
            agent("alpha", "pass_env = [\"DSH_ALPHA_ONLY\"]\n"),
            agent("beta", "permission = \"allow\"\nteardown_grace_ms = 500\n")
        ),
    )
    .unwrap();
    let child = |tool: &str, prompt: &str| Reply::ToolCall {
        name: tool.to_owned(),
        arguments: serde_json::json!({
            "description": format!("ask {tool}"),
            "name": tool,
            "prompt": prompt,
            "run_in_background": false,
        }),
    };
    let model = FakeModel::start(vec![
        child("alpha", "env; ask make"),
        child("beta", "env; ask make"),
        Reply::Text("Both answered.".to_owned()),
    ]);
    let mut env = model.env().to_vec();
    env.push(("DSH_ALPHA_ONLY", "1"));
    let run = scratch.dsh(
        &["run", "--model", "openai:fake", "--no-ask", "--json", "go"],
        &env,
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let _first = model.next_request(std::time::Duration::from_secs(60));
    let after_alpha = model.next_request(std::time::Duration::from_secs(60));
    let after_beta = model.next_request(std::time::Duration::from_secs(60));
    // alpha saw its variable and was refused (reject, the default); beta
    // did not see alpha's variable and was allowed.
    assert!(after_alpha.contains("DSH_ALPHA_ONLY"), "{after_alpha}");
    assert!(!after_alpha.contains("granted"), "{after_alpha}");
    let beta = after_beta.split("DSH_ALPHA_ONLY").count();
    assert_eq!(
        beta,
        after_alpha.split("DSH_ALPHA_ONLY").count(),
        "{after_beta}"
    );
    assert!(after_beta.contains("granted yes"), "{after_beta}");
    // Each child ran under the provider of its tool's name.
    // (A foreground external child has no catalog name yet when it
    // starts, so only its provider is checked.)
    let providers: Vec<String> = support::json_lines(&run.stdout)
        .iter()
        .filter(|line| line["type"] == "agent_started" && line["parent"] == "lead")
        .map(|line| line["provider"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(providers, ["alpha", "beta"]);
}

/// A continuable ACP child (its agent of dsh.toml advertises
/// `loadSession`) answers `dsh send`: the command installs dsh.toml's ACP
/// agents, sends the message as a follow-up run of the same session (the
/// agent recalls what it said in the first run, in a new process), and
/// prints that run's reply; `dsh agents` still lists one child.
#[test]
fn dsh_send_to_a_continuable_acp_child_sends_a_follow_up() {
    let Some((python, rogue)) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let sessions = scratch.dir.path().join("acp-sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        format!(
            "[acp.agents.rogue]\ncommand = {:?}\nargs = [{:?}, \"--sessions\", {:?}]\n",
            python.display().to_string(),
            rogue.display().to_string(),
            sessions.display().to_string()
        ),
    )
    .unwrap();
    let mut replies = vec![Reply::ToolCall {
        name: "rogue".to_owned(),
        arguments: serde_json::json!({
            "description": "say hello",
            "name": "helper",
            "prompt": "say hello from the helper",
            // A foreground external child has no catalog name.
            "run_in_background": true,
        }),
    }];
    replies.extend((0..8).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let env = support::fake_env(&model);
    let run = scratch.dsh(&["run", "--model", "openai:fake", "go"], &env);
    assert!(
        run.status.success(),
        "{}{}",
        text(&run.stderr),
        text(&run.stdout)
    );
    let send = scratch.dsh(&["send", "helper", "recall"], &env);
    let stdout = text(&send.stdout);
    assert!(send.status.success(), "{}{stdout}", text(&send.stderr));
    let reply = stdout
        .lines()
        .find(|line| line.starts_with("helper: "))
        .unwrap_or_else(|| panic!("no reply from the helper:\n{stdout}"));
    assert!(
        reply.contains("recalled: ") && reply.contains("hello from the helper"),
        "{reply}"
    );
    let agents = text(&scratch.dsh(&["agents"], &[]).stdout);
    let helpers = agents
        .lines()
        .filter(|line| line.trim_start().starts_with("helper "))
        .count();
    assert_eq!(helpers, 1, "{agents}");
    // The reply is the run's output, not the notice around it: a turn
    // that says nothing prints nothing after the name.
    let quiet = scratch.dsh(&["send", "helper", "think quietly"], &env);
    let stdout = text(&quiet.stdout);
    assert!(quiet.status.success(), "{}{stdout}", text(&quiet.stderr));
    assert!(stdout.lines().any(|line| line == "helper: "), "{stdout}");
    assert!(!stdout.contains("stop reason"), "{stdout}");
    // A follow-up that fails is refused, not printed as an answer.
    // (It ran, so the directory holds its notice: not a plain refusal.)
    let failed = scratch.dsh(&["send", "helper", "say partial; stop refusal"], &env);
    let err = text(&failed.stderr);
    assert!(!failed.status.success(), "{}", text(&failed.stdout));
    assert!(err.contains("`helper` stopped (refusal): partial"), "{err}");
    assert!(
        !text(&failed.stdout).contains("helper: "),
        "{}",
        text(&failed.stdout)
    );
    // Without the agent in dsh.toml there is nothing to continue it with.
    std::fs::remove_file(scratch.dir.path().join("dsh.toml")).unwrap();
    let err = scratch.refused_with(&["send", "helper", "recall"], &env, &[1, 2, 3, 4, 5]);
    assert!(
        err.contains("`helper` was made by the ACP agent `rogue`, which is not configured here"),
        "{err}"
    );
}

/// On a terminal the live view shows an ACP child from the progress bus:
/// the child has no log, yet its row carries the tokens its agent
/// reported (run under `script`, which gives `dsh` a terminal).
#[test]
fn the_live_view_shows_an_acp_childs_tokens_from_its_progress() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let script = std::path::Path::new("/usr/bin/script");
    if !script.is_file() {
        skip_or_fail("no `script` to give dsh a terminal");
        return;
    }
    let scratch = Scratch::new();
    let mut replies = vec![Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": "count",
            "name": "counter",
            "prompt": "tool; usage 1234 56; say counted",
            "run_in_background": false,
        }),
    }];
    replies.extend((0..4).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let mut args = support::acp_run(&agent);
    args.push("count");
    let dsh = scratch.command(&args, &support::fake_env(&model));
    let line: Vec<String> = std::iter::once(dsh.get_program())
        .chain(dsh.get_args())
        .map(|arg| format!("'{}'", arg.to_str().unwrap()))
        .collect();
    let mut command = std::process::Command::new(script);
    command
        .args(["-qec", &line.join(" "), "/dev/null"])
        .current_dir(scratch.dir.path())
        .env("COLUMNS", "120")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (var, value) in dsh.get_envs() {
        match value {
            Some(value) => command.env(var, value),
            None => command.env_remove(var),
        };
    }
    let run = support::wait_bounded(command.spawn().unwrap(), support::BOUND, "dsh under script");
    let stdout = text(&run.stdout);
    assert!(run.status.success(), "{}{stdout}", text(&run.stderr));
    assert!(
        stdout.lines().any(|line| line.contains(" acp ")
            && line.contains("1234/56")
            && !line.contains("tokens ")),
        "no live row with the ACP child's tokens:\n{stdout}"
    );
}

/// `dsh send` installs the ACP agents of dsh.toml as `dsh run` does: a
/// resumed local child is offered the `acp` tool and each named agent's.
#[test]
fn a_child_resumed_by_dsh_send_is_offered_the_acp_tools() {
    let Some((python, rogue)) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let (python, rogue) = (python.display().to_string(), rogue.display().to_string());
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        format!(
            "[acp]\ncommand = {python:?}\nargs = [{rogue:?}]\n\n[acp.agents.rogue]\ncommand = {python:?}\nargs = [{rogue:?}]\n"
        ),
    )
    .unwrap();
    let mut replies = vec![Reply::ToolCall {
        name: "subagent".to_owned(),
        arguments: serde_json::json!({
            "description": "look around",
            "prompt": "Say what you see.",
            "name": "worker",
            "run_in_background": false,
        }),
    }];
    replies.extend((0..6).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let env = support::fake_env(&model);
    let run = scratch.dsh(&["run", "--model", "openai:fake", "go"], &env);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let send = scratch.dsh(&["send", "worker", "ping the worker"], &env);
    assert!(send.status.success(), "{}", text(&send.stderr));
    let request = model.request_containing("ping the worker", support::BOUND);
    for tool in ["acp", "rogue"] {
        assert!(
            request.contains(&format!("\"name\":\"{tool}\"")),
            "{tool} missing:\n{request}"
        );
    }
}

/// An ACP child's usage is the tree's (B64 for an external child): the
/// 60,000 tokens the agent reports for its turn spend a tree budget of
/// 50,000, which stops the run naming it, and `--json` shows them as the
/// child's `usage` line; an agent that reports no usage is said once
/// (the budget cannot see it), however many of its children answer.
#[test]
fn an_acp_childs_reported_usage_spends_the_trees_budget_and_shows_in_json() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let model = FakeModel::start(support::delegating(&["usage 40000 20000; say counted"]));
    let mut args = support::acp_run(&agent);
    args.extend(["--max-tokens", "50000", "--json", "delegate"]);
    let run = scratch.dsh(&args, &support::fake_env(&model));
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("budget: the tree's token budget of 50000 was spent (60000 tokens used)"),
        "{stderr}"
    );
    let lines = support::json_lines(&run.stdout);
    let acp = lines
        .iter()
        .find(|line| line["type"] == "agent_started" && line["provider"] == "acp")
        .unwrap_or_else(|| panic!("no ACP child started: {lines:#?}"));
    let usage: Vec<_> = lines
        .iter()
        .filter(|line| line["type"] == "usage")
        .collect();
    assert_eq!(usage.len(), 1, "{lines:#?}");
    assert_eq!(usage[0]["session"], acp["session"]);
    assert_eq!(usage[0]["input_tokens"], 40_000);
    assert_eq!(usage[0]["output_tokens"], 20_000);
    assert!(
        lines
            .iter()
            .any(|line| line["type"] == "budget" && line["tokens"] == 60_000),
        "{lines:#?}"
    );

    let scratch = Scratch::new();
    let model = FakeModel::start(support::delegating(&["say one", "say two"]));
    let mut args = support::acp_run(&agent);
    args.extend(["--max-tokens", "50000", "delegate"]);
    let run = scratch.dsh(&args, &support::fake_env(&model));
    let shown = format!("{}{}", text(&run.stdout), text(&run.stderr));
    assert!(run.status.success(), "{shown}");
    let said = "budget: the ACP agent `acp` reports no usage, so the tree's budget cannot see what it spends";
    assert_eq!(shown.matches(said).count(), 1, "{shown}");
}

/// The TypeScript SDK's example agent (the real peer the peers' script
/// installs) reports no usage: under a tree budget, dsh says so once
/// rather than count its turn as zero tokens.
#[test]
fn a_real_agent_that_reports_no_usage_is_said_once_under_a_budget() {
    let agent = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../subagent-acp/peers/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !node || !agent.is_file() {
        skip_or_fail(
            "no node or no @agentclientprotocol/sdk (crates/subagent-acp/peers/install.sh)",
        );
        return;
    }
    let scratch = Scratch::new();
    let model = FakeModel::start(support::delegating(&["Change the database host."]));
    let args = [
        "run",
        "--model",
        "openai:fake",
        "--acp-command",
        "node",
        "--acp-arg",
        agent.to_str().unwrap(),
        "--max-tokens",
        "50000",
        "delegate",
    ];
    let run = scratch.dsh(&args, &support::fake_env(&model));
    let shown = format!("{}{}", text(&run.stdout), text(&run.stderr));
    assert!(run.status.success(), "{shown}");
    let said = "budget: the ACP agent `acp` reports no usage, so the tree's budget cannot see what it spends";
    assert_eq!(shown.matches(said).count(), 1, "{shown}");
}
