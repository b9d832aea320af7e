//! The ladder's stages, run on a plan in progress ([`Run`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    flags, kind, scores, text, Groups, Reason, Removed, Run, Stage, Status, PLACEHOLDER_OVERHEAD,
};
use crate::assemble::plan::Placeholder;

/// Flags that keep an item out of soft trim.
const SOFT_KEEP: u8 = flags::PROTECTED | flags::IMAGE;

impl Run<'_> {
    fn count(&self, text: &str) -> u32 {
        u32::try_from(self.cfg.counter.count(text, true)).unwrap_or(u32::MAX)
    }

    /// Soft trim: in each window over its allocation, oldest first, shorten long tool results
    /// (summary or head + tail), then clear them to placeholders.
    pub(super) fn soft(&mut self) {
        for w in 0..self.used.len() {
            if !self.over(w) {
                continue;
            }
            let candidates = self.soft_candidates(w as u8);
            for &s in &candidates {
                if !self.over(w) {
                    break;
                }
                self.trim(s);
            }
            for &s in &candidates {
                if !self.over(w) {
                    break;
                }
                self.clear(s);
            }
        }
    }

    /// Unprotected tool results of window `w` (and its context grains if it is a tool window),
    /// by seq.
    fn soft_candidates(&self, w: u8) -> Vec<u32> {
        let (c, hist) = (self.c, &self.hist);
        let history: Vec<u32> = self
            .o
            .history
            .slots
            .iter()
            .copied()
            .filter(|&s| {
                let i = s as usize;
                c.window[i] == w
                    && c.kind[i] == kind::TOOL_RESULT
                    && c.flags[i] & SOFT_KEEP == 0
                    && !hist.is_preamble(c.seq[i])
                    && !hist.in_tail(c.turn[i])
            })
            .collect();
        if !self.cfg.is_tool_window(w) {
            return history;
        }
        let mut context: Vec<u32> = self
            .o
            .context
            .slots
            .iter()
            .copied()
            .filter(|&s| c.window[s as usize] == w && c.flags[s as usize] & SOFT_KEEP == 0)
            .collect();
        context.sort_unstable_by_key(|&s| c.history_key(s));
        merge_sorted(history, context, |s| c.history_key(s))
    }

    fn trim(&mut self, s: u32) {
        let i = s as usize;
        if self.c.chars[i] as usize <= self.cfg.soft_trim_chars {
            return;
        }
        let Some((text, count, reason)) = self.trimmed(i) else {
            return;
        };
        let tokens = count.saturating_add(self.c.overhead[i]);
        if tokens < self.after[i] {
            self.repl[s as usize] = Some(text);
            self.decide(s, Status::Trimmed, Stage::Soft, reason, tokens);
        }
    }

    /// The soft-trimmed text of slot `i` with its count, built once per item version.
    fn trimmed(&mut self, i: usize) -> Option<(Arc<str>, u32, Reason)> {
        if let Some(t) = &self.derived[i].trimmed {
            return Some(t.clone());
        }
        let c = self.c;
        let chars = c.chars[i];
        let (text, reason) = match c.summaries[i].as_deref().filter(|s| !s.is_empty()) {
            Some(summary) => (summary.to_string(), Reason::Summary { chars }),
            None => {
                let (t, removed) = text::head_tail(&c.texts[i], self.cfg.soft_keep_chars)?;
                let removed = u32::try_from(removed).unwrap_or(u32::MAX);
                (t, Reason::HeadTail { chars, removed })
            }
        };
        let entry = (Arc::from(text.as_str()), self.count(&text), reason);
        self.derived[i].trimmed = Some(entry.clone());
        Some(entry)
    }

    fn clear(&mut self, s: u32) {
        let i = s as usize;
        let (text, count) = match &self.derived[i].cleared {
            Some(t) => t.clone(),
            None => {
                let c = self.c;
                let label = if c.labels[i].is_empty() {
                    &*c.node_ids[i]
                } else {
                    &c.labels[i]
                };
                let t = text::cleared(label, c.tokens[i]);
                let entry = (Arc::from(t.as_str()), self.count(&t));
                self.derived[i].cleared = Some(entry.clone());
                entry
            }
        };
        let tokens = count.saturating_add(self.c.overhead[i]);
        if tokens < self.after[i] {
            self.repl[s as usize] = Some(text);
            self.decide(s, Status::Cleared, Stage::Soft, Reason::Cleared, tokens);
        }
    }

    /// History turn groups and their scores, built once per plan.
    fn take_groups(&mut self) -> (Groups, Vec<f32>) {
        self.groups.take().unwrap_or_else(|| {
            let c = self.c;
            let g = Groups::build(&self.o.turns.slots, &c.turn, &c.flags, &c.seq, &c.window);
            let s = scores(&g.flags, self.cfg.weights);
            (g, s)
        })
    }

    /// Never hard-trimmed: PROTECTED items, the preamble, the protected tail, the latest turn.
    fn group_protected(&self, g: &Groups, i: usize) -> bool {
        g.flags[i] & flags::PROTECTED != 0
            || self.hist.is_preamble(g.first_seq[i])
            || self.hist.in_tail(g.turn[i])
    }

    /// Never removed at all: PROTECTED items and the latest user message's group.
    fn group_pinned(&self, g: &Groups, i: usize) -> bool {
        g.flags[i] & flags::PROTECTED != 0 || self.hist.latest_user_turn == Some(g.turn[i])
    }

    /// Hard trim: remove whole turn groups scoring at most `hard_trim_max_score`, lowest first
    /// (ties: oldest), while a window they occupy is over its allocation.
    pub(super) fn hard(&mut self) {
        let mut over = self.over_mask();
        if over == 0 || self.o.turns.slots.is_empty() {
            return;
        }
        let (groups, scores) = self.take_groups();
        let history_mask = groups.windows.iter().fold(0, |m, w| m | w);
        let max = self.cfg.hard_trim_max_score;
        let mut eligible: Vec<usize> = (0..groups.len())
            .filter(|&g| scores[g] <= max && !self.group_protected(&groups, g))
            .collect();
        eligible.sort_by(|&a, &b| {
            scores[a]
                .total_cmp(&scores[b])
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
            if over & groups.windows[g] == 0 {
                continue;
            }
            if self.removed.is_none() && !self.worth_a_placeholder(&groups, g) {
                continue;
            }
            let (turn, score) = (groups.turn[g], scores[g]);
            self.remove_group(&groups, g, Stage::Hard, Reason::Removed { turn, score });
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

    /// Whether removing group `g` alone saves more than the placeholder it would need.
    fn worth_a_placeholder(&self, g: &Groups, i: usize) -> bool {
        let held = self.group_tokens(g, i);
        let text = text::removed_turns([(g.turn[i], g.turn[i])], 1, held as u64);
        let cost = self.count(&text).saturating_add(PLACEHOLDER_OVERHEAD);
        held > cost as usize
    }

    /// Drop every item of group `g`; returns the tokens it rendered.
    fn remove_group(&mut self, g: &Groups, i: usize, stage: Stage, reason: Reason) -> usize {
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

    fn note_removed(&mut self, turn: u32, tokens: u64, seq: u64, window: u8) {
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

    fn placeholder_text(r: &Removed) -> String {
        let ranges = r.ranges.iter().map(|(&a, &b)| (a, b));
        text::removed_turns(ranges, r.turns, r.tokens)
    }

    /// Account the placeholder's exact tokens in its window.
    fn charge_exact(&mut self) {
        let Some(r) = &self.removed else {
            return;
        };
        let exact = self.count(&Self::placeholder_text(r));
        self.charge(exact.saturating_add(PLACEHOLDER_OVERHEAD), false);
    }

    /// Account `tokens` for the placeholder in the window of the first removed item.
    fn charge(&mut self, tokens: u32, estimated: bool) {
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
    fn placeholder_bound(&self) -> u32 {
        let wide = u32::MAX - 2;
        let ranges = (0..text::SHOWN_RANGES as u32).map(|_| (wide - 1, wide));
        let text = text::removed_turns(ranges, u32::MAX as usize, u64::MAX);
        self.count(&text).saturating_add(PLACEHOLDER_OVERHEAD)
    }

    /// Tokens by which the windows in `mask` exceed their allocation.
    fn deficit(&self, mask: u64) -> usize {
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

    /// Oldest groups whose removal frees `need` tokens: unprotected ones first, then the
    /// protected tail, never a pinned group.
    fn pick_compaction(&self, groups: &Groups, need: usize) -> Vec<bool> {
        let mut picked = vec![false; groups.len()];
        let mut freed = 0usize;
        for relaxed in [false, true] {
            for (g, taken) in picked.iter_mut().enumerate() {
                if freed >= need {
                    return picked;
                }
                let blocked =
                    self.group_pinned(groups, g) || (!relaxed && self.group_protected(groups, g));
                if *taken || blocked {
                    continue;
                }
                let held = self.group_tokens(groups, g);
                if held > 0 {
                    *taken = true;
                    freed += held;
                }
            }
        }
        picked
    }

    /// Tokens the group's live items render now.
    fn group_tokens(&self, g: &Groups, i: usize) -> usize {
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

/// Merge two lists sorted by `key` into one sorted list.
fn merge_sorted<K: Ord>(a: Vec<u32>, b: Vec<u32>, key: impl Fn(u32) -> K) -> Vec<u32> {
    if b.is_empty() {
        return a;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if key(a[i]) <= key(b[j]) {
            out.push(a[i]);
            i += 1;
        } else {
            out.push(b[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}
