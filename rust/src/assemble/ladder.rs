//! [`Assembly::plan`]: allocate the budget across windows, then run the trim ladder (soft trim,
//! hard trim, folding, compaction request) until every window is within its allocation.
//!
//! Allocation is recomputed from the current usage after each stage, so tokens a stage frees in
//! one window flow to windows still over; "every window within its allocation" is then the same
//! as "total ≤ target", and the allocation decides which windows get cut.

use std::sync::Arc;
use std::time::Instant;

use super::budget::{limits, water_fill};
use super::plan::{Plan, Reason, Stage, Status, Timings, WindowUse, PLACEHOLDER_SLOT};
use super::score::{scores, Groups};
use super::store::{Columns, Derived, Orders};
use super::{flags, kind, role, text, Assembly, AssemblyConfig, PLACEHOLDER_OVERHEAD};
use crate::errors::{CoreError, CoreResult};

/// Protected items named in a [`CoreError::Budget`] message.
const NAMED_IN_ERROR: usize = 10;

impl Assembly {
    /// Decide, for every live item, what is rendered within `budget` tokens.
    ///
    /// Errors with [`CoreError::Budget`] when protected items (PROTECTED flag and the latest user
    /// message's turn group) alone exceed the budget minus the reserve.
    pub fn plan(&mut self, budget: usize) -> CoreResult<Plan> {
        let t0 = Instant::now();
        self.refresh_orders();
        let mut derived = std::mem::take(&mut self.cols.derived);
        let result = Run::new(
            &self.config,
            &self.cols,
            &self.orders,
            &mut derived,
            budget,
            t0,
        )
        .and_then(Run::ladder);
        self.cols.derived = derived;
        result
    }
}

/// Where the latest user message, the first user message and the protected tail are.
#[derive(Debug, Default)]
struct History {
    first_user_seq: Option<u64>,
    latest_user_turn: Option<u32>,
    /// Turns of the last `protect_last_assistant` assistant messages, sorted.
    tail: Vec<u32>,
}

impl History {
    fn scan(cfg: &AssemblyConfig, c: &Columns, order: &[u32]) -> Self {
        let is = |s: u32, r: u8| c.kind[s as usize] == kind::MESSAGE && c.role[s as usize] == r;
        let first_user_seq = order
            .iter()
            .find(|&&s| is(s, role::USER))
            .map(|&s| c.seq[s as usize]);
        let latest_user_turn = order
            .iter()
            .rev()
            .find(|&&s| is(s, role::USER))
            .map(|&s| c.turn[s as usize]);
        let mut tail: Vec<u32> = order
            .iter()
            .rev()
            .filter(|&&s| is(s, role::ASSISTANT))
            .take(cfg.protect_last_assistant)
            .map(|&s| c.turn[s as usize])
            .collect();
        tail.sort_unstable();
        tail.dedup();
        Self {
            first_user_seq,
            latest_user_turn,
            tail,
        }
    }

    /// Before the first user message (everything is, when there is none).
    fn is_preamble(&self, seq: u64) -> bool {
        self.first_user_seq.is_none_or(|f| seq < f)
    }

    /// In the turn group of the latest user message or of one of the last assistant messages.
    fn in_tail(&self, turn: u32) -> bool {
        self.latest_user_turn == Some(turn) || self.tail.binary_search(&turn).is_ok()
    }
}

/// Tokens of the live items of each window.
fn demand(cfg: &AssemblyConfig, c: &Columns) -> Vec<usize> {
    let mut demand = vec![0usize; cfg.windows.len()];
    for s in 0..c.alive.len() {
        if c.alive[s] {
            demand[usize::from(c.window[s])] += c.tokens[s] as usize;
        }
    }
    demand
}

/// Running state of the removed-turns placeholder.
#[derive(Debug, Default)]
struct Removed {
    /// Removed turns as disjoint, non-adjacent inclusive ranges: start -> end.
    ranges: std::collections::BTreeMap<u32, u32>,
    /// Number of removed turns.
    turns: usize,
    tokens: u64,
    seq: u64,
    window: u8,
    /// Tokens currently accounted for the placeholder.
    charged: u32,
    /// Whether `charged` is the conservative bound rather than the exact count.
    estimated: bool,
}

impl Removed {
    /// Add a turn, merging it with adjacent ranges.
    fn insert(&mut self, t: u32) {
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

/// One plan in progress.
struct Run<'a> {
    cfg: &'a AssemblyConfig,
    c: &'a Columns,
    o: &'a Orders,
    derived: &'a mut Vec<Derived>,
    hist: History,
    budget: usize,
    available: usize,
    target: usize,
    status: Vec<Status>,
    stage: Vec<Stage>,
    reasons: Vec<Reason>,
    after: Vec<u32>,
    /// Replacement text by slot (allocated when the ladder runs).
    repl: Vec<Option<Arc<str>>>,
    demand: Vec<usize>,
    used: Vec<usize>,
    alloc: Vec<usize>,
    groups: Option<(Groups, Vec<f32>)>,
    removed: Option<Removed>,
    /// Window the placeholder's tokens are accounted in.
    charged_window: Option<usize>,
    compaction: (Vec<u32>, usize),
    timings: Timings,
    clock: Instant,
}

impl<'a> Run<'a> {
    fn new(
        cfg: &'a AssemblyConfig,
        c: &'a Columns,
        o: &'a Orders,
        derived: &'a mut Vec<Derived>,
        budget: usize,
        clock: Instant,
    ) -> CoreResult<Self> {
        let reserve_share = cfg
            .reserve
            .and_then(|r| cfg.windows.get(usize::from(r)))
            .map_or(0.0, |(_, s)| *s);
        let (available, target) = limits(budget, reserve_share, cfg.pretrim_ratio);
        let n = c.alive.len();
        let demand = demand(cfg, c);
        let mut run = Self {
            cfg,
            c,
            o,
            derived,
            hist: History::scan(cfg, c, &o.history.slots),
            budget,
            available,
            target,
            status: vec![Status::Kept; n],
            stage: vec![Stage::None; n],
            reasons: vec![Reason::None; n],
            after: c.tokens.clone(),
            repl: Vec::new(),
            used: demand.clone(),
            alloc: Vec::new(),
            demand,
            groups: None,
            removed: None,
            charged_window: None,
            compaction: (Vec::new(), 0),
            timings: Timings::default(),
            clock,
        };
        run.check_protected()?;
        run.reallocate();
        run.timings.allocate = run.lap();
        Ok(run)
    }

    /// Nanoseconds since the last lap.
    fn lap(&mut self) -> u64 {
        let now = Instant::now();
        let ns = now.duration_since(self.clock).as_nanos();
        self.clock = now;
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    fn ladder(mut self) -> CoreResult<Plan> {
        if self.total() > self.target {
            self.repl = vec![None; self.status.len()];
            self.soft();
            self.timings.soft = self.lap();
            self.reallocate();
            self.hard();
            self.timings.hard = self.lap();
            self.reallocate();
            self.fold();
            self.timings.fold = self.lap();
            self.reallocate();
            self.compact();
            self.timings.compaction = self.lap();
            self.reallocate();
        }
        Ok(self.finish())
    }

    fn total(&self) -> usize {
        self.used.iter().sum()
    }

    fn reallocate(&mut self) {
        let shares: Vec<f64> = self.cfg.windows.iter().map(|(_, s)| *s).collect();
        let reserve = self.cfg.reserve.map(usize::from);
        self.alloc = water_fill(&shares, &self.used, self.target, reserve);
    }

    fn over(&self, w: usize) -> bool {
        self.used.get(w) > self.alloc.get(w)
    }

    /// Bit mask of the windows over their allocation.
    fn over_mask(&self) -> u64 {
        (0..self.used.len())
            .filter(|&w| self.over(w))
            .fold(0, |m, w| m | (1u64 << (w & 63)))
    }

    /// Fail when protected items alone exceed `available`, naming the largest ones.
    fn check_protected(&self) -> CoreResult<()> {
        let c = self.c;
        let latest = self.hist.latest_user_turn;
        let mut total = 0usize;
        let mut named: Vec<(u32, u32)> = Vec::new();
        for s in 0..c.alive.len() {
            let hard = c.flags[s] & flags::PROTECTED != 0
                || (c.kind[s] != kind::CONTEXT && latest == Some(c.turn[s]));
            if c.alive[s] && hard {
                total += c.tokens[s] as usize;
                named.push((c.tokens[s], s as u32));
            }
        }
        if total <= self.available {
            return Ok(());
        }
        named.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let list: Vec<String> = named
            .iter()
            .take(NAMED_IN_ERROR)
            .map(|&(t, s)| format!("{} ({t} tokens)", c.node_ids[s as usize]))
            .collect();
        Err(CoreError::Budget(format!(
            "protected items alone need {total} tokens but the budget of {} leaves {} after the \
             reserve; {} protected items, largest: {}",
            self.budget,
            self.available,
            named.len(),
            list.join(", ")
        )))
    }

    /// Set the decision of `s`, moving its tokens in its window's usage.
    fn decide(&mut self, s: u32, status: Status, stage: Stage, reason: Reason, tokens: u32) {
        let i = s as usize;
        let w = usize::from(self.c.window[i]);
        self.used[w] = self.used[w] - self.after[i] as usize + tokens as usize;
        self.after[i] = tokens;
        self.status[i] = status;
        self.stage[i] = stage;
        self.reasons[i] = reason;
    }

    fn finish(mut self) -> Plan {
        let c = self.c;
        let context_order = self.context_order();
        let placeholder = self.placeholder();
        let history_order = self.history_order(placeholder.as_ref().map(|p| p.seq));
        let windows = self.window_uses();
        let total_after = self.total();
        let replacements = self.replacements();
        self.timings.order = self.lap();
        Plan {
            budget: self.budget,
            available: self.available,
            target: self.target,
            total_before: self.demand.iter().sum(),
            total_after,
            fits: total_after <= self.target,
            node_ids: Arc::clone(&c.node_ids),
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

    /// Context grains still rendered (a folded branch once), by `(priority, rank, seq)`.
    fn context_order(&self) -> Vec<u32> {
        let slots = self.o.context.slots.iter().copied();
        slots
            .filter(|&s| self.reasons[s as usize] != Reason::Branch)
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

#[path = "stages.rs"]
mod stages;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::{ItemSpec, PLACEHOLDER_ID};
    use crate::tokens::counter_for_encoding;

    const SYS: u8 = 0;
    const HIST: u8 = 2;
    const TOOL: u8 = 3;

    fn assembly() -> Assembly {
        let counter = counter_for_encoding("o200k_base").expect("known encoding");
        let mut config = AssemblyConfig::design_defaults(counter);
        config.soft_trim_chars = 400;
        config.soft_keep_chars = 100;
        config.protect_last_assistant = 1;
        Assembly::new(config).expect("valid config")
    }

    fn grain(id: &str, text: &str, window: u8, priority: i64, seq: u64) -> ItemSpec {
        ItemSpec {
            node_id: id.into(),
            text: text.into(),
            window,
            priority,
            seq,
            label: "label".into(),
            ..ItemSpec::default()
        }
    }

    fn message(seq: u64, turn: u32, role: u8, text: &str) -> ItemSpec {
        ItemSpec {
            node_id: format!("hist.{seq}"),
            text: text.into(),
            window: HIST,
            seq,
            kind: if role == role::TOOL {
                kind::TOOL_RESULT
            } else {
                kind::MESSAGE
            },
            role,
            turn,
            overhead: 4,
            label: "tool result: search".into(),
            ..ItemSpec::default()
        }
    }

    /// `turns` user turns: user, assistant with a tool call, a long tool result.
    fn session(turns: u32, result_lines: usize) -> Vec<ItemSpec> {
        let mut items = vec![];
        for t in 0..turns {
            let seq = u64::from(t) * 3 + 1;
            items.push(message(
                seq,
                t,
                role::USER,
                &format!("question {t} about the code"),
            ));
            let mut call = message(seq + 1, t, role::ASSISTANT, "let me search");
            call.flags = flags::HAS_TOOL_CALL;
            items.push(call);
            let lines: String = (0..result_lines)
                .map(|i| format!("match {t}.{i}: fn x() {{}}\n"))
                .collect();
            items.push(message(seq + 2, t, role::TOOL, &lines));
        }
        items
    }

    fn by_id(plan: &Plan, id: &str) -> u32 {
        plan.live
            .iter()
            .copied()
            .find(|&s| plan.node_id(s) == id)
            .unwrap_or_else(|| panic!("{id} is live"))
    }

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
    fn everything_fits() {
        let mut a = assembly();
        a.upsert(vec![
            grain("sys.a", "be brief", SYS, 0, 0),
            grain("rag.b", "doc", TOOL, 50, 1),
        ])
        .expect("valid");
        a.upsert(session(2, 2)).expect("valid");
        let plan = a.plan(100_000).expect("fits");
        assert!(plan.fits);
        assert_eq!(plan.total_after, plan.total_before);
        assert_eq!(plan.changed().count(), 0);
        let ctx: Vec<&str> = plan
            .context_order
            .iter()
            .map(|&s| plan.node_id(s))
            .collect();
        assert_eq!(ctx, vec!["sys.a", "rag.b"]);
        let hist: Vec<&str> = plan
            .history_order
            .iter()
            .map(|&s| plan.node_id(s))
            .collect();
        assert_eq!(
            hist,
            vec!["hist.1", "hist.2", "hist.3", "hist.4", "hist.5", "hist.6"]
        );
    }

    #[test]
    fn soft_trim_spares_the_tail_and_images() {
        let mut a = assembly();
        let mut items = session(4, 60);
        items[5].flags |= flags::IMAGE; // turn 1's result
        a.upsert(items).expect("valid");
        let full = a.plan(1_000_000).expect("fits").total_before;
        let plan = a.plan(full * 9 / 10).expect("trimmed");
        assert!(plan.fits, "{:?}", plan.windows);
        let first = by_id(&plan, "hist.3");
        assert_eq!(plan.status[first as usize], Status::Trimmed);
        assert_eq!(plan.stage[first as usize], Stage::Soft);
        let text = plan.replacement(first).expect("replacement");
        assert!(text.contains("chars trimmed ...]"), "{text}");
        assert!(plan.reason(first).starts_with("soft trim"));
        assert_eq!(
            plan.status[by_id(&plan, "hist.6") as usize],
            Status::Kept,
            "image"
        );
        assert_eq!(
            plan.status[by_id(&plan, "hist.12") as usize],
            Status::Kept,
            "tail"
        );
    }

    #[test]
    fn soft_trim_clears_when_trimming_is_not_enough() {
        let mut a = assembly();
        a.upsert(session(5, 60)).expect("valid");
        let full = a.plan(1_000_000).expect("fits").total_before;
        let plan = a.plan(full * 4 / 10).expect("cleared");
        let first = by_id(&plan, "hist.3");
        assert_eq!(plan.status[first as usize], Status::Cleared);
        let text = plan.replacement(first).expect("replacement");
        assert!(
            text.starts_with("[tool result cleared: tool result: search, "),
            "{text}"
        );
        assert!(plan.fits);
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
    fn fold_least_important_first_then_whole_branch() {
        let mut a = assembly();
        let doc = "lorem ipsum dolor sit amet ".repeat(40);
        let mut items = vec![grain("sys.a", "rules", SYS, 0, 0)];
        for i in 0..4u64 {
            items.push(grain(&format!("mem.n{i}"), &doc, 1, 10 + i as i64, 10 + i));
        }
        a.upsert(items).expect("valid");
        let full = a.plan(1_000_000).expect("fits").total_before;
        let plan = a.plan(full * 8 / 10).expect("folded");
        let last = by_id(&plan, "mem.n3");
        assert_eq!(plan.status[last as usize], Status::Folded);
        assert!(plan
            .replacement(last)
            .expect("stand-in")
            .starts_with("[folded mem.n3 (label): "));
        assert_eq!(plan.status[by_id(&plan, "mem.n0") as usize], Status::Kept);
        let plan = a.plan(150).expect("folded");
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
    fn protected_items_over_budget_fail() {
        let mut a = assembly();
        let mut big = grain("sys.big", &"word ".repeat(500), SYS, 0, 0);
        big.flags = flags::PROTECTED;
        a.upsert(vec![big]).expect("valid");
        a.upsert(session(1, 1)).expect("valid");
        let err = a.plan(100);
        assert!(
            matches!(&err, Err(CoreError::Budget(m)) if m.contains("sys.big") && m.contains("100")),
            "{err:?}"
        );
    }

    #[test]
    fn compaction_requests_old_high_score_turns() {
        let mut a = assembly();
        let mut items = session(8, 1);
        for it in &mut items {
            it.flags |= flags::FEEDBACK | flags::STRUCTURAL; // scores above 0.6: hard trim skips
        }
        a.upsert(items).expect("valid");
        let full = a.plan(1_000_000).expect("fits").total_before;
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

    fn random_session(next: &mut impl FnMut(u64) -> u64) -> Vec<ItemSpec> {
        let mut items = vec![];
        let words = ["alpha ", "beta\n", "gamma delta ", "ε ", "0123 "];
        let text = |next: &mut dyn FnMut(u64) -> u64, n: u64| -> String {
            (0..next(n)).map(|_| words[next(5) as usize]).collect()
        };
        let mut turn = 0;
        for seq in 0..next(40) {
            let r = next(4) as u8;
            if r == role::USER {
                turn += 1;
            }
            let mut m = message(seq, turn, r, &text(next, 300));
            m.flags = next(32) as u8 & !flags::PROTECTED;
            m.window = if r == role::TOOL && next(2) == 0 {
                TOOL
            } else {
                HIST
            };
            m.summary = (next(4) == 0).then(|| "short".to_string());
            items.push(m);
        }
        for i in 0..next(12) {
            let w = next(4) as u8;
            let id = format!("{}.n{i}", ["sys", "mem", "rag"][next(3) as usize]);
            let mut g = grain(&id, &text(next, 200), w, next(5) as i64, 1000 + i);
            g.flags = if next(8) == 0 { flags::PROTECTED } else { 0 };
            g.overhead = next(5) as u32;
            items.push(g);
        }
        items
    }

    #[test]
    fn plans_hold_their_invariants_on_generated_sessions() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if m == 0 {
                0
            } else {
                x % m
            }
        };
        let mut seen = [0usize; 5];
        let mut unfit = 0;
        for _ in 0..300 {
            let mut a = assembly();
            a.upsert(random_session(&mut next)).expect("valid");
            let budget = next(6000) as usize;
            let Ok(plan) = a.plan(budget) else { continue };
            let again = a.plan(budget).expect("same result");
            assert_eq!(plan.status, again.status);
            assert_eq!(plan.tokens_after, again.tokens_after);
            assert_eq!(plan.history_order, again.history_order);
            assert_eq!(plan.context_order, again.context_order);
            let ph = plan.placeholder.as_ref().map_or(0, |p| p.tokens as usize);
            let sum: usize = plan
                .live
                .iter()
                .map(|&s| plan.tokens_after[s as usize] as usize)
                .sum();
            assert_eq!(sum + ph, plan.total_after);
            if plan.fits {
                assert!(plan.total_after <= plan.target);
            } else {
                unfit += 1;
            }
            for &s in &plan.live {
                seen[plan.status[s as usize] as usize] += 1;
            }
            let used: usize = plan.windows.iter().map(|w| w.used).sum();
            assert_eq!(used, plan.total_after);
            for &s in &plan.live {
                let i = s as usize;
                if a.cols.flags[i] & flags::PROTECTED != 0 {
                    assert_eq!(plan.status[i], Status::Kept);
                }
                if plan.status[i] == Status::Dropped {
                    let t = a.cols.turn[i];
                    assert!(plan
                        .live
                        .iter()
                        .all(|&y| a.cols.kind[y as usize] == kind::CONTEXT
                            || a.cols.turn[y as usize] != t
                            || plan.status[y as usize] == Status::Dropped));
                }
                assert!(plan.tokens_after[i] <= plan.tokens_before[i]);
            }
        }
        assert!(seen.iter().all(|&n| n > 0), "every status occurs: {seen:?}");
        assert!(unfit < 30, "{unfit} plans did not fit");
    }
}
