//! Write-behind group commit for
//! [`Durability::Batched`](dsh_core::Durability::Batched): creates and
//! appends return once their bytes are handed to the OS and mark their log
//! dirty here; one committer thread per store forces, in rounds, every log
//! marked since its last round, at the latest one window after the first
//! mark, and at once when someone waits ([`WriteBehind::sync_log`],
//! [`WriteBehind::flush`]). A round first forces the logs created since the
//! last round and then the directory, and only then every other dirty log,
//! and no log is created while a round runs (creates hold the round lock
//! shared, a round holds it exclusively), so a log that names a child (a
//! parent's catalog entry) is never forced by a round before the child's
//! file and directory entry are. Every mark owns a share of its log's
//! owner, so a closed log stays held until its sync has run. A failed sync
//! poisons its log's [`Mark`] and is kept as the store's failure, returned
//! by every later flush. This module must never answer a waiter before the
//! sync that covers it has returned, and never let a failure go unreported.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use dsh_core::StoreError;
use tokio::sync::{Notify, oneshot};

use super::fsync;
use super::group::sync_all_of;
use super::io_error;
use super::slot::{Held, Mark};

/// A log in a round: its owner (held until the round has forced it) and
/// its path, for errors.
struct Entry {
    held: Arc<Held>,
    path: PathBuf,
}

/// What a waiter waits for.
enum Wants {
    /// The log of `mark` forced up to its `target`-th write.
    Log { mark: Arc<Mark>, target: u64 },
    /// A round taken after round `after` to have finished.
    Store { after: u64 },
}

/// Someone waiting for a round.
struct Waiter {
    wants: Wants,
    tell: oneshot::Sender<Result<(), StoreError>>,
}

/// What the writers and the committer share under one mutex.
#[derive(Default)]
struct Pending {
    /// Logs created since the last round was taken: file and directory.
    new: Vec<Entry>,
    /// Other logs written since the last round was taken.
    dirty: Vec<Entry>,
    /// When the oldest of those was marked.
    since: Option<Instant>,
    /// Who waits for a round.
    waiters: Vec<Waiter>,
    /// Rounds taken so far.
    taken: u64,
    /// Logs of the round being forced.
    in_round: usize,
    /// The first failure of any round: every later flush returns it.
    failure: Option<StoreError>,
    /// The store is gone: force what is left and end.
    stop: bool,
}

/// What the store and its committer thread share.
struct Inner {
    dir: PathBuf,
    window: Duration,
    pending: Mutex<Pending>,
    wake: Condvar,
    /// Held shared by a create from making its file until it is marked,
    /// and exclusively by a round from taking its logs until its last sync.
    rounds: RwLock<()>,
    /// Told each time a round lets go of `rounds`: a create that found a
    /// round running awaits it (see [`WriteBehind::creating_soon`]).
    round_over: Notify,
    /// Every sync a round runs, in order (`new <path>`, `dir`, `dirty
    /// <path>`), for the tests of a round's order.
    #[cfg(test)]
    trace: Mutex<Vec<String>>,
}

impl Inner {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        // Every critical section leaves the lists consistent.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The write-behind committer of one store.
pub(super) struct WriteBehind {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WriteBehind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBehind")
            .field("dir", &self.inner.dir)
            .field("window", &self.inner.window)
            .finish_non_exhaustive()
    }
}

/// A create in progress: while it lives no round runs.
pub(super) struct Creating<'a>(
    #[allow(dead_code, reason = "held for its drop")] RwLockReadGuard<'a, ()>,
);

impl WriteBehind {
    /// Start the committer of the logs in `dir`, forcing them at least once
    /// per `window`.
    ///
    /// # Errors
    /// The committer thread cannot be started.
    pub(super) fn start(dir: PathBuf, window: Duration) -> Result<Self, StoreError> {
        let inner = Arc::new(Inner {
            dir,
            window,
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            rounds: RwLock::new(()),
            round_over: Notify::new(),
            #[cfg(test)]
            trace: Mutex::new(Vec::new()),
        });
        let committer = Arc::clone(&inner);
        std::thread::Builder::new()
            .name("dsh-write-behind".into())
            .spawn(move || run(&committer))
            .map_err(|source| io_error(&inner.dir, source))?;
        Ok(Self { inner })
    }

    /// The configured window.
    pub(super) fn window(&self) -> Duration {
        self.inner.window
    }

    /// Hold off rounds while a log is created (until the guard is dropped,
    /// after [`WriteBehind::created`]). When a round is running (or about
    /// to), await its end rather than block the thread for its syncs: a
    /// create on an async task never parks its worker, nor a thread of the
    /// blocking pool, for a round.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait holds nothing.
    pub(super) async fn creating_soon(&self) -> Creating<'_> {
        loop {
            if let Some(creating) = self.try_creating() {
                return creating;
            }
            let over = self.inner.round_over.notified();
            let mut over = std::pin::pin!(over);
            // Registered before the second look: a round that ends in
            // between still wakes it.
            over.as_mut().enable();
            if let Some(creating) = self.try_creating() {
                return creating;
            }
            over.await;
        }
    }

    /// [`WriteBehind::creating_soon`] if no round is running (or waiting
    /// to run) right now.
    fn try_creating(&self) -> Option<Creating<'_>> {
        match self.inner.rounds.try_read() {
            Ok(guard) => Some(Creating(guard)),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                Some(Creating(poisoned.into_inner()))
            }
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// A log was created (its file and directory entry to be forced first
    /// in the next round).
    pub(super) fn created(&self, held: &Arc<Held>, path: &Path) {
        let mark = held.mark();
        mark.written.fetch_add(1, Ordering::SeqCst);
        mark.queued.store(true, Ordering::SeqCst);
        self.queue(held, path, true);
    }

    /// A write to the log of `held` was handed to the OS.
    pub(super) fn wrote(&self, held: &Arc<Held>, path: &Path) {
        let mark = held.mark();
        mark.written.fetch_add(1, Ordering::SeqCst);
        if !mark.queued.swap(true, Ordering::SeqCst) {
            self.queue(held, path, false);
        }
    }

    fn queue(&self, held: &Arc<Held>, path: &Path, new: bool) {
        let entry = Entry {
            held: Arc::clone(held),
            path: path.to_path_buf(),
        };
        let mut pending = self.inner.pending();
        if new {
            pending.new.push(entry);
        } else {
            pending.dirty.push(entry);
        }
        if pending.since.is_none() {
            pending.since = Some(Instant::now());
            self.inner.wake.notify_one();
        }
    }

    /// Wait until every write to the log of `mark` so far is forced.
    ///
    /// # Errors
    /// The failure that poisoned the log.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait changes nothing; the round it asked for
    /// still runs.
    pub(super) async fn sync_log(&self, mark: &Arc<Mark>) -> Result<(), StoreError> {
        let target = mark.written.load(Ordering::SeqCst);
        let hear = {
            let mut pending = self.inner.pending();
            if let Some(err) = mark.failed() {
                return Err(err.clone());
            }
            if mark.synced.load(Ordering::SeqCst) >= target {
                return Ok(());
            }
            self.wait(
                &mut pending,
                Wants::Log {
                    mark: Arc::clone(mark),
                    target,
                },
            )
        };
        self.hear(hear).await
    }

    /// Wait until everything written to any log of the store so far is
    /// forced.
    ///
    /// # Errors
    /// The first failure of any round of this store.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped flush changes nothing; the round it asked
    /// for still runs.
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        let hear = {
            let mut pending = self.inner.pending();
            let idle = pending.new.is_empty() && pending.dirty.is_empty() && pending.in_round == 0;
            if idle {
                return pending.failure.clone().map_or(Ok(()), Err);
            }
            let after = pending.taken;
            self.wait(&mut pending, Wants::Store { after })
        };
        self.hear(hear).await
    }

    /// How many logs have writes that no round has forced yet.
    pub(super) fn unsynced(&self) -> usize {
        let pending = self.inner.pending();
        pending.new.len() + pending.dirty.len() + pending.in_round
    }

    fn wait(
        &self,
        pending: &mut Pending,
        wants: Wants,
    ) -> oneshot::Receiver<Result<(), StoreError>> {
        let (tell, hear) = oneshot::channel();
        pending.waiters.push(Waiter { wants, tell });
        self.inner.wake.notify_one();
        hear
    }

    async fn hear(
        &self,
        hear: oneshot::Receiver<Result<(), StoreError>>,
    ) -> Result<(), StoreError> {
        match hear.await {
            Ok(result) => result,
            Err(_) => Err(io_error(
                &self.inner.dir,
                std::io::Error::other("the write-behind committer ended before syncing"),
            )),
        }
    }

    /// Every sync the rounds so far ran, in order.
    #[cfg(test)]
    fn trace(&self) -> Vec<String> {
        self.inner
            .trace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // Nothing of the store is left but what the committer holds: it
        // forces that and ends.
        self.inner.pending().stop = true;
        self.inner.wake.notify_one();
    }
}

/// The committer loop: a round whenever someone waits, or a window after
/// the first unforced write; ends once the store is gone and all is forced.
fn run(inner: &Inner) {
    loop {
        {
            let mut pending = inner.pending();
            loop {
                let work = !pending.new.is_empty() || !pending.dirty.is_empty();
                if !pending.waiters.is_empty() {
                    break;
                }
                if pending.stop {
                    if work {
                        break;
                    }
                    return;
                }
                pending = match pending.since {
                    Some(since) if work => {
                        let left = inner.window.saturating_sub(since.elapsed());
                        if left.is_zero() {
                            break;
                        }
                        inner
                            .wake
                            .wait_timeout(pending, left)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                    _ => inner
                        .wake
                        .wait(pending)
                        .unwrap_or_else(PoisonError::into_inner),
                };
            }
        }
        round(inner);
    }
}

/// Record the syncs a round runs (only in this module's tests).
#[cfg(test)]
fn note(inner: &Inner, lines: impl IntoIterator<Item = String>) {
    inner
        .trace
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(lines);
}

/// Record the syncs a round runs (only in this module's tests).
#[cfg(not(test))]
fn note(_: &Inner, _: impl IntoIterator<Item = String>) {}

/// Force `entries` (each log once), recording the first failure in
/// `failure` and poisoning each failed log; whether each was forced.
fn force(
    inner: &Inner,
    entries: &[Entry],
    failure: &mut Option<StoreError>,
    kind: &str,
) -> Vec<bool> {
    note(
        inner,
        entries
            .iter()
            .map(|entry| format!("{kind} {}", entry.path.display())),
    );
    let files: Vec<(&Held, &Path)> = entries
        .iter()
        .map(|entry| (&*entry.held, entry.path.as_path()))
        .collect();
    sync_all_of(&files)
        .into_iter()
        .zip(entries)
        .map(|(result, entry)| match result {
            Ok(()) => true,
            Err(err) => {
                let _ = entry.held.mark().failed.set(err.clone());
                failure.get_or_insert(err);
                false
            }
        })
        .collect()
}

/// Take every marked log and force it: the new ones and the directory
/// first, then the rest; then answer whoever the round satisfies.
fn round(inner: &Inner) {
    let exclusive = inner.rounds.write().unwrap_or_else(PoisonError::into_inner);
    let (new, dirty, id) = {
        let mut pending = inner.pending();
        let new = std::mem::take(&mut pending.new);
        let dirty = std::mem::take(&mut pending.dirty);
        pending.since = None;
        pending.taken += 1;
        pending.in_round = new.len() + dirty.len();
        (new, dirty, pending.taken)
    };
    // Unqueued before the write count is read: a write after this queues
    // its log again for the next round.
    let cover = |entry: &Entry| {
        let mark = entry.held.mark();
        mark.queued.store(false, Ordering::SeqCst);
        mark.written.load(Ordering::SeqCst)
    };
    let new_covers: Vec<u64> = new.iter().map(cover).collect();
    let dirty_covers: Vec<u64> = dirty.iter().map(cover).collect();

    let mut failure = None;
    let mut new_ok = force(inner, &new, &mut failure, "new");
    if !new.is_empty() && failure.is_none() {
        note(inner, ["dir".to_owned()]);
        if let Err(err) = fsync::dir(&inner.dir) {
            failure = Some(err);
        }
    }
    let dirty_ok = match &failure {
        // A child's log may not be on stable storage: forcing a log that
        // names it could make the name outlive the child. Nothing of this
        // round counts.
        Some(err) => {
            for entry in new.iter().chain(&dirty) {
                let _ = entry.held.mark().failed.set(err.clone());
            }
            new_ok.iter_mut().for_each(|ok| *ok = false);
            vec![false; dirty.len()]
        }
        None => force(inner, &dirty, &mut failure, "dirty"),
    };
    drop(exclusive);
    // Creates that found this round running wait for this, not a thread.
    inner.round_over.notify_waiters();
    for ((entry, cover), ok) in new
        .iter()
        .zip(&new_covers)
        .zip(&new_ok)
        .chain(dirty.iter().zip(&dirty_covers).zip(&dirty_ok))
    {
        if *ok {
            entry.held.mark().synced.fetch_max(*cover, Ordering::SeqCst);
        }
    }
    // Let go of the logs before anyone hears: a closed log is openable
    // once its round is answered.
    drop(new);
    drop(dirty);

    let answered = {
        let mut pending = inner.pending();
        pending.in_round = 0;
        if let Some(err) = failure {
            pending.failure.get_or_insert(err);
        }
        let failure = pending.failure.clone();
        let mut answered = Vec::new();
        let mut waiting = Vec::with_capacity(pending.waiters.len());
        for waiter in std::mem::take(&mut pending.waiters) {
            let result = match &waiter.wants {
                Wants::Log { mark, target } => match mark.failed() {
                    Some(err) => Some(Err(err.clone())),
                    None => (mark.synced.load(Ordering::SeqCst) >= *target).then_some(Ok(())),
                },
                Wants::Store { after } => {
                    (*after < id).then(|| failure.clone().map_or(Ok(()), Err))
                }
            };
            match result {
                Some(result) => answered.push((waiter.tell, result)),
                None => waiting.push(waiter),
            }
        }
        pending.waiters = waiting;
        answered
    };
    for (tell, result) in answered {
        // The waiter may have stopped listening; the sync ran anyway.
        let _ = tell.send(result);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::fs::OpenOptions;

    use dsh_core::{Durability, SessionId};

    use super::super::Shared;
    use super::super::committer::Committer;
    use super::super::slot::{LockedFile, WriterSlot};
    use super::*;

    fn shared(dir: &Path, window: Duration) -> Arc<Shared> {
        Arc::new(Shared {
            dir: dir.to_path_buf(),
            writers: Mutex::new(HashSet::new()),
            sweep_failures: Vec::new(),
            committer: Committer::start(dir, Durability::Batched, window).unwrap(),
        })
    }

    #[tokio::test]
    #[allow(
        clippy::await_holding_lock,
        clippy::readonly_write_lock,
        reason = "the test holds the round lock as a running round does"
    )]
    async fn a_create_during_a_round_awaits_it_and_a_drop_there_leaves_nothing() {
        use dsh_core::{SessionHeader, SessionStore};
        use dsh_test_support::wait::bounded;

        let dir = tempfile::tempdir().unwrap();
        let store = super::super::JsonlStore::with_group_window(
            dir.path(),
            Durability::Batched,
            Duration::from_secs(3_600),
        )
        .unwrap();
        let committer = store.shared.committer.batched().unwrap();
        let header = SessionHeader::new(SessionId::new("a").unwrap(), "/");
        // A round is running: it holds the round lock for its syncs.
        let running = committer.inner.rounds.write().unwrap();
        let mut create = Box::pin(store.create(&header, &[]));
        assert!(futures::poll!(&mut create).is_pending());
        // Dropped while it awaits the round: no file, and the id is free
        // at once (no detached work holds it).
        drop(create);
        assert!(store.shared.writers().is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Awaited, it creates the log once the round is over.
        let mut create = Box::pin(store.create(&header, &[]));
        assert!(futures::poll!(&mut create).is_pending());
        drop(running);
        committer.inner.round_over.notify_waiters();
        let log = bounded(create).await.unwrap();
        log.append(&[]).await.unwrap();
        assert_eq!(committer.unsynced(), 1);
        bounded(store.flush()).await.unwrap();
        log.close().await;
        assert_eq!(store.load(&header.id).await.unwrap().header.id, header.id);
    }

    fn held(shared: &Arc<Shared>, id: &str, path: &Path) -> Arc<Held> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let slot = WriterSlot::claim(shared, &SessionId::new(id).unwrap()).unwrap();
        Arc::new(Held::new(LockedFile::try_new(file).unwrap(), slot))
    }

    fn batched(shared: &Shared) -> &WriteBehind {
        shared.committer.batched().unwrap()
    }

    #[tokio::test]
    async fn a_round_forces_new_logs_and_the_directory_before_any_other_log() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path(), Duration::from_secs(3_600));
        let committer = batched(&shared);
        let parent_path = dir.path().join("parent.jsonl");
        let parent = held(&shared, "parent", &parent_path);
        committer.created(&parent, &parent_path);
        committer.flush().await.unwrap();
        // The parent is written first, then a child is created: the
        // round still forces the child and the directory first.
        committer.wrote(&parent, &parent_path);
        let child_path = dir.path().join("child.jsonl");
        let child = held(&shared, "child", &child_path);
        {
            let _creating = committer.creating_soon().await;
            committer.created(&child, &child_path);
        }
        assert_eq!(committer.unsynced(), 2);
        committer.flush().await.unwrap();
        assert_eq!(committer.unsynced(), 0);
        let (parent_name, child_name) = (parent_path.display(), child_path.display());
        assert_eq!(
            committer.trace(),
            [
                format!("new {parent_name}"),
                "dir".to_owned(),
                format!("new {child_name}"),
                "dir".to_owned(),
                format!("dirty {parent_name}"),
            ]
        );
        assert!(parent.mark().is_synced() && child.mark().is_synced());
    }

    #[tokio::test]
    async fn a_failed_background_sync_poisons_the_log_and_every_later_flush() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path(), Duration::from_secs(3_600));
        let committer = batched(&shared);
        let good_path = dir.path().join("good.jsonl");
        let good = held(&shared, "good", &good_path);
        committer.created(&good, &good_path);
        committer.flush().await.unwrap();
        // fdatasync fails on a character device (EINVAL): a sync of it is
        // a real failed sync. (Each test locks its own device.)
        let null = Path::new("/dev/full");
        let bad = held(&shared, "bad", null);
        committer.wrote(&bad, null);
        let mark = Arc::clone(bad.mark());
        let err = committer.sync_log(&mark).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Io { path, .. } if path == null),
            "{err}"
        );
        assert_eq!(mark.failed().unwrap().to_string(), err.to_string());
        // Sticky: the store's flush says so now and later, though the
        // next round has nothing of the bad log.
        assert_eq!(
            committer.flush().await.unwrap_err().to_string(),
            err.to_string()
        );
        committer.wrote(&good, &good_path);
        assert_eq!(
            committer.flush().await.unwrap_err().to_string(),
            err.to_string()
        );
        assert!(good.mark().is_synced());
    }

    #[tokio::test]
    async fn a_dropped_sync_still_runs_its_round_and_the_log_stays_held_until_then() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path(), Duration::from_secs(3_600));
        let path = dir.path().join("held.jsonl");
        let log = held(&shared, "held", &path);
        batched(&shared).created(&log, &path);
        let mark = Arc::clone(log.mark());
        drop(log);
        // Only the committer holds the log now.
        assert!(shared.writers().contains(&SessionId::new("held").unwrap()));
        let mut sync = Box::pin(batched(&shared).sync_log(&mark));
        assert!(futures::poll!(&mut sync).is_pending() || mark.is_synced());
        drop(sync);
        // The round it asked for ran anyway.
        dsh_test_support::wait::until(|| shared.writers().is_empty()).await;
        assert!(mark.is_synced());
    }

    #[tokio::test]
    async fn a_log_whose_background_sync_failed_refuses_its_next_write() {
        use dsh_core::SessionLog;
        use dsh_core::session::{EventPayload, SessionEvent, TurnStart};

        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path(), Duration::from_secs(3_600));
        // Writes to /dev/zero succeed; its fdatasync fails (EINVAL).
        let null = Path::new("/dev/zero");
        let log =
            super::super::log::JsonlLog::new(held(&shared, "bad", null), null.to_path_buf(), 0, 0);
        let event = |seq| SessionEvent {
            seq,
            time: seq,
            payload: EventPayload::TurnStart(TurnStart { turn: seq }),
        };
        // Written (to the OS) at once; the round's fdatasync fails.
        log.append(&[event(0)]).await.unwrap();
        let err = batched(&shared).flush().await.unwrap_err();
        for refused in [
            log.append(&[event(1)]).await.unwrap_err(),
            log.checkpoint().await.unwrap_err(),
            log.sync().await.unwrap_err(),
        ] {
            assert_eq!(refused.to_string(), err.to_string());
        }
        log.close().await;
    }
}
