//! Reading a session directory as trees: its roots (sessions with no parent),
//! the most recent one, a name resolved within a root's tree from the
//! persisted catalogs, and the debris a crash can leave (child logs that no
//! catalog names, and creates a crash cut short). One bad file affects only
//! what needs it (B57): a `*.jsonl` that is not a session log (a first line
//! that is not a session header) is skipped with one warning line; an
//! unfinished create (a file whose header was never written whole) is
//! skipped silently, being the store's own, and `dsh agents` lists it; a
//! log that cannot be read is kept aside as unreadable; only a directory
//! that cannot be listed at all fails a command here. Everything here only
//! reads.

use std::collections::{HashMap, HashSet};

use futures::StreamExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::{CancellationToken, Durability, SessionHeader, SessionId, SessionStore, StoreError};
use dsh_harness::JsonlStore;
use dsh_subagent::{DescendantRow, ROOT_NAME, SubagentError, fold_catalog};

use crate::error::CliError;

/// The store over an existing session directory (refused when it is
/// missing, so a read never creates it).
pub fn existing_store(dir: &Path) -> Result<Arc<JsonlStore>, CliError> {
    existing_store_with(dir, Durability::TurnBoundary)
}

/// [`existing_store`], writing with `durability`.
pub fn existing_store_with(
    dir: &Path,
    durability: Durability,
) -> Result<Arc<JsonlStore>, CliError> {
    if !dir.is_dir() {
        return Err(CliError::NoSessionDir(dir.to_path_buf()));
    }
    open_store(dir, durability)
}

/// The store over `dir` (created if missing), writing with `durability`
/// (the `--durability` setting). Opening it sweeps the temporary files a
/// crashed writer left; one it could not remove is named in a warning line
/// on stderr, never only in a log. Under [`Durability::Batched`] a command
/// that wrote must [`SessionStore::flush`] it before it reports success.
pub fn open_store(dir: &Path, durability: Durability) -> Result<Arc<JsonlStore>, CliError> {
    let store = JsonlStore::new(dir, durability)?;
    for failure in store.sweep_failures() {
        eprintln!(
            "dsh: warning: cannot remove a crash leftover: {}",
            crate::one_line(&failure.to_string())
        );
    }
    Ok(Arc::new(store))
}

/// A `*.jsonl` file that is not a session log, skipped by every command.
#[derive(Debug, Clone)]
pub struct Foreign {
    /// The file.
    pub path: PathBuf,
    /// Why it is not a session log.
    pub reason: String,
}

/// What a create leaves before its header is whole
/// ([`StoreError::TornCreate`]): a create running right now, or one a crash
/// cut short. Nobody's session; skipped without a warning.
#[derive(Debug, Clone)]
pub struct Unfinished {
    /// The session the file name claims.
    pub id: SessionId,
}

/// A log whose header cannot be read (permission, a medium error, a path
/// that is not a readable file, a damaged header, a newer format).
#[derive(Debug, Clone)]
pub struct Unreadable {
    /// The session the file name claims.
    pub id: SessionId,
    /// What reading it said.
    pub error: StoreError,
}

/// A session directory as the commands see it.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every readable session header, in id order.
    pub headers: Vec<SessionHeader>,
    /// Logs whose header cannot be read, in id order.
    pub unreadable: Vec<Unreadable>,
    /// Files that are not session logs, in id order.
    pub foreign: Vec<Foreign>,
    /// Unfinished creates, in id order.
    pub unfinished: Vec<Unfinished>,
}

/// The file and the reason, when a header error means "this file is not a
/// session log at all" rather than "this log cannot be read".
fn not_a_session(err: &StoreError) -> Option<Foreign> {
    match err {
        StoreError::NotASession { path, reason } => Some(Foreign {
            path: path.clone(),
            reason: reason.clone(),
        }),
        _ => None,
    }
}

/// Read every log's header. Only a directory that cannot be listed fails;
/// each file that cannot be read is sorted into [`Scan::unreadable`] or
/// [`Scan::foreign`] (or, an unfinished create, [`Scan::unfinished`]).
///
/// # Cancel safety
/// Cancel safe: it only reads headers; a drop leaves the directory as it
/// was.
pub async fn scan(store: &dyn SessionStore) -> Result<Scan, CliError> {
    let mut scan = Scan::default();
    let ids = store.list().await?;
    // Headers are read in batches (one blocking trip each for the JSONL
    // store), a few at once, and sorted in id order as they arrive.
    let parallel = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    let mut batches = futures::stream::iter(ids.chunks(SCAN_BATCH))
        .map(|chunk| async move { (chunk, store.header_many(chunk).await) })
        .buffered(parallel);
    while let Some((chunk, headers)) = batches.next().await {
        for (id, header) in chunk.iter().zip(headers) {
            match header {
                Ok(header) => scan.headers.push(header),
                Err(StoreError::TornCreate { .. }) => {
                    scan.unfinished.push(Unfinished { id: id.clone() });
                }
                Err(err) => match not_a_session(&err) {
                    Some(foreign) => scan.foreign.push(foreign),
                    None => scan.unreadable.push(Unreadable {
                        id: id.clone(),
                        error: err,
                    }),
                },
            }
        }
    }
    Ok(scan)
}

/// How many headers a scan reads per batch.
const SCAN_BATCH: usize = 512;

/// The one-line warning `dsh` prints for a file every command skips.
pub fn foreign_warning(foreign: &Foreign) -> String {
    format!(
        "dsh: warning: skipping {}: not a session log ({})",
        foreign.path.display(),
        crate::one_line(&foreign.reason)
    )
}

impl Scan {
    /// Print a warning line on stderr for each skipped file. Unreadable
    /// logs and unfinished creates are not warned about: `dsh agents` lists
    /// them, and a command that needs one fails with its error.
    pub fn warn(&self) {
        for foreign in &self.foreign {
            eprintln!("{}", foreign_warning(foreign));
        }
    }

    /// The root sessions, oldest first (creation time, then id).
    pub fn roots(&self) -> Vec<&SessionHeader> {
        let mut roots: Vec<&SessionHeader> = self
            .headers
            .iter()
            .filter(|header| header.parent_session.is_none())
            .collect();
        roots.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        roots
    }

    /// The root `wanted` names, or the most recent root.
    pub fn pick_root(&self, dir: &Path, wanted: Option<&str>) -> Result<SessionId, CliError> {
        let roots = self.roots();
        match wanted {
            Some(wanted) => {
                if let Some(log) = self.unreadable.iter().find(|log| log.id.as_str() == wanted) {
                    return Err(log.error.clone().into());
                }
                roots
                    .iter()
                    .find(|header| header.id.as_str() == wanted)
                    .map(|header| header.id.clone())
                    .ok_or_else(|| CliError::UnknownRoot {
                        root: wanted.to_owned(),
                        place: dir.to_path_buf(),
                    })
            }
            None => roots
                .last()
                .map(|header| header.id.clone())
                .ok_or_else(|| CliError::NoSessions(dir.to_path_buf())),
        }
    }
}

/// A child log that no catalog names: the debris of a crash between
/// creating a child and recording it in its parent's catalog, or a child
/// whose parent's log is gone. No command can reach it.
#[derive(Debug, Clone)]
pub struct Orphan {
    /// The child's session.
    pub id: SessionId,
    /// The parent its header names.
    pub parent: SessionId,
    /// Whether the parent's log exists (else it is gone).
    pub parent_exists: bool,
    /// How many events the log holds after its header.
    pub events: usize,
}

/// Every orphan of the directory, in id order. A child whose parent's log
/// exists but cannot be read or folded is not an orphan (its parent's
/// tree is reported as unreadable instead): only a parent whose catalog is
/// known and does not name the child, or a parent with no log at all,
/// makes an orphan.
///
/// # Cancel safety
/// Cancel safe: it only reads logs; a drop leaves the directory as it was.
pub async fn orphans(scan: &Scan, store: &dyn SessionStore) -> Vec<Orphan> {
    let present: HashSet<&SessionId> = scan
        .headers
        .iter()
        .map(|header| &header.id)
        .chain(scan.unreadable.iter().map(|unreadable| &unreadable.id))
        .collect();
    // The catalog of each parent, folded once: `None` when unreadable.
    let mut catalogs: HashMap<SessionId, Option<HashSet<SessionId>>> = HashMap::new();
    let mut found = Vec::new();
    for header in &scan.headers {
        let Some(parent) = &header.parent_session else {
            continue;
        };
        let parent_exists = present.contains(parent);
        if parent_exists {
            if !catalogs.contains_key(parent) {
                // Only the catalog events are parsed (a skim of the log).
                let read = store
                    .load_kind_many(std::slice::from_ref(parent), dsh_subagent::CATALOG_KINDS)
                    .await
                    .pop()
                    .unwrap_or_else(|| Err(StoreError::NotFound(parent.clone())));
                let named = match read {
                    Ok(log) => fold_catalog(&log.header, &log.events).ok().map(|catalog| {
                        catalog
                            .entries()
                            .iter()
                            .map(|e| e.child_id.clone())
                            .collect()
                    }),
                    Err(_) => None,
                };
                catalogs.insert(parent.clone(), named);
            }
            match catalogs.get(parent) {
                Some(Some(named)) if !named.contains(&header.id) => {}
                _ => continue,
            }
        }
        let events = match store.load(&header.id).await {
            Ok(log) => log.events.len(),
            Err(_) => 0,
        };
        found.push(Orphan {
            id: header.id.clone(),
            parent: parent.clone(),
            parent_exists,
            events,
        });
    }
    found
}

/// A member of a tree, found by name.
#[derive(Debug, Clone)]
pub enum Member {
    /// The root itself (`lead`).
    Root(SessionId),
    /// A descendant, as the listing shows it.
    Child(Box<DescendantRow>),
}

impl Member {
    /// The member's session.
    pub fn id(&self) -> &SessionId {
        match self {
            Self::Root(id) => id,
            Self::Child(row) => &row.entry.child_id,
        }
    }
}

/// The row's display name: its path, else its name, else its session id.
pub fn display_name(row: &DescendantRow) -> String {
    row.path
        .clone()
        .or_else(|| row.entry.name.clone())
        .unwrap_or_else(|| row.entry.child_id.to_string())
}

/// A persisted tree picked to continue (`dsh send`, `dsh resume`).
pub struct Picked {
    /// The directory's store.
    pub store: Arc<JsonlStore>,
    /// The tree's root.
    pub root: SessionId,
    /// The model the tree was built with, unless the settings name another.
    pub model: crate::model::ModelChoice,
}

/// The tree `wanted` names in `dir` (default: the most recent root), after
/// the directory's bad files are warned about, with the model `settings`
/// give it (the recorded one unless `--model` says otherwise).
///
/// # Errors
/// No session directory, no root, or `wanted` names none.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn pick_tree(
    dir: &Path,
    wanted: Option<&str>,
    settings: &crate::config::Settings,
) -> Result<Picked, CliError> {
    let store = existing_store(dir)?;
    let scan = scan(store.as_ref()).await?;
    scan.warn();
    let root = scan.pick_root(dir, wanted)?;
    let recorded = scan
        .headers
        .iter()
        .find(|header| header.id == root)
        .and_then(crate::model::recorded);
    Ok(Picked {
        store,
        root,
        model: settings.for_tree(recorded),
    })
}

/// Every descendant of `root` in its persisted tree, read from the logs
/// alone ([`dsh_subagent::list_stored_descendants`], the walk the runtime's
/// own listing takes): the commands that only read (`agents`, `show`)
/// build no runtime, and every row is inactive.
///
/// # Errors
/// The root's own catalog cannot be read.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn descendants(
    store: &dyn SessionStore,
    root: &SessionId,
) -> Result<Vec<DescendantRow>, SubagentError> {
    dsh_subagent::list_stored_descendants(store, root, &CancellationToken::new()).await
}

/// The process that holds the lock on the log at `path` (another `dsh`
/// working in its tree), as the kernel's lock table (`/proc/locks`) says:
/// the `FLOCK` entry on the file's device and inode, or with `loose` (to
/// name the holder of a log known to be locked) on its inode alone when
/// no entry matches both, as on an overlay filesystem. `None` when the
/// table cannot be read or names no holder.
///
/// # Cancel safety
/// Cancel safe: it only reads, off the async workers.
pub async fn holder(path: PathBuf, loose: bool) -> Option<u32> {
    tokio::task::spawn_blocking(move || {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        let (exact, by_inode) = holder_in(&locks, &path);
        exact.or(by_inode.filter(|_| loose))
    })
    .await
    .ok()
    .flatten()
}

/// [`holder`] over the lock table `locks`: the holder matching the file's
/// device and inode, and one matching its inode alone.
#[cfg(unix)]
fn holder_in(locks: &str, path: &Path) -> (Option<u32>, Option<u32>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return (None, None);
    };
    let (dev, ino) = (meta.dev(), meta.ino());
    // glibc's `major`/`minor` of an encoded device number.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let exact = format!("{major:02x}:{minor:02x}:{ino}");
    let inode = format!(":{ino}");
    // `1: FLOCK  ADVISORY  WRITE 1234 fe:00:5660713 0 EOF`; a waiter's
    // line has `->` and is not a holder.
    let holders: Vec<(u32, &str)> = locks
        .lines()
        .filter(|line| !line.contains("->"))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(1) == Some(&"FLOCK"))
                .then(|| Some((fields.get(4)?.parse().ok()?, *fields.get(5)?)))
                .flatten()
        })
        .collect();
    let find = |wanted: &dyn Fn(&str) -> bool| {
        holders
            .iter()
            .find(|(_, file)| wanted(file))
            .map(|(pid, _)| *pid)
    };
    (
        find(&|file| file == exact),
        find(&|file| file.ends_with(&inode)),
    )
}

/// [`holder`] where there is no lock table to read.
#[cfg(not(unix))]
fn holder_in(_locks: &str, _path: &Path) -> (Option<u32>, Option<u32>) {
    (None, None)
}

/// Resolve `name` in `root`'s persisted tree: `lead`, a slash path of names,
/// or a member's session id.
///
/// # Cancel safety
/// Only reads; dropping the future leaves nothing behind.
pub async fn resolve(
    store: &dyn SessionStore,
    root: &SessionId,
    name: &str,
) -> Result<Member, CliError> {
    if name == ROOT_NAME || name == root.as_str() {
        return Ok(Member::Root(root.clone()));
    }
    let rows = descendants(store, root).await?;
    rows.into_iter()
        .find(|row| row.path.as_deref() == Some(name) || row.entry.child_id.as_str() == name)
        .map(|row| Member::Child(Box::new(row)))
        .ok_or_else(|| CliError::UnknownAgent {
            name: name.to_owned(),
            root: root.to_string(),
        })
}

#[cfg(all(test, unix))]
mod holder_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The holder is the `FLOCK` entry on the file's device and inode, as
    /// the kernel lists a lock this process takes; a waiter is no holder;
    /// an entry on the inode alone names a holder only when asked loosely.
    #[tokio::test]
    async fn the_holder_is_the_flock_entry_on_the_files_device_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s-a.jsonl");
        std::fs::write(&path, "").unwrap();
        assert_eq!(holder(path.clone(), true).await, None);
        let file = std::fs::File::open(&path).unwrap();
        file.try_lock().unwrap();
        assert_eq!(holder(path.clone(), false).await, Some(std::process::id()));
        drop(file);
        assert_eq!(holder(path.clone(), true).await, None);

        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(&path).unwrap().ino();
        let table = format!(
            "1: FLOCK  ADVISORY  WRITE 77 00:00:{ino} 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 88 00:00:{ino} 0 EOF\n2: POSIX  ADVISORY  WRITE 99 00:00:{ino} 0 EOF\n"
        );
        assert_eq!(holder_in(&table, &path), (None, Some(77)));
    }
}
