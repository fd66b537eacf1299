//! Reading a whole log file into memory: a large one is read in parts on
//! several threads at once (`pread` at disjoint offsets), so that the copy
//! out of the page cache, and the page faults of a fresh buffer, are not a
//! serial prefix of a parallel parse. What it returns is the file's bytes
//! as one read to end-of-file would: it never interprets them.

use std::fs::File;
use std::io::{self, Read, Seek};
#[cfg(unix)]
use std::os::unix::fs::FileExt;

use super::parse::parse_threads;

/// Files at least this large are read in parts.
const PARALLEL_READ_BYTES: u64 = 4 << 20;

/// Read `file` from its start to its end (its cursor is left anywhere). A
/// file whose length changes while it is read in parts (an append, or a
/// torn tail cut by an open elsewhere) is read again by one plain read to
/// its end, so the result is always what a single `read_to_end` from the
/// start returns.
///
/// # Errors
/// The read failed.
pub(super) fn read_whole(file: &File) -> io::Result<Vec<u8>> {
    let size = file.metadata()?.len();
    #[cfg(unix)]
    if size >= PARALLEL_READ_BYTES
        && let Ok(len) = usize::try_from(size)
        && let Some(bytes) = read_in_parts(file, len, parse_threads())?
    {
        return Ok(bytes);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    let mut reader = file;
    reader.rewind()?;
    reader.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Read the first `len` bytes of `file` in up to `parts` parts at once;
/// `None` when the file is no longer `len` bytes long (the caller reads it
/// afresh).
#[cfg(unix)]
fn read_in_parts(file: &File, len: usize, parts: usize) -> io::Result<Option<Vec<u8>>> {
    // Zeroed by the allocator's fresh pages: nothing touches them here.
    let mut bytes = vec![0_u8; len];
    let part = len.div_ceil(parts.max(1)).max(1);
    let read = std::thread::scope(|scope| {
        let mut pieces = bytes.chunks_mut(part).enumerate();
        let first = pieces.next();
        // A part no thread could be spared for makes the whole read fall
        // back to one plain read.
        let pending: Vec<_> = pieces
            .map(|(index, piece)| {
                let offset = (index * part) as u64;
                std::thread::Builder::new()
                    .name("dsh-store-read".into())
                    .spawn_scoped(scope, move || file.read_exact_at(piece, offset))
                    .ok()
            })
            .collect();
        let mut outcome = match first {
            Some((_, piece)) => file.read_exact_at(piece, 0).map(|()| true),
            None => Ok(true),
        };
        for handle in pending {
            let result = match handle {
                Some(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    .map(|()| true),
                None => Ok(false),
            };
            outcome = match (outcome, result) {
                (Ok(all), Ok(this)) => Ok(all && this),
                (Err(err), _) | (_, Err(err)) => Err(err),
            };
        }
        outcome
    });
    match read {
        Ok(true) if file.metadata()?.len() == len as u64 => Ok(Some(bytes)),
        // Not every part was read, or the length changed: read afresh.
        Ok(_) => Ok(None),
        Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|at| (at % 251) as u8).collect();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &bytes).unwrap();
        (file, bytes)
    }

    #[test]
    fn a_file_read_in_parts_is_the_file() {
        for len in [0, 1, 7, 4096, (4 << 20) + 3] {
            let (file, bytes) = file_of(len);
            let opened = File::open(file.path()).unwrap();
            assert_eq!(read_whole(&opened).unwrap(), bytes, "{len}");
            #[cfg(unix)]
            for parts in 1..5 {
                let read = read_in_parts(&opened, len, parts).unwrap();
                assert_eq!(read.as_deref(), Some(bytes.as_slice()), "{len} in {parts}");
            }
        }
    }

    /// A length that no longer holds (the file was cut or grew since it was
    /// measured) is read afresh, never returned short or padded.
    #[cfg(unix)]
    #[test]
    fn a_changed_length_is_read_afresh() {
        let (file, bytes) = file_of(10_000);
        let opened = File::open(file.path()).unwrap();
        for wrong in [9_000, 10_001, 20_000] {
            assert_eq!(read_in_parts(&opened, wrong, 2).unwrap(), None, "{wrong}");
        }
        let mut moved = &opened;
        moved.seek(io::SeekFrom::Start(500)).unwrap();
        assert_eq!(read_whole(&opened).unwrap(), bytes);
    }
}
