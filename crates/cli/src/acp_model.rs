//! The model option of a `dsh acp` session (`session/set_config_option`):
//! the routes the configuration names for the tree's provider (the
//! tree's model, then each role's `model`), and [`Chosen`], the tree's
//! model with the client's pick applied. A pick applies from the next
//! prompt: the tree hands it to [`Chosen`] when a turn starts, so a turn
//! keeps its model to the end. Only a request that names no model of its
//! own takes it (the lead's, and a child's without a role's route); a
//! role's child keeps its role's model. The header keeps the model the
//! tree was created with, as `dsh send --model` leaves it: a later
//! `session/load` starts from that one again.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use dsh_acp_agent::Models;
use dsh_core::{CancellationToken, Model, ModelError, ModelRequest, ModelStream};

use crate::config::Settings;
use crate::model::ModelChoice;

/// The tree's model with the session's pick: a request that names no
/// model is sent with the picked model's id.
pub struct Chosen {
    inner: Arc<dyn Model>,
    /// The picked model's id, `None` for the tree's own.
    id: Mutex<Option<String>>,
}

impl Chosen {
    /// `inner` with no pick yet.
    pub fn new(inner: Arc<dyn Model>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            id: Mutex::new(None),
        })
    }

    fn pick(&self, id: Option<String>) {
        *self.id.lock().unwrap_or_else(PoisonError::into_inner) = id;
    }
}

#[async_trait]
impl Model for Chosen {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn accepts_images(&self) -> bool {
        self.inner.accepts_images()
    }

    async fn stream(
        &self,
        mut request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        if request.model.is_none() {
            request.model = self
                .id
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
        }
        self.inner.stream(request, cancel).await
    }
}

/// A session's model option: its routes, the one picked, and the model
/// that sends the pick.
pub struct ModelOption {
    chosen: Arc<Chosen>,
    /// The tree's own route (first of `routes`).
    own: String,
    routes: Vec<String>,
    picked: Mutex<String>,
}

impl ModelOption {
    /// The option of a tree whose model is `choice` (wrapped as `chosen`),
    /// or `None` when the configuration names no other route for its
    /// provider (the demo has none).
    pub fn of(settings: &Settings, choice: &ModelChoice, chosen: Arc<Chosen>) -> Option<Self> {
        let ModelChoice::Api(api) = choice else {
            return None;
        };
        let own = choice.spec();
        let mut routes = vec![own.clone()];
        for role in settings.roles.values() {
            if let Ok(Some(id)) = role.model_id(choice) {
                let route = format!("{}:{id}", api.provider);
                if !routes.contains(&route) {
                    routes.push(route);
                }
            }
        }
        (routes.len() > 1).then(|| Self {
            chosen,
            picked: Mutex::new(own.clone()),
            own,
            routes,
        })
    }

    /// The routes and the one picked.
    pub fn models(&self) -> Models {
        Models {
            current: self
                .picked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            choices: self.routes.clone(),
        }
    }

    /// Pick `route` for the next turn; `false` when it is not a route.
    pub fn pick(&self, route: &str) -> bool {
        if !self.routes.iter().any(|known| known == route) {
            return false;
        }
        route.clone_into(&mut self.picked.lock().unwrap_or_else(PoisonError::into_inner));
        true
    }

    /// A turn starts: its requests ask the picked route.
    pub fn apply(&self) {
        let picked = self
            .picked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let id = (picked != self.own)
            .then(|| picked.split_once(':').map(|(_, id)| id.to_owned()))
            .flatten();
        self.chosen.pick(id);
    }
}
