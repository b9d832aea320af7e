//! Soft trim (DESIGN.md §4 step 1): in each window over its allocation, oldest first, long
//! tool results become a plugin's summary or head + tail, then, if that is not enough, a
//! `[tool result cleared: ...]` placeholder. Spared: PROTECTED items, images, the preamble and
//! the protected tail. In a tool window, context grains are candidates too, before its tool
//! results, least important first.

use std::cmp::Reverse;
use std::sync::Arc;

use super::{flags, kind, Reason, Run, Stage, Status};
use crate::assemble::text;

/// Flags that keep an item out of soft trim.
const SOFT_KEEP: u8 = flags::PROTECTED | flags::IMAGE;

impl Run<'_> {
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

    /// Unprotected tool results of window `w` by seq, after its context grains if it is a tool
    /// window: least important first (the highest priority number), the older first among
    /// equals. By seq alone, which for context grains is their fused order (most important
    /// first), a plugin's most important document was cleared while a minor one stayed whole.
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
        context.sort_unstable_by_key(|&s| (Reverse(c.priority[s as usize]), c.history_key(s)));
        context.extend(history);
        context
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
        let (text, count) = self.cleared_form(i);
        let tokens = count.saturating_add(self.c.overhead[i]);
        if tokens < self.after[i] {
            self.repl[s as usize] = Some(text);
            self.decide(s, Status::Cleared, Stage::Soft, Reason::Cleared, tokens);
        }
    }

    /// The cleared placeholder of slot `i` with its count, built once per item version.
    fn cleared_form(&mut self, i: usize) -> (Arc<str>, u32) {
        if let Some(t) = &self.derived[i].cleared {
            return t.clone();
        }
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

    /// Build the soft forms (head + tail, cleared) of tool result `i` if soft trim did not:
    /// backfill restores a removed group with them when it does not fit whole.
    pub(super) fn soft_forms(&mut self, i: usize) {
        if self.c.kind[i] != kind::TOOL_RESULT || self.c.flags[i] & SOFT_KEEP != 0 {
            return;
        }
        if self.c.chars[i] as usize > self.cfg.soft_trim_chars {
            self.trimmed(i);
        }
        self.cleared_form(i);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{assembly, by_id, grain, loaded, session, TOOL};
    use super::*;

    /// The plan at the largest budget at which the ladder changes something.
    fn first_cut(items: Vec<crate::assemble::ItemSpec>) -> crate::assemble::plan::Plan {
        let (mut a, full) = loaded(items);
        (1..=full * 10)
            .rev()
            .step_by(25)
            .filter_map(|b| a.plan(b).ok())
            .find(|p| p.changed().count() > 0)
            .expect("some budget cuts")
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
    fn a_plugin_summary_replaces_head_and_tail() {
        let mut items = session(4, 60);
        items[2].summary = Some("3 matches in src/".into()); // turn 0's result
        let (mut a, full) = loaded(items);
        let plan = a.plan(full * 9 / 10).expect("trimmed");
        let s = by_id(&plan, "hist.3");
        assert_eq!(plan.status[s as usize], Status::Trimmed);
        assert_eq!(plan.replacement(s), Some("3 matches in src/"));
        assert!(plan.reason(s).contains("summary"), "{}", plan.reason(s));
    }

    #[test]
    fn tool_window_grains_are_cut_oldest_first_but_protected_ones_are_not() {
        let doc = "line of a retrieved document\n".repeat(80);
        let mut pinned = grain("rag.pinned", &doc, TOOL, 0, 0);
        pinned.flags = flags::PROTECTED;
        let items = vec![
            pinned,
            grain("rag.old", &doc, TOOL, 10, 1),
            grain("rag.new", &doc, TOOL, 10, 2),
        ];
        let plan = first_cut(items);
        let status = |id: &str| plan.status[by_id(&plan, id) as usize];
        assert_eq!(status("rag.pinned"), Status::Kept);
        assert_eq!(status("rag.old"), Status::Trimmed);
        assert_eq!(status("rag.new"), Status::Kept, "oldest first");
        assert_eq!(plan.stage[by_id(&plan, "rag.old") as usize], Stage::Soft);
    }

    #[test]
    fn tool_window_grains_are_cut_least_important_first() {
        let doc = "line of a retrieved document\n".repeat(80);
        for (hi_seq, lo_seq) in [(0, 1), (1, 0)] {
            let items = vec![
                grain("rag.hi", &doc, TOOL, 1, hi_seq),
                grain("rag.lo", &doc, TOOL, 900, lo_seq),
            ];
            let plan = first_cut(items);
            let status = |id: &str| plan.status[by_id(&plan, id) as usize];
            assert_eq!(status("rag.lo"), Status::Trimmed, "seqs {hi_seq}, {lo_seq}");
            assert_eq!(status("rag.hi"), Status::Kept, "seqs {hi_seq}, {lo_seq}");
        }
    }
}
