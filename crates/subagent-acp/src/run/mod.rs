//! One external run: start-up (spawn, `initialize`, `session/new`), the
//! prompt turn, and teardown. One task per run drives the connection and
//! the pipe bridge; another (the process group's reaper) waits for the
//! process and forwards stderr. The run's result settles exactly once:
//! from the agent's stop reason, from an observed fault, or as `aborted`
//! the moment the run is disposed (B40); whichever comes first wins.
//!
//! Answering permission requests is in `permission.rs`, opening the
//! session (`initialize`, `session/new` or `session/load`, the model
//! choice) in `session.rs`. What stays here is one run's lifecycle and
//! the state its tasks share: it is over ~800 lines because start-up,
//! the driver, the result and teardown all read and settle that one
//! `Shared`, and splitting them further would spread its invariant (the
//! result settles exactly once) over files.

mod permission;
mod session;

use session::{Opening, open_session};

use dsh_subagent::InfraError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    self as acp, CancelNotification, PromptRequest, RequestPermissionRequest, SessionNotification,
};
use agent_client_protocol::{Agent, Channel, Client};
use async_trait::async_trait;
use dsh_core::observe::EventBus;
use dsh_core::{ContentBlock, SessionId, StopReason, Usage};
use dsh_subagent::progress::{ProgressKind, ProgressSink};
use dsh_subagent::{AdmissionError, DeliveryError, SubagentError, SubagentResult, SubagentRun};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::advertised::AdvertisedCache;
use crate::config::{AcpConfig, Asker, PermissionPolicy};
use crate::fault::{ExitFact, Fault, Phase, agent_text, map_stop_reason, stop_diagnostic};
use crate::process::{self, ProcessGroup};
use crate::progress::{AcpProgress, ProgressUpdate, block_text, progress_of, runtime_kinds};
use crate::transport::{self, BridgeFacts, MAX_LINE_BYTES, StdoutFault};

/// After the agent's stdout closed, how long to wait for its exit status
/// before the diagnostic says it closed stdout while running.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// How long stdin may take to flush the connection's last frames (the ACP
/// cancel) before teardown closes it anyway.
const FLUSH_BOUND: Duration = Duration::from_secs(1);

/// How long the driver task may outlive the process group.
const DRIVER_BOUND: Duration = Duration::from_secs(1);

/// What one run's tasks share.
struct Shared {
    run_id: SessionId,
    phase: AtomicU8,
    output: Mutex<Messages>,
    settled: watch::Sender<Option<SubagentResult>>,
    /// Fired by dispose (or a failed start-up): the connection stops,
    /// sending the ACP cancel when a turn is in flight.
    stop: CancellationToken,
    facts: BridgeFacts,
    progress: EventBus<AcpProgress>,
    permission: PermissionPolicy,
    /// The host's asker under the `ask` policy.
    asker: Option<Asker>,
    /// The provider's registry name, as a question to the asker names it.
    agent: String,
    /// The values of the configured variables, never shown in a diagnostic.
    masked: Vec<String>,
    /// The first permission request the policy refused (its title, made
    /// fit for a diagnostic), named when the turn then does not complete.
    refused: Mutex<Option<String>>,
    /// Where progress goes on the runtime's bus.
    runtime: Mutex<RuntimeProgress>,
    /// The tokens the agent reported for its turns.
    usage: Mutex<Usage>,
    /// The provider's record of what its agent advertises.
    advertised: AdvertisedCache,
    /// The ACP session and its directory, once open; with whether the
    /// agent can load it again later (`loadSession`).
    session: Mutex<Option<(acp::SessionId, PathBuf, bool)>>,
    /// Set while `session/load` replays the session's history, which is
    /// neither output nor progress of this run.
    replaying: std::sync::atomic::AtomicBool,
}

/// The agent's messages of this run, kept apart: one paragraph each, so
/// that an agent's own note or warning is never glued to its answer. A
/// message is the chunks with one `messageId`; from an agent that gives no
/// ids, the chunks between two other updates (a tool call, a thought, a
/// plan).
#[derive(Default)]
struct Messages {
    /// The finished messages that said something.
    done: Vec<String>,
    /// The message streaming now.
    current: String,
    /// Its id, when the agent gave one.
    current_id: Option<String>,
}

impl Messages {
    fn chunk(&mut self, id: Option<String>, text: &str) {
        if id.is_some() && id != self.current_id {
            self.finish();
            self.current_id = id;
        }
        self.current.push_str(text);
    }

    /// Another kind of update: it ends a message that has no id.
    fn boundary(&mut self) {
        if self.current_id.is_none() {
            self.finish();
        }
    }

    fn finish(&mut self) {
        let text = std::mem::take(&mut self.current);
        if !text.trim().is_empty() {
            self.done.push(text);
        }
    }

    /// Every message that said something, trimmed, a blank line apart.
    fn text(&self) -> String {
        let mut parts: Vec<&str> = self.done.iter().map(|text| text.trim()).collect();
        if !self.current.trim().is_empty() {
            parts.push(self.current.trim());
        }
        parts.join("\n\n")
    }
}

/// The run's side of the runtime's progress bus: what was reported before
/// the runtime attached its sink (at most [`PENDING_PROGRESS`] events, the
/// oldest dropped first), then the sink; and the open tool calls' titles.
#[derive(Default)]
struct RuntimeProgress {
    pending: std::collections::VecDeque<ProgressKind>,
    sink: Option<ProgressSink>,
    titles: HashMap<String, String>,
}

/// How many runtime progress events a run keeps until the runtime attaches
/// its sink (it does so as soon as it publishes the run).
const PENDING_PROGRESS: usize = 256;

impl RuntimeProgress {
    fn report(&mut self, update: &ProgressUpdate) {
        for kind in runtime_kinds(update, &mut self.titles) {
            self.push(kind);
        }
    }

    fn push(&mut self, kind: ProgressKind) {
        match &self.sink {
            Some(sink) => sink.emit(kind),
            None => {
                if self.pending.len() == PENDING_PROGRESS {
                    self.pending.pop_front();
                }
                self.pending.push_back(kind);
            }
        }
    }

    fn attach(&mut self, sink: ProgressSink) {
        for kind in self.pending.drain(..) {
            sink.emit(kind);
        }
        self.sink = Some(sink);
    }
}

impl Shared {
    fn phase(&self) -> Phase {
        Phase::from_index(self.phase.load(Ordering::SeqCst))
    }

    fn set_phase(&self, phase: Phase) {
        self.phase.store(phase.index(), Ordering::SeqCst);
    }

    fn output(&self) -> Vec<ContentBlock> {
        let text = self
            .output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .text();
        if text.is_empty() {
            Vec::new()
        } else {
            vec![ContentBlock::text(text)]
        }
    }

    /// Settle unless something settled first; the output is what has
    /// streamed so far.
    fn settle(&self, stop_reason: StopReason, diagnostic: Option<String>) {
        self.settled.send_if_modified(|settled| {
            if settled.is_some() {
                return false;
            }
            let mut result = SubagentResult::stopped(stop_reason);
            result.output = self.output();
            result.usage = *self.usage.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(diagnostic) = diagnostic {
                result = result.with_diagnostic(diagnostic);
            }
            *settled = Some(result);
            true
        });
    }

    fn settle_fault(&self, fault: &Fault) {
        tracing::debug!(run = %self.run_id, "the ACP run failed: {fault}");
        self.settle(StopReason::ERROR, Some(fault.to_string()));
    }

    fn emit(&self, update: ProgressUpdate) {
        self.runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .report(&update);
        self.progress.emit(&AcpProgress {
            run_id: self.run_id.clone(),
            update,
        });
    }

    /// A `session/update`: message text accumulates into the output (one
    /// paragraph per agent message); it and everything else this crate
    /// knows becomes progress.
    fn update(&self, notification: &SessionNotification) {
        if self.replaying.load(Ordering::SeqCst) {
            return;
        }
        {
            let mut output = self.output.lock().unwrap_or_else(PoisonError::into_inner);
            match &notification.update {
                acp::SessionUpdate::AgentMessageChunk(chunk) => output.chunk(
                    chunk.message_id.as_ref().map(ToString::to_string),
                    block_text(&chunk.content),
                ),
                _ => output.boundary(),
            }
        }
        match progress_of(&notification.update) {
            Some(update) => self.emit(update),
            None => {
                tracing::trace!(run = %self.run_id, "an ACP session update not reported as progress")
            }
        }
    }

    /// Count the usage the agent reported at the end of a turn, into the
    /// result and onto the runtime's bus.
    fn add_usage(&self, reported: &acp::Usage) {
        #[allow(
            clippy::needless_update,
            reason = "core's `Usage` may count more kinds of token than these"
        )]
        let tokens = Usage {
            input_tokens: reported.input_tokens,
            output_tokens: reported.output_tokens,
            cached_input_tokens: reported.cached_read_tokens.unwrap_or(0),
            reasoning_tokens: reported.thought_tokens.unwrap_or(0),
            ..Usage::default()
        };
        *self.usage.lock().unwrap_or_else(PoisonError::into_inner) += tokens;
        self.runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ProgressKind::Usage {
                tokens,
                context: None,
            });
    }

    /// For a turn that did not complete after the policy refused a
    /// permission request: which one, since that is most likely why.
    fn refused_diagnostic(&self, stop_reason: &StopReason) -> Option<String> {
        if *stop_reason == StopReason::COMPLETED {
            return None;
        }
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        refused.as_ref().map(|asked| {
            format!(
                "the agent asked permission to run `{asked}`; the `{}` policy refused it",
                self.permission.name()
            )
        })
    }

    /// The fault behind a connection that ended or failed: what stdout
    /// showed, else how the process ended (waiting briefly for it), else
    /// that stdout closed while it ran.
    async fn closed_fault(&self, exit: &mut watch::Receiver<Option<ExitStatus>>) -> Fault {
        let phase = self.phase();
        if let Some(fault) = self.stdout_fault(phase) {
            return fault;
        }
        let status = tokio::time::timeout(EXIT_WAIT, async {
            exit.wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|status| *status)
        })
        .await;
        if let Some(fault) = self.stdout_fault(phase) {
            return fault;
        }
        match status {
            Ok(Some(status)) => Fault::Exited {
                phase,
                exit: ExitFact::of(status),
            },
            _ => Fault::Closed { phase },
        }
    }

    fn stdout_fault(&self, phase: Phase) -> Option<Fault> {
        self.facts.stdout_fault().map(|fault| match fault {
            StdoutFault::Garbage(line) => Fault::Garbage { phase, line },
            StdoutFault::TooLong => Fault::LineTooLong {
                phase,
                limit: MAX_LINE_BYTES,
            },
        })
    }

    /// The fault behind a failed request.
    async fn request_fault(
        &self,
        err: &agent_client_protocol::Error,
        exit: &mut watch::Receiver<Option<ExitStatus>>,
    ) -> Fault {
        tracing::debug!(run = %self.run_id, phase = %self.phase(), "an ACP request failed: {err}");
        if agent_client_protocol::is_incoming_transport_closed(err)
            || agent_client_protocol::is_connection_terminated(err)
            || self.facts.stdout_fault().is_some()
        {
            self.closed_fault(exit).await
        } else {
            Fault::Protocol {
                phase: self.phase(),
                code: i32::from(err.code),
                message: agent_text(&err.message, &self.masked),
                data: err
                    .data
                    .as_ref()
                    .map(|data| agent_text(&data.to_string(), &self.masked)),
            }
        }
    }
}

/// What the driver task needs.
struct Drive {
    shared: Arc<Shared>,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    close_stdin: CancellationToken,
    stdin_closed: CancellationToken,
    /// The connection's inputs; its `exit` watch also tells the driver why
    /// a connection that ended without a verdict ended.
    turn: Turn,
}

/// Why a start-up failed: a fault of the agent, or a request it cannot
/// honour (refused before the run is published).
enum StartFailure {
    Fault(Fault),
    Refused(AdmissionError),
    /// A session to continue that the agent cannot load.
    NotResumable(String),
}

/// How a run opens its ACP session.
#[derive(Debug, Clone)]
pub(crate) enum Open {
    /// `session/new`.
    New,
    /// `session/load` of a session an earlier run left.
    Load(acp::SessionId),
}

impl From<Fault> for StartFailure {
    fn from(fault: Fault) -> Self {
        Self::Fault(fault)
    }
}

/// The driver task: the connection and both halves of the pipe bridge.
async fn drive(drive: Drive) {
    let Drive {
        shared,
        stdin,
        stdout,
        close_stdin,
        stdin_closed,
        turn,
    } = drive;
    let exit = turn.exit.clone();
    let run = shared.run_id.to_string();
    let (ours, theirs) = Channel::duplex();
    let (to_agent, from_agent) = theirs.into_parts();
    let reader = transport::read_stdout(stdout, from_agent, &shared.facts, &run);
    let writer = async {
        transport::write_stdin(stdin, to_agent, close_stdin, &run).await;
        stdin_closed.cancel();
    };
    let connection = connect(shared.clone(), ours, turn);
    let ((), (), connected) = tokio::join!(reader, writer, connection);
    if let Err(err) = connected {
        tracing::debug!(run = %run, "the ACP connection ended with an error: {err}");
    }
    // A connection that ended without a verdict (a transport failure before
    // the turn could settle) is a fault of the phase it was in.
    if shared.settled.borrow().is_none() && !shared.stop.is_cancelled() {
        let mut exit = exit;
        let fault = shared.closed_fault(&mut exit).await;
        shared.settle_fault(&fault);
    }
}

/// The inputs of the foreground: start-up, then one prompt turn (none for
/// a probe, which only opens a session).
struct Turn {
    cwd: PathBuf,
    prompt: Option<Vec<acp::ContentBlock>>,
    images: usize,
    model: Option<String>,
    open: Open,
    startup: oneshot::Sender<Result<(), StartFailure>>,
    exit: watch::Receiver<Option<ExitStatus>>,
}

async fn connect(
    shared: Arc<Shared>,
    channel: Channel,
    turn: Turn,
) -> Result<(), agent_client_protocol::Error> {
    let on_update = shared.clone();
    let on_permission = shared.clone();
    Client
        .v1()
        .name("dsh-subagent-acp")
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                on_update.update(&notification);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest, responder, _cx| {
                responder.respond(on_permission.answer(&request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(channel, async move |cx| {
            foreground(&cx, &shared, turn).await;
            Ok(())
        })
        .await
}

async fn foreground(
    cx: &agent_client_protocol::v1::ConnectionTo<Agent>,
    shared: &Shared,
    turn: Turn,
) {
    let Turn {
        cwd,
        prompt,
        images,
        model,
        open,
        startup,
        mut exit,
    } = turn;
    let opening = Opening {
        cwd,
        images,
        model,
        open,
    };
    let opened = tokio::select! {
        biased;
        () = shared.stop.cancelled() => return,
        opened = open_session(cx, shared, opening, &mut exit) => opened,
    };
    let session_id = match opened {
        Ok(session_id) => session_id,
        Err(fault) => {
            let _ = startup.send(Err(fault));
            return;
        }
    };
    if startup.send(Ok(())).is_err() {
        return;
    }
    let Some(prompt) = prompt else {
        // A probe: the session stays open until the run is disposed.
        shared.stop.cancelled().await;
        return;
    };
    shared.set_phase(Phase::Prompt);
    shared
        .runtime
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(ProgressKind::StepStarted { turn: 0, step: 0 });
    let request = cx.send_request(PromptRequest::new(session_id.clone(), prompt));
    let answered = tokio::select! {
        biased;
        () = shared.stop.cancelled() => None,
        answered = request.block_task() => Some(answered),
    };
    match answered {
        // Disposed mid-turn: the result is already aborted; tell the agent,
        // best effort (it may ignore it, or be gone).
        None => {
            if let Err(err) = cx.send_notification(CancelNotification::new(session_id)) {
                tracing::debug!(run = %shared.run_id, "the ACP cancel was not sent: {err}");
            }
        }
        Some(Ok(response)) => {
            if let Some(reported) = &response.usage {
                shared.add_usage(reported);
            }
            let stop_reason = map_stop_reason(&response.stop_reason);
            let diagnostic = stop_diagnostic(&response.stop_reason)
                .or_else(|| shared.refused_diagnostic(&stop_reason));
            shared.settle(stop_reason, diagnostic);
        }
        Some(Err(err)) => {
            let fault = shared.request_fault(&err, &mut exit).await;
            shared.settle_fault(&fault);
        }
    }
}

/// The prompt in ACP terms: text and images, in order.
fn acp_prompt(prompt: &[ContentBlock]) -> (Vec<acp::ContentBlock>, usize) {
    let mut images = 0;
    let blocks = prompt
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => {
                acp::ContentBlock::Text(acp::TextContent::new(text.clone()))
            }
            ContentBlock::Image { media_type, data } => {
                images += 1;
                acp::ContentBlock::Image(acp::ImageContent::new(data.clone(), media_type.clone()))
            }
        })
        .collect();
    (blocks, images)
}

/// What teardown owns. Dropped without [`Parts::shutdown`], it kills the
/// process group and aborts the driver at once.
struct Parts {
    group: ProcessGroup,
    driver: JoinHandle<()>,
    close_stdin: CancellationToken,
    stdin_closed: CancellationToken,
}

impl Drop for Parts {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Parts {
    /// Stop the connection (the ACP cancel goes out if a turn is in
    /// flight), close stdin once it has flushed, then the ladder. With
    /// `eof_grace` `None` the agent is signalled at once.
    async fn shutdown(
        mut self,
        shared: &Shared,
        eof_grace: Option<Duration>,
        term_grace: Duration,
    ) -> Result<(), String> {
        shared.stop.cancel();
        if tokio::time::timeout(FLUSH_BOUND, self.stdin_closed.cancelled())
            .await
            .is_err()
        {
            self.close_stdin.cancel();
        }
        let stopped = self.group.stop(eof_grace, term_grace).await;
        if tokio::time::timeout(DRIVER_BOUND, &mut self.driver)
            .await
            .is_err()
        {
            tracing::warn!(run = %shared.run_id, "the ACP driver outlived its process group; aborted");
        }
        stopped
    }
}

/// The values a diagnostic must never show: every configured variable's,
/// and every inherited one's beyond the default allow-list (those are the
/// operator's additions, such as a credential passed through by name).
/// Values shorter than four bytes are left alone: masking them would
/// garble the text and hide nothing.
fn masked_values(config: &AcpConfig) -> Vec<String> {
    let inherited = config
        .inherit_env
        .iter()
        .filter(|name| !crate::config::DEFAULT_INHERITED_ENV.contains(&name.as_str()))
        .filter_map(|name| std::env::var(name).ok());
    config
        .env
        .values()
        .cloned()
        .chain(inherited)
        .filter(|value| value.len() >= 4)
        .collect()
}

/// What one start is asked to do.
pub(crate) struct Start<'a> {
    pub(crate) config: &'a AcpConfig,
    pub(crate) progress: EventBus<AcpProgress>,
    pub(crate) advertised: AdvertisedCache,
    pub(crate) cwd: PathBuf,
    /// `None` for a probe: open a session, prompt nothing.
    pub(crate) prompt: Option<&'a [ContentBlock]>,
    /// The model to choose through the agent's model selector.
    pub(crate) model: Option<String>,
    /// A new session, or one to load.
    pub(crate) open: Open,
    /// The run's id: the child's own when continuing it, else minted.
    pub(crate) run_id: Option<SessionId>,
    pub(crate) cancel: &'a CancellationToken,
}

/// Start one run; returns once its session is open and the prompt is on
/// its way, or fails having torn everything down.
pub(crate) async fn start(start: Start<'_>) -> Result<AcpRun, SubagentError> {
    let Start {
        config,
        progress,
        advertised,
        cwd,
        prompt,
        model,
        open,
        run_id,
        cancel,
    } = start;
    let provider_error = |fault: &Fault| {
        SubagentError::Infra(InfraError::Provider {
            provider: config.name.clone(),
            message: fault.to_string(),
        })
    };
    let run_id = run_id.unwrap_or_else(SessionId::generate);
    let (prompt, images) = match prompt {
        Some(prompt) => {
            let (prompt, images) = acp_prompt(prompt);
            (Some(prompt), images)
        }
        None => (None, 0),
    };
    let spawned =
        process::spawn(config, &cwd, run_id.as_str()).map_err(|fault| provider_error(&fault))?;
    let shared = Arc::new(Shared {
        run_id: run_id.clone(),
        phase: AtomicU8::new(Phase::Spawn.index()),
        output: Mutex::new(Messages::default()),
        settled: watch::Sender::new(None),
        stop: CancellationToken::new(),
        facts: BridgeFacts::default(),
        progress,
        permission: config.permission,
        asker: config.asker.clone(),
        agent: config.name.clone(),
        masked: masked_values(config),
        refused: Mutex::new(None),
        runtime: Mutex::new(RuntimeProgress::default()),
        usage: Mutex::new(Usage::default()),
        advertised,
        session: Mutex::new(None),
        replaying: std::sync::atomic::AtomicBool::new(false),
    });
    let (startup_tx, startup_rx) = oneshot::channel();
    let close_stdin = CancellationToken::new();
    let stdin_closed = CancellationToken::new();
    let mut exit = spawned.group.exit_watch();
    let driver = tokio::spawn(drive(Drive {
        shared: shared.clone(),
        stdin: spawned.stdin,
        stdout: spawned.stdout,
        close_stdin: close_stdin.clone(),
        stdin_closed: stdin_closed.clone(),
        turn: Turn {
            cwd,
            prompt,
            images,
            model,
            open,
            startup: startup_tx,
            exit: exit.clone(),
        },
    }));
    // From here on, dropping `parts` (this future dropped by a caller that
    // gave up) kills the group: nothing outlives an abandoned start.
    let stderr_tail = spawned.group.stderr_tail();
    let parts = Parts {
        group: spawned.group,
        driver,
        close_stdin,
        stdin_closed,
    };
    let outcome = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(None),
        started = tokio::time::timeout(config.startup_timeout, startup_rx) => match started {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(failure))) => Err(Some(failure)),
            Ok(Err(_)) => Err(Some(shared.closed_fault(&mut exit).await.into())),
            Err(_) => Err(Some(Fault::Timeout {
                phase: shared.phase(),
                limit: config.startup_timeout,
            }.into())),
        },
    };
    match outcome {
        Ok(()) => {
            tracing::debug!(run = %run_id, pgid = parts.group.pgid(), "ACP run started");
            Ok(AcpRun {
                id: run_id,
                shared,
                eof_grace: config.eof_grace,
                answered_grace: config.answered_grace,
                term_grace: config.term_grace,
                parts: tokio::sync::Mutex::new(Some(parts)),
                teardown: tokio::sync::OnceCell::new(),
            })
        }
        Err(fault) => {
            if let Err(err) = parts.shutdown(&shared, None, config.term_grace).await {
                tracing::error!(run = %run_id, "a failed ACP start-up left its process: {err}");
            }
            match fault {
                Some(StartFailure::NotResumable(reason)) => {
                    Err(SubagentError::Delivery(DeliveryError::NotResumable {
                        id: run_id,
                        reason: agent_text(&reason, &shared.masked),
                    }))
                }
                Some(StartFailure::Refused(refusal)) => {
                    tracing::debug!(run = %run_id, "the ACP start-up was refused: {refusal}");
                    Err(SubagentError::Admission(refusal))
                }
                Some(StartFailure::Fault(fault)) => {
                    tracing::debug!(run = %run_id, "the ACP start-up failed: {fault}");
                    let mut message = fault.to_string();
                    // The group is gone and its stderr drained: an agent
                    // that ended during start-up usually said why there.
                    if matches!(fault, Fault::Exited { .. } | Fault::Closed { .. }) {
                        let tail = stderr_tail.lock().unwrap_or_else(PoisonError::into_inner);
                        if !tail.is_empty() {
                            let lines: Vec<String> = tail
                                .iter()
                                .map(|line| agent_text(line, &shared.masked))
                                .collect();
                            message.push_str("; its stderr ended with: ");
                            message.push_str(&lines.join(" | "));
                        }
                    }
                    Err(SubagentError::Infra(InfraError::Provider {
                        provider: config.name.clone(),
                        message,
                    }))
                }
                None => Err(SubagentError::Cancelled),
            }
        }
    }
}

/// A handle to one external ACP run.
pub struct AcpRun {
    id: SessionId,
    shared: Arc<Shared>,
    eof_grace: Duration,
    answered_grace: Duration,
    term_grace: Duration,
    parts: tokio::sync::Mutex<Option<Parts>>,
    teardown: tokio::sync::OnceCell<Result<(), SubagentError>>,
}

impl std::fmt::Debug for AcpRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpRun")
            .field("id", &self.id)
            .field("phase", &self.shared.phase())
            .finish_non_exhaustive()
    }
}

impl AcpRun {
    /// The result if it has settled.
    pub fn settled(&self) -> Option<SubagentResult> {
        self.shared.settled.borrow().clone()
    }
}

#[async_trait]
impl SubagentRun for AcpRun {
    fn id(&self) -> &SessionId {
        &self.id
    }

    /// `{"session_id", "cwd"}` when the agent advertised `loadSession`.
    fn resume_token(&self) -> Option<serde_json::Value> {
        let session = self
            .shared
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &*session {
            Some((session_id, cwd, true)) => Some(serde_json::json!({
                "session_id": session_id.to_string(),
                "cwd": cwd,
            })),
            _ => None,
        }
    }

    fn observe(&self, progress: ProgressSink) {
        self.shared
            .runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .attach(progress);
    }

    /// # Cancel safety
    /// Cancel safe.
    async fn result(&self) -> Result<SubagentResult, SubagentError> {
        let mut settled = self.shared.settled.subscribe();
        match settled.wait_for(Option::is_some).await {
            Ok(result) => (*result).clone().ok_or_else(|| {
                SubagentError::Infra(InfraError::Teardown("the ACP run vanished".into()))
            }),
            Err(_) => Err(SubagentError::Infra(InfraError::Teardown(
                "the ACP run ended without a result".into(),
            ))),
        }
    }

    /// Settle `aborted` at once (unless already settled), send the ACP
    /// cancel when a turn is in flight, close stdin, wait the EOF grace
    /// (the short answered grace when the run had already settled, the
    /// mid-turn grace otherwise), SIGTERM the group, wait, SIGKILL it;
    /// return when no process of the group is left.
    ///
    /// # Cancel safety
    /// Dropping the future mid-way kills the group at once; a later call
    /// returns `Ok`.
    async fn dispose(&self) -> Result<(), SubagentError> {
        // Whether the agent had already answered (or failed) decides how
        // long it may take to go by itself after EOF.
        let answered = self.shared.settled.borrow().is_some();
        let eof_grace = if answered {
            self.answered_grace
        } else {
            self.eof_grace
        };
        self.shared.settle(StopReason::ABORTED, None);
        self.teardown
            .get_or_init(|| async {
                let Some(parts) = self.parts.lock().await.take() else {
                    return Ok(());
                };
                parts
                    .shutdown(&self.shared, Some(eof_grace), self.term_grace)
                    .await
                    .map_err(|text| SubagentError::from(InfraError::Teardown(text)))
            })
            .await
            .clone()
    }
}
