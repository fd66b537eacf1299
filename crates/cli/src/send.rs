//! `dsh send <name> <message>`: the user-authored prompt path (B36), with
//! the model the tree recorded when `dsh run` built it (`--model` wins).
//! `dsh send lead` continues the lead's own conversation: a `dsh run` that
//! resumes the root instead of creating one, so the whole tree is there
//! and cold children wake as the lead addresses them. For a child, the
//! name is resolved in a persisted tree before anything is written; then
//! the tree's root is resumed (the runtime delivers user prompts through a
//! live root), the runtime resumes the cold child and delivers the message
//! under the user's authority, and the child's reply is printed when that
//! turn ends. The child settles as any resumed child does, so its notice
//! reaches its creator's inbox; the creator's reaction to it is not this
//! command's work (it could wait for a sibling that nothing resumes), so
//! the tree is quiet for the whole command
//! ([`SubagentRuntime::quiet_tree`](dsh_subagent::SubagentRuntime::quiet_tree)):
//! no notice wakes anyone, and each stays queued for its creator's next
//! run, never spent on a model call the command would then interrupt.
//! Then the tree is stopped. Under `--max-tokens`/`--max-cost` the
//! spend is metered as in `dsh run`: a spent budget stops the tree children
//! first and fails the command with the line naming the budget.
//!
//! The tree is rebuilt as `dsh run` builds it ([`crate::session`]), the
//! `--acp-*` flags included: a tree whose lead's log
//! holds team records gets the team tools (and its team is opened for the
//! resumed lead), and the ACP agents of dsh.toml are installed, so a
//! resumed member keeps the tools it had. An external child whose agent
//! can continue its session (a continuable ACP child) gets the message as
//! the prompt of a follow-up run, sent from the resumed root (a cold
//! creator of it is resumed to own the run and hear its notice), and its
//! reply is that run's result's output
//! ([`SubagentResult::output_text`](dsh_subagent::SubagentResult::output_text)),
//! with its stop reason and diagnostic when it failed; one that cannot
//! continue is refused.
//!
//! A tree another process holds (another `dsh` working in it has its
//! root's log locked) is waited for, up to `--wait` seconds, after one
//! line on stderr naming the holder's pid; then the command refuses,
//! naming it again.
//!
//! The reply printed is the answer of the turn that claimed this message
//! (found by its id in the child's log), never merely the log's last turn:
//! when that turn could not be recorded, the command fails instead of
//! printing an older answer (B56). A failed write anywhere in the tree, a
//! signal, or a runtime refusal each end the command with one line on
//! stderr; the refusal is worded for the person, not for a model.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::{
    Agent, AgentFactory, CancellationToken, ContentBlock, MessageId, Model, ResumeAgent, SessionId,
};
use dsh_harness::JsonlStore;
use dsh_subagent::{
    ChildMode, PromptDelivery, RunOutcome, SubagentError, SubagentEvent, TrustedHost, UserPrompt,
};

use crate::config::Settings;
use crate::demo::Demo;
use crate::error::CliError;
use crate::model::{self, ModelChoice};
use crate::observe::{Mode, Reporter, Seen};
use crate::run::shutdown;
use crate::session::{Session, SessionConfig};
use crate::sessions::{self, Member};
use crate::signals::Signals;
use crate::transcript;
use crate::world::World;

/// What `dsh send` was asked.
#[derive(Debug)]
pub struct SendArgs {
    /// The child's name, path or session id.
    pub name: String,
    /// The message.
    pub message: String,
    /// The session directory.
    pub dir: PathBuf,
    /// `--root`.
    pub root: Option<String>,
    /// The model and limits (`dsh.toml` and the flags).
    pub settings: Settings,
    /// One JSON object per line on stdout for every event, the reply
    /// included (`--json`).
    pub json: bool,
    /// Whether an action above the level asks the person (`--ask`).
    pub ask: crate::ask::AskMode,
    /// How long to wait, in seconds, for a tree another process holds
    /// (`--wait`).
    pub wait: u64,
}

/// Run the command.
///
/// # Cancel safety
/// The whole command, not meant to be dropped (Ctrl-C goes through
/// [`crate::run::stop`]). A drop leaves what was written durable: the
/// message, once accepted, is in the child's log and is delivered on the
/// next resume; nothing half-written is left, because the store's appends
/// are whole.
pub async fn send(args: SendArgs) -> Result<(), CliError> {
    if args.message.trim().is_empty() {
        return Err(CliError::Refused("the message is empty".to_owned()));
    }
    let mut signals = Signals::install()?;
    let sessions::Picked {
        store,
        root,
        model: choice,
    } = sessions::pick_tree(&args.dir, args.root.as_deref(), &args.settings).await?;
    if args.name == dsh_subagent::ROOT_NAME || args.name == root.as_str() {
        // The lead's own conversation goes on, with its whole tree: a run
        // that resumes instead of creating, once no other process holds
        // the lead.
        let mut held = crate::held::TreeWait::new(&args.name, args.wait, store.log_path(&root));
        held.free().await?;
        drop(store);
        drop(signals);
        let mut settings = args.settings;
        settings.model = choice;
        return crate::run::run(crate::run::RunArgs {
            prompt: Some(args.message),
            dir: args.dir,
            settings,
            resume: Some(root),
            whole_tree: false,
            json: args.json,
            ask: args.ask,
            held: Some(held),
        })
        .await;
    }
    let model: Arc<dyn Model> = match &choice {
        ModelChoice::Demo => Demo::new(false).model(),
        ModelChoice::Api(api) => model::openai(api).await?,
    };
    // A tree with a team keeps its team tools, as `dsh run` does.
    let team = crate::team::has_team(store.as_ref(), &root).await?;
    let reporter = args.json.then(|| Reporter::new(Mode::Json, None));
    let session = Session::open(SessionConfig {
        store: store.clone(),
        model,
        settings: &args.settings,
        reporter: reporter.as_ref(),
        team,
        ask: args.ask,
        cwd: &std::env::current_dir()?,
        askers: None,
    })
    .await?;
    if let Some(reporter) = &reporter {
        reporter.root(&root);
    }
    let (world, faults) = (&session.world, &session.faults);
    let mut lead = None;
    let outcome = tokio::select! {
        outcome = deliver(world, &store, &root, &args, &mut lead, reporter.as_deref()) => outcome,
        err = faults.failed() => Err(CliError::WriteFailed(err)),
        spent = crate::run::exhausted(session.meter.as_deref()) => {
            Err(CliError::BudgetSpent(spent.end_line()))
        }
        signal = signals.recv() => Err(CliError::Interrupted(signal)),
    };
    // A failed write wins: an answer printed after one could be stale.
    let outcome = match (outcome, faults.first()) {
        (Err(CliError::Interrupted(signal)), _) => Err(CliError::Interrupted(signal)),
        (_, Some(err)) => Err(CliError::WriteFailed(err)),
        (outcome, None) => outcome,
    };
    if let (Err(err), Some(lead)) = (&outcome, &lead) {
        match err {
            // A spent budget stops the tree children first, as `dsh run`.
            CliError::BudgetSpent(_) => crate::run::stop_children_first(world, lead, None).await,
            _ => crate::run::stop(world, lead, None).await,
        }
    }
    shutdown(world, None).await;
    if let Some(reporter) = &reporter {
        reporter.flush().await;
    }
    outcome
}

/// Resume the root `root` to deliver through it. While another process
/// holds its log (another `dsh` working in this tree), wait for it, up to
/// `wait` seconds, polling, after one line saying who holds it; then
/// refuse naming the holder.
///
/// # Cancel safety
/// As the harness's resume: a drop leaves no half-resumed root.
async fn resume_root(
    world: &World,
    store: &JsonlStore,
    root: &SessionId,
    name: &str,
    wait: u64,
    reporter: Option<&Reporter>,
) -> Result<Arc<dyn Agent>, CliError> {
    let mut waiting = crate::held::HeldWait::new(name, wait);
    crate::held::take(
        &mut waiting,
        |held| store.log_path(held),
        reporter,
        || async {
            let resumed = world
                .harness
                .resume(ResumeAgent {
                    id: root.clone(),
                    setup: world.lead_setup(root),
                    cancel: CancellationToken::new(),
                })
                .await?;
            Ok(resumed.agent().clone())
        },
    )
    .await
}

/// Resolve, resume, deliver and wait; the resumed root is left in `lead`
/// so that a caller that stops waiting can stop its tree.
async fn deliver(
    world: &World,
    store: &JsonlStore,
    root: &SessionId,
    args: &SendArgs,
    resumed: &mut Option<Arc<dyn Agent>>,
    reporter: Option<&Reporter>,
) -> Result<(), CliError> {
    let row = match sessions::resolve(store, root, &args.name).await? {
        Member::Root(_) => {
            return Err(CliError::Refused(format!(
                "`{}` is the root of the tree; `dsh send` talks to its children (`dsh run` starts a new lead)",
                args.name
            )));
        }
        Member::Child(row) => row,
    };
    let external = row.entry.mode == ChildMode::EXTERNAL;
    if row.entry.mode != ChildMode::CONTINUABLE && !external {
        return Err(cannot_receive(&args.name, &row.entry.mode));
    }
    let child = row.entry.child_id.clone();
    let name = sessions::display_name(&row);

    // Prompts reach a child through its live root.
    let lead = resume_root(world, store, root, &name, args.wait, reporter).await?;
    *resumed = Some(lead.clone());
    // No notice starts a turn while this command works (see the module
    // docs), the lost ones delivered below included.
    let _quiet = world.runtime.quiet_tree(root);
    if let Some(recovery) = world.open_team(&lead).await? {
        for (member, error) in &recovery.errors {
            eprintln!(
                "dsh: team: messages for {member} stay queued: {}",
                crate::observe::compact(error, 200)
            );
        }
    }
    // Its tree is live again: notices a crash kept from it arrive first
    // (B54). Logs a crash left outside every catalog stay until the user
    // prunes them (`dsh agents --prune-orphans`): they are listed, never
    // removed behind the user's back.
    world.runtime.deliver_lost_notices(&lead).await?;
    let (_subscription, settled) = end_of(world, &child);
    if external {
        world
            .runtime
            .send_message(
                &lead,
                &child,
                vec![ContentBlock::text(args.message.clone())],
                &CancellationToken::new(),
            )
            .await
            .map_err(|err| match err {
                SubagentError::Delivery(dsh_subagent::DeliveryError::External(_)) => {
                    cannot_receive(&args.name, &row.entry.mode)
                }
                // A follow-up runs under the provider that made the child.
                SubagentError::Delivery(dsh_subagent::DeliveryError::DeliveryUnavailable(_))
                    if world.runtime.get(&row.entry.provider).is_none() =>
                {
                    CliError::Refused(format!(
                        "`{name}` was made by the ACP agent `{}`, which is not configured here (dsh.toml's `[acp]` or `[acp.agents.<name>]`)",
                        row.entry.provider
                    ))
                }
                err => named(&name, err),
            })?;
        let result = match settled.await {
            Some(RunOutcome::Settled(result)) => result,
            Some(RunOutcome::Error(error)) => {
                return Err(CliError::Refused(format!("`{name}` failed: {error}")));
            }
            None => {
                return Err(CliError::Refused(format!(
                    "`{name}` did not answer: the runtime ended before it settled"
                )));
            }
        };
        let answer = result.output_text();
        if transcript::failed(&result.stop_reason) {
            let said = [Some(answer), result.diagnostic.clone()]
                .into_iter()
                .flatten()
                .filter(|text| !text.trim().is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            return Err(CliError::Refused(format!(
                "`{name}` stopped ({}): {}",
                result.stop_reason,
                crate::observe::compact(&said, 200)
            )));
        }
        return answered(world, &lead, reporter, &name, answer).await;
    }
    let request_id = MessageId::generate();
    world
        .runtime
        .prompt(
            UserPrompt {
                child: child.clone(),
                request_id: request_id.clone(),
                content: vec![ContentBlock::text(args.message.clone())],
                attachments: Vec::new(),
                client_time_zone: None,
                delivery: PromptDelivery::Queue,
            },
            &TrustedHost,
            &CancellationToken::new(),
        )
        .await
        .map_err(|err| named(&name, err))?;
    if let Some(RunOutcome::Error(error)) = settled.await {
        return Err(CliError::Refused(format!("`{name}` failed: {error}")));
    }
    let log = world.store.load(&child).await?;
    let answer = reply(&name, &log.events, &request_id)?;
    answered(world, &lead, reporter, &name, answer).await
}

/// The answer of the turn of `events` (`name`'s log) that took the
/// message `id`, never an older turn's (B56).
///
/// # Errors
/// [`CliError::Refused`] when no turn took it, or the turn that did
/// failed (naming its stop reason and diagnostic).
fn reply(
    name: &str,
    events: &[dsh_core::SessionEvent],
    id: &MessageId,
) -> Result<String, CliError> {
    let Some(turn) = transcript::turn_claiming(events, id) else {
        return Err(CliError::Refused(format!(
            "`{name}` did not answer: no turn of its log took the message"
        )));
    };
    if transcript::failed(&turn.end.stop_reason) {
        return Err(CliError::Refused(format!(
            "`{name}` stopped ({}){}",
            turn.end.stop_reason,
            turn.end
                .diagnostic
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )));
    }
    Ok(turn.answer)
}

/// The outcome of `child`'s next activation end: `None` when the runtime
/// ends first. A listener, not a subscription channel, hears it: a channel
/// lagging behind a busy tree could lose the one end this command waits for.
fn end_of(
    world: &World,
    child: &SessionId,
) -> (
    dsh_core::observe::Subscription,
    impl Future<Output = Option<RunOutcome>> + use<>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let child = child.clone();
    let subscription = world.runtime.events().listen(move |event| {
        if let SubagentEvent::End(info, outcome) = event
            && info.child_id == child
            && let Some(tx) = tx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
        {
            // A receiver gone means nobody waits any more.
            let _ = tx.send(outcome.clone());
        }
    });
    (subscription, async move { rx.await.ok() })
}

/// Print `answer` as `name`'s reply, then stop the tree.
///
/// # Cancel safety
/// A drop while the tree stops leaves it stopping (see
/// [`crate::run::stop`]); the reply is printed before the first await.
async fn answered(
    world: &World,
    lead: &Arc<dyn Agent>,
    reporter: Option<&Reporter>,
    name: &str,
    answer: String,
) -> Result<(), CliError> {
    match reporter {
        Some(reporter) => reporter.show(Seen::Reply {
            agent: name.to_owned(),
            text: answer,
        }),
        None => println!("{name}: {}", answer.trim().replace('\n', "\n  ")),
    }
    // The child's notice is queued in its creator's inbox (the runtime
    // notifies the parent before it reports the end; the tree is quiet, so
    // it woke no one): stop the tree, keeping what is queued for the next
    // run.
    crate::run::stop(world, lead, None).await;
    if let Some(err) = lead.fault() {
        return Err(err.into());
    }
    Ok(())
}

/// The refusal of a message to a child of `mode` that cannot take one.
fn cannot_receive(name: &str, mode: &ChildMode) -> CliError {
    let article = if mode.as_str().starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    CliError::Refused(format!(
        "`{name}` is {article} {} child and cannot receive messages",
        mode.as_str()
    ))
}

/// A runtime refusal, named as the person named the child, not by id.
fn named(name: &str, err: SubagentError) -> CliError {
    match err {
        SubagentError::Delivery(dsh_subagent::DeliveryError::NotResumable { reason, .. }) => {
            CliError::Refused(format!("`{name}` cannot be resumed: {reason}"))
        }
        err => match CliError::from(err) {
            CliError::Corrupt(text) => {
                CliError::Corrupt(format!("`{name}` cannot be resumed: {text}"))
            }
            err => err,
        },
    }
}

/// What `dsh send` on a Restate cluster is given.
#[cfg(feature = "restate")]
pub struct ClusterSend<'a> {
    /// The cluster's client.
    pub client: dsh_restate::client::RestateClient,
    /// The ingress URL, for the banner and messages.
    pub ingress: &'a str,
    /// What was asked (the session directory and the local-only flags are
    /// not used: the workers run the tree as they were configured).
    pub args: SendArgs,
    /// `--request-id`: the request to send the message under.
    pub request_id: Option<String>,
}

/// `dsh send` on a Restate cluster: put the message into the agent's
/// inbox under a request id (said on stderr, so a failed command can be
/// retried without sending it twice), then follow the tree until it is
/// done, drawn as `dsh run --engine restate` draws it. To the lead, the
/// command ends as `dsh run` does; to a child, it prints the answer of
/// the turn that took this message (found by its id in the child's log,
/// B56) and fails when that turn failed.
///
/// # Errors
/// An empty message; the tree or the name not on the cluster; a child
/// that cannot take messages; an agent whose tree drains; as
/// [`crate::cluster::follow`].
///
/// # Cancel safety
/// The whole command, not meant to be dropped. Dropped after the accept,
/// the message stays accepted and the tree goes on on the cluster.
#[cfg(feature = "restate")]
pub async fn on_cluster(send: ClusterSend<'_>) -> Result<(), CliError> {
    use crate::cluster::{self, Followed};
    use dsh_restate::state::inbox::AcceptRequest;

    let ClusterSend {
        client,
        ingress,
        args,
        request_id,
    } = send;
    if args.message.trim().is_empty() {
        return Err(CliError::Refused("the message is empty".to_owned()));
    }
    cluster::connect(&client).await?;
    let mut signals = Signals::install()?;
    let (store, root) = cluster::tree_root(&client, ingress, args.root.as_deref()).await?;
    let (target, name) = match sessions::resolve(&store, &root, &args.name).await? {
        Member::Root(_) => (root.clone(), None),
        Member::Child(row) if row.entry.mode == ChildMode::CONTINUABLE => (
            row.entry.child_id.clone(),
            Some(sessions::display_name(&row)),
        ),
        Member::Child(row) => return Err(cannot_receive(&args.name, &row.entry.mode)),
    };
    let reporter = Reporter::new(Mode::choose(args.json), args.settings.price());
    if name.is_none() {
        cluster::run_started(&reporter, &args.settings, ingress);
    }
    reporter.root(&root);
    let mut tree = Followed::new(root.clone());
    tree.catch_up(&client, &reporter).await?;
    let request_id = request_id.unwrap_or_else(|| MessageId::generate().to_string());
    eprintln!(
        "dsh: sending as request {request_id} (`--request-id {request_id}` sends it again at most once)"
    );
    let request = AcceptRequest {
        request_id,
        message: dsh_core::UserMessage::user_text(args.message.clone()),
        target: dsh_core::InboxTarget::NextTurn,
        wake: true,
    };
    let shown = name.as_deref().unwrap_or(dsh_subagent::ROOT_NAME);
    let acceptance = client
        .accept(&target, &request)
        .await
        .map_err(|error| match error {
            dsh_restate::client::ClientError::Status {
                status: 409, body, ..
            } if body.contains("DRAINING") => CliError::Refused(format!(
                "`{shown}` takes no new input: its tree was stopped (drained) on the cluster"
            )),
            error => crate::engine::cluster_error(error),
        })?;
    if name.is_none() {
        reporter.show(Seen::Lead {
            id: root.clone(),
            agent: None,
            prompt: args.message.clone(),
        });
    }
    let outcome = cluster::follow(&client, &mut tree, &reporter, &mut signals).await;
    let Some(name) = name else {
        let outcome = outcome.and_then(|()| cluster::lead_stopped(&tree));
        return cluster::ended(&reporter, &tree, outcome).await;
    };
    let outcome = outcome.and_then(|()| {
        let answer = reply(&name, tree.events(&target), &acceptance.message_id)?;
        reporter.show(Seen::Reply {
            agent: name.clone(),
            text: answer,
        });
        Ok(())
    });
    reporter.flush().await;
    outcome
}
