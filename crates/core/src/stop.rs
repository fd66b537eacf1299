//! The stop-reason vocabulary: why a turn or a run ended. It is an open set,
//! a string newtype with the known reasons as constants, so a backend can add
//! its own without a change here; consumers branch on the known ones and
//! treat anything else as failure.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// Why a turn or a run ended. Compare with the constants; an unknown value is
/// a failure for every consumer that does not know it.
#[derive(Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct StopReason(Cow<'static, str>);

impl StopReason {
    /// The work finished normally.
    pub const COMPLETED: Self = Self(Cow::Borrowed("completed"));
    /// Cancelled by a signal, an interrupt or disposal.
    pub const ABORTED: Self = Self(Cow::Borrowed("aborted"));
    /// A model, transport or tool-infrastructure failure.
    pub const ERROR: Self = Self(Cow::Borrowed("error"));
    /// The model hit its output-token ceiling before finishing.
    pub const MAX_TOKENS: Self = Self(Cow::Borrowed("max-tokens"));
    /// The model declined the task.
    pub const REFUSAL: Self = Self(Cow::Borrowed("refusal"));
    /// The turn reached its step cap
    /// ([`AgentOptions::max_turn_steps`](crate::options::AgentOptions::max_turn_steps))
    /// while the model was still calling tools (B55).
    pub const STEP_LIMIT: Self = Self(Cow::Borrowed("step-limit"));
    /// A child's subtree used the token budget its start request (or an
    /// ancestor's) allowed, and the runtime stopped it.
    pub const BUDGET_EXHAUSTED: Self = Self(Cow::Borrowed("budget-exhausted"));
    /// A child ran past the wall-clock limit its start request allowed,
    /// and the runtime stopped it.
    pub const TIMED_OUT: Self = Self(Cow::Borrowed("timed-out"));

    /// A reason by name; known names compare equal to their constants.
    pub fn new(reason: impl Into<Cow<'static, str>>) -> Self {
        Self(reason.into())
    }

    /// The reason as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is [`StopReason::COMPLETED`], the only success.
    pub fn is_completed(&self) -> bool {
        *self == Self::COMPLETED
    }

    /// Whether this is one of the eight reasons this crate defines.
    pub fn is_known(&self) -> bool {
        KNOWN.contains(self)
    }
}

/// The reasons this crate defines.
const KNOWN: [StopReason; 8] = [
    StopReason::COMPLETED,
    StopReason::ABORTED,
    StopReason::ERROR,
    StopReason::MAX_TOKENS,
    StopReason::REFUSAL,
    StopReason::STEP_LIMIT,
    StopReason::BUDGET_EXHAUSTED,
    StopReason::TIMED_OUT,
];

// A known reason reads back as its constant, borrowing the static text: a
// log holds one on every turn end, and none of them needs an allocation.
impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = StopReason;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a stop reason string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<StopReason, E> {
                Ok(KNOWN
                    .iter()
                    .find(|known| known.as_str() == text)
                    .cloned()
                    .unwrap_or_else(|| StopReason(Cow::Owned(text.to_owned()))))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StopReason({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_reasons_round_trip_and_unknown_ones_are_failures() {
        let parsed: StopReason = serde_json::from_str("\"max-tokens\"").unwrap();
        assert_eq!(parsed, StopReason::MAX_TOKENS);
        assert!(parsed.is_known());
        // A known reason read from a log borrows the constant's text.
        assert!(matches!(parsed.0, Cow::Borrowed(_)), "{parsed:?}");
        let limit: StopReason = serde_json::from_str("\"step-limit\"").unwrap();
        assert_eq!(limit, StopReason::STEP_LIMIT);
        assert!(limit.is_known() && !limit.is_completed());
        let budget: StopReason = serde_json::from_str("\"budget-exhausted\"").unwrap();
        assert_eq!(budget, StopReason::BUDGET_EXHAUSTED);
        assert!(budget.is_known() && StopReason::TIMED_OUT.is_known());
        let custom: StopReason = serde_json::from_str("\"rate-limited\"").unwrap();
        assert!(!custom.is_known());
        assert!(!custom.is_completed());
        assert_eq!(custom, StopReason::new("rate-limited"));
        assert_eq!(
            serde_json::to_string(&StopReason::ABORTED).unwrap(),
            "\"aborted\""
        );
    }
}
