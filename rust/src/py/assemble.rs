//! `Assembly`, `Plan` and `fuse` of `ctxengine._core`: bindings of [`crate::assemble`].
//!
//! Columns cross the boundary as lists of primitives; the items stay in Rust between renders,
//! and a `Plan` keeps Rust vectors, turning them into Python objects only when asked.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyDict, PyList, PyString};

use crate::assemble::{self, Assembly, AssemblyConfig, ItemSpec, Plan, Reason, Status};
use crate::tokens::{counter_for_encoding, counter_for_model, Counter, Encoding};

/// Upserts with at least this many items, or this many bytes of text, are counted with the GIL
/// released.
const DETACH_ITEMS: usize = 16;
const DETACH_BYTES: usize = 8 * 1024;
/// `Plan.tokens_after_of` reads the rows once for each of this many node ids or fewer, and
/// makes a table of them for more.
const FEW_IDS: usize = 4;

fn resolve(model_or_encoding: &str) -> PyResult<Counter> {
    let name = model_or_encoding.trim();
    Ok(match Encoding::from_name(name) {
        Some(_) => counter_for_encoding(name)?,
        None => counter_for_model(name)?,
    })
}

/// Convert an int column, naming the column and the first value out of `T`'s range.
fn narrow<T: TryFrom<i64> + Bounded>(column: &str, values: Vec<i64>) -> PyResult<Vec<T>> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            T::try_from(v).map_err(|_| {
                PyValueError::new_err(format!(
                    "{column}[{i}] = {v} is out of range 0..={}",
                    T::MAX
                ))
            })
        })
        .collect()
}

/// Largest value of an unsigned column type.
trait Bounded {
    const MAX: u64;
}

impl Bounded for u8 {
    const MAX: u64 = u8::MAX as u64;
}

impl Bounded for u32 {
    const MAX: u64 = u32::MAX as u64;
}

impl Bounded for u64 {
    const MAX: u64 = i64::MAX as u64;
}

fn same_length(n: usize, columns: &[(&str, usize)]) -> PyResult<()> {
    match columns.iter().find(|(_, len)| *len != n) {
        Some((name, len)) => Err(PyValueError::new_err(format!(
            "column {name} has {len} values but node_ids has {n}; all columns must have the same \
             length"
        ))),
        None => Ok(()),
    }
}

/// Python strings by slot (node ids, replacement texts), shared by an assembly and its plans so that a warm render
/// reuses the `str` objects of the previous one. An entry is valid while its `Arc<str>` is the
/// one the plan holds for that slot (a reused slot gets a new `Arc`).
#[derive(Default)]
struct Names(Mutex<Vec<Option<Named>>>);

/// A text and its Python string.
type Named = (Arc<str>, Py<PyString>);

impl Names {
    /// The Python string of `text` stored under `key`, reusing the cached one while its text is
    /// the same `Arc` as last time.
    fn fetch<'py>(
        cache: &mut Vec<Option<Named>>,
        py: Python<'py>,
        key: usize,
        text: &Arc<str>,
    ) -> Bound<'py, PyString> {
        if cache.len() <= key {
            cache.resize_with(key + 1, || None);
        }
        match &cache[key] {
            Some((known, s)) if Arc::ptr_eq(known, text) => s.bind(py).clone(),
            _ => {
                let s = PyString::new(py, text);
                cache[key] = Some((Arc::clone(text), s.clone().unbind()));
                s
            }
        }
    }
}

/// Python strings of decision reasons by slot, reused while the slot's reason and node id are
/// the same as last time.
#[derive(Default)]
struct Reasons(Mutex<Vec<Option<Explained>>>);

/// A reason, the node id it was formatted for, and its Python string.
type Explained = (Reason, Arc<str>, Py<PyString>);

/// The items of a session kept in Rust between renders, and the planner that fits them into a
/// budget. The handle is frozen; a lock inside serializes calls.
#[pyclass(frozen, name = "Assembly", module = "ctxengine._core")]
pub struct PyAssembly {
    inner: Mutex<Assembly>,
    names: Arc<Names>,
    texts: Arc<Names>,
    reasons: Arc<Reasons>,
}

#[pymethods]
impl PyAssembly {
    /// Raises `EncodingError` for an unknown model and `ValueError` for an invalid option.
    #[new]
    #[pyo3(signature = (
        model_or_encoding, windows, *, reserve = Some("reserve"), pretrim_ratio = 0.8,
        weights = (0.25, 0.65, 0.35, 0.1), soft_trim_chars = 4000, soft_keep_chars = 1500,
        protect_last_assistant = 3, hard_trim_max_score = 0.6
    ), text_signature = "(model_or_encoding, windows, *, reserve='reserve', pretrim_ratio=0.8, \
        weights=(0.25, 0.65, 0.35, 0.1), soft_trim_chars=4000, soft_keep_chars=1500, \
        protect_last_assistant=3, hard_trim_max_score=0.6)")]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        model_or_encoding: &str,
        windows: Vec<(String, f64)>,
        reserve: Option<&str>,
        pretrim_ratio: f64,
        weights: (f32, f32, f32, f32),
        soft_trim_chars: usize,
        soft_keep_chars: usize,
        protect_last_assistant: usize,
        hard_trim_max_score: f32,
    ) -> PyResult<Self> {
        let mut config = AssemblyConfig::new(resolve(model_or_encoding)?, windows);
        config.reserve = match reserve {
            None => None,
            Some(name) => Some(config.window_index(name).ok_or_else(|| {
                let names: Vec<&str> = config.windows.iter().map(|(n, _)| n.as_str()).collect();
                PyValueError::new_err(format!(
                    "reserve window {name:?} is not one of the windows {names:?}; pass \
                     reserve=None for no reserve"
                ))
            })?),
        };
        config.pretrim_ratio = pretrim_ratio;
        config.weights = [weights.0, weights.1, weights.2, weights.3];
        config.soft_trim_chars = soft_trim_chars;
        config.soft_keep_chars = soft_keep_chars;
        config.protect_last_assistant = protect_last_assistant;
        config.hard_trim_max_score = hard_trim_max_score;
        Ok(Self {
            inner: Mutex::new(Assembly::new(config)?),
            names: Arc::default(),
            texts: Arc::default(),
            reasons: Arc::default(),
        })
    }

    /// Insert or replace items given as keyword-only columns; returns each item's tokens
    /// (count + overhead). Raises `ValueError` naming the column, the index and the value when
    /// lengths differ or a value is out of range (codes: the `KIND_*`, `ROLE_*`, `FLAG_*`
    /// constants of this module).
    #[pyo3(signature = (
        *, node_ids, texts, windows, priorities, ranks, seqs, kinds, roles, turns, flags,
        overheads, labels, summaries
    ))]
    #[allow(clippy::too_many_arguments)]
    fn upsert(
        &self,
        py: Python<'_>,
        node_ids: Vec<String>,
        texts: Vec<String>,
        windows: Vec<i64>,
        priorities: Vec<i64>,
        ranks: Vec<i64>,
        seqs: Vec<i64>,
        kinds: Vec<i64>,
        roles: Vec<i64>,
        turns: Vec<i64>,
        flags: Vec<i64>,
        overheads: Vec<i64>,
        labels: Vec<String>,
        summaries: Vec<Option<String>>,
    ) -> PyResult<Vec<u32>> {
        let n = node_ids.len();
        same_length(
            n,
            &[
                ("texts", texts.len()),
                ("windows", windows.len()),
                ("priorities", priorities.len()),
                ("ranks", ranks.len()),
                ("seqs", seqs.len()),
                ("kinds", kinds.len()),
                ("roles", roles.len()),
                ("turns", turns.len()),
                ("flags", flags.len()),
                ("overheads", overheads.len()),
                ("labels", labels.len()),
                ("summaries", summaries.len()),
            ],
        )?;
        let windows: Vec<u8> = narrow("windows", windows)?;
        let ranks: Vec<u32> = narrow("ranks", ranks)?;
        let seqs: Vec<u64> = narrow("seqs", seqs)?;
        let kinds: Vec<u8> = narrow("kinds", kinds)?;
        let roles: Vec<u8> = narrow("roles", roles)?;
        let turns: Vec<u32> = narrow("turns", turns)?;
        let flags: Vec<u8> = narrow("flags", flags)?;
        let overheads: Vec<u32> = narrow("overheads", overheads)?;
        let mut items = Vec::with_capacity(n);
        let columns = node_ids.into_iter().zip(texts).zip(labels).zip(summaries);
        for (i, (((node_id, text), label), summary)) in columns.enumerate() {
            items.push(ItemSpec {
                node_id,
                text,
                window: windows[i],
                priority: priorities[i],
                rank: ranks[i],
                seq: seqs[i],
                kind: kinds[i],
                role: roles[i],
                turn: turns[i],
                flags: flags[i],
                overhead: overheads[i],
                label,
                summary,
            });
        }
        let bytes: usize = items.iter().map(|i| i.text.len()).sum();
        let work = || self.inner.lock().upsert(items);
        let counts = if n >= DETACH_ITEMS || bytes >= DETACH_BYTES {
            py.detach(work)
        } else {
            work()
        };
        Ok(counts?)
    }

    /// Remove items by node id; returns how many existed.
    fn remove(&self, node_ids: Vec<String>) -> usize {
        self.inner.lock().remove(&node_ids)
    }

    fn __len__(&self) -> usize {
        self.inner.lock().len()
    }

    /// Tokens of a live item (count + overhead), or None.
    fn tokens(&self, node_id: &str) -> Option<u32> {
        self.inner.lock().tokens(node_id)
    }

    /// Tokens of each of `node_ids` (count + overhead), 0 for one that is no live item:
    /// [`tokens`](Self::tokens) of each, in one call under one lock (a compaction weighs
    /// every history item it may summarize).
    fn tokens_of(&self, node_ids: Vec<PyBackedStr>) -> Vec<u32> {
        let inner = self.inner.lock();
        node_ids
            .iter()
            .map(|id| inner.tokens(id).unwrap_or(0))
            .collect()
    }

    /// Tokens of the protected items (PROTECTED flag, the latest user message's turn group):
    /// the least budget `plan` accepts.
    fn protected_tokens(&self) -> usize {
        self.inner.lock().protected_tokens()
    }

    /// Plan the render within `budget` tokens (GIL released). Incremental: when everything
    /// fits, the plan follows the totals and orders kept up to date by `upsert`/`remove`;
    /// `full=True` recomputes everything from the items (the same plan). `hold` > 1: the
    /// ladder runs only when the total passes `hold` times the target (at most the available
    /// budget), and then cuts to the target. Raises `BudgetError` when protected items alone
    /// exceed the budget and `ValueError` for a negative budget or a `hold` that is not a
    /// finite number.
    #[pyo3(signature = (budget, *, full = false, hold = 1.0))]
    fn plan(&self, py: Python<'_>, budget: i64, full: bool, hold: f64) -> PyResult<PyPlan> {
        let budget = usize::try_from(budget)
            .map_err(|_| PyValueError::new_err(format!("budget must be >= 0; got {budget}")))?;
        if !hold.is_finite() {
            return Err(PyValueError::new_err(format!(
                "hold must be a finite number; got {hold}"
            )));
        }
        let plan = py.detach(|| self.inner.lock().plan_holding(budget, hold, !full))?;
        Ok(PyPlan {
            plan,
            names: Arc::clone(&self.names),
            texts: Arc::clone(&self.texts),
            reasons: Arc::clone(&self.reasons),
        })
    }

    fn __repr__(&self) -> String {
        let a = self.inner.lock();
        format!(
            "<ctxengine.Assembly {} items, {} windows, {}>",
            a.len(),
            a.config().windows.len(),
            a.config().counter.name()
        )
    }
}

/// The decisions of one `Assembly.plan`: Rust vectors, turned into Python objects on access.
#[pyclass(frozen, name = "Plan", module = "ctxengine._core")]
pub struct PyPlan {
    plan: Plan,
    names: Arc<Names>,
    texts: Arc<Names>,
    reasons: Arc<Reasons>,
}

impl PyPlan {
    /// The reason of every live item as a Python list.
    fn reasons<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let p = &self.plan;
        let kept = PyString::intern(py, "kept");
        let mut cache = self.reasons.0.lock();
        cache.resize_with(p.node_ids.len(), || None);
        let mut out = Vec::with_capacity(p.live.len());
        for &slot in &p.live {
            let s = slot as usize;
            let (reason, id) = (p.reasons[s], &p.node_ids[s]);
            if p.status[s] == Status::Kept {
                out.push(kept.clone());
                continue;
            }
            match &cache[s] {
                Some((r, known, text)) if *r == reason && Arc::ptr_eq(known, id) => {
                    out.push(text.bind(py).clone());
                }
                _ => {
                    let text = PyString::new(py, &p.reason(slot));
                    cache[s] = Some((reason, Arc::clone(id), text.clone().unbind()));
                    out.push(text);
                }
            }
        }
        drop(cache);
        PyList::new(py, out)
    }

    /// Node ids of `slots` (which may hold the placeholder) as a Python list.
    fn ids<'py>(&self, py: Python<'py>, slots: &[u32]) -> PyResult<Bound<'py, PyList>> {
        let ids = &self.plan.node_ids;
        let placeholder = PyString::intern(py, assemble::PLACEHOLDER_ID);
        let mut cache = self.names.0.lock();
        if cache.len() > ids.len() {
            cache.truncate(ids.len()); // slots were compacted: the rest can never be hit
        }
        let out: Vec<Bound<'py, PyString>> = slots
            .iter()
            .map(|&s| match ids.get(s as usize) {
                Some(id) => Names::fetch(&mut cache, py, s as usize, id),
                None => placeholder.clone(),
            })
            .collect();
        drop(cache);
        PyList::new(py, out)
    }
}

#[pymethods]
impl PyPlan {
    /// The budget given to `plan`.
    #[getter]
    fn budget(&self) -> usize {
        self.plan.budget
    }

    /// Budget minus the reserve window's share.
    #[getter]
    fn available(&self) -> usize {
        self.plan.available
    }

    /// `min(pretrim_ratio × budget, available)`: what the ladder aims at.
    #[getter]
    fn target(&self) -> usize {
        self.plan.target
    }

    /// The high-water mark the ladder runs past: `target`, or above it when the plan was
    /// asked to hold (`plan(..., hold=...)`).
    #[getter]
    fn high(&self) -> usize {
        self.plan.high
    }

    /// Tokens of every live item before the ladder.
    #[getter]
    fn total_before(&self) -> usize {
        self.plan.total_before
    }

    /// Tokens rendered after the ladder, replacements and placeholder included.
    #[getter]
    fn total_after(&self) -> usize {
        self.plan.total_after
    }

    /// `total_after <= target`, or `<= high` when the total was held under the mark.
    #[getter]
    fn fits(&self) -> bool {
        self.plan.fits
    }

    /// Rendered context grains (kind 0) in order; a folded branch appears once.
    #[getter]
    fn context_order<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.ids(py, &self.plan.context_order)
    }

    /// Rendered history items in seq order, `hist.removed` where turns were removed.
    #[getter]
    fn history_order<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.ids(py, &self.plan.history_order)
    }

    /// Where this plan's history continues `prev`'s: `(head, k, fresh)` when
    /// `history_order[head:end]` holds the node ids of `prev.history_order[k:]`, in order
    /// (`end = head + len(prev.history_order) - k`), after `head < max_head` nodes new at the
    /// front (the first `head` for which `history_order[head]` is in `prev`'s order decides);
    /// `fresh` the node ids before `head` and from `end` on. None otherwise. The answer of
    /// comparing the two `history_order` lists, without making them.
    fn history_after<'py>(
        &self,
        py: Python<'py>,
        prev: PyRef<'py, PyPlan>,
        max_head: usize,
    ) -> PyResult<Option<(usize, usize, Bound<'py, PyList>)>> {
        let (order, before) = (&self.plan.history_order, &prev.plan.history_order);
        // a slot's node id as `history_order` gives it
        fn name(p: &Plan, slot: u32) -> &str {
            p.node_ids
                .get(slot as usize)
                .map_or(assemble::PLACEHOLDER_ID, |id| id)
        }
        // the same node id: the same slot of a chunk both plans share (the usual case: the
        // assembly wrote only its last chunks in between), the same shared string, or equal ones
        let shared = self.plan.node_ids.shared_with(&prev.plan.node_ids);
        let same = |a: u32, b: u32| {
            if a == b && shared.slot(a as usize) {
                return true;
            }
            let (x, y) = (name(&self.plan, a), name(&prev.plan, b));
            (std::ptr::eq(x.as_ptr(), y.as_ptr()) && x.len() == y.len()) || x == y
        };
        for head in 0..max_head.min(order.len()) {
            let Some(k) = before.iter().position(|&s| same(order[head], s)) else {
                continue;
            };
            let end = head + before.len() - k;
            if end > order.len()
                || !order[head..end]
                    .iter()
                    .zip(&before[k..])
                    .all(|(&a, &b)| same(a, b))
            {
                return Ok(None);
            }
            let fresh: Vec<u32> = order[..head].iter().chain(&order[end..]).copied().collect();
            return Ok(Some((head, k, self.ids(py, &fresh)?)));
        }
        Ok(None)
    }

    /// node_id -> replacement text (trimmed, cleared, stand-in, placeholder).
    #[getter]
    fn replacements<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let repl = &self.plan.replacements;
        let slots: Vec<u32> = repl.iter().map(|(s, _)| *s).collect();
        let names = self.ids(py, &slots)?;
        let mut cache = self.texts.0.lock();
        let texts: Vec<Bound<'py, PyString>> = repl
            .iter()
            .map(|(s, t)| Names::fetch(&mut cache, py, *s as usize, t))
            .collect();
        drop(cache);
        for (name, text) in names.iter().zip(texts) {
            d.set_item(name, text)?;
        }
        if let Some(p) = &self.plan.placeholder {
            d.set_item(assemble::PLACEHOLDER_ID, &p.text)?;
        }
        Ok(d)
    }

    /// `(name, demand, alloc, used)` per window.
    #[getter]
    fn windows(&self) -> Vec<(String, usize, usize, usize)> {
        self.plan
            .windows
            .iter()
            .map(|w| (w.name.clone(), w.demand, w.alloc, w.used))
            .collect()
    }

    /// Turn groups to summarize, oldest first.
    #[getter]
    fn compaction_turns(&self) -> Vec<u32> {
        self.plan.compaction_turns.clone()
    }

    /// Tokens those turn groups hold.
    #[getter]
    fn compaction_tokens(&self) -> usize {
        self.plan.compaction_tokens
    }

    /// Seconds per stage: allocate, soft, hard, fold, compaction, order.
    #[getter]
    fn timings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = self.plan.timings;
        let d = PyDict::new(py);
        for (name, ns) in [
            ("allocate", t.allocate),
            ("soft", t.soft),
            ("hard", t.hard),
            ("fold", t.fold),
            ("compaction", t.compaction),
            ("order", t.order),
        ] {
            d.set_item(name, ns as f64 * 1e-9)?;
        }
        Ok(d)
    }

    /// Columns for every live item: node_ids, status, stage, reason, tokens_before,
    /// tokens_after, window. The hard-trim placeholder is not an item: see `replacements`.
    #[allow(clippy::type_complexity)]
    fn decisions<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(
        Bound<'py, PyList>,
        Vec<u8>,
        Vec<u8>,
        Bound<'py, PyList>,
        Vec<u32>,
        Vec<u32>,
        Vec<u8>,
    )> {
        let p = &self.plan;
        let live = &p.live;
        let reasons = self.reasons(py)?;
        let pick = |col: &[u32]| -> Vec<u32> { live.iter().map(|&s| col[s as usize]).collect() };
        Ok((
            self.ids(py, live)?,
            live.iter().map(|&s| p.status[s as usize] as u8).collect(),
            live.iter().map(|&s| p.stage[s as usize] as u8).collect(),
            reasons,
            pick(&p.tokens_before),
            pick(&p.tokens_after),
            live.iter().map(|&s| p.window[s as usize]).collect(),
        ))
    }

    /// The `tokens_after` of `decisions` of each of `node_ids` (0 for one that is no live
    /// item of the plan), without making the other columns: a compaction's landing weighs
    /// the items it may summarize by what the plan left them.
    fn tokens_after_of(&self, node_ids: Vec<PyBackedStr>) -> Vec<u32> {
        let p = &self.plan;
        // each live item's node id (as `decisions` names it) and tokens after, in row order
        let rows = p.live.iter().map(|&s| {
            let id = p
                .node_ids
                .get(s as usize)
                .map_or(assemble::PLACEHOLDER_ID, |id| id);
            (id, p.tokens_after.get(s as usize).copied().unwrap_or(0))
        });
        if node_ids.len() <= FEW_IDS {
            // a few (the summary's): the rows read for each, the last of a node id standing
            return node_ids
                .iter()
                .map(|id| {
                    let id: &str = id;
                    rows.clone()
                        .rev()
                        .find(|&(n, _)| n == id)
                        .map_or(0, |(_, t)| t)
                })
                .collect();
        }
        // a later row of an id replaces it
        let after: HashMap<&str, u32, BuildHasherDefault<ahash::AHasher>> = rows.collect();
        node_ids
            .iter()
            .map(|id| after.get(&**id).copied().unwrap_or(0))
            .collect()
    }

    /// node_ids whose status is not kept.
    fn changed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let slots: Vec<u32> = self.plan.changed().collect();
        self.ids(py, &slots)
    }

    fn __repr__(&self) -> String {
        let p = &self.plan;
        format!(
            "<ctxengine.Plan fits={} total {} -> {} of target {} (budget {})>",
            if p.fits { "True" } else { "False" },
            p.total_before,
            p.total_after,
            p.target,
            p.budget
        )
    }
}

/// Add the integer codes of the boundary (`KIND_*`, `ROLE_*`, `FLAG_*`, `STATUS_*`, `STAGE_*`)
/// and `PLACEHOLDER_ID` to the module.
pub fn add_constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use assemble::codes;
    let tables = [
        &codes::KINDS[..],
        &codes::ROLES[..],
        &codes::FLAGS[..],
        &codes::STATUSES[..],
        &codes::STAGES[..],
    ];
    for (name, value) in tables.into_iter().flatten() {
        m.add(*name, *value)?;
    }
    m.add("PLACEHOLDER_ID", assemble::PLACEHOLDER_ID)
}

/// Fuse the grains of one render: `(winner index for each input, winner indices in render
/// order)`. Lowest priority wins, then lowest rank, then lowest seq. Raises `ValueError` when
/// the columns differ in length or a rank/seq is negative.
#[pyfunction]
pub fn fuse(
    py: Python<'_>,
    node_ids: Vec<String>,
    priorities: Vec<i64>,
    ranks: Vec<i64>,
    seqs: Vec<i64>,
) -> PyResult<(Vec<u32>, Vec<u32>)> {
    let ranks: Vec<u32> = narrow("ranks", ranks)?;
    let seqs: Vec<u64> = narrow("seqs", seqs)?;
    let fused = py.detach(|| assemble::fuse(&node_ids, &priorities, &ranks, &seqs))?;
    Ok((fused.winner, fused.order))
}
