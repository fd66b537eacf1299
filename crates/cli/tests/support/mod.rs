//! What every `dsh` process test shares: a scratch directory with the
//! sessions under `sessions/`, the real binary run in it with the model
//! variables cleared and the configuration directory inside the scratch,
//! the checks of a clean refusal, and snapshots that
//! redact session ids, the scratch path and token counts.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod model;
pub mod openai;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long any one `dsh` process may run before the test fails as a hang.
pub const BOUND: Duration = Duration::from_secs(120);

/// Wait for `child` (spawned with piped stdout and stderr; one the caller
/// took reads as empty) to exit within
/// `bound`, collecting its output; on timeout, kill it and fail the test.
pub fn wait_bounded(child: Child, bound: Duration, what: &str) -> Output {
    within(child, bound).unwrap_or_else(|_| panic!("{what} did not exit within {bound:?}: a hang"))
}

/// Wait for `child` as [`wait_bounded`] does; on timeout, kill it and
/// return what it printed as the error.
pub fn within(mut child: Child, bound: Duration) -> Result<Output, Output> {
    // A pipe the caller already took (to read it as it comes) is empty here.
    let pipe = |reader: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut reader) = reader {
                let _ = reader.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = pipe(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let stderr = pipe(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + bound;
    let mut hung = None;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            hung = Some(hang_report(&child));
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut output = Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    match hung {
        Some(report) => {
            output.stderr.extend_from_slice(report.as_bytes());
            Err(output)
        }
        None => Ok(output),
    }
}

/// What a process that did not exit in time is doing, for the failure
/// message: each thread's name, state, kernel wait channel and system call
/// (from `/proc`, so a hang in CI says whether it waits on a lock, a
/// timer or the disk), then the last line of every session log under its
/// working directory. Best effort: what cannot be read is left out.
pub fn hang_report(child: &Child) -> String {
    let pid = child.id();
    let mut report = format!("\n--- pid {pid} did not exit in time: its threads ---\n");
    let read = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        let mut tasks: Vec<PathBuf> = tasks.flatten().map(|task| task.path()).collect();
        tasks.sort();
        for task in tasks {
            let stat = read(task.join("stat"));
            // The state follows the parenthesised name.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').next())
                .unwrap_or("?")
                .to_owned();
            report.push_str(&format!(
                "{} {:<16} {state} wchan={} syscall={}\n",
                task.file_name().unwrap_or_default().to_string_lossy(),
                read(task.join("comm")).trim(),
                read(task.join("wchan")).trim(),
                read(task.join("syscall"))
                    .split(' ')
                    .next()
                    .unwrap_or("")
                    .trim(),
            ));
        }
    }
    let sessions = std::fs::read_link(format!("/proc/{pid}/cwd"))
        .map(|cwd| cwd.join("sessions"))
        .ok();
    if let Some(entries) = sessions.and_then(|dir| std::fs::read_dir(dir).ok()) {
        report.push_str("--- the last line of each session log ---\n");
        let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        paths.sort();
        for path in paths {
            let text = read(path.clone());
            let last = text.lines().last().unwrap_or("");
            let cut: String = last.chars().take(300).collect();
            report.push_str(&format!(
                "{} ({} bytes, {} lines): {cut}\n",
                path.file_name().unwrap_or_default().to_string_lossy(),
                text.len(),
                text.lines().count()
            ));
        }
    }
    report
}

/// A scratch directory with the sessions under `sessions/`.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn sessions(&self) -> PathBuf {
        self.dir.path().join("sessions")
    }

    /// Run `dsh args...` in the scratch directory with `--dir` set (for the
    /// subcommands that take it) and only `env` of the model variables.
    pub fn dsh(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let child = self.spawn(args, env);
        wait_bounded(child, BOUND, &format!("dsh {args:?}"))
    }

    /// Start `dsh args...` as [`Scratch::dsh`] does, with piped output.
    pub fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        self.command(args, env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Run `dsh args...` as [`Scratch::dsh`] does, with `input` on stdin
    /// (a pipe: typed answers, with `--ask`).
    pub fn dsh_with_input(&self, args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .command(args, env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Written all at once and closed: end of input answers the rest.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        wait_bounded(child, BOUND, &format!("dsh {args:?}"))
    }

    /// The command [`Scratch::dsh`] runs.
    pub fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = self.bare(args, env);
        command.arg("--dir").arg(self.sessions());
        command
    }

    /// `dsh args...` in the scratch directory with only `env` of the model
    /// variables, for the subcommands that take no `--dir`.
    pub fn bare(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
        command.current_dir(self.dir.path()).args(args);
        for var in ["DSH_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "COLUMNS"] {
            command.env_remove(var);
        }
        // The user's own `dsh.toml` is never read: the configuration
        // directory is the scratch's (empty unless a test writes one).
        command
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg"))
            .env("HOME", self.dir.path());
        for (var, value) in env {
            command.env(var, value);
        }
        command
    }

    /// Run the offline demo once; it must succeed.
    pub fn demo(&self) -> String {
        let output = self.dsh(&["run"], &[]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        assert_eq!(text(&output.stderr), "");
        text(&output.stdout)
    }

    /// Every file under the session directory with its bytes (a symlink
    /// with its target).
    pub fn listing(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, files: &mut BTreeMap<PathBuf, Vec<u8>>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
                if kind.is_symlink() {
                    // A link is its target, never followed.
                    let target = std::fs::read_link(&path).unwrap();
                    files.insert(path.clone(), target.into_os_string().into_encoded_bytes());
                } else if kind.is_dir() {
                    walk(&path, files);
                } else {
                    files.insert(path.clone(), std::fs::read(&path).unwrap());
                }
            }
        }
        let mut files = BTreeMap::new();
        walk(&self.sessions(), &mut files);
        files
    }

    /// The most recent tree's root session id, as `dsh agents` lists it.
    pub fn root_id(&self) -> String {
        let agents = text(&self.dsh(&["agents"], &[]).stdout);
        agents
            .lines()
            .find_map(|line| line.strip_prefix("tree "))
            .and_then(|line| line.split_whitespace().next())
            .unwrap_or_else(|| panic!("no tree in {agents}"))
            .to_owned()
    }

    /// The most recent tree's root log, locked by this test process as a
    /// running `dsh` holds it (unlocked when dropped).
    pub fn hold_root(&self) -> std::fs::File {
        let log = self.sessions().join(format!("{}.jsonl", self.root_id()));
        let held = std::fs::OpenOptions::new().read(true).open(&log).unwrap();
        held.try_lock().unwrap();
        held
    }

    /// Run `dsh args` until its first line on stderr, then `release` and
    /// wait for it (bounded): that line, the output, and the rest of its
    /// stderr.
    pub fn first_line_then(
        &self,
        args: &[&str],
        release: impl FnOnce(),
    ) -> (String, Output, String) {
        let mut child = self.spawn(args, &[]);
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        release();
        let output = wait_bounded(child, BOUND, &args.join(" "));
        let mut rest = String::new();
        stderr.read_to_string(&mut rest).unwrap();
        (line, output, rest)
    }

    /// The session id of the child named `name` in the latest tree.
    pub fn child_id(&self, name: &str) -> String {
        let agents = text(&self.dsh(&["agents"], &[]).stdout);
        let line = agents
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {agents}"));
        line.split_whitespace().nth(3).unwrap().to_owned()
    }

    /// How many `user/message` events written by the user a log holds.
    pub fn user_messages(&self, id: &str) -> usize {
        let log = std::fs::read_to_string(self.sessions().join(format!("{id}.jsonl"))).unwrap();
        log.lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .filter(|event| {
                event["type"] == "user/message"
                    && event["payload"]["message"]["source"]["kind"] == "user"
            })
            .count()
    }

    /// Run `dsh args...` and check it is refused cleanly: a non-zero
    /// `code`, one line on stderr (returned), no panic, nothing on stdout,
    /// and the session directory unchanged.
    pub fn refused(&self, args: &[&str], env: &[(&str, &str)], code: i32) -> String {
        self.refused_with(args, env, &[code])
    }

    /// [`Scratch::refused`] with any of `codes`.
    pub fn refused_with(&self, args: &[&str], env: &[(&str, &str)], codes: &[i32]) -> String {
        let before = self.listing();
        let output = self.dsh(args, env);
        let after = self.listing();
        let stderr = text(&output.stderr);
        assert!(
            output
                .status
                .code()
                .is_some_and(|code| codes.contains(&code)),
            "dsh {args:?}: exit {:?}, stderr {stderr:?}",
            output.status.code()
        );
        assert_eq!(stderr.lines().count(), 1, "dsh {args:?}: {stderr:?}");
        assert!(
            stderr.ends_with('\n') && stderr.starts_with("dsh: "),
            "{stderr:?}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(text(&output.stdout), "", "dsh {args:?} printed to stdout");
        assert!(
            before == after,
            "dsh {args:?} changed the session directory"
        );
        stderr
    }
}

/// The bytes of every file in `dir` (logs and temporaries; 0 when it
/// cannot be read): how far a run has written.
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Start `dsh args` in `scratch` and SIGKILL it once its session
/// directory has grown by `point` bytes (polled every millisecond; a kill
/// point is a byte count, so it covers the whole run however fast the
/// machine is); a run that does not finish nor reach the point within
/// [`BOUND`] fails the test, with a [`hang_report`]. Whether the kill
/// landed inside the run: `false` when the run finished first.
pub fn kill_once_written(scratch: &Scratch, args: &[&str], point: u64) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch.sessions();
    let base = dir_bytes(&dir);
    let mut child = scratch.spawn(args, &[]);
    let deadline = Instant::now() + BOUND;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if dir_bytes(&dir).saturating_sub(base) >= point {
            child.kill().unwrap();
            break;
        }
        if Instant::now() >= deadline {
            let report = hang_report(&child);
            let _ = child.kill();
            panic!("dsh {args:?} did not finish{report}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The signal number of SIGKILL.
    wait_bounded(child, BOUND, "the killed dsh run")
        .status
        .signal()
        == Some(9)
}

/// Copy the fixture directory `tests/fixtures/<name>` into `into` (a
/// fresh copy per test: the agents may change it).
pub fn copy_fixture(name: &str, into: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    copy(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
        into,
    );
}

/// The event types `--json` documents (docs/cli-json.md).
pub const JSON_TYPES: &[&str] = &[
    "run_started",
    "agent_started",
    "text_delta",
    "text",
    "tool_call",
    "tool_result",
    "notice",
    "usage",
    "turn_ended",
    "settled",
    "reply",
    "budget",
];

/// A `--json` stdout as its objects: every line must be one JSON object
/// of a documented type, and nothing else may be there.
pub fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    let stdout = text(stdout);
    assert!(stdout.ends_with('\n'), "{stdout:?}");
    stdout
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("not a JSON line ({err}): {line:?}"));
            let kind = value["type"].as_str().unwrap_or_default();
            assert!(JSON_TYPES.contains(&kind), "undocumented type: {line}");
            value
        })
        .collect()
}

/// A `--json` stream in a stable order for a snapshot: the lines of each
/// agent together, in its log's order (agents run concurrently, so only
/// the order within one agent is fixed): lines naming no agent first,
/// then the agent of the first line that names one (the root, which
/// speaks before anything it starts), then the others by name. Order of
/// first appearance would not do: two children started in one turn race
/// for their first line.
pub fn json_by_agent(stdout: &[u8]) -> String {
    let lines = json_lines(stdout);
    let mut order: Vec<String> = Vec::new();
    for line in &lines {
        let agent = line["agent"].as_str().unwrap_or_default().to_owned();
        if !order.contains(&agent) {
            order.push(agent);
        }
    }
    let root = order.iter().find(|agent| !agent.is_empty()).cloned();
    order.sort_by_key(|agent| {
        (
            !agent.is_empty(),
            Some(agent) != root.as_ref(),
            agent.clone(),
        )
    });
    let mut out = String::new();
    for agent in order {
        for line in &lines {
            if line["agent"].as_str().unwrap_or_default() == agent {
                out.push_str(&line.to_string());
                out.push('\n');
            }
        }
    }
    out
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The snapshot settings of a scratch: session ids, the scratch path and
/// token counts redacted.
pub fn redacted(scratch: &Scratch) -> insta::Settings {
    let path = regex_escape(&scratch.dir.path().display().to_string());
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&path, "[scratch]");
    settings.add_filter(r"s-[0-9a-f]{32}", "[id]");
    settings.add_filter(r"tokens \d+/\d+", "tokens [in]/[out]");
    // Token counts in `--json` lines, and the scripted model's call ids
    // (numbered across concurrent agents).
    settings.add_filter(
        r#""(input|output|cached_input|reasoning)_tokens":\d+"#,
        r#""${1}_tokens":[n]"#,
    );
    settings.add_filter(r#""call-\d+""#, r#""[call]""#);
    // A settlement notice's usage line counts the tokens of every request,
    // which any change to a tool's wording moves.
    settings.add_filter(
        r"Usage: \d+ tokens \([^)]*\)(; \d+ of them its own)?",
        "Usage: [usage]",
    );
    // What a running child is doing when `list_agents` looks (its tool, for
    // how long, tokens so far) depends on timing.
    settings.add_filter(r"running \([^)]*\)", "running ([activity])");
    // What confines `shell` depends on the kernel.
    settings.add_filter(r"sandbox: [^\n]*", "sandbox: [sandbox]");
    settings
}

/// Snapshot `value` under `name` with [`redacted`] settings, named after
/// the calling test file.
#[allow(unused_macros)]
macro_rules! snapshot {
    ($scratch:expr, $name:expr, $value:expr) => {
        support::redacted($scratch).bind(|| insta::assert_snapshot!($name, $value))
    };
}

pub fn regex_escape(text: &str) -> String {
    let mut escaped = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// A tmpfs of a fixed size mounted for one test (tests run as root here),
/// unmounted on drop. Declare it after the [`Scratch`] it lives in, so it
/// is unmounted before the scratch directory is removed.
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mount a tmpfs of `size` (`mount`'s syntax, `16k`) at `path`
    /// (created); the reason when this machine cannot.
    pub fn mount(path: &Path, size: &str) -> Result<Self, String> {
        std::fs::create_dir_all(path).map_err(|err| err.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|err| format!("cannot run mount: {err}"))?;
        if output.status.success() {
            Ok(Self {
                path: path.to_path_buf(),
            })
        } else {
            Err(text(&output.stderr).trim().to_owned())
        }
    }

    /// Fill the file system: write `filler` until the disk refuses.
    pub fn fill(&self) {
        use std::io::Write;
        let mut file = std::fs::File::create(self.path.join("filler")).unwrap();
        let block = vec![0u8; 1024];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) if err.raw_os_error() == Some(28) => break,
                Err(err) => panic!("filling the tmpfs: {err}"),
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// `dsh run` against the loopback model (`openai:fake`) with `agent`
/// (`rogue_agent`'s Python and script) as the ACP agent; the caller adds
/// the rest (more `--acp-arg`s, the prompt).
pub fn acp_run(agent: &(PathBuf, PathBuf)) -> Vec<&str> {
    let mut args = vec!["run", "--model", "openai:fake"];
    args.extend(acp_flags(agent));
    args
}

/// The `--acp-*` flags that make `agent` (`rogue_agent`'s Python and
/// script) the ACP agent, for `run`, `send` and `resume` alike.
pub fn acp_flags(agent: &(PathBuf, PathBuf)) -> Vec<&str> {
    vec![
        "--acp-command",
        agent.0.to_str().unwrap(),
        "--acp-arg",
        agent.1.to_str().unwrap(),
    ]
}

/// The ACP suite's test-only agent: a Python to run it with (the suite's
/// venv when installed, else the system's) and its script; `None` (the
/// caller calls `skip_or_fail`) when there is no Python.
pub fn rogue_agent() -> Option<(PathBuf, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../subagent-acp");
    let python = [
        root.join("peers/venv/bin/python"),
        PathBuf::from("/usr/bin/python3"),
    ]
    .into_iter()
    .find(|path| path.is_file())?;
    Some((python, root.join("tests/agents/rogue_agent.py")))
}

/// dsh-mcp's fake stdio MCP server's script, or `None` (after
/// `skip_or_fail`) without `python3` to run it.
pub fn fake_mcp_server() -> Option<PathBuf> {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !python {
        dsh_test_support::skip_or_fail("no python3 for the fake MCP server");
        return None;
    }
    Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../mcp/tests/fixtures/fake_server.py"))
}

/// `dsh run --model openai:fake --acp-command PYTHON --acp-arg ROGUE
/// delegate` in `scratch`, the lead answered by `model` (the rogue agent
/// from [`rogue_agent`]); returns the run's output.
pub fn run_with_rogue(
    scratch: &Scratch,
    model: &model::FakeModel,
    agent: &(PathBuf, PathBuf),
) -> Output {
    let mut args = acp_run(agent);
    args.push("delegate");
    scratch.dsh(&args, &fake_env(model))
}

/// The variables that point the `openai` model at `model`.
pub fn fake_env(model: &model::FakeModel) -> [(&'static str, &str); 2] {
    [
        ("OPENAI_API_KEY", "sk-test"),
        ("OPENAI_BASE_URL", model.base_url.as_str()),
    ]
}

/// `(pid, process group)` of every live process but `dsh` itself whose
/// command line holds `needle`, and of every process in those groups but
/// `dsh`'s own. A process `dsh` has just forked holds `dsh`'s command line
/// (and so `needle`) and `dsh`'s group until it moves to a group of its
/// own and execs the agent: that group is this test's, whose processes are
/// no agent's.
pub fn processes(needle: &str, dsh: u32) -> Vec<(i32, i32)> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name, which may hold spaces: state ppid pgrp.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest.to_owned()) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        let pgrp = fields.get(2).and_then(|g| g.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let marked = String::from_utf8_lossy(&cmdline).contains(needle);
        all.push((pid, pgrp, marked && i64::from(pid) != i64::from(dsh)));
    }
    let own = all
        .iter()
        .find(|p| i64::from(p.0) == i64::from(dsh))
        .map(|p| p.1);
    let groups: Vec<i32> = all
        .iter()
        .filter(|p| p.2 && Some(p.1) != own)
        .map(|p| p.1)
        .collect();
    all.into_iter()
        .filter(|(pid, pgrp, marked)| {
            *marked || (groups.contains(pgrp) && i64::from(*pid) != i64::from(dsh))
        })
        .map(|(pid, pgrp, _)| (pid, pgrp))
        .collect()
}

/// Poll `done` until it holds, failing after [`BOUND`].
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The registry's `server-everything` in its streamable-HTTP mode on a free
/// loopback port, behind dsh-mcp's test gate (`header_gate.mjs`), which
/// refuses (401) every request that does not carry the header `name` with
/// `value`; killed when dropped.
pub struct GatedServer {
    child: Child,
    /// Its MCP endpoint.
    pub url: String,
}

impl Drop for GatedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`GatedServer`] once it listens, or `None` (after `skip_or_fail`)
/// without the peers' MCP servers (`crates/subagent-acp/peers/install.sh`).
pub fn gated_everything(name: &str, value: &str) -> Option<GatedServer> {
    let mcp = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mcp");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../subagent-acp/peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    if !server.is_file() {
        dsh_test_support::skip_or_fail(
            "the MCP servers are not installed (run crates/subagent-acp/peers/install.sh)",
        );
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new("node")
        .arg("--import")
        .arg(mcp.join("tests/fixtures/header_gate.mjs"))
        .arg(server)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .env("DSH_GATE_HEADER", name)
        .env("DSH_GATE_VALUE", value)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (listening, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("listening on port") {
                let _ = listening.send(());
            }
        }
    });
    heard.recv_timeout(BOUND).unwrap();
    Some(GatedServer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    })
}

/// A lead's replies that start one foreground child of the `acp` tool for
/// each of `prompts` in turn, then answer `Noted.` to whatever follows.
pub fn delegating(prompts: &[&str]) -> Vec<model::Reply> {
    let mut replies: Vec<model::Reply> = prompts
        .iter()
        .map(|prompt| model::Reply::ToolCall {
            name: "acp".to_owned(),
            arguments: serde_json::json!({
                "description": "delegate",
                "prompt": prompt,
                "run_in_background": false,
            }),
        })
        .collect();
    replies.extend((0..4).map(|_| model::Reply::Text("Noted.".to_owned())));
    replies
}
