//! `dsh-process`: the external programs dsh starts (ACP agents, MCP
//! servers) as child processes it can always reap. A program is started in
//! its own process group with an explicit, scrubbed environment (only the
//! variables it is allowed to inherit, plus its own) and directory, reaped
//! by one task that also forwards stderr to tracing (keeping its last lines
//! for a failed start's error), and stopped by a ladder (wait after EOF,
//! SIGTERM to the group, SIGKILL to the group) that returns only when no
//! live member of the group is left. A process group handle dropped before
//! its ladder finished kills the whole group at once, so no process
//! outlives its owner.
//!
//! The program also dies with this process, even on SIGKILL: it is started
//! with `PR_SET_PDEATHSIG` (SIGKILL) on Linux. That signal fires when the
//! *thread* that forked exits, not the process, and a tokio task may run
//! on a blocking-pool thread that exits when idle, so every program is
//! forked by one dedicated thread that lives as long as the process.
//!
//! Limits: a descendant that leaves the group (`setsid`, `setpgid`) is out
//! of reach; containing those needs cgroups, which this crate does not use.
//! The parent-death signal reaches the program only, not its own children:
//! when this process is SIGKILLed, a program's grandchildren are left to
//! the program's own handling (none, once it is SIGKILLed itself).

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The variables a child inherits from this process unless the
/// configuration says otherwise: enough to find programs, a home and a
/// locale, nothing that carries a credential or a project setting.
pub const DEFAULT_INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TZ",
    "TMPDIR",
];

/// The most bytes of one stderr line forwarded to tracing.
const STDERR_LINE_LIMIT: usize = 4096;

/// How many of the last stderr lines are kept for a failed start's
/// diagnostic.
pub const STDERR_TAIL_LINES: usize = 5;

/// The last stderr lines of a program, shared by its reaper and its owner.
pub type StderrTail = Arc<Mutex<VecDeque<String>>>;

/// How long a SIGKILLed group may take to disappear before teardown fails.
const KILL_BOUND: Duration = Duration::from_secs(10);

/// A started program: its pipes, its group and the task that reaps it.
pub struct Spawned {
    /// Its standard input.
    pub stdin: ChildStdin,
    /// Its standard output.
    pub stdout: ChildStdout,
    /// Its process group, which reaps and stops it.
    pub group: ProcessGroup,
}

/// What to start, and where.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// The program (a path, or a name looked up on `PATH`).
    pub command: &'a Path,
    /// Its arguments.
    pub args: &'a [String],
    /// The variables of this process it inherits (when set); no other
    /// variable of this process reaches it.
    pub inherit_env: &'a [String],
    /// Variables set for it on top.
    pub env: &'a BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: &'a Path,
    /// What tracing names it by (a run id, a server name).
    pub label: &'a str,
}

/// A program that could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot start `{command}`: {reason}")]
pub struct SpawnError {
    /// The program, as given.
    pub command: String,
    /// Why, in a few words (`the command was not found`).
    pub reason: String,
}

/// Start the program `launch` describes.
///
/// # Errors
/// [`SpawnError`] when it cannot be started (not found, not executable,
/// this process is going away).
pub fn spawn(launch: &Launch<'_>) -> Result<Spawned, SpawnError> {
    let mut command = Command::new(launch.command);
    command
        .args(launch.args)
        .env_clear()
        .envs(
            launch
                .inherit_env
                .iter()
                .filter_map(|name| std::env::var_os(name).map(|value| (name, value))),
        )
        .envs(launch.env)
        .current_dir(launch.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // A safety net only: the group guard below is what stops the tree.
        .kill_on_drop(true);
    die_with_parent(&mut command);
    let mut child = spawn_on_forker(command).map_err(|err| SpawnError {
        command: launch.command.display().to_string(),
        reason: spawn_reason(&err),
    })?;
    let (Some(stdin), Some(stdout), Some(stderr), Some(pid)) = (
        child.stdin.take(),
        child.stdout.take(),
        child.stderr.take(),
        child.id(),
    ) else {
        // Unreachable with piped stdio; the child is killed on drop.
        return Err(SpawnError {
            command: launch.command.display().to_string(),
            reason: "its pipes were not available".to_owned(),
        });
    };
    let Some(pgid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Err(SpawnError {
            command: launch.command.display().to_string(),
            reason: "it has no usable process id".to_owned(),
        });
    };
    let (exit_tx, exit) = watch::channel(None);
    let tail = StderrTail::default();
    let reaper = tokio::spawn(reap(
        child,
        stderr,
        exit_tx,
        tail.clone(),
        launch.label.to_owned(),
    ));
    Ok(Spawned {
        stdin,
        stdout,
        group: ProcessGroup {
            pgid,
            exit,
            tail,
            reaper: Some(reaper),
            armed: true,
        },
    })
}

/// Have the child SIGKILLed when the thread that forked it exits (on
/// Linux; elsewhere nothing is set), and fail its start when this process
/// already died between the fork and the `prctl`.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let parent = rustix::process::getpid();
        // SAFETY: the closure runs in the forked child before `exec`, where
        // only async-signal-safe calls are allowed. It makes two raw system
        // calls (`prctl`, `getppid`) through rustix, allocates nothing,
        // takes no lock and touches no state shared with the parent; its
        // error is built from a raw errno, without allocating.
        unsafe {
            command.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                if rustix::process::getppid() != Some(parent) {
                    return Err(io::Error::from(rustix::io::Errno::SRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = command;
}

/// A spawn handed to the forking thread, with where to send its outcome.
type SpawnJob = Box<dyn FnOnce() + Send>;

/// The thread that forks every program: it never exits, so their parent
/// death signal fires only when this process ends.
fn forker() -> io::Result<&'static Mutex<mpsc::Sender<SpawnJob>>> {
    static FORKER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    if let Some(forker) = FORKER.get() {
        return Ok(forker);
    }
    let (tx, rx) = mpsc::channel::<SpawnJob>();
    std::thread::Builder::new()
        .name("dsh-forker".to_owned())
        .spawn(move || {
            for job in rx {
                job();
            }
        })?;
    // A racing caller may have installed its own thread first; this one's
    // channel then closes and its thread ends without having forked.
    Ok(FORKER.get_or_init(|| Mutex::new(tx)))
}

/// Run `command.spawn()` on the forking thread, inside the caller's tokio
/// runtime (the child's reaping belongs to it). Blocks for the fork and
/// `exec`, as `Command::spawn` itself does.
fn spawn_on_forker(mut command: Command) -> io::Result<Child> {
    let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let job: SpawnJob = Box::new(move || {
        let _entered = runtime.enter();
        // The receiver only goes when the caller did, which it cannot
        // while it blocks on it below.
        let _ = reply_tx.send(command.spawn());
    });
    forker()?
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(job)
        .map_err(|_| io::Error::other("the forking thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the forking thread is gone"))?
}

fn spawn_reason(err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::NotFound => "the command was not found".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        kind => kind.to_string(),
    }
}

/// Wait for the leader and forward stderr, line by line, to tracing,
/// keeping the last [`STDERR_TAIL_LINES`] in `tail`.
async fn reap(
    mut child: Child,
    stderr: ChildStderr,
    exit: watch::Sender<Option<ExitStatus>>,
    tail: StderrTail,
    run: String,
) {
    let wait = async {
        match child.wait().await {
            Ok(status) => {
                tracing::debug!(run = %run, status = %status, "the child process exited");
                exit.send_replace(Some(status));
            }
            Err(err) => tracing::error!(run = %run, "waiting for the child process failed: {err}"),
        }
    };
    let forward = async {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(STDERR_LINE_LIMIT as u64)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end();
                    if !text.is_empty() {
                        tracing::debug!(target: "dsh_process::stderr", run = %run, "{text}");
                        let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                        if tail.len() == STDERR_TAIL_LINES {
                            tail.pop_front();
                        }
                        tail.push_back(text.to_owned());
                    }
                }
            }
        }
    };
    tokio::join!(wait, forward);
}

/// A started program's process group. Dropping it while armed SIGKILLs the
/// group.
pub struct ProcessGroup {
    pgid: Pid,
    exit: watch::Receiver<Option<ExitStatus>>,
    tail: StderrTail,
    reaper: Option<JoinHandle<()>>,
    armed: bool,
}

impl ProcessGroup {
    /// The group id (the leader's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid.as_raw_nonzero().get()
    }

    /// The program's last stderr lines, as its reaper keeps them.
    pub fn stderr_tail(&self) -> StderrTail {
        self.tail.clone()
    }

    /// A receiver that sees the leader's exit.
    pub fn exit_watch(&self) -> watch::Receiver<Option<ExitStatus>> {
        self.exit.clone()
    }

    /// Send `signal` to every member of the group.
    pub fn signal(&self, signal: Signal) {
        if let Err(err) = rustix::process::kill_process_group(self.pgid, signal)
            && err != rustix::io::Errno::SRCH
        {
            tracing::warn!(
                pgid = self.pgid(),
                "signalling a child's process group failed: {err}"
            );
        }
    }

    /// Wait up to `limit` for the leader to be reaped and the group to have
    /// no live member. Returns whether it is gone.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only watches; a drop changes nothing.
    pub async fn wait_gone(&mut self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        let mut exit = self.exit.clone();
        let leader = tokio::time::timeout_at(deadline, async {
            exit.wait_for(Option::is_some).await.is_ok()
        })
        .await;
        if leader != Ok(true) {
            return false;
        }
        // The leader is reaped; its orphans (if any) are the rest of the
        // group. Nothing notifies us of their end, so look, backing off.
        let mut pause = Duration::from_millis(1);
        loop {
            if group_is_gone(self.pgid).await {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(pause.min(deadline - tokio::time::Instant::now())).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// The ladder after stdin was closed: wait `eof_grace` for the group to
    /// exit, SIGTERM it and wait `term_grace`, SIGKILL it. Returns when the
    /// group is gone, or with an error when it survives SIGKILL.
    ///
    /// # Errors
    /// The group survived SIGKILL (a member stuck in the kernel).
    ///
    /// # Cancel safety
    /// A drop part-way leaves the group signalled as far as the ladder got
    /// and still armed: dropping the group itself then SIGKILLs it.
    pub async fn stop(
        &mut self,
        eof_grace: Option<Duration>,
        term_grace: Duration,
    ) -> Result<(), String> {
        if self.wait_gone(Duration::ZERO).await {
            return self.finish().await;
        }
        if let Some(grace) = eof_grace
            && self.wait_gone(grace).await
        {
            return self.finish().await;
        }
        self.signal(Signal::TERM);
        if self.wait_gone(term_grace).await {
            return self.finish().await;
        }
        self.signal(Signal::KILL);
        if self.wait_gone(KILL_BOUND).await {
            return self.finish().await;
        }
        Err(format!(
            "the process group {} survived SIGKILL for {}s",
            self.pgid(),
            KILL_BOUND.as_secs()
        ))
    }

    /// The group is gone: join the reaper (its stderr ends with the group,
    /// unless a process that left the group still holds it) and disarm.
    async fn finish(&mut self) -> Result<(), String> {
        self.armed = false;
        if let Some(reaper) = self.reaper.take() {
            let abort = reaper.abort_handle();
            if tokio::time::timeout(Duration::from_secs(1), reaper)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        Ok(())
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            // Never awaited: the kill is synchronous, the leader is reaped
            // by the runtime (kill_on_drop) or by the reaper task.
            self.signal(Signal::KILL);
        }
    }
}

/// Whether group `pgid` has no live member, looked at on the blocking pool:
/// the look may read `/proc/<pid>/stat` for every process on the machine,
/// which must not stall an async worker. A look that could not run (the
/// runtime is shutting down) counts as "not gone".
async fn group_is_gone(pgid: Pid) -> bool {
    off_workers(move || !group_has_live_members(pgid))
        .await
        .unwrap_or(false)
}

/// Run blocking `work` on the blocking pool; `None` when it could not run.
async fn off_workers<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(work).await.ok()
}

/// Whether any process in group `pgid` is alive (zombies do not count: they
/// have ended and only wait to be reaped by whoever adopted them).
pub fn group_has_live_members(pgid: Pid) -> bool {
    match rustix::process::test_kill_process_group(pgid) {
        Err(rustix::io::Errno::SRCH) => false,
        Err(_) => true,
        Ok(()) => match live_members(pgid.as_raw_nonzero().get()) {
            Some(count) => count > 0,
            // No /proc to look at: trust the signal test.
            None => true,
        },
    }
}

/// Members of `pgid` that are not zombies, by `/proc`; `None` without it.
fn live_members(pgid: i32) -> Option<usize> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut count = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(fields) = ProcStat::parse(&stat)
            && fields.pgrp == pgid
            && fields.state != 'Z'
            && fields.state != 'X'
        {
            count += 1;
        }
    }
    Some(count)
}

/// The fields of `/proc/<pid>/stat` this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id.
    pub pid: i32,
    /// Its state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Its parent.
    pub ppid: i32,
    /// Its process group.
    pub pgrp: i32,
}

impl ProcStat {
    /// Parse one `stat` line; the command name may hold spaces and
    /// parentheses, so the fields after it are found from the last `)`.
    pub fn parse(stat: &str) -> Option<Self> {
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let pid = stat[..open].trim().parse().ok()?;
        let mut rest = stat.get(close + 1..)?.split_whitespace();
        let state = rest.next()?.chars().next()?;
        let ppid = rest.next()?.parse().ok()?;
        let pgrp = rest.next()?.parse().ok()?;
        Some(Self {
            pid,
            state,
            ppid,
            pgrp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_past_odd_command_names() {
        let stat = "4242 (node (x) y) S 17 4242 4242 0 -1 4194560";
        assert_eq!(
            ProcStat::parse(stat),
            Some(ProcStat {
                pid: 4242,
                state: 'S',
                ppid: 17,
                pgrp: 4242
            })
        );
        assert_eq!(ProcStat::parse("garbage"), None);
    }

    /// The `/proc` scan runs on the blocking pool, not on the thread that
    /// drives the async work.
    #[tokio::test(flavor = "current_thread")]
    async fn the_proc_scan_runs_off_the_async_workers() {
        let here = std::thread::current().id();
        let there = off_workers(|| std::thread::current().id()).await;
        assert_ne!(there, Some(here));
        // This test's own group is alive: it is not gone.
        assert!(!group_is_gone(rustix::process::getpgrp()).await);
    }
}
