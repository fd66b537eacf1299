//! A loopback OpenAI-compatible server for process tests: it answers each
//! chat-completions request with the next scripted reply as an event
//! stream (a tool call, a text), or holds the connection open without a
//! word (a model that is still thinking), and reports each request it read.
//! A connection that sends nothing (the command's reachability check) uses
//! no reply.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// One call of `name` with `arguments` (a JSON object).
    ToolCall {
        /// The tool.
        name: String,
        /// Its input.
        arguments: serde_json::Value,
    },
    /// A final answer.
    Text(String),
    /// Nothing, ever: the connection stays open.
    Hang,
}

/// A running server.
pub struct FakeModel {
    /// `http://127.0.0.1:<port>/v1`.
    pub base_url: String,
    /// One message per request read (its body).
    pub requests: mpsc::Receiver<String>,
}

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let body = serde_json::json!({
        "id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {body}\n\n")
}

fn events(reply: &Reply) -> String {
    let mut out = String::new();
    match reply {
        Reply::ToolCall { name, arguments } => {
            out.push_str(&chunk(
                serde_json::json!({"role": "assistant", "tool_calls": [{
                    "index": 0, "id": "call-1", "type": "function",
                    "function": {"name": name, "arguments": arguments.to_string()},
                }]}),
                None,
            ));
            out.push_str(&chunk(serde_json::json!({}), Some("tool_calls")));
        }
        Reply::Text(text) => {
            out.push_str(&chunk(
                serde_json::json!({"role": "assistant", "content": text}),
                None,
            ));
            out.push_str(&chunk(serde_json::json!({}), Some("stop")));
        }
        Reply::Hang => {}
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// Read one request's body; `None` when the peer sent nothing.
fn read_request(stream: &TcpStream) -> Option<String> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0usize;
    let mut first = true;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if first && line.trim().is_empty() {
            return None;
        }
        first = false;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(String::from_utf8_lossy(&body).into_owned())
}

impl FakeModel {
    /// Serve `replies` in order; after the last, every request hangs.
    pub fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, requests) = mpsc::channel();
        let replies = Arc::new(Mutex::new(replies.into_iter()));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (tx, replies) = (tx.clone(), Arc::clone(&replies));
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
                    let Some(body) = read_request(&stream) else {
                        return;
                    };
                    let reply = replies.lock().unwrap().next().unwrap_or(Reply::Hang);
                    let _ = tx.send(body);
                    if let Reply::Hang = reply {
                        // Held open, unanswered, until the peer goes away
                        // (a read then returns) or the test process ends.
                        let _ = stream.set_read_timeout(None);
                        let _ = (&stream).read(&mut [0; 1]);
                        return;
                    }
                    let mut stream = stream;
                    let body = events(&reply);
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.flush();
                });
            }
        });
        Self {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            requests,
        }
    }

    /// The environment a `dsh` process needs to reach this server.
    pub fn env(&self) -> [(&str, &str); 2] {
        [
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_BASE_URL", self.base_url.as_str()),
        ]
    }

    /// The first request from now on whose body contains `text`, passing
    /// over the others (each waited for within `bound`).
    pub fn request_containing(&self, text: &str, bound: Duration) -> String {
        loop {
            let body = self.next_request(bound);
            if body.contains(text) {
                return body;
            }
        }
    }

    /// Wait (bounded) for the next request's body.
    pub fn next_request(&self, bound: Duration) -> String {
        self.requests
            .recv_timeout(bound)
            .unwrap_or_else(|_| panic!("the model got no request within {bound:?}"))
    }
}
