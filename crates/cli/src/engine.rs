//! Which engine holds the sessions: the local JSONL store in a session
//! directory (the default, unchanged for anyone who does not ask), or a
//! Restate cluster (issue 35, `docs/distributed.md`), chosen by `[engine]`
//! in dsh.toml (`kind = "restate"`, `ingress_url`, `admin_url`,
//! `worker_timeout`) under the flags `--engine`, `--ingress`, `--admin` and
//! `--worker-timeout`. A bad kind, URL or bound is one line naming the
//! file and key (or the flag); a server that does not answer is one line
//! naming the URL asked; a call no worker answers is said once on stderr,
//! naming the worker and the server's last failure, and fails the command
//! after the bound (`client`).
//!
//! [`Source`] is where the read commands (`agents`, `show`, `replay`,
//! `export`) read the sessions from: a session directory through the JSONL
//! store, or the cluster through `dsh_restate`'s read-side store. Without
//! dsh-cli's `restate` feature the choice is still read and checked, and
//! a cluster is refused by name.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::SessionStore;
#[cfg(feature = "restate")]
use dsh_restate::client::{ClientError, RestateClient};
#[cfg(feature = "restate")]
use dsh_restate::store::RestateSessionStore;
use serde::Deserialize;

use crate::error::CliError;

/// The ingress URL used when neither the flag nor the file names one.
pub const DEFAULT_INGRESS: &str = "http://127.0.0.1:8080";
/// The admin URL used when neither the flag nor the file names one.
pub const DEFAULT_ADMIN: &str = "http://127.0.0.1:9070";

/// dsh.toml's `[engine]`, as written: every key optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    /// `local` (the default) or `restate`.
    pub kind: Option<String>,
    /// The Restate ingress (`http://host:8080`).
    pub ingress_url: Option<String>,
    /// The Restate admin API (`http://host:9070`).
    pub admin_url: Option<String>,
    /// Seconds a call waits for a worker to answer before the command
    /// fails (default [`DEFAULT_WORKER_TIMEOUT`]).
    pub worker_timeout: Option<u64>,
}

/// Seconds a call to the cluster waits for a worker when neither the flag
/// nor the file says: long enough for the server to move a call to
/// another worker after one dies, short enough that a cluster with no
/// worker answering is named instead of waited on.
pub const DEFAULT_WORKER_TIMEOUT: u64 = 30;

/// The engine flags, each over its key of `[engine]`.
#[derive(Debug, Default, Clone)]
pub struct EngineFlags {
    /// `--engine`: `local` or `restate`.
    pub kind: Option<String>,
    /// `--ingress`.
    pub ingress: Option<String>,
    /// `--admin`.
    pub admin: Option<String>,
    /// `--worker-timeout`, in seconds.
    pub worker_timeout: Option<u64>,
}

/// The engine chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engine {
    /// The local JSONL store in a session directory.
    Local,
    /// A Restate cluster.
    Restate {
        /// The ingress base URL, without a trailing `/`.
        ingress: String,
        /// The admin API's base URL, without a trailing `/`.
        admin: String,
        /// How long a call waits for a worker to answer.
        worker_timeout: Duration,
    },
}

/// Resolve the engine from the flags over `[engine]` of `file` (the
/// configuration file read, if any).
///
/// # Errors
/// [`CliError::Config`] naming the key, or [`CliError::BadFlag`] naming the
/// flag, for a kind other than `local` or `restate` or a URL that is not
/// `http://host[:port]`.
pub fn resolve(
    flags: &EngineFlags,
    file: Option<&Path>,
    section: Option<&EngineSection>,
) -> Result<Engine, CliError> {
    let section = section.cloned().unwrap_or_default();
    let source = file.unwrap_or(Path::new(crate::config::FILE_NAME));
    let in_file = |key: &str, reason: String| CliError::Config {
        file: source.to_owned(),
        key: format!("engine.{key}"),
        reason,
    };
    let kind = match (&flags.kind, &section.kind) {
        (Some(kind), _) => {
            kind_of(kind).map_err(|why| CliError::BadFlag(format!("--engine: {why}")))?
        }
        (None, Some(kind)) => kind_of(kind).map_err(|why| in_file("kind", why))?,
        (None, None) => Kind::Local,
    };
    let url =
        |flag: &Option<String>, name: &str, key: &str, written: &Option<String>, default| match (
            flag, written,
        ) {
            (Some(url), _) => {
                check_url(url).map_err(|why| CliError::BadFlag(format!("{name} `{url}`: {why}")))
            }
            (None, Some(url)) => {
                check_url(url).map_err(|why| in_file(key, format!("`{url}`: {why}")))
            }
            (None, None) => Ok(String::from(default)),
        };
    let ingress = url(
        &flags.ingress,
        "--ingress",
        "ingress_url",
        &section.ingress_url,
        DEFAULT_INGRESS,
    )?;
    let admin = url(
        &flags.admin,
        "--admin",
        "admin_url",
        &section.admin_url,
        DEFAULT_ADMIN,
    )?;
    let worker_timeout = match (flags.worker_timeout, section.worker_timeout) {
        (Some(0), _) => {
            return Err(CliError::BadFlag(
                "--worker-timeout: at least 1 second".to_owned(),
            ));
        }
        (None, Some(0)) => return Err(in_file("worker_timeout", "at least 1 second".to_owned())),
        (Some(secs), _) | (None, Some(secs)) => secs,
        (None, None) => DEFAULT_WORKER_TIMEOUT,
    };
    match kind {
        Kind::Local => {
            if flags.ingress.is_some() || flags.admin.is_some() || flags.worker_timeout.is_some() {
                return Err(CliError::BadFlag(
                    "--ingress/--admin/--worker-timeout: they address a Restate server; add `--engine restate` (or dsh.toml's engine.kind)".to_owned(),
                ));
            }
            Ok(Engine::Local)
        }
        Kind::Restate => Ok(Engine::Restate {
            ingress,
            admin,
            worker_timeout: Duration::from_secs(worker_timeout),
        }),
    }
}

/// The two engines by name.
enum Kind {
    Local,
    Restate,
}

fn kind_of(name: &str) -> Result<Kind, String> {
    match name {
        "local" => Ok(Kind::Local),
        "restate" => Ok(Kind::Restate),
        other => Err(format!("unknown engine `{other}` (`local` or `restate`)")),
    }
}

/// `url` when it is a plain `http://host[:port]` base URL, without a
/// trailing `/`.
fn check_url(url: &str) -> Result<String, String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(if url.starts_with("https://") {
            "https is not supported yet: dsh talks to Restate over plain http:// on a trusted network".to_owned()
        } else {
            "not an http:// URL".to_owned()
        });
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => (host, Some(port)),
        _ => (rest, None),
    };
    if host.is_empty() || rest.contains(['/', '?', '#', '@']) || rest.contains(char::is_whitespace)
    {
        return Err("expected http://host or http://host:port".to_owned());
    }
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("`{port}` is not a port"));
    }
    Ok(format!("http://{rest}"))
}

/// Where the read commands find the sessions.
#[derive(Debug, Clone)]
pub enum Source {
    /// A session directory of the local JSONL store.
    Dir(PathBuf),
    /// A Restate cluster.
    #[cfg(feature = "restate")]
    Restate {
        /// Its client.
        client: RestateClient,
        /// How messages name it (`the Restate cluster at URL`).
        place: PathBuf,
    },
}

impl Source {
    /// The source `engine` names; `dir` is the session directory, used
    /// only by the local engine.
    ///
    /// # Errors
    /// `CliError::EngineUnavailable` when the HTTP client cannot be
    /// built; `CliError::FeatureDisabled` for a cluster, without the
    /// `restate` feature.
    pub fn new(engine: &Engine, dir: &Path) -> Result<Self, CliError> {
        match engine {
            Engine::Local => Ok(Self::Dir(dir.to_owned())),
            #[cfg(not(feature = "restate"))]
            Engine::Restate { .. } => Err(disabled("--engine restate (or dsh.toml's engine.kind)")),
            #[cfg(feature = "restate")]
            Engine::Restate {
                ingress,
                admin,
                worker_timeout,
            } => {
                let client = client(ingress, admin, *worker_timeout)?;
                Ok(Self::Restate {
                    client,
                    place: PathBuf::from(format!("the Restate cluster at {ingress}")),
                })
            }
        }
    }

    /// How messages name where the sessions are: the directory, or the
    /// cluster.
    pub fn place(&self) -> &Path {
        match self {
            Self::Dir(dir) => dir,
            #[cfg(feature = "restate")]
            Self::Restate { place, .. } => place,
        }
    }

    /// The store to read through. For a cluster, its health checks are
    /// asked first, so a server that does not answer is named at once.
    ///
    /// # Errors
    /// [`CliError::NoSessionDir`] for a missing directory,
    /// `CliError::EngineUnavailable` for a server that does not answer.
    ///
    /// # Cancel safety
    /// Cancel safe: it only opens the store (which, for a directory, sweeps
    /// a crashed writer's temporaries, as every command does).
    pub async fn store(&self) -> Result<Arc<dyn SessionStore>, CliError> {
        match self {
            Self::Dir(dir) => Ok(crate::sessions::existing_store(dir)?),
            #[cfg(feature = "restate")]
            Self::Restate { client, .. } => {
                client.health().await.map_err(cluster_error)?;
                Ok(Arc::new(RestateSessionStore::new(client.clone())))
            }
        }
    }
}

/// `what` refused: this dsh was built without the `restate` feature.
#[cfg(not(feature = "restate"))]
pub fn disabled(what: &str) -> CliError {
    CliError::FeatureDisabled {
        what: what.to_owned(),
        feature: "restate",
    }
}

/// The cluster's client: every call through the ingress waits at most
/// `worker_timeout` for a worker, and the first call that waits on a
/// failing worker says so once on stderr, naming the worker's URL and the
/// server's last failure.
///
/// # Errors
/// `CliError::EngineUnavailable` when the HTTP client cannot be built.
#[cfg(feature = "restate")]
pub(crate) fn client(
    ingress: &str,
    admin: &str,
    worker_timeout: Duration,
) -> Result<RestateClient, CliError> {
    let told = std::sync::atomic::AtomicBool::new(false);
    let client =
        RestateClient::new(ingress, admin).map_err(|error| unavailable(ingress, &error))?;
    Ok(client.with_worker_wait(worker_timeout, move |stall| {
        if !told.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "dsh: {}; waiting up to {} s (engine.worker_timeout, --worker-timeout)",
                crate::one_line(&stall.to_string()),
                worker_timeout.as_secs()
            );
        }
    }))
}

/// The cluster `engine` names: its client (as [`client`] builds it) and
/// its ingress URL.
///
/// # Errors
/// `CliError::EngineUnavailable` when the HTTP client cannot be built;
/// [`CliError::BadFlag`] for the local engine (a caller's bug: it asks only
/// for a cluster).
#[cfg(feature = "restate")]
pub(crate) fn cluster(engine: &Engine) -> Result<(RestateClient, &str), CliError> {
    match engine {
        Engine::Restate {
            ingress,
            admin,
            worker_timeout,
        } => Ok((client(ingress, admin, *worker_timeout)?, ingress)),
        Engine::Local => Err(CliError::BadFlag(
            "the local engine has no cluster to address".to_owned(),
        )),
    }
}

/// A failed call to the server: one that got no answer names the URL
/// asked; the cluster's own refusals (no worker answering, a worker of
/// another version, a turn that keeps failing, a missing session) are
/// their own line.
#[cfg(feature = "restate")]
pub(crate) fn cluster_error(error: ClientError) -> CliError {
    match &error {
        // The ingress knows no dsh service: no worker was ever registered.
        ClientError::Status {
            url,
            status: 404,
            body,
        } if body.contains("make sure to register the service") => CliError::NoWorker(format!(
            "the Restate server at {url} has no dsh worker registered: start `dsh worker` and register its URL with the admin API (docs/distributed.md)"
        )),
        ClientError::Transport { url, .. } | ClientError::Status { url, .. } => {
            unavailable(url, &error)
        }
        ClientError::NoWorker { .. } => CliError::NoWorker(crate::one_line(&error.to_string())),
        ClientError::NoSuchSession(id) => CliError::NotOnCluster(id.to_string()),
        ClientError::WorkerVersion { .. } | ClientError::TurnFailing { .. } => {
            CliError::Refused(crate::one_line(&error.to_string()))
        }
        ClientError::Build(_) | ClientError::Tls(_) | ClientError::Decode { .. } => {
            unavailable("", &error)
        }
    }
}

/// A failed call to the server at `url`: for one that got no answer,
/// the deepest cause (`Connection refused (os error 111)`); for an error
/// status, the status and the body.
#[cfg(feature = "restate")]
fn unavailable(url: &str, error: &ClientError) -> CliError {
    let reason = match error {
        ClientError::Transport { source, .. } => {
            let mut deepest: &dyn std::error::Error = source;
            while let Some(inner) = deepest.source() {
                deepest = inner;
            }
            deepest.to_string()
        }
        ClientError::Status { status, body, .. } => format!("HTTP {status}: {body}"),
        other => other.to_string(),
    };
    CliError::EngineUnavailable {
        url: url.to_owned(),
        reason: crate::one_line(&reason),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn flags(kind: Option<&str>, ingress: Option<&str>, admin: Option<&str>) -> EngineFlags {
        EngineFlags {
            kind: kind.map(str::to_owned),
            ingress: ingress.map(str::to_owned),
            admin: admin.map(str::to_owned),
            worker_timeout: None,
        }
    }

    #[cfg(not(feature = "restate"))]
    #[test]
    fn a_cluster_without_the_feature_is_refused_by_name() {
        let engine = Engine::Restate {
            ingress: DEFAULT_INGRESS.to_owned(),
            admin: DEFAULT_ADMIN.to_owned(),
            worker_timeout: Duration::from_secs(DEFAULT_WORKER_TIMEOUT),
        };
        let said = Source::new(&engine, Path::new("sessions")).unwrap_err();
        assert_eq!(
            said.to_string(),
            "--engine restate (or dsh.toml's engine.kind) needs the `restate` feature, which this dsh was built without (build dsh-cli with `--features restate`)"
        );
        assert_eq!(said.exit_code(), crate::error::EXIT_USAGE);
    }

    #[test]
    fn nothing_asked_is_the_local_store() {
        assert_eq!(
            resolve(&EngineFlags::default(), None, None).unwrap(),
            Engine::Local
        );
    }

    #[test]
    fn the_flags_win_over_the_file_and_the_defaults_fill_in() {
        let section = EngineSection {
            kind: Some("restate".to_owned()),
            ingress_url: Some("http://10.0.0.1:8080/".to_owned()),
            admin_url: None,
            worker_timeout: None,
        };
        assert_eq!(
            resolve(&EngineFlags::default(), None, Some(&section)).unwrap(),
            Engine::Restate {
                ingress: "http://10.0.0.1:8080".to_owned(),
                admin: DEFAULT_ADMIN.to_owned(),
                worker_timeout: Duration::from_secs(DEFAULT_WORKER_TIMEOUT),
            }
        );
        assert_eq!(
            resolve(&flags(Some("local"), None, None), None, Some(&section)).unwrap(),
            Engine::Local
        );
        assert_eq!(
            resolve(
                &flags(None, Some("http://h:1"), Some("http://h:2")),
                None,
                Some(&section)
            )
            .unwrap(),
            Engine::Restate {
                ingress: "http://h:1".to_owned(),
                admin: "http://h:2".to_owned(),
                worker_timeout: Duration::from_secs(DEFAULT_WORKER_TIMEOUT),
            }
        );
    }

    #[test]
    fn the_worker_timeout_is_the_flag_over_the_file_and_never_zero() {
        let section = |secs| EngineSection {
            kind: Some("restate".to_owned()),
            worker_timeout: secs,
            ..EngineSection::default()
        };
        let timeout = |flag: Option<u64>, file: Option<u64>| {
            let flags = EngineFlags {
                worker_timeout: flag,
                ..EngineFlags::default()
            };
            match resolve(&flags, Some(Path::new("dsh.toml")), Some(&section(file))) {
                Ok(Engine::Restate { worker_timeout, .. }) => Ok(worker_timeout.as_secs()),
                Ok(Engine::Local) => panic!("the file asks for restate"),
                Err(error) => Err(error.to_string()),
            }
        };
        assert_eq!(timeout(None, None), Ok(DEFAULT_WORKER_TIMEOUT));
        assert_eq!(timeout(None, Some(7)), Ok(7));
        assert_eq!(timeout(Some(2), Some(7)), Ok(2));
        assert_eq!(
            timeout(Some(0), None),
            Err("bad --worker-timeout: at least 1 second".to_owned())
        );
        assert_eq!(
            timeout(None, Some(0)),
            Err("dsh.toml: engine.worker_timeout: at least 1 second".to_owned())
        );
        let local = EngineFlags {
            worker_timeout: Some(3),
            ..EngineFlags::default()
        };
        assert!(
            resolve(&local, None, None)
                .unwrap_err()
                .to_string()
                .contains("--engine restate")
        );
    }

    #[test]
    fn a_bad_kind_or_url_names_its_key_or_flag() {
        let file = Path::new("/etc/dsh.toml");
        let bad = |section: EngineSection| {
            resolve(&EngineFlags::default(), Some(file), Some(&section))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            bad(EngineSection {
                kind: Some("temporal".to_owned()),
                ..EngineSection::default()
            }),
            "/etc/dsh.toml: engine.kind: unknown engine `temporal` (`local` or `restate`)"
        );
        assert_eq!(
            bad(EngineSection {
                kind: Some("restate".to_owned()),
                admin_url: Some("https://h:9070".to_owned()),
                ..EngineSection::default()
            }),
            "/etc/dsh.toml: engine.admin_url: `https://h:9070`: https is not supported yet: dsh talks to Restate over plain http:// on a trusted network"
        );
        for url in [
            "h:8080",
            "http://",
            "http://h:port",
            "http://h:8080/x",
            "http://u@h",
            "http://h :1",
        ] {
            let said = resolve(&flags(Some("restate"), Some(url), None), None, None)
                .unwrap_err()
                .to_string();
            assert!(
                said.starts_with(&format!("bad --ingress `{url}`: ")),
                "{said}"
            );
        }
        let said = resolve(&flags(None, Some("http://h:1"), None), None, None)
            .unwrap_err()
            .to_string();
        assert!(said.contains("--engine restate"), "{said}");
    }

    proptest::proptest! {
        /// A turn that keeps failing is one line (the server's text, a
        /// journal mismatch's say, spans lines) naming the session and the
        /// step, exit 1.
        #[cfg(feature = "restate")]
        #[test]
        fn a_failing_turn_is_one_line_naming_its_session_and_step(
            lines in proptest::collection::vec("[ -~]{0,20}", 1..5),
            mismatch in proptest::bool::ANY,
        ) {
            let text = lines.join("\n");
            let error = if mismatch { format!("[570 Journal mismatch] {text}") } else { text };
            let said = cluster_error(ClientError::TurnFailing {
                session: dsh_core::SessionId::new("lead").unwrap(),
                status: "backing-off".to_owned(),
                step: Some("tool:s0-call-1".to_owned()),
                error,
            });
            proptest::prop_assert_eq!(said.exit_code(), 1);
            let line = said.to_string();
            proptest::prop_assert!(!line.contains('\n'), "{}", line);
            proptest::prop_assert!(
                line.starts_with("a turn of `lead` is failing (backing-off) at `tool:s0-call-1`:"),
                "{}",
                line
            );
            proptest::prop_assert_eq!(line.contains("another path than its journal"), mismatch);
        }
    }
}
