//! What the user watches while a tree runs, kept apart from the runtime.
//!
//! The [`Reporter`] is the one thing the rest of the command talks to: it
//! hears the runtime's start and end events, every tool call (through
//! [`Observed`], a transparent wrapper around each host tool), the events
//! a log accepted and the model's streamed text, and the command's own
//! lines, and puts each, as a [`Seen`], on one bounded channel. It never
//! renders, reads a log or writes a byte itself: a listener of the
//! runtime's bus only sends, so the runtime's start path and monitor never
//! wait for the screen.
//!
//! One thread of its own drains the channel into a [`Renderer`], which
//! owns stdout (and stderr for `--json`'s person lines): [`plain::Plain`]
//! (one line per event, when stdout is not a terminal), [`live::Live`] (a
//! tree of agents redrawn in place, messages scrolling above it) and
//! [`jsonl::Json`] (one JSON object per line, `--json`). A slow or blocked
//! stdout stalls only that thread; the runtime goes on until the channel's
//! [`CAPACITY`] events are queued, and only then does a sender wait for
//! room (on a multi-threaded runtime through `block_in_place`, so no
//! worker's other tasks wait with it). Every event is rendered, in the
//! order it was sent, which is the order the run caused them: a child's
//! start before its own lines, a finish before what it releases. A
//! rendering only observes, and a write failure is ignored rather than
//! disturbing the run.

mod jsonl;
mod live;
mod observed;
mod plain;
mod tree;

use std::collections::HashMap;
use std::io::Write;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dsh_core::{Agent, SessionEvent, SessionId};
use dsh_subagent::{ProgressStream, RunInfo, RunOutcome, SubagentEvent, SubagentRuntime};
use serde_json::Value;

use crate::config::Price;

pub use observed::Observed;

/// How output is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One line per event (stdout is not a terminal).
    Plain,
    /// A live tree redrawn in place.
    Live,
    /// One JSON object per line on stdout (`--json`).
    Json,
}

impl Mode {
    /// One JSON object per line with `json`, else the live tree on a
    /// terminal, else plain lines.
    pub fn choose(json: bool) -> Self {
        if json {
            Self::Json
        } else if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            Self::Live
        } else {
            Self::Plain
        }
    }
}

/// How many events may wait for the renderer before a sender waits too.
pub const CAPACITY: usize = 4096;

/// One line: whitespace runs (newlines included) become one space, and the
/// text is cut at `max` characters.
pub fn compact(text: &str, max: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= max {
        joined
    } else {
        let cut: String = joined.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// Something the command shows, as the renderer receives it.
pub enum Seen {
    /// The command began: the person's banner line, the model's spec and
    /// the session directory.
    RunStarted {
        /// The banner (`dsh: offline demo ...; sessions in ...`).
        banner: String,
        /// `demo` or `<provider>:<model>`.
        model: String,
        /// The session directory.
        sessions: String,
    },
    /// The root of the tree the command works in (its lines are the
    /// lead's, never held for a start).
    Root(SessionId),
    /// The lead began with `prompt`; `agent` to follow (the live view).
    Lead {
        /// Its session id.
        id: SessionId,
        /// The live agent, for a view that follows its log.
        agent: Option<Arc<dyn Agent>>,
        /// Its task.
        prompt: String,
    },
    /// A line for the person.
    Line(String),
    /// The tree's spend passed another quarter of a limit.
    Budget(crate::budget::Spend),
    /// A child was started or resumed; `agent` is its live agent when the
    /// renderer follows logs.
    Started {
        /// The runtime's start event.
        info: RunInfo,
        /// The local child's agent, for a view that follows its log.
        agent: Option<Arc<dyn Agent>>,
    },
    /// A child settled.
    Ended(RunInfo, RunOutcome),
    /// The live view's source of external members' progress.
    Progress(ProgressStream),
    /// A tool call began.
    ToolStarted {
        /// The calling agent.
        agent: SessionId,
        /// The tool.
        tool: String,
        /// Its input.
        input: Value,
    },
    /// A tool call returned; `delivered` when it succeeded.
    ToolFinished {
        /// The calling agent.
        agent: SessionId,
        /// The tool.
        tool: String,
        /// Its input.
        input: Value,
        /// Whether it succeeded.
        delivered: bool,
    },
    /// Events a log accepted.
    Logged(SessionId, Vec<SessionEvent>),
    /// A piece of a model's streamed text.
    Delta(SessionId, String),
    /// One of the lead's turns ended, with its answer.
    LeadTurn {
        /// Its stop reason.
        stop_reason: String,
        /// Whether that stop is a failure.
        failed: bool,
        /// Facts about a stop that is not `completed`.
        diagnostic: Option<String>,
        /// The turn's answer.
        answer: String,
    },
    /// The command's closing report (the tree rolled up), line by line.
    Summary(Vec<String>),
    /// `dsh send <child>`: the child's reply.
    Reply {
        /// The child's name.
        agent: String,
        /// Its answer.
        text: String,
    },
    /// The whole tree is done: the lead's last stop, or the command's
    /// error.
    RunEnded {
        /// The lead.
        lead: SessionId,
        /// Its last stop reason, when the run succeeded.
        stop_reason: Option<String>,
        /// Why the run failed.
        error: Option<String>,
    },
    /// Refresh from the agents now (the live view's last frame).
    Refresh,
}

/// What a renderer wants to hear beyond the lines every one takes: the
/// reporter skips building the rest.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wants {
    /// The events each log accepted ([`Seen::Logged`]).
    pub logs: bool,
    /// The model's streamed text ([`Seen::Delta`]).
    pub deltas: bool,
    /// Live agents and the progress bus, to follow them.
    pub agents: bool,
    /// Tool calls as they begin.
    pub tool_starts: bool,
    /// The closing summary ([`Seen::Summary`], [`Seen::LeadTurn`]).
    pub summary: bool,
}

/// Where a renderer writes: stdout, and stderr for person lines that must
/// stay off a machine-read stdout. Writes are flushed per call and their
/// failures ignored.
pub struct Output {
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
}

impl Output {
    /// The process's stdout and stderr.
    pub fn std() -> Self {
        Self {
            out: Box::new(std::io::stdout()),
            err: Box::new(std::io::stderr()),
        }
    }

    /// Nothing on stdout (a renderer that speaks elsewhere, `dsh acp`);
    /// person lines on stderr.
    #[cfg_attr(not(feature = "acp"), allow(dead_code))]
    pub fn quiet() -> Self {
        Self {
            out: Box::new(std::io::sink()),
            err: Box::new(std::io::stderr()),
        }
    }

    /// Over any two writers (tests).
    #[cfg(test)]
    pub fn new(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Self {
        Self { out, err }
    }

    /// Write `text` as it is to stdout.
    pub fn raw(&mut self, text: &str) {
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
    }

    /// Write `lines` to stdout, one per line, at once.
    pub fn lines<S: AsRef<str>>(&mut self, lines: &[S]) {
        let mut text = String::new();
        for line in lines {
            text.push_str(line.as_ref());
            text.push('\n');
        }
        self.raw(&text);
    }

    /// Write one line to stderr.
    pub fn err_line(&mut self, line: &str) {
        let _ = writeln!(self.err, "{line}");
        let _ = self.err.flush();
    }
}

/// A rendering of what the command shows: one per output mode, driven by
/// the reporter's thread, one event at a time.
pub trait Renderer: Send {
    /// What it wants to hear beyond the lines.
    fn wants(&self) -> Wants;

    /// Show `seen`.
    fn show(&mut self, seen: Seen, out: &mut Output);

    /// How often it redraws on its own (the live view); `None` for never.
    fn tick_every(&self) -> Option<Duration> {
        None
    }

    /// Redraw on its own (see [`Renderer::tick_every`]).
    fn tick(&mut self, _out: &mut Output) {}

    /// Stop drawing until [`Renderer::resume`]: a question is up on the
    /// terminal.
    fn pause(&mut self, _out: &mut Output) {}

    /// Draw again, with what waited.
    fn resume(&mut self, _out: &mut Output) {}

    /// Everything is in: write whatever is still held. Called again at
    /// the end, so it writes each thing once.
    fn finish(&mut self, _out: &mut Output) {}
}

/// The renderer of `mode`.
fn renderer(mode: Mode, price: Option<Price>) -> Box<dyn Renderer> {
    match mode {
        Mode::Plain => Box::new(plain::Plain::default()),
        Mode::Live => Box::new(live::Live::new(price)),
        Mode::Json => Box::new(jsonl::Json::default()),
    }
}

/// What the channel carries: an event, or a request the renderer answers.
enum Message {
    /// Boxed: the channel's slots stay small, whatever an event carries.
    Show(Box<Seen>),
    Pause(tokio::sync::oneshot::Sender<()>),
    Resume,
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The agents' names as the renderers know them: every start's and the
/// lead's, the root named `lead` even before it has a row.
#[derive(Default)]
struct Names {
    known: HashMap<SessionId, String>,
    root: Option<SessionId>,
}

impl Names {
    /// `id`'s name when it started (or is the root).
    fn get(&self, id: &SessionId) -> Option<String> {
        match self.known.get(id) {
            Some(name) => Some(name.clone()),
            None if self.root.as_ref() == Some(id) => Some(dsh_subagent::ROOT_NAME.to_owned()),
            None => None,
        }
    }

    /// `id`'s name, else its id.
    fn of(&self, id: &SessionId) -> String {
        self.get(id).unwrap_or_else(|| id.to_string())
    }

    /// The name of the creator of the child `info` started: as it started,
    /// else `lead` for the root, else its path without the child's level,
    /// else its id.
    fn parent_of(&self, info: &RunInfo) -> String {
        if let Some(name) = self.get(&info.parent_session_id) {
            return name;
        }
        if info.parent_session_id == info.root {
            return dsh_subagent::ROOT_NAME.to_owned();
        }
        info.name.rsplit_once('/').map_or_else(
            || info.parent_session_id.to_string(),
            |(up, _)| up.to_owned(),
        )
    }

    /// Remember `name` for `id`.
    fn insert(&mut self, id: SessionId, name: String) {
        self.known.insert(id, name);
    }
}

/// Hears everything worth showing and hands it to the renderer's thread.
pub struct Reporter {
    sender: SyncSender<Message>,
    wants: Wants,
    /// The runtime's text feed: local children's progress text, token by
    /// token.
    feed: OnceLock<dsh_subagent::TextFeed>,
}

/// The model's streamed text: into the runtime's feed, and to a renderer
/// that shows it.
impl dsh_harness::TextObserver for Reporter {
    fn text_delta(&self, agent: &SessionId, delta: &str) {
        if let Some(feed) = self.feed.get() {
            feed.delta(agent, delta);
        }
        if self.wants.deltas && !delta.is_empty() {
            self.show(Seen::Delta(agent.clone(), delta.to_owned()));
        }
    }
}

impl Reporter {
    /// A reporter rendering in `mode` to stdout (the cost column at
    /// `price`).
    pub fn new(mode: Mode, price: Option<Price>) -> Arc<Self> {
        Self::with(renderer(mode, price), Output::std())
    }

    /// A reporter driving `renderer` into `output`, on a thread of its own.
    pub fn with(renderer: Box<dyn Renderer>, output: Output) -> Arc<Self> {
        Self::bounded(renderer, output, CAPACITY)
    }

    /// [`Reporter::with`] over a channel of `capacity` events.
    fn bounded(renderer: Box<dyn Renderer>, output: Output, capacity: usize) -> Arc<Self> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(capacity);
        let wants = renderer.wants();
        std::thread::Builder::new()
            .name("dsh-render".to_owned())
            .spawn(move || drain(&receiver, renderer, output))
            // Without a thread nothing is shown; the run goes on.
            .map_or_else(
                |err| tracing::warn!("the output thread cannot start: {err}"),
                drop,
            );
        Arc::new(Self {
            sender,
            wants,
            feed: OnceLock::new(),
        })
    }

    /// What the renderer wants to hear.
    pub fn wants(&self) -> Wants {
        self.wants
    }

    /// Put `message` on the channel; with the channel full, wait for room
    /// off the async workers' way (see the module docs).
    fn send(&self, message: Message) {
        match self.sender.try_send(message) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(message)) => {
                let wait = || drop(self.sender.send(message));
                match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                    Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                        tokio::task::block_in_place(wait);
                    }
                    _ => wait(),
                }
            }
        }
    }

    /// Show `seen`.
    pub fn show(&self, seen: Seen) {
        self.send(Message::Show(Box::new(seen)));
    }

    /// Listen to the runtime's events (and, for a view that follows them,
    /// hand it the progress bus). The listener only sends: a start carries
    /// the child's name, label and provider, so nothing is read.
    pub fn attach(self: &Arc<Self>, runtime: &SubagentRuntime) -> dsh_core::observe::Subscription {
        let _ = self.feed.set(runtime.text_feed());
        if self.wants.agents {
            self.show(Seen::Progress(runtime.progress()));
        }
        let me = Arc::clone(self);
        let registry = runtime.registry().clone();
        runtime.events().listen(move |event| match event {
            SubagentEvent::Start(info) => me.show(Seen::Started {
                info: info.clone(),
                agent: if me.wants.agents {
                    registry.get(&info.child_id)
                } else {
                    None
                },
            }),
            SubagentEvent::End(info, outcome) => {
                me.show(Seen::Ended(info.clone(), outcome.clone()));
            }
            SubagentEvent::ProviderAdded(_) | SubagentEvent::ProviderRemoved(_) => {}
        })
    }

    /// The root of the tree this command works in.
    pub fn root(&self, id: &SessionId) {
        self.show(Seen::Root(id.clone()));
    }

    /// The root of the run began with `prompt`.
    pub fn lead(&self, agent: &Arc<dyn Agent>, prompt: &str) {
        self.show(Seen::Lead {
            id: agent.id().clone(),
            agent: self.wants.agents.then(|| Arc::clone(agent)),
            prompt: prompt.to_owned(),
        });
    }

    /// Print a line (above the tree in the live view; on stderr with
    /// `--json`).
    pub fn line(&self, text: &str) {
        self.show(Seen::Line(text.to_owned()));
    }

    /// The events `session`'s log accepted (through [`crate::writes::Watched::streaming`]).
    pub fn logged(&self, session: &SessionId, events: &[SessionEvent]) {
        if self.wants.logs && !events.is_empty() {
            self.show(Seen::Logged(session.clone(), events.to_vec()));
        }
    }

    /// A tool call began.
    fn tool_started(&self, agent: &SessionId, tool: &str, input: &Value) {
        if self.wants.tool_starts {
            self.show(Seen::ToolStarted {
                agent: agent.clone(),
                tool: tool.to_owned(),
                input: input.clone(),
            });
        }
    }

    /// A tool call returned.
    fn tool_finished(&self, agent: &SessionId, tool: &str, input: &Value, delivered: bool) {
        self.show(Seen::ToolFinished {
            agent: agent.clone(),
            tool: tool.to_owned(),
            input: input.clone(),
            delivered,
        });
    }

    /// Clear the live tree and draw nothing until [`Reporter::resume`]
    /// (a question is up on the terminal); lines wait meanwhile. Returns
    /// once the renderer has cleared the screen.
    ///
    /// # Cancel safety
    /// Cancel safe: a drop stops only the wait; the view pauses anyway.
    pub async fn pause(&self) {
        let (done, cleared) = tokio::sync::oneshot::channel();
        self.send(Message::Pause(done));
        let _ = cleared.await;
    }

    /// Print the lines that waited and draw the tree again.
    pub fn resume(&self) {
        self.send(Message::Resume);
    }

    /// Wait until everything sent so far is written (and what a renderer
    /// held for a start that never came); from then on the view no longer
    /// redraws on its own. The command's last call before its final word.
    ///
    /// # Cancel safety
    /// Cancel safe: a drop stops only the wait; the writing goes on.
    pub async fn flush(&self) {
        let (done, written) = tokio::sync::oneshot::channel();
        self.send(Message::Flush(done));
        let _ = written.await;
    }
}

/// The renderer's thread: every message in order, the renderer's own
/// ticks between them; ends when every sender is gone.
fn drain(receiver: &Receiver<Message>, mut renderer: Box<dyn Renderer>, mut out: Output) {
    let every = renderer.tick_every();
    let mut next = every.map(|every| Instant::now() + every);
    loop {
        let message = match next {
            Some(at) => match receiver.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(message) => Some(message),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            },
            None => match receiver.recv() {
                Ok(message) => Some(message),
                Err(_) => break,
            },
        };
        match message {
            Some(Message::Show(seen)) => renderer.show(*seen, &mut out),
            Some(Message::Pause(done)) => {
                renderer.pause(&mut out);
                let _ = done.send(());
            }
            Some(Message::Resume) => renderer.resume(&mut out),
            // The command is done showing: nothing more is drawn on the
            // renderer's own (a redraw after the command's last line on
            // stderr would clear it from the terminal).
            Some(Message::Flush(done)) => {
                renderer.finish(&mut out);
                next = None;
                let _ = done.send(());
            }
            None => {}
        }
        if let (Some(at), Some(every)) = (next, every)
            && Instant::now() >= at
        {
            renderer.tick(&mut out);
            next = Some(Instant::now() + every);
        }
    }
    renderer.finish(&mut out);
}

#[cfg(test)]
pub(crate) mod testing {
    //! A writer tests read back.

    use std::io::Write;
    use std::sync::{Arc, Mutex, PoisonError};

    /// Bytes written, shared with the test.
    #[derive(Clone, Default)]
    pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

    impl Captured {
        /// What was written, as text.
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
                .into_owned()
        }
    }

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An output over two captures: (output, stdout, stderr).
    pub fn output() -> (super::Output, Captured, Captured) {
        let (out, err) = (Captured::default(), Captured::default());
        (
            super::Output::new(Box::new(out.clone()), Box::new(err.clone())),
            out,
            err,
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Write;
    use std::sync::{Condvar, Mutex, PoisonError};

    use dsh_core::{AgentFactory, CancellationToken, CreateAgent, SessionHeader, UserMessage};
    use dsh_harness::{MemoryStore, Scripted, ScriptedModel};
    use serde_json::json;

    use super::testing::Captured;
    use super::*;
    use crate::config::Limits;
    use crate::world::{World, WorldConfig};

    /// A stdout that takes nothing until its gate opens (a full pipe).
    struct Gated {
        gate: Arc<(Mutex<bool>, Condvar)>,
        inner: Captured,
    }

    impl Write for Gated {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let (open, opened) = &*self.gate;
            let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
            while !*open {
                open = opened.wait(open).unwrap_or_else(PoisonError::into_inner);
            }
            self.inner.write(bytes)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An output whose stdout is [`Gated`] (closed), what it lets through,
    /// and its gate.
    fn gated() -> (Output, Captured, Arc<(Mutex<bool>, Condvar)>) {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let stdout = Captured::default();
        let output = Output::new(
            Box::new(Gated {
                gate: Arc::clone(&gate),
                inner: stdout.clone(),
            }),
            Box::new(Captured::default()),
        );
        (output, stdout, gate)
    }

    /// Let `gate`'s writes through.
    fn open(gate: &(Mutex<bool>, Condvar)) {
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
    }

    /// Past the channel's bound a sender waits for room (on a worker of a
    /// multi-threaded runtime, through `block_in_place`): nothing is lost
    /// and nothing deadlocks, and the lines come out in order once stdout
    /// takes bytes again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_its_bound_a_sender_waits_and_nothing_is_lost() {
        let (output, stdout, gate) = gated();
        let reporter = Reporter::bounded(Box::new(plain::Plain::default()), output, 2);
        let sending = {
            let reporter = Arc::clone(&reporter);
            tokio::spawn(async move {
                for n in 0..50 {
                    reporter.line(&format!("line {n}"));
                }
            })
        };
        open(&gate);
        sending.await.unwrap();
        reporter.flush().await;
        let expected: String = (0..50).map(|n| format!("line {n}\n")).collect();
        assert_eq!(stdout.text(), expected);
    }

    /// With stdout blocked, a lead still starts two children, they settle
    /// and the lead ends its turn: the runtime never waits for the screen.
    /// Once stdout takes bytes again, every line is there, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_blocked_stdout_does_not_stall_the_tree() {
        let (output, stdout, gate) = gated();
        let reporter = Reporter::with(Box::new(plain::Plain::default()), output);
        let model = Arc::new(ScriptedModel::new());
        let child = |name: &str| {
            (
                "subagent".to_owned(),
                json!({ "description": format!("the {name} part"), "name": name, "prompt": "do it" }),
            )
        };
        model.push(Scripted::ToolCalls {
            text: None,
            calls: vec![child("alpha"), child("beta")],
        });
        // The lead and its children share this one queue and take their
        // replies in whatever order they run: every reply is the same, so
        // any order gives each a reply (the children, the lead's next step,
        // and a turn for each notice that may wake it).
        for _ in 0..5 {
            model.push(Scripted::Text("done".to_owned()));
        }
        let world = World::build(WorldConfig {
            store: Arc::new(MemoryStore::new()),
            model,
            reporter: Some(&reporter),
            acp: None,
            limits: Limits::default(),
            workspace: None,
            team: false,
            roles: &std::collections::BTreeMap::new(),
            model_choice: &crate::model::ModelChoice::Demo,
            sandbox: dsh_tool_workspace::Level::ReadOnly,
            budgets: crate::config::Budgets::default(),
        })
        .unwrap();
        let _listening = reporter.attach(&world.runtime);
        let (_subscription, mut events) = world.runtime.events().subscribe();
        let id = dsh_core::SessionId::generate();
        reporter.root(&id);
        let lead = world
            .harness
            .create(CreateAgent {
                setup: world.lead_setup(&id),
                header: SessionHeader::new(id, std::env::temp_dir()),
                seed: Vec::new(),
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap()
            .agent()
            .clone();
        reporter.lead(&lead, "split it");
        lead.followup(UserMessage::user_text("split it"))
            .await
            .unwrap();
        let (mut starts, mut ends) = (0, 0);
        let tree = async {
            while ends < 2 {
                match events.recv().await {
                    Some(SubagentEvent::Start(_)) => starts += 1,
                    Some(SubagentEvent::End(..)) => ends += 1,
                    Some(_) => {}
                    None => break,
                }
            }
            lead.wait_idle().await;
        };
        tokio::time::timeout(Duration::from_secs(60), tree)
            .await
            .expect("the tree stalled behind a blocked stdout");
        assert_eq!((starts, ends), (2, 2));
        assert_eq!(stdout.text(), "", "written through a closed gate");

        open(&gate);
        reporter.flush().await;
        let text = stdout.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.first(),
            Some(&format!("lead {}: split it", lead.id()).as_str())
        );
        for name in ["alpha", "beta"] {
            let started = format!("started {name} (spawn) for lead: the {name} part");
            let finished = format!("finished {name}: completed");
            let at = |line: &str| lines.iter().position(|l| *l == line);
            assert!(at(&started) < at(&finished), "{text}");
            assert!(at(&finished).is_some(), "{text}");
        }
        world.shutdown().await;
    }
}
