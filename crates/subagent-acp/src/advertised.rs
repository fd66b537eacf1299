//! What a configured agent advertised when it last opened a session: the
//! ACP capabilities the provider can use (`loadSession`, image prompts)
//! and the models its model selector offers. The provider keeps one per
//! configured agent, filled by every start and by
//! [`AcpProvider::probe`](crate::AcpProvider::probe), so that the runtime's
//! capability check refuses a flag the agent cannot honour before a child
//! is accepted, and a model it does not offer before any process starts.

use std::sync::{Arc, Mutex, PoisonError};

/// What an agent advertised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    /// `agentCapabilities.loadSession`: a session can be resumed with
    /// `session/load` by a later process.
    pub load_session: bool,
    /// `promptCapabilities.image`.
    pub images: bool,
    /// The value ids of its model selector (`configOptions` of category
    /// `model`), or `None` when it has none.
    pub models: Option<Vec<String>>,
}

/// The provider's cache of [`Advertised`]; clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct AdvertisedCache(Arc<Mutex<Option<Advertised>>>);

impl AdvertisedCache {
    /// What was last recorded, if anything.
    pub(crate) fn get(&self) -> Option<Advertised> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Record what the agent advertised now (the latest wins: an agent
    /// upgraded in place may change).
    pub(crate) fn record(&self, advertised: Advertised) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(advertised);
    }
}
