//! `dsh.Inbox/{session id}`: the input waiting for an agent's turns. Its
//! handlers are all short, so input and steering are never blocked behind
//! a running turn (which is the `dsh.Session` object's, another key space).
//! The whole [`InboxState`] is one state entry, written once per handler.

use dsh_core::{InboxTarget, MessageId};
use restate_sdk::prelude::*;

use crate::state::inbox::{AcceptRequest, Acceptance, INBOX_KEY, InboxItem, InboxState};

/// The `dsh.Inbox` virtual object.
pub struct Inbox;

/// The inbox's state as read (empty when it was never written). The read
/// itself stays in each handler: a generic helper over the SDK's context
/// traits does not satisfy the macro's `Send` bound (rust#100013).
fn or_empty(found: Option<Json<InboxState>>) -> InboxState {
    found.map(Json::into_inner).unwrap_or_default()
}

#[restate_sdk::object(name = "dsh.Inbox", client_visibility = "pub(crate)")]
impl Inbox {
    /// Accept a message, once per request id: a repeated request is
    /// acknowledged with the first message's id and changes nothing.
    /// Refused with `DRAINING` while the tree drains.
    #[handler]
    async fn accept(
        &self,
        ctx: ObjectContext<'_>,
        request: Json<AcceptRequest>,
    ) -> HandlerResult<Json<Acceptance>> {
        let mut state = or_empty(ctx.get(INBOX_KEY).await?);
        let acceptance = state
            .accept(request.into_inner())
            .map_err(|refusal| super::refused(refusal.code(), refusal))?;
        if !acceptance.duplicate {
            ctx.set(INBOX_KEY, Json(state));
        }
        Ok(Json(acceptance))
    }

    /// Take every waiting item of one list, oldest first.
    #[handler]
    async fn claim(
        &self,
        ctx: ObjectContext<'_>,
        target: Json<InboxTarget>,
    ) -> HandlerResult<Json<Vec<InboxItem>>> {
        let mut state = or_empty(ctx.get(INBOX_KEY).await?);
        let claimed = state.claim(target.into_inner());
        if !claimed.is_empty() {
            ctx.set(INBOX_KEY, Json(state));
        }
        Ok(Json(claimed))
    }

    /// Drop the waiting items with these message ids; their request ids
    /// stay accepted, so a retry does not bring them back.
    #[handler]
    async fn discard(
        &self,
        ctx: ObjectContext<'_>,
        ids: Json<Vec<MessageId>>,
    ) -> HandlerResult<()> {
        let mut state = or_empty(ctx.get(INBOX_KEY).await?);
        state.discard(&ids.into_inner());
        ctx.set(INBOX_KEY, Json(state));
        Ok(())
    }

    /// Refuse new input from now on (`DRAINING`); a repeated request is
    /// still acknowledged, and what waits can still be claimed.
    #[handler]
    async fn drain(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        let mut state = or_empty(ctx.get(INBOX_KEY).await?);
        state.drain();
        ctx.set(INBOX_KEY, Json(state));
        Ok(())
    }

    /// The waiting items of one list, oldest first, without claiming them.
    #[handler]
    async fn pending(
        &self,
        ctx: SharedObjectContext<'_>,
        target: Json<InboxTarget>,
    ) -> HandlerResult<Json<Vec<InboxItem>>> {
        let state = or_empty(ctx.get(INBOX_KEY).await?);
        Ok(Json(state.pending(target.into_inner()).cloned().collect()))
    }
}
