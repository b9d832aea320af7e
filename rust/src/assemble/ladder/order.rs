//! The survivors in rendered order and the finished [`Plan`]: context grains by
//! `(priority, rank, seq)` with a folded branch once, history by seq with the removed-turns
//! placeholder where the first removed turn was.

use std::sync::Arc;

use super::{Plan, Reason, Run, Status};
use crate::assemble::plan::{WindowUse, PLACEHOLDER_SLOT};

impl Run<'_> {
    /// The finished plan: orders, window usage and replacements of the decisions taken.
    pub(super) fn finish(mut self) -> Plan {
        let c = self.c;
        let context_order = self.context_order();
        let placeholder = self.placeholder();
        let history_order = self.history_order(placeholder.as_ref().map(|p| p.seq));
        let windows = self.window_uses();
        let total_after = self.total();
        let total_before: usize = self.demand.iter().sum();
        // a total held under the high-water mark fits there; a cut must reach the target
        let limit = if total_before <= self.high {
            self.high
        } else {
            self.target
        };
        let replacements = self.replacements();
        self.timings.order = self.lap();
        Plan {
            budget: self.budget,
            available: self.available,
            target: self.target,
            high: self.high,
            total_before,
            total_after,
            fits: total_after <= limit,
            node_ids: c.node_ids.clone(),
            live: (0..c.alive.len())
                .filter(|&s| c.alive[s])
                .map(|s| s as u32)
                .collect(),
            status: self.status,
            stage: self.stage,
            reasons: self.reasons,
            tokens_before: c.tokens.clone(),
            tokens_after: self.after,
            window: c.window.clone(),
            replacements,
            placeholder,
            context_order,
            history_order,
            windows,
            compaction_turns: self.compaction.0,
            compaction_tokens: self.compaction.1,
            timings: self.timings,
        }
    }

    fn window_uses(&self) -> Vec<WindowUse> {
        let names = self.cfg.windows.iter().map(|(name, _)| name.clone());
        names
            .enumerate()
            .map(|(w, name)| WindowUse {
                name,
                demand: self.demand[w],
                alloc: self.alloc.get(w).copied().unwrap_or(0),
                used: self.used[w],
            })
            .collect()
    }

    /// `(slot, text)` of the items rendered as something else, by slot.
    fn replacements(&mut self) -> Vec<(u32, Arc<str>)> {
        let status = &self.status;
        std::mem::take(&mut self.repl)
            .into_iter()
            .enumerate()
            .filter(|(s, _)| {
                matches!(
                    status[*s],
                    Status::Trimmed | Status::Cleared | Status::Folded
                )
            })
            .filter_map(|(s, t)| Some((s as u32, t?)))
            .collect()
    }

    /// Context grains still rendered (a folded branch once, dropped ones not), by
    /// `(priority, rank, seq)`.
    fn context_order(&self) -> Vec<u32> {
        let slots = self.o.context.slots.iter().copied();
        slots
            .filter(|&s| {
                let i = s as usize;
                self.reasons[i] != Reason::Branch && self.status[i] != Status::Dropped
            })
            .collect()
    }

    /// History items still rendered, by seq, with the placeholder at `placeholder_seq`.
    fn history_order(&self, placeholder_seq: Option<u64>) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.o.history.slots.len() + 1);
        let mut pending = placeholder_seq;
        for &s in &self.o.history.slots {
            let i = s as usize;
            if pending.is_some_and(|p| self.c.seq[i] > p) {
                out.push(PLACEHOLDER_SLOT);
                pending = None;
            }
            if self.status[i] != Status::Dropped {
                out.push(s);
            }
        }
        if pending.is_some() {
            out.push(PLACEHOLDER_SLOT);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{grain, ids, loaded, session, SYS, TOOL};
    use crate::assemble::PLACEHOLDER_ID;

    #[test]
    fn everything_fits() {
        let mut items = vec![
            grain("rag.b", "doc", TOOL, 50, 1),
            grain("sys.a", "be brief", SYS, 0, 0),
        ];
        items.extend(session(2, 2));
        let (mut a, _) = loaded(items);
        let plan = a.plan(100_000).expect("fits");
        assert!(plan.fits);
        assert_eq!(plan.total_after, plan.total_before);
        assert_eq!(plan.changed().count(), 0);
        assert_eq!(ids(&plan, &plan.context_order), vec!["sys.a", "rag.b"]);
        let hist = ids(&plan, &plan.history_order);
        assert_eq!(
            hist,
            vec!["hist.1", "hist.2", "hist.3", "hist.4", "hist.5", "hist.6"]
        );
    }

    #[test]
    fn context_ties_break_by_rank_then_seq_and_dropped_history_leaves_the_order() {
        let mut late = grain("rag.late", "x", TOOL, 10, 9);
        late.rank = 0;
        let mut early_rank1 = grain("rag.r1", "x", TOOL, 10, 1);
        early_rank1.rank = 1;
        let mut items = vec![early_rank1, late, grain("rag.first", "x", TOOL, 10, 0)];
        items.extend(session(12, 1));
        let (mut a, full) = loaded(items);
        let plan = a.plan(full / 2).expect("hard");
        assert_eq!(
            ids(&plan, &plan.context_order),
            vec!["rag.first", "rag.late", "rag.r1"]
        );
        let hist = ids(&plan, &plan.history_order);
        assert_eq!(hist.iter().filter(|&&h| h == PLACEHOLDER_ID).count(), 1);
        let kept = plan
            .live
            .iter()
            .filter(|&&s| plan.node_id(s).starts_with("hist."))
            .filter(|&&s| plan.status[s as usize] != crate::assemble::Status::Dropped)
            .count();
        assert_eq!(hist.len(), kept + 1);
        let used: usize = plan.windows.iter().map(|w| w.used).sum();
        assert_eq!(used, plan.total_after);
    }
}
