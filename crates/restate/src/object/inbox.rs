//! `dsh.Inbox/{session id}`: the input waiting for an agent's turns. Its
//! handlers are all short, so input and steering are never blocked behind
//! a running turn (which is the `dsh.Session` object's, another key space).
//! The whole [`InboxState`] is one state entry, written once per handler;
//! beside it, [`WATCHER_KEY`] holds the awakeable of a turn's `wait`, which
//! the next admitted item (or an interrupt) resolves.

use std::time::{SystemTime, UNIX_EPOCH};

use dsh_core::{InboxTarget, MessageId};
use restate_sdk::prelude::*;

use super::session::SessionClient;
pub use crate::state::inbox::ClaimedItem;
use crate::state::inbox::{
    AcceptRequest, Acceptance, INBOX_KEY, InboxItem, InboxState, InboxStatus, TurnClaim, TurnLook,
};

/// The state key of the awakeable a waiting turn registered (`watch`).
const WATCHER_KEY: &str = "watcher";

/// The `dsh.Inbox` virtual object.
pub struct Inbox;

/// The inbox's state as read (empty when it was never written). The read
/// itself stays in each handler: a generic helper over the SDK's context
/// traits does not satisfy the macro's `Send` bound (rust#100013).
fn or_empty(found: Option<Json<InboxState>>) -> InboxState {
    found.map(Json::into_inner).unwrap_or_default()
}

/// Read the inbox's state, `change` it and write it back; `change`'s
/// answer.
async fn update<R>(
    ctx: &ObjectContext<'_>,
    change: impl FnOnce(&mut InboxState) -> R,
) -> HandlerResult<R> {
    let mut state = or_empty(ctx.get(INBOX_KEY).await?);
    let answer = change(&mut state);
    ctx.set(INBOX_KEY, Json(state));
    Ok(answer)
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
        let state = or_empty(ctx.get(INBOX_KEY).await?);
        Ok(Json(accepted(&ctx, state, request.into_inner()).await?))
    }

    /// Accept another agent's message, once per request id, as a local
    /// agent takes one: for its next step while a turn is scheduled or
    /// running, else for its next turn (the request's target is not
    /// read); it unparks an interrupted agent. Refused with `DRAINING`
    /// while the tree drains.
    #[handler]
    async fn deliver(
        &self,
        ctx: ObjectContext<'_>,
        request: Json<AcceptRequest>,
    ) -> HandlerResult<Json<Acceptance>> {
        let mut state = or_empty(ctx.get(INBOX_KEY).await?);
        let mut request = request.into_inner();
        // A message resumes an interrupted agent, as locally.
        let unparked = state.parked() && state.unpark();
        request.target = live_target(&state);
        let acceptance = accepted(&ctx, state, request).await?;
        if unparked {
            schedule_turn(&ctx);
        }
        Ok(Json(acceptance))
    }

    /// Wait for input: what waits now (both lists, next-step items first),
    /// or, when nothing waits, nothing, with `awakeable` kept for the next
    /// admitted item to resolve (the turn's `wait` then suspends on it and
    /// holds no worker). A parked agent's awakeable is resolved at once.
    #[handler]
    async fn watch(
        &self,
        ctx: ObjectContext<'_>,
        awakeable: String,
    ) -> HandlerResult<Json<Vec<ClaimedItem>>> {
        let state = or_empty(ctx.get(INBOX_KEY).await?);
        let waiting = waiting(&state);
        if state.parked() {
            // Interrupted already: the wait ends at once.
            ctx.resolve_awakeable(&awakeable, String::new());
        } else if waiting.is_empty() {
            ctx.set(WATCHER_KEY, awakeable);
        }
        Ok(Json(waiting))
    }

    /// Stop waiting on `awakeable` (a `wait` woke or timed out) and return
    /// what waits now, as `watch` does.
    #[handler]
    async fn unwatch(
        &self,
        ctx: ObjectContext<'_>,
        awakeable: String,
    ) -> HandlerResult<Json<Vec<ClaimedItem>>> {
        if ctx.get::<String>(WATCHER_KEY).await?.as_ref() == Some(&awakeable) {
            ctx.clear(WATCHER_KEY);
        }
        let state = or_empty(ctx.get(INBOX_KEY).await?);
        Ok(Json(waiting(&state)))
    }

    /// Accept a child's settlement notice, once per request id; admitted
    /// while draining too (then without waking the agent). Like `deliver`,
    /// it is for the next step while a turn runs, else for the next turn.
    #[handler]
    async fn accept_notice(
        &self,
        ctx: ObjectContext<'_>,
        request: Json<AcceptRequest>,
    ) -> HandlerResult<Json<Acceptance>> {
        let mut state = or_empty(ctx.get(INBOX_KEY).await?);
        let mut request = request.into_inner();
        request.target = live_target(&state);
        let acceptance = state.accept_notice(request);
        admitted(&ctx, state, &acceptance).await?;
        Ok(Json(acceptance))
    }

    /// Interrupt the agent: park it (input waits and wakes nothing until
    /// `unpark`); a running turn sees it at its next check and ends
    /// `aborted`, and its `wait`, if it waits, ends at once.
    #[handler]
    async fn interrupt(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        update(&ctx, InboxState::park).await?;
        // A `wait` in the turn ends now, as a cancelled local one does.
        wake_watcher(&ctx).await
    }

    /// Unpark the agent; waiting waking input starts a turn.
    #[handler]
    async fn unpark(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        let mut state = or_empty(ctx.get(INBOX_KEY).await?);
        if state.unpark() {
            schedule_turn(&ctx);
        }
        ctx.set(INBOX_KEY, Json(state));
        Ok(())
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

    /// What a turn claims at once (every next-step item and, at a turn
    /// boundary, the oldest next-turn item) with whether the agent is
    /// parked, so the turn's cancellation checks around the claim need no
    /// call of their own ([`InboxState::claim_checked`]: at a step
    /// boundary a parked agent claims nothing).
    #[handler]
    async fn claim_turn(
        &self,
        ctx: ObjectContext<'_>,
        turn_boundary: bool,
    ) -> HandlerResult<Json<TurnClaim>> {
        let mut state = or_empty(ctx.get(INBOX_KEY).await?);
        let claim = state.claim_checked(turn_boundary, millis_now());
        if !claim.claimed.is_empty() {
            ctx.set(INBOX_KEY, Json(state));
        }
        Ok(Json(claim))
    }

    /// A turn ended: schedule the next one (a one-way call of
    /// `dsh.Session/{id}/run_turn`) if waking input waits. Returns whether
    /// it did (when not, the agent has settled).
    #[handler]
    async fn turn_ended(&self, ctx: ObjectContext<'_>) -> HandlerResult<bool> {
        let again = update(&ctx, InboxState::turn_ended).await?;
        if again {
            schedule_turn(&ctx);
        }
        Ok(again)
    }

    /// A scheduled turn failed for good before it started: nothing is
    /// scheduled now, so the next waking input schedules a turn again.
    #[handler]
    async fn turn_failed(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        update(&ctx, InboxState::turn_failed).await
    }

    /// Where the inbox stands.
    #[handler]
    async fn status(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<InboxStatus>> {
        Ok(Json(or_empty(ctx.get(INBOX_KEY).await?).status()))
    }

    /// What a running turn's check after a reply or a step's tools needs:
    /// whether the agent is parked and whether waiting next-step input
    /// wakes it (the steering look that follows the check).
    #[handler]
    async fn look(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<TurnLook>> {
        Ok(Json(or_empty(ctx.get(INBOX_KEY).await?).look(millis_now())))
    }

    /// Drop the waiting items with these message ids; their request ids
    /// stay accepted, so a retry does not bring them back.
    #[handler]
    async fn discard(
        &self,
        ctx: ObjectContext<'_>,
        ids: Json<Vec<MessageId>>,
    ) -> HandlerResult<()> {
        update(&ctx, |state| state.discard(&ids.into_inner())).await
    }

    /// Refuse new input from now on (`DRAINING`); a repeated request is
    /// still acknowledged, and what waits can still be claimed.
    #[handler]
    async fn drain(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        update(&ctx, InboxState::drain).await
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

/// The clock, in ms since the epoch. A turn reads it only inside a
/// journaled step; the inbox reads it into the answers of `claim_turn` and
/// `look`, which the calling turn's journal records.
pub(super) fn millis_now() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Start a turn of this inbox's session: a one-way call, journaled with
/// the handler, so it is made exactly once.
fn schedule_turn(ctx: &ObjectContext<'_>) {
    ctx.object_client::<SessionClient>(ctx.key().to_owned())
        .run_turn()
        .send();
}

/// Accept `request` into `state` and store what changed, or refuse it
/// (`DRAINING`).
async fn accepted(
    ctx: &ObjectContext<'_>,
    mut state: InboxState,
    request: AcceptRequest,
) -> HandlerResult<Acceptance> {
    let acceptance = state
        .accept(request)
        .map_err(|refusal| super::refused(refusal.code(), refusal))?;
    admitted(ctx, state, &acceptance).await?;
    Ok(acceptance)
}

/// Store what an accept changed, start the turn it scheduled and wake a
/// waiting `wait`.
async fn admitted(
    ctx: &ObjectContext<'_>,
    state: InboxState,
    acceptance: &Acceptance,
) -> HandlerResult<()> {
    if !acceptance.duplicate {
        ctx.set(INBOX_KEY, Json(state));
        wake_watcher(ctx).await?;
    }
    if acceptance.schedule_turn {
        schedule_turn(ctx);
    }
    Ok(())
}

/// Resolve and forget the awakeable of a waiting `wait`, if any.
async fn wake_watcher(ctx: &ObjectContext<'_>) -> HandlerResult<()> {
    if let Some(watcher) = ctx.get::<String>(WATCHER_KEY).await? {
        ctx.resolve_awakeable(&watcher, String::new());
        ctx.clear(WATCHER_KEY);
    }
    Ok(())
}

/// Where an agent's message or a notice goes: the next step of a turn
/// that is scheduled or running, else the next turn (a local agent's steer
/// and follow-up).
fn live_target(state: &InboxState) -> InboxTarget {
    if state.turn_scheduled() {
        InboxTarget::NextStep
    } else {
        InboxTarget::NextTurn
    }
}

/// Every waiting item, next-step items first, oldest first in each list.
fn waiting(state: &InboxState) -> Vec<ClaimedItem> {
    [InboxTarget::NextStep, InboxTarget::NextTurn]
        .into_iter()
        .flat_map(|target| {
            state.pending(target).map(move |item| ClaimedItem {
                target,
                item: item.clone(),
            })
        })
        .collect()
}
