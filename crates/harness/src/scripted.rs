//! A scripted [`Model`] for tests and the offline demo: it answers each
//! request with the next queued [`Scripted`] response (or a fallback
//! responder), streaming deterministic text chunks, tool calls with
//! predictable ids (`call-1`, `call-2`, ...), usage computed from character
//! counts, and a finish reason. It records every request it receives. It must
//! never perform I/O, spawn a task, read a clock, or keep working after its
//! stream is dropped or its cancellation token fires: every wait it makes
//! races the token.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use dsh_core::content::ContentBlock;
use dsh_core::{
    CallId, FinishReason, Message, Model, ModelError, ModelErrorKind, ModelEvent, ModelRequest,
    ModelStream, ToolCall, Usage,
};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The message of the error returned when neither the queue nor a responder has an answer.
pub const EXHAUSTED_MESSAGE: &str = "the script has no response left";

/// The message of the error a stream yields when its request is cancelled.
pub const CANCELLED_MESSAGE: &str = "the request was cancelled";

/// One scripted response.
///
/// Text is streamed as one to three [`ModelEvent::TextDelta`] chunks of
/// near-equal size (none for empty text). Every variant that finishes reports
/// one [`ModelEvent::Usage`] right before its [`ModelEvent::Finish`]; usage is
/// `input_tokens = chars(system + every message's text) / 4` and
/// `output_tokens = chars(response text) / 4`, at least 1 when there is text.
#[derive(Clone, Debug)]
pub enum Scripted {
    /// The text, then usage, then [`FinishReason::EndTurn`].
    Text(String),
    /// The optional text, one [`ModelEvent::ToolCall`] per call (ids
    /// `call-1`, `call-2`, ... counted per [`ScriptedModel`] in the order the
    /// calls are scripted), then usage, then [`FinishReason::ToolUse`].
    ToolCalls {
        /// Text streamed before the calls.
        text: Option<String>,
        /// The calls, as `(tool name, input)`.
        calls: Vec<(String, Value)>,
    },
    /// Partial text, then usage, then [`FinishReason::MaxTokens`].
    MaxTokens(String),
    /// The text, then usage, then [`FinishReason::Refusal`].
    Refusal(String),
    /// [`Model::stream`] itself returns this error (when it is the
    /// `then` of a [`Scripted::Gated`], the stream yields it after the gate).
    Fail(ModelError),
    /// The text, then the stream yields the error and ends.
    FailMidStream {
        /// Text streamed before the failure.
        text: String,
        /// The error the stream then yields.
        error: ModelError,
    },
    /// Yields nothing until the request's cancellation token fires, then
    /// yields a [`ModelErrorKind::Cancelled`] error and ends.
    Hang,
    /// The text, then one permit is added to `stalled` (once the consumer
    /// has taken every text chunk and asks for more), then as [`Scripted::Hang`]:
    /// a step that is cut off mid-answer.
    Stall {
        /// Text streamed before the stall.
        text: String,
        /// Gets one permit when the stream stalls.
        stalled: Arc<Semaphore>,
    },
    /// Waits (cancellably) for one permit of `gate`, which it takes for good,
    /// then behaves as `then`.
    Gated {
        /// The semaphore a test releases permits on to let a response through.
        gate: Arc<Semaphore>,
        /// What happens once a permit is taken.
        then: Box<Scripted>,
    },
}

/// Builds the fallback response from the request when the queue is empty.
type Responder = Arc<dyn Fn(&ModelRequest) -> Scripted + Send + Sync>;

/// A [`Model`] that plays back [`Scripted`] responses in order.
///
/// It is `Send + Sync` and meant to be shared as `Arc<ScriptedModel>`:
/// [`ScriptedModel::push`] appends to its queue while it is in use, and
/// [`ScriptedModel::requests`] shows what it was asked.
pub struct ScriptedModel {
    name: String,
    accepts_images: bool,
    queue: Mutex<VecDeque<Scripted>>,
    responder: Option<Responder>,
    requests: Mutex<Vec<ModelRequest>>,
    /// Whether requests are kept (long demos and benchmarks turn it off:
    /// every request holds the whole conversation).
    recording: bool,
    next_call: AtomicU64,
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("name", &self.name)
            .field("accepts_images", &self.accepts_images)
            .field("remaining", &self.remaining())
            .field("responder", &self.responder.is_some())
            .field("requests", &lock(&self.requests).len())
            .finish()
    }
}

/// Locks `mutex`, ignoring poisoning: the data is plain and stays consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ScriptedModel {
    /// A model named `scripted` with an empty queue, no responder, text only.
    pub fn new() -> Self {
        Self {
            name: "scripted".to_owned(),
            accepts_images: false,
            queue: Mutex::new(VecDeque::new()),
            responder: None,
            requests: Mutex::new(Vec::new()),
            recording: true,
            next_call: AtomicU64::new(1),
        }
    }

    /// A model whose queue starts with `responses`, in order.
    pub fn with_responses(responses: impl IntoIterator<Item = Scripted>) -> Self {
        let model = Self::new();
        lock(&model.queue).extend(responses);
        model
    }

    /// Append `response` to the queue.
    pub fn push(&self, response: Scripted) {
        lock(&self.queue).push_back(response);
    }

    /// Answer with `f(request)` whenever the queue is empty.
    #[must_use]
    pub fn responder(
        mut self,
        f: impl Fn(&ModelRequest) -> Scripted + Send + Sync + 'static,
    ) -> Self {
        self.responder = Some(Arc::new(f));
        self
    }

    /// Set whether the model claims to accept image content.
    #[must_use]
    pub fn accepting_images(mut self, yes: bool) -> Self {
        self.accepts_images = yes;
        self
    }

    /// Rename the model (the name shows in logs and diagnostics).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Stop keeping requests ([`ScriptedModel::requests`] stays empty), for
    /// long runs where every kept request would hold a whole conversation.
    #[must_use]
    pub fn without_recording(mut self) -> Self {
        self.recording = false;
        self
    }

    /// Every request received so far, in order, including those that failed.
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.requests).clone()
    }

    /// How many queued responses are left.
    pub fn remaining(&self) -> usize {
        lock(&self.queue).len()
    }

    /// The next call id: `call-1`, `call-2`, ...
    fn call_id(&self) -> CallId {
        let n = self.next_call.fetch_add(1, Ordering::Relaxed);
        CallId::new(format!("call-{n}"))
    }

    /// Turn `response` into the steps its stream plays; `Err` for a
    /// top-level [`Scripted::Fail`], which `stream` returns directly.
    fn plan(
        &self,
        response: Scripted,
        input_tokens: u64,
        steps: &mut VecDeque<Step>,
    ) -> Result<(), ModelError> {
        let finish = |steps: &mut VecDeque<Step>, text: &str, reason: FinishReason| {
            let usage = Usage {
                input_tokens,
                output_tokens: output_tokens(text),
                ..Usage::default()
            };
            steps.push_back(Step::Emit(Ok(ModelEvent::Usage(usage))));
            steps.push_back(Step::Emit(Ok(ModelEvent::Finish(reason))));
        };
        match response {
            Scripted::Text(text) => {
                push_text(steps, &text);
                finish(steps, &text, FinishReason::EndTurn);
            }
            Scripted::ToolCalls { text, calls } => {
                let text = text.unwrap_or_default();
                push_text(steps, &text);
                for (name, input) in calls {
                    let call = ToolCall {
                        call_id: self.call_id(),
                        name,
                        input: input.into(),
                    };
                    steps.push_back(Step::Emit(Ok(ModelEvent::ToolCall(call))));
                }
                finish(steps, &text, FinishReason::ToolUse);
            }
            Scripted::MaxTokens(text) => {
                push_text(steps, &text);
                finish(steps, &text, FinishReason::MaxTokens);
            }
            Scripted::Refusal(text) => {
                push_text(steps, &text);
                finish(steps, &text, FinishReason::Refusal);
            }
            Scripted::Fail(error) => return Err(error),
            Scripted::FailMidStream { text, error } => {
                push_text(steps, &text);
                steps.push_back(Step::Emit(Err(error)));
            }
            Scripted::Hang => steps.push_back(Step::Hang),
            Scripted::Stall { text, stalled } => {
                push_text(steps, &text);
                steps.push_back(Step::Signal(stalled));
                steps.push_back(Step::Hang);
            }
            Scripted::Gated { gate, then } => {
                steps.push_back(Step::Wait(gate));
                if let Err(error) = self.plan(*then, input_tokens, steps) {
                    steps.push_back(Step::Emit(Err(error)));
                }
            }
        }
        Ok(())
    }
}

/// One thing a scripted stream does.
enum Step {
    /// Yield this item (an `Err` ends the stream).
    Emit(Result<ModelEvent, ModelError>),
    /// Take one permit of the gate for good, or end on cancel.
    Wait(Arc<Semaphore>),
    /// Wait for cancel, then yield the cancellation error.
    Hang,
    /// Add one permit to the semaphore and go on.
    Signal(Arc<Semaphore>),
}

/// The state a scripted stream unfolds.
struct Playback {
    steps: VecDeque<Step>,
    cancel: CancellationToken,
    done: bool,
}

fn cancelled() -> ModelError {
    ModelError::new(ModelErrorKind::Cancelled, CANCELLED_MESSAGE)
}

/// Queue `text` as one to three deltas of near-equal character counts (the
/// last may be shorter), each cut on a character boundary.
fn push_text(steps: &mut VecDeque<Step>, text: &str) {
    let count = text.chars().count();
    if count == 0 {
        return;
    }
    let size = count.div_ceil(count.min(3));
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest
            .char_indices()
            .nth(size)
            .map_or(rest.len(), |(at, _)| at);
        let (chunk, tail) = rest.split_at(end);
        steps.push_back(Step::Emit(Ok(ModelEvent::TextDelta(chunk.to_owned()))));
        rest = tail;
    }
}

fn count_tokens(chars: usize) -> u64 {
    u64::try_from(chars / 4).unwrap_or(u64::MAX)
}

fn output_tokens(text: &str) -> u64 {
    match text.chars().count() {
        0 => 0,
        n => count_tokens(n).max(1),
    }
}

fn text_chars(content: &[ContentBlock]) -> usize {
    content
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|text| text.chars().count())
        .sum()
}

fn input_tokens(request: &ModelRequest) -> u64 {
    let messages: usize = request
        .messages
        .iter()
        .map(|message| match message {
            Message::User { content, .. }
            | Message::Assistant { content, .. }
            | Message::Tool { content, .. } => text_chars(content),
        })
        .sum();
    count_tokens(request.system.chars().count() + messages)
}

/// The next item of a playback, or `None` once it is over.
async fn advance(mut state: Playback) -> Option<(Result<ModelEvent, ModelError>, Playback)> {
    if state.done {
        return None;
    }
    loop {
        let step = state.steps.pop_front()?;
        if state.cancel.is_cancelled() {
            state.done = true;
            return Some((Err(cancelled()), state));
        }
        match step {
            Step::Emit(item) => {
                state.done = item.is_err();
                return Some((item, state));
            }
            Step::Signal(semaphore) => semaphore.add_permits(1),
            Step::Hang => {
                state.cancel.cancelled().await;
                state.done = true;
                return Some((Err(cancelled()), state));
            }
            Step::Wait(gate) => {
                let outcome = tokio::select! {
                    biased;
                    () = state.cancel.cancelled() => Err(cancelled()),
                    permit = gate.acquire() => permit.map(|permit| permit.forget()).map_err(|_| {
                        ModelError::new(ModelErrorKind::Unavailable, "the script's gate was closed")
                    }),
                };
                if let Err(error) = outcome {
                    state.done = true;
                    return Some((Err(error), state));
                }
            }
        }
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn accepts_images(&self) -> bool {
        self.accepts_images
    }

    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        let queued = lock(&self.queue).pop_front();
        let response = match (queued, &self.responder) {
            (Some(response), _) => Some(response),
            (None, Some(responder)) => Some(responder(&request)),
            (None, None) => None,
        };
        let input_tokens = input_tokens(&request);
        if self.recording {
            lock(&self.requests).push(request);
        }
        let response = response
            .ok_or_else(|| ModelError::new(ModelErrorKind::Unavailable, EXHAUSTED_MESSAGE))?;
        let mut steps = VecDeque::new();
        self.plan(response, input_tokens, &mut steps)?;
        let playback = Playback {
            steps,
            cancel,
            done: false,
        };
        Ok(futures::stream::unfold(playback, advance).boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::MessageSource;
    use futures::FutureExt;
    use serde_json::json;
    use std::time::Duration;

    const _: fn() = || {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<ScriptedModel>();
        send_sync::<Scripted>();
    };

    #[test]
    fn text_is_streamed_in_up_to_three_deltas_cut_on_characters() {
        let deltas = |text: &str| {
            let mut steps = VecDeque::new();
            push_text(&mut steps, text);
            steps
                .into_iter()
                .map(|step| match step {
                    Step::Emit(Ok(ModelEvent::TextDelta(delta))) => delta,
                    _ => panic!("only text deltas"),
                })
                .collect::<Vec<_>>()
        };
        assert!(deltas("").is_empty());
        assert_eq!(deltas("a"), ["a"]);
        assert_eq!(deltas("ab"), ["a", "b"]);
        assert_eq!(deltas("done"), ["do", "ne"]);
        // 13 characters, several of them more than one byte: 5, 5 and 3.
        assert_eq!(deltas("héllo wörld ☃"), ["héllo", " wörl", "d ☃"]);
    }

    /// A request with this system prompt and one user message.
    fn request(system: &str, user: &str) -> ModelRequest {
        ModelRequest {
            model: None,
            system: system.to_owned(),
            messages: dsh_core::Transcript::from(vec![Message::User {
                content: vec![ContentBlock::text(user)],
                source: MessageSource::User,
            }]),
            tools: Vec::new(),
            max_output_tokens: None,
            reasoning_effort: None,
        }
    }

    async fn collect(
        model: &ScriptedModel,
        req: ModelRequest,
    ) -> Vec<Result<ModelEvent, ModelError>> {
        let stream = model.stream(req, CancellationToken::new()).await.unwrap();
        stream.collect().await
    }

    fn text(s: &str) -> Result<ModelEvent, ModelError> {
        Ok(ModelEvent::TextDelta(s.to_owned()))
    }

    fn usage(input_tokens: u64, output_tokens: u64) -> Result<ModelEvent, ModelError> {
        Ok(ModelEvent::Usage(Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        }))
    }

    fn finish(reason: FinishReason) -> Result<ModelEvent, ModelError> {
        Ok(ModelEvent::Finish(reason))
    }

    fn call(id: &str, name: &str, input: Value) -> Result<ModelEvent, ModelError> {
        Ok(ModelEvent::ToolCall(ToolCall {
            call_id: CallId::new(id),
            name: name.to_owned(),
            input: input.into(),
        }))
    }

    #[tokio::test]
    async fn text_streams_chunks_usage_and_end_turn() {
        let model = ScriptedModel::with_responses([
            Scripted::Text("hello world".into()),
            Scripted::Text("hi".into()),
            Scripted::Text(String::new()),
        ]);
        // 4 + 12 chars of input: 4 tokens; 11 chars of output: 2 tokens.
        assert_eq!(
            collect(&model, request("abcd", "hello there!")).await,
            [
                text("hell"),
                text("o wo"),
                text("rld"),
                usage(4, 2),
                finish(FinishReason::EndTurn)
            ]
        );
        // Short text still costs one output token; short input costs none.
        assert_eq!(
            collect(&model, request("", "é")).await,
            [
                text("h"),
                text("i"),
                usage(0, 1),
                finish(FinishReason::EndTurn)
            ]
        );
        assert_eq!(
            collect(&model, request("", "")).await,
            [usage(0, 0), finish(FinishReason::EndTurn)]
        );
        assert_eq!(model.remaining(), 0);
    }

    #[tokio::test]
    async fn tool_calls_get_ids_counted_per_model() {
        let model = ScriptedModel::with_responses([
            Scripted::ToolCalls {
                text: Some("Let me look.".into()),
                calls: vec![
                    ("read".into(), json!({"path": "a"})),
                    ("grep".into(), json!({"q": "x"})),
                ],
            },
            Scripted::ToolCalls {
                text: None,
                calls: vec![("read".into(), json!({}))],
            },
        ]);
        assert_eq!(
            collect(&model, request("system!!", "")).await,
            [
                text("Let "),
                text("me l"),
                text("ook."),
                call("call-1", "read", json!({"path": "a"})),
                call("call-2", "grep", json!({"q": "x"})),
                usage(2, 3),
                finish(FinishReason::ToolUse)
            ]
        );
        assert_eq!(
            collect(&model, request("", "")).await,
            [
                call("call-3", "read", json!({})),
                usage(0, 0),
                finish(FinishReason::ToolUse)
            ]
        );
        // Another model counts from 1 again.
        let other = ScriptedModel::with_responses([Scripted::ToolCalls {
            text: None,
            calls: vec![("read".into(), json!({}))],
        }]);
        assert_eq!(
            collect(&other, request("", "")).await[0],
            call("call-1", "read", json!({}))
        );
    }

    #[tokio::test]
    async fn max_tokens_and_refusal_finish_accordingly() {
        let model = ScriptedModel::with_responses([
            Scripted::MaxTokens("partial".into()),
            Scripted::Refusal("no".into()),
        ]);
        assert_eq!(
            collect(&model, request("", "")).await,
            [
                text("par"),
                text("tia"),
                text("l"),
                usage(0, 1),
                finish(FinishReason::MaxTokens)
            ]
        );
        assert_eq!(
            collect(&model, request("", "")).await,
            [
                text("n"),
                text("o"),
                usage(0, 1),
                finish(FinishReason::Refusal)
            ]
        );
    }

    #[tokio::test]
    async fn fail_returns_the_error_and_still_records_the_request() {
        let error = ModelError::new(ModelErrorKind::Api, "overloaded");
        let model = ScriptedModel::with_responses([Scripted::Fail(error.clone())]);
        let got = model
            .stream(request("sys", "first"), CancellationToken::new())
            .await
            .err();
        assert_eq!(got, Some(error));
        assert_eq!(model.requests(), [request("sys", "first")]);
    }

    #[tokio::test]
    async fn fail_mid_stream_yields_text_then_the_error_and_ends() {
        let error = ModelError::new(ModelErrorKind::Transport, "connection reset");
        let model = ScriptedModel::with_responses([Scripted::FailMidStream {
            text: "abc".into(),
            error: error.clone(),
        }]);
        assert_eq!(
            collect(&model, request("", "")).await,
            [text("a"), text("b"), text("c"), Err(error)]
        );
    }

    #[tokio::test]
    async fn requests_are_recorded_in_order() {
        let model = ScriptedModel::new().responder(|_| Scripted::Text("ok".into()));
        for user in ["one", "two", "three"] {
            collect(&model, request("s", user)).await;
        }
        let users: Vec<Message> = model
            .requests()
            .into_iter()
            .flat_map(|r| r.messages.to_vec())
            .collect();
        assert_eq!(
            users,
            ["one", "two", "three"].map(|u| request("s", u).messages[0].clone())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn hang_ends_only_on_cancel() {
        let model = ScriptedModel::with_responses([Scripted::Hang]);
        let cancel = CancellationToken::new();
        let mut stream = model.stream(request("", ""), cancel.clone()).await.unwrap();
        // With time paused, a timeout elapses as soon as every task is idle.
        let waited = tokio::time::timeout(Duration::from_secs(3600), stream.next()).await;
        assert!(waited.is_err(), "a hanging stream yielded {waited:?}");
        cancel.cancel();
        assert_eq!(stream.next().await, Some(Err(cancelled())));
        assert_eq!(stream.next().await, None);
    }

    #[tokio::test]
    async fn gated_waits_for_a_permit_and_takes_it() {
        let gate = Arc::new(Semaphore::new(0));
        let model = ScriptedModel::with_responses([Scripted::Gated {
            gate: gate.clone(),
            then: Box::new(Scripted::Text("go".into())),
        }]);
        let mut stream = model
            .stream(request("", ""), CancellationToken::new())
            .await
            .unwrap();
        assert!(stream.next().now_or_never().is_none());
        assert!(stream.next().now_or_never().is_none());
        gate.add_permits(1);
        let rest: Vec<_> = stream.collect().await;
        assert_eq!(
            rest,
            [
                text("g"),
                text("o"),
                usage(0, 1),
                finish(FinishReason::EndTurn)
            ]
        );
        assert_eq!(gate.available_permits(), 0, "the permit is taken for good");
    }

    #[tokio::test]
    async fn gated_respects_cancel_and_leaves_the_permit() {
        let gate = Arc::new(Semaphore::new(0));
        let model = ScriptedModel::with_responses([Scripted::Gated {
            gate: gate.clone(),
            then: Box::new(Scripted::Text("never".into())),
        }]);
        let cancel = CancellationToken::new();
        let mut stream = model.stream(request("", ""), cancel.clone()).await.unwrap();
        assert!(stream.next().now_or_never().is_none());
        cancel.cancel();
        assert_eq!(stream.next().await, Some(Err(cancelled())));
        assert_eq!(stream.next().await, None);
        gate.add_permits(1);
        assert_eq!(gate.available_permits(), 1);
    }

    #[tokio::test]
    async fn gated_fail_fails_in_the_stream_after_the_gate() {
        let gate = Arc::new(Semaphore::new(1));
        let error = ModelError::new(ModelErrorKind::Api, "late");
        let model = ScriptedModel::with_responses([Scripted::Gated {
            gate,
            then: Box::new(Scripted::Fail(error.clone())),
        }]);
        assert_eq!(collect(&model, request("", "")).await, [Err(error)]);
    }

    #[tokio::test]
    async fn cancel_stops_a_stream_between_events() {
        let model = ScriptedModel::with_responses([Scripted::Text("hello world".into())]);
        let cancel = CancellationToken::new();
        let mut stream = model.stream(request("", ""), cancel.clone()).await.unwrap();
        assert_eq!(stream.next().await, Some(text("hell")));
        cancel.cancel();
        assert_eq!(stream.next().await, Some(Err(cancelled())));
        assert_eq!(stream.next().await, None);
    }

    #[tokio::test]
    async fn responder_answers_when_the_queue_is_empty() {
        let model =
            ScriptedModel::with_responses([Scripted::Text("queued".into())]).responder(|req| {
                let last = req.messages.last().map_or(String::new(), |m| match m {
                    Message::User { content, .. } => dsh_core::content::joined_text(content),
                    _ => String::new(),
                });
                Scripted::Text(format!("echo {last}"))
            });
        assert_eq!(collect(&model, request("", "a")).await[0], text("qu"));
        model.push(Scripted::Refusal("pushed".into()));
        assert_eq!(model.remaining(), 1);
        assert_eq!(
            collect(&model, request("", "b")).await.last(),
            Some(&finish(FinishReason::Refusal))
        );
        let echoed = collect(&model, request("", "ping")).await;
        let said: String = echoed
            .iter()
            .filter_map(|e| match e {
                Ok(ModelEvent::TextDelta(t)) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(said, "echo ping");
        assert_eq!(model.requests().len(), 3);
    }

    #[tokio::test]
    async fn an_exhausted_script_is_unavailable() {
        let model = ScriptedModel::new();
        let err = model
            .stream(request("", ""), CancellationToken::new())
            .await
            .err();
        assert_eq!(
            err,
            Some(ModelError::new(
                ModelErrorKind::Unavailable,
                "the script has no response left"
            ))
        );
        assert_eq!(model.requests().len(), 1);
    }

    #[test]
    fn builders_set_name_and_images() {
        let model = ScriptedModel::new();
        assert_eq!(model.name(), "scripted");
        assert!(!Model::accepts_images(&model));
        let model = ScriptedModel::default()
            .named("demo")
            .accepting_images(true);
        assert_eq!(model.name(), "demo");
        assert!(Model::accepts_images(&model));
        assert!(format!("{model:?}").contains("\"demo\""));
    }
}
