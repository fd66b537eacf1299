//! The setup `dsh run`, `dsh send` and `dsh resume` share ([`Session::open`]):
//! the store watched for failed writes (and, for a renderer that shows the
//! logs' events, streamed to it), the person asked at the terminal above
//! the `--sandbox` level when asking is on, the world built with the
//! workspace, team, ACP agents and MCP servers the settings name, and the reporter
//! listening to the runtime. Each command then does its own work over the
//! [`Session`]; nothing here starts an agent.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use dsh_core::observe::Subscription;
use dsh_core::{Model, SessionStore};

use crate::ask::{AskMode, Prompter};
use crate::budget::{Metered, TreeMeter};
use crate::config::Settings;
use crate::error::CliError;
use crate::observe::Reporter;
use crate::world::{World, WorldConfig};
use crate::writes::{Watched, WriteFaults};

/// What a session is opened from.
pub struct SessionConfig<'a> {
    /// The session directory's store.
    pub store: Arc<dyn SessionStore>,
    /// The model the agents use.
    pub model: Arc<dyn Model>,
    /// The limits, sandbox level and ACP agents (`dsh.toml` and flags).
    pub settings: &'a Settings,
    /// Shows the run; `None` shows nothing (the reply is the command's
    /// only output).
    pub reporter: Option<&'a Arc<Reporter>>,
    /// The team tools in place of the control tools they share names with.
    pub team: bool,
    /// Whether an action above the level asks the person.
    pub ask: AskMode,
    /// The workspace root.
    pub cwd: &'a Path,
    /// Who answers in place of the terminal (`dsh acp`: the ACP client);
    /// `ask` is then not consulted.
    pub askers: Option<Askers>,
}

/// The askers of a session whose questions go elsewhere than the terminal.
pub struct Askers {
    /// The workspace tools' asker, above the `--sandbox` level.
    pub workspace: Arc<dyn dsh_tool_workspace::Asker>,
    /// The ACP agents' asker under `permission = "ask"`.
    #[cfg(feature = "acp")]
    pub acp: Arc<dyn dsh_subagent_acp::PermissionAsker>,
}

/// A command's world and what watches it.
pub struct Session {
    /// The agents' world.
    pub world: World,
    /// Failed writes anywhere in the tree.
    pub faults: Arc<WriteFaults>,
    /// The tree's usage against its budgets, when it has any.
    pub meter: Option<Arc<TreeMeter>>,
    /// The reporter's subscription to the runtime.
    _listening: Vec<Subscription>,
}

impl Session {
    /// Build the world `config` describes and attach the prompter and the
    /// reporter to its runtime (the reporter hears an end before anything
    /// the command attaches after it does).
    ///
    /// # Errors
    /// A tool, the workspace or an ACP agent cannot be set up, or an MCP
    /// server does not start.
    ///
    /// # Cancel safety
    /// A drop part-way drops what was built, MCP servers included (their
    /// process groups are SIGKILLed); nothing was started in the store.
    pub async fn open(config: SessionConfig<'_>) -> Result<Self, CliError> {
        let SessionConfig {
            store,
            model,
            settings,
            reporter,
            team,
            ask,
            cwd,
            askers,
        } = config;
        let faults = WriteFaults::new();
        let meter = settings.budgets.meters_tree().then(|| {
            // The spend reaches the person each quarter of the way.
            let reporter = reporter.cloned();
            let announce: crate::budget::Announce = Box::new(move |spend| {
                if let Some(reporter) = &reporter {
                    reporter.show(crate::observe::Seen::Budget(spend));
                }
            });
            TreeMeter::new(
                settings.budgets,
                settings.prices.clone(),
                &settings.model,
                Some(announce),
            )
        });
        let store = match &meter {
            Some(meter) => Metered::wrap(store, meter),
            None => store,
        };
        let store = match reporter.filter(|reporter| reporter.wants().logs) {
            Some(reporter) => Watched::streaming(store, &faults, reporter),
            None => Watched::wrap(store, &faults),
        };
        let prompter = (askers.is_none() && ask.asks(std::io::stdin().is_terminal()))
            .then(|| Prompter::terminal(reporter.cloned()));
        let (policy, acp, agents) = match &askers {
            Some(askers) => answered_by(settings, askers),
            None => asking(settings, prompter.as_ref()),
        };
        let world = World::build(WorldConfig {
            store,
            model,
            reporter,
            acp,
            limits: settings.limits,
            workspace: Some((cwd, policy)),
            team,
            roles: &settings.roles,
            model_choice: &settings.model,
            sandbox: settings.sandbox,
            budgets: settings.budgets,
        })?;
        for agent in agents {
            world.add_acp(agent, reporter)?;
        }
        world.start_mcp(settings.mcp.clone(), cwd, reporter).await?;
        if let Some(prompter) = &prompter {
            prompter.attach(&world.runtime);
        }
        let mut listening: Vec<Subscription> = reporter
            .map(|reporter| reporter.attach(&world.runtime))
            .into_iter()
            .collect();
        // An external child's usage reaches the meter from its end event.
        if let Some(meter) = &meter {
            let reporter = reporter.cloned();
            listening.push(meter.track(&world.runtime, move |line| {
                if let Some(reporter) = &reporter {
                    reporter.line(line);
                }
            }));
        }
        Ok(Self {
            world,
            faults,
            meter,
            _listening: listening,
        })
    }
}

/// The workspace policy and the ACP configurations with `askers` as their
/// askers.
fn answered_by(
    settings: &Settings,
    askers: &Askers,
) -> (
    dsh_tool_workspace::Policy,
    Option<crate::acp::AcpConfig>,
    Vec<crate::acp::AcpConfig>,
) {
    let policy = dsh_tool_workspace::Policy::new(settings.sandbox, Some(askers.workspace.clone()));
    #[cfg(feature = "acp")]
    let ask = |acp: crate::acp::AcpConfig| {
        if acp.permission == crate::acp::PermissionPolicy::Ask {
            acp.ask_with(askers.acp.clone())
        } else {
            acp
        }
    };
    #[cfg(not(feature = "acp"))]
    let ask = |acp: crate::acp::AcpConfig| acp;
    let acp = settings.acp.clone().map(ask);
    let agents = settings.acp_agents.iter().cloned().map(ask).collect();
    (policy, acp, agents)
}

/// The workspace policy and the ACP configurations (the `acp` agent, the
/// named ones) with `prompter` as their asker; without one, an agent whose
/// permission is `ask` rejects (and dsh says so on stderr).
fn asking(
    settings: &Settings,
    prompter: Option<&Arc<Prompter>>,
) -> (
    dsh_tool_workspace::Policy,
    Option<crate::acp::AcpConfig>,
    Vec<crate::acp::AcpConfig>,
) {
    let policy =
        dsh_tool_workspace::Policy::new(settings.sandbox, prompter.map(Prompter::workspace));
    let ask = |acp| crate::acp::asked(acp, prompter);
    let acp = settings.acp.clone().map(ask);
    let agents = settings.acp_agents.iter().cloned().map(ask).collect();
    (policy, acp, agents)
}
