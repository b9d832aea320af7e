//! [`Assembly`]: the items of a session as columns, with counts and sort orders cached.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::ids::Ids;
use super::plan::{Reason, PLACEHOLDER_ID};
use super::{codes, kind, role, AssemblyConfig, ItemSpec};
use crate::errors::{CoreError, CoreResult};

type Index = HashMap<Arc<str>, u32, BuildHasherDefault<ahash::AHasher>>;

/// Texts derived from an item version, built and counted once (counts exclude overhead).
#[derive(Debug, Clone, Default)]
pub(crate) struct Derived {
    pub trimmed: Option<(Arc<str>, u32, Reason)>,
    pub cleared: Option<(Arc<str>, u32)>,
    pub folded: Option<(Arc<str>, u32)>,
}

/// Item fields by slot.
#[derive(Debug, Default)]
pub(crate) struct Columns {
    pub node_ids: Ids,
    pub texts: Vec<String>,
    pub labels: Vec<String>,
    pub summaries: Vec<Option<String>>,
    pub chars: Vec<u32>,
    /// Text count + overhead.
    pub tokens: Vec<u32>,
    pub overhead: Vec<u32>,
    pub window: Vec<u8>,
    pub priority: Vec<i64>,
    pub rank: Vec<u32>,
    pub seq: Vec<u64>,
    pub kind: Vec<u8>,
    pub role: Vec<u8>,
    pub turn: Vec<u32>,
    pub flags: Vec<u8>,
    pub alive: Vec<bool>,
    pub derived: Vec<Derived>,
    /// Tokens of the live items of each window, kept up to date by every write and removal,
    /// so a plan knows the session's total without a pass over the items.
    pub demand: Vec<usize>,
}

/// A cached order of live slots and whether it is current.
#[derive(Debug, Default)]
pub(crate) struct Order {
    pub slots: Vec<u32>,
    pub valid: bool,
}

/// Cached orders: context grains by `(priority, rank, seq)`, history by `seq` and by `(turn, seq)`.
#[derive(Debug, Default)]
pub(crate) struct Orders {
    pub context: Order,
    pub history: Order,
    pub turns: Order,
}

/// The session's items, kept between renders so a warm plan touches only what changed.
#[derive(Debug)]
pub struct Assembly {
    pub(crate) config: AssemblyConfig,
    pub(crate) cols: Columns,
    pub(crate) orders: Orders,
    index: Index,
    free: Vec<u32>,
}

/// Tombstones are compacted away once there are at least this many and more than live items,
/// so slot-indexed work follows the live items, not every item the session ever had.
const COMPACT_MIN_FREE: usize = 256;

impl Assembly {
    /// An empty assembly; errors with [`CoreError::Value`] when the configuration is invalid.
    pub fn new(config: AssemblyConfig) -> CoreResult<Self> {
        config.validate()?;
        Ok(Self {
            config,
            cols: Columns::default(),
            orders: Orders::default(),
            index: Index::default(),
            free: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AssemblyConfig {
        &self.config
    }

    /// Number of live items.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no item is live.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Tokens (count + overhead) of a live item.
    pub fn tokens(&self, node_id: &str) -> Option<u32> {
        let slot = *self.index.get(node_id)?;
        self.cols.tokens.get(slot as usize).copied()
    }

    /// Insert or replace items (a later duplicate in the batch wins) and return each one's
    /// tokens. Texts are counted once, in parallel, through the content cache; an unchanged
    /// text is not recounted. Errors with [`CoreError::Value`] naming the first invalid item.
    pub fn upsert(&mut self, items: Vec<ItemSpec>) -> CoreResult<Vec<u32>> {
        for (i, item) in items.iter().enumerate() {
            self.check(i, item)?;
        }
        let stale: Vec<usize> = (0..items.len())
            .filter(|&i| {
                let item = &items[i];
                match self.index.get(item.node_id.as_str()) {
                    Some(&s) => self.cols.texts.get(s as usize) != Some(&item.text),
                    None => true,
                }
            })
            .collect();
        let counts = self.count(&items, &stale);
        let mut fresh = stale.iter().zip(counts).peekable();
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let count = match fresh.peek() {
                Some(&(&j, c)) if j == i => {
                    fresh.next();
                    Some(c)
                }
                _ => None,
            };
            out.push(self.put(item, count));
        }
        Ok(out)
    }

    fn count(&self, items: &[ItemSpec], stale: &[usize]) -> Vec<u32> {
        let counter = self.config.counter;
        let texts: Vec<&str> = stale.iter().map(|&i| items[i].text.as_str()).collect();
        let counts = if texts.len() <= 1 {
            texts.iter().map(|t| counter.count(t, true)).collect()
        } else {
            counter.count_many(&texts, true)
        };
        counts
            .into_iter()
            .map(|c| u32::try_from(c).unwrap_or(u32::MAX))
            .collect()
    }

    /// Check item `i` of a batch; the message names the column (as `Assembly.upsert` calls it
    /// in Python), the index, the bad value and what was expected.
    fn check(&self, i: usize, item: &ItemSpec) -> CoreResult<()> {
        let id = &item.node_id;
        let bad = |column: &str, value: &dyn std::fmt::Display, what: String| {
            Err(CoreError::Value(format!(
                "{column}[{i}] = {value} (node_id {id:?}): {what}"
            )))
        };
        if id.is_empty() || id == PLACEHOLDER_ID {
            return Err(CoreError::Value(format!(
                "node_ids[{i}] = {id:?}: a node id must be non-empty and not {PLACEHOLDER_ID:?}"
            )));
        }
        let windows = &self.config.windows;
        let w = usize::from(item.window);
        if w >= windows.len() {
            let names: Vec<String> = windows
                .iter()
                .enumerate()
                .map(|(k, (n, _))| format!("{k} ({n})"))
                .collect();
            let expected = format!("expected a window index: {}", names.join(", "));
            return bad("windows", &item.window, expected);
        }
        if Some(item.window) == self.config.reserve {
            let what = format!(
                "{:?} is the reserve window, which is never filled",
                windows[w].0
            );
            return bad("windows", &item.window, what);
        }
        if codes::name_of(&codes::KINDS, item.kind).is_none() {
            let what = format!("not a kind; expected {}", codes::listing(&codes::KINDS));
            return bad("kinds", &item.kind, what);
        }
        if codes::name_of(&codes::ROLES, item.role).is_none() {
            let what = format!("not a role; expected {}", codes::listing(&codes::ROLES));
            return bad("roles", &item.role, what);
        }
        if item.flags & !codes::ALL_FLAGS != 0 {
            let what = format!(
                "unknown bits {:#x}; expected an OR of {}",
                item.flags & !codes::ALL_FLAGS,
                codes::listing(&codes::FLAGS)
            );
            return bad("flags", &item.flags, what);
        }
        if (item.kind == kind::TOOL_RESULT) != (item.role == role::TOOL) {
            let what = format!(
                "KIND_TOOL_RESULT ({}) goes with ROLE_TOOL ({}) and only with it; roles[{i}] = {}",
                kind::TOOL_RESULT,
                role::TOOL,
                item.role
            );
            return bad("kinds", &item.kind, what);
        }
        Ok(())
    }

    /// Store one item; `count` is its fresh text count, `None` when its text was unchanged.
    fn put(&mut self, item: ItemSpec, count: Option<u32>) -> u32 {
        let existing = self.index.get(item.node_id.as_str()).copied();
        let slot = match existing {
            Some(s) => s,
            None => self.allocate(&item.node_id),
        };
        let s = slot as usize;
        let c = &self.cols;
        // An earlier duplicate in the same batch may have changed the text meanwhile.
        let count = match count {
            Some(n) => Some(n),
            None if c.texts[s] != item.text => {
                Some(self.count(std::slice::from_ref(&item), &[0])[0])
            }
            None => None,
        };
        let moved = existing.is_none()
            || c.kind[s] != item.kind
            || c.priority[s] != item.priority
            || c.rank[s] != item.rank
            || c.seq[s] != item.seq
            || c.turn[s] != item.turn;
        let old_kind = c.kind[s];
        self.cols.write(s, item, count);
        if moved {
            if existing.is_some() {
                self.invalidate(old_kind);
            }
            self.place(slot);
        }
        self.cols.tokens[s]
    }

    /// A slot for a new node id: a free one, or a new one at the end.
    fn allocate(&mut self, node_id: &str) -> u32 {
        let id: Arc<str> = Arc::from(node_id);
        let slot = match self.free.pop() {
            Some(s) => {
                self.cols.node_ids.set(s as usize, id.clone());
                s
            }
            None => {
                let s = u32::try_from(self.cols.alive.len()).unwrap_or(u32::MAX);
                self.cols.grow(id.clone());
                s
            }
        };
        self.index.insert(id, slot);
        slot
    }

    /// Extend the cached orders of `slot`'s kind in place when it sorts last, else invalidate.
    fn place(&mut self, slot: u32) {
        let c = &self.cols;
        let s = slot as usize;
        if c.kind[s] == kind::CONTEXT {
            let key = |x: u32| c.context_key(x);
            extend_or_invalidate(&mut self.orders.context, slot, key);
        } else {
            extend_or_invalidate(&mut self.orders.history, slot, |x| c.history_key(x));
            extend_or_invalidate(&mut self.orders.turns, slot, |x| c.turn_key(x));
        }
    }

    fn invalidate(&mut self, k: u8) {
        if k == kind::CONTEXT {
            self.orders.context.valid = false;
        } else {
            self.orders.history.valid = false;
            self.orders.turns.valid = false;
        }
    }

    /// Remove items by node id; returns how many were live.
    pub fn remove(&mut self, node_ids: &[String]) -> usize {
        let mut removed = 0;
        for id in node_ids {
            let Some(slot) = self.index.remove(id.as_str()) else {
                continue;
            };
            let s = slot as usize;
            let c = &mut self.cols;
            if c.alive[s] {
                let w = usize::from(c.window[s]);
                if let Some(d) = c.demand.get_mut(w) {
                    *d = d.saturating_sub(c.tokens[s] as usize);
                }
            }
            c.alive[s] = false;
            c.texts[s] = String::new();
            c.labels[s] = String::new();
            c.summaries[s] = None;
            c.derived[s] = Derived::default();
            self.free.push(slot);
            removed += 1;
        }
        if removed > 0 {
            let alive = &self.cols.alive;
            for order in [
                &mut self.orders.context,
                &mut self.orders.history,
                &mut self.orders.turns,
            ] {
                if order.valid {
                    order.slots.retain(|&s| alive[s as usize]);
                }
            }
            if self.free.len() >= COMPACT_MIN_FREE && self.free.len() > self.index.len() {
                self.compact_slots();
            }
        }
        removed
    }

    /// Renumber the live items into slots `0..len()` (in their slot order) and drop the
    /// tombstones. Valid cached orders are renumbered, not rebuilt.
    fn compact_slots(&mut self) {
        let c = &mut self.cols;
        let n = c.alive.len();
        let mut new_of = vec![u32::MAX; n];
        let mut next = 0u32;
        for (s, slot) in new_of.iter_mut().enumerate() {
            if c.alive[s] {
                *slot = next;
                next += 1;
            }
        }
        fn keep<T>(v: &mut Vec<T>, alive: &[bool]) {
            let mut s = 0;
            v.retain(|_| {
                let live = alive.get(s).copied().unwrap_or(false);
                s += 1;
                live
            });
        }
        let alive = std::mem::take(&mut c.alive);
        c.node_ids = c.node_ids.kept(&alive);
        keep(&mut c.texts, &alive);
        keep(&mut c.labels, &alive);
        keep(&mut c.summaries, &alive);
        keep(&mut c.chars, &alive);
        keep(&mut c.tokens, &alive);
        keep(&mut c.overhead, &alive);
        keep(&mut c.window, &alive);
        keep(&mut c.priority, &alive);
        keep(&mut c.rank, &alive);
        keep(&mut c.seq, &alive);
        keep(&mut c.kind, &alive);
        keep(&mut c.role, &alive);
        keep(&mut c.turn, &alive);
        keep(&mut c.flags, &alive);
        keep(&mut c.derived, &alive);
        c.alive = vec![true; next as usize];
        for slot in self.index.values_mut() {
            *slot = new_of[*slot as usize];
        }
        for order in [
            &mut self.orders.context,
            &mut self.orders.history,
            &mut self.orders.turns,
        ] {
            if order.valid {
                for s in &mut order.slots {
                    *s = new_of[*s as usize];
                }
            } else {
                order.slots.clear();
            }
        }
        self.free.clear();
    }

    /// Slots in use, live or not (the length of every slot-indexed column).
    pub fn slots(&self) -> usize {
        self.cols.alive.len()
    }

    /// Rebuild the cached orders that are out of date.
    pub(crate) fn refresh_orders(&mut self) {
        let c = &self.cols;
        let live = |k: fn(u8) -> bool| -> Vec<u32> {
            (0..c.alive.len())
                .filter(|&s| c.alive[s] && k(c.kind[s]))
                .map(|s| s as u32)
                .collect()
        };
        if !self.orders.context.valid {
            let mut v = live(|k| k == kind::CONTEXT);
            v.sort_unstable_by_key(|&s| c.context_key(s));
            self.orders.context = Order {
                slots: v,
                valid: true,
            };
        }
        if !self.orders.history.valid {
            let mut v = live(|k| k != kind::CONTEXT);
            v.sort_unstable_by_key(|&s| c.history_key(s));
            self.orders.history = Order {
                slots: v,
                valid: true,
            };
        }
        if !self.orders.turns.valid {
            let mut v = self.orders.history.slots.clone();
            v.sort_by_key(|&s| c.turn[s as usize]);
            self.orders.turns = Order {
                slots: v,
                valid: true,
            };
        }
    }
}

fn extend_or_invalidate<K: Ord>(order: &mut Order, slot: u32, key: impl Fn(u32) -> K) {
    if !order.valid {
        return;
    }
    match order.slots.last() {
        Some(&last) if key(last) >= key(slot) => order.valid = false,
        _ => order.slots.push(slot),
    }
}

impl Columns {
    /// Overwrite slot `s` with `item`; `count` is its text count, `None` to keep the text.
    fn write(&mut self, s: usize, item: ItemSpec, count: Option<u32>) {
        if self.alive[s] {
            let w = usize::from(self.window[s]);
            if let Some(d) = self.demand.get_mut(w) {
                *d = d.saturating_sub(self.tokens[s] as usize);
            }
        }
        let text_count = count.unwrap_or_else(|| self.tokens[s].saturating_sub(self.overhead[s]));
        if count.is_some() {
            self.chars[s] = u32::try_from(item.text.chars().count()).unwrap_or(u32::MAX);
            self.texts[s] = item.text;
        }
        // Trimmed texts and stand-ins depend on the text, summary, label and token count only.
        if count.is_some()
            || self.labels[s] != item.label
            || self.summaries[s] != item.summary
            || self.overhead[s] != item.overhead
        {
            self.derived[s] = Derived::default();
        }
        self.tokens[s] = text_count.saturating_add(item.overhead);
        self.overhead[s] = item.overhead;
        self.labels[s] = item.label;
        self.summaries[s] = item.summary;
        self.window[s] = item.window;
        self.priority[s] = item.priority;
        self.rank[s] = item.rank;
        self.seq[s] = item.seq;
        self.kind[s] = item.kind;
        self.role[s] = item.role;
        self.turn[s] = item.turn;
        self.flags[s] = item.flags;
        self.alive[s] = true;
        let w = usize::from(item.window);
        if self.demand.len() <= w {
            self.demand.resize(w + 1, 0);
        }
        self.demand[w] += self.tokens[s] as usize;
    }

    fn grow(&mut self, id: Arc<str>) {
        self.node_ids.push(id);
        self.texts.push(String::new());
        self.labels.push(String::new());
        self.summaries.push(None);
        self.chars.push(0);
        self.tokens.push(0);
        self.overhead.push(0);
        self.window.push(0);
        self.priority.push(0);
        self.rank.push(0);
        self.seq.push(0);
        self.kind.push(0);
        self.role.push(0);
        self.turn.push(0);
        self.flags.push(0);
        self.alive.push(false);
        self.derived.push(Derived::default());
    }

    /// Sort key of context grains.
    pub(crate) fn context_key(&self, s: u32) -> (i64, u32, u64, u32) {
        let i = s as usize;
        (self.priority[i], self.rank[i], self.seq[i], s)
    }

    /// Sort key of history items.
    pub(crate) fn history_key(&self, s: u32) -> (u64, u32) {
        (self.seq[s as usize], s)
    }

    /// Sort key of history items grouped by turn.
    pub(crate) fn turn_key(&self, s: u32) -> (u32, u64, u32) {
        let i = s as usize;
        (self.turn[i], self.seq[i], s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::counter_for_encoding;

    pub(crate) fn assembly() -> Assembly {
        let counter = counter_for_encoding("o200k_base").expect("known encoding");
        let windows = vec![
            ("instruction".to_string(), 0.15),
            ("core_memory".to_string(), 0.15),
            ("history".to_string(), 0.4),
            ("tool".to_string(), 0.2),
            ("reserve".to_string(), 0.1),
        ];
        let mut config = AssemblyConfig::new(counter, windows);
        config.reserve = Some(4);
        Assembly::new(config).expect("valid config")
    }

    fn item(id: &str, text: &str, seq: u64) -> ItemSpec {
        ItemSpec {
            node_id: id.into(),
            text: text.into(),
            seq,
            overhead: 3,
            ..ItemSpec::default()
        }
    }

    #[test]
    fn upsert_counts_and_replaces() {
        let mut a = assembly();
        let t = a
            .upsert(vec![item("sys.a", "hello world", 0), item("sys.b", "x", 1)])
            .expect("valid");
        assert_eq!(t, vec![2 + 3, 1 + 3]);
        assert_eq!(a.len(), 2);
        let t = a.upsert(vec![item("sys.a", "hello", 2)]).expect("valid");
        assert_eq!(t, vec![1 + 3]);
        assert_eq!(a.len(), 2);
        assert_eq!(a.tokens("sys.a"), Some(4));
        assert_eq!(a.remove(&["sys.a".into(), "nope".into()]), 1);
        assert_eq!(a.tokens("sys.a"), None);
        a.upsert(vec![item("sys.c", "abc", 3)]).expect("valid");
        assert_eq!(a.cols.alive.len(), 2, "the free slot is reused");
    }

    #[test]
    fn rejects_bad_items() {
        let mut a = assembly();
        let err = |a: &mut Assembly, edit: &dyn Fn(&mut ItemSpec)| {
            let mut bad = item("x", "", 0);
            edit(&mut bad);
            match a.upsert(vec![item("ok", "", 1), bad]) {
                Err(CoreError::Value(m)) => m,
                other => panic!("{other:?}"),
            }
        };
        let m = err(&mut a, &|b| b.window = 4);
        assert!(
            m.starts_with("windows[1] = 4 (node_id \"x\")") && m.contains("reserve"),
            "{m}"
        );
        let m = err(&mut a, &|b| b.window = 9);
        assert!(
            m.starts_with("windows[1] = 9") && m.contains("4 (reserve)"),
            "{m}"
        );
        let m = err(&mut a, &|b| b.kind = 3);
        assert!(
            m.starts_with("kinds[1] = 3") && m.contains("KIND_TOOL_RESULT (2)"),
            "{m}"
        );
        let m = err(&mut a, &|b| b.role = 7);
        assert!(
            m.starts_with("roles[1] = 7") && m.contains("ROLE_TOOL (3)"),
            "{m}"
        );
        let m = err(&mut a, &|b| b.flags = 0x21);
        assert!(m.starts_with("flags[1] = 33") && m.contains("0x20"), "{m}");
        let m = err(&mut a, &|b| b.kind = kind::TOOL_RESULT);
        assert!(
            m.starts_with("kinds[1] = 2") && m.contains("roles[1] = 0"),
            "{m}"
        );
        let m = err(&mut a, &|b| {
            b.kind = kind::MESSAGE;
            b.role = role::TOOL;
        });
        assert!(m.starts_with("kinds[1] = 1"), "{m}");
        let m = err(&mut a, &|b| b.node_id = PLACEHOLDER_ID.into());
        assert!(m.starts_with("node_ids[1] = \"hist.removed\""), "{m}");
        assert!(a.is_empty(), "a rejected batch changes nothing");
    }

    #[test]
    fn orders_follow_changes() {
        let mut a = assembly();
        let mut items: Vec<ItemSpec> = (0..5)
            .map(|i| item(&format!("c{i}"), "t", 10 - i))
            .collect();
        for (i, it) in items.iter_mut().enumerate() {
            it.priority = (i % 2) as i64;
        }
        a.upsert(items).expect("valid");
        a.refresh_orders();
        let ids: Vec<&str> = a
            .orders
            .context
            .slots
            .iter()
            .map(|&s| &*a.cols.node_ids[s as usize])
            .collect();
        assert_eq!(ids, vec!["c4", "c2", "c0", "c3", "c1"]);
        let mut h = item("h1", "hi", 1);
        h.kind = kind::MESSAGE;
        a.upsert(vec![h.clone()]).expect("valid");
        h.node_id = "h2".into();
        h.seq = 2;
        a.upsert(vec![h]).expect("valid");
        assert!(a.orders.history.valid, "appending keeps the order valid");
        a.remove(&["c2".into()]);
        assert!(a.orders.context.valid);
        assert_eq!(a.orders.context.slots.len(), 4);
    }
}
