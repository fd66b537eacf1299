//! `dsh`: run a lead agent that delegates to subagents and watch its tree,
//! then list, message and read the agents it left behind. Offline by
//! default (an embedded scripted demo); `--model openai:<model>` drives an
//! OpenAI-compatible API.
//!
//! This file is the dispatch: it parses the command line (the clap types
//! are in `args`), installs the diagnostics subscriber (`logging`), runs
//! the command on a Tokio runtime and maps every failure to one line on
//! stderr and an exit code; the commands live in their own modules. It
//! also sets the binary's allocator (mimalloc). The
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

use clap::Parser;

mod acp;
#[cfg(feature = "acp")]
mod acp_agent;
#[cfg(feature = "acp")]
mod acp_model;
mod agents;
mod args;
mod ask;
mod budget;
#[cfg(feature = "restate")]
mod cluster;
mod config;
mod demo;
mod demo_team;
mod engine;
mod error;
mod export;
mod held;
mod json;
mod logging;
mod mcp;
mod model;
mod observe;
mod providers;
mod replay;
mod resume;
mod roles;
mod run;
mod send;
mod session;
mod sessions;
mod show;
mod signals;
mod team;
mod transcript;
#[cfg(feature = "restate")]
mod worker;
mod world;
mod writes;

use args::{Cli, Command, load_settings};
use error::CliError;

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
        Command::Run { dir, .. }
        | Command::Send { dir, .. }
        | Command::Resume { dir, .. }
        | Command::Acp { dir, .. } => Some(dir.dir.clone()),
        Command::Agents { .. }
        | Command::Show { .. }
        | Command::Team { .. }
        | Command::Replay { .. }
        | Command::Export { .. }
        | Command::Worker { .. }
        | Command::Providers
        | Command::Mcp { .. } => None,
    };
    logging::diagnostics(cli.verbose, log.as_deref());
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

/// A command that runs agents on a Restate cluster.
// Without the `restate` feature the command is refused unread.
#[cfg_attr(not(feature = "restate"), allow(dead_code))]
enum OnCluster {
    /// `dsh run`.
    Run {
        prompt: Option<String>,
        settings: config::Settings,
        json: bool,
    },
    /// `dsh send`, with `--request-id`.
    Send(send::SendArgs, Option<String>),
    /// `dsh resume`.
    Resume(resume::ResumeArgs),
}

/// Run `command` on the cluster `engine` names (dsh-cli's `restate`
/// feature).
#[cfg(feature = "restate")]
async fn on_cluster(engine: &engine::Engine, command: OnCluster) -> Result<(), CliError> {
    let (client, ingress) = engine::cluster(engine)?;
    match command {
        OnCluster::Run {
            prompt,
            settings,
            json,
        } => {
            cluster::run(cluster::ClusterRun {
                client,
                ingress,
                prompt,
                settings: &settings,
                json,
            })
            .await
        }
        OnCluster::Send(args, request_id) => {
            send::on_cluster(send::ClusterSend {
                client,
                ingress,
                args,
                request_id,
            })
            .await
        }
        OnCluster::Resume(args) => {
            resume::on_cluster(resume::ClusterResume {
                client,
                ingress,
                args,
            })
            .await
        }
    }
}

/// A command on a Restate cluster: refused, naming the feature.
#[cfg(not(feature = "restate"))]
async fn on_cluster(_engine: &engine::Engine, _command: OnCluster) -> Result<(), CliError> {
    Err(engine::disabled(
        "--engine restate (or dsh.toml's engine.kind)",
    ))
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
            engine,
        } => {
            let engine = engine.resolve(config.as_deref())?;
            let (settings, ask) = load_settings(model, acp, team, config)?;
            if engine != engine::Engine::Local {
                let json = json.json;
                return on_cluster(
                    &engine,
                    OnCluster::Run {
                        prompt,
                        settings,
                        json,
                    },
                )
                .await;
            }
            run::run(run::RunArgs {
                prompt,
                dir: dir.dir,
                settings,
                resume: None,
                whole_tree: false,
                json: json.json,
                ask,
                held: None,
            })
            .await
        }
        Command::Agents {
            dir,
            prune_orphans,
            json,
            engine,
        } => {
            let source = engine.source(&dir.dir, config.as_deref())?;
            agents::agents(&source, prune_orphans, json).await
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
            engine,
            request_id,
        } => {
            let engine = engine.resolve(config.as_deref())?;
            let (settings, ask) = load_settings(model, acp, false, config)?;
            let args = send::SendArgs {
                name,
                message,
                dir: dir.dir,
                root: root.root,
                settings,
                json: json.json,
                ask,
                wait: wait.wait,
            };
            if request_id.as_deref().is_some_and(|id| id.trim().is_empty()) {
                return Err(CliError::BadFlag("--request-id: it is empty".to_owned()));
            }
            if engine != engine::Engine::Local {
                return on_cluster(&engine, OnCluster::Send(args, request_id)).await;
            }
            if request_id.is_some() {
                return Err(CliError::BadFlag(
                    "--request-id: it names a message in a Restate cluster's inbox; add `--engine restate` (or dsh.toml's engine.kind)".to_owned(),
                ));
            }
            send::send(args).await
        }
        Command::Resume {
            tree,
            dir,
            model,
            acp,
            wait,
            json,
            engine,
        } => {
            let engine = engine.resolve(config.as_deref())?;
            let (settings, ask) = load_settings(model, acp, false, config)?;
            let args = resume::ResumeArgs {
                tree,
                dir: dir.dir,
                settings,
                json: json.json,
                ask,
                wait: wait.wait,
            };
            if engine != engine::Engine::Local {
                return on_cluster(&engine, OnCluster::Resume(args)).await;
            }
            resume::resume(args).await
        }
        Command::Acp {
            dir,
            model,
            acp,
            team,
        } => {
            let (settings, _) = load_settings(model, acp, team, config)?;
            serve_acp(dir.dir, settings).await
        }
        Command::Providers => providers::providers(config).await,
        Command::Mcp { mcp, json } => mcp::list(config, mcp, json).await,
        Command::Show {
            name,
            dir,
            root,
            json,
            engine,
        } => {
            let source = engine.source(&dir.dir, config.as_deref())?;
            show::show(&source, root.root.as_deref(), &name, json).await
        }
        Command::Team { tree, dir, json } => team::team(&dir.dir, tree.as_deref(), json).await,
        Command::Replay { tree, dir, engine } => {
            let source = engine.source(&dir.dir, config.as_deref())?;
            replay::replay(&source, tree.as_deref()).await
        }
        Command::Export {
            tree,
            to,
            dir,
            engine,
        } => {
            let source = engine.source(&dir.dir, config.as_deref())?;
            export::export(export::ExportArgs {
                source: &source,
                tree: tree.as_deref(),
                to: &to,
            })
            .await
        }
        #[cfg(feature = "restate")]
        Command::Worker { listen } => worker::worker(&listen, config).await,
        #[cfg(not(feature = "restate"))]
        Command::Worker { .. } => Err(engine::disabled("dsh worker")),
    }
}

/// `dsh acp`.
#[cfg(feature = "acp")]
async fn serve_acp(dir: PathBuf, settings: config::Settings) -> Result<(), CliError> {
    acp_agent::acp(acp_agent::AcpAgentArgs { dir, settings }).await
}

/// `dsh acp`: refused, this `dsh` was built without the `acp` feature.
#[cfg(not(feature = "acp"))]
async fn serve_acp(_dir: PathBuf, _settings: config::Settings) -> Result<(), CliError> {
    Err(acp::disabled("dsh acp"))
}
