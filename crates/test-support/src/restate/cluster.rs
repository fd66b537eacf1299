//! [`Cluster`]: a server and two scripted test workers (A, then B) behind
//! one failover [`Front`], running one script, with the gates (FIFO pairs)
//! the script's steps wait at. Shared by `dsh-restate`'s kill tests and
//! its engine bench.

use std::path::Path;
use std::time::Duration;

use dsh_core::{SessionHeader, SessionId, UserMessage};
use dsh_restate::client::{ClientError, RestateClient};
use serde_json::{Value, json};

use super::{Front, Server, Worker, test_worker};

/// How often a test asks whether a session is idle.
pub const POLL: Duration = Duration::from_millis(20);

/// A server, workers A and B behind one front, and the script's folder.
pub struct Cluster {
    /// The server.
    pub server: Server,
    a: Option<Worker>,
    _b: Option<Worker>,
    _front: Front,
    /// The script's folder (records, gates).
    pub dir: tempfile::TempDir,
    /// How often [`Cluster::wait_turns`] asks.
    pub poll: Duration,
}

impl Cluster {
    /// Start everything with `sessions` as the workers' script; `gates`
    /// are made as FIFOs.
    ///
    /// # Cancel safety
    /// As [`Server::start`]: dropped before it returns, processes already
    /// started run on (a built [`Cluster`] kills them on drop).
    pub async fn start(sessions: Value, gates: &[&str]) -> Self {
        Self::start_workers(json!({"sessions": sessions}), gates, true).await
    }

    /// As [`Cluster::start`], with the workers' delegation depth limit
    /// (the script's `max_depth`).
    ///
    /// # Cancel safety
    /// As [`Cluster::start`].
    pub async fn start_with_max_depth(sessions: Value, gates: &[&str], max_depth: u32) -> Self {
        let script = json!({"sessions": sessions, "max_depth": max_depth});
        Self::start_workers(script, gates, true).await
    }

    /// As [`Cluster::start`], with worker A alone behind the front.
    ///
    /// # Cancel safety
    /// As [`Cluster::start`].
    pub async fn start_with_one_worker(sessions: Value, gates: &[&str]) -> Self {
        Self::start_workers(json!({"sessions": sessions}), gates, false).await
    }

    /// Start with `script` (its `sessions` and settings; `dir` is added).
    async fn start_workers(mut script: Value, gates: &[&str], with_b: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for gate in gates {
            for end in ["started", "open"] {
                let status = std::process::Command::new("mkfifo")
                    .arg(dir.path().join(format!("{gate}.{end}")))
                    .status()
                    .unwrap();
                assert!(status.success());
            }
        }
        script["dir"] = json!(dir.path());
        let text = script.to_string();
        let script = dir.path().join("script.json");
        std::fs::write(&script, text).unwrap();
        let server = Server::start().await;
        let a = Worker::start(test_worker("127.0.0.1:9081", Some(&script)));
        let b = with_b.then(|| Worker::start(test_worker("127.0.0.1:9082", Some(&script))));
        let front = Front::start(
            "127.0.0.1:9080",
            vec!["127.0.0.1:9081".into(), "127.0.0.1:9082".into()],
        )
        .await;
        server.client.register_deployment(&front.uri).await.unwrap();
        server.client.check_worker().await.unwrap();
        Self {
            server,
            a: Some(a),
            _b: b,
            _front: front,
            dir,
            poll: POLL,
        }
    }

    /// The server's client.
    pub fn client(&self) -> &RestateClient {
        &self.server.client
    }

    /// Wait until `id` has ended `turns` turns and is idle, asking every
    /// [`Cluster::poll`]. A session not created yet (a child its parent's
    /// turn is still starting) is waited for too.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn wait_turns(&self, id: &SessionId, turns: u64) {
        loop {
            match self.client().status(id).await {
                Ok(status) if status.head.turns_ended >= turns && status.is_idle() => return,
                Ok(_) | Err(ClientError::NoSuchSession(_)) => {}
                Err(error) => panic!("the status of {id}: {error}"),
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Wait until gate `gate`'s step is in flight (it wrote its start).
    ///
    /// # Cancel safety
    /// Not cancel safe: the read of the FIFO goes on in a blocking task,
    /// and takes the next start line when the step writes it.
    pub async fn started(&self, gate: &str) {
        let path = self.dir.path().join(format!("{gate}.started"));
        let line = tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(line, "started\n");
    }

    /// Let gate `gate`'s step through.
    ///
    /// # Cancel safety
    /// Not cancel safe: the write to the FIFO goes on in a blocking task
    /// and opens the gate when the step reaches it.
    pub async fn open(&self, gate: &str) {
        let path = self.dir.path().join(format!("{gate}.open"));
        tokio::task::spawn_blocking(move || std::fs::write(path, "open\n"))
            .await
            .unwrap()
            .unwrap();
    }

    /// `kill -9` worker A.
    pub fn kill_a(&mut self) {
        self.a.take().unwrap().kill9();
    }

    /// Kill A while gate `gate`'s step is in flight on it, then let the
    /// step through when B runs it again.
    ///
    /// # Cancel safety
    /// As [`Cluster::started`] and [`Cluster::open`].
    pub async fn kill_a_at_and_rerun(&mut self, gate: &str) {
        self.started(gate).await;
        self.kill_a();
        self.started(gate).await;
        self.open(gate).await;
    }

    /// Start the lead with a prompt.
    ///
    /// # Cancel safety
    /// As [`RestateClient::start`].
    pub async fn start_lead(&self) -> SessionId {
        let (id, header) = lead();
        self.client()
            .start(&header, UserMessage::user_text("go"))
            .await
            .unwrap();
        id
    }

    /// The lines of the worker's record `file` (`asks`, `runs`).
    pub fn record(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(file))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The lead's id and header.
pub fn lead() -> (SessionId, SessionHeader) {
    let id = SessionId::new("lead").unwrap();
    let header = SessionHeader::new(id.clone(), Path::new("/"));
    (id, header)
}
