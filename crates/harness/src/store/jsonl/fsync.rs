//! Every force to stable storage the JSONL store makes goes through here:
//! a file's data ([`data`]), a new file whole ([`all`]) and the store's
//! directory ([`dir`]). In this crate's tests each one is also noted, with
//! the path it forced, so that a test can see which syncs each durability
//! mode makes and in what order (`durability_tests`). This module must
//! never be bypassed by a sync elsewhere in the store: a sync not made
//! here is one no test can see.

use std::fs::File;
use std::io;
use std::path::Path;

use dsh_core::StoreError;

use super::io_error;

/// Force `file`'s data (and the metadata needed to read it back);
/// `path` names it.
pub(super) fn data(file: &File, path: &Path) -> io::Result<()> {
    let result = file.sync_data();
    trace::note("data", path);
    result
}

/// Force `file` whole, data and metadata; `path` names it.
pub(super) fn all(file: &File, path: &Path) -> io::Result<()> {
    let result = file.sync_all();
    trace::note("all", path);
    result
}

/// Fsync a directory so that a link or unlink in it survives a power
/// failure.
pub(super) fn dir(dir: &Path) -> Result<(), StoreError> {
    let result = File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|source| io_error(dir, source));
    trace::note("dir", dir);
    result
}

#[cfg(not(test))]
mod trace {
    /// Noted only in this crate's tests.
    pub(super) fn note(_: &str, _: &std::path::Path) {}
}

#[cfg(test)]
pub(super) mod trace {
    use std::path::{Path, PathBuf};
    use std::sync::{Mutex, PoisonError};

    /// Every sync made so far by any store of the test process, in order.
    static SYNCS: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());

    pub(super) fn note(kind: &'static str, path: &Path) {
        let mut syncs = SYNCS.lock().unwrap_or_else(PoisonError::into_inner);
        syncs.push((kind, path.to_path_buf()));
    }

    /// The syncs made so far of `dir` and of the files in it, in order, as
    /// `"<kind> <file name>"` (a temporary file's name is `temp`) or
    /// `"dir"`.
    pub(crate) fn under(dir: &Path) -> Vec<String> {
        let syncs = SYNCS.lock().unwrap_or_else(PoisonError::into_inner);
        syncs
            .iter()
            .filter_map(|(kind, path)| {
                if path == dir {
                    return Some("dir".to_owned());
                }
                let name = path.strip_prefix(dir).ok()?.to_str()?;
                let name = if name.starts_with('.') { "temp" } else { name };
                Some(format!("{kind} {name}"))
            })
            .collect()
    }
}
