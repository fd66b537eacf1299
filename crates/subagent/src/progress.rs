//! Progress: what every member of a tree is doing while it runs, one event
//! type for local and external children alike, on the runtime's own
//! progress bus ([`SubagentRuntime::progress`]). Each event names the
//! activation it belongs to ([`ProgressMember`]: child id, activation
//! serial, root, member name, provider) and one [`ProgressKind`]: a step
//! started, a tool call started or finished, a text delta, a thought, a
//! plan, usage.
//!
//! The bus is bounded and lossy, never a brake: it is a broadcast ring of
//! [`PROGRESS_BUFFER`] events shared by every listener. Emitting never
//! waits and never fails; a listener that falls more than the buffer
//! behind loses the oldest events it had not read and learns how many
//! ([`ProgressItem::Missed`]), then continues with the oldest one still
//! held. Events of one member arrive in the order that member made them.
//! Progress is observation only: nothing the runtime decides depends on
//! it, and a result never does (usage reaches the result separately).
//!
//! Local children report from their session log, which the activation's
//! monitor reads every `LOCAL_POLL` while someone listens (while nobody
//! does it sets no timer and waits for a subscription): a step start, each
//! tool call and its result, and the usage of each model request.
//! Their text comes token by token when the host hands its agent loop's
//! streamed text to a [`TextFeed`] ([`SubagentRuntime::text_feed`]): each
//! delta first reports what the log gained, so it follows its step's start;
//! without a feed, each assistant message is one text delta, read from the
//! log. A delta costs one check while nobody listens. External providers report through the
//! [`ProgressSink`] their run is handed ([`crate::SubagentRun::observe`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dsh_core::{SessionId, Usage};
use tokio::sync::{Notify, broadcast};

use crate::runtime::{SubagentRuntime, lock};

/// How many events the progress bus holds for its slowest listener before
/// that listener starts losing the oldest ones.
pub const PROGRESS_BUFFER: usize = 1024;

/// The activation an event belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressMember {
    /// The child's id (its session id for a local child, the run id for an
    /// external one).
    pub child_id: SessionId,
    /// The activation's serial, unique for the life of the process: a
    /// resumed child reports under a new one.
    pub activation: u64,
    /// The root of the member's tree.
    pub root: SessionId,
    /// The member's full model-facing name (its child id when unnamed).
    pub name: String,
    /// The provider that made it.
    pub provider: String,
}

/// One step of an agent's plan, as the agent wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEntry {
    /// What the step is.
    pub content: String,
    /// Its status (`pending`, `in_progress`, `completed`).
    pub status: String,
    /// Its priority (`high`, `medium`, `low`).
    pub priority: String,
}

/// How full an external agent's context window is, as it reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextUsage {
    /// Tokens currently in context.
    pub used: u64,
    /// The context window's size in tokens.
    pub size: u64,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProgressKind {
    /// A step (one model request and the tools it called) began.
    StepStarted {
        /// The turn, from 0 (0 for an external agent, which has no turns
        /// the runtime can see).
        turn: u64,
        /// The step within the turn, from 0.
        step: u64,
    },
    /// A tool call began.
    ToolCallStarted {
        /// The call's id.
        id: String,
        /// The tool's name (an external agent's title for the call).
        name: String,
    },
    /// A tool call ended.
    ToolCallFinished {
        /// The call's id.
        id: String,
        /// The tool's name (an external agent's title for the call).
        name: String,
        /// Whether it reported a failure.
        failed: bool,
    },
    /// Text the member said.
    TextDelta {
        /// The text.
        text: String,
    },
    /// Text the member reasoned (an external agent's thought chunk).
    Thought {
        /// The text.
        text: String,
    },
    /// The member's plan, complete each time.
    Plan {
        /// Its steps.
        entries: Vec<PlanEntry>,
    },
    /// Tokens the member used since its last usage event, and its context
    /// window when it reported one.
    Usage {
        /// The tokens this report adds (zero when it reports only the
        /// context window).
        tokens: Usage,
        /// The context window, when reported.
        context: Option<ContextUsage>,
    },
}

/// One progress event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressEvent {
    /// Whose.
    pub member: Arc<ProgressMember>,
    /// What.
    pub kind: ProgressKind,
}

/// What a listener reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressItem {
    /// The next event.
    Event(ProgressEvent),
    /// The listener fell behind and this many events were lost to it.
    Missed(u64),
}

/// A live local activation's reporter, with the activation's serial.
type Registered = (u64, Arc<Mutex<LocalReporter>>);

/// The runtime's progress bus.
#[derive(Clone)]
pub(crate) struct ProgressHub {
    sender: broadcast::Sender<ProgressEvent>,
    /// The reporters of the live local activations, by child, for the
    /// streamed text of [`TextFeed`].
    reporters: Arc<Mutex<crate::ids::IdMap<SessionId, Registered>>>,
    /// Whether a host streams local text through a [`TextFeed`] (the log's
    /// assistant messages then make no text event of their own).
    streamed: Arc<AtomicBool>,
    /// Woken when a listener subscribes, so that reporters which stopped
    /// ticking while nobody listened start again.
    listened: Arc<Notify>,
}

impl std::fmt::Debug for ProgressHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressHub")
            .field("listeners", &self.sender.receiver_count())
            .finish_non_exhaustive()
    }
}

impl Default for ProgressHub {
    fn default() -> Self {
        Self {
            sender: broadcast::Sender::new(PROGRESS_BUFFER),
            reporters: Arc::default(),
            streamed: Arc::default(),
            listened: Arc::default(),
        }
    }
}

impl ProgressHub {
    /// A sink reporting as `member`.
    pub(crate) fn sink(&self, member: ProgressMember) -> ProgressSink {
        ProgressSink {
            member: Arc::new(member),
            sender: self.sender.clone(),
            meter: None,
            activity: None,
        }
    }
}

/// Where one activation reports its progress. Cheap to clone; emitting
/// never waits.
#[derive(Debug, Clone)]
pub struct ProgressSink {
    member: Arc<ProgressMember>,
    sender: broadcast::Sender<ProgressEvent>,
    /// Where usage reports are charged, listened to or not (budgets).
    meter: Option<Arc<crate::budget::Ledger>>,
    /// Where an external run's activity is kept for `current_activity`,
    /// listened to or not.
    activity: Option<Arc<Mutex<ExternalActivity>>>,
}

/// What an external run has reported so far, kept from its progress so
/// that [`SubagentRuntime::current_activity`] can answer for it as it does
/// for a local child from its log.
#[derive(Debug, Default)]
pub(crate) struct ExternalActivity {
    /// Tool calls started and not finished: id, name, since when.
    open: Vec<(String, String, std::time::Instant)>,
    /// Input and output tokens reported so far.
    tokens: u64,
}

impl ExternalActivity {
    fn note(&mut self, kind: &ProgressKind) {
        match kind {
            ProgressKind::ToolCallStarted { id, name } => {
                self.open
                    .push((id.clone(), name.clone(), std::time::Instant::now()));
            }
            ProgressKind::ToolCallFinished { id, .. } => {
                self.open.retain(|(open, ..)| open != id);
            }
            ProgressKind::Usage { tokens, .. } => {
                self.tokens = self
                    .tokens
                    .saturating_add(tokens.input_tokens.saturating_add(tokens.output_tokens));
            }
            _ => {}
        }
    }

    fn now(&self) -> CurrentActivity {
        CurrentActivity {
            tool: self.open.last().map(|(_, name, since)| ToolInProgress {
                name: name.clone(),
                for_ms: u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
            }),
            tokens: self.tokens,
        }
    }
}

impl ProgressSink {
    /// Whom this sink reports as.
    pub fn member(&self) -> &ProgressMember {
        &self.member
    }

    /// Whether anyone listens (an emitter may skip building an event
    /// nobody reads).
    pub fn observed(&self) -> bool {
        self.sender.receiver_count() > 0
    }

    /// This sink, charging the usage it reports to `ledger`.
    pub(crate) fn metered(mut self, ledger: Arc<crate::budget::Ledger>) -> Self {
        self.meter = Some(ledger);
        self
    }

    /// This sink, keeping what it reports in `activity` (an external run's).
    pub(crate) fn tracking(mut self, activity: Arc<Mutex<ExternalActivity>>) -> Self {
        self.activity = Some(activity);
        self
    }

    /// Report `kind`. Never waits; with no listener the event is dropped
    /// (usage still counts against the member's budgets).
    pub fn emit(&self, kind: ProgressKind) {
        if let (Some(ledger), ProgressKind::Usage { tokens, .. }) = (&self.meter, &kind) {
            ledger.charge(*tokens);
        }
        if let Some(activity) = &self.activity {
            lock(activity).note(&kind);
        }
        // No receiver is the only failure, and it means nobody listens.
        let _unheard = self.sender.send(ProgressEvent {
            member: self.member.clone(),
            kind,
        });
    }
}

/// A listener's view of the progress bus, from the moment it subscribed.
#[derive(Debug)]
pub struct ProgressStream {
    receiver: broadcast::Receiver<ProgressEvent>,
}

impl ProgressStream {
    /// The next item, or `None` once the runtime is gone.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call loses nothing; the next call returns the
    /// same item.
    pub async fn next(&mut self) -> Option<ProgressItem> {
        match self.receiver.recv().await {
            Ok(event) => Some(ProgressItem::Event(event)),
            Err(broadcast::error::RecvError::Lagged(missed)) => Some(ProgressItem::Missed(missed)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The next item if one is waiting.
    pub fn try_next(&mut self) -> Option<ProgressItem> {
        match self.receiver.try_recv() {
            Ok(event) => Some(ProgressItem::Event(event)),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                Some(ProgressItem::Missed(missed))
            }
            Err(_) => None,
        }
    }
}

impl SubagentRuntime {
    /// Listen to every member's progress from now on (see the module
    /// documentation of [`crate::progress`] for the buffer and ordering).
    pub fn progress(&self) -> ProgressStream {
        let receiver = self.progress_hub().sender.subscribe();
        // Reporters idle while nobody listened start ticking again.
        self.progress_hub().listened.notify_waiters();
        ProgressStream { receiver }
    }

    /// The feed a host hands its agent loop's streamed text to (the
    /// harness's `TextObserver`), so that local children report their text
    /// token by token. From the first call on, a local child's text events
    /// come only from the feed, no longer one per assistant message.
    pub fn text_feed(&self) -> TextFeed {
        self.progress_hub().streamed.store(true, Ordering::SeqCst);
        TextFeed {
            hub: self.progress_hub().clone(),
        }
    }
}

/// Where a host's agent loop hands the model's streamed text
/// ([`SubagentRuntime::text_feed`]). Cheap to clone; never waits on a
/// listener.
#[derive(Debug, Clone)]
pub struct TextFeed {
    hub: ProgressHub,
}

impl TextFeed {
    /// `agent`'s model streamed `delta`. When `agent` is a live local
    /// child and someone listens, what its log gained since the last report
    /// is reported first (so the delta follows its step's start), then the
    /// delta. Anything else (a root, nobody listening) costs one check.
    pub fn delta(&self, agent: &SessionId, delta: &str) {
        if self.hub.sender.receiver_count() == 0 || delta.is_empty() {
            return;
        }
        let reporter = lock(&self.hub.reporters)
            .get(agent)
            .map(|(_, reporter)| reporter.clone());
        if let Some(reporter) = reporter {
            let mut reporter = lock(&reporter);
            reporter.report();
            reporter.sink.emit(ProgressKind::TextDelta {
                text: delta.to_owned(),
            });
        }
    }
}

/// What a live local child is doing at one moment, for the parent's model
/// (`list_agents`): the tool call it is in, if any, and the tokens its
/// activation used so far. Read from the activation's own log on demand, so
/// it costs nothing while nobody asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentActivity {
    /// The tool call in progress (the latest started without a result).
    pub tool: Option<ToolInProgress>,
    /// Input and output tokens this activation's model requests used.
    pub tokens: u64,
}

/// A tool call in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInProgress {
    /// The tool's name.
    pub name: String,
    /// How long it has been running, in milliseconds (from its log record's
    /// time to `now`).
    pub for_ms: u64,
}

/// The activity a local activation's own `events` show at `now`
/// (milliseconds since the Unix epoch).
pub fn activity_of(events: &[dsh_core::SessionEvent], now_ms: u64) -> CurrentActivity {
    use dsh_core::EventPayload;
    let mut open: Vec<(&dsh_core::CallId, &str, u64)> = Vec::new();
    let mut tokens = 0u64;
    for event in events {
        match &event.payload {
            EventPayload::ToolCall(call) => open.push((&call.call_id, &call.name, event.time)),
            EventPayload::ToolResult(result) => open.retain(|(id, ..)| **id != result.call_id),
            EventPayload::Usage(usage) => {
                tokens =
                    tokens.saturating_add(usage.input_tokens.saturating_add(usage.output_tokens));
            }
            _ => {}
        }
    }
    CurrentActivity {
        tool: open.last().map(|(_, name, at)| ToolInProgress {
            name: (*name).to_owned(),
            for_ms: now_ms.saturating_sub(*at),
        }),
        tokens,
    }
}

impl SubagentRuntime {
    /// What the live activation of `child` is doing now; `None` when it
    /// has none (cold or settled). A local child's is read from its own
    /// log; an external run's from what it reported on the progress bus
    /// (its tool calls by the agent's titles, its usage as reported).
    pub fn current_activity(&self, child: &SessionId) -> Option<CurrentActivity> {
        let activation = self.activations().get(child)?;
        let Some(events) = activation.own_events() else {
            return Some(lock(activation.external_activity()).now());
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        Some(activity_of(&events, now))
    }
}

/// How often a local child's log is read for new progress while someone
/// listens.
pub(crate) const LOCAL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Reports one local child's progress from its log, from `cursor` on.
pub(crate) struct LocalReporter {
    sink: ProgressSink,
    cursor: u64,
    child: Arc<dyn dsh_core::Agent>,
    /// Text comes from a [`TextFeed`], not from the log.
    streamed: Arc<AtomicBool>,
}

/// A local child's reporter, as its activation's monitor runs it.
pub(crate) struct Reporting {
    reporter: Arc<Mutex<LocalReporter>>,
    /// The hub's signal that a listener subscribed.
    listened: Arc<Notify>,
}

impl ProgressHub {
    /// Report `child`'s progress from its log from `start_seq` on, as
    /// `sink` (activation `serial`): registered from the activation's
    /// install, before its child runs anything, until
    /// [`ProgressHub::unregister`].
    pub(crate) fn register(
        &self,
        sink: ProgressSink,
        child: Arc<dyn dsh_core::Agent>,
        start_seq: u64,
        serial: u64,
    ) {
        let id = child.id().clone();
        let reporter = Arc::new(Mutex::new(LocalReporter {
            sink,
            cursor: start_seq,
            child,
            streamed: self.streamed.clone(),
        }));
        lock(&self.reporters).insert(id, (serial, reporter));
    }

    /// The registered reporter of `child`'s activation `serial`.
    pub(crate) fn reporting(&self, child: &SessionId, serial: u64) -> Option<Reporting> {
        lock(&self.reporters)
            .get(child)
            .filter(|(held, _)| *held == serial)
            .map(|(_, reporter)| Reporting {
                reporter: reporter.clone(),
                listened: self.listened.clone(),
            })
    }

    /// Forget the reporter of `child`'s activation `serial` (a later
    /// activation's stays).
    pub(crate) fn unregister(&self, child: &SessionId, serial: u64) {
        let mut reporters = lock(&self.reporters);
        if reporters
            .get(child)
            .is_some_and(|(held, _)| *held == serial)
        {
            reporters.remove(child);
        }
    }
}

impl Reporting {
    /// Report what the log gained since the last report.
    pub(crate) fn report(&self) {
        lock(&self.reporter).report();
    }

    /// Report forever, every [`LOCAL_POLL`] while anyone listens. While
    /// nobody does it sets no timer and waits for a listener: a report then
    /// would read nothing, and a timer per child run costs a wake-up of
    /// whichever worker thread is parked on the timer driver.
    ///
    /// # Cancel safety
    /// Cancel safe: a drop between reads loses nothing; the next
    /// [`Self::report`] continues from the cursor.
    pub(crate) async fn run(&self) -> std::convert::Infallible {
        loop {
            self.listener().await;
            let mut tick = tokio::time::interval(LOCAL_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while self.observed() {
                tick.tick().await;
                self.report();
            }
        }
    }

    /// Whether anyone listens to the bus.
    fn observed(&self) -> bool {
        lock(&self.reporter).sink.observed()
    }

    /// Wait until someone listens (at once if someone does).
    async fn listener(&self) {
        loop {
            // Created before the check, so a subscription between the two
            // still wakes it (`notify_waiters` reaches a `Notified` from its
            // creation on).
            let arrival = self.listened.notified();
            if self.observed() {
                return;
            }
            arrival.await;
        }
    }
}

impl LocalReporter {
    /// Report what the log gained since the last call (nothing is read
    /// while nobody listens; the cursor then waits).
    fn report(&mut self) {
        if !self.sink.observed() {
            return;
        }
        let streamed = self.streamed.load(Ordering::SeqCst);
        for event in self.child.events_since(self.cursor) {
            self.cursor = event.seq + 1;
            for kind in kinds_of(&event.payload, streamed) {
                self.sink.emit(kind);
            }
        }
    }
}

/// The progress one log event makes (an assistant message makes none when
/// its text was `streamed`).
fn kinds_of(payload: &dsh_core::EventPayload, streamed: bool) -> Vec<ProgressKind> {
    use dsh_core::EventPayload;
    match payload {
        EventPayload::StepStart(start) => vec![ProgressKind::StepStarted {
            turn: start.turn,
            step: start.step,
        }],
        EventPayload::ToolCall(call) => vec![ProgressKind::ToolCallStarted {
            id: call.call_id.to_string(),
            name: call.name.clone(),
        }],
        EventPayload::ToolResult(result) => vec![ProgressKind::ToolCallFinished {
            id: result.call_id.to_string(),
            name: result.name.clone(),
            failed: result.is_error,
        }],
        EventPayload::AssistantMessage(_) if streamed => Vec::new(),
        EventPayload::AssistantMessage(message) => {
            let text = dsh_core::content::joined_text(&message.content);
            if text.is_empty() {
                Vec::new()
            } else {
                vec![ProgressKind::TextDelta { text }]
            }
        }
        EventPayload::Usage(usage) => vec![ProgressKind::Usage {
            tokens: *usage,
            context: None,
        }],
        _ => Vec::new(),
    }
}
