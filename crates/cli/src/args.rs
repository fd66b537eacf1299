//! The `dsh` command line as clap types: the global flags, the flag groups
//! the subcommands share (session directory, model and limits, ACP agent,
//! `--json`, `--root`, `--wait`) and the subcommands themselves, with the
//! help text `dsh --help` prints; and how a running command's flags become
//! its settings over dsh.toml. Parsing only: `main` dispatches.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::error::CliError;
use crate::{acp, ask, config, engine};

/// The default session directory.
pub(crate) const DEFAULT_DIR: &str = "./.dsh/sessions";

/// The `dsh` command line.
#[derive(Debug, Parser)]
#[command(
    name = "dsh",
    version,
    about = "A lead agent that delegates to subagents: run it, list its tree, message and read its agents."
)]
pub(crate) struct Cli {
    /// Print the agents' diagnostics on stderr: `-v` warnings and errors,
    /// `-vv` also progress, `-vvv` debugging detail; with any `-v` the run's
    /// log file (in `logs/` beside the session directory) gets every
    /// level. `RUST_LOG` (a `target=level,...` list) overrides both.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    /// Read this configuration file instead of looking for `dsh.toml` in
    /// the working directory, then in `$XDG_CONFIG_HOME/dsh/` (or
    /// `~/.config/dsh/`).
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) config: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the sessions live.
#[derive(Debug, Args)]
pub(crate) struct DirArg {
    /// The session directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,
}

/// Which model drives the agents, and the tree's limits.
#[derive(Debug, Args)]
pub(crate) struct ModelArg {
    /// `<provider>:<model>`, a provider alone (its `model` in dsh.toml), or
    /// `demo` for the offline scripted demo (the default when neither
    /// this, DSH_MODEL nor dsh.toml's `model` is set). `openai` is built in
    /// (key from OPENAI_API_KEY, base URL from OPENAI_BASE_URL); others are
    /// `[providers.<name>]` tables of dsh.toml.
    #[arg(long, value_name = "PROVIDER:MODEL", env = "DSH_MODEL")]
    pub(crate) model: Option<String>,
    /// The API's base URL (`https://host/v1`), over the provider's.
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// The environment variable holding the API key, over the provider's.
    #[arg(long, value_name = "VAR")]
    pub(crate) api_key_env: Option<String>,
    /// Live children at once in the tree (dsh.toml `limits.max_live_children`).
    #[arg(long, value_name = "N")]
    pub(crate) max_live_children: Option<usize>,
    /// The deepest a child may be (dsh.toml `limits.max_depth`).
    #[arg(long, value_name = "N")]
    pub(crate) max_depth: Option<u32>,
    /// Model requests in one turn of one agent (dsh.toml
    /// `limits.max_turn_steps`).
    #[arg(long, value_name = "N")]
    pub(crate) max_turn_steps: Option<u32>,
    /// Tokens (input plus output) the whole tree may use; when they are
    /// spent the tree is stopped, children first (dsh.toml
    /// `limits.max_tokens`). Also the largest budget one child may get.
    #[arg(long, value_name = "N")]
    pub(crate) max_tokens: Option<u64>,
    /// Dollars the whole tree may spend, at dsh.toml's `[prices]`; when
    /// they are spent the tree is stopped, children first (dsh.toml
    /// `limits.max_cost`). Refused unless every model in use has a price.
    #[arg(long, value_name = "USD")]
    pub(crate) max_cost: Option<f64>,
    /// What the workspace tools may do over the working directory:
    /// `read-only` (the default: read, list, grep), `workspace-write`
    /// (also writes and `shell` inside it) or `full`; an action above
    /// it is refused with a sentence the model can act on.
    #[arg(long, value_name = "LEVEL", value_parser = ["read-only", "workspace-write", "full"])]
    pub(crate) sandbox: Option<String>,
    /// When the session logs are forced to stable storage (dsh.toml
    /// `durability`): `turn-boundary` (the default: each create and turn
    /// end waits for its sync), `grouped` (the same promise, syncs shared
    /// across logs), `batched` (write-behind: nothing waits, a committer
    /// forces what was written at least every 200 ms, and dsh flushes
    /// before it exits successfully; a power loss can lose the last
    /// window), `every-event` or `none`.
    #[arg(long, value_name = "MODE", value_parser = ["none", "turn-boundary", "every-event", "grouped", "batched"])]
    pub(crate) durability: Option<String>,
    /// Ask on the terminal (stdin, stderr) before an action above the
    /// `--sandbox` level, one question at a time, naming the agent, the
    /// tool and the exact command or path; the default when stdin is a
    /// terminal. Also answers an ACP agent's requests under
    /// `acp.permission = "ask"`.
    #[arg(long, conflicts_with = "no_ask")]
    pub(crate) ask: bool,
    /// Never ask: an action above the level is refused with a sentence
    /// the model can act on (the default without a terminal).
    #[arg(long)]
    pub(crate) no_ask: bool,
    /// An MCP server whose tools every agent is offered as
    /// `mcp__NAME__TOOL`: `NAME=COMMAND [ARG...]`, split at spaces (repeat
    /// for several; replaces dsh.toml's `[mcp.servers.NAME]`).
    #[arg(long = "mcp", value_name = "NAME=COMMAND")]
    pub(crate) mcp: Vec<String>,
}

impl ModelArg {
    /// Whether to ask above the level.
    pub(crate) fn ask_mode(&self) -> ask::AskMode {
        match (self.ask, self.no_ask) {
            (true, _) => ask::AskMode::Always,
            (_, true) => ask::AskMode::Never,
            _ => ask::AskMode::Auto,
        }
    }

    /// These flags as overrides of the configuration file.
    pub(crate) fn overrides(self, config: Option<PathBuf>) -> config::Overrides {
        config::Overrides {
            config,
            model: self.model,
            base_url: self.base_url,
            api_key_env: self.api_key_env,
            max_live_children: self.max_live_children,
            max_depth: self.max_depth,
            max_turn_steps: self.max_turn_steps,
            max_tokens: self.max_tokens,
            max_cost: self.max_cost,
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
pub(crate) struct AcpArgs {
    /// An agent program speaking the Agent Client Protocol over stdio,
    /// offered to every agent as the `acp` tool (external children).
    #[arg(long, value_name = "COMMAND")]
    pub(crate) acp_command: Option<std::path::PathBuf>,
    /// An argument for the ACP agent (repeat for several; replaces
    /// dsh.toml's `acp.args`).
    #[arg(long = "acp-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub(crate) acp_args: Vec<String>,
    /// A variable passed through to the ACP agent when set (repeat for
    /// several; added to dsh.toml's `acp.pass_env`).
    #[arg(long = "acp-env", value_name = "VAR")]
    pub(crate) acp_env: Vec<String>,
    /// How the ACP agent's permission requests are answered.
    #[arg(long, value_name = "POLICY", value_parser = ["reject", "allow", "ask"])]
    pub(crate) acp_permission: Option<String>,
}

/// Whether the events are printed for a program.
#[derive(Debug, Args)]
pub(crate) struct JsonArg {
    /// Print one JSON object per line on stdout for every event (agent
    /// started, text, tool call, tool result, notice, usage, turn ended,
    /// settled; the schema is in docs/cli-json.md) and nothing else; the
    /// person's lines and errors stay on stderr, the exit codes the same.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Which engine holds the sessions (dsh.toml `[engine]`); the local
/// session directory unless asked.
#[derive(Debug, Args)]
pub(crate) struct EngineArgs {
    /// `local` (the default: the session directory) or `restate` (a
    /// Restate cluster; see docs/distributed.md).
    #[arg(long, value_name = "KIND")]
    engine: Option<String>,
    /// The Restate ingress URL (dsh.toml `engine.ingress_url`; default
    /// http://127.0.0.1:8080).
    #[arg(long, value_name = "URL")]
    ingress: Option<String>,
    /// The Restate admin API's URL (dsh.toml `engine.admin_url`; default
    /// http://127.0.0.1:9070).
    #[arg(long, value_name = "URL")]
    admin: Option<String>,
    /// Seconds a call to the Restate cluster waits for a worker to answer
    /// before the command fails, after one line naming the worker and the
    /// server's last failure (dsh.toml `engine.worker_timeout`; default
    /// 30).
    #[arg(long, value_name = "SECONDS")]
    worker_timeout: Option<u64>,
}

impl EngineArgs {
    /// The engine these flags choose over dsh.toml's `[engine]`.
    pub(crate) fn resolve(self, config: Option<&Path>) -> Result<engine::Engine, CliError> {
        let (file, parsed) = config::read(config)?;
        let flags = engine::EngineFlags {
            kind: self.engine,
            ingress: self.ingress,
            admin: self.admin,
            worker_timeout: self.worker_timeout,
        };
        engine::resolve(&flags, file.as_deref(), parsed.engine.as_ref())
    }

    /// Where a read command finds the sessions.
    pub(crate) fn source(
        self,
        dir: &Path,
        config: Option<&Path>,
    ) -> Result<engine::Source, CliError> {
        engine::Source::new(&self.resolve(config)?, dir)
    }
}

/// Which tree a name is looked up in.
#[derive(Debug, Args)]
pub(crate) struct RootArg {
    /// The root session whose tree to use (default: the most recent root).
    #[arg(long, value_name = "SESSION-ID")]
    pub(crate) root: Option<String>,
}

/// How long a command waits for a tree another process holds.
#[derive(Debug, Args)]
pub(crate) struct WaitArg {
    /// While another process (a `dsh run`, `dsh send` or `dsh resume` in
    /// the same tree) holds the tree, wait this many seconds for it, then
    /// say who holds it; 0 says so at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) wait: u64,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
        #[command(flatten)]
        engine: EngineArgs,
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
        /// Print the listing as one JSON document on stdout (the schema is in
        /// docs/cli-json.md) instead of the text.
        #[arg(long, conflicts_with = "prune_orphans")]
        json: bool,
        #[command(flatten)]
        engine: EngineArgs,
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
    ///
    /// On a Restate cluster (`--engine restate`) the message goes into the
    /// agent's inbox under a request id (printed; `--request-id` sends it
    /// again at most once), the tree runs on the workers with the model
    /// they were given, and the command follows it until it is done, drawn
    /// as `dsh run --engine restate` draws it.
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
        #[command(flatten)]
        engine: EngineArgs,
        /// On a Restate cluster: the request id to send the message under
        /// (default: a new one, printed). The inbox takes a request id at
        /// most once, so sending again with the same id after a failed or
        /// cut-off command never delivers the message twice.
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
    },
    /// Bring a tree back after a crash or a kill and run what it had left
    /// to do, until the whole tree is done.
    ///
    /// The root is resumed; members with pending input or a turn the stop
    /// cut off are resumed (a cut turn is closed as aborted and its creator
    /// told); parked members stay parked and idle ones stay cold; notices
    /// a crash kept from their creators are delivered. No prompt is sent.
    ///
    /// On a Restate cluster (`--engine restate`) a tree goes on by itself
    /// when a worker dies, so resume re-drives what is stuck: a member
    /// whose input waits with no turn scheduled (its last turn failed
    /// before it started) gets its turn again; parked and draining members
    /// stay as they are. Then the command follows the tree until it is
    /// done, as `dsh run --engine restate` does.
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
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Serve a lead and its whole tree to an editor over the Agent Client
    /// Protocol on stdin and stdout (Zed's `agent_servers`, any ACP client).
    ///
    /// Each session is a tree in the session directory, its workspace the
    /// client's cwd under `--sandbox`; every child appears as a child
    /// session, and an action above the level is asked of the client.
    /// Nothing but protocol frames is written to stdout.
    Acp {
        #[command(flatten)]
        dir: DirArg,
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        acp: AcpArgs,
        /// Make each session's lead the lead of an agent team, as
        /// `dsh run --team` does (dsh.toml `team`).
        #[arg(long)]
        team: bool,
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
        /// Print the transcript as one JSON document on stdout (the schema
        /// is in docs/cli-json.md) instead of the text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        engine: EngineArgs,
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
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Write the logs of the most recent tree (or of TREE) as a session
    /// directory of the local JSONL store, byte for byte the files that
    /// store writes, from the session directory or from a Restate cluster
    /// (`--engine restate`). Sessions already in DIR are refused; nothing
    /// else there is touched.
    Export {
        /// The root session of the tree (default: the most recent root).
        #[arg(value_name = "TREE")]
        tree: Option<String>,
        /// The directory to write the logs to (created if missing).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        #[command(flatten)]
        dir: DirArg,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Serve dsh's Restate objects for a Restate server to call (one of
    /// any number of identical workers); register its address with the
    /// server's admin API. SIGINT, SIGTERM or SIGHUP stops it after the
    /// calls in flight (the server sends what was cut to another worker;
    /// see docs/distributed.md).
    Worker {
        /// The address to listen on (`IP:PORT`; port 0 picks one). Once
        /// bound, `listening on http://ADDR` is printed on stdout.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9080")]
        listen: String,
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
        /// Print the team as one JSON document on stdout (the schema is in
        /// docs/cli-json.md) instead of the text.
        #[arg(long)]
        json: bool,
    },
}

/// The settings of a command that runs agents: dsh.toml under the model,
/// limit and ACP flags (and `--team`).
pub(crate) fn load_settings(
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
