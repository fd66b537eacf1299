//! A loopback OpenAI-compatible chat-completions server that holds `dsh`
//! to the API's rules and plays a scripted session. Every request is
//! checked as the real API checks it before any reply: the route, the
//! bearer key, `stream: true`, roles in order (one leading `system`, a
//! `user` before any answer), every assistant message with `tool_calls`
//! followed by exactly one `tool` message per call id and nothing else in
//! between, no `tool` message answering no call, arguments that parse as a
//! JSON object, tools that were offered. A request that breaks a rule is
//! answered HTTP 400 with an OpenAI-shaped error body and recorded, so a
//! test can assert there were none. A valid one is answered by the script
//! (a function of the conversation, so concurrent agents each get their
//! own next step) as a real event stream: content and argument fragments
//! over several chunks, then the usage with cached prompt tokens.
//!
//! A script may block on a [`Board`] (a named mark that another request
//! sets), so the order in which concurrent agents see each other's results
//! is fixed by causality, never by timing.

use std::collections::{BTreeSet, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// How long a script may block on a [`Board`] mark before the test fails.
const MARK_BOUND: Duration = Duration::from_secs(60);

/// One call the model makes.
#[derive(Debug, Clone)]
pub struct Call {
    /// The tool.
    pub name: String,
    /// Its input.
    pub arguments: Value,
}

/// Build a [`Call`].
pub fn call(name: &str, arguments: Value) -> Call {
    Call {
        name: name.to_owned(),
        arguments,
    }
}

/// What the model answers to one request: optional text, then calls.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Streamed content.
    pub text: Option<String>,
    /// Tool calls; none makes this the final answer (`finish_reason: stop`).
    pub calls: Vec<Call>,
}

impl Answer {
    /// A final answer.
    pub fn text(text: &str) -> Self {
        Self {
            text: Some(text.to_owned()),
            calls: Vec::new(),
        }
    }

    /// Calls, with no text.
    pub fn calls(calls: Vec<Call>) -> Self {
        Self { text: None, calls }
    }

    /// Calls after a sentence.
    pub fn saying(text: &str, calls: Vec<Call>) -> Self {
        Self {
            text: Some(text.to_owned()),
            calls,
        }
    }
}

/// One checked request, as the script sees it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The whole body.
    pub body: Value,
    /// `messages`.
    pub messages: Vec<Value>,
}

impl Request {
    /// The text of the first user message: it names the agent.
    pub fn task(&self) -> String {
        self.messages
            .iter()
            .find(|m| m["role"] == "user")
            .map(content)
            .unwrap_or_default()
    }

    /// How many assistant messages the conversation holds (the step).
    pub fn step(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }

    /// The text of the last message.
    pub fn last(&self) -> String {
        self.messages.last().map(content).unwrap_or_default()
    }

    /// Whether any message's text contains `needle`.
    pub fn mentions(&self, needle: &str) -> bool {
        self.messages.iter().any(|m| content(m).contains(needle))
    }

    /// The text of every `tool` message, in order.
    pub fn tool_results(&self) -> Vec<String> {
        self.messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(content)
            .collect()
    }
}

/// A message's text: a string, or the text parts of an array.
pub fn content(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Named marks one request sets and another waits for.
#[derive(Default)]
pub struct Board {
    marks: Mutex<HashSet<String>>,
    changed: Condvar,
}

impl Board {
    /// Set `mark`.
    pub fn mark(&self, mark: &str) {
        self.marks.lock().unwrap().insert(mark.to_owned());
        self.changed.notify_all();
    }

    /// Whether `mark` is set.
    pub fn has(&self, mark: &str) -> bool {
        self.marks.lock().unwrap().contains(mark)
    }

    /// Block until `mark` is set; panics (failing the request, and so the
    /// test) after a generous bound.
    pub fn wait_for(&self, mark: &str) {
        let marks = self.marks.lock().unwrap();
        let (marks, timeout) = self
            .changed
            .wait_timeout_while(marks, MARK_BOUND, |marks| !marks.contains(mark))
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "the mark {mark} was never set: {marks:?}"
        );
    }
}

type Script = dyn Fn(&Request, &Board) -> Answer + Send + Sync;

/// A running server.
pub struct ChatServer {
    /// `http://127.0.0.1:<port>/v1`.
    pub base_url: String,
    /// The key it accepts.
    pub key: &'static str,
    /// Every request that broke a rule, with the reason.
    pub violations: Arc<Mutex<Vec<String>>>,
    /// How many valid requests it answered.
    pub answered: Arc<Mutex<usize>>,
    /// How many HTTP requests it read, valid or not.
    pub received: Arc<Mutex<usize>>,
    /// The marks its script set.
    pub board: Arc<Board>,
}

/// The key the server accepts.
pub const KEY: &str = "sk-loopback";

impl ChatServer {
    /// Serve `script` on a loopback port.
    pub fn start(script: impl Fn(&Request, &Board) -> Answer + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let script: Arc<Script> = Arc::new(script);
        let violations = Arc::new(Mutex::new(Vec::new()));
        let answered = Arc::new(Mutex::new(0));
        let received = Arc::new(Mutex::new(0));
        let board = Arc::new(Board::default());
        let counts = Counts {
            violations: Arc::clone(&violations),
            answered: Arc::clone(&answered),
            received: Arc::clone(&received),
        };
        let marks = Arc::clone(&board);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (script, counts, marks) =
                    (Arc::clone(&script), counts.clone(), Arc::clone(&marks));
                std::thread::spawn(move || serve(stream, script.as_ref(), &counts, &marks));
            }
        });
        Self {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            key: KEY,
            violations,
            answered,
            received,
            board,
        }
    }

    /// The environment a `dsh` process needs to reach this server.
    pub fn env(&self) -> [(&str, &str); 2] {
        [
            ("OPENAI_API_KEY", self.key),
            ("OPENAI_BASE_URL", self.base_url.as_str()),
        ]
    }

    /// Fail the test if any request broke a rule.
    pub fn assert_clean(&self) {
        let violations = self.violations.lock().unwrap();
        assert!(
            violations.is_empty(),
            "requests broke the API's rules: {violations:#?}"
        );
    }
}

/// What the server counts, shared by its connections.
#[derive(Clone)]
struct Counts {
    violations: Arc<Mutex<Vec<String>>>,
    answered: Arc<Mutex<usize>>,
    received: Arc<Mutex<usize>>,
}

/// One HTTP request: method, path, headers (lower-case names), body.
struct Http {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Read one request; `None` when the peer sent nothing (a reachability
/// check) or went away.
fn read_http(stream: &TcpStream) -> Option<Http> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    if reader.read_line(&mut first).ok()? == 0 || first.trim().is_empty() {
        return None;
    }
    let mut parts = first.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Http {
        method,
        path,
        headers,
        body,
    })
}

fn serve(stream: TcpStream, script: &Script, counts: &Counts, board: &Board) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    let Some(http) = read_http(&stream) else {
        return;
    };
    *counts.received.lock().unwrap() += 1;
    let mut stream = stream;
    let request = match check(&http) {
        Ok(request) => request,
        Err((status, reason)) => {
            counts.violations.lock().unwrap().push(reason.clone());
            let body = json!({"error": {
                "message": reason, "type": "invalid_request_error", "param": "messages", "code": null,
            }})
            .to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            return;
        }
    };
    let answer = script(&request, board);
    *counts.answered.lock().unwrap() += 1;
    let body = events(&answer, &request);
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.flush();
}

/// Check one request as the API does: the checked request, or the status
/// line and the reason.
fn check(http: &Http) -> Result<Request, (&'static str, String)> {
    let bad = |reason: String| ("400 Bad Request", reason);
    if http.method != "POST" || http.path != "/v1/chat/completions" {
        return Err((
            "404 Not Found",
            format!("no route {} {}", http.method, http.path),
        ));
    }
    let auth = http
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.as_str());
    if auth != Some(&format!("Bearer {KEY}")) {
        return Err(("401 Unauthorized", format!("bad authorization {auth:?}")));
    }
    let body: Value = serde_json::from_slice(&http.body)
        .map_err(|err| bad(format!("the body is not JSON: {err}")))?;
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err(bad("`model` is missing".to_owned()));
    }
    if body["stream"] != true {
        return Err(bad("`stream` is not true".to_owned()));
    }
    let offered: BTreeSet<&str> = body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter(|tool| {
                    tool["type"] == "function" && tool["function"]["parameters"].is_object()
                })
                .filter_map(|tool| tool["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let messages = body["messages"]
        .as_array()
        .filter(|messages| !messages.is_empty())
        .ok_or_else(|| bad("`messages` is missing or empty".to_owned()))?
        .clone();
    // The ids of the last assistant message's calls not yet answered.
    let mut pending: Vec<String> = Vec::new();
    let mut seen_user = false;
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if role != "tool" && !pending.is_empty() {
            return Err(bad(format!(
                "messages[{i}]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'; still unanswered: {pending:?}"
            )));
        }
        match role {
            "system" if i == 0 => {}
            "system" => {
                return Err(bad(format!(
                    "messages[{i}]: a system message after the first"
                )));
            }
            "user" => seen_user = true,
            "assistant" => {
                if !seen_user {
                    return Err(bad(format!(
                        "messages[{i}]: an assistant message before any user message"
                    )));
                }
                let calls = message["tool_calls"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if calls.is_empty() && content(message).is_empty() {
                    return Err(bad(format!(
                        "messages[{i}]: an assistant message with neither content nor tool_calls"
                    )));
                }
                for call in calls {
                    let id = call["id"].as_str().unwrap_or_default();
                    let name = call["function"]["name"].as_str().unwrap_or_default();
                    if id.is_empty() || call["type"] != "function" {
                        return Err(bad(format!(
                            "messages[{i}]: a tool call without an id or type function"
                        )));
                    }
                    if !offered.contains(name) {
                        return Err(bad(format!(
                            "messages[{i}]: a call of `{name}`, which is not among the tools"
                        )));
                    }
                    let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
                    match serde_json::from_str::<Value>(arguments) {
                        Ok(Value::Object(_)) => {}
                        _ => {
                            return Err(bad(format!(
                                "messages[{i}]: the arguments of `{id}` are not a JSON object: {arguments:?}"
                            )));
                        }
                    }
                    if pending.contains(&id.to_owned()) {
                        return Err(bad(format!("messages[{i}]: the call id `{id}` twice")));
                    }
                    pending.push(id.to_owned());
                }
            }
            "tool" => {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                match pending.iter().position(|p| p == id) {
                    Some(at) => {
                        pending.remove(at);
                    }
                    None => {
                        return Err(bad(format!(
                            "messages[{i}]: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (`{id}`)"
                        )));
                    }
                }
            }
            other => return Err(bad(format!("messages[{i}]: unknown role `{other}`"))),
        }
    }
    if !pending.is_empty() {
        return Err(bad(format!(
            "the last tool calls are unanswered: {pending:?}"
        )));
    }
    if !matches!(
        messages.last().and_then(|m| m["role"].as_str()),
        Some("user" | "tool")
    ) {
        return Err(bad(
            "the conversation must end in a user or tool message".to_owned()
        ));
    }
    Ok(Request { body, messages })
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-loopback", "object": "chat.completion.chunk", "created": 0, "model": "loopback",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {body}\n\n")
}

/// Split `text` in two at a character boundary near its middle.
fn halves(text: &str) -> (&str, &str) {
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid += 1;
    }
    text.split_at(mid)
}

/// The event stream of `answer`: content in two fragments, each call's
/// arguments in two fragments, then the finish, the usage and `[DONE]`.
/// Usage: a token per four bytes of the request in, of the answer out,
/// with the system prompt's share reported as cached.
fn events(answer: &Answer, request: &Request) -> String {
    let mut out = String::new();
    let mut first = true;
    // Only the first chunk names the role, as the API does.
    let mut opening = |mut delta: Value| {
        if std::mem::take(&mut first) {
            delta["role"] = json!("assistant");
        }
        delta
    };
    if let Some(text) = &answer.text {
        let (a, b) = halves(text);
        out.push_str(&chunk(opening(json!({"content": a})), None));
        out.push_str(&chunk(json!({"content": b}), None));
    }
    for (index, call) in answer.calls.iter().enumerate() {
        let arguments = call.arguments.to_string();
        let (a, b) = halves(&arguments);
        let id = format!("call_{}_{index}", request.step());
        out.push_str(&chunk(
            opening(json!({"tool_calls": [{
                "index": index, "id": id, "type": "function",
                "function": {"name": call.name, "arguments": a},
            }]})),
            None,
        ));
        out.push_str(&chunk(
            json!({"tool_calls": [{"index": index, "function": {"arguments": b}}]}),
            None,
        ));
    }
    let finish = if answer.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push_str(&chunk(json!({}), Some(finish)));
    let prompt = request.body.to_string().len() as u64 / 4;
    let cached = request
        .messages
        .first()
        .map_or(0, |m| content(m).len() as u64 / 4);
    let completion = (answer.text.as_deref().unwrap_or_default().len()
        + answer
            .calls
            .iter()
            .map(|c| c.arguments.to_string().len())
            .sum::<usize>()) as u64
        / 4
        + 1;
    let usage = json!({
        "id": "chatcmpl-loopback", "object": "chat.completion.chunk", "created": 0, "model": "loopback",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            // As a reasoning model reports it: part of the completion.
            "completion_tokens_details": {"reasoning_tokens": completion / 2},
        },
    });
    out.push_str(&format!("data: {usage}\n\n"));
    out.push_str("data: [DONE]\n\n");
    out
}
