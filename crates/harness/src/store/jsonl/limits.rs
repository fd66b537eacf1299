//! The process's open-file limit. Every live JSONL log holds one descriptor
//! (its exclusive lock lives on it), so a process with many resident agents
//! needs a soft `RLIMIT_NOFILE` near its hard one; the common default soft
//! limit (1,024) stops at about a thousand. The first store of a process
//! raises the soft limit to the hard limit, once, and logs it. This module
//! must never lower a limit, and never raise the hard one.

use std::sync::OnceLock;

/// The soft open-file limit before and after [`raise_open_file_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit found (`None`: unlimited).
    pub before: Option<u64>,
    /// The soft limit now in force (`None`: unlimited).
    pub after: Option<u64>,
}

/// Raise this process's soft `RLIMIT_NOFILE` to its hard limit, so that
/// each of many live logs can keep its descriptor. Never lowers it; where
/// there are no resource limits it reports nothing changed.
///
/// # Errors
/// The OS refused the new limit.
pub fn raise_open_file_limit() -> std::io::Result<OpenFileLimit> {
    raise()
}

#[cfg(unix)]
fn raise() -> std::io::Result<OpenFileLimit> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let before = limit.current;
    let wanted = match (limit.current, limit.maximum) {
        (None, _) => {
            return Ok(OpenFileLimit {
                before,
                after: before,
            });
        }
        (Some(current), Some(maximum)) if current >= maximum => {
            return Ok(OpenFileLimit {
                before,
                after: before,
            });
        }
        (Some(_), maximum) => maximum,
    };
    setrlimit(
        Resource::Nofile,
        rustix::process::Rlimit {
            current: wanted,
            maximum: limit.maximum,
        },
    )?;
    Ok(OpenFileLimit {
        before,
        after: wanted,
    })
}

#[cfg(not(unix))]
fn raise() -> std::io::Result<OpenFileLimit> {
    Ok(OpenFileLimit {
        before: None,
        after: None,
    })
}

/// [`raise_open_file_limit`], once per process. A failure leaves the limit
/// as it was: the store still works, and a later open past the limit fails
/// with `EMFILE` on the call that met it, reaching its caller.
pub(super) fn raise_once() {
    static RAISED: OnceLock<()> = OnceLock::new();
    RAISED.get_or_init(|| match raise_open_file_limit() {
        Ok(limit) if limit.before != limit.after => tracing::info!(
            before = ?limit.before,
            after = ?limit.after,
            "raised the soft open-file limit to the hard limit: every live session log keeps a descriptor"
        ),
        Ok(_) => {}
        Err(err) => tracing::warn!(
            error = %err,
            "could not raise the soft open-file limit; live session logs are limited by it"
        ),
    });
}
