//! Compaction request (DESIGN.md §4 step 3): when soft trim, hard trim and folding were not
//! enough, mark the oldest turn groups whose removal makes the plan fit; the Python side
//! summarizes them into one `core_memory` grain.

use super::{kind, Groups, Reason, Run, Stage, Status};
use crate::assemble::role;

impl Run<'_> {
    /// Compaction request: if still over, pick the oldest unprotected turn groups whose removal
    /// makes it fit (then, if that is not enough, the protected tail too, but never the latest
    /// user turn nor a group holding a PROTECTED item) and mark them for summarization.
    pub(super) fn compact(&mut self) {
        let total = self.total();
        if total <= self.target || self.o.turns.slots.is_empty() {
            return;
        }
        let need = total - self.target;
        let (groups, scores) = self.take_groups();
        let picked = self.pick_compaction(&groups, need);
        for g in (0..groups.len()).filter(|&g| picked[g]) {
            let turn = groups.turn[g];
            let held =
                self.remove_group(&groups, g, Stage::Compaction, Reason::Compaction { turn });
            self.compaction.0.push(turn);
            self.compaction.1 += held;
        }
        self.groups = Some((groups, scores));
    }

    /// When the plan is still over its target with everything else cut (tiny budgets), the
    /// removed-turns placeholder goes too: the turns it listed go to compaction instead.
    pub(super) fn placeholder_to_compaction(&mut self) {
        if self.total() <= self.target || self.removed.is_none() {
            return;
        }
        let c = self.c;
        for &s in &self.o.history.slots {
            let i = s as usize;
            if self.status[i] == Status::Dropped && self.stage[i] == Stage::Hard {
                let turn = c.turn[i];
                self.stage[i] = Stage::Compaction;
                self.reasons[i] = Reason::Compaction { turn };
                self.compaction.0.push(turn);
                self.compaction.1 += c.tokens[i] as usize;
            }
        }
        if let (Some(r), Some(w)) = (self.removed.take(), self.charged_window.take()) {
            self.used[w] -= r.charged as usize;
        }
    }

    /// Hard-trimmed turn groups holding a user request go to compaction with its own picks: a
    /// request is summarized, never only counted in the removed-turns placeholder. Run after
    /// backfill (a restored group is not removed); the turns end sorted.
    pub(super) fn requests_to_compaction(&mut self) {
        let Some((groups, scores)) = self.groups.take() else {
            return;
        };
        let (c, o) = (self.c, self.o);
        for g in 0..groups.len() {
            let range = groups.start[g] as usize..groups.end[g] as usize;
            let slots = o.turns.slots.get(range).unwrap_or(&[]);
            let removed = |s: u32| {
                self.status[s as usize] == Status::Dropped && self.stage[s as usize] == Stage::Hard
            };
            let request = slots.iter().any(|&s| {
                let i = s as usize;
                removed(s) && c.kind[i] == kind::MESSAGE && c.role[i] == role::USER
            });
            if request {
                self.compaction.0.push(groups.turn[g]);
                let held: usize = slots
                    .iter()
                    .filter(|&&s| removed(s))
                    .map(|&s| c.tokens[s as usize] as usize)
                    .sum();
                self.compaction.1 += held;
            }
        }
        self.compaction.0.sort_unstable();
        self.compaction.0.dedup();
        self.groups = Some((groups, scores));
    }

    /// Oldest groups whose removal frees `need` tokens: unprotected ones first, then the
    /// protected tail, never a pinned group. A request and its answer are picked together
    /// (in the first pass only when neither is protected); only when one of them is pinned
    /// does the other go alone, the budget first.
    fn pick_compaction(&self, groups: &Groups, need: usize) -> Vec<bool> {
        let mut picked = vec![false; groups.len()];
        let mut freed = 0usize;
        for relaxed in [false, true] {
            for g in 0..groups.len() {
                if freed >= need {
                    return picked;
                }
                if picked[g]
                    || (!relaxed && groups.unit(g).any(|u| self.group_protected(groups, u)))
                {
                    continue;
                }
                for u in groups.unit(g) {
                    if picked[u] || self.group_pinned(groups, u) {
                        continue;
                    }
                    let held = self.group_tokens(groups, u);
                    if held > 0 {
                        picked[u] = true;
                        freed += held;
                    }
                }
            }
        }
        picked
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{by_id, loaded, message, session};
    use super::*;
    use crate::assemble::{flags, role, Status};

    #[test]
    fn compaction_requests_old_high_score_turns() {
        let mut items = session(8, 1);
        for it in &mut items {
            it.flags |= flags::FEEDBACK | flags::STRUCTURAL; // scores above 0.6: hard trim skips
        }
        let (mut a, full) = loaded(items);
        let plan = a.plan(full / 2).expect("compaction");
        assert!(!plan.compaction_turns.is_empty());
        assert_eq!(plan.compaction_turns[0], 0, "oldest first");
        assert!(plan.compaction_tokens > 0);
        assert!(plan.fits);
        let s = by_id(&plan, "hist.1");
        assert_eq!(
            (plan.status[s as usize], plan.stage[s as usize]),
            (Status::Dropped, Stage::Compaction)
        );
    }

    #[test]
    fn at_a_tiny_budget_the_placeholder_gives_way_to_compaction() {
        let (mut a, _) = loaded(session(6, 3));
        for budget in 30..80 {
            let Ok(plan) = a.plan(budget) else { continue };
            let protected: usize = plan
                .live
                .iter()
                .map(|&s| s as usize)
                .filter(|&i| a.cols.turn[i] == 5)
                .map(|i| plan.tokens_before[i] as usize)
                .sum();
            if protected <= plan.target {
                assert!(
                    plan.fits,
                    "{budget}: {} > {}",
                    plan.total_after, plan.target
                );
            }
            assert!(plan.total_after <= budget, "{budget}");
            if plan.placeholder.is_none() {
                assert!(plan
                    .live
                    .iter()
                    .all(|&s| plan.stage[s as usize] != Stage::Hard));
            }
        }
    }

    #[test]
    fn hard_trimmed_request_turns_go_to_compaction() {
        // user requests in turns of their own (as the engine builds them), tool steps after
        let mut items = vec![];
        for t in 0..10u32 {
            let seq = u64::from(t) * 3;
            let request = format!("request {t}: {}", "please look at this ".repeat(8));
            items.push(message(seq, 2 * t, role::USER, &request));
            let mut call = message(
                seq + 1,
                2 * t + 1,
                role::ASSISTANT,
                &"let me look ".repeat(30),
            );
            call.flags = flags::HAS_TOOL_CALL;
            items.push(call);
            items.push(message(seq + 2, 2 * t + 1, role::TOOL, "ok\nok"));
        }
        let (mut a, full) = loaded(items);
        let plan = a.plan(full / 3).expect("plan");
        let hard_requests: Vec<u32> = plan
            .live
            .iter()
            .map(|&s| s as usize)
            .filter(|&i| plan.stage[i] == Stage::Hard && a.cols.role[i] == role::USER)
            .map(|i| a.cols.turn[i])
            .collect();
        assert!(
            !hard_requests.is_empty(),
            "some request turn is hard-trimmed"
        );
        for t in &hard_requests {
            assert!(
                plan.compaction_turns.contains(t),
                "{t}: {:?}",
                plan.compaction_turns
            );
        }
        // a hard-trimmed tool step alone is only counted in the placeholder
        let steps: Vec<u32> = plan
            .live
            .iter()
            .map(|&s| s as usize)
            .filter(|&i| plan.stage[i] == Stage::Hard && a.cols.role[i] == role::TOOL)
            .map(|i| a.cols.turn[i])
            .collect();
        assert!(steps.iter().all(|t| !plan.compaction_turns.contains(t)));
        let mut sorted = plan.compaction_turns.clone();
        sorted.dedup();
        sorted.sort_unstable();
        assert_eq!(sorted, plan.compaction_turns, "sorted, once each");
        assert!(plan.placeholder.is_some());
    }

    #[test]
    fn compaction_never_takes_the_latest_turn_and_stops_when_it_fits() {
        let mut items = session(8, 1);
        for it in &mut items {
            it.flags |= flags::FEEDBACK | flags::STRUCTURAL;
        }
        let (mut a, full) = loaded(items);
        let plan = a.plan(full / 4).expect("compaction");
        assert!(
            !plan.compaction_turns.contains(&7),
            "{:?}",
            plan.compaction_turns
        );
        assert_eq!(plan.status[by_id(&plan, "hist.22") as usize], Status::Kept);
        let mild = a.plan(full * 7 / 10).expect("compaction");
        assert!(mild.compaction_turns.len() < plan.compaction_turns.len());
        let mut sorted = plan.compaction_turns.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, plan.compaction_turns, "oldest first");
    }
}
