//! Landlock for `shell`: a rule set that handles every filesystem *write*
//! right and grants them only beneath the workspace root, `/tmp` and
//! `/dev/null`. Reads and execution are not handled, so they stay as the
//! process's own permissions allow; the network is not confined.
//!
//! The rule set is built in the parent (opening the paths, allocating),
//! and only `landlock_restrict_self` (with `PR_SET_NO_NEW_PRIVS`) runs in
//! the child between fork and exec, through `pre_exec`: two system calls,
//! no allocation, no lock. Whether the kernel enforces it is probed once, on
//! a throwaway thread (Landlock restricts only the calling thread), and
//! reported in every `shell` result.

use std::path::Path;
use std::sync::OnceLock;

use landlock::{
    ABI, AccessFs, RestrictionStatus, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetStatus, path_beneath_rules,
};

/// The Landlock ABI the rule set asks for (best effort below it).
const WANTED_ABI: ABI = ABI::V5;

/// Whether `shell`'s Landlock rule set is enforced on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LandlockStatus {
    /// Every write right the rule set handles is enforced.
    Enforced,
    /// Enforced with the rights of an older Landlock ABI (some newer write
    /// rights, such as truncation or device ioctls, are not confined).
    Partial,
    /// Not applied: the kernel lacks Landlock or it is disabled.
    Unavailable(String),
}

impl LandlockStatus {
    /// Whether writes are confined at all.
    pub fn applies(&self) -> bool {
        !matches!(self, Self::Unavailable(_))
    }
}

/// Build the write-confining rule set for `root`.
pub(crate) fn ruleset(root: &Path) -> Result<RulesetCreated, String> {
    let write = AccessFs::from_write(WANTED_ABI);
    Ruleset::default()
        .handle_access(write)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules([root, Path::new("/tmp")], write)))
        .and_then(|r| r.add_rules(path_beneath_rules([Path::new("/dev/null")], write)))
        .map_err(|err| err.to_string())
}

fn probe() -> LandlockStatus {
    let attempt = std::thread::spawn(|| -> Result<RestrictionStatus, String> {
        ruleset(Path::new("/tmp"))?
            .restrict_self()
            .map_err(|e| e.to_string())
    })
    .join();
    match attempt {
        Ok(Ok(status)) => match status.ruleset {
            RulesetStatus::FullyEnforced => LandlockStatus::Enforced,
            RulesetStatus::PartiallyEnforced => LandlockStatus::Partial,
            RulesetStatus::NotEnforced => LandlockStatus::Unavailable(format!(
                "the kernel does not enforce Landlock ({:?})",
                status.landlock
            )),
        },
        Ok(Err(err)) => LandlockStatus::Unavailable(err),
        Err(_) => LandlockStatus::Unavailable("the Landlock probe panicked".to_owned()),
    }
}

/// Whether this kernel enforces `shell`'s rule set (probed once).
pub fn landlock_status() -> &'static LandlockStatus {
    static STATUS: OnceLock<LandlockStatus> = OnceLock::new();
    STATUS.get_or_init(probe)
}

/// `EPERM`, for a failure that carries no `errno`.
const fn libc_eperm() -> i32 {
    1
}

/// The `errno` inside a rule-set error, found by walking its sources
/// (trait-object calls and downcasts only: no allocation).
fn errno_of(err: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.raw_os_error();
        }
        current = e.source();
    }
    None
}

/// Apply `ruleset` to the child of `command` between fork and exec.
#[allow(unsafe_code)]
pub(crate) fn restrict_child(command: &mut tokio::process::Command, ruleset: RulesetCreated) {
    let mut ruleset = Some(ruleset);
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe work is allowed (the parent may have had other
    // threads holding locks at the fork). Everything that allocates or
    // locks (opening the paths, building the rules) was done in the parent;
    // here `restrict_self` makes two raw system calls (`prctl
    // PR_SET_NO_NEW_PRIVS` and `landlock_restrict_self`), closes the rule
    // set's descriptor and fills a plain status struct; its error path
    // wraps `errno` in an `io::Error` without allocating, and `errno_of`
    // reads it back through the error's sources without allocating either. `Option::take`
    // moves a value out of the closure's own state. The closure runs at
    // most once per spawn; a second spawn finds `None` and applies nothing,
    // but `shell` builds a new command (and rule set) for every call.
    unsafe {
        command.pre_exec(move || match ruleset.take() {
            Some(ruleset) => ruleset.restrict_self().map(|_| ()).map_err(|err| {
                std::io::Error::from_raw_os_error(errno_of(&err).unwrap_or(libc_eperm()))
            }),
            None => Ok(()),
        });
    }
}
