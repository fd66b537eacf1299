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
