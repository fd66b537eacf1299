//! The bridge between the agent's pipes and the protocol crate's frame
//! channel. Owning it (instead of the crate's byte-stream adapter) gives
//! this crate two facts the adapter hides: a line on stdout that is not
//! JSON-RPC (the adapter answers it and carries on; here it is a fault that
//! ends the run), and the moment stdin is closed (when the connection has
//! flushed its last frame, or when teardown says so).
//!
//! Back-pressure: the protocol crate's frame channel is unbounded, so the
//! reader bounds it itself. Once [`MAX_QUEUED_FRAMES`] frames wait for the
//! connection, it stops reading stdout until the connection has taken some
//! (it looks again after a short pause, backing off to
//! [`FULL_PAUSE_MAX`]): the pipe then fills and the agent blocks on its own
//! writes, instead of this process growing without bound.

use std::sync::Mutex;
use std::time::Duration;

use agent_client_protocol::TransportFrame;
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;
use tokio_util::sync::CancellationToken;

/// The longest line accepted on stdout.
pub(crate) const MAX_LINE_BYTES: usize = 16 << 20;

/// The most frames read from stdout and not yet taken by the connection.
pub(crate) const MAX_QUEUED_FRAMES: usize = 64;

/// The longest pause before the reader looks again at a full queue.
const FULL_PAUSE_MAX: Duration = Duration::from_millis(20);

/// What the reader saw go wrong on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StdoutFault {
    /// Line `n` (1-based) was not a JSON-RPC message.
    Garbage(u64),
    /// A line exceeded [`MAX_LINE_BYTES`].
    TooLong,
}

/// Facts the bridge records for the run.
#[derive(Debug, Default)]
pub(crate) struct BridgeFacts {
    stdout_fault: Mutex<Option<StdoutFault>>,
}

impl BridgeFacts {
    pub(crate) fn stdout_fault(&self) -> Option<StdoutFault> {
        *self
            .stdout_fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, fault: StdoutFault) {
        self.stdout_fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert(fault);
    }
}

/// Read stdout into the channel until EOF or a fault, holding at most
/// [`MAX_QUEUED_FRAMES`] frames in it; the channel's sender is dropped at
/// the end, which the connection sees as the transport closing.
pub(crate) async fn read_stdout(
    stdout: impl AsyncRead + Unpin,
    tx: futures::channel::mpsc::UnboundedSender<TransportFrame>,
    facts: &BridgeFacts,
    run: &str,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(run = %run, "reading the ACP agent's stdout failed: {err}");
                break;
            }
        }
        number += 1;
        if line.len() > MAX_LINE_BYTES && line.last() != Some(&b'\n') {
            facts.record(StdoutFault::TooLong);
            break;
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            facts.record(StdoutFault::Garbage(number));
            break;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match TransportFrame::parse_json(text) {
            TransportFrame::Malformed { .. } => {
                tracing::debug!(run = %run, line = number, "the ACP agent wrote a malformed line");
                facts.record(StdoutFault::Garbage(number));
                break;
            }
            frame => {
                if !room(&tx).await || tx.unbounded_send(frame).is_err() {
                    break;
                }
            }
        }
    }
}

/// Wait until the queue to the connection holds fewer than
/// [`MAX_QUEUED_FRAMES`] frames; `false` when the connection has gone.
async fn room(tx: &futures::channel::mpsc::UnboundedSender<TransportFrame>) -> bool {
    let mut pause = Duration::from_millis(1);
    while tx.len() >= MAX_QUEUED_FRAMES {
        if tx.is_closed() {
            return false;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(FULL_PAUSE_MAX);
    }
    !tx.is_closed()
}

/// Write the connection's frames to stdin until the connection ends (its
/// sender is dropped after its last frame) or `close` fires; then stdin is
/// closed, which is the agent's EOF.
pub(crate) async fn write_stdin(
    mut stdin: ChildStdin,
    mut frames: futures::channel::mpsc::UnboundedReceiver<TransportFrame>,
    close: CancellationToken,
    run: &str,
) {
    loop {
        let frame = tokio::select! {
            biased;
            frame = frames.next() => frame,
            () = close.cancelled() => None,
        };
        let Some(frame) = frame else { break };
        let mut line = match frame.to_json() {
            Ok(line) => line,
            Err(err) => {
                tracing::warn!(run = %run, "a frame for the ACP agent could not be written: {err}");
                continue;
            }
        };
        line.push('\n');
        if let Err(err) = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        }
        .await
        {
            tracing::debug!(run = %run, "writing to the ACP agent's stdin failed: {err}");
            break;
        }
    }
    let _ = stdin.shutdown().await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// An agent that floods stdout never has more than the bound queued
    /// for a connection that reads slowly, and every frame still arrives,
    /// in order.
    #[tokio::test(start_paused = true)]
    async fn a_flooding_agent_is_held_to_the_queue_bound() {
        let total = MAX_QUEUED_FRAMES * 5;
        let stdout: Vec<u8> = (0..total)
            .flat_map(|n| {
                format!("{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":{{\"n\":{n}}}}}\n")
                    .into_bytes()
            })
            .collect();
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let probe = tx.clone();
        let reader = tokio::spawn(async move {
            let facts = BridgeFacts::default();
            read_stdout(stdout.as_slice(), tx, &facts, "test").await;
            facts.stdout_fault()
        });
        let mut most = 0;
        let mut seen = Vec::new();
        for _ in 0..total {
            tokio::task::yield_now().await;
            most = most.max(probe.len());
            let frame = rx.next().await.expect("a frame");
            seen.push(frame.to_json().expect("json"));
        }
        assert_eq!(reader.await.unwrap(), None);
        assert!(most <= MAX_QUEUED_FRAMES, "{most} frames were queued");
        assert!(most > 0, "the probe never saw the queue");
        for (n, line) in seen.iter().enumerate() {
            let value: serde_json::Value = serde_json::from_str(line).expect("a frame is JSON");
            assert_eq!(value["params"]["n"], n, "{line}");
        }
    }
}
