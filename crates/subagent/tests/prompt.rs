//! The seed's `prompt` with its whole request, against the real harness and
//! JSONL store and a host attachment store: image parts and uploaded
//! objects are admitted through the store (all or none) before delivery,
//! the client's time zone is validated and spelled canonically, and the
//! durable message references both; the receipt names the accepted
//! message. Each refusal (bad zone, no access, too large, unsupported type,
//! unknown upload, a failing or absent store) leaves nothing in the child's
//! log, and the authority check comes before any admission. A prompt
//! dropped while the store holds its batch delivers nothing and leaves its
//! request id free.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{
    AdmittedAttachment, AttachmentError, AttachmentId, AttachmentInput, AttachmentRef,
    AttachmentStore, CancellationToken, ContentBlock, EventPayload, Message, MessageId,
    MessageSource, PromptProvenance, SessionId, SessionStore, UserMessage,
};
use dsh_harness::ScriptedModel;
use dsh_subagent::{PromptDelivery, SessionAuthoriser, TrustedHost, UserPrompt};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{LocalProvider, WorldBuilder, models, sid};
use tokio::sync::Semaphore;

type World = dsh_test_support::world::World<dyn SessionStore>;

/// A PNG signature, base64: eight bytes.
const PNG: &str = "iVBORw0KGgo=";

/// The host's store for these tests: PNG and JPEG only, at most `limit`
/// bytes each, one upload (`up-1`) made before prompting; it keeps what it
/// admits in memory and counts its calls.
struct HostStore {
    limit: u64,
    failing: AtomicBool,
    /// When set, `admit` announces itself on `entered` and waits for a
    /// permit of `release`.
    holding: AtomicBool,
    entered: Semaphore,
    release: Semaphore,
    calls: AtomicUsize,
    kept: Mutex<HashMap<AttachmentId, AttachmentRef>>,
}

impl HostStore {
    fn new(limit: u64) -> Arc<Self> {
        let store = Self {
            limit,
            failing: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            entered: Semaphore::new(0),
            release: Semaphore::new(0),
            calls: AtomicUsize::new(0),
            kept: Mutex::new(HashMap::new()),
        };
        store.kept.lock().unwrap().insert(
            AttachmentId::new("up-1"),
            AttachmentRef {
                id: AttachmentId::new("up-1"),
                media_type: "image/jpeg".into(),
                bytes: 8,
                name: Some("photo.jpg".into()),
            },
        );
        Arc::new(store)
    }
}

#[async_trait]
impl AttachmentStore for HostStore {
    async fn admit(
        &self,
        _session: &SessionId,
        inputs: Vec<AttachmentInput>,
    ) -> Result<Vec<AdmittedAttachment>, AttachmentError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.holding.load(Ordering::SeqCst) {
            self.entered.add_permits(1);
            self.release.acquire().await.unwrap().forget();
        }
        if self.failing.load(Ordering::SeqCst) {
            return Err(AttachmentError::Store("the disk is full".into()));
        }
        let mut kept = self.kept.lock().unwrap();
        let mut admitted = Vec::new();
        // Every input is checked before any is kept: all or none.
        for input in inputs {
            let reference = match input {
                AttachmentInput::Inline { media_type, data } => {
                    if !matches!(media_type.as_str(), "image/png" | "image/jpeg") {
                        return Err(AttachmentError::UnsupportedType(media_type));
                    }
                    let bytes = u64::try_from(data.len() / 4 * 3).unwrap();
                    if bytes > self.limit {
                        return Err(AttachmentError::TooLarge {
                            bytes,
                            limit: self.limit,
                        });
                    }
                    AttachmentRef {
                        id: AttachmentId::new(format!("sha-{}", data.len())),
                        media_type,
                        bytes,
                        name: None,
                    }
                }
                AttachmentInput::Stored(id) => {
                    kept.get(&id).cloned().ok_or(AttachmentError::Unknown(id))?
                }
            };
            admitted.push(AdmittedAttachment {
                block: ContentBlock::Image {
                    media_type: reference.media_type.clone(),
                    data: PNG.into(),
                },
                reference,
            });
        }
        for one in &admitted {
            kept.insert(one.reference.id.clone(), one.reference.clone());
        }
        Ok(admitted)
    }
}

/// Refuses every session.
struct Nobody;

impl SessionAuthoriser for Nobody {
    fn authorise(&self, session: &SessionId) -> Result<(), String> {
        Err(format!("no access to `{session}`"))
    }
}

/// A world whose model accepts images and echoes, with a cold continuable
/// child `child`.
async fn world() -> (World, Arc<ScriptedModel>) {
    let model = Arc::new(
        ScriptedModel::new()
            .responder(models::echo_of)
            .accepting_images(true),
    );
    let world = WorldBuilder::project()
        .model(model.clone())
        .provider(Arc::new(LocalProvider::new("local")))
        .build()
        .await;
    world.cold_child("child").await;
    (world, model)
}

fn request(id: &str, content: Vec<ContentBlock>) -> UserPrompt {
    UserPrompt {
        child: sid("child"),
        request_id: MessageId::new(id),
        content,
        attachments: Vec::new(),
        client_time_zone: None,
        delivery: PromptDelivery::Queue,
    }
}

fn image(media_type: &str, data: &str) -> ContentBlock {
    ContentBlock::Image {
        media_type: media_type.into(),
        data: data.into(),
    }
}

/// Every message the child's log shows accepted.
async fn accepted(world: &World) -> Vec<UserMessage> {
    world
        .store
        .load(&sid("child"))
        .await
        .unwrap()
        .events
        .into_iter()
        .filter_map(|event| match event.payload {
            EventPayload::InboxAccepted(accepted) => Some(accepted.message),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn attachments_and_time_zone_are_admitted_recorded_and_receipted() {
    let (world, model) = world().await;
    let store = HostStore::new(1024);
    world.runtime.set_attachment_store(store.clone());
    let mut prompt = request(
        "req-photo",
        vec![ContentBlock::text("what is this?"), image("image/png", PNG)],
    );
    prompt.attachments = vec![AttachmentId::new("up-1")];
    prompt.client_time_zone = Some("europe/paris".into());
    let cancel = CancellationToken::new();
    let receipt = bounded(world.runtime.prompt(prompt.clone(), &TrustedHost, &cancel))
        .await
        .unwrap();
    assert_eq!(receipt.message_id, MessageId::new("req-photo"));
    world.quiesce().await;

    // The durable message, read back from the log: the content the model
    // is shown and the references of what the store kept.
    let sent = accepted(&world).await;
    let message = sent.iter().find(|m| m.id == receipt.message_id).unwrap();
    assert_eq!(
        message.source,
        MessageSource::UserPrompt(PromptProvenance {
            client_time_zone: Some("Europe/Paris".into()),
            attachments: vec![
                AttachmentRef {
                    id: AttachmentId::new("sha-12"),
                    media_type: "image/png".into(),
                    bytes: 9,
                    name: None,
                },
                store.kept.lock().unwrap()[&AttachmentId::new("up-1")].clone(),
            ],
        })
    );
    assert_eq!(
        message.content,
        [
            ContentBlock::text("what is this?"),
            image("image/png", PNG),
            image("image/jpeg", PNG),
        ]
    );
    // The child's model saw both images in the turn the prompt opened.
    until(|| {
        model.requests().iter().any(|request| {
            request.messages.iter().any(|m| {
                matches!(m, Message::User { content, .. }
                    if content.iter().filter(|block| block.is_image()).count() == 2)
            })
        })
    })
    .await;

    // A repeat of the request is neither admitted nor delivered again.
    let calls = store.calls.load(Ordering::SeqCst);
    let again = bounded(world.runtime.prompt(prompt, &TrustedHost, &cancel))
        .await
        .unwrap();
    assert_eq!(again, receipt);
    world.quiesce().await;
    assert_eq!(store.calls.load(Ordering::SeqCst), calls);
    assert_eq!(accepted(&world).await.len(), sent.len());
}

#[tokio::test]
async fn every_refusal_has_its_code_and_leaves_nothing() {
    let (world, _model) = world().await;
    let before = accepted(&world).await;
    let cancel = CancellationToken::new();
    let refused = |prompt: UserPrompt, authoriser: &'static dyn SessionAuthoriser| {
        let runtime = world.runtime.clone();
        let cancel = cancel.clone();
        async move {
            bounded(runtime.prompt(prompt, authoriser, &cancel))
                .await
                .unwrap_err()
                .code()
        }
    };
    let with_image = || request("req-image", vec![image("image/png", PNG)]);

    // No attachment store yet: an image cannot be admitted.
    assert_eq!(
        refused(with_image(), &TrustedHost).await,
        "ATTACHMENT_STORE_FAILED"
    );
    let store = HostStore::new(8);
    world.runtime.set_attachment_store(store.clone());

    let mut zoned = request("req-zone", vec![ContentBlock::text("hi")]);
    for zone in ["EST", "Europe/Atlantis", "+01:00"] {
        zoned.client_time_zone = Some(zone.into());
        assert_eq!(
            refused(zoned.clone(), &TrustedHost).await,
            "INVALID_TIME_ZONE"
        );
    }
    // Authority is checked on the child before anything is admitted.
    assert_eq!(refused(with_image(), &Nobody).await, "UNAUTHORIZED");
    assert_eq!(store.calls.load(Ordering::SeqCst), 0);

    let tiff = request("req-tiff", vec![image("image/tiff", PNG)]);
    assert_eq!(
        refused(tiff, &TrustedHost).await,
        "ATTACHMENT_UNSUPPORTED_TYPE"
    );
    let large = request("req-large", vec![image("image/png", &"A".repeat(64))]);
    assert_eq!(refused(large, &TrustedHost).await, "ATTACHMENT_TOO_LARGE");
    let mut unknown = request("req-unknown", vec![ContentBlock::text("see")]);
    unknown.attachments = vec![AttachmentId::new("up-404")];
    assert_eq!(refused(unknown, &TrustedHost).await, "ATTACHMENT_NOT_FOUND");
    store.failing.store(true, Ordering::SeqCst);
    assert_eq!(
        refused(with_image(), &TrustedHost).await,
        "ATTACHMENT_STORE_FAILED"
    );

    world.quiesce().await;
    assert_eq!(
        accepted(&world).await,
        before,
        "a refused prompt was delivered"
    );
    // All or none: a refused batch kept nothing new.
    assert_eq!(store.kept.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_prompt_dropped_during_admission_delivers_nothing_and_can_be_repeated() {
    let (world, _model) = world().await;
    let store = HostStore::new(1024);
    store.holding.store(true, Ordering::SeqCst);
    world.runtime.set_attachment_store(store.clone());
    let before = accepted(&world).await;
    let prompt = request("req-dropped", vec![image("image/png", PNG)]);
    let cancel = CancellationToken::new();
    {
        let call = world.runtime.prompt(prompt.clone(), &TrustedHost, &cancel);
        tokio::pin!(call);
        bounded(async {
            tokio::select! {
                outcome = &mut call => panic!("the prompt ended during admission: {outcome:?}"),
                entered = store.entered.acquire() => entered.unwrap().forget(),
            }
        })
        .await;
        // Dropped while the store holds the batch.
    }
    world.quiesce().await;
    assert_eq!(
        accepted(&world).await,
        before,
        "a dropped prompt was delivered"
    );
    // Nothing is left claimed: the same request goes through once released.
    store.release.add_permits(1);
    let receipt = bounded(world.runtime.prompt(prompt, &TrustedHost, &cancel))
        .await
        .unwrap();
    assert_eq!(receipt.message_id, MessageId::new("req-dropped"));
    world.quiesce().await;
    let after = accepted(&world).await;
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(after.last().unwrap().id, receipt.message_id);
}
