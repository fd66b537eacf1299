//! The diagnostics subscriber: tracing's warnings and errors on stderr
//! when asked for (`-v` or `RUST_LOG`; silent by default, because every
//! failure already reaches stderr as the command's own one line), and for
//! the commands that run agents a log file in `logs/` beside the session
//! directory (warnings, errors and an ACP agent's stderr by default, every
//! level with `-v`), created only when its first line is written.

use std::path::PathBuf;

use crate::one_line;

/// The log of one run, in `logs/` beside the session directory: created
/// when its first line is written (so a clean run at the default level
/// leaves no file), appended to after that.
struct LogFile {
    path: PathBuf,
    file: std::sync::Mutex<LogState>,
}

/// Whether the log file is open yet.
enum LogState {
    Unopened,
    Open(std::fs::File),
    /// It could not be created; the user was told once, on stderr.
    Failed,
}

impl LogFile {
    /// The log of a run whose sessions are in `dir`.
    fn beside(dir: &std::path::Path) -> Self {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_millis())
            .unwrap_or_default();
        let parent = dir
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        Self {
            path: parent
                .join("logs")
                .join(format!("dsh-{millis}-{}.log", std::process::id())),
            file: std::sync::Mutex::new(LogState::Unopened),
        }
    }
}

/// One write to a [`LogFile`].
struct LogWriter(std::sync::Arc<LogFile>);

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut state = self
            .0
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let LogState::Unopened = *state {
            let opened = self
                .0
                .path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&self.0.path)
                });
            *state = match opened {
                Ok(file) => LogState::Open(file),
                Err(err) => {
                    eprintln!(
                        "dsh: warning: cannot write the log {}: {}",
                        self.0.path.display(),
                        one_line(&err.to_string())
                    );
                    LogState::Failed
                }
            };
        }
        match &mut *state {
            LogState::Open(file) => file.write(bytes),
            // Told once; the diagnostics still reach stderr with `-v`.
            _ => Ok(bytes.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut *self
            .0
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            LogState::Open(file) => file.flush(),
            _ => Ok(()),
        }
    }
}

/// Install the tracing subscriber. On stderr when asked for: `RUST_LOG`
/// when set (a `target=level,...` list), else `-v`'s level. In the run's
/// log file (`log`, for the commands that run agents): `RUST_LOG` when set,
/// else every level with `-v`, else warnings, errors and an ACP agent's
/// stderr.
pub(crate) fn diagnostics(verbose: u8, log: Option<&std::path::Path>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|spec| !spec.trim().is_empty());
    let from_env = match from_env {
        Some(spec) => match spec.parse::<Targets>() {
            Ok(filter) => Some(filter),
            Err(err) => {
                eprintln!("dsh: warning: ignoring RUST_LOG `{spec}`: {err}");
                None
            }
        },
        None => None,
    };
    let stderr_filter = match (&from_env, verbose) {
        (Some(filter), _) => Some(filter.clone()),
        (None, 0) => None,
        (None, 1) => Some(Targets::new().with_default(LevelFilter::WARN)),
        (None, 2) => Some(Targets::new().with_default(LevelFilter::INFO)),
        (None, _) => Some(Targets::new().with_default(LevelFilter::DEBUG)),
    };
    let stderr = stderr_filter.map(|filter| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .without_time()
            .with_filter(filter)
    });
    let file = log.map(|dir| {
        let filter = match (&from_env, verbose) {
            (Some(filter), _) => filter.clone(),
            (None, 0) => Targets::new()
                .with_default(LevelFilter::WARN)
                .with_target("dsh_process::stderr", LevelFilter::DEBUG),
            (None, _) => Targets::new().with_default(LevelFilter::TRACE),
        };
        let log = std::sync::Arc::new(LogFile::beside(dir));
        tracing_subscriber::fmt::layer()
            .with_writer(move || LogWriter(std::sync::Arc::clone(&log)))
            .with_ansi(false)
            .with_filter(filter)
    });
    // Another subscriber already installed (never, in `dsh`) keeps its place.
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
}
