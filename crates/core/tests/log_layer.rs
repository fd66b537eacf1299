//! [`LogLayer`]: a log wrapper that overrides nothing reaches every method
//! of the log it wraps (the defaulted ones included), and one that
//! overrides a method keeps only that one. The blanket `SessionLog` impl
//! denies `clippy::missing_trait_methods`, so a method added to the trait
//! with a default fails the build until it is forwarded.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Mutex;

use async_trait::async_trait;
use dsh_core::{LogLayer, SessionEvent, SessionLog, StoreError};

/// A log that notes which of its methods a call reached. The lint
/// makes it override every method, so none is reached through a
/// default it would not note.
#[derive(Default)]
struct ProbeLog {
    reached: Mutex<BTreeSet<&'static str>>,
}

impl ProbeLog {
    fn note(&self, method: &'static str) {
        self.reached.lock().unwrap().insert(method);
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl SessionLog for ProbeLog {
    async fn append(&self, _: &[SessionEvent]) -> Result<(), StoreError> {
        self.note("append");
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        self.note("checkpoint");
        Ok(())
    }

    async fn sync(&self) -> Result<(), StoreError> {
        self.note("sync");
        Ok(())
    }

    async fn close(&self) {
        self.note("close");
    }
}

/// A layer that changes nothing.
struct Bare(ProbeLog);

impl LogLayer for Bare {
    fn wrapped(&self) -> &dyn SessionLog {
        &self.0
    }
}

/// A layer that keeps appends to itself.
struct Swallow(ProbeLog);

#[async_trait]
impl LogLayer for Swallow {
    fn wrapped(&self) -> &dyn SessionLog {
        &self.0
    }

    async fn append(&self, _: &[SessionEvent]) -> Result<(), StoreError> {
        Ok(())
    }
}

async fn call_every_method(log: &dyn SessionLog) {
    log.append(&[]).await.unwrap();
    log.checkpoint().await.unwrap();
    log.sync().await.unwrap();
    log.close().await;
}

/// A layer that overrides nothing reaches every method of the log it
/// wraps, the defaulted `sync` and `close` included (a default would
/// have run the probe's `checkpoint` for `sync` and nothing for
/// `close`); one that overrides a method keeps only that one.
#[tokio::test]
async fn a_layer_forwards_every_method_it_does_not_override() {
    let bare = Bare(ProbeLog::default());
    call_every_method(&bare).await;
    assert_eq!(
        *bare.0.reached.lock().unwrap(),
        BTreeSet::from(["append", "checkpoint", "sync", "close"])
    );
    let swallow = Swallow(ProbeLog::default());
    call_every_method(&swallow).await;
    assert_eq!(
        *swallow.0.reached.lock().unwrap(),
        BTreeSet::from(["checkpoint", "sync", "close"])
    );
}
