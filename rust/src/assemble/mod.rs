//! Assembly: the session's items (one per grain) kept between renders, and the plan that fits
//! them into a token budget (DESIGN.md §4).
//!
//! - [`Assembly`] stores items as columns; `upsert` counts a text once (cached by content) and a
//!   warm `plan` only reads columns and cached sort orders.
//! - [`budget`] allocates the target across windows (water-filling, reserve never filled).
//! - [`score`] aggregates history turn groups and scores them in one pass over columns.
//! - [`ladder`] runs soft trim, hard trim, folding and the compaction request.
//! - [`fuse`] resolves grains sharing a `node_id` and orders the winners.
//!
//! # Performance notes
//! - Slots are stable: a removed item leaves a tombstone that the next insert reuses, so cached
//!   orders (context by `(priority, rank, seq)`, history by `seq` and by `(turn, seq)`) stay valid
//!   until an item of that kind changes; an item appended after the last one extends them in place.
//! - A [`Plan`] shares the node ids ([`Ids`]: chunks, one shared reference each) instead of
//!   copying strings, carries
//!   reasons as small enums formatted on demand, and holds orders as slot indices.
//! - Trimmed texts, clear placeholders and fold stand-ins are built and counted once per item
//!   version and cached beside it.

pub mod budget;
pub mod fuse;
pub mod ids;
pub mod items;
pub mod ladder;
pub mod plan;
pub mod score;
pub mod text;

pub use fuse::{fuse, Fused};
pub use ids::Ids;
pub use items::Assembly;
pub use plan::{Plan, Reason, Stage, Status, Timings, WindowUse, PLACEHOLDER_ID, PLACEHOLDER_SLOT};

use crate::errors::{CoreError, CoreResult};
use crate::tokens::Counter;

/// Item kinds (`ItemSpec::kind`).
pub mod kind {
    /// A context grain outside the transcript (sys, mem, rag, task, ...).
    pub const CONTEXT: u8 = 0;
    /// A user or assistant message of the history.
    pub const MESSAGE: u8 = 1;
    /// A tool result of the history.
    pub const TOOL_RESULT: u8 = 2;
}

/// Message roles (`ItemSpec::role`).
pub mod role {
    /// System message.
    pub const SYSTEM: u8 = 0;
    /// User message.
    pub const USER: u8 = 1;
    /// Assistant message.
    pub const ASSISTANT: u8 = 2;
    /// Tool message.
    pub const TOOL: u8 = 3;
}

/// Item flag bits (`ItemSpec::flags`).
pub mod flags {
    /// The message carries a tool call.
    pub const HAS_TOOL_CALL: u8 = 1;
    /// Explicit user feedback.
    pub const FEEDBACK: u8 = 1 << 1;
    /// A state-changing tool call (edit, write, ...).
    pub const STRUCTURAL: u8 = 1 << 2;
    /// An image result (never soft-trimmed).
    pub const IMAGE: u8 = 1 << 3;
    /// Never trimmed, folded or dropped.
    pub const PROTECTED: u8 = 1 << 4;
}

/// The integer codes that cross the Python boundary, with the names `ctxengine._core` exports
/// them under (`KIND_TOOL_RESULT`, `STATUS_DROPPED`, ...): one table per column, the single
/// source of both the constants and the messages naming a bad value.
pub mod codes {
    use super::plan::{Stage, Status};
    use super::{flags, kind, role};

    /// Values of the `kinds` column.
    pub const KINDS: [(&str, u8); 3] = [
        ("KIND_CONTEXT", kind::CONTEXT),
        ("KIND_MESSAGE", kind::MESSAGE),
        ("KIND_TOOL_RESULT", kind::TOOL_RESULT),
    ];
    /// Values of the `roles` column.
    pub const ROLES: [(&str, u8); 4] = [
        ("ROLE_SYSTEM", role::SYSTEM),
        ("ROLE_USER", role::USER),
        ("ROLE_ASSISTANT", role::ASSISTANT),
        ("ROLE_TOOL", role::TOOL),
    ];
    /// Bits of the `flags` column.
    pub const FLAGS: [(&str, u8); 5] = [
        ("FLAG_HAS_TOOL_CALL", flags::HAS_TOOL_CALL),
        ("FLAG_FEEDBACK", flags::FEEDBACK),
        ("FLAG_STRUCTURAL", flags::STRUCTURAL),
        ("FLAG_IMAGE", flags::IMAGE),
        ("FLAG_PROTECTED", flags::PROTECTED),
    ];
    /// Decisions of a plan ([`Status`]).
    pub const STATUSES: [(&str, u8); 5] = [
        ("STATUS_KEPT", Status::Kept as u8),
        ("STATUS_TRIMMED", Status::Trimmed as u8),
        ("STATUS_CLEARED", Status::Cleared as u8),
        ("STATUS_FOLDED", Status::Folded as u8),
        ("STATUS_DROPPED", Status::Dropped as u8),
    ];
    /// Steps of the ladder that decided ([`Stage`]).
    pub const STAGES: [(&str, u8); 6] = [
        ("STAGE_NONE", Stage::None as u8),
        ("STAGE_GUARD", Stage::Guard as u8),
        ("STAGE_SOFT", Stage::Soft as u8),
        ("STAGE_HARD", Stage::Hard as u8),
        ("STAGE_FOLD", Stage::Fold as u8),
        ("STAGE_COMPACTION", Stage::Compaction as u8),
    ];

    /// Every defined flag bit.
    pub const ALL_FLAGS: u8 = flags::HAS_TOOL_CALL
        | flags::FEEDBACK
        | flags::STRUCTURAL
        | flags::IMAGE
        | flags::PROTECTED;

    /// `NAME (value)` of each code, for error messages: `KIND_CONTEXT (0), KIND_MESSAGE (1)`.
    pub fn listing(table: &[(&str, u8)]) -> String {
        let names: Vec<String> = table.iter().map(|(n, v)| format!("{n} ({v})")).collect();
        names.join(", ")
    }

    /// The name of `value` in `table`.
    pub fn name_of(table: &[(&'static str, u8)], value: u8) -> Option<&'static str> {
        table.iter().find(|(_, v)| *v == value).map(|(n, _)| *n)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn tables_are_dense_and_named_by_their_column() {
            for (table, prefix) in [
                (&KINDS[..], "KIND_"),
                (&ROLES[..], "ROLE_"),
                (&STATUSES[..], "STATUS_"),
                (&STAGES[..], "STAGE_"),
            ] {
                for (i, (name, value)) in table.iter().enumerate() {
                    assert_eq!(usize::from(*value), i, "{name}");
                    assert!(name.starts_with(prefix), "{name}");
                }
            }
            let bits: Vec<u8> = FLAGS.iter().map(|(_, b)| *b).collect();
            assert_eq!(bits, vec![1, 2, 4, 8, 16]);
            assert_eq!(ALL_FLAGS, 31);
            assert_eq!(name_of(&KINDS, 2), Some("KIND_TOOL_RESULT"));
            assert_eq!(name_of(&ROLES, 9), None);
            assert_eq!(listing(&KINDS[..2]), "KIND_CONTEXT (0), KIND_MESSAGE (1)");
        }
    }
}

/// Rendering overhead of the hard-trim placeholder (a user message).
pub const PLACEHOLDER_OVERHEAD: u32 = 4;
/// Most windows a configuration may declare (window sets are bit masks).
pub const MAX_WINDOWS: usize = 64;

/// One item as given to [`Assembly::upsert`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemSpec {
    /// Unique id (dotted path); upserting an existing id replaces that item.
    pub node_id: String,
    /// Text as rendered.
    pub text: String,
    /// Index into the configured windows.
    pub window: u8,
    /// Lower = more important.
    pub priority: i64,
    /// Registration order of the origin plugin.
    pub rank: u32,
    /// Emission / transcript order.
    pub seq: u64,
    /// One of [`kind`].
    pub kind: u8,
    /// One of [`role`].
    pub role: u8,
    /// History turn group (index of the user turn the message belongs to).
    pub turn: u32,
    /// Bits of [`flags`].
    pub flags: u8,
    /// Fixed tokens the renderer adds for this item.
    pub overhead: u32,
    /// Short label used in stand-ins, e.g. `tool result: search`.
    pub label: String,
    /// Plugin-provided short summary used by soft trim.
    pub summary: Option<String>,
}

/// Configuration of an [`Assembly`]; build with [`AssemblyConfig::new`] then adjust fields.
#[derive(Debug, Clone, PartialEq)]
pub struct AssemblyConfig {
    /// Token counter of the model.
    pub counter: Counter,
    /// `(name, share)` of each window; shares sum to 1.
    pub windows: Vec<(String, f64)>,
    /// Index of the window that is never filled.
    pub reserve: Option<u8>,
    /// Fraction of the budget the ladder aims at (0 < r ≤ 1).
    pub pretrim_ratio: f64,
    /// Turn-score weights: tool call, feedback, recency, structural.
    pub weights: [f32; 4],
    /// Texts longer than this many chars are soft-trimmed.
    pub soft_trim_chars: usize,
    /// Chars kept at the head and at the tail of a soft-trimmed text.
    pub soft_keep_chars: usize,
    /// Turn groups holding this many last assistant messages are protected.
    pub protect_last_assistant: usize,
    /// Only turn groups scoring at most this are hard-trimmed.
    pub hard_trim_max_score: f32,
}

impl AssemblyConfig {
    /// A configuration with the DESIGN.md §4 defaults for everything but the windows.
    pub fn new(counter: Counter, windows: Vec<(String, f64)>) -> Self {
        Self {
            counter,
            windows,
            reserve: None,
            pretrim_ratio: 0.8,
            weights: [0.25, 0.65, 0.35, 0.1],
            soft_trim_chars: 4000,
            soft_keep_chars: 1500,
            protect_last_assistant: 3,
            hard_trim_max_score: 0.6,
        }
    }

    /// The DESIGN.md §4 defaults including the windows (instruction .15, core_memory .15,
    /// history .40, tool .20, reserve .10, the reserve never filled).
    pub fn design_defaults(counter: Counter) -> Self {
        let windows = [
            ("instruction", 0.15),
            ("core_memory", 0.15),
            ("history", 0.4),
            ("tool", 0.2),
            ("reserve", 0.1),
        ];
        let windows = windows.iter().map(|(n, s)| (n.to_string(), *s)).collect();
        let mut config = Self::new(counter, windows);
        config.reserve = Some(4);
        config
    }

    /// Check every field; the error names the bad value and what was expected.
    pub fn validate(&self) -> CoreResult<()> {
        self.validate_windows()?;
        if !(self.pretrim_ratio > 0.0 && self.pretrim_ratio <= 1.0) {
            return Err(CoreError::Value(format!(
                "pretrim_ratio must be in (0, 1]; got {}",
                self.pretrim_ratio
            )));
        }
        if self.weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
            return Err(CoreError::Value(format!(
                "weights must be finite and >= 0; got {:?}",
                self.weights
            )));
        }
        if !self.hard_trim_max_score.is_finite() {
            return Err(CoreError::Value(format!(
                "hard_trim_max_score must be finite; got {}",
                self.hard_trim_max_score
            )));
        }
        Ok(())
    }

    fn validate_windows(&self) -> CoreResult<()> {
        let listing = || format!("{:?}", self.windows);
        if self.windows.is_empty() || self.windows.len() > MAX_WINDOWS {
            return Err(CoreError::Value(format!(
                "windows must hold 1 to {MAX_WINDOWS} (name, share) pairs; got {}",
                self.windows.len()
            )));
        }
        if let Some((name, share)) = self
            .windows
            .iter()
            .find(|(_, s)| !s.is_finite() || *s < 0.0)
        {
            return Err(CoreError::Value(format!(
                "window {name:?} has share {share}; shares must be finite and >= 0 (windows: {})",
                listing()
            )));
        }
        let sum: f64 = self.windows.iter().map(|(_, s)| s).sum();
        if (sum - 1.0).abs() > 1e-6 {
            return Err(CoreError::Value(format!(
                "window shares must sum to 1.0; got {sum} (windows: {})",
                listing()
            )));
        }
        let names: std::collections::BTreeSet<&str> =
            self.windows.iter().map(|(n, _)| n.as_str()).collect();
        if names.len() != self.windows.len() {
            return Err(CoreError::Value(format!(
                "window names must be unique (windows: {})",
                listing()
            )));
        }
        if let Some(r) = self
            .reserve
            .filter(|r| usize::from(*r) >= self.windows.len())
        {
            return Err(CoreError::Value(format!(
                "reserve window index {r} is out of range (windows: {})",
                listing()
            )));
        }
        Ok(())
    }

    /// Index of the window named `name`.
    pub fn window_index(&self, name: &str) -> Option<u8> {
        self.windows
            .iter()
            .position(|(n, _)| n == name)
            .and_then(|i| u8::try_from(i).ok())
    }

    /// Whether soft trim may shorten the context grains of window `w` (its name says `tool`).
    pub fn is_tool_window(&self, w: u8) -> bool {
        self.windows
            .get(usize::from(w))
            .is_some_and(|(n, _)| n.to_ascii_lowercase().contains("tool"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::counter_for_encoding;

    fn config(windows: &[(&str, f64)]) -> AssemblyConfig {
        let counter = counter_for_encoding("o200k_base").expect("known encoding");
        AssemblyConfig::new(
            counter,
            windows.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
        )
    }

    #[test]
    fn validates_shares() {
        assert!(config(&[("a", 0.5), ("b", 0.5)]).validate().is_ok());
        let err = config(&[("a", 0.5), ("b", 0.4)]).validate();
        assert!(
            matches!(err, Err(CoreError::Value(m)) if m.contains("\"a\"") && m.contains("0.9"))
        );
        let err = config(&[("a", -0.5), ("b", 1.5)]).validate();
        assert!(matches!(err, Err(CoreError::Value(m)) if m.contains("\"a\"")));
        assert!(config(&[("a", f64::NAN), ("b", 1.0)]).validate().is_err());
        assert!(config(&[("a", 0.5), ("a", 0.5)]).validate().is_err());
        assert!(config(&[]).validate().is_err());
    }

    #[test]
    fn validates_scalars() {
        let mut c = config(&[("a", 1.0)]);
        c.pretrim_ratio = 0.0;
        assert!(c.validate().is_err());
        c.pretrim_ratio = 1.0;
        c.weights = [0.1, f32::NAN, 0.0, 0.0];
        assert!(c.validate().is_err());
        c.weights = [0.1; 4];
        c.reserve = Some(1);
        assert!(c.validate().is_err());
    }
}
