//! [`Cluster`]: a server and two scripted test workers (A, then B) behind
//! one failover [`Front`], running one script (or B its own), with the
//! gates (FIFO pairs) the script's steps wait at. Shared by
//! `dsh-restate`'s kill tests and its engine bench.

use std::path::Path;
use std::time::Duration;

use dsh_core::{SessionHeader, SessionId, UserMessage};
use dsh_restate::client::{ClientError, RestateClient};
use serde_json::{Value, json};

use super::{Front, Server, Worker, test_worker};

/// How often a test asks whether a session is idle.
pub const POLL: Duration = Duration::from_millis(20);

/// Where A and B listen behind the front (which tries A first).
const A_ADDR: &str = "127.0.0.1:9081";
const B_ADDR: &str = "127.0.0.1:9082";
/// A's script, in the script's folder.
const A_SCRIPT: &str = "script.json";

/// A server, workers A and B behind one front, and the script's folder.
pub struct Cluster {
    /// The server.
    pub server: Server,
    a: Option<Worker>,
    b: Option<Worker>,
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
        let script = json!({"sessions": sessions});
        Self::start_workers(script.clone(), gates, Some(script)).await
    }

    /// As [`Cluster::start`], with worker B running its own `script_b`
    /// (a whole script: `sessions` and settings; `dir` is added): B stands
    /// for another build, so a turn A journaled and B replays may take
    /// another path (a journal mismatch).
    ///
    /// # Cancel safety
    /// As [`Cluster::start`].
    pub async fn start_with_b_script(sessions: Value, gates: &[&str], script_b: Value) -> Self {
        Self::start_workers(json!({"sessions": sessions}), gates, Some(script_b)).await
    }

    /// As [`Cluster::start`], with the workers' delegation depth limit
    /// (the script's `max_depth`).
    ///
    /// # Cancel safety
    /// As [`Cluster::start`].
    pub async fn start_with_max_depth(sessions: Value, gates: &[&str], max_depth: u32) -> Self {
        let script = json!({"sessions": sessions, "max_depth": max_depth});
        Self::start_workers(script.clone(), gates, Some(script)).await
    }

    /// As [`Cluster::start`], with worker A alone behind the front.
    ///
    /// # Cancel safety
    /// As [`Cluster::start`].
    pub async fn start_with_one_worker(sessions: Value, gates: &[&str]) -> Self {
        Self::start_workers(json!({"sessions": sessions}), gates, None).await
    }

    /// Start with A running `script_a` and B, if any, `script_b` (each its
    /// `sessions` and settings; `dir` is added).
    async fn start_workers(script_a: Value, gates: &[&str], script_b: Option<Value>) -> Self {
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
        let write = |name: &str, mut script: Value| {
            script["dir"] = json!(dir.path());
            let path = dir.path().join(name);
            std::fs::write(&path, script.to_string()).unwrap();
            path
        };
        let script_a = write(A_SCRIPT, script_a);
        let script_b = script_b.map(|script| write("script-b.json", script));
        let server = Server::start().await;
        let a = Worker::start(test_worker(A_ADDR, Some(&script_a)));
        let b = script_b.map(|script| Worker::start(test_worker(B_ADDR, Some(&script))));
        let front = Front::start("127.0.0.1:9080", vec![A_ADDR.into(), B_ADDR.into()]).await;
        server.client.register_deployment(&front.uri).await.unwrap();
        server.client.check_worker().await.unwrap();
        Self {
            server,
            a: Some(a),
            b,
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

    /// `kill -9` worker B.
    pub fn kill_b(&mut self) {
        self.b.take().unwrap().kill9();
    }

    /// Start A again on its address with its script (after
    /// [`Cluster::kill_a`]): the front gives it the connections made from
    /// then on (the server's open connections to B stay B's).
    pub fn restart_a(&mut self) {
        assert!(self.a.is_none(), "A is running");
        let script = self.dir.path().join(A_SCRIPT);
        self.a = Some(Worker::start(test_worker(A_ADDR, Some(&script))));
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
