//! Folding: in each window still over its allocation, the least important unprotected context
//! grains become one-line stand-ins (`[folded <id> (<label>): N tokens]`); a branch whose grains
//! are all folded then gets one stand-in at its first member's place.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{flags, Reason, Run, Stage, Status};
use crate::assemble::text;

impl Run<'_> {
    /// Folding: in each window over its allocation, fold the least important unprotected context
    /// grains to one-line stand-ins; then a branch whose grains are all folded gets one stand-in.
    pub(super) fn fold(&mut self) {
        let (c, o) = (self.c, self.o);
        let mut folded = false;
        for w in 0..self.used.len() {
            for &s in o.context.slots.iter().rev() {
                if !self.over(w) {
                    break;
                }
                let i = s as usize;
                let skip = usize::from(c.window[i]) != w
                    || c.flags[i] & flags::PROTECTED != 0
                    || matches!(self.status[i], Status::Folded | Status::Dropped);
                if !skip {
                    folded |= self.fold_one(s);
                }
            }
        }
        if folded {
            self.fold_branches();
        }
    }

    fn fold_one(&mut self, s: u32) -> bool {
        let i = s as usize;
        let (text, count) = match &self.derived[i].folded {
            Some(t) => t.clone(),
            None => {
                let c = self.c;
                let t = text::folded(&c.node_ids[i], &c.labels[i], c.tokens[i]);
                let entry = (Arc::from(t.as_str()), self.count(&t));
                self.derived[i].folded = Some(entry.clone());
                entry
            }
        };
        let tokens = count.saturating_add(self.c.overhead[i]);
        if tokens >= self.after[i] {
            return false;
        }
        self.repl[s as usize] = Some(text);
        self.decide(s, Status::Folded, Stage::Fold, Reason::Folded, tokens);
        true
    }

    /// Replace the stand-ins of a fully folded branch by one, at its first member's place.
    fn fold_branches(&mut self) {
        let (c, o) = (self.c, self.o);
        let mut branches: BTreeMap<&str, (Vec<u32>, usize)> = BTreeMap::new();
        for &s in &o.context.slots {
            let entry = branches
                .entry(text::branch_of(&c.node_ids[s as usize]))
                .or_default();
            entry.0.push(s);
            entry.1 += usize::from(self.status[s as usize] == Status::Folded);
        }
        for (branch, (members, folded)) in branches {
            if members.len() < 2 || folded < members.len() {
                continue;
            }
            let tokens: u64 = members
                .iter()
                .map(|&s| u64::from(c.tokens[s as usize]))
                .sum();
            let t = text::folded_branch(branch, members.len(), tokens);
            let head = members[0];
            let cost = self.count(&t).saturating_add(c.overhead[head as usize]);
            let now: u64 = members
                .iter()
                .map(|&s| u64::from(self.after[s as usize]))
                .sum();
            if u64::from(cost) >= now {
                continue;
            }
            let nodes = u32::try_from(members.len()).unwrap_or(u32::MAX);
            self.repl[head as usize] = Some(Arc::from(t.as_str()));
            self.decide(
                head,
                Status::Folded,
                Stage::Fold,
                Reason::BranchHead { nodes },
                cost,
            );
            for &s in &members[1..] {
                self.repl[s as usize] = None;
                self.decide(s, Status::Folded, Stage::Fold, Reason::Branch, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{by_id, grain, ids, loaded, MEM, SYS};
    use super::*;

    #[test]
    fn fold_least_important_first_then_whole_branch() {
        let doc = "lorem ipsum dolor sit amet ".repeat(40);
        let mut items = vec![grain("sys.a", "rules", SYS, 0, 0)];
        for i in 0..4u64 {
            items.push(grain(
                &format!("mem.n{i}"),
                &doc,
                MEM,
                10 + i as i64,
                10 + i,
            ));
        }
        let (mut a, full) = loaded(items);
        let plan = a.plan(full * 8 / 10).expect("folded");
        let last = by_id(&plan, "mem.n3");
        assert_eq!(plan.status[last as usize], Status::Folded);
        assert!(plan
            .replacement(last)
            .expect("stand-in")
            .starts_with("[folded mem.n3 (label): "));
        assert_eq!(plan.status[by_id(&plan, "mem.n0") as usize], Status::Kept);
        // room for one stand-in for the branch, not for one per grain
        let plan = a.plan(40).expect("folded");
        let head = by_id(&plan, "mem.n0");
        let text = plan.replacement(head).expect("branch stand-in");
        assert!(text.starts_with("[folded branch mem: 4 nodes, "), "{text}");
        let ctx: Vec<&str> = plan
            .context_order
            .iter()
            .map(|&s| plan.node_id(s))
            .collect();
        assert_eq!(ctx, vec!["sys.a", "mem.n0"]);
        assert_eq!(plan.tokens_after[by_id(&plan, "mem.n2") as usize], 0);
        assert!(plan.fits);
    }

    #[test]
    fn protected_grains_are_never_folded_and_a_partly_folded_branch_keeps_its_members() {
        let doc = "lorem ipsum dolor sit amet ".repeat(40);
        let mut pinned = grain("mem.pinned", &doc, MEM, 50, 9);
        pinned.flags = flags::PROTECTED;
        let items = vec![
            grain("sys.a", "rules", SYS, 0, 0),
            grain("mem.a", &doc, MEM, 10, 1),
            grain("mem.b", &doc, MEM, 20, 2),
            pinned,
        ];
        let (mut a, full) = loaded(items);
        let plan = a.plan(full / 2).expect("folded");
        assert_eq!(
            plan.status[by_id(&plan, "mem.pinned") as usize],
            Status::Kept
        );
        let folded: Vec<&str> = plan
            .live
            .iter()
            .filter(|&&s| plan.status[s as usize] == Status::Folded)
            .map(|&s| plan.node_id(s))
            .collect();
        assert!(!folded.is_empty());
        assert!(plan
            .live
            .iter()
            .all(|&s| plan.reasons[s as usize] != Reason::Branch));
        let order = ids(&plan, &plan.context_order);
        assert_eq!(order.len(), 4, "no branch stand-in: {order:?}");
    }
}
