//! Agent names: the model-facing handles of children, and the runtime's
//! naming of its members (a live member's names, a new child's full path,
//! any member's name by its lineage; `tree.rs` resolves a name back to a
//! member through the listing). A name is 1 to 32 lower-case letters,
//! digits and hyphens starting with a letter, never `lead` (the root's
//! name), and unique among one parent's children. A reservation holds a
//! name while a child is being created (checked and committed against the
//! parent's catalog by `catalog::CatalogCache`); releasing a reservation
//! that no longer owns its entry (stale or repeated) is a no-op, so it can
//! never drop a newer reservation of the same name.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dsh_core::{Agent, SessionId};
use foldhash::fast::RandomState;

use crate::messaging::{MAX_LINEAGE, unknown_provider};
use crate::runtime::SubagentRuntime;
use crate::{AdmissionError, DeliveryError};

use crate::error::SubagentError;

/// The name of a tree's root.
pub const ROOT_NAME: &str = "lead";

/// The longest name, in bytes.
pub const MAX_NAME_LEN: usize = 32;

/// Check a requested name against the rules.
///
/// # Errors
/// [`AdmissionError::InvalidName`] saying which rule it breaks.
pub fn validate_name(name: &str) -> Result<(), SubagentError> {
    let reason = if name.is_empty() {
        Some("a name needs at least one character")
    } else if name.len() > MAX_NAME_LEN {
        Some("a name has at most 32 characters")
    } else if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some("a name starts with a lower-case letter")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Some("a name uses only lower-case letters, digits and hyphens")
    } else if name == ROOT_NAME {
        Some("`lead` is the root's name")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(SubagentError::Admission(AdmissionError::InvalidName {
            name: name.to_owned(),
            reason,
        })),
    }
}

/// Whether `text` is a valid child name.
#[cfg(test)]
fn is_agent_name(text: &str) -> bool {
    validate_name(text).is_ok()
}

/// Names held by in-flight creations, per parent. Names already in a
/// parent's catalog are checked by the caller against the catalog.
#[derive(Debug, Clone, Default)]
pub struct NameReservations {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: AtomicU64,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    names: HashMap<(SessionId, String), u64, RandomState>,
    /// Per parent, the lowest N whose `agent-N` may be free: defaults are
    /// found without rescanning every name taken before.
    default_hint: HashMap<SessionId, u64, RandomState>,
}

impl NameReservations {
    /// No reservations.
    pub fn new() -> Self {
        Self::default()
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserve `name` under `parent` unless it is held or in `taken` (the
    /// names already in the parent's catalog).
    ///
    /// # Errors
    /// [`AdmissionError::NameTaken`].
    pub fn reserve(
        &self,
        parent: &SessionId,
        name: &str,
        taken: &HashSet<String>,
    ) -> Result<NameReservation, SubagentError> {
        let mut held = self.held();
        self.reserve_locked(&mut held, parent, name.to_owned(), taken)
    }

    fn reserve_locked(
        &self,
        held: &mut Held,
        parent: &SessionId,
        name: String,
        taken: &HashSet<String>,
    ) -> Result<NameReservation, SubagentError> {
        if taken.contains(&name) {
            return Err(SubagentError::Admission(AdmissionError::NameTaken(name)));
        }
        let key = (parent.clone(), name);
        if held.names.contains_key(&key) {
            return Err(SubagentError::Admission(AdmissionError::NameTaken(key.1)));
        }
        let token = self.inner.next.fetch_add(1, Ordering::Relaxed);
        held.names.insert(key.clone(), token);
        Ok(NameReservation {
            owner: self.clone(),
            key,
            token,
            released: false,
        })
    }

    /// Reserve the first free `agent-N` (N from 1) under `parent`.
    pub fn reserve_default(&self, parent: &SessionId, taken: &HashSet<String>) -> NameReservation {
        let mut held = self.held();
        let mut n = held.default_hint.get(parent).copied().unwrap_or(1);
        loop {
            if let Ok(reservation) =
                self.reserve_locked(&mut held, parent, format!("agent-{n}"), taken)
            {
                held.default_hint.insert(parent.clone(), n + 1);
                return reservation;
            }
            n += 1;
        }
    }

    /// Forget `parent`'s default-name hint (its fold left the cache; a
    /// later default under it scans its catalog from `agent-1` once).
    pub(crate) fn forget_parent(&self, parent: &SessionId) {
        self.held().default_hint.remove(parent);
    }

    /// How many parents keep a default-name hint.
    pub(crate) fn hints(&self) -> usize {
        self.held().default_hint.len()
    }

    /// How many names are held.
    pub(crate) fn len(&self) -> usize {
        self.held().names.len()
    }

    /// Whether no name is held.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A held name. Dropping it releases the name unless it was committed.
#[derive(Debug)]
pub struct NameReservation {
    owner: NameReservations,
    key: (SessionId, String),
    token: u64,
    released: bool,
}

impl NameReservation {
    /// The reserved name.
    pub fn name(&self) -> &str {
        &self.key.1
    }

    /// Hand the name over to the parent's catalog, which holds the child's
    /// entry now: the reservation is dropped (nothing is kept per child
    /// once it is cataloged) without freeing the name for the next default.
    /// The caller holds the runtime's catalog lock, under which every
    /// reservation checks a catalog folded to the parent's current log, so
    /// no check can have read the catalog before this entry and the
    /// reservation after it is gone.
    pub fn commit(mut self) {
        self.released = true;
        let mut held = self.owner.held();
        if held.names.get(&self.key) == Some(&self.token) {
            held.names.remove(&self.key);
        }
    }

    /// Release the name. Only the reservation that owns the entry removes
    /// it; a stale or repeated release does nothing.
    pub fn release(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let mut held = self.owner.held();
        if held.names.get(&self.key) == Some(&self.token) {
            held.names.remove(&self.key);
            // A released default name is free again: let the next default find it.
            if let Some(n) = self
                .key
                .1
                .strip_prefix("agent-")
                .and_then(|n| n.parse::<u64>().ok())
                && let Some(hint) = held.default_hint.get_mut(&self.key.0)
                && *hint > n
            {
                *hint = n;
            }
        }
    }
}

impl Drop for NameReservation {
    fn drop(&mut self) {
        self.release();
    }
}

/// Model-facing names of one live tree member and its direct creator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberNames {
    /// `lead` for the root, the slash path for a named descendant, else the session id.
    pub self_name: String,
    /// The direct creator's name by the same rule; `None` for the root.
    pub parent: Option<String>,
}

/// The runtime's state: each part a component that owns its own state
/// (reached through the accessors below, never field by field from another
/// module).
/// The names of tree members: of a live one (by its activation), of a
/// child to be (by its creator's path) and of any member (by its lineage).
impl SubagentRuntime {
    /// The activation of the exact live member `agent`, or `None` for a
    /// live root.
    ///
    /// # Errors
    /// `NOT_LIVE` for an agent that is not the exact live one;
    /// `NOT_A_MEMBER` for a live agent that is neither a root nor the agent
    /// of a live activation.
    fn member(
        &self,
        agent: &Arc<dyn Agent>,
    ) -> Result<Option<Arc<crate::activation::Activation>>, SubagentError> {
        let reference = agent.reference();
        if !self.registry().is_live(&reference) {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                reference.id,
            )));
        }
        match self.activations().of_agent(&reference) {
            Some(activation) => Ok(Some(activation)),
            None if agent.header().parent_session.is_none() => Ok(None),
            None => Err(SubagentError::Delivery(DeliveryError::NotAMember(
                reference.id,
            ))),
        }
    }
    /// The root session of the exact live member `agent`'s tree.
    ///
    /// # Errors
    /// As [`SubagentRuntime::names_of`].
    pub fn root_of(&self, agent: &Arc<dyn Agent>) -> Result<SessionId, SubagentError> {
        Ok(match self.member(agent)? {
            Some(activation) => activation.root().clone(),
            None => agent.id().clone(),
        })
    }
    /// The model-facing names of the exact live member `agent` and its creator.
    ///
    /// # Errors
    /// `NOT_LIVE` when `agent` is not the exact live agent, `NOT_A_MEMBER`
    /// when it is live but neither a root nor a live activation's child.
    pub fn names_of(&self, agent: &Arc<dyn Agent>) -> Result<MemberNames, SubagentError> {
        let Some(activation) = self.member(agent)? else {
            return Ok(MemberNames {
                self_name: ROOT_NAME.to_owned(),
                parent: None,
            });
        };
        let parent = match self.activations().of_agent(activation.parent()) {
            Some(parent) => parent.name().to_owned(),
            None if &activation.parent().id == activation.root() => ROOT_NAME.to_owned(),
            // A cold creator: its name is this path without the last level.
            None => activation
                .path()
                .and_then(|path| path.rsplit_once('/'))
                .map_or_else(
                    || activation.parent().id.to_string(),
                    |(parent, _)| parent.to_owned(),
                ),
        };
        Ok(MemberNames {
            self_name: activation.name().to_owned(),
            parent: Some(parent),
        })
    }
    /// The full model-facing name of a child `name` of `parent`.
    pub(crate) fn full_name(&self, parent: &SessionId, name: &str) -> Option<String> {
        match self.activations().get(parent) {
            None => Some(name.to_owned()),
            Some(parent) => parent.path().map(|path| format!("{path}/{name}")),
        }
    }
    /// The model-facing name of `member` in `root`'s tree: `lead` for the
    /// root, the slash path of catalog names when every level below the
    /// root is named, else its session id (the rule of
    /// [`SubagentRuntime::names_of`], for a member that need not be live).
    /// Read along the member's lineage only, never by listing the tree; a
    /// lineage that cannot be read, or that ends elsewhere, gives the id.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads headers and catalogs.
    pub async fn member_name(&self, root: &SessionId, member: &SessionId) -> String {
        if member == root {
            return ROOT_NAME.to_owned();
        }
        self.member_identity(member, root).await.0
    }
    /// The full name of a member from the root (the slash path of catalog
    /// names when every level below the root is named, else its id), the
    /// provider its creator recorded and the label its creator gave it.
    pub(crate) async fn member_identity(
        &self,
        member: &SessionId,
        root: &SessionId,
    ) -> (String, String, String) {
        let mut names = Vec::new();
        let mut provider = None;
        let mut label = String::new();
        let mut current = member.clone();
        for _ in 0..MAX_LINEAGE {
            if &current == root {
                names.reverse();
                return (
                    names.join("/"),
                    provider.unwrap_or_else(unknown_provider),
                    label,
                );
            }
            let Ok(Some(parent)) = self.parent_of(&current).await else {
                break;
            };
            let entry = self.catalog_entry(&parent, &current).await.ok().flatten();
            if provider.is_none() {
                provider = Some(
                    entry
                        .as_ref()
                        .map_or_else(unknown_provider, |entry| entry.provider.clone()),
                );
                label = entry
                    .as_ref()
                    .map(|entry| entry.label.clone())
                    .unwrap_or_default();
            }
            match entry.and_then(|entry| entry.name) {
                Some(name) => names.push(name),
                None => break,
            }
            current = parent;
        }
        (
            member.to_string(),
            provider.unwrap_or_else(unknown_provider),
            label,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        for ok in ["a", "reviewer", "agent-12", "x-1-y", &"a".repeat(32)] {
            assert!(is_agent_name(ok), "{ok}");
        }
        for bad in [
            "",
            "lead",
            "1abc",
            "-a",
            "Abc",
            "a_b",
            "a b",
            "é",
            &"a".repeat(33),
        ] {
            assert!(!is_agent_name(bad), "{bad}");
        }
    }

    #[test]
    fn reservations_block_duplicates_and_stale_releases_cannot_drop_newer_ones() {
        let names = NameReservations::new();
        let parent = SessionId::new("p").unwrap();
        let none = HashSet::new();
        let mut first = names.reserve(&parent, "a", &none).unwrap();
        assert_eq!(
            names.reserve(&parent, "a", &none).unwrap_err().code(),
            "NAME_TAKEN"
        );
        first.release();
        let second = names.reserve(&parent, "a", &none).unwrap();
        first.release(); // repeated release: must not drop `second`
        drop(first);
        assert_eq!(
            names.reserve(&parent, "a", &none).unwrap_err().code(),
            "NAME_TAKEN"
        );
        drop(second);
        assert!(names.is_empty());
        // A committed name leaves the reservations: the parent's catalog
        // holds it from then on, and its check refuses it.
        names.reserve(&parent, "kept", &none).unwrap().commit();
        assert!(names.is_empty());
        let cataloged: HashSet<String> = ["kept".to_owned()].into();
        assert_eq!(
            names
                .reserve(&parent, "kept", &cataloged)
                .unwrap_err()
                .code(),
            "NAME_TAKEN"
        );
        // A committed default does not free its number for the next one.
        names.reserve_default(&parent, &none).commit();
        assert_eq!(names.reserve_default(&parent, &none).name(), "agent-2");
        let mut stale = names.reserve(&parent, "tmp", &none).unwrap();
        stale.release();
        // Another parent has its own namespace.
        drop(stale);
        let other = SessionId::new("q").unwrap();
        let _a = names.reserve(&parent, "a", &none).unwrap();
        let _b = names.reserve(&other, "a", &none).unwrap();
    }

    #[test]
    fn defaults_take_the_first_free_number() {
        let names = NameReservations::new();
        let parent = SessionId::new("p").unwrap();
        let taken: HashSet<String> = ["agent-1".to_owned(), "agent-3".to_owned()].into();
        let a = names.reserve_default(&parent, &taken);
        assert_eq!(a.name(), "agent-2");
        let b = names.reserve_default(&parent, &taken);
        assert_eq!(b.name(), "agent-4");
        // A released default is the first free one again.
        drop(a);
        assert_eq!(names.reserve_default(&parent, &taken).name(), "agent-2");
    }
}
