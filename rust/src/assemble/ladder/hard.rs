//! Hard trim (DESIGN.md §4 step 2): remove whole history turn groups (a tool call and its
//! results are one group), lowest score first, while a window they occupy is over; the removed
//! turns are listed in one placeholder ([`super::placeholder`]). A request and the answer to it
//! ([`Groups::pair`]) are removed together or not at all.

use super::{flags, Groups, Reason, Run, Stage, Status};
use crate::assemble::score::scores;
use crate::assemble::{text, PLACEHOLDER_OVERHEAD};

impl Run<'_> {
    /// History turn groups and their scores, built once per plan.
    pub(super) fn take_groups(&mut self) -> (Groups, Vec<f32>) {
        self.groups.take().unwrap_or_else(|| {
            let c = self.c;
            let order = &self.o.turns.slots;
            let mut g = Groups::build(order, &c.turn, &c.flags, &c.seq, &c.window);
            g.pair(order, &c.kind, &c.role);
            let s = scores(&g.flags, self.cfg.weights);
            (g, s)
        })
    }

    /// Never hard-trimmed: PROTECTED items, the preamble, the protected tail, the latest turn.
    pub(super) fn group_protected(&self, g: &Groups, i: usize) -> bool {
        g.flags[i] & flags::PROTECTED != 0
            || self.hist.is_preamble(g.first_seq[i])
            || self.hist.in_tail(g.turn[i])
    }

    /// Never removed at all: PROTECTED items and the latest user message's group.
    pub(super) fn group_pinned(&self, g: &Groups, i: usize) -> bool {
        g.flags[i] & flags::PROTECTED != 0 || self.hist.latest_user_turn == Some(g.turn[i])
    }

    /// Hard trim: remove whole turn groups scoring at most `hard_trim_max_score`, lowest first
    /// (ties: oldest), while a window they occupy is over its allocation. A request and its
    /// answer are one unit: removed together, when neither is protected and both score at most
    /// the threshold (the unit scores its higher score), so the kept history never holds one
    /// of them without the other.
    pub(super) fn hard(&mut self) {
        let mut over = self.over_mask();
        if over == 0 || self.o.turns.slots.is_empty() {
            return;
        }
        let (groups, scores) = self.take_groups();
        let history_mask = groups.windows.iter().fold(0, |m, w| m | w);
        let max = self.cfg.hard_trim_max_score;
        let score = |g: usize| groups.unit(g).map(|u| scores[u]).fold(f32::MIN, f32::max);
        let windows = |g: usize| groups.unit(g).fold(0, |m, u| m | groups.windows[u]);
        // each unit once, at its first group
        let mut eligible: Vec<usize> = (0..groups.len())
            .filter(|&g| groups.partner[g].is_none_or(|p| p > g))
            .filter(|&g| {
                score(g) <= max && !groups.unit(g).any(|u| self.group_protected(&groups, u))
            })
            .collect();
        eligible.sort_by(|&a, &b| {
            score(a)
                .total_cmp(&score(b))
                .then(groups.first_seq[a].cmp(&groups.first_seq[b]))
        });
        // Removals charge a bound for the placeholder (counting its text each time would cost
        // more than the removal); the exact count is taken when the overflow gets within the
        // bound, so a removal the exact count makes unnecessary does not happen.
        let bound = self.placeholder_bound();
        for g in eligible {
            if over & history_mask != 0 && self.near_the_end(over & history_mask, bound) {
                self.charge_exact();
                over = self.over_mask();
            }
            if over & history_mask == 0 {
                break;
            }
            if over & windows(g) == 0 {
                continue;
            }
            if self.removed.is_none() && !self.worth_a_placeholder(&groups, g) {
                continue;
            }
            let score = score(g);
            for u in groups.unit(g) {
                let turn = groups.turn[u];
                self.remove_group(&groups, u, Stage::Hard, Reason::Removed { turn, score });
            }
            self.charge(bound, true);
            over = self.over_mask();
        }
        self.charge_exact();
        self.groups = Some((groups, scores));
    }

    /// Whether the placeholder is charged at its bound and the overflow of `mask` is within it.
    fn near_the_end(&self, mask: u64, bound: u32) -> bool {
        self.removed.as_ref().is_some_and(|r| r.estimated) && self.deficit(mask) <= bound as usize
    }

    /// Whether removing the unit of group `i` (it and its partner) alone saves more than the
    /// placeholder it would need.
    fn worth_a_placeholder(&self, g: &Groups, i: usize) -> bool {
        let held: usize = g.unit(i).map(|u| self.group_tokens(g, u)).sum();
        let (first, last) = g.unit(i).fold((u32::MAX, 0), |(a, b), u| {
            (a.min(g.turn[u]), b.max(g.turn[u]))
        });
        let k = g.unit(i).count();
        let text = text::removed_turns([(first, last)], k, held as u64);
        let cost = self.count(&text).saturating_add(PLACEHOLDER_OVERHEAD);
        held > cost as usize
    }

    /// Drop every item of group `g`; returns the tokens it rendered.
    pub(super) fn remove_group(
        &mut self,
        g: &Groups,
        i: usize,
        stage: Stage,
        reason: Reason,
    ) -> usize {
        let o = self.o;
        let range = g.start[i] as usize..g.end[i] as usize;
        let mut freed = 0usize;
        let mut before = 0u64;
        let mut first: Option<(u64, u8)> = None;
        for &s in o.turns.slots.get(range).unwrap_or(&[]) {
            let x = s as usize;
            if self.status[x] == Status::Dropped {
                continue;
            }
            freed += self.after[x] as usize;
            before += u64::from(self.c.tokens[x]);
            let at = (self.c.seq[x], self.c.window[x]);
            first = Some(first.map_or(at, |f| f.min(at)));
            self.decide(s, Status::Dropped, stage, reason, 0);
        }
        if let (Stage::Hard, Some((seq, window))) = (stage, first) {
            self.note_removed(g.turn[i], before, seq, window);
        }
        freed
    }

    /// Tokens the group's live items render now.
    pub(super) fn group_tokens(&self, g: &Groups, i: usize) -> usize {
        let range = g.start[i] as usize..g.end[i] as usize;
        self.o
            .turns
            .slots
            .get(range)
            .unwrap_or(&[])
            .iter()
            .map(|&s| self.after[s as usize] as usize)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{assembly, by_id, conversation, ids, loaded, session};
    use super::*;
    use crate::assemble::{kind, role, Assembly, Plan, PLACEHOLDER_ID};

    /// The pairs of a request and its answer (slots of the user message and of the assistant
    /// message right after it) that `plan` parts: one dropped, the other rendered. The latest
    /// request is left out (it is never removed; its answer may go when the budget demands).
    fn parted(a: &Assembly, plan: &Plan) -> Vec<(u32, u32, Stage, Stage)> {
        let c = &a.cols;
        let mut messages: Vec<u32> = plan
            .live
            .iter()
            .copied()
            .filter(|&s| c.kind[s as usize] == kind::MESSAGE)
            .collect();
        messages.sort_by_key(|&s| c.seq[s as usize]);
        let latest = messages
            .iter()
            .rev()
            .find(|&&s| c.role[s as usize] == role::USER)
            .copied();
        let dropped = |s: u32| plan.status[s as usize] == Status::Dropped;
        messages
            .windows(2)
            .filter(|w| {
                c.role[w[0] as usize] == role::USER && c.role[w[1] as usize] == role::ASSISTANT
            })
            .filter(|w| Some(w[0]) != latest && dropped(w[0]) != dropped(w[1]))
            .map(|w| {
                (
                    w[0],
                    w[1],
                    plan.stage[w[0] as usize],
                    plan.stage[w[1] as usize],
                )
            })
            .collect()
    }

    #[test]
    fn hard_trim_removes_whole_groups() {
        let mut a = assembly();
        a.upsert(session(12, 1)).expect("valid");
        let full = a.plan(1_000_000).expect("fits").total_before;
        let plan = a.plan(full / 2).expect("hard");
        assert!(plan.fits, "{} > {}", plan.total_after, plan.target);
        let dropped: Vec<u32> = plan
            .live
            .iter()
            .copied()
            .filter(|&s| plan.status[s as usize] == Status::Dropped)
            .collect();
        assert!(!dropped.is_empty());
        for &s in &dropped {
            let turn = a.cols.turn[s as usize];
            let group: Vec<u32> = plan
                .live
                .iter()
                .copied()
                .filter(|&x| a.cols.turn[x as usize] == turn)
                .collect();
            assert!(
                group
                    .iter()
                    .all(|&x| plan.status[x as usize] == Status::Dropped),
                "atomic"
            );
            assert_eq!(plan.tokens_after[s as usize], 0);
            if plan.stage[s as usize] == Stage::Hard {
                assert!(plan
                    .reason(s)
                    .starts_with(&format!("turn {turn} removed (score ")));
            }
        }
        let ph = plan.placeholder.as_ref().expect("placeholder");
        assert!(
            ph.text
                .contains("earlier turns removed to fit the budget: turns "),
            "{}",
            ph.text
        );
        let hist: Vec<&str> = plan
            .history_order
            .iter()
            .map(|&s| plan.node_id(s))
            .collect();
        assert_eq!(hist.iter().filter(|&&h| h == PLACEHOLDER_ID).count(), 1);
        let sum: u64 =
            plan.tokens_after.iter().map(|&t| u64::from(t)).sum::<u64>() + u64::from(ph.tokens);
        assert_eq!(sum as usize, plan.total_after);
        // the latest turn is never removed
        assert_eq!(plan.status[by_id(&plan, "hist.34") as usize], Status::Kept);
    }

    #[test]
    fn high_scoring_and_protected_groups_are_not_hard_trimmed() {
        let mut items = session(8, 1);
        for it in &mut items[3..6] {
            it.flags |= flags::FEEDBACK | flags::STRUCTURAL; // turn 1 scores above 0.6
        }
        items[9].flags |= flags::PROTECTED; // turn 3's user message
        let (mut a, full) = loaded(items);
        let plan = a.plan(full / 2).expect("plan");
        for id in [
            "hist.4", "hist.5", "hist.6", "hist.10", "hist.11", "hist.12",
        ] {
            let s = by_id(&plan, id) as usize;
            assert_ne!(plan.stage[s], Stage::Hard, "{id}");
        }
        assert_eq!(plan.status[by_id(&plan, "hist.10") as usize], Status::Kept);
        assert!(plan.placeholder.is_some());
    }

    #[test]
    fn a_request_and_its_answer_are_removed_together() {
        // each message its own turn, as the engine builds them: hard trim used to remove the
        // plain answers and keep their requests (explicit input scores above the threshold),
        // and a short request ("yes") alone, keeping its answer
        for steps in [0, 1, 2] {
            let items = conversation(14, |t| if t % 4 == 1 { steps } else { 0 });
            let (mut a, full) = loaded(items);
            let mut hard = 0;
            for budget in (full / 10..full).step_by((full / 60).max(1)) {
                let Ok(plan) = a.plan(budget) else { continue };
                hard += usize::from(plan.placeholder.is_some());
                let parted = parted(&a, &plan);
                assert!(
                    parted.is_empty(),
                    "steps {steps}, budget {budget}: {:?}",
                    parted
                        .iter()
                        .map(|&(u, x, su, sx)| (plan.node_id(u), su, plan.node_id(x), sx))
                        .collect::<Vec<_>>()
                );
                assert!(plan.fits || plan.total_after <= budget);
            }
            assert!(hard > 10, "hard trim ran: {hard}");
        }
    }

    #[test]
    fn a_request_above_the_threshold_keeps_its_answer_from_hard_trim() {
        // request 0 is explicit input (0.65 and more): its answer is not hard-trimmed alone,
        // the pair goes to compaction instead; a short request goes with its answer
        let (mut a, full) = loaded(conversation(8, |_| 0));
        let plan = a.plan(full * 2 / 3).expect("plan");
        assert!(plan.placeholder.is_some(), "something was hard-trimmed");
        for (u, x) in [("hist.0", "hist.1"), ("hist.3", "hist.4")] {
            let (u, x) = (by_id(&plan, u) as usize, by_id(&plan, x) as usize);
            assert_eq!(plan.status[u], plan.status[x], "{u} {x}");
            assert_eq!(plan.stage[u], plan.stage[x], "{u} {x}");
        }
        let request = by_id(&plan, "hist.0") as usize;
        assert_ne!(
            plan.stage[request],
            Stage::Hard,
            "explicit input is never hard-trimmed"
        );
    }

    #[test]
    fn a_turn_smaller_than_its_placeholder_is_not_removed_alone() {
        let mut a = assembly();
        a.upsert(session(3, 0)).expect("valid");
        let full = a.plan(1_000_000).expect("fits").total_before;
        let plan = a.plan(full - 2).expect("plan");
        assert!(
            plan.placeholder.is_none(),
            "{:?}",
            ids(&plan, &plan.history_order)
        );
        assert!(plan
            .live
            .iter()
            .all(|&s| plan.stage[s as usize] != Stage::Hard));
    }
}
