//! The parent-owned catalog: every local child, and every external child
//! delivered to its parent, is recorded in the PARENT's log at creation as a
//! `subagent/child` event (identity, name, label, provider, mode; never
//! execution state). The catalog is a fold of those events. Events a log
//! inherited through a fork seed are the ancestor's facts, so the fold skips
//! the seed: a fork child never lists its parent's children as its own.
//!
//! The live side is here too: `CatalogCache` keeps each live parent's
//! fold and the names reserved under it, so one file holds the catalog's
//! format, its fold and the cache every start, notice and listing reads.
//! (About 800 lines, a third of them the fold's tests.)

use crate::InfraError;
use std::collections::{HashMap, HashSet};
use std::fmt;

use dsh_core::{EventPayload, ExtensionPayload, SessionEvent, SessionHeader, SessionId};
use foldhash::fast::RandomState;
use serde::{Deserialize, Serialize};

use crate::budget::{ChildUsage, USAGE_EVENT, UsageRecord};
use crate::error::SubagentError;
use crate::ids::IdMap;
use crate::names::{NameReservation, NameReservations, validate_name};
use crate::runtime::lock;
use dsh_core::{Agent, AgentRef, AgentRegistry};
use std::sync::{Arc, Mutex};

/// The event type of a catalog entry; its payload is the serialised
/// [`CatalogEntry`].
pub const CATALOG_EVENT: &str = "subagent/child";

/// Every extension event type the catalog fold reads: a background child's
/// entry, a foreground external child's entry, and a settled child's
/// usage. A reader that skims a parent's log for its catalog (through
/// `SessionStore::load_kind_many`) must ask for all of them.
pub const CATALOG_KINDS: &[&str] = &[
    CATALOG_EVENT,
    crate::external::FOREGROUND_EVENT,
    crate::budget::USAGE_EVENT,
];

/// How a cataloged child can be used. An open set: unknown modes are kept
/// and reported as unsupported by listings.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChildMode(std::borrow::Cow<'static, str>);

impl ChildMode {
    /// A local child that can be messaged, resumed and traversed.
    pub const CONTINUABLE: Self = Self(std::borrow::Cow::Borrowed("continuable"));
    /// An external execution: a leaf that cannot be opened or messaged.
    pub const EXTERNAL: Self = Self(std::borrow::Cow::Borrowed("external"));
    /// A legacy one-shot child: traversed, not messaged.
    pub const ONE_SHOT: Self = Self(std::borrow::Cow::Borrowed("one-shot"));
    /// The descriptor is unavailable: discoverable, not continuable.
    pub const UNKNOWN: Self = Self(std::borrow::Cow::Borrowed("unknown"));

    /// The mode as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ChildMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChildMode({})", self.0)
    }
}

impl fmt::Display for ChildMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One child, as its parent recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// The child's id (its session id for a local child).
    pub child_id: SessionId,
    /// Its name among its siblings, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The short task label.
    pub label: String,
    /// The provider that made it.
    pub provider: String,
    /// How it can be used.
    pub mode: ChildMode,
}

/// A parent's children in creation order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    entries: Vec<CatalogEntry>,
    /// What each child's settled activations used (`subagent/usage`).
    usage: HashMap<SessionId, ChildUsage, RandomState>,
}

impl Catalog {
    /// Entries in creation order.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }

    /// The entries in creation order, by value.
    pub fn into_entries(self) -> Vec<CatalogEntry> {
        self.entries
    }

    /// What a child's settled activations used, summed (zero when none
    /// recorded any).
    pub fn usage(&self, child: &SessionId) -> ChildUsage {
        self.usage.get(child).copied().unwrap_or_default()
    }

    /// The entry for a child id.
    pub fn get(&self, child: &SessionId) -> Option<&CatalogEntry> {
        self.entries.iter().find(|entry| &entry.child_id == child)
    }

    /// The entry with this name.
    pub fn by_name(&self, name: &str) -> Option<&CatalogEntry> {
        self.entries
            .iter()
            .find(|entry| entry.name.as_deref() == Some(name))
    }

    /// Every name in use.
    pub fn names(&self) -> HashSet<String> {
        self.entries.iter().filter_map(|e| e.name.clone()).collect()
    }

    /// How many children.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// An incremental fold of one session's catalog: feed it events in order
/// (any number of times, each event once) and read the catalog so far.
#[derive(Debug, Clone, Default)]
pub struct CatalogFold {
    catalog: Catalog,
    /// Each child's place in the catalog.
    ids: HashMap<SessionId, usize, RandomState>,
    names: HashSet<String>,
    next_seq: u64,
}

impl CatalogFold {
    /// The catalog folded so far.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The entry for a child id, found without scanning the catalog.
    pub fn entry(&self, child: &SessionId) -> Option<&CatalogEntry> {
        self.ids
            .get(child)
            .and_then(|&at| self.catalog.entries.get(at))
    }

    /// The seq of the next event the fold expects.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Every name in use so far.
    pub fn names(&self) -> &HashSet<String> {
        &self.names
    }

    /// Fold `events` (those below [`CatalogFold::next_seq`] are skipped, as
    /// are the seed's).
    ///
    /// # Errors
    /// As [`fold_catalog`]; the fold is unchanged by the failing event.
    pub fn apply(
        &mut self,
        header: &SessionHeader,
        events: &[SessionEvent],
    ) -> Result<(), SubagentError> {
        let start = events.partition_point(|event| event.seq < self.next_seq);
        let events = &events[start..];
        // Large catalogs (a cold parent of thousands of children) have their
        // payloads parsed on several threads; they are added in log order.
        let threads = if events.len() >= PARALLEL_FOLD_EVENTS {
            fold_threads()
        } else {
            1
        };
        let size = events.len().div_ceil(threads).max(1);
        let parsed: Vec<Vec<Result<Read, SubagentError>>> = if threads > 1 {
            std::thread::scope(|scope| {
                let pending: Vec<_> = events
                    .chunks(size)
                    .map(|run| {
                        let spawned = std::thread::Builder::new()
                            .name("dsh-catalog-fold".into())
                            .spawn_scoped(scope, move || read_run(header, run));
                        (run, spawned.ok())
                    })
                    .collect();
                pending
                    .into_iter()
                    .map(|(run, handle)| match handle {
                        Some(handle) => handle
                            .join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                        // No thread to spare: read it here.
                        None => read_run(header, run),
                    })
                    .collect()
            })
        } else {
            vec![read_run(header, events)]
        };
        for (event, read) in events.iter().zip(parsed.into_iter().flatten()) {
            match read? {
                Read::Entry(entry) => self.add(header, entry)?,
                Read::Usage(record) => self
                    .catalog
                    .usage
                    .entry(record.child_id.clone())
                    .or_default()
                    .add(&record),
                Read::Other => {}
            }
            self.next_seq = event.seq + 1;
        }
        Ok(())
    }
}

/// Folds of at least this many events parse their payloads on several threads.
const PARALLEL_FOLD_EVENTS: usize = 8_192;

/// How many threads parse a large fold's payloads.
fn fold_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 8))
}

/// What one event means to the catalog.
enum Read {
    /// A child's entry.
    Entry(CatalogEntry),
    /// A settled activation's usage.
    Usage(UsageRecord),
    /// Nothing: another type, or an event of the seed.
    Other,
}

/// Parse the catalog payloads of `run`, one result per event, in order.
fn read_run(header: &SessionHeader, run: &[SessionEvent]) -> Vec<Result<Read, SubagentError>> {
    run.iter().map(|event| read_event(header, event)).collect()
}

/// Parse one event's catalog payload.
fn read_event(header: &SessionHeader, event: &SessionEvent) -> Result<Read, SubagentError> {
    if event.seq < header.seed_len {
        return Ok(Read::Other);
    }
    let EventPayload::Extension { kind, payload } = &event.payload else {
        return Ok(Read::Other);
    };
    if !CATALOG_KINDS.contains(&kind.as_str()) {
        return Ok(Read::Other);
    }
    let corrupt = |err: serde_json::Error| {
        SubagentError::Infra(InfraError::CorruptCatalog {
            parent: header.id.clone(),
            seq: event.seq,
            message: err.to_string(),
        })
    };
    if kind == USAGE_EVENT {
        payload
            .parse::<UsageRecord>()
            .map(Read::Usage)
            .map_err(corrupt)
    } else if let Some(entry) = crate::list_entry::written_entry(payload.get()) {
        Ok(Read::Entry(entry))
    } else {
        payload
            .parse::<CatalogEntry>()
            .map(Read::Entry)
            .map_err(corrupt)
    }
}

impl CatalogFold {
    /// Fold the entry this runtime itself just wrote at `seq`, without
    /// parsing it back from the log: only when `seq` is the event the fold
    /// expects next (otherwise a later [`CatalogFold::apply`] reads it from
    /// the log like any other event). Returns whether it was folded.
    pub(crate) fn written_entry(
        &mut self,
        header: &SessionHeader,
        seq: u64,
        entry: &CatalogEntry,
    ) -> bool {
        if seq != self.next_seq || seq < header.seed_len {
            return false;
        }
        if self.add(header, entry.clone()).is_err() {
            // A name the log already holds: leave it to `apply`, which
            // reports the corrupt catalog.
            return false;
        }
        self.next_seq = seq + 1;
        true
    }

    /// Fold the usage record this runtime itself just wrote at `seq`, as
    /// [`CatalogFold::written_entry`] does an entry.
    pub(crate) fn written_usage(
        &mut self,
        header: &SessionHeader,
        seq: u64,
        record: &UsageRecord,
    ) -> bool {
        if seq != self.next_seq || seq < header.seed_len {
            return false;
        }
        self.catalog
            .usage
            .entry(record.child_id.clone())
            .or_default()
            .add(record);
        self.next_seq = seq + 1;
        true
    }

    /// Add one child's entry; a repeated child id adds nothing (the first
    /// record stands).
    fn add(&mut self, header: &SessionHeader, entry: CatalogEntry) -> Result<(), SubagentError> {
        // One hash of the id and one of the name; nothing changes when the
        // name is refused (a vacant entry dropped inserts nothing).
        let std::collections::hash_map::Entry::Vacant(place) =
            self.ids.entry(entry.child_id.clone())
        else {
            return Ok(());
        };
        if let Some(name) = &entry.name
            && !self.names.insert(name.clone())
        {
            return Err(SubagentError::Infra(InfraError::DuplicateName {
                parent: header.id.clone(),
                name: name.clone(),
            }));
        }
        place.insert(self.catalog.entries.len());
        self.catalog.entries.push(entry);
        Ok(())
    }
}

/// Fold the catalog of `header`'s session from its events, skipping the seed.
///
/// # Errors
/// [`InfraError::CorruptCatalog`] for an unreadable entry,
/// [`InfraError::DuplicateName`] when two children share a name.
pub fn fold_catalog(
    header: &SessionHeader,
    events: &[SessionEvent],
) -> Result<Catalog, SubagentError> {
    if events.is_empty() {
        // A leaf's log: no fold (and none of its maps) to build.
        return Ok(Catalog::default());
    }
    let mut fold = CatalogFold::default();
    // Sized once for every entry the events can add (a cold parent of
    // thousands of children would otherwise rehash and move them as it
    // grows); only this one-off fold does it, not a live agent's fold.
    let entries = events
        .iter()
        .filter(|event| event.payload.kind() == CATALOG_EVENT)
        .count();
    fold.ids.reserve(entries);
    fold.names.reserve(entries);
    fold.catalog.entries.reserve_exact(entries);
    fold.apply(header, events)?;
    Ok(fold.catalog)
}

/// The payload of a catalog event for `entry`: its serde form, written by
/// the codec's hand writer (no JSON value tree, no serializer in between).
pub fn catalog_payload(entry: &CatalogEntry) -> ExtensionPayload {
    let mut object = dsh_core::codec::ObjectWriter::new();
    object.string("child_id", entry.child_id.as_str());
    if let Some(name) = &entry.name {
        object.string("name", name);
    }
    object
        .string("label", &entry.label)
        .string("provider", &entry.provider)
        .string("mode", entry.mode.as_str());
    object.finish()
}

/// Cached catalog folds beyond which folds of parents no longer live are
/// swept out.
const CATALOG_SWEEP: usize = 64;

/// Fresh events a catalog fold reads in place, under the agent's state;
/// more are copied out and folded after.
const BORROWED_FOLD: usize = 16;

/// The catalogs of live parents, each an incremental [`CatalogFold`]
/// advanced with only the events no earlier call has seen, and the names
/// reserved under them. It owns the rule that makes a name unique among a
/// parent's children: a reservation is checked, and a committed one handed
/// over to the catalog, under that parent's fold lock, so no check reads
/// the catalog before an entry and the reservations after it.
///
/// Each parent's fold has a lock of its own: one parent's long fold holds
/// up no other tree. The map of folds is locked only to find or sweep one.
pub(crate) struct CatalogCache {
    folds: Mutex<IdMap<AgentRef, Arc<Mutex<CatalogFold>>>>,
    names: NameReservations,
}

impl Default for CatalogCache {
    fn default() -> Self {
        Self {
            folds: Mutex::default(),
            names: NameReservations::new(),
        }
    }
}

impl CatalogCache {
    /// The fold of `reference`, made empty if there is none; folds of
    /// parents no longer live leave now and then (and their default-name
    /// hints with them), so the cache holds about one fold per live parent.
    fn fold_of(&self, registry: &AgentRegistry, reference: &AgentRef) -> Arc<Mutex<CatalogFold>> {
        let mut folds = lock(&self.folds);
        if let Some(fold) = folds.get(reference) {
            return fold.clone();
        }
        if folds.len() >= CATALOG_SWEEP {
            let mut gone = Vec::new();
            folds.retain(|key, _| {
                let live = registry.is_live(key);
                if !live {
                    gone.push(key.id.clone());
                }
                live
            });
            for id in gone {
                if !folds.keys().any(|key| key.id == id) {
                    self.names.forget_parent(&id);
                }
            }
        }
        folds.entry(reference.clone()).or_default().clone()
    }

    /// Run `f` on a live agent's catalog, folded incrementally: only the
    /// events no earlier call has seen are read.
    ///
    /// # Errors
    /// As [`CatalogFold::apply`].
    pub(crate) fn with_live<R>(
        &self,
        registry: &AgentRegistry,
        agent: &Arc<dyn Agent>,
        f: impl FnOnce(&CatalogFold) -> R,
    ) -> Result<R, SubagentError> {
        let fold = self.fold_of(registry, &agent.reference());
        // Held throughout: a check made here sees the parent's log as it is
        // now, which is what lets a committed name leave the reservations
        // (`CatalogCache::commit_name`, under this lock too).
        let mut fold = lock(&fold);
        advance(&mut fold, agent)?;
        Ok(f(&fold))
    }

    /// Reserve a child name under a live parent: `requested` or the first
    /// free `agent-N`, checked against the parent's catalog and the names
    /// other starts hold.
    ///
    /// # Errors
    /// `INVALID_NAME`, `NAME_TAKEN`, or a catalog that cannot be read.
    pub(crate) fn reserve_name(
        &self,
        registry: &AgentRegistry,
        parent: &Arc<dyn Agent>,
        requested: Option<&str>,
    ) -> Result<NameReservation, SubagentError> {
        if let Some(name) = requested {
            validate_name(name)?;
        }
        self.with_live(registry, parent, |fold| match requested {
            Some(name) => self.names.reserve(parent.id(), name, fold.names()),
            None => Ok(self.names.reserve_default(parent.id(), fold.names())),
        })?
    }

    /// Hand a reserved name over to the parent's catalog, whose entry for
    /// the child is written: under the parent's fold lock, so no check is
    /// between reading the catalog and the reservations. Given the entry
    /// as `written` into `parent`'s log at a seq, the parent's cached fold
    /// takes it as it is, when it is the event the fold expects next, so
    /// the next start does not parse it back.
    pub(crate) fn commit_name(
        &self,
        reservation: NameReservation,
        parent: &Arc<dyn Agent>,
        written: Option<(u64, &CatalogEntry)>,
    ) {
        let fold = lock(&self.folds).get(&parent.reference()).cloned();
        let mut fold = fold.as_ref().map(|fold| lock(fold));
        if let (Some(fold), Some((seq, entry))) = (fold.as_deref_mut(), written) {
            fold.written_entry(parent.header(), seq, entry);
        }
        reservation.commit();
    }

    /// Let a live parent's cached fold take a record this runtime wrote at
    /// `seq` as written (see [`CatalogFold::written_usage`]).
    pub(crate) fn written_usage(&self, parent: &Arc<dyn Agent>, seq: u64, record: &UsageRecord) {
        let fold = lock(&self.folds).get(&parent.reference()).cloned();
        if let Some(fold) = fold {
            lock(&fold).written_usage(parent.header(), seq, record);
        }
    }

    /// How many folds are cached.
    pub(crate) fn len(&self) -> usize {
        lock(&self.folds).len()
    }

    /// How many names are reserved by starts not yet cataloged.
    pub(crate) fn reserved_names(&self) -> usize {
        self.names.len()
    }

    /// How many parents keep a default-name hint.
    pub(crate) fn name_hints(&self) -> usize {
        self.names.hints()
    }
}

impl crate::runtime::SubagentRuntime {
    /// Run `f` on a live agent's catalog, folded incrementally (see
    /// [`CatalogCache::with_live`]).
    pub(crate) fn with_live_catalog<R>(
        &self,
        agent: &Arc<dyn Agent>,
        f: impl FnOnce(&CatalogFold) -> R,
    ) -> Result<R, SubagentError> {
        self.catalogs().with_live(self.registry(), agent, f)
    }
}

/// Fold the events of `agent` that `fold` has not seen. A few (a start's
/// usual case: the last child's entry and usage) are folded on the
/// borrowed log; many are copied out first, so a long fold never holds the
/// agent's state, and a long one on a multi-threaded runtime runs with its
/// worker's other tasks handed to another worker
/// (`tokio::task::block_in_place`), so it stalls none of them.
fn advance(fold: &mut CatalogFold, agent: &Arc<dyn Agent>) -> Result<(), SubagentError> {
    let mut applied = Ok(());
    let mut many = None;
    agent.visit_events_since(fold.next_seq(), &mut |fresh| {
        if fresh.len() <= BORROWED_FOLD {
            applied = fold.apply(agent.header(), fresh);
        } else {
            many = Some(fresh.to_vec());
        }
    });
    if let Some(fresh) = many {
        let multi_threaded = tokio::runtime::Handle::try_current().is_ok_and(|handle| {
            handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        });
        applied = if fresh.len() >= PARALLEL_FOLD_EVENTS && multi_threaded {
            tokio::task::block_in_place(|| fold.apply(agent.header(), &fresh))
        } else {
            fold.apply(agent.header(), &fresh)
        };
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, name: Option<&str>) -> CatalogEntry {
        CatalogEntry {
            child_id: SessionId::new(id).unwrap(),
            name: name.map(str::to_owned),
            label: format!("task {id}"),
            provider: "spawn".into(),
            mode: ChildMode::CONTINUABLE,
        }
    }

    fn events(entries: &[CatalogEntry]) -> Vec<SessionEvent> {
        entries
            .iter()
            .enumerate()
            .map(|(seq, e)| SessionEvent {
                seq: seq as u64,
                time: 0,
                payload: EventPayload::Extension {
                    kind: CATALOG_EVENT.into(),
                    payload: catalog_payload(e),
                },
            })
            .collect()
    }

    #[test]
    fn a_fold_told_what_was_written_matches_one_that_reads_it() {
        let header = SessionHeader::new(SessionId::new("p").unwrap(), "/");
        let log = events(&[
            entry("a", Some("x")),
            entry("b", Some("y")),
            entry("c", None),
        ]);
        let mut told = CatalogFold::default();
        told.apply(&header, &log[..1]).unwrap();
        // The next event: taken as written, and the fold moves past it.
        assert!(told.written_entry(&header, 1, &entry("b", Some("y"))));
        assert_eq!(told.next_seq(), 2);
        // Not the next event (one in between is unread): left to `apply`.
        assert!(!told.written_entry(&header, 3, &entry("d", None)));
        assert!(!told.written_usage(
            &header,
            3,
            &UsageRecord {
                child_id: SessionId::new("a").unwrap(),
                usage: Default::default(),
                subtree: Default::default(),
            }
        ));
        told.apply(&header, &log).unwrap();
        let read = fold_catalog(&header, &log).unwrap();
        assert_eq!(told.catalog(), &read);
        assert_eq!(told.next_seq(), 3);
        // A seed's events are never the fold's own.
        let mut seeded = header.clone();
        seeded.seed_len = 5;
        assert!(!CatalogFold::default().written_entry(&seeded, 0, &entry("z", None)));
    }

    #[test]
    fn an_entry_reads_the_same_in_either_key_order() {
        // Older builds wrote the payload through a value tree, keys sorted;
        // this one writes the declaration order. Both are the same entry.
        let header = SessionHeader::new(SessionId::new("p").unwrap(), "/");
        let sorted = r#"{"child_id":"a","label":"task a","mode":"continuable","name":"x","provider":"spawn"}"#;
        let written = catalog_payload(&entry("a", Some("x")));
        assert_eq!(
            written.get(),
            r#"{"child_id":"a","name":"x","label":"task a","provider":"spawn","mode":"continuable"}"#
        );
        let log: Vec<SessionEvent> = [sorted.to_owned(), written.get().to_owned()]
            .into_iter()
            .enumerate()
            .map(|(seq, text)| SessionEvent {
                seq: seq as u64,
                time: 0,
                payload: EventPayload::Extension {
                    kind: CATALOG_EVENT.into(),
                    payload: serde_json::from_str(&text).unwrap(),
                },
            })
            .collect();
        let one = fold_catalog(&header, &log[..1]).unwrap();
        let other = fold_catalog(&header, &log[1..]).unwrap();
        assert_eq!(one.entries(), other.entries());
        assert_eq!(one.entries(), [entry("a", Some("x"))]);
    }

    #[test]
    fn the_fold_keeps_creation_order_skips_seeds_and_repeated_ids() {
        let mut header = SessionHeader::new(SessionId::new("p").unwrap(), "/");
        let log = events(&[
            entry("a", Some("x")),
            entry("b", None),
            entry("a", Some("y")),
            entry("c", Some("z")),
        ]);
        let catalog = fold_catalog(&header, &log).unwrap();
        let ids: Vec<&str> = catalog
            .entries()
            .iter()
            .map(|e| e.child_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
        header.seed_len = 3;
        let catalog = fold_catalog(&header, &log).unwrap();
        let ids: Vec<&str> = catalog
            .entries()
            .iter()
            .map(|e| e.child_id.as_str())
            .collect();
        assert_eq!(ids, ["c"], "seeded facts are the ancestor's");
    }

    #[test]
    fn a_repeated_sibling_name_fails_the_load() {
        let header = SessionHeader::new(SessionId::new("p").unwrap(), "/");
        let log = events(&[entry("a", Some("x")), entry("b", Some("x"))]);
        let err = fold_catalog(&header, &log).unwrap_err();
        assert_eq!(err.code(), "DUPLICATE_NAME");
    }

    #[test]
    fn usage_records_add_up_per_child_and_seeded_ones_are_skipped() {
        let mut header = SessionHeader::new(SessionId::new("p").unwrap(), "/");
        let mut log = events(&[entry("a", Some("x"))]);
        let used = |input: u64| dsh_core::Usage {
            input_tokens: input,
            output_tokens: 1,
            ..Default::default()
        };
        for (seq, input) in [(1, 10), (2, 5)] {
            let record = UsageRecord {
                child_id: SessionId::new("a").unwrap(),
                usage: used(input),
                subtree: used(input * 2),
            };
            log.push(SessionEvent {
                seq,
                time: 0,
                payload: EventPayload::Extension {
                    kind: USAGE_EVENT.into(),
                    payload: crate::budget::usage_payload(&record),
                },
            });
        }
        let catalog = fold_catalog(&header, &log).unwrap();
        let usage = catalog.usage(&SessionId::new("a").unwrap());
        assert_eq!(usage.own.input_tokens, 15);
        assert_eq!(usage.subtree.input_tokens, 30);
        assert_eq!(usage.own.output_tokens, 2);
        header.seed_len = 2;
        let seeded = fold_catalog(&header, &log).unwrap();
        assert_eq!(seeded.usage(&SessionId::new("a").unwrap()).own, used(5));
        assert!(catalog.usage(&SessionId::new("b").unwrap()).is_empty());
    }

    #[test]
    fn unknown_modes_are_kept() {
        let header = SessionHeader::new(SessionId::new("p").unwrap(), "/");
        let mut e = entry("a", None);
        e.mode = serde_json::from_str("\"quantum\"").unwrap();
        let catalog = fold_catalog(&header, &events(&[e])).unwrap();
        assert_eq!(catalog.entries()[0].mode.as_str(), "quantum");
    }

    #[test]
    fn a_large_catalog_folds_in_log_order_and_fails_at_its_first_bad_event() {
        let mut header = SessionHeader::new(SessionId::new("p").unwrap(), "/");
        let count = PARALLEL_FOLD_EVENTS + 2_000;
        let entries: Vec<CatalogEntry> = (0..count)
            .map(|i| entry(&format!("c{i}"), Some(&format!("n{i}"))))
            .collect();
        let mut log = events(&entries);
        // A late repeat of an early child is skipped (the first record stands).
        log[count - 10].payload = EventPayload::Extension {
            kind: CATALOG_EVENT.into(),
            payload: catalog_payload(&entry("c3", Some("elsewhere"))),
        };
        let catalog = fold_catalog(&header, &log).unwrap();
        assert_eq!(catalog.len(), count - 1);
        let ids: Vec<&str> = catalog
            .entries()
            .iter()
            .map(|e| e.child_id.as_str())
            .collect();
        let expected: Vec<String> = (0..count)
            .filter(|&i| i != count - 10)
            .map(|i| format!("c{i}"))
            .collect();
        assert_eq!(ids, expected);
        header.seed_len = 100;
        // The seeded first record of `c3` is the ancestor's: the late one stands.
        assert_eq!(fold_catalog(&header, &log).unwrap().len(), count - 100);
        header.seed_len = 0;
        // Two bad events in different runs: the earlier one is the error.
        let bad = |seq: usize| SessionEvent {
            seq: seq as u64,
            time: 0,
            payload: EventPayload::Extension {
                kind: CATALOG_EVENT.into(),
                payload: serde_json::json!({ "child_id": 7 }).into(),
            },
        };
        log[count - 5] = bad(count - 5);
        log[200] = bad(200);
        let err = fold_catalog(&header, &log).unwrap_err();
        assert_eq!(err.code(), "CORRUPT_CATALOG");
        assert!(err.to_string().contains("200"), "{err}");
        // An incremental fold stops before the bad event and keeps what came before.
        let mut fold = CatalogFold::default();
        assert!(fold.apply(&header, &log).is_err());
        assert_eq!(fold.catalog().len(), 200);
        assert_eq!(fold.next_seq(), 200);
    }
}
