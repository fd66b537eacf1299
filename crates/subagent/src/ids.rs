//! Maps and sets keyed by what the process itself mints or holds: session
//! ids (random when generated), agent references, activation serials. They
//! are hashed with foldhash rather than the standard library's SipHash,
//! which is built to resist keys chosen to collide: these maps never take
//! a key from outside the process in numbers that could flood them (a
//! caller-supplied child id is one key per start, and every start holds a
//! capacity slot), so that resistance buys nothing here and SipHash cost a
//! tenth of a child's hand-off. Keys a model chooses (child names) stay on
//! the standard hasher.

/// A hash map keyed by process-internal ids.
pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A hash set of process-internal ids.
pub(crate) type IdSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

use std::hash::Hash;
use std::sync::{Arc, Mutex};

use crate::runtime::lock;

/// Keys being worked on, each held by the [`Claim`] that put it there and
/// gone when that claim drops: the set holds only work in flight.
pub(crate) struct InFlight<K: Eq + Hash> {
    keys: Arc<Mutex<IdSet<K>>>,
}

impl<K: Eq + Hash> Default for InFlight<K> {
    fn default() -> Self {
        Self {
            keys: Arc::default(),
        }
    }
}

/// Holds one key of an [`InFlight`] set until dropped.
pub(crate) struct Claim<K: Eq + Hash> {
    keys: Arc<Mutex<IdSet<K>>>,
    key: Option<K>,
}

impl<K: Eq + Hash + Clone> InFlight<K> {
    /// Hold `key`, unless it is held already.
    pub(crate) fn claim(&self, key: K) -> Option<Claim<K>> {
        lock(&self.keys).insert(key.clone()).then(|| Claim {
            keys: self.keys.clone(),
            key: Some(key),
        })
    }

    /// Whether `key` is held.
    pub(crate) fn contains(&self, key: &K) -> bool {
        lock(&self.keys).contains(key)
    }

    /// How many keys are held.
    pub(crate) fn len(&self) -> usize {
        lock(&self.keys).len()
    }
}

impl<K: Eq + Hash> Drop for Claim<K> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            lock(&self.keys).remove(&key);
        }
    }
}
