//! Backfill (after the ladder): the stages cut in steps (a whole turn group, a whole tool
//! result), so a plan usually ends below its target, sometimes far below. When it does, the cuts
//! are undone, most valuable first, as long as each fits in the room left:
//!
//! 1. dropped grains, most important first (lowest priority number, then rank, then seq), to
//!    their best form that fits (whole, soft-trimmed, cleared or folded stand-in);
//! 2. hard-trimmed and compaction-picked turn groups, newest first, whole (a tool call comes
//!    back with its results, a request with its answer), the removed-turns placeholder
//!    recounted for each (a restored compaction pick is no longer to be summarized);
//! 3. folded branches back to one stand-in per grain, then folded grains to their text, most
//!    important first;
//! 4. soft-trimmed and cleared tool results, newest first, to their text or their head + tail;
//!    then, while the plan uses less than 95 % of its target (and has no turns to summarize),
//!    to a head + tail cut to the room left.
//!
//! Each pass is one walk over the items it concerns: linear in the session.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::placeholder::Removed;
use super::{Groups, Reason, Run, Stage, Status};
use crate::assemble::{text, PLACEHOLDER_OVERHEAD};

/// The use of its target under which backfill cuts a soft-trimmed item to the room left.
const MIN_USE_PERCENT: usize = 95;
/// Tokens the head + tail marker (`[... N chars trimmed ...]`) takes, about.
const HEAD_TAIL_MARKER: usize = 12;
/// Counts tried when fitting a head + tail to the room left.
const FIT_TRIES: usize = 8;
/// A head + tail within this share of the room left is close enough.
const FIT_PERCENT: usize = 98;

/// What an item can render as, most valuable first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Form {
    Full,
    Trimmed,
    Cleared,
    Folded,
    Gone,
}

const FORMS: [Form; 4] = [Form::Full, Form::Trimmed, Form::Cleared, Form::Folded];

fn form_of(status: Status) -> Form {
    match status {
        Status::Kept => Form::Full,
        Status::Trimmed => Form::Trimmed,
        Status::Cleared => Form::Cleared,
        Status::Folded => Form::Folded,
        Status::Dropped => Form::Gone,
    }
}

/// The slots of group `g` in `order` (the order the groups were built from).
fn slots_of<'o>(order: &'o [u32], groups: &Groups, g: usize) -> &'o [u32] {
    let range = groups.start[g] as usize..groups.end[g] as usize;
    order.get(range).unwrap_or(&[])
}

impl Run<'_> {
    /// Undo cuts, most valuable first, while they fit below the target.
    pub(super) fn backfill(&mut self) {
        if self.room() == 0 {
            return;
        }
        let slots = &self.o.context.slots;
        for &s in slots {
            if matches!(self.reasons[s as usize], Reason::Dropped { .. }) {
                self.upgrade(s);
            }
        }
        self.restore_removed_groups();
        self.unfold_branches();
        for &s in slots {
            if self.status[s as usize] == Status::Folded {
                self.upgrade(s);
            }
        }
        let c = self.c;
        let mut soft: Vec<u32> = (0..c.alive.len() as u32)
            .filter(|&s| self.stage[s as usize] == Stage::Soft)
            .collect();
        soft.sort_unstable_by_key(|&s| std::cmp::Reverse(c.history_key(s)));
        for &s in &soft {
            self.upgrade(s);
        }
        self.fit_to_room(&soft);
        self.reallocate();
    }

    /// Last resort, while the plan uses less than [`MIN_USE_PERCENT`] of its target: the
    /// soft-cut items (newest first) whose fixed forms all missed the room left get a head +
    /// tail cut to that room. The fixed head + tail keeps `soft_keep_chars` at each end and
    /// exists only past `soft_trim_chars`, so a result of dense tokens under that length (400
    /// lines of `x = 1`: 2,400 chars, 2,000 tokens) had only its one-line placeholder, and a
    /// long one only its 3,000-char cut, however much room was left. A plan at 95 % or more
    /// is left as it was, and so is a plan with turns to summarize: the compaction measures
    /// its landing with the summary in place.
    fn fit_to_room(&mut self, soft: &[u32]) {
        if !self.compaction.0.is_empty() {
            return; // the compaction's landing sizes this plan (assemble.compact)
        }
        for &s in soft {
            if self.total() * 100 >= self.target * MIN_USE_PERCENT {
                return;
            }
            let i = s as usize;
            if !matches!(self.status[i], Status::Trimmed | Status::Cleared) {
                continue;
            }
            let limit = self.after[i] as usize + self.room();
            if let Some((text, tokens, reason)) = self.head_tail_within(i, limit) {
                if tokens > self.after[i] {
                    self.repl[i] = Some(text);
                    self.decide(s, Status::Trimmed, Stage::Soft, reason, tokens);
                }
            }
        }
    }

    /// The largest head + tail of item `i` found within `limit` tokens (its overhead
    /// included), with its tokens: the kept length starts from the item's own chars per
    /// token, then is scaled by each count's miss, within the lengths known to fit and not
    /// to, a few counts at most (the cut snaps to lines, so the count is a step function).
    fn head_tail_within(&self, i: usize, limit: usize) -> Option<(Arc<str>, u32, Reason)> {
        let c = self.c;
        let overhead = c.overhead[i] as usize;
        let room = limit.checked_sub(overhead + HEAD_TAIL_MARKER)?;
        let chars = c.chars[i] as usize;
        let body = (c.tokens[i] as usize).saturating_sub(overhead).max(1);
        // keep lengths known to fit (`lo`, or nothing) and known not to (`hi`)
        let (mut lo, mut hi) = (0usize, chars.saturating_sub(1) / 2 + 1);
        let mut keep = room * chars / body / 2;
        let mut best = None;
        for _ in 0..FIT_TRIES {
            if keep <= lo || keep >= hi {
                keep = lo + (hi - lo) / 2;
                if keep <= lo {
                    break;
                }
            }
            let Some((text, removed)) = text::head_tail(&c.texts[i], keep) else {
                hi = keep;
                continue;
            };
            let tokens = self.count(&text).saturating_add(c.overhead[i]);
            let got = (tokens as usize).saturating_sub(overhead).max(1);
            if tokens as usize <= limit {
                lo = keep;
                let removed = u32::try_from(removed).unwrap_or(u32::MAX);
                let reason = Reason::HeadTail {
                    chars: c.chars[i],
                    removed,
                };
                best = Some((Arc::from(text.as_str()), tokens, reason));
                if tokens as usize * 100 >= limit * FIT_PERCENT {
                    break;
                }
            } else {
                hi = keep;
            }
            keep = keep * limit.saturating_sub(overhead) / got;
        }
        best
    }

    /// Tokens left below the target.
    fn room(&self) -> usize {
        self.target.saturating_sub(self.total())
    }

    /// Tokens item `i` renders in `form`, if it has that form.
    fn form_tokens(&self, i: usize, form: Form) -> Option<u32> {
        let d = &self.derived[i];
        let count = match form {
            Form::Full => return Some(self.c.tokens[i]),
            Form::Trimmed => d.trimmed.as_ref().map(|t| t.1),
            Form::Cleared => d.cleared.as_ref().map(|t| t.1),
            Form::Folded => d.folded.as_ref().map(|t| t.1),
            Form::Gone => return Some(0),
        };
        count.map(|n| n.saturating_add(self.c.overhead[i]))
    }

    /// Render `s` in `form` (one its stage built for it).
    fn set_form(&mut self, s: u32, form: Form) {
        let i = s as usize;
        let Some(tokens) = self.form_tokens(i, form) else {
            return;
        };
        let (text, status, stage, reason): (Option<Arc<str>>, _, _, _) = match form {
            Form::Full => (None, Status::Kept, Stage::None, Reason::None),
            Form::Trimmed => {
                let Some((t, _, r)) = self.derived[i].trimmed.clone() else {
                    return;
                };
                (Some(t), Status::Trimmed, Stage::Soft, r)
            }
            Form::Cleared => {
                let Some((t, _)) = self.derived[i].cleared.clone() else {
                    return;
                };
                (Some(t), Status::Cleared, Stage::Soft, Reason::Cleared)
            }
            Form::Folded => {
                let Some((t, _)) = self.derived[i].folded.clone() else {
                    return;
                };
                (Some(t), Status::Folded, Stage::Fold, Reason::Folded)
            }
            Form::Gone => return,
        };
        self.repl[i] = text;
        self.decide(s, status, stage, reason, tokens);
    }

    /// Put `s` back in the most valuable form better than its current one that fits; whether
    /// it changed.
    fn upgrade(&mut self, s: u32) -> bool {
        let i = s as usize;
        let now = form_of(self.status[i]);
        let limit = self.after[i] as usize + self.room();
        let best = FORMS
            .iter()
            .copied()
            .filter(|&f| f < now)
            .find(|&f| self.form_tokens(i, f).is_some_and(|t| t as usize <= limit));
        match best {
            Some(f) => {
                self.set_form(s, f);
                true
            }
            None => false,
        }
    }

    /// Hard-trimmed and compaction-picked turn groups back, newest first, whole; each in full
    /// if it fits, else with its tool results at their cheapest soft form. A request and its
    /// answer come back together or not at all (taken at the newer of the two).
    fn restore_removed_groups(&mut self) {
        let Some((groups, scores)) = self.groups.take() else {
            return;
        };
        for g in (0..groups.len()).rev() {
            if self.room() == 0 {
                break;
            }
            let Some(stage) = self.removed_by(&groups, g) else {
                continue;
            };
            let partner = groups.partner.get(g).copied().flatten();
            let unit: Vec<usize> = match partner {
                // the older one of a pair removed together is taken with the newer one
                Some(p) if p > g => continue,
                Some(p) => match self.removed_by(&groups, p) {
                    Some(other) if other == stage => vec![p, g],
                    // a partner removed otherwise: never restore one of the two alone
                    Some(_) => continue,
                    None if self.partly_dropped(&groups, p) => continue,
                    None => vec![g],
                },
                None => vec![g],
            };
            let slots: Vec<u32> = unit
                .iter()
                .flat_map(|&u| slots_of(&self.o.turns.slots, &groups, u))
                .copied()
                .collect();
            let full: usize = slots
                .iter()
                .map(|&s| self.c.tokens[s as usize] as usize)
                .sum();
            if full > self.room() {
                for &s in &slots {
                    self.soft_forms(s as usize);
                }
            }
            let cheapest = |run: &Self, s: u32| -> (Form, usize) {
                let i = s as usize;
                [Form::Cleared, Form::Trimmed, Form::Full]
                    .into_iter()
                    .filter_map(|f| run.form_tokens(i, f).map(|t| (f, t as usize)))
                    .min_by_key(|&(_, t)| t)
                    .unwrap_or((Form::Full, run.c.tokens[i] as usize))
            };
            let lean: usize = slots.iter().map(|&s| cheapest(self, s).1).sum();
            let held = |run: &Self, u: usize| -> u64 {
                slots_of(&run.o.turns.slots, &groups, u)
                    .iter()
                    .map(|&s| u64::from(run.c.tokens[s as usize]))
                    .sum()
            };
            let delta = if stage == Stage::Hard {
                let Some(delta) = self.unremove_all(&groups, &unit, held) else {
                    continue;
                };
                delta
            } else {
                0
            };
            let room = self.room() as i64 - delta;
            let forms: Option<Vec<Form>> = if full as i64 <= room {
                Some(vec![Form::Full; slots.len()])
            } else if (lean as i64) <= room {
                Some(slots.iter().map(|&s| cheapest(self, s).0).collect())
            } else {
                None
            };
            match (forms, stage) {
                (Some(forms), Stage::Hard) => {
                    for (&s, f) in slots.iter().zip(forms) {
                        self.set_form(s, f);
                    }
                    let first = self.removed.as_ref().map(|r| r.seq);
                    if unit.iter().any(|&u| first == Some(groups.first_seq[u])) {
                        self.refind_first_removed();
                    }
                    self.charge_restored();
                }
                (Some(forms), _) => {
                    for (&s, f) in slots.iter().zip(forms) {
                        self.set_form(s, f);
                    }
                    for &u in &unit {
                        let turn = groups.turn[u];
                        self.compaction.0.retain(|&t| t != turn);
                        self.compaction.1 =
                            self.compaction.1.saturating_sub(held(self, u) as usize);
                    }
                }
                (None, Stage::Hard) => {
                    for &u in &unit {
                        self.reremove(groups.turn[u], held(self, u));
                    }
                }
                (None, _) => {}
            }
        }
        self.groups = Some((groups, scores));
    }

    /// The stage that removed every item of group `g` (hard trim or compaction), if one did.
    fn removed_by(&self, groups: &Groups, g: usize) -> Option<Stage> {
        let slots = slots_of(&self.o.turns.slots, groups, g);
        let stage = self.stage[*slots.first()? as usize];
        let all = slots.iter().all(|&s| {
            self.status[s as usize] == Status::Dropped && self.stage[s as usize] == stage
        });
        (all && matches!(stage, Stage::Hard | Stage::Compaction)).then_some(stage)
    }

    /// Whether some item of group `g` is dropped.
    fn partly_dropped(&self, groups: &Groups, g: usize) -> bool {
        slots_of(&self.o.turns.slots, groups, g)
            .iter()
            .any(|&s| self.status[s as usize] == Status::Dropped)
    }

    /// Take the turns of `unit` out of the placeholder (group `u`'s items held `held(u)`
    /// tokens); the change of the placeholder's tokens, not yet charged. None (and nothing
    /// changed) when a turn is not in it.
    fn unremove_all(
        &mut self,
        groups: &Groups,
        unit: &[usize],
        held: impl Fn(&Self, usize) -> u64,
    ) -> Option<i64> {
        let mut delta = None;
        for (n, &u) in unit.iter().enumerate() {
            let tokens = held(self, u);
            match self.unremove(groups.turn[u], tokens) {
                Some(d) => delta = Some(d),
                None => {
                    for &v in &unit[..n] {
                        let tokens = held(self, v);
                        self.reremove(groups.turn[v], tokens);
                    }
                    return None;
                }
            }
        }
        delta
    }
    /// Take `turn` out of the placeholder (its items held `before` tokens); the change of the
    /// placeholder's tokens, not yet charged.
    fn unremove(&mut self, turn: u32, before: u64) -> Option<i64> {
        let r = self.removed.as_mut()?;
        if !r.remove(turn) {
            return None;
        }
        r.tokens = r.tokens.saturating_sub(before);
        let old = i64::from(r.charged);
        if r.turns == 0 {
            return Some(-old);
        }
        let text = Self::placeholder_text(r);
        let new = self.count(&text).saturating_add(PLACEHOLDER_OVERHEAD);
        Some(i64::from(new) - old)
    }

    /// Undo [`Self::unremove`].
    fn reremove(&mut self, turn: u32, before: u64) {
        if let Some(r) = self.removed.as_mut() {
            r.insert(turn);
            r.tokens += before;
        }
    }

    /// Charge the placeholder after a group came back (or drop it when none is left removed).
    fn charge_restored(&mut self) {
        let Some(r) = &self.removed else {
            return;
        };
        if r.turns > 0 {
            self.charge_exact();
            return;
        }
        if let Some(w) = self.charged_window.take() {
            self.used[w] -= r.charged as usize;
        }
        self.removed = None;
    }

    /// Where the placeholder goes: the first item still removed by hard trim.
    fn refind_first_removed(&mut self) {
        let c = self.c;
        let first = self
            .o
            .history
            .slots
            .iter()
            .map(|&s| s as usize)
            .find(|&i| self.status[i] == Status::Dropped && self.stage[i] == Stage::Hard);
        if let (Some(r), Some(i)) = (self.removed.as_mut(), first) {
            r.seq = c.seq[i];
            r.window = c.window[i];
        }
    }

    /// Folded branches back to one stand-in per member, when that fits.
    fn unfold_branches(&mut self) {
        let (c, o) = (self.c, self.o);
        let heads: Vec<u32> = o
            .context
            .slots
            .iter()
            .copied()
            .filter(|&s| matches!(self.reasons[s as usize], Reason::BranchHead { .. }))
            .collect();
        if heads.is_empty() {
            return;
        }
        let mut members: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for &s in &o.context.slots {
            if self.reasons[s as usize] == Reason::Branch {
                let branch = text::branch_of(&c.node_ids[s as usize]);
                members.entry(branch).or_default().push(s);
            }
        }
        for head in heads {
            let branch = text::branch_of(&c.node_ids[head as usize]);
            let all: Vec<u32> = std::iter::once(head)
                .chain(members.get(branch).into_iter().flatten().copied())
                .collect();
            let cost: Option<usize> = all
                .iter()
                .map(|&s| {
                    self.form_tokens(s as usize, Form::Folded)
                        .map(|t| t as usize)
                })
                .sum();
            let now = self.after[head as usize] as usize;
            if cost.is_some_and(|t| t <= now + self.room()) {
                for s in all {
                    self.set_form(s, Form::Folded);
                }
            }
        }
    }
}

impl Removed {
    /// Take turn `t` out of the ranges, splitting the range holding it; whether it was there.
    pub(super) fn remove(&mut self, t: u32) -> bool {
        let Some((a, b)) = self.ranges.range(..=t).next_back().map(|(&a, &b)| (a, b)) else {
            return false;
        };
        if t > b {
            return false;
        }
        self.ranges.remove(&a);
        if a < t {
            self.ranges.insert(a, t - 1);
        }
        if t < b {
            self.ranges.insert(t + 1, b);
        }
        self.turns -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{assembly, by_id, grain, loaded, message, session, TOOL};
    use super::*;
    use crate::assemble::{flags, role, ItemSpec, PLACEHOLDER_ID};

    fn dropped(plan: &crate::assemble::Plan) -> usize {
        plan.live
            .iter()
            .filter(|&&s| plan.status[s as usize] == Status::Dropped)
            .count()
    }

    /// 400 small tool steps: a user request, a tool call, its short result, an answer.
    fn small_steps(n: u32) -> Vec<ItemSpec> {
        let mut items = vec![];
        for t in 0..n {
            let seq = u64::from(t) * 4;
            let turn = t * 3;
            items.push(message(seq, turn, role::USER, &format!("step {t}")));
            let mut call = message(seq + 1, turn + 1, role::ASSISTANT, "ls");
            call.flags = flags::HAS_TOOL_CALL;
            items.push(call);
            items.push(message(seq + 2, turn + 1, role::TOOL, &format!("ok {t}")));
            items.push(message(
                seq + 3,
                turn + 2,
                role::ASSISTANT,
                &format!("done {t}"),
            ));
        }
        items
    }

    #[test]
    fn small_steps_fill_the_target_when_cut() {
        let (mut a, full) = loaded(small_steps(400));
        for budget in [300, 1_500, 6_000, full / 2] {
            let plan = a.plan(budget).expect("fits");
            assert!(
                plan.fits,
                "{budget}: {} > {}",
                plan.total_after, plan.target
            );
            assert!(dropped(&plan) > 0);
            assert!(
                plan.total_after * 100 >= plan.target * 95,
                "{budget}: {} of {}",
                plan.total_after,
                plan.target
            );
        }
    }

    #[test]
    fn restored_groups_keep_their_tool_results_and_the_newest_come_back_first() {
        let (mut a, full) = loaded(session(30, 12));
        let plan = a.plan(full / 5).expect("fits");
        assert!(plan.fits);
        assert!(
            plan.total_after * 100 >= plan.target * 95,
            "{} of {}",
            plan.total_after,
            plan.target
        );
        // a call and its result are kept or removed together
        for t in 0..30u32 {
            let ids = [3 * t + 2, 3 * t + 3].map(|s| by_id(&plan, &format!("hist.{s}")));
            let gone = ids.map(|s| plan.status[s as usize] == Status::Dropped);
            assert_eq!(gone[0], gone[1], "turn {t}");
        }
        // what hard trim removed and backfill did not restore is older than what it restored
        let hard: Vec<u64> = plan
            .live
            .iter()
            .filter(|&&s| plan.stage[s as usize] == Stage::Hard)
            .map(|&s| a.cols.seq[s as usize])
            .collect();
        let ph = plan.placeholder.as_ref().expect("something stays removed");
        assert!(
            ph.text.contains(&format!("{} tokens]", {
                let t: u64 = plan
                    .live
                    .iter()
                    .filter(|&&s| plan.stage[s as usize] == Stage::Hard)
                    .map(|&s| u64::from(plan.tokens_before[s as usize]))
                    .sum();
                t
            })),
            "{}",
            ph.text
        );
        assert!(!hard.is_empty());
        let exact = a.config.counter.count(&ph.text, true) as u32 + PLACEHOLDER_OVERHEAD;
        assert_eq!(ph.tokens, exact);
        let order: Vec<&str> = plan
            .history_order
            .iter()
            .map(|&s| plan.node_id(s))
            .collect();
        assert_eq!(order.iter().filter(|&&h| h == PLACEHOLDER_ID).count(), 1);
    }

    #[test]
    fn dropped_grains_come_back_most_important_first() {
        let mut items: Vec<ItemSpec> = (0..300u64)
            .map(|i| {
                grain(
                    &format!("rag.d.{i}"),
                    &format!("doc {i}"),
                    TOOL,
                    10 + (i as i64 % 7),
                    i,
                )
            })
            .collect();
        items.push(message(1_000, 0, role::USER, "hi"));
        let (mut a, _) = loaded(items);
        let plan = a.plan(400).expect("fits");
        assert!(plan.fits);
        assert!(
            plan.total_after * 100 >= plan.target * 95,
            "{} of {}",
            plan.total_after,
            plan.target
        );
        let kept_max = plan
            .live
            .iter()
            .filter(|&&s| {
                plan.status[s as usize] == Status::Kept
                    && a.cols.kind[s as usize] == crate::assemble::kind::CONTEXT
            })
            .map(|&s| a.cols.priority[s as usize])
            .max()
            .expect("some kept");
        let dropped_min = plan
            .live
            .iter()
            .filter(|&&s| plan.status[s as usize] == Status::Dropped)
            .map(|&s| a.cols.priority[s as usize])
            .min()
            .expect("some dropped");
        assert!(kept_max <= dropped_min, "{kept_max} > {dropped_min}");
    }

    #[test]
    fn removed_ranges_split_and_merge_back() {
        let mut r = Removed::default();
        for t in 3..=9 {
            r.insert(t);
        }
        assert!(r.remove(6));
        assert!(!r.remove(6) && !r.remove(2) && !r.remove(10));
        let ranges: Vec<(u32, u32)> = r.ranges.iter().map(|(&a, &b)| (a, b)).collect();
        assert_eq!(ranges, vec![(3, 5), (7, 9)]);
        assert!(r.remove(3) && r.remove(9));
        assert_eq!(r.turns, 4);
        r.insert(6);
        let ranges: Vec<(u32, u32)> = r.ranges.iter().map(|(&a, &b)| (a, b)).collect();
        assert_eq!(ranges, vec![(4, 8)]);
    }

    /// A result of dense tokens under `soft_trim_chars` (no fixed head + tail) and too large
    /// for the room, then a question and its answer (the protected tail).
    fn dense_result(lines: usize) -> Vec<ItemSpec> {
        let mut call = message(2, 0, role::ASSISTANT, "let me read it");
        call.flags = flags::HAS_TOOL_CALL;
        vec![
            message(1, 0, role::USER, "show me gen.py"),
            call,
            message(3, 0, role::TOOL, &"x = 1\n".repeat(lines)),
            message(4, 1, role::USER, "what is in it?"),
            message(5, 1, role::ASSISTANT, "x = 1, again and again."),
        ]
    }

    #[test]
    fn a_cut_result_takes_the_room_its_fixed_forms_miss() {
        let (mut a, full) = loaded(dense_result(60)); // 360 chars: no fixed head + tail
        for budget in [full * 3 / 4, full, full * 5 / 4] {
            let plan = a.plan(budget).expect("fits");
            let s = by_id(&plan, "hist.3") as usize;
            assert_ne!(plan.status[s], Status::Kept, "{budget}: nothing cut");
            assert!(plan.total_after <= plan.target, "{budget}: over its target");
            assert!(
                plan.total_after * 100 >= plan.target * 95,
                "{budget}: {} of {} ({:?})",
                plan.total_after,
                plan.target,
                plan.status[s]
            );
            let text = plan.replacement(s as u32).expect("a replacement");
            assert!(
                text.starts_with("x = 1\n") && text.contains("chars trimmed ...]"),
                "{text}"
            );
        }
    }

    #[test]
    fn nothing_is_restored_when_the_plan_fits_untouched() {
        let mut a = assembly();
        a.upsert(session(3, 2)).expect("valid");
        let plan = a.plan(100_000).expect("fits");
        assert_eq!(plan.changed().count(), 0);
        assert_eq!(plan.total_after, plan.total_before);
    }
}
