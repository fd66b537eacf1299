//! Tree reads: resolving model-facing names and listing descendants by
//! walking the parent-owned catalogs, without loading or resuming any agent.
//! A catalog is read from the live agent that owns it when there is one (its
//! events, through the registry) and otherwise from its durable log in the
//! store. This module only reads: it must never create, resume, message or
//! dispose an agent, never call the agent factory, and never write to a log.
//! Resolution grants no authority; whoever acts on a resolved id checks it.
//!
//! A listing is in stable pre-order. While the walk goes on, it reads the
//! catalogs of a node's children ahead: live ones folded at once, cold
//! ones in batches through `SessionStore::load_kind_many`, one batch more
//! in flight than the machine has cores. They are handed to the walk in
//! catalog order, so each catalog is read once and the output is exactly
//! the sequential walk's. Only external children are leaves (seed 002);
//! an unreadable branch is marked and stops there.
//!
//! One walk lists for both readers: the runtime's
//! [`SubagentRuntime::list_descendants`] (live agents' catalogs and
//! activity first) and [`list_stored_descendants`], over a store alone for
//! a command that only reads the logs and builds no runtime (every child
//! is then `inactive`).

use crate::DeliveryError;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use foldhash::fast::RandomState;
use std::sync::Arc;

use dsh_core::KindEvents;
use dsh_core::{Agent, AgentStatus, CancellationToken, SessionId, SessionStore, StoreError};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use serde::Serialize;

use crate::catalog::{CATALOG_KINDS, Catalog, CatalogEntry, ChildMode, fold_catalog};
use crate::error::SubagentError;
use crate::names::ROOT_NAME;
use crate::runtime::SubagentRuntime;

/// One row of a descendant listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DescendantRow {
    /// The child, as its parent recorded it.
    pub entry: CatalogEntry,
    /// The parent whose catalog holds the entry.
    pub parent_id: SessionId,
    /// Edge distance from the listed root: direct children are 1.
    pub depth: u32,
    /// The slash path of names from the root, when every level is named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Why this row's own descendants are not listed, when they could not
    /// be, or that its mode is unknown here. The row itself stays a member
    /// of the tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<RowDiagnostic>,
    /// Whether the child's own catalog lists children (seed 002's
    /// `hasChildren`, derived from the catalog that was read); `false` for
    /// a leaf and for a catalog that could not be read.
    pub has_children: bool,
    /// What the child is doing now, from the live registry and activations.
    pub activity: ChildActivity,
    /// The tokens the child's settled activations used, itself and its
    /// subtree, as its parent's log recorded them (zero before any settled).
    #[serde(skip_serializing_if = "crate::budget::ChildUsage::is_empty")]
    pub usage: crate::budget::ChildUsage,
}

/// What a listed child is doing at the moment of the listing. It says
/// nothing about task completion, and an inactive child can still be
/// messaged if its mode allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildActivity {
    /// A live agent running a turn, or an external run in flight.
    Running,
    /// A live agent with no turn running.
    Idle,
    /// Nothing live: a cold session, or a run that ended.
    Inactive,
}

/// Why a listed child's own descendants are missing from a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowDiagnostic {
    /// The child's log or catalog could not be parsed (a corrupt line, an
    /// unreadable catalog event, a repeated sibling name).
    Corrupt,
    /// The child's log could not be read (missing, or the medium failed).
    Unavailable,
    /// The child's mode is `unknown`, or one this runtime does not know;
    /// its catalog is still read and its children listed when it can be.
    Unsupported,
}

/// A catalog that could not be read: the row diagnostic it gives a child,
/// and the error it is when the catalog had to be read.
#[derive(Debug, Clone)]
pub(crate) struct Unreadable {
    /// How a listing reports it.
    pub(crate) diagnostic: RowDiagnostic,
    /// What a caller that needed the catalog gets.
    pub(crate) error: SubagentError,
}

impl Unreadable {
    fn store(error: StoreError) -> Self {
        let diagnostic = match &error {
            StoreError::Corrupt { .. } | StoreError::OutOfSequence { .. } => RowDiagnostic::Corrupt,
            // Missing, or the medium failed.
            _ => RowDiagnostic::Unavailable,
        };
        Self {
            diagnostic,
            error: error.into(),
        }
    }

    fn fold(error: SubagentError) -> Self {
        Self {
            diagnostic: RowDiagnostic::Corrupt,
            error,
        }
    }
}

/// The error for a name that names no member of the caller's tree; the one
/// place that chooses it.
fn name_not_found(name: &str) -> SubagentError {
    SubagentError::Delivery(DeliveryError::AgentNameNotFound(name.to_owned()))
}

/// How a listing treats a child of a given mode (seed 002): external
/// entries are leaves (they own no local session); continuable and
/// one-shot entries are traversal nodes, and so are `unknown` ones and any
/// mode this runtime does not know, which are marked `unsupported`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Traversal {
    /// Read its catalog and list its children.
    Traverse,
    /// A leaf: it has no catalog of its own to read.
    Leaf,
    /// An unknown mode: traversed, and listed as `unsupported`.
    Unsupported,
}

fn traversal(mode: &ChildMode) -> Traversal {
    if *mode == ChildMode::CONTINUABLE || *mode == ChildMode::ONE_SHOT {
        Traversal::Traverse
    } else if *mode == ChildMode::EXTERNAL {
        Traversal::Leaf
    } else {
        Traversal::Unsupported
    }
}

/// Whether name resolution may walk below a child of `mode` (seed 002):
/// only external and unknown entries (any mode this runtime does not know
/// included) are leaves for it.
fn resolves_through(mode: &ChildMode) -> bool {
    *mode == ChildMode::CONTINUABLE || *mode == ChildMode::ONE_SHOT
}

/// `parent/name` when both are known; the root's children have `""` as
/// their parent path.
fn join_path(parent: Option<&str>, name: Option<&str>) -> Option<String> {
    match (parent?, name?) {
        ("", name) => Some(name.to_owned()),
        (parent, name) => Some(format!("{parent}/{name}")),
    }
}

/// Whether a cold catalog read is remembered in the runtime's cold facts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Learn {
    /// Remember the log's parent and catalog entries.
    Facts,
    /// Remember nothing.
    Nothing,
}

/// A child still to be listed.
struct Pending {
    entry: CatalogEntry,
    parent_id: SessionId,
    depth: u32,
    /// The parent's path (`""` for the root), `None` when a level is
    /// unnamed; shared by its siblings.
    parent_path: Option<Arc<str>>,
    /// What the parent's catalog recorded of the child's usage.
    usage: crate::budget::ChildUsage,
}

/// What a listing knows of a child id it has met.
#[derive(Clone, Copy)]
enum Claim {
    /// Listed already (or the listed root): met again, it is skipped.
    Listed,
    /// Its catalog is being read ahead by this reader (an index into the
    /// walk's readers), whichever parent's catalog it is visited under.
    Ahead(usize),
}

impl SubagentRuntime {
    /// Read one session's catalog: from its live agent when the registry
    /// holds one (whatever the epoch), else from its log in the store.
    /// Nothing is loaded as an agent or resumed.
    pub(crate) async fn read_catalog(&self, id: &SessionId) -> Result<Catalog, Unreadable> {
        self.catalog_of(id, Learn::Facts).await
    }

    /// [`SubagentRuntime::read_catalog`], remembering what a cold log held
    /// only with [`Learn::Facts`]: a listing reads each catalog once and
    /// has no use for the copy.
    async fn catalog_of(&self, id: &SessionId, learn: Learn) -> Result<Catalog, Unreadable> {
        if let Some(read) = self.live_catalog(id) {
            return read;
        }
        let (catalog, parent) = stored_catalog(self.store().as_ref(), id).await?;
        if learn == Learn::Facts {
            // Both are facts that never change: the next read of them is free.
            let cold = self.cold();
            cold.learn_parent(id, parent);
            cold.learn_catalog(id, &catalog);
        }
        Ok(catalog)
    }

    /// The catalog of `id`'s live agent, folded from its events; `None`
    /// when the registry holds none.
    fn live_catalog(&self, id: &SessionId) -> Option<Result<Catalog, Unreadable>> {
        let agent = self.registry().get(id)?;
        Some(
            self.with_live_catalog(&agent, |fold| fold.catalog().clone())
                .map_err(Unreadable::fold),
        )
    }

    /// The entry `parent`'s catalog holds for `child`: from the live
    /// parent's fold without copying its catalog, else from its log.
    pub(crate) async fn catalog_entry(
        &self,
        parent: &SessionId,
        child: &SessionId,
    ) -> Result<Option<CatalogEntry>, Unreadable> {
        if let Some(agent) = self.registry().get(parent) {
            return self
                .with_live_catalog(&agent, |fold| fold.entry(child).cloned())
                .map_err(Unreadable::fold);
        }
        if let Some(entry) = self.cold().entry(parent, child) {
            return Ok(Some(entry));
        }
        Ok(self.read_catalog(parent).await?.get(child).cloned())
    }

    /// The entry `parent`'s catalog holds for `child`, read from the live
    /// parent's incremental fold or, for a cold parent, its log: one
    /// catalog, not a tree walk. Nothing is loaded as an agent.
    ///
    /// # Errors
    /// The store or catalog error of a catalog that cannot be read.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn child_entry(
        &self,
        parent: &SessionId,
        child: &SessionId,
    ) -> Result<Option<CatalogEntry>, SubagentError> {
        self.catalog_entry(parent, child)
            .await
            .map_err(|unreadable| unreadable.error)
    }

    /// [`SubagentRuntime::read_catalog`] unless `cancel` fires first: the
    /// outer error is the cancellation, the inner one the unreadable catalog.
    async fn observe_catalog(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Result<Catalog, Unreadable>, SubagentError> {
        self.observe_catalog_of(id, Learn::Facts, cancel).await
    }

    /// [`SubagentRuntime::catalog_of`] unless `cancel` fires first.
    async fn observe_catalog_of(
        &self,
        id: &SessionId,
        learn: Learn,
        cancel: &CancellationToken,
    ) -> Result<Result<Catalog, Unreadable>, SubagentError> {
        unless_cancelled(self.catalog_of(id, learn), cancel).await
    }

    /// Resolve a model-supplied agent reference within `caller`'s tree:
    /// `lead` is the tree's root; a slash path (`a/b`) is looked up segment
    /// by segment through the catalogs from the root, and may pass only
    /// through continuable children; a single token is first a name among
    /// the root's direct children and otherwise taken as a session id as it
    /// is. A path passes through continuable and one-shot children; external
    /// and unknown-mode children are leaves (seed 002). Resolution grants no
    /// authority: whoever acts on the id checks it.
    ///
    /// # Errors
    /// `NOT_LIVE` when `caller` is not the exact live agent;
    /// `AGENT_NAME_NOT_FOUND` when a path names no member, passes below an
    /// external or unknown-mode child, or a token is neither a name nor a
    /// session id; the store or catalog error of a catalog along the way
    /// that cannot be read; `CANCELLED` when `cancel` fires first.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads catalogs and logs.
    pub async fn resolve_name(
        &self,
        caller: &Arc<dyn Agent>,
        name: &str,
        cancel: &CancellationToken,
    ) -> Result<SessionId, SubagentError> {
        let reference = caller.reference();
        if !self.registry().is_live(&reference) {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                reference.id,
            )));
        }
        let root = self.root_id(caller.id());
        if name == ROOT_NAME {
            return Ok(root);
        }
        if !name.contains('/') {
            let catalog = self
                .observe_catalog(&root, cancel)
                .await?
                .map_err(|unreadable| unreadable.error)?;
            if let Some(entry) = catalog.by_name(name) {
                return Ok(entry.child_id.clone());
            }
            return SessionId::new(name).map_err(|_| name_not_found(name));
        }
        let mut current = root;
        let mut through: Option<ChildMode> = None;
        for segment in name.split('/') {
            if let Some(mode) = &through
                && !resolves_through(mode)
            {
                return Err(name_not_found(name));
            }
            let catalog = self
                .observe_catalog(&current, cancel)
                .await?
                .map_err(|unreadable| unreadable.error)?;
            let Some(entry) = catalog.by_name(segment) else {
                return Err(name_not_found(name));
            };
            through = Some(entry.mode.clone());
            current = entry.child_id.clone();
        }
        Ok(current)
    }

    /// List every descendant of `root` reachable through the catalogs, in
    /// stable pre-order (each catalog in its event order), without loading
    /// or resuming any agent. Each reachable catalog is read once.
    /// External children are leaves; every other child is traversed
    /// (seed 002), and one whose mode is `unknown` or not known here is
    /// listed as `unsupported`. A traversed child whose catalog cannot be
    /// read is listed as `corrupt` or `unavailable` (an unsupported one
    /// stays `unsupported`) and only its branch stops. Each row says
    /// whether its catalog lists children and what the child is doing. A child id already listed (a duplicate, or a cycle back
    /// to an ancestor or the root) is skipped.
    ///
    /// # Errors
    /// The store or catalog error when the root's own catalog cannot be
    /// read (a missing root is `SESSION_NOT_FOUND`); `CANCELLED` when
    /// `cancel` fires before the listing completes.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads catalogs and logs.
    pub async fn list_descendants(
        &self,
        root: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Vec<DescendantRow>, SubagentError> {
        list(Source::Runtime(self), root, cancel).await
    }
}

/// Every descendant of `root` as [`SubagentRuntime::list_descendants`]
/// lists them, read from `store` alone: for a reader with no runtime (a
/// command that only shows the logs). Nothing is live here, so every row
/// is [`ChildActivity::Inactive`].
///
/// # Errors
/// As `list_descendants`: the root's own catalog cannot be read, or
/// `cancel` fired.
///
/// # Cancel safety
/// Cancel safe: it only reads catalogs and logs.
pub async fn list_stored_descendants(
    store: &dyn SessionStore,
    root: &SessionId,
    cancel: &CancellationToken,
) -> Result<Vec<DescendantRow>, SubagentError> {
    list(Source::Store(store), root, cancel).await
}

/// `read` unless `cancel` fires first: the outer error is the
/// cancellation, the inner one the unreadable catalog.
async fn unless_cancelled(
    read: impl Future<Output = Result<Catalog, Unreadable>>,
    cancel: &CancellationToken,
) -> Result<Result<Catalog, Unreadable>, SubagentError> {
    if cancel.is_cancelled() {
        return Err(SubagentError::Cancelled);
    }
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(SubagentError::Cancelled),
        read = read => Ok(read),
    }
}

/// One session's catalog read from its log in `store`, and the parent its
/// header names.
async fn stored_catalog(
    store: &dyn SessionStore,
    id: &SessionId,
) -> Result<(Catalog, Option<SessionId>), Unreadable> {
    let skimmed = store
        .load_kind_many(std::slice::from_ref(id), CATALOG_KINDS)
        .await
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(StoreError::NotFound(id.clone())))
        .map_err(Unreadable::store)?;
    let catalog = fold_catalog(&skimmed.header, &skimmed.events).map_err(Unreadable::fold)?;
    Ok((catalog, skimmed.header.parent_session))
}

/// Where a listing reads catalogs and activity: a store alone, or a
/// runtime, whose live agents come first and whose cold reads are
/// remembered.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// The logs only: nothing is live.
    Store(&'a dyn SessionStore),
    /// The runtime's live agents, then its store.
    Runtime(&'a SubagentRuntime),
}

impl<'a> Source<'a> {
    /// The store cold catalogs are read from.
    fn store(self) -> &'a dyn SessionStore {
        match self {
            Self::Store(store) => store,
            Self::Runtime(runtime) => runtime.store().as_ref(),
        }
    }

    /// `id`'s catalog unless `cancel` fires first (see
    /// [`unless_cancelled`]); a runtime remembers a cold one with
    /// [`Learn::Facts`].
    async fn catalog(
        self,
        id: &SessionId,
        learn: Learn,
        cancel: &CancellationToken,
    ) -> Result<Result<Catalog, Unreadable>, SubagentError> {
        match self {
            Self::Store(store) => {
                let read = async { stored_catalog(store, id).await.map(|(catalog, _)| catalog) };
                unless_cancelled(read, cancel).await
            }
            Self::Runtime(runtime) => runtime.observe_catalog_of(id, learn, cancel).await,
        }
    }

    /// The catalog of `id`'s live agent; `None` when it has none.
    fn live_catalog(self, id: &SessionId) -> Option<Result<Catalog, Unreadable>> {
        match self {
            Self::Store(_) => None,
            Self::Runtime(runtime) => runtime.live_catalog(id),
        }
    }

    /// What `child` is doing now.
    fn activity(self, child: &SessionId) -> ChildActivity {
        match self {
            Self::Store(_) => ChildActivity::Inactive,
            Self::Runtime(runtime) => runtime.activity(child),
        }
    }
}

/// The walk both listings share: see [`SubagentRuntime::list_descendants`].
async fn list(
    source: Source<'_>,
    root: &SessionId,
    cancel: &CancellationToken,
) -> Result<Vec<DescendantRow>, SubagentError> {
    let catalog = source
        .catalog(root, Learn::Nothing, cancel)
        .await?
        .map_err(|unreadable| unreadable.error)?;
    // Sized for the root's children; deeper levels grow them.
    let width = catalog.entries().len();
    // The ids met so far, hashed with a fast seeded hasher: one lookup
    // when a child is read ahead, one when it is visited.
    let mut met: Met = HashMap::with_capacity_and_hasher(width + 1, RandomState::default());
    met.insert(root.clone(), Claim::Listed);
    let mut rows = Vec::with_capacity(width);
    let mut stack: Vec<Pending> = Vec::with_capacity(width);
    let mut readers: Vec<ReadAhead<'_>> = Vec::new();
    read_ahead(source, &catalog, &mut met, &mut readers, cancel)?;
    push_children(&mut stack, catalog, root, 1, Some(Arc::from("")));
    while let Some(Pending {
        entry,
        parent_id,
        depth,
        parent_path,
        usage,
    }) = stack.pop()
    {
        let reader = match met.entry(entry.child_id.clone()) {
            Entry::Occupied(mut claim) => match *claim.get() {
                Claim::Listed => continue,
                Claim::Ahead(at) => {
                    claim.insert(Claim::Listed);
                    Some(at)
                }
            },
            Entry::Vacant(claim) => {
                claim.insert(Claim::Listed);
                None
            }
        };
        let path = join_path(parent_path.as_deref(), entry.name.as_deref());
        let kind = traversal(&entry.mode);
        let mut has_children = false;
        let mut diagnostic = (kind == Traversal::Unsupported).then_some(RowDiagnostic::Unsupported);
        if kind != Traversal::Leaf {
            let ahead = match reader.and_then(|at| readers.get_mut(at)) {
                Some(ahead) => ahead.take(&entry.child_id, cancel).await?,
                None => None,
            };
            let read = match ahead {
                Some(read) => read,
                None => {
                    source
                        .catalog(&entry.child_id, Learn::Facts, cancel)
                        .await?
                }
            };
            match read {
                // A leaf's empty catalog has nothing to read ahead or
                // queue (and its path is not shared with children).
                Ok(catalog) if catalog.is_empty() => {}
                Ok(catalog) => {
                    has_children = true;
                    read_ahead(source, &catalog, &mut met, &mut readers, cancel)?;
                    push_children(
                        &mut stack,
                        catalog,
                        &entry.child_id,
                        depth.saturating_add(1),
                        path.as_deref().map(Arc::from),
                    );
                }
                Err(unreadable) => {
                    diagnostic.get_or_insert(unreadable.diagnostic);
                }
            }
        }
        let activity = source.activity(&entry.child_id);
        rows.push(DescendantRow {
            entry,
            parent_id,
            depth,
            path,
            diagnostic,
            has_children,
            activity,
            usage,
        });
    }
    Ok(rows)
}

impl SubagentRuntime {
    /// What `child` is doing now: its live agent's status, else whether an
    /// activation (an external run) is in flight for it.
    fn activity(&self, child: &SessionId) -> ChildActivity {
        match self.registry().get(child).map(|agent| agent.status()) {
            Some(AgentStatus::Running) => ChildActivity::Running,
            Some(AgentStatus::Idle) => ChildActivity::Idle,
            None if self.activations().get(child).is_some() => ChildActivity::Running,
            None => ChildActivity::Inactive,
        }
    }
}

/// How many cold child logs a listing reads per batch.
const LIST_BATCH: usize = 256;

/// A batch of cold children as the store returned it.
type Batch = (Vec<SessionId>, Vec<Result<KindEvents, StoreError>>);

/// The ids a listing has met, and how.
type Met = HashMap<SessionId, Claim, RandomState>;

/// Catalogs by child.
type Reads = HashMap<SessionId, Result<Catalog, Unreadable>, RandomState>;

/// The catalogs of one node's traversable children, read ahead of the walk
/// and handed to it in catalog order, the order the pre-order walk visits
/// them in: live children's catalogs were folded when it was made, cold
/// ones are read in batches of [`LIST_BATCH`] through
/// `SessionStore::load_kind_many` (catalog events only), a few batches in
/// flight while the walk goes on with what has arrived.
struct ReadAhead<'a> {
    /// Live children, folded from their agents.
    live: Reads,
    /// Cold children read and folded, in catalog order, not yet visited.
    arrived: VecDeque<(SessionId, Result<Catalog, Unreadable>)>,
    /// Cold children read and passed over to reach one visited out of
    /// order (under another parent that lists it too); empty otherwise.
    passed: Reads,
    /// The batches still to arrive; `None` once they all have.
    batches: Option<BoxStream<'a, Batch>>,
}

impl ReadAhead<'_> {
    /// The catalog read ahead for `child`: `None` when it was not read
    /// here. The walk usually asks for the next one in catalog order;
    /// reads passed over to reach a child asked for out of order are kept
    /// until their own turn.
    async fn take(
        &mut self,
        child: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Option<Result<Catalog, Unreadable>>, SubagentError> {
        for kept in [&mut self.live, &mut self.passed] {
            if !kept.is_empty()
                && let Some(read) = kept.remove(child)
            {
                return Ok(Some(read));
            }
        }
        loop {
            while let Some((id, read)) = self.arrived.pop_front() {
                if id == *child {
                    return Ok(Some(read));
                }
                self.passed.insert(id, read);
            }
            let Some(batches) = &mut self.batches else {
                return Ok(None);
            };
            let next = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(SubagentError::Cancelled),
                next = batches.next() => next,
            };
            let Some((chunk, loaded)) = next else {
                self.batches = None;
                return Ok(None);
            };
            self.arrived
                .extend(chunk.into_iter().zip(loaded).map(|(id, loaded)| {
                    let read = loaded.map_err(Unreadable::store).and_then(|log| {
                        fold_catalog(&log.header, &log.events).map_err(Unreadable::fold)
                    });
                    (id, read)
                }));
        }
    }
}

/// Start reading the catalogs of `catalog`'s traversable children that
/// the listing has not met yet, when there are two or more (a lone one
/// is read when visited), and claim them for the new reader in `met`.
/// The walk's output order does not depend on it, and each catalog is
/// still read once.
fn read_ahead<'a>(
    source: Source<'a>,
    catalog: &Catalog,
    met: &mut Met,
    readers: &mut Vec<ReadAhead<'a>>,
    cancel: &CancellationToken,
) -> Result<(), SubagentError> {
    let at = readers.len();
    // A catalog lists each child once (its fold skips repeated ids).
    let mut wanted: Vec<SessionId> = Vec::new();
    for entry in catalog.entries() {
        if traversal(&entry.mode) != Traversal::Leaf
            && let Entry::Vacant(claim) = met.entry(entry.child_id.clone())
        {
            claim.insert(Claim::Ahead(at));
            wanted.push(entry.child_id.clone());
        }
    }
    if let [lone] = wanted.as_slice() {
        met.remove(lone);
    }
    if wanted.len() < 2 {
        return Ok(());
    }
    if cancel.is_cancelled() {
        return Err(SubagentError::Cancelled);
    }
    // Live children are folded from their agents; the cold ones are
    // read in batches from the store.
    let mut live = HashMap::with_hasher(RandomState::default());
    let mut chunks: Vec<Vec<SessionId>> = Vec::new();
    for id in wanted {
        match source.live_catalog(&id) {
            Some(read) => {
                live.insert(id, read);
            }
            None => match chunks.last_mut() {
                Some(chunk) if chunk.len() < LIST_BATCH => chunk.push(id),
                _ => chunks.push(vec![id]),
            },
        }
    }
    // One batch more in flight than the machine has cores, so that no
    // reader waits for the walk to ask for its next batch; at most
    // `in_flight` batches of logs are held in memory at once.
    let in_flight = std::thread::available_parallelism().map_or(3, |n| n.get().clamp(2, 8) + 1);
    let store = source.store();
    // Owned batches: a stream of futures borrowing `&[SessionId]` chunks
    // makes this future impossible to prove `Send` (higher-ranked
    // closure lifetimes), and tools run it inside `Send` futures.
    let batches = futures::stream::iter(chunks)
        .map(move |chunk| async move {
            let loaded = store.load_kind_many(&chunk, CATALOG_KINDS).await;
            (chunk, loaded)
        })
        .buffered(in_flight)
        .boxed();
    readers.push(ReadAhead {
        live,
        arrived: VecDeque::new(),
        passed: HashMap::with_hasher(RandomState::default()),
        batches: Some(batches),
    });
    Ok(())
}

/// Queue a catalog's entries so that they pop in event order, before
/// anything queued earlier (pre-order).
fn push_children(
    stack: &mut Vec<Pending>,
    catalog: Catalog,
    parent_id: &SessionId,
    depth: u32,
    parent_path: Option<Arc<str>>,
) {
    let usage: Vec<_> = catalog
        .entries()
        .iter()
        .map(|entry| catalog.usage(&entry.child_id))
        .collect();
    stack.extend(
        catalog
            .into_entries()
            .into_iter()
            .zip(usage)
            .rev()
            .map(|(entry, usage)| Pending {
                entry,
                parent_id: parent_id.clone(),
                depth,
                parent_path: parent_path.clone(),
                usage,
            }),
    );
}
