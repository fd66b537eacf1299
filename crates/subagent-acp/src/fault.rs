//! What can go wrong with an external agent, as facts this process observed
//! (the phase, an exit status or signal, a JSON-RPC error code, a line
//! number), and the one place that turns them into words. Nothing here ever
//! holds what the agent wrote: stderr and protocol payloads go to tracing,
//! never into a diagnostic (B14, B41).

use std::fmt;
use std::process::ExitStatus;
use std::time::Duration;

use agent_client_protocol::v1::schema::StopReason as AcpStopReason;
use dsh_core::StopReason;

/// Where in a run a fault happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Starting the process.
    Spawn,
    /// The `initialize` handshake.
    Initialize,
    /// Opening the session (`session/new`).
    NewSession,
    /// The prompt turn (`session/prompt`).
    Prompt,
}

impl Phase {
    pub(crate) fn from_index(index: u8) -> Self {
        match index {
            0 => Self::Spawn,
            1 => Self::Initialize,
            2 => Self::NewSession,
            _ => Self::Prompt,
        }
    }

    pub(crate) fn index(self) -> u8 {
        match self {
            Self::Spawn => 0,
            Self::Initialize => 1,
            Self::NewSession => 2,
            Self::Prompt => 3,
        }
    }
}

impl Phase {
    /// The request this phase waits on.
    pub fn request(self) -> &'static str {
        match self {
            Self::Spawn => "no request",
            Self::Initialize => "initialize",
            Self::NewSession => "session/new",
            Self::Prompt => "session/prompt",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Spawn => "start-up",
            Self::Initialize => "initialize",
            Self::NewSession => "session/new",
            Self::Prompt => "the prompt turn",
        })
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitFact {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl ExitFact {
    /// The fact behind an [`ExitStatus`].
    pub fn of(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Self::Code(code),
            (None, Some(signal)) => Self::Signal(signal),
            (None, None) => Self::Code(-1),
        }
    }
}

impl fmt::Display for ExitFact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Code(code) => write!(f, "exited with status {code}"),
            Self::Signal(signal) => match signal_name(*signal) {
                Some(name) => write!(f, "was killed by signal {signal} ({name})"),
                None => write!(f, "was killed by signal {signal}"),
            },
        }
    }
}

fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// One observed failure of an external run. Its `Display` is the
/// diagnostic (or the start error's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Fault {
    /// The program could not be started.
    #[error("the ACP agent `{command}` could not be started: {reason}")]
    Spawn {
        /// The configured command.
        command: String,
        /// The operating system's reason, by kind.
        reason: String,
    },
    /// The agent did not get through start-up in time.
    #[error("the ACP agent did not answer {phase} within {}", humanize(*.limit))]
    Timeout {
        /// Where it stalled.
        phase: Phase,
        /// The configured limit.
        limit: Duration,
    },
    /// The process ended during a phase.
    #[error("the ACP agent {exit} during {phase}")]
    Exited {
        /// Where.
        phase: Phase,
        /// How.
        exit: ExitFact,
    },
    /// The agent closed its stdout but kept running.
    #[error("the ACP agent closed its stdout during {phase} while still running")]
    Closed {
        /// Where.
        phase: Phase,
    },
    /// A line on stdout was not a JSON-RPC message.
    #[error(
        "the ACP agent wrote a line that is not JSON-RPC to stdout (line {line}) during {phase}"
    )]
    Garbage {
        /// Where.
        phase: Phase,
        /// The 1-based line number on stdout.
        line: u64,
    },
    /// A line on stdout was longer than the limit.
    #[error("the ACP agent wrote a line longer than {limit} bytes to stdout during {phase}")]
    LineTooLong {
        /// Where.
        phase: Phase,
        /// The limit in bytes.
        limit: usize,
    },
    /// The agent answered a request with a JSON-RPC error: its code, and
    /// its message and data as the agent wrote them for a person, each cut
    /// to one bounded line with any configured variable value masked (see
    /// [`agent_text`]).
    #[error(
        "the ACP agent answered {} with error code {code}: {message}{}",
        .phase.request(),
        .data.as_ref().map(|data| format!(" (data: {data})")).unwrap_or_default()
    )]
    Protocol {
        /// Which request.
        phase: Phase,
        /// The JSON-RPC error code.
        code: i32,
        /// The error's message, bounded.
        message: String,
        /// The error's data as compact JSON, bounded, when it had any.
        data: Option<String>,
    },
    /// The agent does not accept images, and the prompt has some.
    #[error(
        "the ACP agent does not accept images (promptCapabilities.image is false), and the prompt has {count} image block(s)"
    )]
    ImagesUnsupported {
        /// How many image blocks the prompt has.
        count: usize,
    },
}

impl Fault {
    /// The phase it happened in.
    pub fn phase(&self) -> Phase {
        match self {
            Self::Spawn { .. } => Phase::Spawn,
            Self::ImagesUnsupported { .. } => Phase::Initialize,
            Self::Timeout { phase, .. }
            | Self::Exited { phase, .. }
            | Self::Closed { phase }
            | Self::Garbage { phase, .. }
            | Self::LineTooLong { phase, .. }
            | Self::Protocol { phase, .. } => *phase,
        }
    }
}

/// The most bytes of an agent's error message or data in a diagnostic.
pub const AGENT_TEXT_LIMIT: usize = 300;

/// An agent's text made fit for a diagnostic: control characters (line
/// breaks included) become spaces, every occurrence of a value in `masked`
/// becomes `[redacted]`, and the result is cut on a character boundary to
/// [`AGENT_TEXT_LIMIT`] bytes with `…`.
pub fn agent_text(text: &str, masked: &[String]) -> String {
    let mut text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    for value in masked {
        if !value.is_empty() {
            text = text.replace(value.as_str(), "[redacted]");
        }
    }
    let text = text.trim();
    if text.len() <= AGENT_TEXT_LIMIT {
        return text.to_owned();
    }
    let mut end = AGENT_TEXT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn humanize(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// The harness stop reason of an ACP one (B38): `end_turn` completed,
/// `max_tokens` max-tokens, `refusal` refusal, `cancelled` aborted, anything
/// else (`max_turn_requests`, a future variant) error, so an unclean stop is
/// never reported as completed.
pub fn map_stop_reason(reason: &AcpStopReason) -> StopReason {
    match reason {
        AcpStopReason::EndTurn => StopReason::COMPLETED,
        AcpStopReason::MaxTokens => StopReason::MAX_TOKENS,
        AcpStopReason::Refusal => StopReason::REFUSAL,
        AcpStopReason::Cancelled => StopReason::ABORTED,
        _ => StopReason::ERROR,
    }
}

/// A diagnostic for a non-completed stop the agent itself reported.
pub(crate) fn stop_diagnostic(reason: &AcpStopReason) -> Option<String> {
    match reason {
        AcpStopReason::EndTurn | AcpStopReason::Cancelled => None,
        AcpStopReason::MaxTokens => {
            Some("the ACP agent stopped the prompt turn: max_tokens".to_owned())
        }
        AcpStopReason::Refusal => Some("the ACP agent stopped the prompt turn: refusal".to_owned()),
        AcpStopReason::MaxTurnRequests => {
            Some("the ACP agent stopped the prompt turn: max_turn_requests".to_owned())
        }
        _ => Some(
            "the ACP agent stopped the prompt turn for a reason this client does not know"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_text_is_one_line_masked_and_cut_on_a_character_boundary() {
        let masked = vec!["s3cret-value".to_owned()];
        assert_eq!(
            agent_text("bad\nkey s3cret-value\t!", &masked),
            "bad key [redacted] !"
        );
        let long = "é".repeat(AGENT_TEXT_LIMIT);
        let cut = agent_text(&long, &[]);
        assert!(cut.ends_with('…'));
        assert!(cut.len() <= AGENT_TEXT_LIMIT + '…'.len_utf8());
        assert!(cut.trim_end_matches('…').chars().all(|c| c == 'é'));
    }

    #[test]
    fn b38_stop_reasons_map_and_only_end_turn_completes() {
        let table: Vec<(AcpStopReason, &str)> = vec![
            (AcpStopReason::EndTurn, "completed"),
            (AcpStopReason::MaxTokens, "max-tokens"),
            (AcpStopReason::Refusal, "refusal"),
            (AcpStopReason::Cancelled, "aborted"),
            (AcpStopReason::MaxTurnRequests, "error"),
        ];
        for (acp, ours) in table {
            assert_eq!(map_stop_reason(&acp).as_str(), ours, "{acp:?}");
        }
    }

    #[test]
    fn diagnostics_say_only_observed_facts() {
        let faults = [
            Fault::Spawn {
                command: "missing-agent".into(),
                reason: "the command was not found".into(),
            },
            Fault::Timeout {
                phase: Phase::Initialize,
                limit: Duration::from_millis(1500),
            },
            Fault::Timeout {
                phase: Phase::NewSession,
                limit: Duration::from_secs(30),
            },
            Fault::Exited {
                phase: Phase::Prompt,
                exit: ExitFact::Code(3),
            },
            Fault::Exited {
                phase: Phase::Prompt,
                exit: ExitFact::Signal(9),
            },
            Fault::Exited {
                phase: Phase::Initialize,
                exit: ExitFact::Signal(64),
            },
            Fault::Closed {
                phase: Phase::Prompt,
            },
            Fault::Garbage {
                phase: Phase::Prompt,
                line: 4,
            },
            Fault::LineTooLong {
                phase: Phase::Initialize,
                limit: 1 << 24,
            },
            Fault::Protocol {
                phase: Phase::Prompt,
                code: -32603,
                message: "internal detail".to_owned(),
                data: Some("{\"hint\":1}".to_owned()),
            },
            Fault::ImagesUnsupported { count: 2 },
        ];
        let rendered: Vec<String> = faults.iter().map(ToString::to_string).collect();
        insta::assert_snapshot!(rendered.join("\n"));
        let stops: Vec<String> = [
            AcpStopReason::MaxTokens,
            AcpStopReason::Refusal,
            AcpStopReason::MaxTurnRequests,
        ]
        .iter()
        .filter_map(stop_diagnostic)
        .collect();
        insta::assert_snapshot!("stop_diagnostics", stops.join("\n"));
    }
}
