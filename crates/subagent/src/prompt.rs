//! The seed's `prompt`: one user-authored message to a continuable child,
//! through its live tree root, with the whole request the seed names: the
//! caller-minted message id (an idempotency key), queue or steer, image
//! parts and uploaded objects admitted through the host's
//! [`AttachmentStore`] before delivery (the durable message references
//! them), and the client's time zone validated against the IANA database
//! and recorded on the message. Success is a [`PromptReceipt`] naming the
//! message the child's inbox accepted; later execution is independent of
//! the call. Authority is checked on the child's session before any
//! attachment is admitted or any child resumed.

use dsh_core::{
    AttachmentError, AttachmentId, AttachmentInput, AttachmentRef, CancellationToken, ContentBlock,
    MessageId, MessageSource, PromptProvenance, SessionId, UserMessage,
};

use crate::error::{AdmissionError, SubagentError};
use crate::messaging::{RequestInFlight, SessionAuthoriser, UserPrompt};
use crate::runtime::SubagentRuntime;

/// What [`SubagentRuntime::prompt`] returns once the child's inbox accepted
/// the message (the seed's `SubagentPromptReceipt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptReceipt {
    /// The accepted message's inbox identity: the request's id.
    pub message_id: MessageId,
}

/// Whether `zone` has the shape of a browser zone: `UTC`, or an IANA
/// `Area/Location` name (letters, digits, `_+.-`, at least one `/`).
fn zone_shaped(zone: &str) -> bool {
    if zone == "UTC" {
        return true;
    }
    let segment = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '.' | '-'))
    };
    let mut parts = zone.split('/');
    let area = parts.next().unwrap_or_default();
    let mut rest = parts.peekable();
    area.starts_with(|c: char| c.is_ascii_alphabetic())
        && segment(area)
        && rest.peek().is_some()
        && rest.all(segment)
}

/// The canonical spelling of a client time zone: `UTC` or an IANA
/// `Area/Location` name the bundled time zone database knows (matched
/// without regard to case, returned as the database spells it).
///
/// # Errors
/// `INVALID_TIME_ZONE` for anything else (an abbreviation such as `EST`, an
/// offset, padding, an unknown name).
pub fn canonical_time_zone(zone: &str) -> Result<String, SubagentError> {
    let refused = || SubagentError::from(AdmissionError::InvalidTimeZone(zone.to_owned()));
    if !zone_shaped(zone) {
        return Err(refused());
    }
    let known = jiff::tz::db().get(zone).map_err(|_| refused())?;
    let canonical = known.iana_name().unwrap_or(zone).to_owned();
    if zone_shaped(&canonical) {
        Ok(canonical)
    } else {
        Err(refused())
    }
}

impl SubagentRuntime {
    /// Deliver a user-authored message to a continuable child through its
    /// live tree root (B36): the time zone validated first, then authorised
    /// on the child's session before any other work, then its attachments
    /// admitted through the attachment store, then delivered with the
    /// caller's request id, resuming the child when it is cold. The message
    /// records the canonical time zone and the attachments' references
    /// (`MessageSource::UserPrompt`; a plain `user` source when it has
    /// neither). A repeat of an accepted request id is not delivered or
    /// admitted again; one in flight is refused. Images reach only a child
    /// whose model accepts them.
    ///
    /// # Errors
    /// `INVALID_TIME_ZONE`, `UNAUTHORIZED` (the authoriser), `NOT_A_CHILD`
    /// (a root), `NOT_MESSAGEABLE`, `LINEAGE_CYCLE`, `NOT_LIVE` (the root),
    /// `INVALID_REQUEST` (images to a model without image input, a request
    /// id in flight), the attachment store's refusals
    /// (`ATTACHMENT_TOO_LARGE`, `ATTACHMENT_UNSUPPORTED_TYPE`,
    /// `ATTACHMENT_NOT_FOUND`, `ATTACHMENT_STORE_FAILED`), `NOT_RESUMABLE`,
    /// `DELIVERY_UNAVAILABLE`, `CANCELLED`.
    ///
    /// # Cancel safety
    /// The checks before admission are reads with no effect. A drop during
    /// admission may leave objects kept in the attachment store but
    /// referenced by no message. After that, as
    /// [`SubagentRuntime::send_message`]: a drop while a live child accepts
    /// the message may leave it accepted, and a resume dropped mid-way is
    /// finished or undone by the runtime, never left live and unmonitored.
    pub async fn prompt(
        &self,
        request: UserPrompt,
        authoriser: &dyn SessionAuthoriser,
        cancel: &CancellationToken,
    ) -> Result<PromptReceipt, SubagentError> {
        let UserPrompt {
            child,
            request_id,
            content,
            attachments,
            client_time_zone,
            delivery,
        } = request;
        let client_time_zone = client_time_zone
            .as_deref()
            .map(canonical_time_zone)
            .transpose()?;
        let root = self.check_user_delivery(&child, authoriser).await?;
        let _in_flight = RequestInFlight::claim(self, &child, &request_id)?;
        if self.was_accepted(&child, &request_id).await? {
            return Ok(PromptReceipt {
                message_id: request_id,
            });
        }
        let (content, references) = self
            .admit_attachments(&child, content, attachments, cancel)
            .await?;
        let source = if client_time_zone.is_none() && references.is_empty() {
            MessageSource::User
        } else {
            MessageSource::UserPrompt(PromptProvenance {
                client_time_zone,
                attachments: references,
            })
        };
        let message = UserMessage {
            id: request_id,
            content,
            source,
        };
        let message_id = self
            .deliver_with_resume(&child, &root, message, Some(delivery.into()), None, cancel)
            .await?;
        Ok(PromptReceipt { message_id })
    }

    /// Admit the image parts of `content` and the uploaded `stored` objects
    /// through the attachment store, all or none; returns the content the
    /// child is shown (each image part replaced by the store's block, the
    /// uploads after it) and the references, in the same order.
    async fn admit_attachments(
        &self,
        child: &SessionId,
        content: Vec<ContentBlock>,
        stored: Vec<AttachmentId>,
        cancel: &CancellationToken,
    ) -> Result<(Vec<ContentBlock>, Vec<AttachmentRef>), SubagentError> {
        if stored.is_empty() && !content.iter().any(ContentBlock::is_image) {
            return Ok((content, Vec::new()));
        }
        // A live child is checked now, so nothing is kept for a model that
        // cannot see it; a cold one refuses the message when it takes it.
        if let Some(agent) = self.registry().get(child)
            && !agent.accepts_images()
        {
            return Err(AdmissionError::InvalidRequest(format!(
                "the model of `{child}` does not accept images"
            ))
            .into());
        }
        let store = self.attachment_store().ok_or_else(|| {
            AttachmentError::Store("no attachment store is configured".to_owned())
        })?;
        // `None` marks where an admitted image part goes back.
        let mut slots = Vec::with_capacity(content.len());
        let mut inputs = Vec::new();
        for block in content {
            match block {
                ContentBlock::Image { media_type, data } => {
                    inputs.push(AttachmentInput::Inline { media_type, data });
                    slots.push(None);
                }
                other => slots.push(Some(other)),
            }
        }
        inputs.extend(stored.into_iter().map(AttachmentInput::Stored));
        let wanted = inputs.len();
        if cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        let admitted = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(SubagentError::Cancelled),
            admitted = store.admit(child, inputs) => admitted?,
        };
        if admitted.len() != wanted {
            return Err(AttachmentError::Store(format!(
                "the store admitted {} of {wanted} attachments",
                admitted.len()
            ))
            .into());
        }
        let mut admitted = admitted.into_iter();
        let mut shown = Vec::with_capacity(slots.len() + wanted);
        let mut references = Vec::with_capacity(wanted);
        for slot in slots {
            let block = match slot {
                Some(block) => block,
                None => {
                    // Counted above: one admitted attachment per input.
                    let Some(one) = admitted.next() else { break };
                    references.push(one.reference);
                    one.block
                }
            };
            shown.push(block);
        }
        for one in admitted {
            references.push(one.reference);
            shown.push(one.block);
        }
        Ok((shown, references))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn time_zones_are_utc_or_known_area_location_names_spelled_canonically() {
        for (given, canonical) in [
            ("UTC", "UTC"),
            ("Europe/Paris", "Europe/Paris"),
            ("america/new_york", "America/New_York"),
            (
                "America/Argentina/Buenos_Aires",
                "America/Argentina/Buenos_Aires",
            ),
            ("Etc/GMT+5", "Etc/GMT+5"),
        ] {
            assert_eq!(canonical_time_zone(given).unwrap(), canonical, "{given}");
        }
        for refused in [
            "",
            "utc",
            "EST",
            "+02:00",
            " Europe/Paris",
            "Europe/Paris ",
            "Europe/",
            "/Paris",
            "Europe//Paris",
            "Mars/Olympus_Mons",
            "../etc/passwd",
        ] {
            let err = canonical_time_zone(refused).unwrap_err();
            assert_eq!(err.code(), "INVALID_TIME_ZONE", "{refused:?}");
        }
    }
}
