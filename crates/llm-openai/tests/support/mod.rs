//! A scripted HTTP/1.1 server on loopback for the client tests: each
//! connection reads one request, records it, and plays the next queued
//! [`Reply`] byte for byte (chunked event streams, error statuses, a
//! connection dropped mid-body, a server that stalls or never answers). It
//! reports every connection the client closes, so a test can see a
//! cancellation reach the socket. It speaks only to 127.0.0.1 and stops with
//! the test's runtime.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_core::{ModelError, ModelEvent, ModelStream};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The key every test client sends; it must never appear in an error.
pub const KEY: &str = "sk-test-DSH0123456789abcdefSECRETkey";

/// How OpenAI masks a key in its 401 message.
pub fn masked_key() -> String {
    format!("{}{}{}", &KEY[..8], "*".repeat(20), &KEY[KEY.len() - 4..])
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 `text/event-stream`, chunked, one HTTP chunk per piece, then the end.
    Stream(Vec<Vec<u8>>),
    /// As `Stream`, but the connection is closed without the final chunk.
    StreamThenDrop(Vec<Vec<u8>>),
    /// The pieces, then silence until the client closes the connection.
    StreamThenStall(Vec<Vec<u8>>),
    /// A status with headers and a JSON body.
    Status {
        /// The status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// The body.
        body: String,
    },
    /// These bytes as they are, then close.
    Raw(Vec<u8>),
    /// Read the request and never answer, until the client closes.
    Silent,
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The request line, for example `POST /v1/chat/completions HTTP/1.1`.
    pub line: String,
    /// Header names (lower-case) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    arrived: tokio::sync::Notify,
    closed: mpsc::UnboundedSender<usize>,
}

/// The server; it stops accepting when dropped.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    closed: tokio::sync::Mutex<mpsc::UnboundedReceiver<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// A server on a free loopback port answering with `replies`, in order.
    pub async fn start(replies: impl IntoIterator<Item = Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
            arrived: tokio::sync::Notify::new(),
            closed: tx,
        });
        let accept = shared.clone();
        let task = tokio::spawn(async move {
            let mut index = 0;
            while let Ok((socket, _)) = listener.accept().await {
                let shared = accept.clone();
                tokio::spawn(serve(socket, index, shared));
                index += 1;
            }
        });
        Self {
            addr,
            shared,
            closed: tokio::sync::Mutex::new(rx),
            task,
        }
    }

    /// The base URL to configure a client with.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Wait (at most 5 s) until `n` requests have arrived.
    pub async fn wait_for_requests(&self, n: usize) {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let arrived = self.shared.arrived.notified();
                if self.requests().len() >= n {
                    return;
                }
                arrived.await;
            }
        })
        .await
        .expect("the requests did not arrive within 5 s");
    }

    /// Wait (at most 5 s) until the client closes a stalled or silent
    /// connection; returns its index.
    pub async fn closed(&self) -> usize {
        let mut rx = self.closed.lock().await;
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("the client did not close the connection within 5 s")
            .unwrap()
    }
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let line = lines.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded {
        line,
        headers,
        body,
    })
}

const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";

async fn write_chunks(socket: &mut TcpStream, pieces: &[Vec<u8>]) -> std::io::Result<()> {
    socket.write_all(STREAM_HEAD.as_bytes()).await?;
    for piece in pieces {
        socket
            .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
            .await?;
        socket.write_all(piece).await?;
        socket.write_all(b"\r\n").await?;
        socket.flush().await?;
    }
    Ok(())
}

/// Wait until the peer closes (a read returns 0 or fails).
async fn until_closed(socket: &mut TcpStream) {
    let mut chunk = [0u8; 1024];
    loop {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Other",
    }
}

async fn serve(mut socket: TcpStream, index: usize, shared: Arc<Shared>) {
    socket.set_nodelay(true).unwrap();
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    shared.requests.lock().unwrap().push(request);
    shared.arrived.notify_waiters();
    let reply = shared.replies.lock().unwrap().pop_front();
    let Some(reply) = reply else {
        let _ = socket
            .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 25\r\nconnection: close\r\n\r\nthe script has no replies")
            .await;
        return;
    };
    match reply {
        Reply::Stream(pieces) => {
            if write_chunks(&mut socket, &pieces).await.is_ok() {
                let _ = socket.write_all(b"0\r\n\r\n").await;
            }
        }
        Reply::StreamThenDrop(pieces) => {
            let _ = write_chunks(&mut socket, &pieces).await;
            // Dropping the socket closes it without the final chunk.
        }
        Reply::StreamThenStall(pieces) => {
            let _ = write_chunks(&mut socket, &pieces).await;
            until_closed(&mut socket).await;
            let _ = shared.closed.send(index);
        }
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                reason(status),
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
        }
        Reply::Raw(bytes) => {
            let _ = socket.write_all(&bytes).await;
        }
        Reply::Silent => {
            until_closed(&mut socket).await;
            let _ = shared.closed.send(index);
        }
    }
    let _ = socket.shutdown().await;
}

/// The text of fixture `name` under `tests/fixtures/`.
pub fn fixture(name: &str) -> String {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", name]
        .iter()
        .collect();
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// `text` cut into pieces of `size` bytes (splitting lines and characters).
pub fn pieces(text: &str, size: usize) -> Vec<Vec<u8>> {
    text.as_bytes().chunks(size).map(<[u8]>::to_vec).collect()
}

/// `text` as one piece per SSE event (as real servers flush).
pub fn events(text: &str) -> Vec<Vec<u8>> {
    text.split_inclusive("\n\n")
        .map(|event| event.as_bytes().to_vec())
        .collect()
}

/// Every item of `stream`, bounded by 10 s.
pub async fn collect(stream: ModelStream) -> Vec<Result<ModelEvent, ModelError>> {
    tokio::time::timeout(Duration::from_secs(10), stream.collect())
        .await
        .expect("the stream did not end within 10 s")
}

/// Assert that neither rendering of `error` shows the key or a run of 8 of its characters.
pub fn assert_no_key(error: &dyn std::fmt::Debug, display: &str) {
    let debug = format!("{error:?}");
    for text in [display, debug.as_str()] {
        assert!(!text.contains(KEY), "the key leaked: {text}");
        for window in KEY.as_bytes().windows(8) {
            let window = std::str::from_utf8(window).unwrap();
            assert!(
                !text.contains(window),
                "part of the key ({window}) leaked: {text}"
            );
        }
    }
}

/// The waits the client chose before its retries while `work` ran on this
/// thread (a current-thread runtime's test), read from the `wait_ms` field
/// of its "retrying" warnings: which wait it took (the server's
/// `Retry-After` or its own backoff) is shown by value, never by a clock.
pub async fn retry_waits<T>(work: impl Future<Output = T>) -> (T, Vec<Duration>) {
    let waits = Arc::new(Mutex::new(Vec::new()));
    let dispatch = tracing::Dispatch::new(WaitRecorder(Arc::clone(&waits)));
    let guard = tracing::dispatcher::set_default(&dispatch);
    let output = work.await;
    drop(guard);
    let waits = waits.lock().unwrap().clone();
    (output, waits)
}

/// A subscriber that keeps every event's `wait_ms` field and nothing else.
struct WaitRecorder(Arc<Mutex<Vec<Duration>>>);

impl tracing::Subscriber for WaitRecorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct WaitMs(Option<u64>);
        impl tracing::field::Visit for WaitMs {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "wait_ms" {
                    self.0 = Some(value);
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut wait = WaitMs(None);
        event.record(&mut wait);
        if let Some(ms) = wait.0 {
            self.0.lock().unwrap().push(Duration::from_millis(ms));
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
