//! The client against a real HTTP server on loopback that speaks the OpenAI
//! wire format with recorded responses (`tests/fixtures/`): streaming text,
//! parallel tool calls from interleaved fragments, usage, every finish
//! reason, reasoning content, retries (429 with `Retry-After` in both forms,
//! 5xx, exhaustion, a wait too long), dropped and truncated streams, idle
//! timeouts, cancellation reaching the socket, a bad key (no retry, no leak),
//! configuration errors, and the exact request body (an insta snapshot).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::task::Poll;
use std::time::Duration;

use dsh_core::content::ContentBlock;
use dsh_core::{
    CallId, FinishReason, Message, MessageSource, Model, ModelError, ModelErrorKind, ModelEvent,
    ModelRequest, SessionId, ToolCall, ToolInput, ToolSpec, Usage,
};
use dsh_llm_openai::{ConfigError, OpenAiModel, RetryPolicy, TokenLimitField};
use futures::StreamExt;
use serde_json::json;
use support::*;
use tokio_util::sync::CancellationToken;

/// Retries with waits short enough for tests.
fn quick_retries(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        max_retry_after: Duration::from_secs(10),
    }
}

fn client(server: &Server) -> OpenAiModel {
    OpenAiModel::builder("gpt-4o-mini")
        .base_url(server.base_url())
        .api_key(KEY.to_owned())
        .idle_timeout(Duration::from_secs(5))
        .retry(quick_retries(3))
        .build()
        .unwrap()
}

fn request(text: &str) -> ModelRequest {
    ModelRequest {
        model: None,
        system: "You are terse.".into(),
        messages: dsh_core::Transcript::from(vec![Message::User {
            content: vec![ContentBlock::text(text)],
            source: MessageSource::User,
        }]),
        tools: Vec::new(),
        max_output_tokens: None,
        reasoning_effort: None,
    }
}

/// Every item of the response to `request`; every error among them is checked for the key.
async fn run(model: &OpenAiModel, request: ModelRequest) -> Vec<Result<ModelEvent, ModelError>> {
    let stream = model
        .stream(request, CancellationToken::new())
        .await
        .unwrap();
    let events = collect(stream).await;
    for err in events.iter().filter_map(|event| event.as_ref().err()) {
        assert_no_key(err, &err.to_string());
    }
    events
}

/// The error a request fails with before streaming, checked for the key.
async fn start_error(model: &OpenAiModel) -> ModelError {
    match model.stream(request("hi"), CancellationToken::new()).await {
        Ok(_) => panic!("the request unexpectedly streamed"),
        Err(err) => {
            assert_no_key(&err, &err.to_string());
            err
        }
    }
}

fn text(events: &[Result<ModelEvent, ModelError>]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            Ok(ModelEvent::TextDelta(delta)) => Some(delta.as_str()),
            _ => None,
        })
        .collect()
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

fn status(status: u16, fixture_name: &str, headers: &[(&str, &str)]) -> Reply {
    Reply::Status {
        status,
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
        body: fixture(fixture_name),
    }
}

#[tokio::test]
async fn text_streams_as_deltas_then_usage_then_end_turn() {
    let server = Server::start([Reply::Stream(events(&fixture("text.sse")))]).await;
    let events = run(&client(&server), request("hi")).await;
    assert_eq!(
        events,
        [
            Ok(ModelEvent::TextDelta("Hello".into())),
            Ok(ModelEvent::TextDelta(" there".into())),
            Ok(ModelEvent::TextDelta(", wörld 👋".into())),
            Ok(ModelEvent::TextDelta("!".into())),
            usage(19, 10),
            finish(FinishReason::EndTurn),
        ]
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn bytes_split_anywhere_give_the_same_response() {
    let body = fixture("text.sse");
    let whole = run(
        &client(&Server::start([Reply::Stream(events(&body))]).await),
        request("hi"),
    )
    .await;
    for size in [1, 3, 7, 50] {
        let server = Server::start([Reply::Stream(pieces(&body, size))]).await;
        let split = run(&client(&server), request("hi")).await;
        // Deltas may arrive regrouped by the network but say the same.
        assert_eq!(text(&split), text(&whole), "pieces of {size}");
        assert_eq!(split.last(), whole.last());
        assert_eq!(split[split.len() - 2], usage(19, 10));
    }
    // CRLF line endings, as some proxies send.
    let crlf = body.replace('\n', "\r\n");
    let server = Server::start([Reply::Stream(pieces(&crlf, 5))]).await;
    assert_eq!(
        text(&run(&client(&server), request("hi")).await),
        "Hello there, wörld 👋!"
    );
}

#[tokio::test]
async fn parallel_tool_calls_are_assembled_from_interleaved_fragments() {
    let server = Server::start([Reply::Stream(events(&fixture("tool_calls.sse")))]).await;
    let events = run(&client(&server), request("weather?")).await;
    // The arguments are kept as the model wrote them, spacing and all.
    let call = |id: &str, name: &str, input: &str| {
        Ok(ModelEvent::ToolCall(ToolCall {
            call_id: CallId::new(id),
            name: name.to_owned(),
            input: ToolInput::from_json(input).unwrap(),
        }))
    };
    assert_eq!(
        events,
        [
            Ok(ModelEvent::TextDelta("Checking all three.".into())),
            call("call_weatherParis01", "get_weather", r#"{"city": "Paris"}"#),
            call(
                "call_weatherTokyo02",
                "get_weather",
                r#"{"city": "Tōkyō", "unit": "c"}"#
            ),
            call(
                "call_readFile03",
                "read_file",
                r#"{"path": "src/main.rs", "lines": [1, 20]}"#
            ),
            usage(81, 64),
            finish(FinishReason::ToolUse),
        ]
    );
}

#[tokio::test]
async fn every_finish_reason_maps_onto_the_core_vocabulary() {
    for (fixture_name, expected) in [
        ("text.sse", FinishReason::EndTurn),
        ("tool_calls.sse", FinishReason::ToolUse),
        ("finish_length.sse", FinishReason::MaxTokens),
        ("finish_content_filter.sse", FinishReason::Refusal),
        (
            "finish_unknown.sse",
            FinishReason::Other("insufficient_system_resource".into()),
        ),
    ] {
        let server = Server::start([Reply::Stream(events(&fixture(fixture_name)))]).await;
        let events = run(&client(&server), request("hi")).await;
        assert_eq!(events.last(), Some(&finish(expected)), "{fixture_name}");
        assert!(
            matches!(events[events.len() - 2], Ok(ModelEvent::Usage(_))),
            "{fixture_name}: usage comes right before the finish"
        );
    }
}

#[tokio::test]
async fn deepseek_reasoning_is_not_shown_as_text_and_keep_alives_are_skipped() {
    let server = Server::start([Reply::Stream(events(&fixture("deepseek_reasoning.sse")))]).await;
    let events = run(&client(&server), request("the answer?")).await;
    assert_eq!(
        events,
        [
            Ok(ModelEvent::TextDelta("The answer".into())),
            Ok(ModelEvent::TextDelta(" is 42.".into())),
            // The reasoning is not text, but its tokens are counted.
            Ok(ModelEvent::Usage(Usage {
                input_tokens: 13,
                output_tokens: 42,
                reasoning_tokens: 30,
                ..Usage::default()
            })),
            finish(FinishReason::EndTurn),
        ]
    );
}

#[tokio::test]
async fn a_429_with_retry_after_seconds_is_waited_out_then_succeeds() {
    let server = Server::start([
        status(429, "error_429.json", &[("retry-after", "1")]),
        Reply::Stream(events(&fixture("text.sse"))),
    ])
    .await;
    // A backoff far longer than the server's wish: the wait taken is the server's.
    let model = OpenAiModel::builder("gpt-4o-mini")
        .base_url(server.base_url())
        .api_key(KEY.to_owned())
        .retry(RetryPolicy {
            initial_backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(30),
            ..RetryPolicy::default()
        })
        .build()
        .unwrap();
    let (events, waits) = retry_waits(run(&model, request("hi"))).await;
    assert_eq!(events.last(), Some(&finish(FinishReason::EndTurn)));
    assert_eq!(server.requests().len(), 2);
    assert_eq!(waits, [Duration::from_secs(1)]);
}

#[tokio::test]
async fn a_429_with_an_http_date_retry_after_is_waited_out_then_succeeds() {
    let at = httpdate_in(2);
    let server = Server::start([
        status(429, "error_429.json", &[("retry-after", at.as_str())]),
        Reply::Stream(events(&fixture("text.sse"))),
    ])
    .await;
    let model = OpenAiModel::builder("gpt-4o-mini")
        .base_url(server.base_url())
        .api_key(KEY.to_owned())
        .retry(RetryPolicy {
            initial_backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(30),
            ..RetryPolicy::default()
        })
        .build()
        .unwrap();
    let (events, waits) = retry_waits(run(&model, request("hi"))).await;
    assert_eq!(events.last(), Some(&finish(FinishReason::EndTurn)));
    assert_eq!(server.requests().len(), 2);
    // The date has whole seconds, two from when it was made: the wait is
    // what is left of them, never the backoff.
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(waits[0] <= Duration::from_secs(2), "{waits:?}");
}

/// An HTTP-date `seconds` from now.
fn httpdate_in(seconds: u64) -> String {
    let at = std::time::SystemTime::now() + Duration::from_secs(seconds);
    // IMF-fixdate, as servers send it.
    let secs = at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let days = secs / 86_400;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!("{weekday}, {day:02} {month} {year} {h:02}:{m:02}:{s:02} GMT")
}

#[tokio::test]
async fn a_500_then_success_is_retried() {
    let server = Server::start([
        status(500, "error_500.json", &[]),
        Reply::Stream(events(&fixture("text.sse"))),
    ])
    .await;
    let events = run(&client(&server), request("hi")).await;
    assert_eq!(text(&events), "Hello there, wörld 👋!");
    assert_eq!(server.requests().len(), 2);
    // The retry sends the same body.
    assert_eq!(server.requests()[0].body, server.requests()[1].body);
}

#[tokio::test]
async fn exhausted_retries_report_the_last_status_and_the_attempts() {
    let server = Server::start([
        status(503, "error_500.json", &[]),
        status(502, "error_500.json", &[]),
        status(500, "error_500.json", &[]),
        Reply::Stream(events(&fixture("text.sse"))),
    ])
    .await;
    let err = start_error(&client(&server)).await;
    assert_eq!(err.kind, ModelErrorKind::Api);
    assert_eq!(
        err.to_string(),
        "API error: HTTP 500 Internal Server Error: The server had an error while processing your request. Sorry about that! (server_error) (gave up after 3 attempts)"
    );
    assert_eq!(server.requests().len(), 3, "bounded attempts");
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_is_not_waited_for() {
    let server = Server::start([
        status(429, "error_429.json", &[("retry-after", "3600")]),
        Reply::Stream(events(&fixture("text.sse"))),
    ])
    .await;
    let (err, waits) = retry_waits(start_error(&client(&server))).await;
    assert!(waits.is_empty(), "nothing is waited for: {waits:?}");
    assert_eq!(server.requests().len(), 1);
    assert_eq!(err.kind, ModelErrorKind::Api);
    assert!(
        err.message
            .starts_with("HTTP 429 Too Many Requests: Rate limit reached"),
        "{err}"
    );
    assert!(
        err.message
            .ends_with("(the server asked to retry after 3600s, longer than the 10s allowed)"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_bad_key_is_a_clear_error_without_retry_or_leak() {
    let body = fixture("error_401.json")
        .replace("{KEY}", KEY)
        .replace("{MASKED}", &masked_key());
    let server = Server::start([Reply::Status {
        status: 401,
        headers: Vec::new(),
        body,
    }])
    .await;
    let model = client(&server);
    let err = start_error(&model).await;
    assert_eq!(err.kind, ModelErrorKind::Api);
    assert_eq!(server.requests().len(), 1, "a 401 is not retried");
    assert!(
        err.message
            .starts_with("HTTP 401 Unauthorized: Incorrect API key provided: [redacted]"),
        "{err}"
    );
    assert!(
        err.message
            .ends_with("(invalid_api_key) (check the API key)"),
        "{err}"
    );
    assert_no_key(&err, &err.to_string());
    assert_no_key(&model, "");
}

#[tokio::test]
async fn a_400_is_not_retried_and_says_what_the_server_said() {
    let server = Server::start([status(400, "error_400.json", &[])]).await;
    let err = start_error(&client(&server)).await;
    assert_eq!(
        err.to_string(),
        "API error: HTTP 400 Bad Request: Invalid value for 'content': expected a string, got null. (invalid_request_error)"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_error_mid_stream_ends_the_stream_with_it_redacted() {
    let body = fixture("error_midstream.sse").replace("{KEY}", KEY);
    let server = Server::start([Reply::Stream(events(&body))]).await;
    let events = run(&client(&server), request("hi")).await;
    assert_eq!(events[0], Ok(ModelEvent::TextDelta("Starting".into())));
    assert_eq!(events.len(), 2);
    let err = events[1].clone().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Api);
    assert!(err.message.contains("The server had an error"), "{err}");
    assert_no_key(&err, &err.to_string());
    assert_eq!(
        server.requests().len(),
        1,
        "nothing is retried once output began"
    );
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_an_error_not_a_truncation() {
    let body = fixture("text.sse");
    let cut: Vec<Vec<u8>> = events(&body).into_iter().take(3).collect();
    let server = Server::start([Reply::StreamThenDrop(cut), Reply::Stream(events(&body))]).await;
    let events = run(&client(&server), request("hi")).await;
    assert_eq!(text(&events), "Hello there");
    let err = events.last().unwrap().clone().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Transport, "{err}");
    assert!(
        err.message
            .starts_with("the connection failed mid-response"),
        "{err}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Ok(ModelEvent::Finish(_)))),
        "no finish after a drop"
    );
    assert_eq!(server.requests().len(), 1, "a begun stream is not retried");
}

#[tokio::test]
async fn a_body_that_ends_before_the_finish_is_a_protocol_error() {
    // No chunked framing and no length: the body ends when the connection does.
    let mut raw =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n".to_vec();
    for event in events(&fixture("text.sse")).into_iter().take(3) {
        raw.extend(event);
    }
    let server = Server::start([Reply::Raw(raw)]).await;
    let events = run(&client(&server), request("hi")).await;
    assert_eq!(text(&events), "Hello there");
    let err = events.last().unwrap().clone().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Protocol);
    assert_eq!(
        err.message,
        "the response ended before the model finished (no finish reason)"
    );
}

#[tokio::test]
async fn a_server_silent_mid_stream_hits_the_idle_timeout() {
    let first: Vec<Vec<u8>> = events(&fixture("text.sse")).into_iter().take(2).collect();
    let server = Server::start([Reply::StreamThenStall(first)]).await;
    let model = OpenAiModel::builder("m")
        .base_url(server.base_url())
        .api_key(KEY.to_owned())
        .idle_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let stream = model
        .stream(request("hi"), CancellationToken::new())
        .await
        .unwrap();
    let events = collect(stream).await;
    assert_eq!(text(&events), "Hello");
    let err = events.last().unwrap().clone().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Transport);
    assert_eq!(
        err.message,
        "the server sent nothing for 300ms in the middle of the response"
    );
    server.closed().await;
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_and_is_retried() {
    let server = Server::start([Reply::Silent, Reply::Silent]).await;
    let model = OpenAiModel::builder("m")
        .base_url(server.base_url())
        .api_key(KEY.to_owned())
        .idle_timeout(Duration::from_millis(200))
        .retry(quick_retries(2))
        .build()
        .unwrap();
    let err = start_error(&model).await;
    assert_eq!(err.kind, ModelErrorKind::Transport);
    assert_eq!(
        err.message,
        "no response within 200ms (gave up after 2 attempts)"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn cancelling_mid_stream_returns_at_once_and_closes_the_connection() {
    let first: Vec<Vec<u8>> = events(&fixture("text.sse")).into_iter().take(2).collect();
    let server = Server::start([Reply::StreamThenStall(first)]).await;
    let model = client(&server);
    let cancel = CancellationToken::new();
    let mut stream = model.stream(request("hi"), cancel.clone()).await.unwrap();
    assert_eq!(
        stream.next().await,
        Some(Ok(ModelEvent::TextDelta("Hello".into())))
    );
    let mut next = stream.next();
    assert!(
        futures::poll!(&mut next).is_pending(),
        "the server is stalled"
    );
    cancel.cancel();
    // The next poll ends the wait: nothing more from the server is needed.
    let Poll::Ready(item) = futures::poll!(&mut next) else {
        panic!("cancellation did not end the wait at once");
    };
    let err = item.unwrap().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Cancelled);
    assert_eq!(stream.next().await, None);
    // The server sees the connection closed, with the stream still held.
    server.closed().await;
    drop(stream);
}

#[tokio::test]
async fn cancelling_before_the_response_closes_the_connection() {
    let server = Server::start([Reply::Silent]).await;
    let model = client(&server);
    let cancel = CancellationToken::new();
    let mut start = Box::pin(model.stream(request("hi"), cancel.clone()));
    while server.requests().is_empty() {
        assert!(futures::poll!(&mut start).is_pending());
        tokio::task::yield_now().await;
    }
    cancel.cancel();
    let err = match tokio::time::timeout(Duration::from_secs(2), start)
        .await
        .unwrap()
    {
        Ok(_) => panic!("a cancelled request streamed"),
        Err(err) => err,
    };
    assert_eq!(err.kind, ModelErrorKind::Cancelled);
    server.closed().await;
    // An already cancelled token never reaches the server.
    let err = match model.stream(request("hi"), cancel).await {
        Ok(_) => panic!("a cancelled request streamed"),
        Err(err) => err,
    };
    assert_eq!(err.kind, ModelErrorKind::Cancelled);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let first: Vec<Vec<u8>> = events(&fixture("text.sse")).into_iter().take(2).collect();
    let server = Server::start([Reply::StreamThenStall(first)]).await;
    let model = client(&server);
    let mut stream = model
        .stream(request("hi"), CancellationToken::new())
        .await
        .unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    drop(stream);
    server.closed().await;
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error_after_the_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let model = OpenAiModel::builder("m")
        .base_url(format!("http://{addr}/v1"))
        .api_key(KEY.to_owned())
        .retry(quick_retries(2))
        .build()
        .unwrap();
    let err = start_error(&model).await;
    assert_eq!(err.kind, ModelErrorKind::Transport);
    assert!(
        err.message
            .starts_with("the request could not be sent: could not connect"),
        "{err}"
    );
    assert!(err.message.ends_with("(gave up after 2 attempts)"), "{err}");
    assert!(
        !err.message.contains("127.0.0.1"),
        "no URL in errors: {err}"
    );
}

/// A loopback TLS server presenting a self-signed certificate: it counts
/// the connections it accepts and completes no handshake the client trusts.
fn untrusted_tls_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let cert = CertificateDer::from_pem_file(dir.join("self_signed_cert.pem")).unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("self_signed_key.pem")).unwrap();
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(tcp) = stream else { return };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let Ok(tls) = rustls::ServerConnection::new(config.clone()) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(tls, tcp);
            // Drives the handshake until the client refuses the certificate.
            let _ = std::io::Read::read(&mut tls, &mut [0u8; 1]);
        }
    });
    (format!("https://{addr}/v1"), accepted)
}

#[tokio::test]
async fn an_untrusted_certificate_fails_at_once_without_retries() {
    let (base_url, accepted) = untrusted_tls_server();
    let model = OpenAiModel::builder("m")
        .base_url(base_url)
        .api_key(KEY.to_owned())
        .retry(quick_retries(3))
        .build()
        .unwrap();
    let err = start_error(&model).await;
    assert_eq!(err.kind, ModelErrorKind::Transport);
    assert!(
        err.message.starts_with("the request could not be sent"),
        "{err}"
    );
    assert!(!err.message.contains("attempts"), "{err}");
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "a certificate error is not retried: {err}"
    );
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_a_clear_error() {
    let server = Server::start([Reply::Status {
        status: 200,
        headers: Vec::new(),
        body: json!({"id": "x", "object": "chat.completion", "choices": []}).to_string(),
    }])
    .await;
    let err = start_error(&client(&server)).await;
    assert_eq!(err.kind, ModelErrorKind::Protocol);
    assert!(err.message.contains("not an event stream"), "{err}");
}

#[tokio::test]
async fn the_key_comes_from_the_named_environment_variable_or_nowhere() {
    let server = Server::start([
        Reply::Stream(events(&fixture("text.sse"))),
        Reply::Stream(events(&fixture("text.sse"))),
    ])
    .await;
    // Cargo sets `CARGO_PKG_NAME` for the test process; setting a variable would need `unsafe`.
    let from_env = OpenAiModel::builder("m")
        .base_url(server.base_url())
        .api_key_env("CARGO_PKG_NAME")
        .build()
        .unwrap();
    run(&from_env, request("hi")).await;
    let keyless = OpenAiModel::builder("m")
        .base_url(server.base_url())
        .without_api_key()
        .build()
        .unwrap();
    run(&keyless, request("hi")).await;
    let sent = server.requests();
    assert_eq!(
        sent[0].header("authorization"),
        Some("Bearer dsh-llm-openai")
    );
    assert_eq!(sent[1].header("authorization"), None);
}

#[test]
fn configuration_errors_are_clear_and_never_quote_the_key() {
    let missing = OpenAiModel::builder("m")
        .api_key_env("DSH_TEST_VARIABLE_THAT_IS_NEVER_SET")
        .build()
        .unwrap_err();
    assert_eq!(
        missing,
        ConfigError::MissingApiKey {
            var: "DSH_TEST_VARIABLE_THAT_IS_NEVER_SET".into()
        }
    );
    assert_eq!(missing.code(), "MISSING_API_KEY");
    assert_eq!(
        missing.to_string(),
        "no API key: the environment variable `DSH_TEST_VARIABLE_THAT_IS_NEVER_SET` is not set"
    );
    let bad_key = format!("{KEY}\n");
    let invalid = OpenAiModel::builder("m")
        .api_key(format!("{bad_key}x"))
        .build()
        .unwrap_err();
    assert_eq!(invalid.code(), "INVALID_API_KEY");
    assert_no_key(&invalid, &invalid.to_string());
    for url in ["not a url", "ftp://example.com/v1"] {
        let err = OpenAiModel::builder("m")
            .base_url(url)
            .api_key(KEY.to_owned())
            .build()
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_BASE_URL", "{url}: {err}");
    }
    let builder = OpenAiModel::builder("m").api_key(KEY.to_owned());
    assert_no_key(&builder, "");
    let model = builder.build().unwrap();
    assert_no_key(&model, "");
    assert!(format!("{model:?}").contains("ApiKey([redacted])"));
    assert_eq!(model.name(), "openai:m");
    assert_eq!(
        model.endpoint().as_str(),
        "https://api.openai.com/v1/chat/completions"
    );
}

#[test]
fn base_urls_with_and_without_a_trailing_slash_reach_the_same_endpoint() {
    for url in ["https://api.deepseek.com", "https://api.deepseek.com/"] {
        let model = OpenAiModel::builder("deepseek-chat")
            .base_url(url)
            .without_api_key()
            .named("deepseek")
            .build()
            .unwrap();
        assert_eq!(
            model.endpoint().as_str(),
            "https://api.deepseek.com/chat/completions"
        );
        assert_eq!(model.name(), "deepseek");
    }
}

/// A request with every kind of message the wire mapping handles.
fn full_request() -> ModelRequest {
    let image = ContentBlock::Image {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    };
    ModelRequest {
        model: Some("gpt-4o".into()),
        system: "You are a careful assistant.\nUse tools when they help.".into(),
        messages: dsh_core::Transcript::from(vec![
            Message::User {
                content: vec![
                    ContentBlock::text("What is in this picture?"),
                    image.clone(),
                ],
                source: MessageSource::User,
            },
            Message::Assistant {
                content: vec![ContentBlock::text("Let me look closer.")],
                tool_calls: vec![
                    ToolCall {
                        call_id: CallId::new("call_zoom1"),
                        name: "zoom".into(),
                        // Keys in sorted order: the arguments are this value serialised,
                        // which keeps insertion order only under `preserve_order`.
                        input: json!({"factor": 2.5, "x": 10, "y": 20}).into(),
                    },
                    ToolCall {
                        call_id: CallId::new("call_read2"),
                        name: "read_file".into(),
                        input: json!({"path": "notes.txt"}).into(),
                    },
                ],
            },
            Message::Tool {
                call_id: CallId::new("call_zoom1"),
                content: vec![ContentBlock::text("Zoomed."), image],
                is_error: false,
            },
            Message::Tool {
                call_id: CallId::new("call_read2"),
                content: vec![ContentBlock::text("no such file: notes.txt")],
                is_error: true,
            },
            Message::Assistant {
                content: Vec::new(),
                tool_calls: vec![ToolCall {
                    call_id: CallId::new("call_raw3"),
                    name: "read_file".into(),
                    input: json!("{\"path\": \"notes").into(),
                }],
            },
            Message::Tool {
                call_id: CallId::new("call_raw3"),
                content: vec![ContentBlock::text("Invalid arguments.")],
                is_error: true,
            },
            Message::Assistant {
                content: vec![ContentBlock::text("It is a cat.")],
                tool_calls: Vec::new(),
            },
            Message::User {
                content: vec![
                    ContentBlock::text("[child-1 completed; stop reason: completed]"),
                    ContentBlock::text("Thanks. And the file?"),
                ],
                source: MessageSource::AgentMessage {
                    sender_session_id: SessionId::new("child-1").unwrap(),
                },
            },
        ]),
        tools: vec![
            ToolSpec {
                name: "read_file".into(),
                description: "Read a file from the workspace.".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                    "additionalProperties": false
                }),
            },
            ToolSpec {
                name: "zoom".into(),
                description: "Zoom into the image.".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "x": {"type": "integer"},
                        "y": {"type": "integer"},
                        "factor": {"type": "number"}
                    },
                    "required": ["x", "y", "factor"]
                }),
            },
        ],
        max_output_tokens: Some(1024),
        reasoning_effort: Some("low".into()),
    }
}

#[tokio::test]
async fn the_request_body_is_exactly_the_wire_format() {
    let server = Server::start([
        Reply::Stream(events(&fixture("text.sse"))),
        Reply::Stream(events(&fixture("text.sse"))),
    ])
    .await;
    let model = OpenAiModel::builder("gpt-4o-mini")
        .base_url(server.base_url())
        .api_key(KEY.to_owned())
        .accepting_images(true)
        .build()
        .unwrap();
    assert!(model.accepts_images());
    run(&model, full_request()).await;
    // Keys sorted: a parsed `Value` keeps the wire's order only when
    // serde_json's `preserve_order` is on in the build, and the snapshot
    // must not depend on which crates were built with it.
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!("request_body", server.requests()[0].json());
    });

    // The configured model is used when the request names none; the other
    // token-limit field when configured.
    let model = OpenAiModel::builder("gpt-4o-mini")
        .base_url(server.base_url())
        .api_key(KEY.to_owned())
        .token_limit_field(TokenLimitField::MaxCompletionTokens)
        .build()
        .unwrap();
    let mut plain = request("hi");
    plain.max_output_tokens = Some(64);
    run(&model, plain).await;
    assert_eq!(
        server.requests()[1].json(),
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "hi"}
            ],
            "max_completion_tokens": 64,
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}
