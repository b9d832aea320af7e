//! [`Assembly::plan`]: allocate the budget across windows, then run the trim ladder until every
//! window is within its allocation. One module per stage, each run on a plan in progress
//! ([`Run`]):
//!
//! - [`soft`]: shorten long tool results (summary or head + tail), then clear them;
//! - [`hard`]: remove whole low-scoring history turn groups;
//! - [`placeholder`]: the one message standing for the removed turns, and its token accounting;
//! - [`fold`]: fold the least important context grains, then whole branches, to stand-ins;
//! - [`drop`]: drop the least important grains when their stand-ins are still too many;
//! - [`compact`]: mark the oldest turn groups for summarization when still over;
//! - [`backfill`]: undo cuts, most valuable first, into the room the steps left below the
//!   target (each stage cuts in whole items, so it ends below the target);
//! - [`order`]: the rendered order of the survivors and the finished [`Plan`];
//! - [`history`]: what the stages protect (preamble, protected tail, latest user turn).
//!
//! Allocation is recomputed from the current usage after each stage, so tokens a stage frees in
//! one window flow to windows still over; "every window within its allocation" is then the same
//! as "total ≤ target", and the allocation decides which windows get cut.

mod backfill;
mod compact;
mod drop;
mod fold;
mod hard;
mod history;
mod order;
mod placeholder;
mod soft;

#[cfg(test)]
mod fixtures;

use std::sync::Arc;
use std::time::Instant;

use self::history::History;
use self::placeholder::Removed;
use super::budget::{limits, water_fill};
use super::items::{Columns, Derived, Orders};
use super::plan::{Plan, Reason, Stage, Status, Timings};
use super::score::Groups;
use super::{flags, kind, Assembly, AssemblyConfig};
use crate::errors::{CoreError, CoreResult};

/// Protected items named in a [`CoreError::Budget`] message.
const NAMED_IN_ERROR: usize = 10;

impl Assembly {
    /// Decide, for every live item, what is rendered within `budget` tokens.
    ///
    /// Errors with [`CoreError::Budget`] when protected items (PROTECTED flag and the latest user
    /// message's turn group) alone exceed the budget. They may use the reserve (a margin for
    /// what is not theirs): the plan then cuts everything else and does not fit its target
    /// (`fits` is false), but the payload stays within the budget.
    ///
    /// Incremental: the session's total comes from the per-window totals the assembly keeps
    /// up to date, and the orders from the cached ones (extended in place by appended items),
    /// so when everything fits the target the plan keeps every item without scanning the
    /// history or checking protection (protected items are then within the budget too); the
    /// ladder runs only when the total is over the target. Equal to [`Assembly::plan_full`].
    pub fn plan(&mut self, budget: usize) -> CoreResult<Plan> {
        self.plan_with(budget, 1.0, true)
    }

    /// [`Assembly::plan`] with a high-water mark: the ladder runs only when the total passes
    /// `hold` times the target (at most the available budget), and then cuts down to the
    /// target as always. A total between the target and that mark is kept whole (the plan's
    /// `high` says where the mark was), so between two cuts each render only adds to the
    /// previous one; a cut lands at the target. `hold` ≤ 1 is [`Assembly::plan`].
    pub fn plan_holding(
        &mut self,
        budget: usize,
        hold: f64,
        incremental: bool,
    ) -> CoreResult<Plan> {
        self.plan_with(budget, hold, incremental)
    }

    /// [`Assembly::plan`] from scratch: every total recounted from the items and the history
    /// scanned whether or not the ladder runs (the reference the incremental plan equals).
    pub fn plan_full(&mut self, budget: usize) -> CoreResult<Plan> {
        self.plan_with(budget, 1.0, false)
    }

    fn plan_with(&mut self, budget: usize, hold: f64, incremental: bool) -> CoreResult<Plan> {
        let t0 = Instant::now();
        self.refresh_orders();
        let mut derived = std::mem::take(&mut self.cols.derived);
        let result = Run::new(
            &self.config,
            &self.cols,
            &self.orders,
            &mut derived,
            (budget, hold, incremental),
            t0,
        )
        .and_then(Run::ladder);
        self.cols.derived = derived;
        result
    }

    /// Tokens of the protected items (PROTECTED flag and the latest user message's turn group):
    /// what a plan can never cut, so the least budget [`Assembly::plan`] accepts.
    pub fn protected_tokens(&mut self) -> usize {
        self.refresh_orders();
        let hist = History::scan(&self.config, &self.cols, &self.orders.history.slots);
        let c = &self.cols;
        protected_slots(c, &hist)
            .map(|s| c.tokens[s] as usize)
            .sum()
    }
}

/// The high-water mark of a plan: `hold` times `target`, at least `target` and at most
/// `available` (a `hold` that is not a number above 1 leaves it at `target`).
fn high_water(target: usize, available: usize, hold: f64) -> usize {
    if hold.is_nan() || hold <= 1.0 {
        return target;
    }
    let high = (target as f64 * hold).floor();
    if high >= available as f64 {
        available.max(target)
    } else {
        (high as usize).max(target)
    }
}

/// Slots of the live protected items: PROTECTED flag, or the latest user message's turn group.
fn protected_slots<'c>(c: &'c Columns, hist: &History) -> impl Iterator<Item = usize> + 'c {
    let latest = hist.latest_user_turn;
    (0..c.alive.len()).filter(move |&s| {
        c.alive[s]
            && (c.flags[s] & flags::PROTECTED != 0
                || (c.kind[s] != kind::CONTEXT && latest == Some(c.turn[s])))
    })
}

/// Tokens of the live items of each window, as the assembly keeps them.
fn kept_demand(cfg: &AssemblyConfig, c: &Columns) -> Vec<usize> {
    let mut demand = c.demand.clone();
    demand.resize(cfg.windows.len(), 0);
    debug_assert_eq!(
        demand,
        self::demand(cfg, c),
        "per-window totals out of date"
    );
    demand
}

/// Tokens of the live items of each window, summed over the items.
fn demand(cfg: &AssemblyConfig, c: &Columns) -> Vec<usize> {
    let mut demand = vec![0usize; cfg.windows.len()];
    for s in 0..c.alive.len() {
        if c.alive[s] {
            demand[usize::from(c.window[s])] += c.tokens[s] as usize;
        }
    }
    demand
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
    /// The high-water mark: the ladder runs only past it (at least `target`).
    high: usize,
    /// What every allocation aims at: the total when it is held between the target and the
    /// mark (nothing is cut), else the target.
    aim: usize,
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
        (budget, hold, incremental): (usize, f64, bool),
        clock: Instant,
    ) -> CoreResult<Self> {
        let reserve_share = cfg
            .reserve
            .and_then(|r| cfg.windows.get(usize::from(r)))
            .map_or(0.0, |(_, s)| *s);
        let (available, target) = limits(budget, reserve_share, cfg.pretrim_ratio);
        let high = high_water(target, available, hold);
        let n = c.alive.len();
        let demand = if incremental {
            kept_demand(cfg, c)
        } else {
            demand(cfg, c)
        };
        // Everything fits: no stage runs, and protected items (a part of the total) are within
        // the budget, so neither the history scan nor the protection check can matter.
        let total: usize = demand.iter().sum();
        let fits = incremental && total <= high;
        let aim = if total > target && total <= high {
            total
        } else {
            target
        };
        let mut run = Self {
            cfg,
            c,
            o,
            derived,
            hist: if fits {
                History::default()
            } else {
                History::scan(cfg, c, &o.history.slots)
            },
            budget,
            available,
            target,
            high,
            aim,
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
        if !fits {
            run.check_protected()?;
        }
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
        if self.total() > self.high {
            self.repl = vec![None; self.status.len()];
            self.soft();
            self.timings.soft = self.lap();
            self.reallocate();
            self.hard();
            self.timings.hard = self.lap();
            self.reallocate();
            self.fold();
            self.reallocate();
            self.drop_grains();
            self.timings.fold = self.lap();
            self.reallocate();
            self.compact();
            self.drop_to_target();
            self.placeholder_to_compaction();
            self.timings.compaction = self.lap();
            self.reallocate();
            self.backfill();
            self.requests_to_compaction();
        }
        Ok(self.finish())
    }

    /// Tokens of `text` (without overhead), saturated to `u32`.
    fn count(&self, text: &str) -> u32 {
        u32::try_from(self.cfg.counter.count(text, true)).unwrap_or(u32::MAX)
    }

    fn total(&self) -> usize {
        self.used.iter().sum()
    }

    fn reallocate(&mut self) {
        let shares: Vec<f64> = self.cfg.windows.iter().map(|(_, s)| *s).collect();
        let reserve = self.cfg.reserve.map(usize::from);
        self.alloc = water_fill(&shares, &self.used, self.aim, reserve);
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

    /// Fail when protected items alone exceed the budget, naming the largest ones.
    fn check_protected(&self) -> CoreResult<()> {
        let c = self.c;
        let mut total = 0usize;
        let mut named: Vec<(u32, u32)> = Vec::new();
        for s in protected_slots(c, &self.hist) {
            total += c.tokens[s] as usize;
            named.push((c.tokens[s], s as u32));
        }
        if total <= self.budget {
            return Ok(());
        }
        named.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let list: Vec<String> = named
            .iter()
            .take(NAMED_IN_ERROR)
            .map(|&(t, s)| format!("{} ({t} tokens)", c.node_ids[s as usize]))
            .collect();
        Err(CoreError::Budget(format!(
            "protected items alone need {total} tokens, over the budget of {}; {} protected \
             items, largest: {}",
            self.budget,
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
}

#[cfg(test)]
mod tests {
    use super::fixtures::{assembly, grain, ids, message, session, HIST, SYS, TOOL};
    use super::*;
    use crate::assemble::{role, ItemSpec};

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
    fn protected_tokens_is_the_least_budget_a_plan_accepts() {
        let mut a = assembly();
        let mut rules = grain("sys.rules", &"word ".repeat(30), SYS, 0, 0);
        rules.flags = flags::PROTECTED;
        a.upsert(vec![
            rules,
            grain("rag.doc", &"doc ".repeat(40), TOOL, 50, 1),
        ])
        .expect("valid");
        a.upsert(session(3, 1)).expect("valid");
        let need = a.protected_tokens();
        assert!(need > 30, "{need}: the rules and the latest user turn");
        assert!(a.plan(need).is_ok());
        assert!(matches!(a.plan(need - 1), Err(CoreError::Budget(_))));
    }

    #[test]
    fn protected_items_may_use_the_reserve_and_everything_else_goes() {
        let mut a = assembly();
        let mut rules = grain("sys.rules", &"word ".repeat(95), SYS, 0, 0);
        rules.flags = flags::PROTECTED;
        a.upsert(vec![
            rules,
            grain("rag.doc", &"doc ".repeat(40), TOOL, 50, 1),
        ])
        .expect("valid");
        a.upsert(session(2, 1)).expect("valid");
        let full = a.plan(1_000_000).expect("fits");
        let need: usize = full
            .live
            .iter()
            .map(|&s| s as usize)
            .filter(|&i| i == 0 || (a.cols.kind[i] != kind::CONTEXT && a.cols.turn[i] == 1))
            .map(|i| full.tokens_before[i] as usize)
            .sum();
        let budget = need + need / 20; // over budget less the 10 % reserve, within the budget
        let plan = a.plan(budget).expect("protected content fits the budget");
        assert!(need > plan.available, "{need} <= {}", plan.available);
        assert!(!plan.fits, "over the target");
        assert!(
            plan.total_after <= budget,
            "{} > {budget}",
            plan.total_after
        );
        let doc = plan
            .live
            .iter()
            .copied()
            .find(|&s| plan.node_id(s) == "rag.doc");
        assert_eq!(plan.status[doc.expect("live") as usize], Status::Dropped);
        assert!(matches!(a.plan(need - 1), Err(CoreError::Budget(_))));
    }

    #[test]
    fn a_held_plan_keeps_a_total_under_its_mark_and_cuts_past_it_to_the_target() {
        let mut a = assembly();
        a.upsert(session(12, 2)).expect("valid");
        let total = a.plan(1_000_000).expect("fits").total_before;
        // a budget whose target the total passes by 5 %, with a mark 10 % above the target
        let budget = total * 100 / 84;
        let plain = a.plan(budget).expect("plan");
        assert!(
            plain.total_before > plain.target,
            "{total} within {}",
            plain.target
        );
        assert!(
            plain.total_after < plain.total_before,
            "the plain plan cuts"
        );
        for incremental in [true, false] {
            let held = a.plan_holding(budget, 1.1, incremental).expect("plan");
            assert_eq!(held.target, plain.target);
            assert!(held.high > held.target && held.high <= held.available);
            assert_eq!(
                held.total_after, held.total_before,
                "nothing cut under the mark"
            );
            assert!(held.fits);
            assert!(held.status.iter().all(|s| *s == Status::Kept));
            let allocated: usize = held.windows.iter().map(|w| w.alloc).sum();
            assert!(
                allocated >= held.total_after,
                "{allocated} < {}",
                held.total_after
            );
        }
        // past the mark the held plan is the plain one: cut down to the target
        let small = total * 100 / 95;
        let plain = a.plan(small).expect("plan");
        let held = a.plan_holding(small, 1.1, true).expect("plan");
        assert!(held.total_before > held.high);
        assert_same_plan(&plain, &held, "past the mark");
        assert!(held.total_after <= held.target);
        // no mark: the plain plan
        let none = a.plan_holding(budget, 1.0, true).expect("plan");
        assert_eq!(none.high, none.target);
        assert_eq!(none.total_after, a.plan(budget).expect("plan").total_after);
    }

    #[test]
    fn the_high_water_mark_stays_between_the_target_and_the_available_budget() {
        assert_eq!(high_water(800, 900, 1.1), 880);
        assert_eq!(high_water(800, 900, 2.0), 900);
        assert_eq!(high_water(800, 900, 1.0), 800);
        assert_eq!(high_water(800, 900, 0.5), 800);
        assert_eq!(high_water(800, 900, f64::NAN), 800);
        assert_eq!(high_water(900, 900, 1.1), 900);
        assert_eq!(high_water(0, 0, 1.5), 0);
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

    /// Every decision, order and total of two plans (not their timings).
    fn assert_same_plan(a: &Plan, b: &Plan, what: &str) {
        assert_eq!(
            (a.budget, a.available, a.target, a.fits),
            (b.budget, b.available, b.target, b.fits),
            "{what}"
        );
        assert_eq!(
            (a.total_before, a.total_after),
            (b.total_before, b.total_after),
            "{what}"
        );
        assert_eq!(a.live, b.live, "{what}");
        assert_eq!(a.status, b.status, "{what}");
        assert_eq!(a.stage, b.stage, "{what}");
        assert_eq!(a.reasons, b.reasons, "{what}");
        assert_eq!(a.tokens_before, b.tokens_before, "{what}");
        assert_eq!(a.tokens_after, b.tokens_after, "{what}");
        assert_eq!(a.window, b.window, "{what}");
        assert_eq!(a.replacements, b.replacements, "{what}");
        assert_eq!(a.placeholder, b.placeholder, "{what}");
        assert_eq!(a.context_order, b.context_order, "{what}");
        assert_eq!(a.history_order, b.history_order, "{what}");
        assert_eq!(a.windows, b.windows, "{what}");
        assert_eq!(a.compaction_turns, b.compaction_turns, "{what}");
        assert_eq!(a.compaction_tokens, b.compaction_tokens, "{what}");
        assert_eq!(a.node_ids, b.node_ids, "{what}");
    }

    fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed;
        move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if m == 0 {
                0
            } else {
                x % m
            }
        }
    }

    #[test]
    fn incremental_plan_equals_the_full_plan_as_a_session_grows() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut outcomes = [0usize; 3]; // fits, cut by the ladder, protected over budget
        for case in 0..60 {
            let mut a = assembly();
            a.upsert(random_session(&mut next)).expect("valid");
            // small budgets fill up after a few appends: the ladder must then cut
            let budget = 300 + next(4000) as usize;
            let mut seq = 10_000;
            let mut turn = 100;
            for step in 0..40 {
                match next(10) {
                    0 => turn += 1,
                    1 => {
                        // an edit of a kept item (a soft trim done by the app, an override)
                        let id = format!("hist.{}", next(40));
                        if a.tokens(&id).is_some() {
                            let mut m = message(next(40), 1, role::ASSISTANT, "edited");
                            m.node_id = id;
                            a.upsert(vec![m]).expect("valid");
                        }
                    }
                    2 => {
                        a.remove(&[format!("hist.{}", next(40))]);
                    }
                    _ => {}
                }
                seq += 1;
                let r = [role::USER, role::ASSISTANT, role::TOOL][next(3) as usize];
                let text = "words and more words ".repeat(1 + next(30) as usize);
                a.upsert(vec![message(seq, turn, r, &text)]).expect("valid");
                let what = format!("case {case} step {step} budget {budget}");
                match (a.plan(budget), a.plan_full(budget)) {
                    (Ok(fast), Ok(full)) => {
                        outcomes[usize::from(fast.total_before > fast.target)] += 1;
                        assert_same_plan(&fast, &full, &what);
                    }
                    (Err(e1), Err(e2)) => {
                        outcomes[2] += 1;
                        assert_eq!(e1.to_string(), e2.to_string(), "{what}");
                    }
                    (x, y) => panic!("{what}: {:?} vs {:?}", x.err(), y.err()),
                }
            }
        }
        assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");
    }

    #[test]
    fn tombstones_are_compacted_and_plans_stay_the_same() {
        let mut a = assembly();
        let items: Vec<ItemSpec> = (0..600)
            .map(|i| {
                message(
                    i,
                    (i / 3) as u32,
                    [role::USER, role::ASSISTANT][(i % 2) as usize],
                    "a few words",
                )
            })
            .collect();
        a.upsert(items).expect("valid");
        let before = a.plan(1_000_000).expect("fits");
        let gone: Vec<String> = (0..500).map(|i| format!("hist.{i}")).collect();
        assert_eq!(a.remove(&gone), 500);
        assert_eq!(a.slots(), 100, "the 500 tombstones are compacted away");
        assert_eq!(a.len(), 100);
        assert_eq!(a.tokens("hist.550"), before.tokens_before.get(550).copied());
        assert_eq!(a.tokens("hist.10"), None);
        a.upsert(vec![message(600, 300, role::USER, "next question")])
            .expect("valid");
        for budget in [1_000_000, 400, 250] {
            let fast = a.plan(budget);
            let full = a.plan_full(budget);
            match (fast, full) {
                (Ok(fast), Ok(full)) => {
                    assert_same_plan(&fast, &full, &format!("budget {budget}"));
                    if budget == 1_000_000 {
                        let order = ids(&fast, &fast.history_order);
                        let want: Vec<String> = (500..=600).map(|i| format!("hist.{i}")).collect();
                        assert_eq!(order, want.iter().map(String::as_str).collect::<Vec<_>>());
                        assert_eq!(fast.total_before, fast.total_after);
                    }
                }
                (Err(e1), Err(e2)) => assert_eq!(e1.to_string(), e2.to_string()),
                (x, y) => panic!("budget {budget}: {:?} vs {:?}", x.err(), y.err()),
            }
        }
        // a later removal below the threshold leaves a tombstone, reused by the next insert
        a.remove(&["hist.600".to_string()]);
        assert_eq!(a.slots(), 101);
        a.upsert(vec![message(601, 301, role::USER, "again")])
            .expect("valid");
        assert_eq!(a.slots(), 101);
        let (fast, full) = (a.plan(500).expect("fits"), a.plan_full(500).expect("fits"));
        assert_same_plan(&fast, &full, "after reuse");
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
                if plan.status[i] == Status::Dropped && a.cols.kind[i] != kind::CONTEXT {
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
