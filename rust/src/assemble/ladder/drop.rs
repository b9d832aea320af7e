//! Dropping (after folding): when a window is still over its allocation with its grains folded
//! (a stand-in costs about ten tokens, so thousands of small grains stay over however they are
//! folded), its least important unprotected context grains are dropped whole: the highest
//! priority number first, then the later rank, then the later seq (the reverse of the context
//! order). Each one gets a [`Reason::Dropped`] decision, and a dropped branch stand-in takes its
//! members with it. One pass over the context order per window: linear in the grains.

use std::collections::BTreeSet;

use super::{flags, Reason, Run, Stage, Status};
use crate::assemble::text;

impl Run<'_> {
    /// In each window over its allocation, drop its least important unprotected grains until it
    /// is within.
    pub(super) fn drop_grains(&mut self) {
        let mut heads = Vec::new();
        for w in 0..self.used.len() {
            if self.over(w) {
                self.drop_while(Some(w), &mut heads);
            }
        }
        self.drop_branch_members(&heads);
    }

    /// When the plan is still over its target after compaction (pinned history and protected
    /// items leave too little room), drop unprotected grains of any window, least important
    /// first, until it fits.
    pub(super) fn drop_to_target(&mut self) {
        if self.total() <= self.target {
            return;
        }
        let mut heads = Vec::new();
        self.drop_while(None, &mut heads);
        self.drop_branch_members(&heads);
    }

    /// Whether context grain `i` can be dropped: not protected, still rendering something.
    fn droppable(&self, i: usize) -> bool {
        self.c.flags[i] & flags::PROTECTED == 0
            && self.status[i] != Status::Dropped
            && self.after[i] > 0
    }

    /// Drop grains of `window` (any window when `None`), least important first, while it (the
    /// plan) is over; the slots of dropped branch stand-ins are added to `heads`.
    fn drop_while(&mut self, window: Option<usize>, heads: &mut Vec<u32>) {
        let (c, o) = (self.c, self.o);
        let mut total = self.total();
        for &s in o.context.slots.iter().rev() {
            let over = match window {
                Some(w) => self.over(w),
                None => total > self.target,
            };
            if !over {
                break;
            }
            let i = s as usize;
            if window.is_some_and(|w| usize::from(c.window[i]) != w) || !self.droppable(i) {
                continue;
            }
            if matches!(self.reasons[i], Reason::BranchHead { .. }) {
                heads.push(s);
            }
            total -= self.after[i] as usize;
            self.drop_one(s);
        }
    }

    fn drop_one(&mut self, s: u32) {
        let priority = self.c.priority[s as usize];
        if let Some(r) = self.repl.get_mut(s as usize) {
            *r = None;
        }
        self.decide(
            s,
            Status::Dropped,
            Stage::Fold,
            Reason::Dropped { priority },
            0,
        );
    }

    /// The members of the branches whose stand-in was dropped are dropped too (they rendered
    /// through it).
    fn drop_branch_members(&mut self, heads: &[u32]) {
        if heads.is_empty() {
            return;
        }
        let c = self.c;
        let branches: BTreeSet<&str> = heads
            .iter()
            .map(|&s| text::branch_of(&c.node_ids[s as usize]))
            .collect();
        for &s in &self.o.context.slots {
            let i = s as usize;
            if self.reasons[i] == Reason::Branch
                && branches.contains(text::branch_of(&c.node_ids[i]))
            {
                self.drop_one(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{assembly, by_id, grain, loaded, message, SYS, TOOL};
    use super::*;
    use crate::assemble::role;

    /// `n` grains `rag.d.<i>` holding `doc <i>`, as the plugin of the report returns them.
    fn small_grains(n: u64, start: u64) -> Vec<crate::assemble::ItemSpec> {
        (start..start + n)
            .map(|i| grain(&format!("rag.d.{i}"), &format!("doc {i}"), TOOL, 50, i))
            .collect()
    }

    #[test]
    fn many_small_grains_are_dropped_least_important_first_and_reported() {
        let mut items = small_grains(2_000, 10);
        items.push(grain("sys.rules", "be brief", SYS, 0, 0));
        items.push(message(5_000, 0, role::USER, "hi"));
        let (mut a, full) = loaded(items);
        assert!(full > 4 * 1_500, "{full}");
        let plan = a.plan(1_500).expect("fits");
        assert!(plan.fits, "{} > {}", plan.total_after, plan.target);
        assert!(plan.total_after <= plan.target);
        let dropped: Vec<u32> = plan
            .live
            .iter()
            .copied()
            .filter(|&s| plan.status[s as usize] == Status::Dropped)
            .collect();
        assert!(dropped.len() > 1_000, "{}", dropped.len());
        for &s in &dropped {
            assert_eq!(plan.stage[s as usize], Stage::Fold);
            assert!(
                plan.reason(s)
                    .starts_with("dropped: folding was not enough"),
                "{}",
                plan.reason(s)
            );
            assert_eq!(plan.tokens_after[s as usize], 0);
        }
        // the same priority everywhere: the later seq goes first, the earliest stay
        assert_eq!(plan.status[by_id(&plan, "rag.d.10") as usize], Status::Kept);
        assert_eq!(
            plan.status[by_id(&plan, "rag.d.2009") as usize],
            Status::Dropped
        );
        assert_eq!(
            plan.status[by_id(&plan, "sys.rules") as usize],
            Status::Kept
        );
        assert_eq!(
            plan.status[by_id(&plan, "hist.5000") as usize],
            Status::Kept
        );
    }

    #[test]
    fn fifty_thousand_grains_fit_and_higher_priority_numbers_go_first() {
        let mut items = small_grains(50_000, 10);
        let mut pinned = grain("rag.pinned", "keep me", TOOL, 90, 1);
        pinned.flags = flags::PROTECTED;
        items.push(pinned);
        items.push(grain("rag.vital", "vital fact", TOOL, 1, 2));
        items.push(grain("rag.noise", &"noise ".repeat(40), TOOL, 99, 3));
        let mut a = assembly();
        a.upsert(items).expect("valid");
        let plan = a.plan(1_500).expect("fits");
        assert!(plan.fits);
        let status = |id: &str| plan.status[by_id(&plan, id) as usize];
        assert_eq!(status("rag.pinned"), Status::Kept, "protected");
        assert_eq!(status("rag.vital"), Status::Kept, "most important");
        assert_eq!(status("rag.noise"), Status::Dropped, "least important");
        let kept = plan
            .live
            .iter()
            .filter(|&&s| plan.status[s as usize] == Status::Kept)
            .count();
        assert!(kept > 50, "the room is used: {kept} kept");
    }

    #[test]
    fn a_dropped_branch_stand_in_takes_its_members() {
        let doc = "lorem ipsum dolor sit amet ".repeat(40);
        let mut items = vec![];
        for i in 0..6u64 {
            items.push(grain(&format!("rag.b.{i}"), &doc, TOOL, 60, 10 + i));
        }
        let (mut a, _) = loaded(items);
        // far below one branch stand-in (about 20 tokens): everything goes
        let plan = a.plan(12).expect("no protected items");
        assert!(plan.fits, "{} > {}", plan.total_after, plan.target);
        for i in 0..6 {
            let s = by_id(&plan, &format!("rag.b.{i}"));
            assert_eq!(plan.status[s as usize], Status::Dropped, "rag.b.{i}");
        }
        assert!(plan
            .context_order
            .iter()
            .all(|&s| plan.tokens_after[s as usize] == 0));
    }
}
