//! The opt-in compressed form of a settled log: `<dir>/<id>.jsonl.zst`, one
//! zstd frame holding exactly the bytes the plain `<id>.jsonl` held (the
//! same header and event lines, so the durable format is unchanged inside
//! it). Plain JSONL stays the default; only [`JsonlStore::seal`] writes this
//! form, and every reader (`load`, `load_many`, `header`, `list`, `exists`)
//! reads it transparently. Opening a sealed log for writing unseals it
//! first: the plain log is published whole (temporary file, then a hard
//! link that never clobbers) before the compressed file is removed.
//!
//! At every instant at least one complete form exists, so a crash leaves
//! one readable log: sealing publishes the compressed file (temporary file,
//! then a rename) before it unlinks the plain one, and unsealing links the
//! plain one before it removes the compressed one. When both exist the
//! plain log wins (it is the one a writer may have appended to since); an
//! open removes the compressed leftover while it holds the plain log's lock.
//! Temporary files are named like the store's own (`.<id>.<pid>-….tmp`) and
//! locked while written, so the store's sweep removes those a crash left.
//!
//! [`JsonlStore::seal`]: super::JsonlStore::seal

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use dsh_core::{Durability, SessionId, StoreError};

use super::handle::{LockedFile, still_linked, sync_dir};
use super::parse::{corrupt, parse_log};
use super::{io_error, open_error};

/// The file extension of a sealed (compressed) session log.
pub(super) const SEALED_EXTENSION: &str = ".jsonl.zst";

/// The zstd level a log is sealed at: JSON lines of one session repeat
/// their keys and ids, so the default level already gets most of the gain.
const LEVEL: i32 = 3;

/// How many times a reader looks again when the log moved between its two
/// forms while it looked (a seal or unseal in another process).
const ATTEMPTS: usize = 3;

/// The compressed file of the log whose plain file is `plain`.
pub(super) fn sealed_path(plain: &Path) -> PathBuf {
    let mut name = plain.as_os_str().to_owned();
    name.push(".zst");
    PathBuf::from(name)
}

/// What sealing a log did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// The bytes of the plain log that were compressed.
    pub plain_bytes: u64,
    /// The bytes of the compressed file.
    pub sealed_bytes: u64,
}

/// A log found in one of its forms.
pub(super) enum Found {
    /// The plain log, open for reading.
    Plain(File),
    /// The sealed log's decompressed bytes, and the path they were read from.
    Sealed(PathBuf, Vec<u8>),
}

/// The log of `id` in whichever form it is (plain first): the plain file
/// open, or the sealed one read and decompressed.
///
/// # Errors
/// [`StoreError::NotFound`] when neither form exists; [`StoreError::Corrupt`]
/// when the compressed form does not decompress; [`StoreError::Io`] on any
/// other failure to read.
pub(super) fn open_either(id: &SessionId, plain: &Path) -> Result<Found, StoreError> {
    let sealed = sealed_path(plain);
    for _ in 0..ATTEMPTS {
        match File::open(plain) {
            Ok(file) => return Ok(Found::Plain(file)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(io_error(plain, source)),
        }
        match fs::read(&sealed) {
            Ok(compressed) => {
                let bytes = decompress(&sealed, &compressed)?;
                return Ok(Found::Sealed(sealed, bytes));
            }
            // Unsealed between the two reads: the plain log is there now.
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(io_error(&sealed, source)),
        }
    }
    Err(StoreError::NotFound(id.clone()))
}

/// The bytes of the log of `id` in whichever form it is (plain first), and
/// the path they were read from.
///
/// # Errors
/// As [`open_either`].
pub(super) fn read_either(id: &SessionId, plain: &Path) -> Result<(PathBuf, Vec<u8>), StoreError> {
    match open_either(id, plain)? {
        Found::Plain(mut file) => {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)
                .map_err(|source| io_error(plain, source))?;
            Ok((plain.to_path_buf(), bytes))
        }
        Found::Sealed(path, bytes) => Ok((path, bytes)),
    }
}

/// Decompress the zstd frame read from `path`.
fn decompress(path: &Path, compressed: &[u8]) -> Result<Vec<u8>, StoreError> {
    let fault = |err: io::Error| {
        corrupt(
            path,
            1,
            format!("the sealed log does not decompress: {err}"),
        )
    };
    // The frame records its size; trust it only up to a bound, so a damaged
    // size field cannot ask for an absurd allocation.
    let declared = zstd::zstd_safe::get_frame_content_size(compressed)
        .ok()
        .flatten()
        .unwrap_or(0);
    let bound = (compressed.len() as u64).saturating_mul(64);
    let capacity = usize::try_from(declared.min(bound)).unwrap_or(0);
    // One call straight into the buffer when the frame says how large it
    // is (a seal's does): the streaming decoder copies every byte once more
    // through its window. Anything else (no size, a size past the bound,
    // more than one frame) takes the streaming path, which reads or refuses
    // it as before.
    if declared > 0
        && declared <= bound
        && let Ok(bytes) = zstd::bulk::decompress(compressed, capacity)
        && bytes.len() == capacity
    {
        return Ok(bytes);
    }
    let mut bytes = Vec::with_capacity(capacity.saturating_add(1));
    zstd::stream::read::Decoder::with_buffer(compressed)
        .map_err(fault)?
        .read_to_end(&mut bytes)
        .map_err(fault)?;
    Ok(bytes)
}

/// The first line of the log of `id` (with its `\n`, when it has one), from whichever
/// form it is in, and the path it was read from.
///
/// # Errors
/// As [`read_either`].
pub(super) fn first_line(id: &SessionId, plain: &Path) -> Result<(PathBuf, Vec<u8>), StoreError> {
    let sealed = sealed_path(plain);
    for _ in 0..ATTEMPTS {
        match File::open(plain) {
            Ok(file) => return read_line(plain, file, Ok),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(io_error(plain, source)),
        }
        match File::open(&sealed) {
            Ok(file) => {
                return read_line(&sealed, file, |file| {
                    zstd::stream::read::Decoder::new(file).map_err(|err| {
                        corrupt(
                            &sealed,
                            1,
                            format!("the sealed log does not decompress: {err}"),
                        )
                    })
                });
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(io_error(&sealed, source)),
        }
    }
    Err(StoreError::NotFound(id.clone()))
}

/// Read the first line of `file` through `reader`, its newline kept (a
/// line without one is a torn header or a log of a header only).
fn read_line<R: Read>(
    path: &Path,
    file: File,
    reader: impl FnOnce(File) -> Result<R, StoreError>,
) -> Result<(PathBuf, Vec<u8>), StoreError> {
    use std::io::BufRead;
    let mut line = Vec::new();
    io::BufReader::new(reader(file)?)
        .read_until(b'\n', &mut line)
        .map_err(|source| io_error(path, source))?;
    Ok((path.to_path_buf(), line))
}

/// Whether the log whose plain file is `plain` exists in either form.
pub(super) fn exists_either(plain: &Path) -> Result<bool, StoreError> {
    if plain
        .try_exists()
        .map_err(|source| io_error(plain, source))?
    {
        return Ok(true);
    }
    let sealed = sealed_path(plain);
    sealed
        .try_exists()
        .map_err(|source| io_error(&sealed, source))
}

/// A hidden temporary file of `id` in `dir`, named as the store's sweep
/// expects (`.<id>.<pid>-<nanos>-<n>.tmp`), locked, removed when dropped
/// unless [`Temp::keep`] was called.
struct Temp {
    path: PathBuf,
    file: Option<LockedFile>,
    armed: bool,
}

impl Temp {
    fn create(dir: &Path, id: &SessionId) -> Result<Self, StoreError> {
        let mut attempts = 0;
        loop {
            let path = super::handle::next_temp_path(dir, id);
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    // Locked, so that a sweep by a live store leaves it alone.
                    let file = LockedFile::lock(file, id, &path)?;
                    return Ok(Self {
                        path,
                        file: Some(file),
                        armed: true,
                    });
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists && attempts < 16 => {
                    attempts += 1;
                }
                Err(source) => return Err(io_error(&path, source)),
            }
        }
    }

    /// Write `bytes` and, unless `durability` is `None`, force them to disk.
    fn fill(&self, bytes: &[u8], durability: Durability) -> Result<(), StoreError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        (&**file)
            .write_all(bytes)
            .map_err(|source| io_error(&self.path, source))?;
        if durability != Durability::None {
            file.sync_all()
                .map_err(|source| io_error(&self.path, source))?;
        }
        Ok(())
    }

    /// The file was renamed away: nothing is left to remove.
    fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.armed
            && let Err(err) = fs::remove_file(&self.path)
            && err.kind() != io::ErrorKind::NotFound
        {
            // Left behind, it is swept when a store next opens the directory.
            tracing::warn!(path = %self.path.display(), error = %err, "could not remove a temporary session file");
        }
        // Unlocked only after its name is gone.
        drop(self.file.take());
    }
}

/// Compress the log whose plain file is `plain` into its sealed form and
/// remove the plain file, while holding its lock. The caller holds the
/// in-process writer slot of `id`.
///
/// # Errors
/// [`StoreError::NotFound`] when there is no plain log (never created, or
/// already sealed); [`StoreError::Locked`] when another process holds it;
/// [`StoreError::Corrupt`] or another load error when it does not parse
/// whole (a log with a torn last line is refused: open it once to repair
/// it); [`StoreError::Io`] when a file cannot be written, synced, renamed or
/// removed (then the plain log is still there).
pub(super) fn seal_log(
    dir: &Path,
    id: &SessionId,
    plain: &Path,
    durability: Durability,
) -> Result<Sealed, StoreError> {
    let file = File::open(plain).map_err(|source| open_error(id, plain, source))?;
    let file = LockedFile::lock(file, id, plain)?;
    still_linked(&file, id, plain)?;
    let mut bytes = Vec::new();
    (&*file)
        .read_to_end(&mut bytes)
        .map_err(|source| io_error(plain, source))?;
    let parsed = parse_log(id, plain, bytes.clone())?;
    if let Some(torn) = parsed.torn_tail {
        return Err(corrupt(
            plain,
            torn.line,
            "a log with a torn last line is not sealed; open it once to cut the tail",
        ));
    }
    drop(parsed);
    let compressed =
        zstd::bulk::compress(&bytes, LEVEL).map_err(|source| io_error(plain, source))?;
    let sealed = sealed_path(plain);
    let temp = Temp::create(dir, id)?;
    temp.fill(&compressed, durability)?;
    fs::rename(&temp.path, &sealed).map_err(|source| io_error(&sealed, source))?;
    temp.keep();
    if durability != Durability::None {
        sync_dir(dir)?;
    }
    // Both forms exist now, equal; readers take the plain one until it goes.
    fs::remove_file(plain).map_err(|source| io_error(plain, source))?;
    drop(file);
    if durability != Durability::None {
        sync_dir(dir)?;
    }
    Ok(Sealed {
        plain_bytes: bytes.len() as u64,
        sealed_bytes: compressed.len() as u64,
    })
}

/// Before an open for writing: make the plain file the one form of the log.
/// A sealed log with no plain file is unsealed (published whole, then the
/// compressed file removed); a compressed leftover beside a plain file is
/// removed while holding the plain file's lock. Nothing to do for a log
/// that was never sealed. The caller holds the in-process writer slot.
///
/// # Errors
/// [`StoreError::Locked`] when another process holds the plain log;
/// [`StoreError::Corrupt`] when the sealed form does not decompress;
/// [`StoreError::Io`] when a file cannot be written, linked or removed.
pub(super) fn unseal_for_open(
    dir: &Path,
    id: &SessionId,
    plain: &Path,
    durability: Durability,
) -> Result<(), StoreError> {
    let sealed = sealed_path(plain);
    let compressed = match fs::read(&sealed) {
        Ok(compressed) => compressed,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(io_error(&sealed, source)),
    };
    match File::open(plain) {
        Ok(file) => {
            // A seal that stopped before its unlink, or an unseal before its
            // removal: the plain file is whole and wins. Its lock keeps a
            // sealer in another process from unlinking it meanwhile.
            let file = LockedFile::lock(file, id, plain)?;
            still_linked(&file, id, plain)?;
            return remove_sealed(dir, &sealed, durability);
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(io_error(plain, source)),
    }
    let bytes = decompress(&sealed, &compressed)?;
    let temp = Temp::create(dir, id)?;
    temp.fill(&bytes, durability)?;
    match fs::hard_link(&temp.path, plain) {
        Ok(()) => {}
        // Another process unsealed it first: its plain file is the log.
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(source) => return Err(io_error(plain, source)),
    }
    if durability != Durability::None {
        sync_dir(dir)?;
    }
    // The temporary file's lock is the plain file's lock until it drops.
    let removed = remove_sealed(dir, &sealed, durability);
    drop(temp);
    removed
}

/// Remove the sealed file `sealed` (gone already is fine).
fn remove_sealed(dir: &Path, sealed: &Path, durability: Durability) -> Result<(), StoreError> {
    match fs::remove_file(sealed) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(io_error(sealed, source)),
    }
    if durability != Durability::None {
        sync_dir(dir)?;
    }
    Ok(())
}

/// After the plain log of a removed session is gone: remove its sealed
/// form too. `Ok(true)` when there was one.
pub(super) fn remove_sealed_form(
    dir: &Path,
    plain: &Path,
    durability: Durability,
) -> Result<bool, StoreError> {
    let sealed = sealed_path(plain);
    let existed = sealed
        .try_exists()
        .map_err(|source| io_error(&sealed, source))?;
    remove_sealed(dir, &sealed, durability)?;
    Ok(existed)
}
