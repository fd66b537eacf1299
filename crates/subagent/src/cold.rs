//! Facts about cold sessions that never change once written, kept so that
//! messaging a cold member does not read them again: a session's parent
//! (its header is written once, at creation) and the entries a parent's
//! catalog holds (a catalog only grows, and its first record of a child
//! stands). Only positive facts are kept: a child a catalog did not list
//! is read again next time, since its parent may record it later. Each map
//! is bounded; a full one is emptied and refilled from the store as asked.
//! A log the runtime removes is forgotten. This module never reads the
//! store itself: the runtime's read paths fill it.

use std::collections::HashMap;
use std::sync::Mutex;

use dsh_core::SessionId;
use foldhash::fast::RandomState;

use crate::catalog::{Catalog, CatalogEntry};
use crate::runtime::lock;

/// How many facts of each kind are kept before the map is emptied.
const CAPACITY: usize = 1 << 16;

/// The immutable facts read from cold logs.
#[derive(Debug, Default)]
pub(crate) struct ColdFacts {
    /// Each session's parent (`None` for a root), from its header.
    parents: Mutex<HashMap<SessionId, Option<SessionId>, RandomState>>,
    /// Catalog entries by (parent, child).
    entries: Mutex<HashMap<(SessionId, SessionId), CatalogEntry, RandomState>>,
}

impl ColdFacts {
    /// The parent of `id` when its header was read before: `Some(None)` for
    /// a root, `None` when unknown.
    pub(crate) fn parent(&self, id: &SessionId) -> Option<Option<SessionId>> {
        lock(&self.parents).get(id).cloned()
    }

    /// Remember that `id`'s header names `parent`.
    pub(crate) fn learn_parent(&self, id: &SessionId, parent: Option<SessionId>) {
        let mut parents = lock(&self.parents);
        if parents.len() >= CAPACITY {
            parents.clear();
        }
        parents.insert(id.clone(), parent);
    }

    /// The entry `parent`'s catalog holds for `child`, when it was read
    /// from a cold log before.
    pub(crate) fn entry(&self, parent: &SessionId, child: &SessionId) -> Option<CatalogEntry> {
        lock(&self.entries)
            .get(&(parent.clone(), child.clone()))
            .cloned()
    }

    /// Remember every entry of `parent`'s catalog, as read from its log.
    pub(crate) fn learn_catalog(&self, parent: &SessionId, catalog: &Catalog) {
        let mut entries = lock(&self.entries);
        if entries.len() + catalog.len() > CAPACITY {
            entries.clear();
        }
        for entry in catalog.entries().iter().take(CAPACITY) {
            entries
                .entry((parent.clone(), entry.child_id.clone()))
                .or_insert_with(|| entry.clone());
        }
    }

    /// Forget what is known of `id`'s own log (it was removed): its parent
    /// and the entries its catalog held.
    pub(crate) fn forget(&self, id: &SessionId) {
        lock(&self.parents).remove(id);
        lock(&self.entries).retain(|(parent, _), _| parent != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CATALOG_EVENT, ChildMode, catalog_payload, fold_catalog};
    use dsh_core::{EventPayload, SessionEvent, SessionHeader};

    fn sid(text: &str) -> SessionId {
        SessionId::new(text).unwrap()
    }

    fn catalog_of(parent: &str, children: &[&str]) -> Catalog {
        let events: Vec<SessionEvent> = (0_u64..)
            .zip(children)
            .map(|(seq, child)| SessionEvent {
                seq,
                time: 0,
                payload: EventPayload::Extension {
                    kind: CATALOG_EVENT.into(),
                    payload: catalog_payload(&CatalogEntry {
                        child_id: sid(child),
                        name: Some((*child).to_owned()),
                        label: String::new(),
                        provider: "spawn".into(),
                        mode: ChildMode::CONTINUABLE,
                    }),
                },
            })
            .collect();
        fold_catalog(&SessionHeader::new(sid(parent), "/"), &events).unwrap()
    }

    #[test]
    fn facts_are_kept_per_parent_and_forgotten_with_their_log() {
        let facts = ColdFacts::default();
        assert_eq!(facts.parent(&sid("c")), None);
        facts.learn_parent(&sid("c"), Some(sid("p")));
        facts.learn_parent(&sid("p"), None);
        assert_eq!(facts.parent(&sid("c")), Some(Some(sid("p"))));
        assert_eq!(facts.parent(&sid("p")), Some(None));
        facts.learn_catalog(&sid("p"), &catalog_of("p", &["c", "d"]));
        facts.learn_catalog(&sid("q"), &catalog_of("q", &["c"]));
        assert_eq!(
            facts.entry(&sid("p"), &sid("d")).map(|e| e.child_id),
            Some(sid("d"))
        );
        assert!(facts.entry(&sid("d"), &sid("p")).is_none());
        facts.forget(&sid("p"));
        assert_eq!(facts.parent(&sid("p")), None);
        assert!(facts.entry(&sid("p"), &sid("c")).is_none());
        assert!(
            facts.entry(&sid("q"), &sid("c")).is_some(),
            "another parent's facts stay"
        );
        assert_eq!(facts.parent(&sid("c")), Some(Some(sid("p"))));
    }
}
