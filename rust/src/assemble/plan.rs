//! The result of [`crate::assemble::Assembly::plan`]: a decision for every live item, the
//! replacement texts, the render orders and the accounting.

use std::sync::Arc;

use super::ids::Ids;

/// node_id of the one placeholder that stands for the turns removed by hard trim.
pub const PLACEHOLDER_ID: &str = "hist.removed";
/// Slot value that stands for the placeholder in [`Plan::history_order`].
pub const PLACEHOLDER_SLOT: u32 = u32::MAX;

/// What happened to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Status {
    /// Rendered as is.
    #[default]
    Kept = 0,
    /// Rendered as a shorter text (head + tail or summary).
    Trimmed = 1,
    /// Rendered as a `[tool result cleared: ...]` placeholder.
    Cleared = 2,
    /// Rendered as a one-line stand-in (or merged into its branch stand-in).
    Folded = 3,
    /// Not rendered.
    Dropped = 4,
}

/// Which step of the ladder decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Stage {
    /// No step: the item is kept as is.
    #[default]
    None = 0,
    /// The size guard (applied on the Python side; unused here).
    Guard = 1,
    /// Soft trim.
    Soft = 2,
    /// Hard trim of history turn groups.
    Hard = 3,
    /// Folding of context grains.
    Fold = 4,
    /// Compaction request (summarized by the Python side).
    Compaction = 5,
}

/// Why an item got its status; formatted on demand by [`Plan::reason`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Reason {
    /// Kept; nothing to say.
    #[default]
    None,
    /// Soft-trimmed to head + tail of a text this many chars long.
    HeadTail {
        /// Chars of the original text.
        chars: u32,
        /// Chars cut from the middle.
        removed: u32,
    },
    /// Replaced by the plugin-provided summary.
    Summary {
        /// Chars of the original text.
        chars: u32,
    },
    /// Cleared to a placeholder.
    Cleared,
    /// Folded to its own stand-in.
    Folded,
    /// Folded with its whole branch; this item renders the branch's one stand-in.
    BranchHead {
        /// Nodes the stand-in covers.
        nodes: u32,
    },
    /// Folded with its whole branch; not rendered (the branch's first member shows the stand-in).
    Branch,
    /// Its turn group was removed by hard trim.
    Removed {
        /// The turn group.
        turn: u32,
        /// The group's score.
        score: f32,
    },
    /// Its turn group is to be summarized by compaction.
    Compaction {
        /// The turn group.
        turn: u32,
    },
    /// Dropped whole: folding was not enough and its priority is among the least important.
    Dropped {
        /// The grain's priority.
        priority: i64,
    },
}

/// Per-window accounting, in tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowUse {
    /// Window name.
    pub name: String,
    /// Tokens its items held before the ladder.
    pub demand: usize,
    /// Tokens allocated to it (final allocation).
    pub alloc: usize,
    /// Tokens its items hold after the ladder.
    pub used: usize,
}

/// Elapsed nanoseconds per stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timings {
    /// Demand, protection check and window allocation.
    pub allocate: u64,
    /// Soft trim.
    pub soft: u64,
    /// Hard trim.
    pub hard: u64,
    /// Folding.
    pub fold: u64,
    /// Compaction request.
    pub compaction: u64,
    /// Building the render orders.
    pub order: u64,
}

/// The hard-trim placeholder (`hist.removed`).
#[derive(Debug, Clone, PartialEq)]
pub struct Placeholder {
    /// Text of the placeholder message.
    pub text: String,
    /// Its tokens (count + [`crate::assemble::PLACEHOLDER_OVERHEAD`]).
    pub tokens: u32,
    /// Seq of the first removed item: where it is rendered.
    pub seq: u64,
    /// Window it is accounted in.
    pub window: u8,
}

/// A decision for every live item plus what the renderer needs.
///
/// Per-item vectors are indexed by slot; [`Plan::live`] lists the live slots.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The budget given to `plan`.
    pub budget: usize,
    /// Budget minus the reserve window's share.
    pub available: usize,
    /// What the ladder aims at: `min(pretrim_ratio × budget, available)`.
    pub target: usize,
    /// The high-water mark the ladder ran past (`target` unless the plan held a total above
    /// it: [`Assembly::plan_holding`](super::Assembly::plan_holding)).
    pub high: usize,
    /// Tokens of all live items before the ladder.
    pub total_before: usize,
    /// Tokens rendered after the ladder (replacements and placeholder included).
    pub total_after: usize,
    /// `total_after <= target`, or `<= high` when the total was held under the mark.
    pub fits: bool,
    /// Node ids by slot (shared with the assembly; dead slots hold an empty id).
    pub node_ids: Ids,
    /// Live slots, in slot order: the order of [`Plan::decisions`] rows.
    pub live: Vec<u32>,
    /// Status by slot.
    pub status: Vec<Status>,
    /// Stage by slot.
    pub stage: Vec<Stage>,
    /// Reason by slot.
    pub reasons: Vec<Reason>,
    /// Tokens by slot before the ladder.
    pub tokens_before: Vec<u32>,
    /// Tokens by slot after the ladder (0 when dropped).
    pub tokens_after: Vec<u32>,
    /// Window by slot.
    pub window: Vec<u8>,
    /// `(slot, text)` for trimmed, cleared and folded items, by slot.
    pub replacements: Vec<(u32, Arc<str>)>,
    /// The hard-trim placeholder, if any turn was removed.
    pub placeholder: Option<Placeholder>,
    /// Rendered context grains (kind 0), by `(priority, rank, seq)`.
    pub context_order: Vec<u32>,
    /// Rendered history items by seq; [`PLACEHOLDER_SLOT`] marks the placeholder.
    pub history_order: Vec<u32>,
    /// Per-window accounting, in window order.
    pub windows: Vec<WindowUse>,
    /// Turn groups to summarize (oldest first), empty when none.
    pub compaction_turns: Vec<u32>,
    /// Tokens those groups hold.
    pub compaction_tokens: usize,
    /// Elapsed time per stage.
    pub timings: Timings,
}

impl Plan {
    /// Node id of `slot` ([`PLACEHOLDER_ID`] for [`PLACEHOLDER_SLOT`]).
    pub fn node_id(&self, slot: u32) -> &str {
        if slot == PLACEHOLDER_SLOT {
            return PLACEHOLDER_ID;
        }
        self.node_ids.get(slot as usize).map_or("", |s| s)
    }

    /// Human-readable reason of `slot`'s decision.
    pub fn reason(&self, slot: u32) -> String {
        let Some(reason) = self.reasons.get(slot as usize) else {
            return String::new();
        };
        match *reason {
            Reason::None => "kept".to_string(),
            Reason::HeadTail { chars, removed } => {
                format!("soft trim: {chars} chars cut to head + tail ({removed} chars removed)")
            }
            Reason::Summary { chars } => format!("soft trim: {chars} chars replaced by summary"),
            Reason::Cleared => "soft trim: tool result cleared to a placeholder".to_string(),
            Reason::Folded => "folded to a one-line stand-in".to_string(),
            Reason::BranchHead { nodes } => {
                let id = self.node_id(slot);
                let branch = id.split('.').next().unwrap_or(id);
                format!("branch {branch} folded: one stand-in for its {nodes} nodes")
            }
            Reason::Branch => {
                let id = self.node_id(slot);
                let branch = id.split('.').next().unwrap_or(id);
                format!("folded with branch {branch} into one stand-in")
            }
            Reason::Removed { turn, score } => format!("turn {turn} removed (score {score:.2})"),
            Reason::Compaction { turn } => format!("turn {turn} to be summarized by compaction"),
            Reason::Dropped { priority } => format!(
                "dropped: folding was not enough and priority {priority} is among the least \
                 important"
            ),
        }
    }

    /// Live slots whose status is not [`Status::Kept`].
    pub fn changed(&self) -> impl Iterator<Item = u32> + '_ {
        self.live.iter().copied().filter(|&s| {
            self.status
                .get(s as usize)
                .is_some_and(|st| *st != Status::Kept)
        })
    }

    /// Replacement text of `slot`, if it is rendered as something else than its text.
    pub fn replacement(&self, slot: u32) -> Option<&str> {
        if slot == PLACEHOLDER_SLOT {
            return self.placeholder.as_ref().map(|p| p.text.as_str());
        }
        self.replacements
            .binary_search_by_key(&slot, |(s, _)| *s)
            .ok()
            .and_then(|i| self.replacements.get(i))
            .map(|(_, t)| &**t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_reasons() {
        let plan = Plan {
            node_ids: Ids::from(vec!["rag.docs.1".into(), "hist.1".into()]),
            reasons: vec![
                Reason::Branch,
                Reason::Removed {
                    turn: 12,
                    score: 0.2149,
                },
            ],
            ..Plan::default()
        };
        assert_eq!(plan.reason(0), "folded with branch rag into one stand-in");
        assert_eq!(plan.reason(1), "turn 12 removed (score 0.21)");
        assert_eq!(plan.node_id(PLACEHOLDER_SLOT), PLACEHOLDER_ID);
        assert_eq!(plan.reason(7), "");
    }
}
