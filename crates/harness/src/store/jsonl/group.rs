//! Group commit for [`Durability::Grouped`](dsh_core::Durability::Grouped):
//! one committer thread per store forces, in rounds, every log that asked
//! for a sync since the last round, and the store's directory once for all
//! the creates among them, then answers each asker with its own result. A
//! round starts as soon as the committer is free; while several logs are
//! asking (the last round, or this one, had more than one request) it
//! lingers for late arrivals, closing when none came for a short gap or the
//! configured window has passed since its first request, so a lone writer
//! never waits and a crowd shares its flushes (a round forces its files from
//! several threads at once, which the file system commits together). Every
//! request owns a share of its log's owner, so a log whose caller dropped
//! the future stays held until its sync has run. This module must never answer a request before
//! the sync that covers it has returned, and never answer one twice.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use dsh_core::StoreError;
use tokio::sync::oneshot;

use super::fsync;
use super::io_error;
use super::slot::Held;

/// How long a lingering round waits for one more request before it closes.
const GAP: Duration = Duration::from_micros(100);

/// The window a store uses unless told otherwise: the reference's 200 ms.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(200);

/// What a finished sync tells its asker.
pub(super) type Done = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// One log asking to be forced to stable storage.
pub(super) struct Request {
    /// The log's owner: the file to sync, held until the sync has run.
    pub(super) held: Arc<Held>,
    /// Where the file lives, for errors.
    pub(super) path: PathBuf,
    /// Whether the directory entry must be forced too (a create).
    pub(super) dir: bool,
    /// Told the result once, after the sync.
    pub(super) done: Done,
}

/// The committer of one store, started at its first request.
#[derive(Debug)]
pub(super) struct GroupCommit {
    dir: PathBuf,
    window: Duration,
    sender: OnceLock<Sender<Request>>,
    /// Serialises the committer's start.
    starting: Mutex<()>,
}

impl GroupCommit {
    /// A committer for the logs in `dir`, lingering at most `window`.
    pub(super) fn new(dir: PathBuf, window: Duration) -> Self {
        Self {
            dir,
            window,
            sender: OnceLock::new(),
            starting: Mutex::new(()),
        }
    }

    /// The configured window.
    pub(super) fn window(&self) -> Duration {
        self.window
    }

    /// Queue `request`; its `done` runs once the sync that covers it has.
    ///
    /// # Errors
    /// The committer thread cannot be started (the request is answered
    /// with the same error, so its asker learns it either way).
    fn submit(&self, request: Request) -> Result<(), StoreError> {
        let sender = match self.sender.get() {
            Some(sender) => sender,
            None => {
                let _guard = self.starting.lock().unwrap_or_else(PoisonError::into_inner);
                match self.sender.get() {
                    Some(sender) => sender,
                    None => {
                        let (sender, receiver) = mpsc::channel();
                        let (dir, window) = (self.dir.clone(), self.window);
                        let started = std::thread::Builder::new()
                            .name("dsh-group-commit".into())
                            .spawn(move || run(&receiver, &dir, window));
                        if let Err(source) = started {
                            let err = io_error(&self.dir, source);
                            (request.done)(Err(err.clone()));
                            return Err(err);
                        }
                        self.sender.get_or_init(|| sender)
                    }
                }
            }
        };
        if let Err(mpsc::SendError(request)) = sender.send(request) {
            // The committer is gone (it panicked): say so to the asker.
            let err = io_error(
                &request.path,
                std::io::Error::other("the group-commit thread has ended"),
            );
            (request.done)(Err(err.clone()));
            return Err(err);
        }
        Ok(())
    }

    /// Sync `held` (and the directory, when `dir`) in the next round and
    /// wait for it. `then` runs on the committer with the result before the
    /// caller hears it, whether or not the caller is still waiting.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves the request queued; the sync
    /// runs, `then` with it, and the log stays held until then.
    pub(super) async fn sync(
        &self,
        held: Arc<Held>,
        path: &Path,
        dir: bool,
        then: impl FnOnce(&Result<(), StoreError>) + Send + 'static,
    ) -> Result<(), StoreError> {
        let (tell, hear) = oneshot::channel();
        let request = Request {
            held,
            path: path.to_path_buf(),
            dir,
            done: Box::new(move |result| {
                then(&result);
                // The caller may have stopped listening; the sync ran anyway.
                let _ = tell.send(result);
            }),
        };
        self.submit(request)?;
        match hear.await {
            Ok(result) => result,
            Err(_) => Err(io_error(
                path,
                std::io::Error::other("the group-commit thread ended before syncing"),
            )),
        }
    }
}

/// The committer loop: rounds until every sender is gone.
fn run(receiver: &Receiver<Request>, dir: &Path, window: Duration) {
    let mut crowded = false;
    while let Ok(first) = receiver.recv() {
        let opened = Instant::now();
        let mut round = vec![first];
        round.extend(receiver.try_iter());
        if crowded || round.len() > 1 {
            loop {
                let left = window.saturating_sub(opened.elapsed());
                if left.is_zero() {
                    break;
                }
                match receiver.recv_timeout(left.min(GAP)) {
                    Ok(request) => {
                        round.push(request);
                        round.extend(receiver.try_iter());
                    }
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
        }
        crowded = round.len() > 1;
        commit(round, dir);
    }
}

/// The most threads one round forces its files on.
const SYNC_THREADS: usize = 16;

/// `fdatasync` every file of `requests`, results in order. Several files are
/// forced from several threads at once: the file system then commits them
/// in one journal transaction, where one after another would pay a commit
/// each.
pub(super) fn sync_all_of(requests: &[(&Held, &Path)]) -> Vec<Result<(), StoreError>> {
    let sync = |(held, path): &(&Held, &Path)| {
        held.sync_data(path)
            .map_err(|source| io_error(path, source))
    };
    if requests.len() <= 1 {
        return requests.iter().map(sync).collect();
    }
    let per_thread = requests.len().div_ceil(SYNC_THREADS);
    std::thread::scope(|scope| {
        let chunks: Vec<_> = requests
            .chunks(per_thread)
            .map(|chunk| {
                let spawned = std::thread::Builder::new()
                    .name("dsh-group-sync".into())
                    .spawn_scoped(scope, move || chunk.iter().map(sync).collect::<Vec<_>>());
                (chunk, spawned)
            })
            .collect();
        chunks
            .into_iter()
            .flat_map(|(chunk, spawned)| match spawned {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to spare: force this chunk here.
                Err(_) => chunk.iter().map(sync).collect(),
            })
            .collect()
    })
}

/// Force every file of `round` (each once) and the directory once if any
/// asked for it, then answer every request.
fn commit(round: Vec<Request>, dir: &Path) {
    // The first request of each log in this round, by its owner's address;
    // later ones of the same log share its result.
    let mut first: HashMap<*const Held, usize> = HashMap::with_capacity(round.len());
    let mut of: Vec<usize> = Vec::with_capacity(round.len());
    let mut distinct: Vec<(&Held, &Path)> = Vec::new();
    for request in &round {
        let at = match first.entry(Arc::as_ptr(&request.held)) {
            Entry::Occupied(earlier) => *earlier.get(),
            Entry::Vacant(slot) => {
                distinct.push((&request.held, &request.path));
                *slot.insert(distinct.len() - 1)
            }
        };
        of.push(at);
    }
    let synced = sync_all_of(&distinct);
    let results: Vec<Result<(), StoreError>> = of.iter().map(|&at| synced[at].clone()).collect();
    let dir_result = if round.iter().any(|request| request.dir) {
        fsync::dir(dir)
    } else {
        Ok(())
    };
    for (request, result) in round.into_iter().zip(results) {
        let result = match (result, request.dir) {
            (Ok(()), true) => dir_result.clone(),
            (result, _) => result,
        };
        (request.done)(result);
    }
}
