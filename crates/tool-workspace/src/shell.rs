//! `shell`: one command through `/bin/sh -c`, in the caller's cwd (or a
//! directory inside the root), in its own process group. The group is
//! killed (SIGKILL) when the timeout passes, when the call is cancelled,
//! when the call's future is dropped, and once the shell itself exits (so a
//! background job cannot outlive the call). stdout and stderr are each kept
//! to their first and last [`MAX_SHELL_OUTPUT_BYTES`]` / 2` bytes with a
//! marker; the exit code or the killing signal is reported, and so is the
//! sandbox the command ran under.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use rustix::process::{Pid, Signal, kill_process_group};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::WorkspaceError;
use crate::policy::{Action, Level};
use crate::sandbox::{self, LandlockStatus, landlock_status};
use crate::{Workspace, path, text};

/// The timeout when none is given.
pub const DEFAULT_SHELL_TIMEOUT_MS: u64 = 120_000;

/// The longest timeout allowed.
pub const MAX_SHELL_TIMEOUT_MS: u64 = 600_000;

/// The most bytes of each stream kept (half from the start, half from the end).
pub const MAX_SHELL_OUTPUT_BYTES: usize = 32 * 1024;

/// How long the output pipes are drained after the group is killed before
/// giving up on a process that left the group but holds them open.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(5);

/// The arguments of `shell`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellInput {
    /// The command line, run by `/bin/sh -c`.
    pub command: String,
    /// The directory to run in, relative to the caller's cwd.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The timeout in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// The `shell` tool.
#[derive(Debug, Clone)]
pub struct ShellTool {
    workspace: Arc<Workspace>,
}

impl ShellTool {
    /// The tool over `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        Self { workspace }
    }
}

/// Kills the process group when dropped (the call ended, was cancelled or
/// was dropped).
struct Group(Option<Pid>);

impl Group {
    fn kill(&self) {
        if let Some(pid) = self.0 {
            // ESRCH (the group is already empty) is the expected outcome
            // after a clean exit; nothing else can fail for our own group.
            let _ = kill_process_group(pid, Signal::KILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One output stream: its head, its tail and its total length.
#[derive(Default)]
struct Captured {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: usize,
}

impl Captured {
    fn push(&mut self, mut chunk: &[u8]) {
        let half = MAX_SHELL_OUTPUT_BYTES / 2;
        self.total += chunk.len();
        if self.head.len() < half {
            let take = chunk.len().min(half - self.head.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > half {
            let excess = self.tail.len() - half;
            self.tail.drain(..excess);
        }
    }

    fn render(&self, name: &str, out: &mut String) {
        if self.total == 0 {
            out.push_str(&format!("{name}: (empty)\n"));
            return;
        }
        out.push_str(&format!("{name}:\n"));
        out.push_str(&String::from_utf8_lossy(&self.head));
        let shown = self.head.len() + self.tail.len();
        if shown < self.total {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&format!(
                "[{name} truncated: {} bytes in all; showing the first {} and the last {}]\n",
                self.total,
                self.head.len(),
                self.tail.len()
            ));
        }
        out.push_str(&String::from_utf8_lossy(&self.tail));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
}

async fn capture(stream: Option<impl AsyncRead + Unpin>, into: &mut Captured) {
    let Some(mut stream) = stream else { return };
    let mut buf = vec![0u8; 8192];
    // A read error ends the capture like end of file: what was read is kept.
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        into.push(&buf[..n]);
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
    WaitFailed,
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

/// The sandbox line of a result.
fn sandbox_line(sandboxed: bool, status: &LandlockStatus, root: &std::path::Path) -> String {
    match (sandboxed, status) {
        (false, _) => "sandbox: none (full access)".to_owned(),
        (true, LandlockStatus::Enforced) => format!(
            "sandbox: landlock (writes confined to {}, /tmp and /dev/null)",
            root.display()
        ),
        (true, LandlockStatus::Partial) => format!(
            "sandbox: landlock, partially enforced by this kernel (writes confined to {}, /tmp and /dev/null)",
            root.display()
        ),
        (true, LandlockStatus::Unavailable(why)) => {
            format!("sandbox: not applied ({why}); writes are NOT confined")
        }
    }
}

#[async_trait]
impl Tool for ShellTool {
    fn name(&self) -> &str {
        "shell"
    }

    fn description(&self) -> String {
        format!(
            "Run a shell command (`/bin/sh -c`) in your working directory, or in `cwd` inside \
             the workspace. stdin is empty. The command and everything it starts are killed \
             after timeout_ms (default {DEFAULT_SHELL_TIMEOUT_MS}, at most \
             {MAX_SHELL_TIMEOUT_MS}) and when it exits (background jobs do not survive the \
             call). The result gives the exit code or signal, stdout and stderr (each cut to \
             {MAX_SHELL_OUTPUT_BYTES} bytes, first and last half, with a marker), and the \
             sandbox it ran under: in workspace-write, writes outside the workspace, /tmp and \
             /dev/null fail where the kernel supports Landlock."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The command line to run."
                },
                "cwd": {
                    "type": "string",
                    "description": "The directory to run in, relative to your working directory. Default: your working directory."
                },
                "timeout_ms": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SHELL_TIMEOUT_MS,
                    "description": format!("Kill the command after this many milliseconds (default {DEFAULT_SHELL_TIMEOUT_MS}).")
                }
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    /// # Cancel safety
    /// Dropped at any await, the call kills the command's whole process
    /// group (and tokio reaps the shell): no process of the call survives.
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let ShellInput {
            command,
            cwd: dir,
            timeout_ms,
        } = crate::parse(self.name(), input)?;
        let timeout_ms = timeout_ms.unwrap_or(DEFAULT_SHELL_TIMEOUT_MS);
        if timeout_ms == 0 || timeout_ms > MAX_SHELL_TIMEOUT_MS {
            return Err(WorkspaceError::BadArgument(format!(
                "timeout_ms must be between 1 and {MAX_SHELL_TIMEOUT_MS}."
            ))
            .into());
        }
        let agent_cwd = ctx.agent.cwd();
        let dir = dir.unwrap_or_else(|| ".".to_owned());
        let run_in = self.workspace.resolve(&agent_cwd, &dir)?;
        if !run_in.is_dir() {
            return Err(WorkspaceError::NotDirectory(dir).into());
        }
        self.workspace
            .policy()
            .check(
                ctx.agent.id(),
                self.name(),
                Action::Shell,
                &command,
                &ctx.cancel,
            )
            .await?;
        // Below `full` (by level or by approval) the command is confined.
        let sandboxed = self.workspace.policy().level < Level::Full;
        let status = landlock_status();
        let root = self.workspace.root();

        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(&command)
            .current_dir(&run_in)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if sandboxed && status.applies() {
            let rules = sandbox::ruleset(root).map_err(|reason| WorkspaceError::Io {
                subject: command.clone(),
                reason: format!("the Landlock rule set could not be built: {reason}"),
            })?;
            sandbox::restrict_child(&mut cmd, rules);
        }
        let mut child = cmd.spawn().map_err(|e| WorkspaceError::Io {
            subject: command.clone(),
            reason: format!("could not start: {e}"),
        })?;
        let group = Group(
            child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .and_then(Pid::from_raw),
        );
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let mut out = Captured::default();
        let mut err = Captured::default();
        let mut exit: Option<std::io::Result<ExitStatus>> = None;
        let (ending, drained) = {
            let run = async {
                tokio::join!(
                    async {
                        exit = Some(child.wait().await);
                        // The shell is gone: end whatever it left running.
                        group.kill();
                    },
                    capture(stdout, &mut out),
                    capture(stderr, &mut err),
                )
            };
            tokio::pin!(run);
            let stopped = tokio::select! {
                _ = &mut run => None,
                () = tokio::time::sleep(Duration::from_millis(timeout_ms)) => Some(Ending::TimedOut),
                () = ctx.cancel.cancelled() => Some(Ending::Cancelled),
            };
            match stopped {
                None => (None, true),
                Some(ending) => {
                    group.kill();
                    let drained = tokio::time::timeout(DRAIN_AFTER_KILL, &mut run)
                        .await
                        .is_ok();
                    (Some(ending), drained)
                }
            }
        };
        drop(group);
        let ending = ending.unwrap_or(match exit {
            Some(Ok(status)) => Ending::Exited(status),
            _ => Ending::WaitFailed,
        });
        if ending == Ending::Cancelled {
            return Err(WorkspaceError::Cancelled.into());
        }

        let mut text = format!("$ {command}\n");
        if dir != "." {
            text.push_str(&format!("cwd: {}\n", path::display(&agent_cwd, &run_in)));
        }
        let failed = match ending {
            Ending::Exited(status) => match (status.code(), status.signal()) {
                (Some(code), _) => {
                    text.push_str(&format!("exit code: {code}\n"));
                    code != 0
                }
                (None, Some(signal)) => {
                    text.push_str(&format!(
                        "killed by signal {signal} ({})\n",
                        signal_name(signal)
                    ));
                    true
                }
                (None, None) => {
                    text.push_str("ended without an exit code\n");
                    true
                }
            },
            Ending::TimedOut => {
                text.push_str(&format!(
                    "timed out after {timeout_ms} ms: the command and its process group were killed\n"
                ));
                true
            }
            Ending::WaitFailed | Ending::Cancelled => {
                text.push_str("its exit status could not be read\n");
                true
            }
        };
        text.push_str(&sandbox_line(sandboxed, status, root));
        text.push('\n');
        out.render("stdout", &mut text);
        err.render("stderr", &mut text);
        if !drained {
            text.push_str(
                "[stopped reading: a process that left the command's process group still holds its output open]\n",
            );
        }
        let text = text::cut(&text, 4 * MAX_SHELL_OUTPUT_BYTES).to_owned();
        Ok(if failed {
            ToolOutput::error(text)
        } else {
            ToolOutput::text(text)
        })
    }
}
