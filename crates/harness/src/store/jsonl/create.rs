//! Creating and opening a log for writing: a header-only log is created
//! exclusively in place, a seeded one through a temporary file and a link
//! that never clobbers; an open locks the log, reads it and cuts a torn
//! last line. Each forces what its store's durability asks before it
//! returns, and hands back the log's owner. This module must never
//! replace a log that is not the torn header of a crashed create.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use dsh_core::{LoadedSession, SessionId, StoreError};

use super::batched::Creating;
use super::fsync;
use super::parse::torn_header;
use super::publish::{Published, create_temp};
use super::slot::{Held, LockedFile, WriterSlot, still_linked};
use super::stream::read_log;
use super::{io_error, open_error};

/// Create the log of `path` with `contents` (a header-only one in place,
/// a seeded one through a temporary file and a link), owning `slot`.
///
/// When [`Committer::create_forces`](super::committer::Committer::create_forces) says so it forces the file and directory: call
/// it on the blocking pool (no such mode has a write-behind committer, so
/// `creating` is `None`). Otherwise call it right here, on the calling
/// task; under [`Durability::Batched`](dsh_core::Durability::Batched) `creating` holds off the
/// committer's rounds until the log is marked (see
/// [`WriteBehind::creating_soon`], which awaits a running round rather
/// than block for it).
///
/// What then runs inline is one exclusive `openat`, a non-blocking
/// `flock`, one `fstat` and one `write` of the header into the page cache
/// (for a seeded log: a temporary file, its write, a `link` and an
/// `unlink`), the kind of work an append already does inline. None of it
/// waits for the disk in the common case; what can make it wait is
/// bounded by the kernel's own work, never by another writer of the
/// store: a cold directory or inode-table block read once, the journal
/// making room for a transaction handle (at worst one journal commit),
/// dirty-page throttling when writeback lags far behind
/// (`balance_dirty_pages`, paced by the device), and a full disk, which
/// returns `ENOSPC` as an error rather than blocking. Fsyncs, reads of
/// whole logs and directory listings stay on the blocking pool.
pub(super) fn create_file(
    dir: &Path,
    slot: WriterSlot,
    path: &Path,
    contents: &[u8],
    in_place: bool,
    creating: Option<Creating<'_>>,
) -> Result<Published, StoreError> {
    if in_place {
        create_in_place(dir, slot, path, contents, creating)
    } else {
        create_log(dir, slot, path, contents, creating)
    }
}

/// After locking the file a create made at `path`, whether it is still
/// linked: between the exclusive create and the lock, another process's
/// create may have taken the empty file for a crashed create and removed
/// it (see [`reclaim_torn`]). The store never renames a log away and never
/// links a second name to one created in place, so a file with a link is
/// still `path`'s; one `fstat` answers, where [`still_linked`] needs a
/// second `stat` of the path.
#[cfg(unix)]
fn still_created(file: &File, path: &Path) -> Result<bool, StoreError> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|source| io_error(path, source))?;
    Ok(meta.nlink() > 0)
}

#[cfg(not(unix))]
fn still_created(file: &File, path: &Path) -> Result<bool, StoreError> {
    let held = file.metadata().map_err(|source| io_error(path, source))?;
    match fs::metadata(path) {
        Ok(named) => Ok(same_file(&held, &named)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(io_error(path, source)),
    }
}

/// Write `contents` to a temporary file, lock it, and publish it as `path`
/// without clobbering. Runs where [`create_file`]
/// decided and owns `slot`, so the id stays claimed until the result is
/// dropped or handed on.
///
/// Under [`Durability::None`](dsh_core::Durability::None) nothing is fsynced, before or after the link:
/// a power loss can leave the published log empty (or its header unwritten),
/// which loading then reports as [`StoreError::TornCreate`].
fn create_log(
    dir: &Path,
    slot: WriterSlot,
    path: &Path,
    contents: &[u8],
    _creating: Option<Creating<'_>>,
) -> Result<Published, StoreError> {
    let id = slot.id.clone();
    // Under `Batched` the committer forces the new log (file, then
    // directory) in its next round; no round runs until it is marked
    // (`_creating` holds them off).
    let shared = Arc::clone(&slot.shared);
    let committer = &shared.committer;
    let batched = committer.batched();
    let inline = committer.create_forces(false);
    let (temp, file) = create_temp(dir, &id)?;
    // Locked before it is visible under its real name, so no other writer
    // can slip in between publication and this handle.
    let file = LockedFile::lock(file, &id, &temp.path)?;
    (&*file)
        .write_all(contents)
        .map_err(|source| io_error(&temp.path, source))?;
    if inline {
        fsync::all(&file, &temp.path).map_err(|source| io_error(&temp.path, source))?;
    }
    match fs::hard_link(&temp.path, path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            return Err(StoreError::Exists(id));
        }
        Err(source) => return Err(io_error(path, source)),
    }
    let published = Published::new(file, slot, dir, path, false);
    drop(temp);
    if inline && let Err(err) = fsync::dir(dir) {
        // All or nothing: dropping `published` withdraws a log whose
        // publication may not last.
        drop(published);
        return Err(err);
    }
    if let Some(batched) = batched {
        batched.created(&published.held, path);
    }
    Ok(published)
}

/// Create the log of a header-only `contents` in place: one exclusive
/// create of `path` (the only metadata operation), lock, one `fstat`, one
/// write. Runs where [`create_file`] decided and owns
/// `slot`, so the id stays claimed until the result is dropped or handed
/// on.
///
/// Atomicity comes from the header instead of a rename: until the write
/// lands, the file holds nothing or part of a header line, which no log
/// ever does. Reading reports such a file as [`StoreError::TornCreate`],
/// and the next create of the id replaces it. Under
/// [`Durability::TurnBoundary`](dsh_core::Durability::TurnBoundary) and [`Durability::EveryEvent`](dsh_core::Durability::EveryEvent) the file and
/// the directory are forced here; under [`Durability::Grouped`](dsh_core::Durability::Grouped) the result
/// is marked unsynced and [`Published::keep`] waits for the committer;
/// under [`Durability::Batched`](dsh_core::Durability::Batched) the log is handed to the write-behind
/// committer, which forces it (file, then directory) in its next round.
fn create_in_place(
    dir: &Path,
    slot: WriterSlot,
    path: &Path,
    contents: &[u8],
    _creating: Option<Creating<'_>>,
) -> Result<Published, StoreError> {
    let id = slot.id.clone();
    // See `create_log`: no round runs until this log is marked.
    let shared = Arc::clone(&slot.shared);
    let committer = &shared.committer;
    let batched = committer.batched();
    let mut reclaimed = false;
    let mut recreated = false;
    let file = loop {
        let file = match OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(path)
        {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && !reclaimed => {
                reclaimed = true;
                if !reclaim_torn(&id, path)? {
                    return Err(StoreError::Exists(id));
                }
                continue;
            }
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StoreError::Exists(id));
            }
            Err(source) => return Err(io_error(path, source)),
        };
        // Between the create and the lock, another process may have found
        // the empty file, taken it for a crashed create and removed it:
        // another create of this id (which then holds the name, and nothing
        // here may touch it), or `remove_torn` (`dsh agents
        // --prune-orphans`), after which the name is free again. One more
        // exclusive create tells them apart.
        // A lock already taken is such a reclaimer at work on this file.
        match LockedFile::lock(file, &id, path) {
            Ok(file) if still_created(&file, path)? => break file,
            Ok(_) | Err(StoreError::Locked(_)) => {}
            Err(err) => return Err(err),
        }
        if recreated {
            return Err(StoreError::Exists(id));
        }
        recreated = true;
    };
    let unsynced = committer.create_waits_for_round(true);
    let published = Published::new(file, slot, dir, path, unsynced);
    // On any failure below, dropping `published` withdraws the file.
    (&*published.held.file)
        .write_all(contents)
        .map_err(|source| io_error(path, source))?;
    if committer.create_forces(true) {
        let sync_file = || {
            (published.held)
                .sync_data(path)
                .map_err(|source| io_error(path, source))
        };
        match committer.dir_sync() {
            // The file and its directory entry, forced at once so that one
            // journal commit covers both.
            Some(dir_sync) => dir_sync.sync_with(sync_file)?,
            None => {
                sync_file()?;
                fsync::dir(dir)?;
            }
        }
    }
    if let Some(batched) = batched {
        batched.created(&published.held, path);
    }
    Ok(published)
}

/// After a create of `path` found it taken: remove it if it is what a
/// crashed create leaves (see [`torn_header`]) and nobody holds it. `true`
/// when the name is free again.
pub(super) fn reclaim_torn(id: &SessionId, path: &Path) -> Result<bool, StoreError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(source) => return Err(io_error(path, source)),
    };
    let Some(file) = LockedFile::try_new(file) else {
        return Ok(false);
    };
    let mut bytes = Vec::new();
    (&*file)
        .read_to_end(&mut bytes)
        .map_err(|source| io_error(path, source))?;
    if !torn_header(&bytes) {
        return Ok(false);
    }
    match still_linked(&file, id, path) {
        Ok(()) => {}
        Err(StoreError::NotFound(_)) => return Ok(true),
        Err(err) => return Err(err),
    }
    match fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "replaced the torn header of a create that crashed");
            Ok(true)
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(io_error(path, source)),
    }
}

/// A log opened for appending: what it holds, its owner and its length.
pub(super) struct Opened {
    pub(super) loaded: LoadedSession,
    pub(super) held: Held,
    pub(super) len: u64,
}

/// Open, lock, read and repair the log of `id` for appending. Runs on the
/// blocking pool and owns `slot`, so the id stays claimed until the result
/// is dropped or handed on.
pub(super) fn open_log(slot: WriterSlot, path: &Path) -> Result<Opened, StoreError> {
    let id = slot.id.clone();
    let syncs = slot.shared.committer.syncs();
    let mut attempts = 0;
    let file = loop {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|source| open_error(&id, path, source))?;
        let file = LockedFile::lock(file, &id, path)?;
        match still_linked(&file, &id, path) {
            Ok(()) => break file,
            // Removed (and perhaps created afresh) under us: look again.
            Err(StoreError::NotFound(_)) if attempts < 3 => attempts += 1,
            Err(err) => return Err(err),
        }
    };
    let size = file
        .metadata()
        .map_err(|source| io_error(path, source))?
        .len();
    let parsed = read_log(&id, path, &file, size)?;
    let mut len = parsed.keep;
    if let Some(torn) = &parsed.torn_tail {
        file.set_len(parsed.keep)
            .map_err(|source| io_error(path, source))?;
        tracing::warn!(
            path = %path.display(),
            line = torn.line,
            bytes = torn.bytes,
            "cut a torn last line from a session log"
        );
    }
    if parsed.missing_newline {
        (&*file)
            .write_all(b"\n")
            .map_err(|source| io_error(path, source))?;
        len += 1;
        tracing::warn!(path = %path.display(), "restored the missing newline after the last line of a session log");
    }
    if syncs && (parsed.torn_tail.is_some() || parsed.missing_newline) {
        fsync::data(&file, path).map_err(|source| io_error(path, source))?;
    }
    Ok(Opened {
        loaded: LoadedSession {
            header: parsed.header,
            events: parsed.events,
            torn_tail: parsed.torn_tail,
        },
        held: Held::new(file, slot),
        len,
    })
}
