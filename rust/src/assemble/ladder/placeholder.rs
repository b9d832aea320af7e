//! The placeholder standing for the turns hard trim removed: one user message listing them, and
//! the accounting of its tokens while hard trim runs (a bound first, the exact count at the end).

use std::collections::BTreeMap;

use super::Run;
use crate::assemble::plan::Placeholder;
use crate::assemble::text;
use crate::assemble::PLACEHOLDER_OVERHEAD;

/// Running state of the removed-turns placeholder.
#[derive(Debug, Default)]
pub(super) struct Removed {
    /// Removed turns as disjoint, non-adjacent inclusive ranges: start -> end.
    pub(super) ranges: BTreeMap<u32, u32>,
    /// Number of removed turns.
    pub(super) turns: usize,
    /// Tokens the removed items held before the ladder.
    pub(super) tokens: u64,
    /// Seq of the first removed item: where the placeholder is rendered.
    pub(super) seq: u64,
    /// Window of the first removed item: where the placeholder's tokens are accounted.
    pub(super) window: u8,
    /// Tokens currently accounted for the placeholder.
    pub(super) charged: u32,
    /// Whether `charged` is the conservative bound rather than the exact count.
    pub(super) estimated: bool,
}

impl Removed {
    /// Add a turn, merging it with adjacent ranges.
    pub(super) fn insert(&mut self, t: u32) {
        let prev = self.ranges.range(..=t).next_back().map(|(&a, &b)| (a, b));
        if prev.is_some_and(|(_, b)| t <= b) {
            return;
        }
        let start = match prev {
            Some((a, b)) if b.checked_add(1) == Some(t) => a,
            _ => t,
        };
        let next = t.checked_add(1).and_then(|n| self.ranges.remove(&n));
        self.ranges.insert(start, next.unwrap_or(t));
        self.turns += 1;
    }
}

impl Run<'_> {
    /// Record the removal of `turn` (its items held `tokens`; the first is at `seq`, `window`).
    pub(super) fn note_removed(&mut self, turn: u32, tokens: u64, seq: u64, window: u8) {
        let r = self.removed.get_or_insert(Removed {
            seq,
            window,
            ..Removed::default()
        });
        r.insert(turn);
        r.tokens += tokens;
        if seq < r.seq {
            r.seq = seq;
            r.window = window;
        }
    }

    pub(super) fn placeholder_text(r: &Removed) -> String {
        let ranges = r.ranges.iter().map(|(&a, &b)| (a, b));
        text::removed_turns(ranges, r.turns, r.tokens)
    }

    /// Account the placeholder's exact tokens in its window.
    pub(super) fn charge_exact(&mut self) {
        let Some(r) = &self.removed else {
            return;
        };
        let exact = self.count(&Self::placeholder_text(r));
        self.charge(exact.saturating_add(PLACEHOLDER_OVERHEAD), false);
    }

    /// Account `tokens` for the placeholder in the window of the first removed item.
    pub(super) fn charge(&mut self, tokens: u32, estimated: bool) {
        let Some(r) = &mut self.removed else {
            return;
        };
        let (old, w) = (r.charged as usize, usize::from(r.window));
        r.charged = tokens;
        r.estimated = estimated;
        // The first removed item (hence the window) may have changed since the last charge.
        let old_w = self.charged_window.unwrap_or(w);
        self.used[old_w] -= old;
        self.used[w] += tokens as usize;
        self.charged_window = Some(w);
    }

    /// An upper bound of the placeholder's tokens, whatever it says: the longest text it can
    /// take (every number at its widest) counted once per plan.
    pub(super) fn placeholder_bound(&self) -> u32 {
        let wide = u32::MAX - 2;
        let ranges = (0..text::SHOWN_RANGES as u32).map(|_| (wide - 1, wide));
        let text = text::removed_turns(ranges, u32::MAX as usize, u64::MAX);
        self.count(&text).saturating_add(PLACEHOLDER_OVERHEAD)
    }

    /// Tokens by which the windows in `mask` exceed their allocation.
    pub(super) fn deficit(&self, mask: u64) -> usize {
        (0..self.used.len())
            .filter(|&w| mask & (1u64 << (w & 63)) != 0)
            .map(|w| self.used[w].saturating_sub(self.alloc.get(w).copied().unwrap_or(0)))
            .sum()
    }

    /// The placeholder standing for the removed turns, if any.
    pub(super) fn placeholder(&self) -> Option<Placeholder> {
        let r = self.removed.as_ref()?;
        Some(Placeholder {
            text: Self::placeholder_text(r),
            tokens: r.charged,
            seq: r.seq,
            window: r.window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{ids, loaded, session};
    use super::*;
    use crate::assemble::PLACEHOLDER_ID;

    #[test]
    fn removed_turns_merge_into_ranges() {
        let mut r = Removed::default();
        for t in [5, 3, 4, 9, 7, 8, 4, 0, u32::MAX] {
            r.insert(t);
        }
        let ranges: Vec<(u32, u32)> = r.ranges.iter().map(|(&a, &b)| (a, b)).collect();
        assert_eq!(ranges, vec![(0, 0), (3, 5), (7, 9), (u32::MAX, u32::MAX)]);
        assert_eq!(r.turns, 8);
    }

    #[test]
    fn the_text_lists_the_ranges_and_the_bound_covers_it() {
        let mut r = Removed::default();
        for t in [2, 3, 4, 8] {
            r.insert(t);
        }
        r.tokens = 1234;
        let text = Run::placeholder_text(&r);
        assert_eq!(
            text,
            "[4 earlier turns removed to fit the budget: turns 2–4, 8, 1234 tokens]"
        );
        let (mut a, _) = loaded(session(1, 1));
        a.refresh_orders();
        let mut derived = std::mem::take(&mut a.cols.derived);
        let run = Run::new(
            &a.config,
            &a.cols,
            &a.orders,
            &mut derived,
            (1_000, 1.0, false),
            std::time::Instant::now(),
        )
        .expect("fits");
        let exact = run.count(&text) + PLACEHOLDER_OVERHEAD;
        assert!(run.placeholder_bound() >= exact);
        assert!(run.placeholder().is_none(), "nothing removed yet");
    }

    #[test]
    fn the_placeholder_is_charged_exactly_and_placed_at_the_first_removal() {
        let (mut a, full) = loaded(session(12, 1));
        let plan = a.plan(full / 2).expect("hard");
        let ph = plan.placeholder.as_ref().expect("placeholder");
        let exact = a.config.counter.count(&ph.text, true) as u32 + PLACEHOLDER_OVERHEAD;
        assert_eq!(ph.tokens, exact, "the bound is replaced by the exact count");
        let order = ids(&plan, &plan.history_order);
        let at = order
            .iter()
            .position(|&h| h == PLACEHOLDER_ID)
            .expect("placed");
        let first_removed = plan
            .live
            .iter()
            .filter(|&&s| plan.status[s as usize] == crate::assemble::Status::Dropped)
            .map(|&s| a.cols.seq[s as usize])
            .min()
            .expect("something removed");
        assert_eq!(ph.seq, first_removed);
        let before: Vec<u64> = order[..at]
            .iter()
            .filter_map(|id| id.strip_prefix("hist.")?.parse().ok())
            .collect();
        assert!(before.iter().all(|&s| s < first_removed), "{order:?}");
    }
}
