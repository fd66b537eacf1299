//! `dsh acp`: dsh as an ACP agent on stdio, a thin host over
//! [`dsh_acp_agent::serve`]. Each ACP session is one tree in the session
//! directory, built as `dsh run` builds one ([`crate::session`]), with the
//! client's cwd as the workspace root under the configured `--sandbox`
//! level and the client's [`Approvals`](dsh_acp_agent::Approvals) as the
//! asker of the workspace tools and of the ACP agents under `ask`. A
//! prompt is a turn of the lead, waited for as `dsh run` waits for its
//! tree (the lead idle, the tree's work joined, background external
//! children settled); a cancel stops the tree children first
//! ([`crate::run::stop`]). A loaded session is the persisted tree of that
//! root, resumed as `dsh send lead` resumes it, its logs replayed to the
//! client first, each child right after the call of its creator that
//! started it. A configuration that names other model routes for the
//! tree's provider (roles' `model`s) offers them as the session's `model`
//! option ([`crate::acp_model`]). The stdio and HTTP MCP servers the client passes with a session are
//! started for that tree beside the configured ones and stopped with it.
//!
//! What the tree does reaches the client through the reporter's renderer
//! seam: [`Forward`] is the renderer, fed by the same bounded channel as
//! the terminal's, that hands the logs' events and the runtime's starts and
//! ends to the session's [`Updates`]. Stdout
//! carries protocol frames only; every person line goes to stderr.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use dsh_acp_agent::{Client, Host, HostError, Models, Tree, TurnEnd, Updates};
use dsh_core::observe::Subscription;
use dsh_core::{
    Agent, AgentFactory, CancellationToken, ContentBlock, CreateAgent, MessageSource, Model,
    ResumeAgent, SessionEvent, SessionHeader, SessionId, SessionStore, StopReason, UserMessage,
};
use dsh_subagent::RunInfo;
use serde_json::Value;

use crate::acp_model::{Chosen, ModelOption};
use crate::config::Settings;
use crate::demo::Demo;
use crate::error::CliError;
use crate::model::{self, ModelChoice};
use crate::observe::{Output, Renderer, Reporter, Seen, Wants};
use crate::run::{External, STOP_GRACE};
use crate::session::{Askers, Session, SessionConfig};
use crate::sessions;

/// What `dsh acp` was asked.
#[derive(Debug)]
pub struct AcpAgentArgs {
    /// The session directory.
    pub dir: PathBuf,
    /// The model, limits, sandbox and ACP agents (`dsh.toml` and flags).
    pub settings: Settings,
}

/// Serve ACP on stdin and stdout until the client closes stdin, or a
/// signal (SIGINT, SIGTERM, SIGHUP) stops every tree first.
///
/// # Errors
/// The connection failed; [`CliError::Interrupted`] after a signal.
///
/// # Cancel safety
/// The whole command, not meant to be dropped; what the trees wrote stays.
pub async fn acp(args: AcpAgentArgs) -> Result<(), CliError> {
    let images = match &args.settings.model {
        ModelChoice::Demo => false,
        ModelChoice::Api(api) => model::openai(api).await?.accepts_images(),
    };
    let host = Arc::new(DshHost {
        dir: args.dir,
        settings: args.settings,
        images,
    });
    let mut signals = crate::signals::Signals::install()?;
    let (signalled, heard) = tokio::sync::oneshot::channel();
    let stop = async move {
        let _ = signalled.send(signals.recv().await);
    };
    dsh_acp_agent::serve(host, tokio::io::stdin(), tokio::io::stdout(), stop)
        .await
        .map_err(|err| CliError::Refused(format!("the ACP connection failed: {err}")))?;
    match heard.await {
        Ok(signal) => Err(CliError::Interrupted(signal)),
        Err(_) => Ok(()),
    }
}

/// The host: trees in one session directory under one configuration.
struct DshHost {
    dir: PathBuf,
    settings: Settings,
    images: bool,
}

/// A host failure as the client hears it.
fn failed(err: CliError) -> HostError {
    HostError::Failed(crate::one_line(&err.to_string()))
}

#[async_trait]
impl Host for DshHost {
    fn images(&self) -> bool {
        self.images
    }

    async fn open(&self, cwd: PathBuf, client: Client) -> Result<Arc<dyn Tree>, HostError> {
        let store: Arc<dyn SessionStore> =
            sessions::open_store(&self.dir, self.settings.durability).map_err(failed)?;
        // The demo's first run is its gated script (two children).
        let (model, demo): (Arc<dyn Model>, Option<Demo>) = match &self.settings.model {
            ModelChoice::Demo => {
                let demo = Demo::new(true);
                (demo.model(), Some(demo))
            }
            ModelChoice::Api(api) => (model::openai(api).await.map_err(failed)?, None),
        };
        let mut header = SessionHeader::new(SessionId::generate(), cwd.clone());
        header.extensions.insert(
            model::RUN_EXTENSION.to_owned(),
            model::record(&self.settings.model),
        );
        let id = header.id.clone();
        let chosen = Chosen::new(model);
        let option = ModelOption::of(&self.settings, &self.settings.model, chosen.clone());
        let opened = DshTree::build(
            &self.settings,
            store,
            chosen,
            &cwd,
            &client,
            &id,
            self.settings.team,
        )
        .await?;
        let gates = demo
            .as_ref()
            .and_then(|demo| demo.attach(&opened.session.world.runtime));
        let world = &opened.session.world;
        let lead = world
            .harness
            .create(CreateAgent {
                setup: world.lead_setup(&id),
                header,
                seed: Vec::new(),
                cancel: CancellationToken::new(),
            })
            .await
            .map_err(|err| failed(err.into()))?
            .agent()
            .clone();
        open_team(world, &lead).await?;
        Ok(Arc::new(opened.with(lead, gates, option)))
    }

    async fn load(
        &self,
        id: &str,
        cwd: PathBuf,
        client: Client,
    ) -> Result<Arc<dyn Tree>, HostError> {
        let unknown = || HostError::UnknownSession(id.to_owned());
        let root: SessionId = id.parse().map_err(|_| unknown())?;
        let store = sessions::existing_store_with(&self.dir, self.settings.durability)
            .map_err(|_| unknown())?;
        let log = store.load(&root).await.map_err(|_| unknown())?;
        if log.header.parent_session.is_some() {
            return Err(HostError::Refused(format!(
                "`{id}` is a child session; load its tree's root"
            )));
        }
        let choice = self.settings.for_tree(model::recorded(&log.header));
        let model: Arc<dyn Model> = match &choice {
            ModelChoice::Demo => Demo::new(false).model(),
            ModelChoice::Api(api) => model::openai(api).await.map_err(failed)?,
        };
        let rows = sessions::descendants(store.as_ref(), &root)
            .await
            .map_err(|err| failed(err.into()))?;
        // The history first, while nothing runs.
        client.updates.root(&root);
        replay(store.as_ref(), &client.updates, &root, &log.events, &rows).await;
        let chosen = Chosen::new(model);
        let option = ModelOption::of(&self.settings, &choice, chosen.clone());
        // A tree that has a team keeps its team tools, as `dsh send` does.
        let team = self.settings.team
            || crate::team::has_team(store.as_ref(), &root)
                .await
                .map_err(failed)?;
        let opened =
            DshTree::build(&self.settings, store, chosen, &cwd, &client, &root, team).await?;
        let world = &opened.session.world;
        let lead = world
            .harness
            .resume(ResumeAgent {
                id: root.clone(),
                setup: world.lead_setup(&root),
                cancel: CancellationToken::new(),
            })
            .await
            .map_err(|err| failed(err.into()))?
            .agent()
            .clone();
        open_team(world, &lead).await?;
        world
            .runtime
            .deliver_lost_notices(&lead)
            .await
            .map_err(|err| failed(err.into()))?;
        Ok(Arc::new(opened.with(lead, None, option)))
    }
}

/// In a team run (`--team`, dsh.toml `team`, or a loaded tree that has a
/// team), open the team `lead` leads, as `dsh run --team` does; messages
/// a recovery could not deliver are named on stderr.
///
/// # Cancel safety
/// As [`crate::world::World::open_team`].
async fn open_team(world: &crate::world::World, lead: &Arc<dyn Agent>) -> Result<(), HostError> {
    if let Some(recovery) = world.open_team(lead).await.map_err(failed)? {
        for (member, error) in &recovery.errors {
            eprintln!(
                "dsh: team: messages for {member} stay queued: {}",
                crate::one_line(&error.to_string())
            );
        }
    }
    Ok(())
}

/// Replay `events` of `session` and, after each call that started one of
/// its children (the call whose input names it), that child's history.
///
/// # Cancel safety
/// Cancel safe: it only reads and sends.
async fn replay(
    store: &dyn SessionStore,
    updates: &Updates,
    root: &SessionId,
    events: &[SessionEvent],
    rows: &[dsh_subagent::DescendantRow],
) {
    // Depth-first with an explicit stack: (session, its events, next index).
    let mut stack = vec![(root.clone(), events.to_vec(), 0usize)];
    let mut shown = std::collections::HashSet::new();
    while let Some((session, events, at)) = stack.pop() {
        let Some(event) = events.get(at) else {
            // Children no call named: after their creator's history.
            let unnamed: Vec<_> = rows
                .iter()
                .filter(|row| row.parent_id == session && !shown.contains(&row.entry.child_id))
                .collect();
            for row in unnamed {
                shown.insert(row.entry.child_id.clone());
                updates.started(&info_of(row, root));
                updates.settled_earlier(&row.entry.child_id);
                let child = child_events(store, row).await;
                stack.push((row.entry.child_id.clone(), child, 0));
            }
            continue;
        };
        updates.replayed(&session, std::slice::from_ref(event));
        let started = match &event.payload {
            dsh_core::EventPayload::ToolCall(call) => {
                let input: Value = serde_json::from_str(call.input.get()).unwrap_or(Value::Null);
                let named = input.get("name").and_then(Value::as_str).map(str::to_owned);
                rows.iter().find(|row| {
                    row.parent_id == session
                        && !shown.contains(&row.entry.child_id)
                        && named.is_some()
                        && row.entry.name == named
                })
            }
            _ => None,
        };
        stack.push((session, events, at + 1));
        if let Some(row) = started {
            shown.insert(row.entry.child_id.clone());
            updates.started(&info_of(row, root));
            let child = child_events(store, row).await;
            updates.settled_earlier(&row.entry.child_id);
            stack.push((row.entry.child_id.clone(), child, 0));
        }
    }
}

/// A child's own events (after its seed); none for an external child.
async fn child_events(
    store: &dyn SessionStore,
    row: &dsh_subagent::DescendantRow,
) -> Vec<SessionEvent> {
    if row.entry.mode == dsh_subagent::ChildMode::EXTERNAL {
        return Vec::new();
    }
    match store.load(&row.entry.child_id).await {
        Ok(log) => {
            let seed = usize::try_from(log.header.seed_len).unwrap_or(usize::MAX);
            log.events.get(seed..).unwrap_or_default().to_vec()
        }
        Err(err) => {
            tracing::warn!(child = %row.entry.child_id, "a child's log cannot be replayed: {err}");
            Vec::new()
        }
    }
}

/// A listed child as the runtime's start event would describe it.
fn info_of(row: &dsh_subagent::DescendantRow, root: &SessionId) -> RunInfo {
    RunInfo {
        provider: row.entry.provider.clone(),
        name: sessions::display_name(row),
        label: row.entry.label.clone(),
        child_id: row.entry.child_id.clone(),
        parent_session_id: row.parent_id.clone(),
        root: root.clone(),
        local: row.entry.mode != dsh_subagent::ChildMode::EXTERNAL,
    }
}

/// A tree being built: its session and reporter, before its lead.
struct Opened {
    session: Session,
    reporter: Arc<Reporter>,
    progress: Forwarding,
}

/// The task that forwards the tree's external children's progress;
/// stopped when the tree is dropped.
struct Forwarding {
    task: tokio::task::JoinHandle<()>,
    /// Asks the task to forward what the bus holds now, then answer.
    flush: tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<()>>,
}

impl Forwarding {
    /// Wait until the progress the bus held when called is forwarded.
    ///
    /// # Cancel safety
    /// Cancel safe: a drop only stops the wait.
    async fn flush(&self) {
        let (done, forwarded) = tokio::sync::oneshot::channel();
        if self.flush.send(done).is_ok() {
            let _ = forwarded.await;
        }
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Forward the progress of the external (ACP) children of the tree of
/// `root` to `updates` as it comes (a local child's is its log's, which
/// the reporter forwards). Events the task fell behind on are lost to
/// the client only.
fn forward_progress(
    runtime: &dsh_subagent::SubagentRuntime,
    settings: &Settings,
    updates: Updates,
    root: SessionId,
) -> Forwarding {
    let external: std::collections::HashSet<String> = settings
        .acp
        .iter()
        .chain(&settings.acp_agents)
        .map(|acp| acp.name.clone())
        .collect();
    let mut stream = runtime.progress();
    let (flush, mut flushes) =
        tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<()>>();
    let forward = move |item| match item {
        dsh_subagent::ProgressItem::Event(event)
            if event.member.root == root && external.contains(&event.member.provider) =>
        {
            updates.progressed(&event.member.child_id, &event.kind);
        }
        dsh_subagent::ProgressItem::Missed(missed) => {
            tracing::debug!("{missed} progress events of ACP children were not forwarded");
        }
        dsh_subagent::ProgressItem::Event(_) => {}
    };
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                item = stream.next() => match item {
                    Some(item) => forward(item),
                    None => break,
                },
                Some(done) = flushes.recv() => {
                    while let Some(item) = stream.try_next() {
                        forward(item);
                    }
                    let _ = done.send(());
                }
            }
        }
    });
    Forwarding { task, flush }
}

impl Opened {
    fn with(
        self,
        lead: Arc<dyn Agent>,
        gates: Option<Subscription>,
        model: Option<ModelOption>,
    ) -> DshTree {
        let (external, tracking) = External::track(&self.session.world.runtime);
        DshTree {
            session: self.session,
            reporter: self.reporter,
            lead,
            external,
            cancelled: AtomicBool::new(false),
            model,
            _listening: [Some(tracking), gates].into_iter().flatten().collect(),
            progress: self.progress,
        }
    }
}

/// One served tree.
struct DshTree {
    session: Session,
    reporter: Arc<Reporter>,
    lead: Arc<dyn Agent>,
    external: Arc<External>,
    /// The running turn was cancelled.
    cancelled: AtomicBool,
    /// The session's model option, when the configuration offers a choice.
    model: Option<ModelOption>,
    _listening: Vec<Subscription>,
    /// Its external children's progress, forwarded.
    progress: Forwarding,
}

impl DshTree {
    /// The session of root `root` over `store`, shown to `client`, with
    /// the client's MCP servers started for it (stopped by its shutdown).
    async fn build(
        settings: &Settings,
        store: Arc<dyn SessionStore>,
        model: Arc<dyn Model>,
        cwd: &std::path::Path,
        client: &Client,
        root: &SessionId,
        team: bool,
    ) -> Result<Opened, HostError> {
        // The client's MCP servers join the configured ones (one of the
        // same name replaces it, as a `--mcp` flag does), for this tree.
        let mut settings = settings.clone();
        settings
            .mcp
            .retain(|server| !client.mcp_servers.iter().any(|own| own.name == server.name));
        settings.mcp.extend(client.mcp_servers.iter().cloned());
        let settings = &settings;
        let reporter = Reporter::with(Box::new(Forward(client.updates.clone())), Output::quiet());
        reporter.root(root);
        let queued = reporter.clone();
        client.approvals.before_asking(move || {
            let queued = queued.clone();
            Box::pin(async move { queued.flush().await })
        });
        let session = Session::open(SessionConfig {
            store,
            model,
            settings,
            reporter: Some(&reporter),
            team,
            ask: crate::ask::AskMode::Never,
            cwd,
            askers: Some(Askers {
                workspace: client.approvals.workspace(),
                acp: client.approvals.acp(),
            }),
        })
        .await
        .map_err(failed)?;
        let progress = forward_progress(
            &session.world.runtime,
            settings,
            client.updates.clone(),
            root.clone(),
        );
        Ok(Opened {
            session,
            reporter,
            progress,
        })
    }
}

#[async_trait]
impl Tree for DshTree {
    fn id(&self) -> SessionId {
        self.lead.id().clone()
    }

    fn models(&self) -> Option<Models> {
        self.model.as_ref().map(ModelOption::models)
    }

    fn set_model(&self, model: &str) -> Result<(), HostError> {
        match &self.model {
            Some(option) if option.pick(model) => Ok(()),
            _ => Err(HostError::Refused(format!(
                "`{model}` is not a model route of this session"
            ))),
        }
    }

    async fn prompt(&self, content: Vec<ContentBlock>) -> Result<TurnEnd, HostError> {
        self.cancelled.store(false, Ordering::SeqCst);
        if let Some(option) = &self.model {
            option.apply();
        }
        let world = &self.session.world;
        let meter = self.session.meter.as_deref();
        // A spent budget stays spent: the turn ends before it begins.
        if let Some(spent) = meter.and_then(crate::budget::TreeMeter::spent) {
            self.reporter.line(&spent.end_line());
            self.reporter.flush().await;
            return Ok(TurnEnd::BudgetSpent);
        }
        let earlier = crate::transcript::finished_turns(&self.lead.events()).len();
        self.lead
            .followup(UserMessage::new(content, MessageSource::User))
            .await
            .map_err(|err| failed(err.into()))?;
        let settled = tokio::select! {
            settled = crate::run::settle(world, &self.lead, &self.reporter, &self.external, earlier) => settled,
            err = self.session.faults.failed() => Err(CliError::WriteFailed(err)),
            spent = crate::run::exhausted(meter) => {
                crate::run::stop_children_first(world, &self.lead, None).await;
                self.reporter.line(&spent.end_line());
                Err(CliError::BudgetSpent(spent.end_line()))
            }
        };
        // Everything the turn showed reaches the client before its answer.
        self.progress.flush().await;
        self.reporter.flush().await;
        if self.cancelled.load(Ordering::SeqCst) {
            return Ok(TurnEnd::Cancelled);
        }
        match settled {
            Ok(()) => Ok(TurnEnd::EndTurn),
            Err(CliError::LeadStopped { reason, .. })
                if reason == StopReason::STEP_LIMIT.as_str() =>
            {
                Ok(TurnEnd::MaxTurnRequests)
            }
            Err(CliError::LeadStopped { reason, .. }) if reason == StopReason::REFUSAL.as_str() => {
                Ok(TurnEnd::Refusal)
            }
            Err(CliError::BudgetSpent(_)) => Ok(TurnEnd::BudgetSpent),
            Err(err) => Err(failed(err)),
        }
    }

    async fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        crate::run::stop(&self.session.world, &self.lead, None).await;
    }

    async fn close(&self) {
        self.cancel().await;
        crate::run::shutdown(&self.session.world, None).await;
        if tokio::time::timeout(STOP_GRACE, self.session.world.store.flush())
            .await
            .map_or(true, |flushed| flushed.is_err())
        {
            eprintln!("dsh: warning: the session logs could not be synced");
        }
        self.reporter.flush().await;
    }
}

/// The renderer that shows a tree to an ACP client: the logs' events and
/// the runtime's starts and ends, to the session's updates; nothing to
/// stdout, which is the protocol's.
struct Forward(Updates);

impl Renderer for Forward {
    fn wants(&self) -> Wants {
        Wants {
            logs: true,
            ..Wants::default()
        }
    }

    fn show(&mut self, seen: Seen, out: &mut Output) {
        match seen {
            Seen::Root(id) => self.0.root(&id),
            Seen::Logged(session, events) => self.0.logged(&session, &events),
            Seen::Started { info, .. } => self.0.started(&info),
            Seen::Ended(info, outcome) => self.0.ended(&info, &outcome),
            Seen::Line(line) => out.err_line(&format!("dsh: {line}")),
            _ => {}
        }
    }
}
