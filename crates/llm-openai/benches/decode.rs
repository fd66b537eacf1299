//! Streamed-response throughput, in MB/s of response body: SSE parsing plus
//! chunk decoding plus tool-call assembly of a large recorded-format stream
//! (about 10 MB in 32,000 chunks: 20,000 text deltas and four parallel tool
//! calls in 12,000 interleaved argument fragments, as OpenAI shapes them),
//! fed in 16 KiB
//! network-sized pieces to [`StreamDecoder`] in memory, and the same body
//! served by a loopback HTTP/1.1 server to the full client. The server binds
//! 127.0.0.1 only and stops with the benchmark.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark code")]

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::content::ContentBlock;
use dsh_core::{
    CancellationToken, FinishReason, Message, MessageSource, Model, ModelEvent, ModelRequest,
};
use dsh_llm_openai::{OpenAiModel, StreamDecoder};
use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;

const TEXT_DELTAS: usize = 20_000;
const CALLS: usize = 4;
const FRAGMENTS_PER_CALL: usize = 3_000;
const PIECE: usize = 16 * 1024;

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1_741_570_283,
        "model": "gpt-4o-mini-2024-07-18",
        "service_tier": "default",
        "system_fingerprint": "fp_06737a9306",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        "usage": null
    });
    format!("data: {chunk}\n\n")
}

/// The large stream: text, then interleaved fragments of parallel calls.
fn body() -> String {
    let words = [
        " the",
        " parser",
        " drops",
        " the",
        " last",
        " élément",
        " when",
        " a",
        " trailing",
        " comma",
        " ends",
        " the",
        " list",
        ";",
        " fix",
        " it",
        " first",
        ".",
        "\n",
        " 👍",
    ];
    let mut body = chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    );
    for i in 0..TEXT_DELTAS {
        body.push_str(&chunk(json!({"content": words[i % words.len()]}), None));
    }
    for call in 0..CALLS {
        body.push_str(&chunk(
            json!({"tool_calls": [{"index": call, "id": format!("call_{call}"), "type": "function",
                "function": {"name": "write_file", "arguments": ""}}]}),
            None,
        ));
    }
    for call in 0..CALLS {
        body.push_str(&chunk(
            json!({"tool_calls": [{"index": call, "function": {"arguments": "{\"path\": \"src/lib.rs\", \"text\": \""}}]}),
            None,
        ));
    }
    for i in 0..FRAGMENTS_PER_CALL {
        for call in 0..CALLS {
            body.push_str(&chunk(
                json!({"tool_calls": [{"index": call, "function": {"arguments": format!("line {i} \\n")}}]}),
                None,
            ));
        }
    }
    for call in 0..CALLS {
        body.push_str(&chunk(
            json!({"tool_calls": [{"index": call, "function": {"arguments": "\"}"}}]}),
            None,
        ));
    }
    body.push_str(&chunk(json!({}), Some("tool_calls")));
    body.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 60_000}})
    ));
    body
}

/// Decode `body` in network-sized pieces; returns (text deltas, calls, finished).
fn decode(body: &[u8]) -> (usize, usize, bool) {
    let mut decoder = StreamDecoder::new();
    let mut out = Vec::new();
    let (mut texts, mut calls, mut finished) = (0, 0, false);
    for piece in body.chunks(PIECE) {
        decoder.feed(piece, &mut out).unwrap();
        for event in out.drain(..) {
            match event {
                ModelEvent::TextDelta(text) => {
                    black_box(text);
                    texts += 1;
                }
                ModelEvent::ToolCall(call) => {
                    black_box(call);
                    calls += 1;
                }
                ModelEvent::Finish(reason) => finished = reason == FinishReason::ToolUse,
                ModelEvent::Usage(_) => {}
            }
        }
    }
    (texts, calls, finished)
}

/// The HTTP response carrying `body`, chunked in network-sized pieces.
fn http_response(body: &str) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for piece in body.as_bytes().chunks(PIECE) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// A loopback server answering every request with `response`.
async fn serve(response: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let response: &'static [u8] = Box::leak(response.into_boxed_slice());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 8192];
                // Read the head and the body (its length from the head).
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let _ = socket.write_all(response).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    addr
}

fn request() -> ModelRequest {
    ModelRequest {
        model: None,
        system: "bench".into(),
        messages: dsh_core::Transcript::from(vec![Message::User {
            content: vec![ContentBlock::text("go")],
            source: MessageSource::User,
        }]),
        tools: Vec::new(),
        max_output_tokens: None,
        reasoning_effort: None,
    }
}

fn benches(c: &mut Criterion) {
    let body = body();
    let bytes = body.len() as u64;
    assert_eq!(decode(body.as_bytes()), (TEXT_DELTAS, CALLS, true));

    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Bytes(bytes));
    group.sample_size(20);
    group.bench_function("decode_in_memory", |b| {
        b.iter(|| black_box(decode(black_box(body.as_bytes()))));
    });

    let rt: Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = rt.block_on(serve(http_response(&body)));
    let model = OpenAiModel::builder("m")
        .base_url(format!("http://{addr}/v1"))
        .without_api_key()
        .build()
        .unwrap();
    let run = || async {
        let stream = model
            .stream(request(), CancellationToken::new())
            .await
            .unwrap();
        let events: Vec<_> = stream.collect().await;
        assert!(matches!(
            events.last(),
            Some(Ok(ModelEvent::Finish(FinishReason::ToolUse)))
        ));
        events.len()
    };
    assert_eq!(rt.block_on(run()), TEXT_DELTAS + CALLS + 2);
    group.bench_function("client_over_loopback", |b| {
        b.iter(|| black_box(rt.block_on(run())));
    });
    group.finish();
}

criterion_group!(stream, benches);
criterion_main!(stream);
