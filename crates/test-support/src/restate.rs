//! The harness of the suites and benches that run against a real Restate
//! server (feature `restate`), the one copy `dsh-restate`'s and `dsh`'s
//! tests share: a private network namespace per test ([`isolated`]), the
//! server with a temporary data directory ([`Server`], installed by
//! `crates/restate/server/install.sh`, restartable), worker processes
//! ([`Worker`]: `dsh worker`, or the scripted test worker of
//! [`test_worker`]), a failover [`Front`] for several workers, and a
//! [`cluster::Cluster`] of all of them running one script.
//!
//! Why a namespace, and how: `restate-server` asks GitHub for a newer
//! release on every start (no setting turns that off in 1.7), and nothing
//! may leave the machine. So each test re-executes its own test binary,
//! filtered to itself, under `unshare --net` with loopback brought up; the
//! server, the workers and the test's client all run inside that namespace
//! (the children inherit it), where only loopback exists. A fresh namespace
//! per test also gives each its own ports: the server's defaults (8080,
//! 9070, 5122) and the worker's 9080 never clash between tests running in
//! parallel. Where a namespace cannot be made (not root, no `unshare`),
//! the test fails under `CI=true` and elsewhere passes, saying why on
//! stderr.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod cluster;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::skip_or_fail;
use dsh_restate::client::RestateClient;

/// Set in the re-executed test: it runs inside its namespace.
const INSIDE: &str = "DSH_RESTATE_TEST_NETNS";

/// The worker's address inside a test's namespace.
pub const WORKER_ADDR: &str = "127.0.0.1:9080";

/// Whether the calling test should run its body here: `true` inside its
/// private network namespace; `false` in the outer run, after the test
/// ran in a namespace and passed (it panics if it failed) or could not be
/// run in one outside CI. `test` is the test function's name.
pub fn isolated(test: &str) -> bool {
    if inside() {
        let devices = std::fs::read_to_string("/proc/self/net/dev").unwrap();
        let others: Vec<&str> = devices
            .lines()
            .skip(2)
            .filter_map(|line| line.split(':').next())
            .map(str::trim)
            .filter(|name| *name != "lo")
            .collect();
        assert!(others.is_empty(), "not isolated: interfaces {others:?}");
        return true;
    }
    let output = in_namespace()
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(error) => return cannot_isolate(test, &format!("`unshare` could not be run: {error}")),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !stdout.contains("running 1 test") {
        return cannot_isolate(test, stderr.trim());
    }
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test} failed in its network namespace:\n{stdout}\n{stderr}"
    );
    say(stderr.trim_end());
    false
}

/// Whether this process runs in the namespace [`in_namespace`] made.
pub fn inside() -> bool {
    std::env::var_os(INSIDE).is_some()
}

/// A command running this executable again (add its arguments) under
/// `unshare --net`, loopback up, marked so that [`inside`] is true there
/// (a bench re-executes itself with it).
pub fn in_namespace() -> Command {
    let mut command = Command::new("unshare");
    command
        .args([
            "--net",
            "--",
            "sh",
            "-c",
            "ip link set lo up && exec \"$@\"",
            "sh",
        ])
        .arg(std::env::current_exe().unwrap())
        .env(INSIDE, "1");
    command
}

fn cannot_isolate(test: &str, why: &str) -> bool {
    skip_or_fail(&format!(
        "{test}: no private network namespace (`unshare --net` and `ip link set lo up`, as root): {why}"
    ));
    false
}

/// Write a line to the real stderr: libtest captures `eprintln!` of a
/// passing test, and these lines are for the person running the suite.
fn say(line: &str) {
    if !line.is_empty() {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}

/// The installed server binary, or a panic naming the install script.
fn server_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../restate/server/bin/restate-server");
    assert!(
        path.exists(),
        "the Restate server is missing at {}: run crates/restate/server/install.sh",
        path.display()
    );
    path
}

/// The server's configuration: offline, small, retrying fast.
const CONFIG: &str = r#"cluster-name = "dsh-test"
bind-ip = "127.0.0.1"
disable-telemetry = true
default-num-partitions = 2
rocksdb-total-memory-size = "256.0 MiB"

[default-retry-policy]
initial-interval = "50ms"
max-interval = "500ms"

[admin]
disable-web-ui = true
"#;

/// A running `restate-server` on a temporary data directory, killed (and
/// reaped) on drop.
pub struct Server {
    child: Child,
    dir: tempfile::TempDir,
    /// A client of its ingress and admin APIs.
    pub client: RestateClient,
}

impl Server {
    /// Start the server and wait until its admin API and ingress are
    /// healthy (at most 60 s).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped before it returns, it leaves the server
    /// process running (only a built [`Server`] kills it on drop). Tests
    /// await it to the end.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), CONFIG).unwrap();
        let child = spawn_server(dir.path());
        let client = RestateClient::new("http://127.0.0.1:8080", "http://127.0.0.1:9070").unwrap();
        let mut server = Self { child, dir, client };
        server.wait_healthy().await;
        server
    }

    /// Stop the server with SIGTERM, wait for it to exit, and start it
    /// again on the same data directory.
    ///
    /// # Cancel safety
    /// As [`Server::start`]: dropped while the server starts again, the
    /// new process runs on until the [`Server`] is dropped.
    pub async fn restart(&mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap();
        self.child = spawn_server(self.dir.path());
        self.wait_healthy().await;
    }

    async fn wait_healthy(&mut self) {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(60);
        loop {
            if self.client.health().await.is_ok() {
                break;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("restate-server exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "restate-server not healthy in 60 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!(
            "restate-server healthy {} ms after exec",
            started.elapsed().as_millis()
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

/// Start `restate-server` on the configuration and data in `dir`, its
/// output appended to `dir/server.log`.
fn spawn_server(dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .unwrap();
    Command::new(server_binary())
        .arg("--config-file")
        .arg(dir.join("config.toml"))
        .arg("--base-dir")
        .arg(dir.join("data"))
        .arg("--no-logo")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

impl Server {
    /// Start the server and one worker (`worker`, a command that serves
    /// dsh's objects and says where), and register the worker as the
    /// server's deployment.
    ///
    /// # Cancel safety
    /// As [`Server::start`] while the server starts; after that the built
    /// [`Server`] and [`Worker`] kill their processes on drop.
    pub async fn with_worker(worker: Command) -> (Self, Worker) {
        let server = Self::start().await;
        let worker = Worker::start(worker);
        server
            .client
            .register_deployment(&worker.uri)
            .await
            .unwrap();
        (server, worker)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker process (`dsh worker`, `dsh-restate-worker`), killed (and
/// reaped) on drop.
pub struct Worker {
    child: Child,
    /// The URL it serves, to register with the server.
    pub uri: String,
}

impl Worker {
    /// Start `command`, a worker that prints `listening on URL` on stdout
    /// once bound, and wait for that line.
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let uri = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the worker said {line:?}"))
            .to_owned();
        Self { child, uri }
    }

    /// `kill -9` the worker and reap it.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        assert!(!status.success(), "the worker exited by itself: {status}");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The scripted test worker of `dsh-restate` (its `dsh-restate-worker`
/// binary) listening on `addr`, running `script` (its `--script`) if
/// given; start it with [`Worker::start`]. The binary is the one Cargo
/// built beside the running test or bench (`target/<profile>/`), as for
/// `dsh-restate`'s own tests and benches.
pub fn test_worker(addr: &str, script: Option<&Path>) -> Command {
    let exe = std::env::current_exe().unwrap();
    let binary = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("dsh-restate-worker"))
        .filter(|binary| binary.exists())
        .unwrap_or_else(|| {
            panic!(
                "no dsh-restate-worker beside {}: only dsh-restate's tests and benches build it",
                exe.display()
            )
        });
    let mut command = Command::new(binary);
    command.args(["--listen", addr]);
    if let Some(script) = script {
        command.arg("--script").arg(script);
    }
    command
}

/// A failover front for several workers, as one deployment address: each
/// connection goes to the first worker (in the order given) that accepts
/// it. Restate knows one URL per deployment; this stands for the L4
/// balancer a user puts in front of identical workers. Both legs of a
/// connection have `TCP_NODELAY`, as a worker's own sockets do: the
/// server's small HTTP/2 frames are not held back. Stops on drop.
pub struct Front {
    task: tokio::task::JoinHandle<()>,
    /// The URL to register.
    pub uri: String,
}

impl Front {
    /// Listen on `addr`, forwarding to `workers` (addresses).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped before it returns, nothing listens.
    pub async fn start(addr: &str, workers: Vec<String>) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                inbound.set_nodelay(true).unwrap();
                let workers = workers.clone();
                tokio::spawn(async move {
                    for worker in &workers {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(worker).await {
                            outbound.set_nodelay(true).unwrap();
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                });
            }
        });
        Self { task, uri }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long a test's body may take at most: a call to the ingress waits
/// as long as the server retries, so a test that breaks a worker for good
/// would otherwise never end.
const TEST_BOUND: Duration = Duration::from_secs(120);

/// Run a test's client side on a multi-threaded runtime, failing it if it
/// has not finished within `TEST_BOUND` (two minutes).
pub fn run(body: impl std::future::Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        tokio::time::timeout(TEST_BOUND, body)
            .await
            .unwrap_or_else(|_| panic!("the test did not finish in {TEST_BOUND:?}"));
    });
}
