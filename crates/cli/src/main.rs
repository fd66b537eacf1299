//! `dsh`: run a lead agent that delegates to subagents and watch its tree,
//! then list, message and read the agents it left behind. Offline by
//! default (an embedded scripted demo); `--model openai:<model>` drives an
//! OpenAI-compatible API.
//!
//! This file parses the command line, installs the diagnostics subscriber
//! (`-v` or `RUST_LOG`: tracing's warnings and errors on stderr, silent by
//! default, because every failure already reaches stderr as the command's
//! own one line; and for `run` and `send` a log file in `logs/` beside the
//! session directory: warnings, errors and an ACP agent's stderr by
//! default, every level with `-v`), and maps every failure to one line on stderr and an exit
//! code; the commands live in their own modules. It also sets the binary's
//! allocator (mimalloc). The
//! command wires the harness, the runtime, the providers and the tools
//! together; it must never reach an agent except through the runtime and
//! the core traits, never write to a session directory it was only asked to
//! read (opening the store sweeps a crashed writer's temporaries; only
//! `agents --prune-orphans` removes logs, and only orphans), and never
//! panic or print a trace on bad input.

use std::path::PathBuf;
use std::process::ExitCode;

/// The binary's allocator. A long log parsed and kept (a resume, `show`)
/// is hundreds of thousands of small blocks, later freed together; glibc's
/// malloc defers coalescing those frees into the next large allocation
/// and pays for fresh arenas page by page. Under mimalloc `dsh show` of a
/// 100,000-event session takes 57 ms instead of 93, at 77 MB peak resident
/// instead of 58 (the `resume` bench of this crate, and the harness's
/// `replay` bench under the system allocator, show the difference).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Args, Parser, Subcommand};

mod acp;
mod agents;
mod ask;
mod config;
mod demo;
mod demo_team;
mod error;
mod held;
mod json;
mod mcp;
mod model;
mod observe;
mod providers;
mod replay;
mod resume;
mod run;
mod send;
mod session;
mod sessions;
mod show;
mod signals;
mod team;
mod transcript;
mod world;
mod writes;

use error::CliError;

/// The default session directory.
const DEFAULT_DIR: &str = "./.dsh/sessions";

/// The `dsh` command line.
#[derive(Debug, Parser)]
#[command(
    name = "dsh",
    version,
    about = "A lead agent that delegates to subagents: run it, list its tree, message and read its agents."
)]
struct Cli {
    /// Print the agents' diagnostics on stderr: `-v` warnings and errors,
    /// `-vv` also progress, `-vvv` debugging detail; with any `-v` the run's
    /// log file (in `logs/` beside the session directory) gets every
    /// level. `RUST_LOG` (a `target=level,...` list) overrides both.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Read this configuration file instead of looking for `dsh.toml` in
    /// the working directory, then in `$XDG_CONFIG_HOME/dsh/` (or
    /// `~/.config/dsh/`).
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// Where the sessions live.
#[derive(Debug, Args)]
struct DirArg {
    /// The session directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DIR)]
    dir: PathBuf,
}

/// Which model drives the agents, and the tree's limits.
#[derive(Debug, Args)]
struct ModelArg {
    /// `<provider>:<model>`, a provider alone (its `model` in dsh.toml), or
    /// `demo` for the offline scripted demo (the default when neither
    /// this, DSH_MODEL nor dsh.toml's `model` is set). `openai` is built in
    /// (key from OPENAI_API_KEY, base URL from OPENAI_BASE_URL); others are
    /// `[providers.<name>]` tables of dsh.toml.
    #[arg(long, value_name = "PROVIDER:MODEL", env = "DSH_MODEL")]
    model: Option<String>,
    /// The API's base URL (`https://host/v1`), over the provider's.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// The environment variable holding the API key, over the provider's.
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// Live children at once in the tree (dsh.toml `limits.max_live_children`).
    #[arg(long, value_name = "N")]
    max_live_children: Option<usize>,
    /// The deepest a child may be (dsh.toml `limits.max_depth`).
    #[arg(long, value_name = "N")]
    max_depth: Option<u32>,
    /// Model requests in one turn of one agent (dsh.toml
    /// `limits.max_turn_steps`).
    #[arg(long, value_name = "N")]
    max_turn_steps: Option<u32>,
    /// What the workspace tools may do over the working directory:
    /// `read-only` (the default: read, list, grep), `workspace-write`
    /// (also writes and `shell` inside it) or `full`; an action above
    /// it is refused with a sentence the model can act on.
    #[arg(long, value_name = "LEVEL", value_parser = ["read-only", "workspace-write", "full"])]
    sandbox: Option<String>,
    /// When the session logs are forced to stable storage (dsh.toml
    /// `durability`): `turn-boundary` (the default: each create and turn
    /// end waits for its sync), `grouped` (the same promise, syncs shared
    /// across logs), `batched` (write-behind: nothing waits, a committer
    /// forces what was written at least every 200 ms, and dsh flushes
    /// before it exits successfully; a power loss can lose the last
    /// window), `every-event` or `none`.
    #[arg(long, value_name = "MODE", value_parser = ["none", "turn-boundary", "every-event", "grouped", "batched"])]
    durability: Option<String>,
    /// Ask on the terminal (stdin, stderr) before an action above the
    /// `--sandbox` level, one question at a time, naming the agent, the
    /// tool and the exact command or path; the default when stdin is a
    /// terminal. Also answers an ACP agent's requests under
    /// `acp.permission = "ask"`.
    #[arg(long, conflicts_with = "no_ask")]
    ask: bool,
    /// Never ask: an action above the level is refused with a sentence
    /// the model can act on (the default without a terminal).
    #[arg(long)]
    no_ask: bool,
    /// An MCP server whose tools every agent is offered as
    /// `mcp__NAME__TOOL`: `NAME=COMMAND [ARG...]`, split at spaces (repeat
    /// for several; replaces dsh.toml's `[mcp.servers.NAME]`).
    #[arg(long = "mcp", value_name = "NAME=COMMAND")]
    mcp: Vec<String>,
}

impl ModelArg {
    /// Whether to ask above the level.
    fn ask_mode(&self) -> ask::AskMode {
        match (self.ask, self.no_ask) {
            (true, _) => ask::AskMode::Always,
            (_, true) => ask::AskMode::Never,
            _ => ask::AskMode::Auto,
        }
    }

    /// These flags as overrides of the configuration file.
    fn overrides(self, config: Option<PathBuf>) -> config::Overrides {
        config::Overrides {
            config,
            model: self.model,
            base_url: self.base_url,
            api_key_env: self.api_key_env,
            max_live_children: self.max_live_children,
            max_depth: self.max_depth,
            max_turn_steps: self.max_turn_steps,
            sandbox: self.sandbox.and_then(|level| level.parse().ok()),
            durability: self.durability.and_then(|mode| config::durability(&mode)),
            mcp: self.mcp,
            ..config::Overrides::default()
        }
    }
}

/// The ACP agent offered to every agent as the `acp` tool, over dsh.toml's
/// `[acp]`; `send` and `resume` take them too, so that a tree whose ACP
/// agent came from flags can be continued.
#[derive(Debug, Args)]
struct AcpArgs {
    /// An agent program speaking the Agent Client Protocol over stdio,
    /// offered to every agent as the `acp` tool (external children).
    #[arg(long, value_name = "COMMAND")]
    acp_command: Option<std::path::PathBuf>,
    /// An argument for the ACP agent (repeat for several; replaces
    /// dsh.toml's `acp.args`).
    #[arg(long = "acp-arg", value_name = "ARG", allow_hyphen_values = true)]
    acp_args: Vec<String>,
    /// A variable passed through to the ACP agent when set (repeat for
    /// several; added to dsh.toml's `acp.pass_env`).
    #[arg(long = "acp-env", value_name = "VAR")]
    acp_env: Vec<String>,
    /// How the ACP agent's permission requests are answered.
    #[arg(long, value_name = "POLICY", value_parser = ["reject", "allow", "ask"])]
    acp_permission: Option<String>,
}

/// Whether the events are printed for a program.
#[derive(Debug, Args)]
struct JsonArg {
    /// Print one JSON object per line on stdout for every event (agent
    /// started, text, tool call, tool result, notice, usage, turn ended,
    /// settled; the schema is in docs/cli-json.md) and nothing else; the
    /// person's lines and errors stay on stderr, the exit codes the same.
    #[arg(long)]
    json: bool,
}

/// Which tree a name is looked up in.
#[derive(Debug, Args)]
struct RootArg {
    /// The root session whose tree to use (default: the most recent root).
    #[arg(long, value_name = "SESSION-ID")]
    root: Option<String>,
}

/// How long a command waits for a tree another process holds.
#[derive(Debug, Args)]
struct WaitArg {
    /// While another process (a `dsh run`, `dsh send` or `dsh resume` in
    /// the same tree) holds the tree, wait this many seconds for it, then
    /// say who holds it; 0 says so at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    wait: u64,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a lead agent with the subagent, fork and control tools until its
    /// whole tree is done.
    ///
    /// Ctrl-C, SIGTERM or SIGHUP stops the tree and
    /// keeps its sessions (exit 128 + the signal's number); a write the
    /// disk refuses stops it too, naming the OS error (exit 1).
    Run {
        /// What to ask the lead (the demo has its own task when omitted).
        prompt: Option<String>,
        #[command(flatten)]
        dir: DirArg,
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        acp: AcpArgs,
        /// Make the lead the lead of an agent team: the ten team tools
        /// (teammates, peer messages, a shared task board) in place of the
        /// control tools' `send_message`, `list_agents` and
        /// `interrupt_agent` (dsh.toml `team`). With the demo model, the
        /// offline team demo: a lead, two teammates, three tasks.
        #[arg(long)]
        team: bool,
        #[command(flatten)]
        json: JsonArg,
    },
    /// List the persisted agent trees: names, labels, modes, diagnostics.
    ///
    /// Also the logs that cannot be read, the orphans (child logs that no
    /// catalog names, left by a crash between creating a child and
    /// recording it) and the unfinished creates (logs whose header was
    /// never written whole, left by a crash in the middle of a create). A
    /// file that is not a session log is skipped with a warning.
    Agents {
        #[command(flatten)]
        dir: DirArg,
        /// Remove the orphans' logs and the unfinished creates (a log that
        /// another process is still writing is kept). Nothing else is
        /// changed.
        #[arg(long)]
        prune_orphans: bool,
    },
    /// Send a message to a child as the user and print its reply, or to
    /// `lead` to continue the lead's conversation with its whole tree.
    ///
    /// The tree's own model is used (recorded when `dsh run` built it)
    /// unless `--model` names another. A child's reply is the answer of the
    /// turn that took this message, never an older one; then the tree is
    /// stopped, and the child's notice waits in the root's inbox for its
    /// next run. To `lead`, the command runs as `dsh run` does, until the
    /// whole tree is done, waking cold children as the lead addresses them.
    Send {
        /// The child's name or path (`researcher`, `a/b`) or session id, or
        /// `lead`.
        name: String,
        /// The message.
        message: String,
        #[command(flatten)]
        dir: DirArg,
        #[command(flatten)]
        root: RootArg,
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        acp: AcpArgs,
        #[command(flatten)]
        wait: WaitArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Bring a tree back after a crash or a kill and run what it had left
    /// to do, until the whole tree is done.
    ///
    /// The root is resumed; members with pending input or a turn the stop
    /// cut off are resumed (a cut turn is closed as aborted and its creator
    /// told); parked members stay parked and idle ones stay cold; notices
    /// a crash kept from their creators are delivered. No prompt is sent.
    Resume {
        /// The tree's root session id (default: the most recent root).
        tree: Option<String>,
        #[command(flatten)]
        dir: DirArg,
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        acp: AcpArgs,
        #[command(flatten)]
        wait: WaitArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// List the subagent providers `dsh run` registers, with their capabilities.
    Providers,
    /// Start each enabled MCP server (dsh.toml's `[mcp.servers.NAME]`,
    /// `--mcp`), list its state and the tools agents are offered, and stop
    /// it; exit 1 when one does not start.
    Mcp {
        /// An MCP server, as `dsh run --mcp` takes it.
        #[arg(long = "mcp", value_name = "NAME=COMMAND")]
        mcp: Vec<String>,
        /// Print the listing as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print an agent's transcript.
    Show {
        /// The agent's name or path, `lead`, or a session id.
        name: String,
        #[command(flatten)]
        dir: DirArg,
        #[command(flatten)]
        root: RootArg,
    },
    /// Drive every session of the most recent tree (or of TREE) again
    /// from its own log and say, per session, `identical` or the first
    /// event that diverges; exit 1 on any divergence. Nothing is run or
    /// written.
    Replay {
        /// The root session of the tree (default: the most recent root).
        #[arg(value_name = "TREE")]
        tree: Option<String>,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Show the agent team of the most recent tree (or of TREE): the
    /// roster with each member's status, the task board with readiness,
    /// owners and write-scope overlap warnings, and the mailbox.
    ///
    /// Read from the logs only: no agent is resumed, nothing is written.
    Team {
        /// The root session of the tree (default: the most recent root).
        #[arg(value_name = "TREE")]
        tree: Option<String>,
        #[command(flatten)]
        dir: DirArg,
    },
}

/// The settings of a command that runs agents: dsh.toml under the model,
/// limit and ACP flags (and `--team`).
fn load_settings(
    model: ModelArg,
    acp: AcpArgs,
    team: bool,
    config: Option<PathBuf>,
) -> Result<(config::Settings, ask::AskMode), CliError> {
    let ask = model.ask_mode();
    let overrides = config::Overrides {
        acp_command: acp.acp_command,
        acp_args: acp.acp_args,
        acp_env: acp.acp_env,
        acp_permission: acp
            .acp_permission
            .as_deref()
            .map(acp::permission_flag)
            .transpose()?,
        team,
        ..model.overrides(config)
    };
    let settings = config::load(&overrides)?;
    if settings.acp.is_none() && !overrides.acp_args.is_empty() {
        return Err(CliError::BadFlag(
            "--acp-arg: no ACP agent is configured (--acp-command or dsh.toml's [acp])".to_owned(),
        ));
    }
    Ok((settings, ask))
}

/// One line of text, whatever the error's text holds.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A panic is a bug, but the user still gets one line, never a trace.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("dsh: internal error{place}: {}", one_line(&message));
    }));
}

/// The log of one run, in `logs/` beside the session directory: created
/// when its first line is written (so a clean run at the default level
/// leaves no file), appended to after that.
struct LogFile {
    path: PathBuf,
    file: std::sync::Mutex<LogState>,
}

/// Whether the log file is open yet.
enum LogState {
    Unopened,
    Open(std::fs::File),
    /// It could not be created; the user was told once, on stderr.
    Failed,
}

impl LogFile {
    /// The log of a run whose sessions are in `dir`.
    fn beside(dir: &std::path::Path) -> Self {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_millis())
            .unwrap_or_default();
        let parent = dir
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        Self {
            path: parent
                .join("logs")
                .join(format!("dsh-{millis}-{}.log", std::process::id())),
            file: std::sync::Mutex::new(LogState::Unopened),
        }
    }
}

/// One write to a [`LogFile`].
struct LogWriter(std::sync::Arc<LogFile>);

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut state = self
            .0
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let LogState::Unopened = *state {
            let opened = self
                .0
                .path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&self.0.path)
                });
            *state = match opened {
                Ok(file) => LogState::Open(file),
                Err(err) => {
                    eprintln!(
                        "dsh: warning: cannot write the log {}: {}",
                        self.0.path.display(),
                        one_line(&err.to_string())
                    );
                    LogState::Failed
                }
            };
        }
        match &mut *state {
            LogState::Open(file) => file.write(bytes),
            // Told once; the diagnostics still reach stderr with `-v`.
            _ => Ok(bytes.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut *self
            .0
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            LogState::Open(file) => file.flush(),
            _ => Ok(()),
        }
    }
}

/// Install the tracing subscriber. On stderr when asked for: `RUST_LOG`
/// when set (a `target=level,...` list), else `-v`'s level. In the run's
/// log file (`log`, for the commands that run agents): `RUST_LOG` when set,
/// else every level with `-v`, else warnings, errors and an ACP agent's
/// stderr.
fn diagnostics(verbose: u8, log: Option<&std::path::Path>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|spec| !spec.trim().is_empty());
    let from_env = match from_env {
        Some(spec) => match spec.parse::<Targets>() {
            Ok(filter) => Some(filter),
            Err(err) => {
                eprintln!("dsh: warning: ignoring RUST_LOG `{spec}`: {err}");
                None
            }
        },
        None => None,
    };
    let stderr_filter = match (&from_env, verbose) {
        (Some(filter), _) => Some(filter.clone()),
        (None, 0) => None,
        (None, 1) => Some(Targets::new().with_default(LevelFilter::WARN)),
        (None, 2) => Some(Targets::new().with_default(LevelFilter::INFO)),
        (None, _) => Some(Targets::new().with_default(LevelFilter::DEBUG)),
    };
    let stderr = stderr_filter.map(|filter| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .without_time()
            .with_filter(filter)
    });
    let file = log.map(|dir| {
        let filter = match (&from_env, verbose) {
            (Some(filter), _) => filter.clone(),
            (None, 0) => Targets::new()
                .with_default(LevelFilter::WARN)
                .with_target("dsh_process::stderr", LevelFilter::DEBUG),
            (None, _) => Targets::new().with_default(LevelFilter::TRACE),
        };
        let log = std::sync::Arc::new(LogFile::beside(dir));
        tracing_subscriber::fmt::layer()
            .with_writer(move || LogWriter(std::sync::Arc::clone(&log)))
            .with_ansi(false)
            .with_filter(filter)
    });
    // Another subscriber already installed (never, in `dsh`) keeps its place.
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            use clap::error::ErrorKind;
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = err.print();
                return if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            // clap's own text has a usage block; one line is the rule.
            let text = err.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("dsh: {} (see `dsh --help`)", one_line(first));
            return ExitCode::from(2);
        }
    };
    quiet_panics();
    let log = match &cli.command {
        Command::Run { dir, .. } | Command::Send { dir, .. } | Command::Resume { dir, .. } => {
            Some(dir.dir.clone())
        }
        Command::Agents { .. }
        | Command::Show { .. }
        | Command::Team { .. }
        | Command::Replay { .. }
        | Command::Providers
        | Command::Mcp { .. } => None,
    };
    diagnostics(cli.verbose, log.as_deref());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!(
                "dsh: cannot start the async runtime: {}",
                one_line(&err.to_string())
            );
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(execute(cli.command, cli.config));
    // Nothing may outlive the command: tasks still parked are dropped here.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("dsh: {}", one_line(&err.to_string()));
            ExitCode::from(err.exit_code())
        }
    }
}

async fn execute(command: Command, config: Option<PathBuf>) -> Result<(), CliError> {
    match command {
        Command::Run {
            prompt,
            dir,
            model,
            acp,
            team,
            json,
        } => {
            let (settings, ask) = load_settings(model, acp, team, config)?;
            run::run(run::RunArgs {
                prompt,
                dir: dir.dir,
                settings,
                resume: None,
                whole_tree: false,
                json: json.json,
                ask,
            })
            .await
        }
        Command::Agents { dir, prune_orphans } => {
            agents::agents(agents::AgentsArgs {
                dir: &dir.dir,
                prune_orphans,
            })
            .await
        }
        Command::Send {
            name,
            message,
            dir,
            root,
            model,
            acp,
            wait,
            json,
        } => {
            let (settings, ask) = load_settings(model, acp, false, config)?;
            send::send(send::SendArgs {
                name,
                message,
                dir: dir.dir,
                root: root.root,
                settings,
                json: json.json,
                ask,
                wait: wait.wait,
            })
            .await
        }
        Command::Resume {
            tree,
            dir,
            model,
            acp,
            wait,
            json,
        } => {
            let (settings, ask) = load_settings(model, acp, false, config)?;
            resume::resume(resume::ResumeArgs {
                tree,
                dir: dir.dir,
                settings,
                json: json.json,
                ask,
                wait: wait.wait,
            })
            .await
        }
        Command::Providers => providers::providers(config).await,
        Command::Mcp { mcp, json } => mcp::list(config, mcp, json).await,
        Command::Show { name, dir, root } => {
            show::show(&dir.dir, root.root.as_deref(), &name).await
        }
        Command::Team { tree, dir } => team::team(&dir.dir, tree.as_deref()).await,
        Command::Replay { tree, dir } => replay::replay(&dir.dir, tree.as_deref()).await,
    }
}
