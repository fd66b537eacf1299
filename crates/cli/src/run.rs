//! `dsh run`: create a lead agent with the delegation and control tools,
//! give it the prompt, show the tree while it works, and return only when
//! the whole tree is done (B33: the lead idle, then the runtime's tree work
//! joined, then the lead checked again, until nothing progresses; a
//! background external child, which has no local agent for the runtime to
//! join, is waited for through the runtime's start and end events). Ctrl-C,
//! SIGTERM or SIGHUP interrupts the lead, drains its tree and exits with
//! `128 + n`. A write that fails anywhere in the tree (a full disk, a
//! medium error) stops the tree the same way and exits non-zero naming the
//! OS error (B56): the run never waits for a turn that cannot be recorded,
//! and never reports success after a failed write. Every check that can
//! refuse the run (the model, its address) runs before the first session is
//! written; other logs of the directory are never needed, so a foreign or
//! unreadable file there is only warned about (B57). When the tree's
//! budget is spent (B64) the tree is stopped children first and the run
//! ends with the line naming the budget; each child the runtime stopped at
//! its own limit gets a line too.
//!
//! Past 800 lines because its unit tests live here (about 90 lines): the
//! code itself is one concept, a run from its first line to its last.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dsh_core::observe::Subscription;
use dsh_core::{
    Agent, AgentFactory, AgentStatus, CancelCause, CancelOptions, CancellationToken, CreateAgent,
    Model, ResumeAgent, SessionHeader, SessionId, SessionStore, Usage, UserMessage,
};
use dsh_subagent::SubagentEvent;
use tokio::sync::Notify;
use tokio::time::timeout;

use crate::ask::AskMode;
use crate::config::{Price, Settings};
use crate::demo::{DEMO_PROMPT, Demo};
use crate::demo_team::{TEAM_DEMO_PROMPT, TeamDemo};
use crate::error::CliError;
use crate::model::{self, ModelChoice};
use crate::observe::{Mode, Reporter, Seen, compact};
use crate::session::{Session, SessionConfig};
use crate::sessions;
use crate::signals::Signals;
use crate::transcript;
use crate::world::World;

/// How long a command that quits at once (a second signal) still gives
/// its output to be written.
const QUIT_FLUSH: Duration = Duration::from_secs(1);

/// How long stopping a tree (after a signal or a failed write) and shutting
/// the world down may take before `dsh` exits anyway: a bound on teardown,
/// so that an agent that does not stop cannot keep the command alive.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// What `dsh run` was asked.
#[derive(Debug)]
pub struct RunArgs {
    /// The lead's task; the demo's own when absent.
    pub prompt: Option<String>,
    /// The session directory.
    pub dir: PathBuf,
    /// The model, limits, ACP agent and prices (`dsh.toml` and the flags).
    pub settings: Settings,
    /// Continue this root's conversation (`dsh send lead`) instead of
    /// creating a new lead; the prompt is then the user's next message.
    pub resume: Option<SessionId>,
    /// `dsh resume`: bring the resumed root's whole tree back with the
    /// runtime's `resume_tree` and send no prompt.
    pub whole_tree: bool,
    /// One JSON object per line on stdout for every event (`--json`).
    pub json: bool,
    /// Whether an action above the level asks the person (`--ask`).
    pub ask: AskMode,
    /// For a resumed root, the wait for it while another process holds
    /// the tree (`--wait`); without one, a held tree is refused at once.
    pub held: Option<crate::held::TreeWait>,
}

/// Run the command.
///
/// # Cancel safety
/// The whole command, not meant to be dropped (Ctrl-C goes through
/// [`stop`]). A drop leaves every acknowledged write in its log and the
/// tree's agents to the runtime's shutdown; a later `dsh send` resumes
/// whatever was pending.
pub async fn run(args: RunArgs) -> Result<(), CliError> {
    let resuming = args.resume.is_some();
    let durability = args.settings.durability;
    run_over(args, move |dir| {
        let store: Arc<dyn SessionStore> = if resuming {
            sessions::existing_store_with(dir, durability)?
        } else {
            sessions::open_store(dir, durability)?
        };
        Ok(store)
    })
    .await
}

/// The model and the demo scripts a run plays: `--team` with the demo
/// model is the team demo; a continued tree has no scripted order to keep
/// (the demo answers any new input at once).
struct Script {
    model: Arc<dyn Model>,
    demo: Option<Demo>,
    team_demo: Option<TeamDemo>,
}

impl Script {
    /// The script `settings` ask for, `resuming` a tree or not.
    ///
    /// # Cancel safety
    /// Cancel safe: it only builds the model client.
    async fn choose(settings: &Settings, resuming: bool) -> Result<Self, CliError> {
        let team_demo = (settings.team && !resuming && matches!(settings.model, ModelChoice::Demo))
            .then(TeamDemo::new);
        let (model, demo): (Arc<dyn Model>, Option<Demo>) = match &settings.model {
            ModelChoice::Demo if team_demo.is_some() => (
                team_demo
                    .as_ref()
                    .map_or_else(|| Demo::new(true).model(), TeamDemo::model),
                None,
            ),
            ModelChoice::Demo if resuming => (Demo::new(false).model(), None),
            ModelChoice::Demo => {
                let demo = Demo::new(true);
                (demo.model(), Some(demo))
            }
            ModelChoice::Api(api) => (model::openai(api).await?, None),
        };
        Ok(Self {
            model,
            demo,
            team_demo,
        })
    }

    /// The first line of the run: what plays the agents, where the
    /// sessions are, which configuration file was read.
    fn banner(&self, settings: &Settings, dir: &std::path::Path) -> String {
        let what = match &settings.model {
            ModelChoice::Demo => format!(
                "offline demo: a scripted model plays every agent (no network; its words are fixed and do not follow your task), the {} tools are real",
                if self.team_demo.is_some() {
                    "team"
                } else {
                    "workspace"
                }
            ),
            choice => format!("model {}", choice.spec()),
        };
        let config = settings
            .file
            .as_ref()
            .map(|file| format!("; config {}", file.display()))
            .unwrap_or_default();
        format!("dsh: {what}; sessions in {}{config}", dir.display())
    }

    /// The prompt when none was given.
    fn default_prompt(&self) -> &'static str {
        if self.team_demo.is_some() {
            TEAM_DEMO_PROMPT
        } else {
            DEMO_PROMPT
        }
    }
}

/// Run the command over the store `open` makes of the session directory
/// (called once every refusing check has passed).
async fn run_over(
    args: RunArgs,
    open: impl FnOnce(&std::path::Path) -> Result<Arc<dyn SessionStore>, CliError>,
) -> Result<(), CliError> {
    let settings = &args.settings;
    let script = Script::choose(settings, args.resume.is_some()).await?;
    let mut signals = Signals::install()?;
    let existed = args.dir.exists();
    let opened = open(&args.dir)?;
    if existed && args.resume.is_none() {
        // A new lead needs none of the other logs: a bad one is only named.
        sessions::scan(opened.as_ref()).await?.warn();
    }
    // A continued tree that has a team keeps its team tools.
    let team = settings.team
        || match &args.resume {
            Some(id) => crate::team::has_team(opened.as_ref(), id).await?,
            None => false,
        };
    let cwd = std::env::current_dir()?;
    let reporter = Reporter::new(Mode::choose(args.json), settings.price());
    let session = Session::open(SessionConfig {
        store: opened,
        model: Arc::clone(&script.model),
        settings,
        reporter: Some(&reporter),
        team,
        ask: args.ask,
        cwd: &cwd,
        askers: None,
    })
    .await?;
    let outcome = drive(&args, &script, &session, &reporter, &mut signals, team, cwd).await;
    // Everything shown is written before the command's last word; quitting
    // at once waits only a moment for it.
    if let Err(CliError::Forced(_)) = &outcome {
        let _ = timeout(QUIT_FLUSH, reporter.flush()).await;
    } else {
        reporter.flush().await;
    }
    outcome
}

/// The run over an open session: the lead created or resumed, the tree
/// watched until it is done, a signal or a failed write, then rolled up
/// and shut down.
async fn drive(
    args: &RunArgs,
    script: &Script,
    session: &Session,
    reporter: &Arc<Reporter>,
    signals: &mut Signals,
    team: bool,
    cwd: PathBuf,
) -> Result<(), CliError> {
    let settings = &args.settings;
    let world = &session.world;
    let faults = &session.faults;
    // The reporter hears an end before the demo's gates do, so a finish is
    // printed before anything it releases.
    let _gates = script
        .demo
        .as_ref()
        .and_then(|demo| demo.attach(&world.runtime));
    let _team_gates = script
        .team_demo
        .as_ref()
        .map(|demo| demo.attach(&world.runtime));
    let (external, _tracking) = External::track(&world.runtime);
    let (limited, _hearing) = crate::budget::ChildLimits::track(&world.runtime);
    reporter.show(Seen::RunStarted {
        banner: script.banner(settings, &args.dir),
        model: settings.model.spec(),
        sessions: args.dir.display().to_string(),
    });
    let prompt = args
        .prompt
        .clone()
        .unwrap_or_else(|| script.default_prompt().to_owned());
    let lead = begin(args, world, reporter, cwd).await?;
    if let Some(recovery) = world.open_team(&lead).await? {
        for (member, error) in &recovery.errors {
            reporter.line(&format!(
                "team: messages for {member} stay queued: {}",
                compact(error, 200)
            ));
        }
    }
    tracing::info!(
        lead = %lead.id(),
        model = %settings.model.spec(),
        sessions = %args.dir.display(),
        config = ?settings.file,
        resumed = args.resume.is_some(),
        "run started"
    );
    // Only the answers of turns that start now are printed.
    let earlier = transcript::finished_turns(&lead.events()).len();
    reporter.lead(&lead, &prompt);

    // A resumed tree runs what it had left; anything else gets the prompt.
    let sent = if args.whole_tree {
        Ok(())
    } else {
        lead.followup(UserMessage::user_text(prompt))
            .await
            .map(drop)
    };
    let outcome = match sent {
        Err(err) => Err(err.into()),
        Ok(()) => {
            tokio::select! {
                outcome = settle(world, &lead, reporter, &external, earlier) => outcome,
                err = faults.failed() => {
                    stop(world, &lead, Some(reporter)).await;
                    Err(CliError::WriteFailed(err))
                }
                spent = exhausted(session.meter.as_deref()) => {
                    stop_children_first(world, &lead, Some(reporter)).await;
                    Err(CliError::BudgetSpent(spent.end_line()))
                }
                signal = signals.recv() => {
                    reporter.line("interrupted: stopping the tree (again to quit at once)");
                    tokio::select! {
                        () = stop(world, &lead, Some(reporter)) => Err(CliError::Interrupted(signal)),
                        again = signals.recv() => Err(CliError::Forced(again)),
                    }
                }
            }
        }
    };
    // Quit at once: no summary, no orderly shutdown. Returning drops every
    // task with the runtime, and with them the agents' processes (killed
    // on drop); the sessions hold what was written.
    if let Err(CliError::Forced(signal)) = outcome {
        return Err(CliError::Forced(signal));
    }
    // A failed write wins over whatever the tree made of it.
    let outcome = match (outcome, faults.first()) {
        (Err(CliError::Interrupted(signal)), _) => Err(CliError::Interrupted(signal)),
        (_, Some(err)) => Err(CliError::WriteFailed(err)),
        (outcome, None) => outcome,
    };
    reporter.show(Seen::Refresh);
    // The tree rolled up: under the plain lines, or above the live tree.
    if reporter.wants().summary && outcome.is_ok() {
        let mut lines = summary(world, &lead, settings.price()).await;
        if let Some(meter) = &session.meter {
            lines.push(format!("  budget: {} used", meter.spend().line()));
        }
        if team {
            // The team as its logs hold it, as `dsh team` shows it.
            match crate::team::report(world.store.as_ref(), lead.id()).await {
                Ok(report) => {
                    lines.push(String::new());
                    lines.extend(report.lines().map(str::to_owned));
                }
                Err(err) => lines.push(format!("the team cannot be read: {err}")),
            }
        }
        reporter.show(Seen::Summary(lines));
    }
    // Which budget stopped what: each child stopped at its own limit.
    for line in limited.lines() {
        reporter.line(&line);
    }
    let events = lead.events();
    reporter.show(Seen::RunEnded {
        lead: lead.id().clone(),
        stop_reason: dsh_subagent::result::last_stop(&events).map(|(reason, _)| reason.to_string()),
        error: outcome.as_ref().err().map(ToString::to_string),
    });
    shutdown(world, Some(reporter)).await;
    // Under `--durability batched` the last writes may still wait for the
    // committer: nothing counts as done until they are on stable storage.
    let outcome = match (world.store.flush().await, outcome) {
        (Err(err), Ok(())) => Err(CliError::WriteFailed(err)),
        (Err(err), Err(failed)) => {
            eprintln!(
                "dsh: warning: the session logs could not be synced: {}",
                crate::one_line(&err.to_string())
            );
            Err(failed)
        }
        (Ok(()), outcome) => outcome,
    };
    match &outcome {
        Ok(()) => tracing::info!(lead = %lead.id(), "run ended"),
        Err(err) => tracing::warn!(lead = %lead.id(), "run failed: {err}"),
    }
    outcome
}

/// The wait for the resumed root `id`: the command's, or none (a held
/// tree refused at once).
fn held(args: &RunArgs, id: &SessionId) -> crate::held::TreeWait {
    args.held
        .clone()
        .unwrap_or_else(|| crate::held::TreeWait::new(id.as_str(), 0, PathBuf::new()))
}

/// The lead: the resumed root's whole tree (`dsh resume`), the resumed
/// root alone (`dsh send lead`: its children stay cold until it addresses
/// them, and the runtime resumes them on demand), or a new lead.
///
/// # Cancel safety
/// As the harness's create and the runtime's resume: a drop leaves no
/// half-made lead.
async fn begin(
    args: &RunArgs,
    world: &World,
    reporter: &Reporter,
    cwd: PathBuf,
) -> Result<Arc<dyn Agent>, CliError> {
    let handle = match &args.resume {
        Some(id) if args.whole_tree => {
            reporter.root(id);
            let tree = held(args, id)
                .take(|| async {
                    Ok(world
                        .runtime
                        .resume_tree(id, world.lead_setup(id), &CancellationToken::new())
                        .await?)
                })
                .await?;
            for line in crate::resume::render(&tree.members) {
                reporter.line(&line);
            }
            tree.root
        }
        Some(id) => {
            reporter.root(id);
            held(args, id)
                .take(|| async {
                    Ok(world
                        .harness
                        .resume(ResumeAgent {
                            setup: world.lead_setup(id),
                            id: id.clone(),
                            cancel: CancellationToken::new(),
                        })
                        .await?)
                })
                .await?
        }
        None => {
            // The tree remembers its model, for `dsh send` (no key, only
            // its variable's name).
            let mut header = SessionHeader::new(SessionId::generate(), cwd);
            header.extensions.insert(
                model::RUN_EXTENSION.to_owned(),
                model::record(&args.settings.model),
            );
            reporter.root(&header.id);
            world
                .harness
                .create(CreateAgent {
                    setup: world.lead_setup(&header.id),
                    header,
                    seed: Vec::new(),
                    cancel: CancellationToken::new(),
                })
                .await?
        }
    };
    Ok(handle.agent().clone())
}

/// Say `line`: through the reporter in a run, on stderr otherwise.
pub(crate) fn say(reporter: Option<&Reporter>, line: &str) {
    match reporter {
        Some(reporter) => reporter.line(line),
        None => eprintln!("dsh: {line}"),
    }
}

/// The first of the tree's budgets to be spent; never without a meter.
///
/// # Cancel safety
/// Cancel safe: it only watches.
pub(crate) async fn exhausted(meter: Option<&crate::budget::TreeMeter>) -> crate::budget::Spent {
    match meter {
        Some(meter) => meter.exhausted().await,
        None => std::future::pending().await,
    }
}

/// Interrupt the lead and drain its tree, within [`STOP_GRACE`].
///
/// # Cancel safety
/// A drop part-way leaves the lead interrupted (its input parked) and the
/// drain half done: the activations already stopped stay stopped, the
/// others keep running until [`shutdown`].
pub async fn stop(world: &World, lead: &Arc<dyn Agent>, reporter: Option<&Reporter>) {
    lead.cancel(CancelCause::User, CancelOptions { keep_inbox: true });
    drain(world, lead, reporter, None).await;
}

/// Stop the tree children first (its budget is spent): drain the lead's
/// descendants (admission closed, each branch stopped from its leaves),
/// then interrupt the lead, within [`STOP_GRACE`].
///
/// # Cancel safety
/// As [`stop`].
pub async fn stop_children_first(
    world: &World,
    lead: &Arc<dyn Agent>,
    reporter: Option<&Reporter>,
) {
    drain(
        world,
        lead,
        reporter,
        Some(CancelCause::Hook("the tree's budget was spent".into())),
    )
    .await;
}

/// Drain `lead`'s descendants, then cancel the lead for `then` (when
/// given) and wait for it, within [`STOP_GRACE`].
///
/// # Cancel safety
/// As [`stop`].
async fn drain(
    world: &World,
    lead: &Arc<dyn Agent>,
    reporter: Option<&Reporter>,
    then: Option<CancelCause>,
) {
    let stopping = async {
        if let Err(err) = world
            .runtime
            .drain_descendants(std::slice::from_ref(lead))
            .await
        {
            say(
                reporter,
                &format!(
                    "while stopping: {}",
                    compact(&crate::error::person(&err), 200)
                ),
            );
        }
        if let Some(cause) = then {
            lead.cancel(cause, CancelOptions { keep_inbox: true });
        }
        lead.wait_idle().await;
    };
    if timeout(STOP_GRACE, stopping).await.is_err() {
        say(
            reporter,
            &format!(
                "the tree did not stop within {} s; exiting anyway",
                STOP_GRACE.as_secs()
            ),
        );
    }
}

/// Shut the world down, within [`STOP_GRACE`].
///
/// # Cancel safety
/// As [`World::shutdown`]: a drop leaves what is not yet stopped live.
pub async fn shutdown(world: &World, reporter: Option<&Reporter>) {
    if timeout(STOP_GRACE, world.shutdown()).await.is_err() {
        say(
            reporter,
            &format!(
                "the agents did not shut down within {} s; exiting anyway",
                STOP_GRACE.as_secs()
            ),
        );
    }
}

/// External children (no local agent) started and not yet ended: the
/// runtime's `wait_for_tree_work` joins members through their local agents,
/// so the run waits for these through the runtime's start and end events.
pub(crate) struct External {
    running: Mutex<HashSet<SessionId>>,
    changed: Notify,
}

impl External {
    /// Track the runtime's external activations from now on.
    pub(crate) fn track(runtime: &dsh_subagent::SubagentRuntime) -> (Arc<Self>, Subscription) {
        let external = Arc::new(Self {
            running: Mutex::new(HashSet::new()),
            changed: Notify::new(),
        });
        let seen = Arc::clone(&external);
        let subscription = runtime.events().listen(move |event| {
            let mut running = seen.running.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                SubagentEvent::Start(info) if !info.local => {
                    running.insert(info.child_id.clone());
                }
                SubagentEvent::End(info, _) if !info.local => {
                    running.remove(&info.child_id);
                    seen.changed.notify_waiters();
                }
                _ => {}
            }
        });
        (external, subscription)
    }

    /// Wait for one external child to end; `false` at once when none runs.
    ///
    /// # Cancel safety
    /// Only observes; dropping it loses nothing.
    async fn wait_one(&self) -> bool {
        let ended = self.changed.notified();
        if self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
        {
            return false;
        }
        ended.await;
        true
    }
}

/// Wait until the tree is done (B33), printing each of the lead's answers
/// as its turn ends (after the first `printed` turns). Errors when the lead's last turn failed.
pub(crate) async fn settle(
    world: &World,
    lead: &Arc<dyn Agent>,
    reporter: &Reporter,
    external: &External,
    mut printed: usize,
) -> Result<(), CliError> {
    loop {
        lead.wait_idle().await;
        printed = print_answers(lead, reporter, printed);
        // A lead whose log failed runs no further turn: waiting would hang.
        if let Some(err) = lead.fault() {
            return Err(err.into());
        }
        if world.runtime.wait_for_tree_work(lead).await {
            continue;
        }
        if lead.status() == AgentStatus::Running {
            continue;
        }
        // A background external child still running: its notice is to come.
        if external.wait_one().await {
            continue;
        }
        break;
    }
    print_answers(lead, reporter, printed);
    let turns = transcript::finished_turns(&lead.events());
    match turns.last() {
        Some(turn) if transcript::failed(&turn.end.stop_reason) => Err(CliError::LeadStopped {
            reason: turn.end.stop_reason.to_string(),
            diagnostic: turn.end.diagnostic.clone(),
        }),
        _ => Ok(()),
    }
}

/// Show the lead's turns that ended since the first `printed` (a renderer
/// that streams the log shows them as its `text` lines instead); returns
/// how many are shown now.
fn print_answers(lead: &Arc<dyn Agent>, reporter: &Reporter, printed: usize) -> usize {
    let turns = transcript::finished_turns(&lead.events());
    for turn in turns.iter().skip(printed) {
        reporter.show(Seen::LeadTurn {
            stop_reason: turn.end.stop_reason.to_string(),
            failed: transcript::failed(&turn.end.stop_reason),
            diagnostic: turn.end.diagnostic.clone(),
            answer: turn.answer.clone(),
        });
    }
    turns.len().max(printed)
}

/// The tree as it ended, in stable order: every agent with its provider,
/// last stop reason, tokens and the tools it called; with a `price`, each
/// agent's cost and the tree's total.
async fn summary(world: &World, lead: &Arc<dyn Agent>, price: Option<Price>) -> Vec<String> {
    let mut lines = Vec::new();
    let events = lead.events();
    let mut rows = vec![(
        "lead".to_owned(),
        "root".to_owned(),
        dsh_subagent::result::last_stop(&events)
            .map(|(reason, _)| reason.to_string())
            .unwrap_or_else(|| "-".to_owned()),
        transcript::tokens(&events),
        transcript::tool_calls(&events),
    )];
    let listed = match world
        .runtime
        .list_descendants(lead.id(), &CancellationToken::new())
        .await
    {
        Ok(listed) => listed,
        Err(err) => {
            // The summary is shown without the children, and says why.
            lines.push(format!(
                "the tree cannot be listed: {}",
                compact(&crate::error::person(&err), 200)
            ));
            Vec::new()
        }
    };
    for row in listed {
        let name = format!(
            "{}{}",
            "  ".repeat(row.depth as usize),
            sessions::display_name(&row)
        );
        // An external child's transcript is kept by its agent program.
        let loaded = if row.entry.mode == dsh_subagent::ChildMode::EXTERNAL {
            None
        } else {
            Some(world.store.load(&row.entry.child_id).await)
        };
        let (stop, tokens, tools) = match loaded {
            // Its tokens are what its agent reported, as its creator's
            // log recorded them.
            None => ("external".to_owned(), row.usage.own, String::new()),
            Some(Ok(log)) => {
                let own = log
                    .events
                    .get(usize::try_from(log.header.seed_len).unwrap_or(usize::MAX)..)
                    .unwrap_or_default();
                (
                    dsh_subagent::result::last_stop(own)
                        .map(|(reason, _)| reason.to_string())
                        .unwrap_or_else(|| "-".to_owned()),
                    transcript::tokens(own),
                    transcript::tool_calls(own),
                )
            }
            Some(Err(err)) => (
                format!("unreadable: {}", err.code()),
                Usage::default(),
                String::new(),
            ),
        };
        rows.push((name, row.entry.provider.clone(), stop, tokens, tools));
    }
    lines.push(String::new());
    lines.push("tree:".to_owned());
    // Tokens in/out, the cached share when there is one, the cost with a
    // price.
    let figures = |usage: Usage| {
        let cached = if usage.cached_input_tokens > 0 {
            format!(" ({} cached)", usage.cached_input_tokens)
        } else {
            String::new()
        };
        let cost = price
            .map(|price| {
                format!(
                    " ${:.4}",
                    price.cost(usage.input_tokens, usage.output_tokens)
                )
            })
            .unwrap_or_default();
        format!(
            "tokens {}/{}{cached}{cost}",
            usage.input_tokens, usage.output_tokens
        )
    };
    let mut total = Usage::default();
    let agents = rows.len();
    for (name, provider, stop, usage, tools) in rows {
        total += usage;
        let tools = if tools.is_empty() {
            String::new()
        } else {
            format!("  tools: {tools}")
        };
        lines.push(
            format!(
                "  {name:<14} {provider:<6} {stop:<10} {}{tools}",
                figures(usage)
            )
            .trim_end()
            .to_owned(),
        );
    }
    lines.push(format!(
        "  total ({agents} agents)            {}",
        figures(total)
    ));
    lines
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use dsh_core::Durability;
    use dsh_harness::JsonlStore;
    use dsh_test_support::store::{Fault, FaultStore, Op};

    use super::*;

    fn demo_args(dir: &std::path::Path, team: bool) -> RunArgs {
        RunArgs {
            prompt: None,
            dir: dir.to_path_buf(),
            settings: crate::config::resolve(
                None,
                crate::config::ConfigFile::default(),
                &crate::config::Overrides {
                    team,
                    ..crate::config::Overrides::default()
                },
            )
            .unwrap(),
            resume: None,
            whole_tree: false,
            json: false,
            ask: AskMode::Never,
            held: None,
        }
    }

    /// The demo run (the team demo with `team`) over a store that fails
    /// the `nth` call of `op`.
    async fn run_failing(
        op: Op,
        nth: u64,
        fault: Fault,
        team: bool,
    ) -> (Result<(), CliError>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(FaultStore::new(
            JsonlStore::new(dir.path(), Durability::TurnBoundary).unwrap(),
        ));
        faults.fail(op, nth, fault);
        let store = Arc::clone(&faults);
        let outcome = timeout(
            Duration::from_secs(60),
            run_over(demo_args(dir.path(), team), move |_| {
                Ok(store as Arc<dyn SessionStore>)
            }),
        )
        .await
        .unwrap_or_else(|_| panic!("dsh run hung after {op} {nth} failed"));
        (outcome, faults.calls(op))
    }

    /// B56 at every write of the demo's tree, and of the team demo's: EIO
    /// at the k-th append, or at the k-th turn-boundary sync, of any
    /// agent's log, for every k of a whole run. The run ends (never hangs)
    /// with the OS error, never with success.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_at_any_point_of_the_tree_ends_the_run_with_the_os_error() {
        for (op, team) in [
            (Op::Append, false),
            (Op::Checkpoint, false),
            (Op::Append, true),
            (Op::Checkpoint, true),
        ] {
            // A clean run counts the calls (a fault beyond them never fires).
            let (clean, total) = run_failing(op, u64::MAX, Fault::EIO, team).await;
            assert!(clean.is_ok(), "{clean:?}");
            assert!(total > 0, "{op}: no calls");
            for nth in 1..=total {
                let (outcome, _) = run_failing(op, nth, Fault::EIO, team).await;
                let err = outcome.expect_err("a run whose write failed succeeded");
                assert!(matches!(err, CliError::WriteFailed(_)), "{op} {nth}: {err}");
                assert!(
                    err.to_string().contains("Input/output error"),
                    "{op} {nth}: {err}"
                );
                assert_eq!(err.exit_code(), 1);
            }
            println!(
                "{op} (team {team}): all {total} failure points end the run with the OS error"
            );
        }
    }
}
