//! The one durability seam of the JSONL store: a [`Committer`] per store,
//! chosen from its [`Durability`] when the store opens, answers every
//! question the create, append, checkpoint, sync, open and remove paths
//! ask about forcing to stable storage, and owns the thread (if any) that
//! does the forcing. The modes differ here by policy; the paths that write
//! ask, and never match on a mode themselves. This module must never let
//! a path force less than its mode promises (`durability_tests` checks
//! each promise).

use std::path::Path;
use std::time::Duration;

use dsh_core::{Durability, StoreError};

use super::batched::WriteBehind;
use super::dirsync::DirSyncer;
use super::group::GroupCommit;

/// How a store forces what it writes.
#[derive(Debug)]
pub(super) enum Committer {
    /// [`Durability::None`]: nothing is forced unless a log's
    /// [`SessionLog::sync`](dsh_core::SessionLog::sync) asks.
    Never,
    /// [`Durability::TurnBoundary`] and [`Durability::EveryEvent`]: forced
    /// by the caller's own fsync (on the blocking pool); a create forces
    /// its file while `dir_sync` forces the directory.
    Inline {
        /// Every append forces itself ([`Durability::EveryEvent`]).
        each_append: bool,
        /// The directory syncer of creates.
        dir_sync: DirSyncer,
    },
    /// [`Durability::Grouped`]: checkpoints and header-only creates are
    /// forced in the rounds of one committer thread.
    Grouped(GroupCommit),
    /// [`Durability::Batched`]: nothing waits; a write-behind committer
    /// forces every write within its window, or when asked.
    Batched(WriteBehind),
}

impl Committer {
    /// The committer of the logs in `dir` under `durability`; `window`
    /// bounds a grouped round's lingering, or a batched write's wait.
    ///
    /// # Errors
    /// The committer's or directory syncer's thread cannot be started.
    pub(super) fn start(
        dir: &Path,
        durability: Durability,
        window: Duration,
    ) -> Result<Self, StoreError> {
        let dir = dir.to_path_buf();
        Ok(match durability {
            Durability::None => Self::Never,
            Durability::TurnBoundary | Durability::EveryEvent => Self::Inline {
                each_append: durability == Durability::EveryEvent,
                dir_sync: DirSyncer::start(dir)?,
            },
            Durability::Grouped => Self::Grouped(GroupCommit::new(dir, window)),
            Durability::Batched => Self::Batched(WriteBehind::start(dir, window)?),
        })
    }

    /// The mode this committer carries out.
    pub(super) fn durability(&self) -> Durability {
        match self {
            Self::Never => Durability::None,
            Self::Inline {
                each_append: true, ..
            } => Durability::EveryEvent,
            Self::Inline { .. } => Durability::TurnBoundary,
            Self::Grouped(_) => Durability::Grouped,
            Self::Batched(_) => Durability::Batched,
        }
    }

    /// The window of a grouped or batched committer.
    pub(super) fn window(&self) -> Option<Duration> {
        match self {
            Self::Grouped(group) => Some(group.window()),
            Self::Batched(batched) => Some(batched.window()),
            Self::Never | Self::Inline { .. } => None,
        }
    }

    /// The round-running committer of [`Durability::Grouped`].
    pub(super) fn group(&self) -> Option<&GroupCommit> {
        match self {
            Self::Grouped(group) => Some(group),
            _ => None,
        }
    }

    /// The write-behind committer of [`Durability::Batched`].
    pub(super) fn batched(&self) -> Option<&WriteBehind> {
        match self {
            Self::Batched(batched) => Some(batched),
            _ => None,
        }
    }

    /// The directory syncer of creates that force their log inline.
    pub(super) fn dir_sync(&self) -> Option<&DirSyncer> {
        match self {
            Self::Inline { dir_sync, .. } => Some(dir_sync),
            _ => None,
        }
    }

    /// Whether a create forces its file and directory entry before it
    /// returns, on the creating thread (then it runs on the blocking
    /// pool): inline modes always; a grouped seeded create (its temporary
    /// file before its link), while a grouped header-only one leaves it to
    /// the committer ([`Committer::create_waits_for_round`]).
    pub(super) fn create_forces(&self, in_place: bool) -> bool {
        match self {
            Self::Inline { .. } => true,
            Self::Grouped(_) => !in_place,
            Self::Never | Self::Batched(_) => false,
        }
    }

    /// Whether a create is handed to its caller only after a committer
    /// round forced it (a grouped header-only create).
    pub(super) fn create_waits_for_round(&self, in_place: bool) -> bool {
        in_place && matches!(self, Self::Grouped(_))
    }

    /// Whether every append forces itself before it returns.
    pub(super) fn forces_each_append(&self) -> bool {
        matches!(
            self,
            Self::Inline {
                each_append: true,
                ..
            }
        )
    }

    /// Whether a checkpoint forces the log (where appends do not force
    /// themselves and no committer forces them on its own).
    pub(super) fn checkpoint_forces(&self) -> bool {
        matches!(
            self,
            Self::Inline {
                each_append: false,
                ..
            } | Self::Grouped(_)
        )
    }

    /// Whether a removal (and a repair on open) is forced.
    pub(super) fn syncs(&self) -> bool {
        !matches!(self, Self::Never)
    }

    /// Whether the withdrawal of an abandoned create is forced: not where
    /// nothing was, nor under a write-behind committer that never heard of
    /// the log (a power loss may bring back its torn header, which the next
    /// create replaces, as after a crash).
    pub(super) fn syncs_withdrawal(&self) -> bool {
        matches!(self, Self::Inline { .. } | Self::Grouped(_))
    }

    /// How many logs have writes a committer has yet to force (only a
    /// write-behind one leaves any).
    pub(super) fn unsynced(&self) -> usize {
        self.batched().map_or(0, WriteBehind::unsynced)
    }

    /// Wait until everything written before the call is forced: only a
    /// write-behind committer leaves anything to wait for.
    ///
    /// # Cancel safety
    /// Cancel safe: the round it asked for still runs.
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        match self.batched() {
            Some(batched) => batched.flush().await,
            None => Ok(()),
        }
    }
}
