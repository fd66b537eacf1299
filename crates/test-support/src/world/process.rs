//! Tests that kill a process: the test binary re-executes one of its own
//! tests as a child process (selected by an environment variable naming a
//! directory), waits for it to write a readiness file, and kills it.
//! [`Reaped`] kills and reaps the child if the test fails first, so no
//! process outlives its test.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process that is killed and reaped if dropped before the test
/// took it.
#[derive(Debug)]
pub struct Reaped(pub Option<Child>);

impl Reaped {
    /// The child process, now the caller's to wait for.
    ///
    /// # Panics
    /// When it was taken already.
    #[allow(clippy::expect_used)]
    pub fn take(&mut self) -> Child {
        self.0.take().expect("the child process was not taken yet")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Run the test `test` of this test binary in a child process with `var`
/// set to `dir`, and wait (up to `bound`) until it created `dir/ready`.
///
/// # Panics
/// When the process cannot start, exits first, or is not ready in time.
#[allow(clippy::expect_used)]
pub fn start_ready(test: &str, var: &str, dir: &Path, bound: Duration) -> Reaped {
    let child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the child process starts");
    let mut child = Reaped(Some(child));
    let ready = dir.join("ready");
    let deadline = Instant::now() + bound;
    while !ready.exists() {
        let exited = child
            .0
            .as_mut()
            .and_then(|process| process.try_wait().ok().flatten());
        if let Some(status) = exited {
            panic!("the child process exited before it was ready: {status}");
        }
        assert!(Instant::now() < deadline, "not ready within {bound:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    child
}

/// The body of a test that [`start_ready`] re-executes: when `var` is set,
/// run `body` with the directory it names on a fresh two-worker runtime;
/// when it is not (the test binary run normally), return at once.
///
/// # Panics
/// When the runtime cannot be built, or `body` panics.
#[allow(clippy::expect_used)]
pub fn run_as_child<F, Fut>(var: &str, body: F)
where
    F: FnOnce(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(dir) = std::env::var_os(var) else {
        return;
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(body(std::path::PathBuf::from(dir)));
}
