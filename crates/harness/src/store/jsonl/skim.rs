//! Skimming a log for some extension event types: the header is parsed in
//! full, every other line in one pass as an event skeleton (its seq, time
//! and type, with the payload checked to be JSON, never built) whose
//! payload is built only when its type is wanted
//! ([`dsh_core::codec::skim_line`]). A log of a megabyte or more is skimmed
//! in runs of whole lines on several threads, as the full parse does. A
//! listing folds catalogs this way without parsing message content.
//!
//! Anything unusual (bytes that are not UTF-8, a line that is not a
//! well-formed event envelope, a seq out of place, a last line without its
//! `\n`) falls back to the full parse, which then fails where and how
//! [`super::load_log`] would. One fault is not seen: a line of a type not
//! wanted whose payload is JSON but not that type's shape (a `turn/start`
//! with `{"turn":"x"}`) fails a full load but skims, since a skim never
//! builds that payload.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use dsh_core::codec::{read_header, skim_line};
use dsh_core::session::FORMAT_VERSION;
use dsh_core::{EventPayload, KindEvents, SessionEvent, SessionId, StoreError};

use super::parse::{
    PARALLEL_PARSE_BYTES, on_threads, parse_header, parse_log, parse_threads, split_lines,
};

/// Read the logs of `ids` in the store directory `dir`, keeping each one's
/// header and its extension events of the types in `kinds`, in the order
/// of `ids`. The directory is opened once and each plain log relative to
/// it by name (no path walk per log), read into this thread's reused
/// buffer with no `stat`, in one `read` when it fits (a listing reads
/// thousands of small logs one after another).
pub(super) fn skim_many(
    dir: &Path,
    ids: &[SessionId],
    kinds: &[&str],
) -> Vec<Result<KindEvents, StoreError>> {
    let logs = LogDir::new(dir);
    // The previous log's parent: siblings skimmed in one batch name the
    // same one, which is then shared instead of validated again.
    let mut parent: Option<SessionId> = None;
    BUFFER.with_borrow_mut(|buffer| {
        ids.iter()
            .map(|id| {
                let read = skim_log(&logs, buffer, id, kinds, &mut parent);
                if buffer.len() > KEPT_BUFFER {
                    *buffer = Vec::new();
                }
                read
            })
            .collect()
    })
}

/// [`skim_many`] of one log, read into `buffer`; `parent` is the parent
/// the previous log named, and becomes this one's.
fn skim_log(
    logs: &LogDir<'_>,
    buffer: &mut Vec<u8>,
    id: &SessionId,
    kinds: &[&str],
    parent: &mut Option<SessionId>,
) -> Result<KindEvents, StoreError> {
    let plain = || logs.path(id);
    let read = match logs.open_log(id).and_then(|file| read_plain(file, buffer)) {
        Ok(filled) => skim_bytes(id, &plain, &buffer[..filled], kinds, parent.as_ref()),
        Err(source) => Err(super::open_error(id, &plain(), source)),
    };
    if let Ok(log) = &read
        && log.header.parent_session.is_some()
    {
        parent.clone_from(&log.header.parent_session);
    }
    read
}

/// The store's directory, opened once for a batch of reads so that each
/// log is opened relative to it by its name; when it cannot be opened (or
/// off Unix) each log is opened by its whole path instead.
struct LogDir<'a> {
    path: &'a Path,
    #[cfg(unix)]
    fd: Option<rustix::fd::OwnedFd>,
    /// Whether logs are still opened with `O_NOATIME`: a read then never
    /// writes the inode's access time back (relatime writes it on the
    /// first read after each write), nor checks whether it must. Cleared
    /// at the first log the kernel refuses it for (one this user does not
    /// own), which is then opened without it, as are the rest.
    #[cfg(unix)]
    no_atime: std::cell::Cell<bool>,
    /// The buffer a log's file name is built in.
    #[cfg(unix)]
    name: std::cell::Cell<String>,
}

impl<'a> LogDir<'a> {
    fn new(path: &'a Path) -> Self {
        Self {
            path,
            #[cfg(unix)]
            fd: {
                use rustix::fs::{Mode, OFlags};
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
                // A failure here is met again, and reported, per log.
                rustix::fs::open(path, flags, Mode::empty()).ok()
            },
            #[cfg(unix)]
            no_atime: std::cell::Cell::new(true),
            #[cfg(unix)]
            name: std::cell::Cell::new(String::new()),
        }
    }

    /// The whole path of `id`'s plain log.
    fn path(&self, id: &SessionId) -> PathBuf {
        self.path.join(super::file_name(id))
    }

    /// Open `id`'s plain log for reading.
    fn open_log(&self, id: &SessionId) -> io::Result<File> {
        #[cfg(unix)]
        if let Some(fd) = &self.fd {
            // The name is built in a buffer the batch reuses, not a fresh
            // `String` per log.
            let mut name = self.name.take();
            name.clear();
            name.push_str(id.as_str());
            name.push_str(super::EXTENSION);
            let opened = self.open_at(fd, &name);
            self.name.set(name);
            return opened;
        }
        File::open(self.path(id))
    }

    /// Open the log called `name` in the directory `fd`.
    #[cfg(unix)]
    fn open_at(&self, fd: &rustix::fd::OwnedFd, name: &str) -> io::Result<File> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        if self.no_atime.get() {
            match rustix::fs::openat(fd, name, flags | OFlags::NOATIME, Mode::empty()) {
                Ok(file) => return Ok(File::from(file)),
                // Not this user's file: no `O_NOATIME` from here on.
                Err(rustix::io::Errno::PERM) => self.no_atime.set(false),
                Err(err) => return Err(err.into()),
            }
        }
        let file = rustix::fs::openat(fd, name, flags, Mode::empty())?;
        Ok(File::from(file))
    }
}

thread_local! {
    /// The buffer this thread reads plain logs into.
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A read buffer larger than this is not kept for the next read.
const KEPT_BUFFER: usize = 1 << 20;

/// The first size of a thread's read buffer.
const READ_CHUNK: usize = 8 << 10;

/// Read the whole of `file` into the front of `buffer` and return how many
/// bytes it holds. The buffer's length is its zeroed capacity: it grows
/// when a file fills it (to the file's size, else doubling), and is never
/// zeroed again. A read that
/// leaves room in the buffer and ends a line is taken as the end of the
/// file (a regular file reads short only at its end), which saves the
/// `read` that would return 0; one that ends mid-line is confirmed by
/// reading on, so a short read is never mistaken for a torn last line.
fn read_plain(mut file: File, buffer: &mut Vec<u8>) -> io::Result<usize> {
    let mut filled = 0;
    let mut sized = false;
    loop {
        if filled == buffer.len() {
            let mut size = buffer.len() + buffer.len().max(READ_CHUNK);
            // A log that fills the buffer is a large one: one `fstat` (no
            // path lookup) sizes the buffer for all of it at once instead of
            // doubling and copying; the next read then meets the end.
            if filled > 0 && !sized {
                sized = true;
                if let Ok(meta) = file.metadata() {
                    let whole = usize::try_from(meta.len()).unwrap_or(0).saturating_add(1);
                    size = size.max(whole);
                }
            }
            buffer.resize(size, 0);
        }
        match file.read(&mut buffer[filled..]) {
            Ok(0) => return Ok(filled),
            Ok(read) => {
                filled += read;
                if filled < buffer.len() && buffer[filled - 1] == b'\n' {
                    return Ok(filled);
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// Skim `bytes`, read from the file `path` names, falling back to the
/// full parse.
fn skim_bytes(
    id: &SessionId,
    path: &dyn Fn() -> PathBuf,
    bytes: &[u8],
    kinds: &[&str],
    parent: Option<&SessionId>,
) -> Result<KindEvents, StoreError> {
    if let Some(skimmed) = skim(id, path, bytes, kinds, parent)? {
        return Ok(skimmed);
    }
    let parsed = parse_log(id, &path(), bytes.to_vec())?;
    Ok(KindEvents::of_kinds(
        dsh_core::LoadedSession {
            header: parsed.header,
            events: parsed.events,
            torn_tail: parsed.torn_tail,
        },
        kinds,
    ))
}

/// The happy path: `None` whenever the full parse must decide. `parent`
/// is a parent id already read, shared when this header names it too.
fn skim(
    id: &SessionId,
    path: &dyn Fn() -> PathBuf,
    bytes: &[u8],
    kinds: &[&str],
    parent: Option<&SessionId>,
) -> Result<Option<KindEvents>, StoreError> {
    // A last line without `\n` (torn or not) is the full parse's call.
    if bytes.last() != Some(&b'\n') {
        return Ok(None);
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok(None);
    };
    let body = &text[..text.len() - 1];
    let (header_line, rest) = body.split_once('\n').unwrap_or((body, ""));
    // The header as written, naming `id` in a format this build reads, is
    // read without building the file's path; anything else is the full
    // parse's to read or refuse, with the path in its error.
    let header = match read_header(header_line.as_bytes(), Some(id), parent) {
        Ok(header) if header.id == *id && header.format <= FORMAT_VERSION => header,
        _ => parse_header(id, &path(), header_line.as_bytes())?,
    };
    if body.len() == header_line.len() {
        return Ok(Some(KindEvents {
            header,
            events: Vec::new(),
        }));
    }
    // Only extension types are kept (as `KindEvents::of_kinds` keeps them).
    let wanted: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|kind| !EventPayload::is_builtin_kind(kind))
        .collect();
    let threads = if rest.len() >= PARALLEL_PARSE_BYTES {
        parse_threads()
    } else {
        1
    };
    let chunks = split_lines(rest.as_bytes(), threads);
    // Each run's first seq: the lines before it.
    let mut first = 0_u64;
    let mut runs: Vec<(u64, &str)> = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        // Runs are cut at `\n`, so each is a slice of the text as it is.
        let start = chunk.as_ptr() as usize - rest.as_ptr() as usize;
        let Some(run) = rest.get(start..start + chunk.len()) else {
            return Ok(None);
        };
        runs.push((first, run));
        first += chunk.iter().filter(|&&byte| byte == b'\n').count() as u64 + 1;
    }
    let outcomes = on_threads("dsh-store-skim", &runs, |_, &(at, run)| {
        skim_run(at, run, &wanted)
    });
    let mut events = Vec::new();
    for outcome in outcomes {
        let Some(run) = outcome else {
            return Ok(None);
        };
        events.extend(run);
    }
    Ok(Some(KindEvents { header, events }))
}

/// Skim one run of `\n`-separated event lines whose first seq is `first`:
/// the wanted events, or `None` at the first line that is not a
/// well-formed event in sequence.
fn skim_run(first: u64, run: &str, wanted: &[&str]) -> Option<Vec<SessionEvent>> {
    let mut events = Vec::new();
    for (index, line) in (first..).zip(run.split('\n')) {
        let skimmed = skim_line(line, wanted).ok()?;
        if skimmed.seq != index {
            return None;
        }
        events.extend(skimmed.event);
    }
    Some(events)
}

#[cfg(test)]
mod tests {
    use dsh_core::session::{EventPayload, TurnStart};
    use dsh_core::{SessionHeader, SessionStore as _};

    use super::*;
    use crate::JsonlStore;

    fn event(seq: u64, payload: EventPayload) -> SessionEvent {
        SessionEvent {
            seq,
            time: 7,
            payload,
        }
    }

    fn extension(seq: u64, kind: &str) -> SessionEvent {
        event(
            seq,
            EventPayload::Extension {
                kind: kind.into(),
                payload: serde_json::json!({ "n": seq }).into(),
            },
        )
    }

    /// Skim one log of `store` as a batch would.
    fn skim_one(
        store: &JsonlStore,
        id: &SessionId,
        kinds: &[&str],
    ) -> Result<KindEvents, StoreError> {
        skim_many(store.dir(), std::slice::from_ref(id), kinds)
            .pop()
            .unwrap()
    }

    async fn store_with(events: &[SessionEvent]) -> (tempfile::TempDir, JsonlStore, SessionId) {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path(), dsh_core::Durability::None).unwrap();
        let id = SessionId::new("skimmed").unwrap();
        let log = store
            .create(&SessionHeader::new(id.clone(), "/"), &[])
            .await
            .unwrap();
        if !events.is_empty() {
            log.append(events).await.unwrap();
        }
        drop(log);
        (dir, store, id)
    }

    /// A batch shares a parent id between siblings that name it, and
    /// still gives each log the parent its own header names.
    #[tokio::test]
    async fn a_batch_gives_each_log_the_parent_its_header_names() {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path(), dsh_core::Durability::None).unwrap();
        let parents = ["p-1", "p-1", "p-2", "", "p-2"];
        let mut ids = Vec::new();
        for (at, parent) in parents.iter().enumerate() {
            let id = SessionId::new(format!("c-{at}")).unwrap();
            let mut header = SessionHeader::new(id.clone(), "/");
            header.parent_session = (!parent.is_empty()).then(|| SessionId::new(*parent).unwrap());
            drop(store.create(&header, &[]).await.unwrap());
            ids.push(id);
        }
        let read = skim_many(store.dir(), &ids, &["subagent/child"]);
        for ((id, parent), read) in ids.iter().zip(parents).zip(read) {
            let header = read.unwrap().header;
            assert_eq!(header, store.header(id).await.unwrap());
            let named = header.parent_session.as_ref().map(SessionId::as_str);
            assert_eq!(named, (!parent.is_empty()).then_some(parent));
        }
    }

    /// A skim leaves a log's access time as it was, even where the mount's
    /// relatime would write it (an access time older than the last write).
    #[cfg(unix)]
    #[tokio::test]
    async fn a_skim_does_not_touch_a_logs_access_time() {
        let (_dir, store, id) = store_with(&[extension(0, "subagent/child")]).await;
        let path = store.log_path(&id);
        let written = std::fs::metadata(&path).unwrap().modified().unwrap();
        let old = written - std::time::Duration::from_secs(3_600);
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_times(std::fs::FileTimes::new().set_accessed(old))
            .unwrap();
        drop(file);
        let skimmed = skim_one(&store, &id, &["subagent/child"]).unwrap();
        assert_eq!(skimmed.events.len(), 1);
        let accessed = std::fs::metadata(&path).unwrap().accessed().unwrap();
        assert_eq!(accessed, old);
    }

    #[tokio::test]
    async fn a_skim_keeps_only_the_kinds_at_their_seqs_as_the_full_load_does() {
        const KINDS: &[&str] = &["subagent/child", "subagent/usage"];
        let events = vec![
            event(0, EventPayload::TurnStart(TurnStart { turn: 0 })),
            extension(1, "subagent/child"),
            extension(2, "other/kind"),
            extension(3, "subagent/usage"),
            extension(4, "subagent/child"),
        ];
        let (_dir, store, id) = store_with(&events).await;
        let skimmed = skim_one(&store, &id, KINDS).unwrap();
        let seqs: Vec<u64> = skimmed.events.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, [1, 3, 4]);
        let loaded = store.load(&id).await.unwrap();
        let whole = KindEvents::of_kinds(loaded, KINDS);
        assert_eq!(skimmed.events, whole.events);
        assert_eq!(skimmed.header.id, whole.header.id);
        let from_trait = store.load_kind_many(std::slice::from_ref(&id), KINDS).await;
        assert_eq!(from_trait.len(), 1);
        assert_eq!(from_trait[0].as_ref().unwrap().events, whole.events);
    }

    #[tokio::test]
    async fn a_skim_fails_where_the_full_load_fails() {
        let (_dir, store, id) = store_with(&[extension(0, "subagent/child")]).await;
        let path = store.log_path(&id);
        let mut bytes = std::fs::read(&path).unwrap();
        // A middle line that is not JSON, and one whose seq is out of place.
        for bad in [
            b"{not json\n".as_slice(),
            b"{\"seq\":9,\"time\":1,\"type\":\"x\",\"payload\":{}}\n",
        ] {
            let mut damaged = bytes.clone();
            damaged.extend_from_slice(bad);
            damaged.extend_from_slice(b"{\"seq\":2,\"time\":1,\"type\":\"x\",\"payload\":{}}\n");
            std::fs::write(&path, &damaged).unwrap();
            let skimmed = skim_one(&store, &id, &["subagent/child"]).unwrap_err();
            let loaded = store.load(&id).await.unwrap_err();
            assert_eq!(skimmed.to_string(), loaded.to_string());
        }
        // A known type whose payload has the wrong shape fails the full
        // load, but a skim never builds that payload: it is not parsed.
        let mut unbuilt = bytes.clone();
        unbuilt.extend_from_slice(
            b"{\"seq\":1,\"time\":1,\"type\":\"turn/start\",\"payload\":{\"turn\":\"x\"}}\n",
        );
        std::fs::write(&path, &unbuilt).unwrap();
        assert_eq!(store.load(&id).await.unwrap_err().code(), "SESSION_CORRUPT");
        let skimmed = skim_one(&store, &id, &["subagent/child"]).unwrap();
        assert_eq!(skimmed.events.len(), 1);
        // A torn last line is ignored by both.
        bytes.extend_from_slice(b"{\"seq\":1,\"ti");
        std::fs::write(&path, &bytes).unwrap();
        let skimmed = skim_one(&store, &id, &["subagent/child"]).unwrap();
        assert_eq!(skimmed.events.len(), 1);
        let missing = SessionId::new("missing").unwrap();
        let err = skim_one(&store, &missing, &["x"]).unwrap_err();
        assert_eq!(err.code(), "SESSION_NOT_FOUND");
    }

    #[tokio::test]
    async fn a_large_log_skims_on_several_runs_as_the_full_load_reads_it() {
        const KINDS: &[&str] = &["subagent/child"];
        // Past the parallel threshold, with wanted events in every run.
        let filler = "x".repeat(200);
        let events: Vec<SessionEvent> = (0..8_000)
            .map(|seq| {
                let kind = if seq % 3 == 0 {
                    "subagent/child"
                } else {
                    "other/kind"
                };
                event(
                    seq,
                    EventPayload::Extension {
                        kind: kind.into(),
                        payload: serde_json::json!({ "n": seq, "pad": filler }).into(),
                    },
                )
            })
            .collect();
        let (_dir, store, id) = store_with(&events).await;
        let path = store.log_path(&id);
        assert!(std::fs::metadata(&path).unwrap().len() as usize > PARALLEL_PARSE_BYTES);
        let skimmed = skim_one(&store, &id, KINDS).unwrap();
        let whole = KindEvents::of_kinds(store.load(&id).await.unwrap(), KINDS);
        assert_eq!(skimmed.events.len(), whole.events.len());
        assert_eq!(skimmed.events, whole.events);
        // A seq out of place near the end (in the last run) fails both alike.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"seq\":9000,\"time\":1,\"type\":\"x\",\"payload\":{}}\n");
        std::fs::write(&path, &bytes).unwrap();
        let skimmed = skim_one(&store, &id, KINDS).unwrap_err();
        let loaded = store.load(&id).await.unwrap_err();
        assert_eq!(skimmed.to_string(), loaded.to_string());
    }
}
