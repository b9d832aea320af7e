//! Texts the ladder puts in place of items: head + tail trims, placeholders and stand-ins.

/// `text` cut to its first and last `keep` chars around a `[... N chars trimmed ...]` notice,
/// cutting at line boundaries when one lies in the outer half of each kept part, else at char
/// boundaries. Returns the text and the number of chars removed; `None` when nothing would be cut.
pub fn head_tail(text: &str, keep: usize) -> Option<(String, usize)> {
    let total = text.chars().count();
    if total <= keep.saturating_mul(2) {
        return None;
    }
    let head_end = byte_at_char(text, keep);
    let head_end = prefer_line_end(text, head_end, keep);
    let tail_start = byte_from_end(text, keep);
    let tail_start = prefer_line_start(text, tail_start, keep);
    if tail_start <= head_end {
        return None;
    }
    let head = text.get(..head_end)?;
    let tail = text.get(tail_start..)?;
    let removed = text.get(head_end..tail_start)?.chars().count();
    let out = format!("{head}\n[... {removed} chars trimmed ...]\n{tail}");
    Some((out, removed))
}

/// Byte offset of the char with index `n` (or the end).
fn byte_at_char(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(b, _)| b)
}

/// Byte offset where the last `n` chars start.
fn byte_from_end(text: &str, n: usize) -> usize {
    if n == 0 {
        return text.len();
    }
    text.char_indices().rev().nth(n - 1).map_or(0, |(b, _)| b)
}

/// Move a head cut back to a newline (dropped) when one lies in the head's second half.
fn prefer_line_end(text: &str, end: usize, keep: usize) -> usize {
    let head = text.get(..end).unwrap_or("");
    match head.rfind('\n') {
        Some(nl) if head.get(..nl).map_or(0, |h| h.chars().count()) >= keep / 2 => nl,
        _ => end,
    }
}

/// Move a tail cut forward to just after a newline when one lies in the tail's first half.
fn prefer_line_start(text: &str, start: usize, keep: usize) -> usize {
    let tail = text.get(start..).unwrap_or("");
    match tail.find('\n') {
        Some(nl) if tail.get(..nl).map_or(0, |t| t.chars().count()) < keep / 2 => start + nl + 1,
        _ => start,
    }
}

/// `[tool result cleared: <label>, <N> tokens]`.
pub fn cleared(label: &str, tokens: u32) -> String {
    format!("[tool result cleared: {label}, {tokens} tokens]")
}

/// `[folded <node_id> (<label>): <N> tokens]`.
pub fn folded(node_id: &str, label: &str, tokens: u32) -> String {
    if label.is_empty() {
        format!("[folded {node_id}: {tokens} tokens]")
    } else {
        format!("[folded {node_id} ({label}): {tokens} tokens]")
    }
}

/// `[folded branch <b>: <k> nodes, <N> tokens]`.
pub fn folded_branch(branch: &str, nodes: usize, tokens: u64) -> String {
    format!("[folded branch {branch}: {nodes} nodes, {tokens} tokens]")
}

/// Ranges of removed turns shown in the placeholder; the rest are counted.
pub const SHOWN_RANGES: usize = 4;

/// `[<k> earlier turns removed to fit the budget: turns a–b, c, d–e and <m> more, <T> tokens]`
/// from the removed turns as ascending, disjoint, non-adjacent inclusive ranges (`k` turns in
/// all); at most [`SHOWN_RANGES`] ranges are listed, the turns of the others are counted.
pub fn removed_turns(
    ranges: impl IntoIterator<Item = (u32, u32)>,
    k: usize,
    tokens: u64,
) -> String {
    let mut listed = 0usize;
    let spans: Vec<String> = ranges
        .into_iter()
        .take(SHOWN_RANGES)
        .map(|(a, b)| {
            listed += (b - a) as usize + 1;
            if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            }
        })
        .collect();
    let noun = if k == 1 { "turn" } else { "turns" };
    let more = k.saturating_sub(listed);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "[{k} earlier {noun} removed to fit the budget: {noun} {}{more}, {tokens} tokens]",
        spans.join(", ")
    )
}

/// Branch of a node id: its first dotted segment.
pub fn branch_of(node_id: &str) -> &str {
    node_id.split('.').next().unwrap_or(node_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_on_char_boundaries() {
        let text = "é".repeat(100);
        let (out, removed) = head_tail(&text, 10).expect("long enough");
        assert_eq!(removed, 80);
        assert!(out.starts_with(&"é".repeat(10)));
        assert!(out.ends_with(&"é".repeat(10)));
        assert!(out.contains("[... 80 chars trimmed ...]"));
    }

    #[test]
    fn prefers_line_boundaries() {
        let lines: Vec<String> = (0..100).map(|i| format!("line {i:03}")).collect();
        let text = lines.join("\n");
        let (out, _) = head_tail(&text, 50).expect("long enough");
        let head = out.split("\n[...").next().expect("head");
        assert!(head.ends_with("line 004"), "{head}");
        let tail = out.rsplit("...]\n").next().expect("tail");
        assert!(tail.starts_with("line 095"), "{tail}");
    }

    #[test]
    fn short_texts_are_untouched() {
        assert_eq!(head_tail("abc", 2), None);
        assert_eq!(head_tail("abcd", 2), None);
    }

    #[test]
    fn every_cut_is_valid_and_shorter() {
        let alphabet = ['a', 'é', '\n', '字', '😀', ' '];
        let mut x: u64 = 7;
        for len in 0..300usize {
            let text: String = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    alphabet[(x >> 40) as usize % alphabet.len()]
                })
                .collect();
            for keep in [0usize, 1, 5, 40] {
                if let Some((out, removed)) = head_tail(&text, keep) {
                    assert!(removed > 0);
                    assert!(out.chars().count() <= len + 40);
                }
            }
        }
    }

    #[test]
    fn formats_stand_ins() {
        assert_eq!(
            cleared("search", 12),
            "[tool result cleared: search, 12 tokens]"
        );
        assert_eq!(
            folded("rag.1", "docs", 3),
            "[folded rag.1 (docs): 3 tokens]"
        );
        assert_eq!(
            folded_branch("rag", 2, 9),
            "[folded branch rag: 2 nodes, 9 tokens]"
        );
        assert_eq!(
            removed_turns([(2, 4)], 3, 900),
            "[3 earlier turns removed to fit the budget: turns 2–4, 900 tokens]"
        );
        assert_eq!(
            removed_turns([(7, 7)], 1, 5),
            "[1 earlier turn removed to fit the budget: turn 7, 5 tokens]"
        );
        assert_eq!(
            removed_turns([(1, 1), (3, 4), (6, 6), (8, 9), (11, 12)], 8, 40),
            "[8 earlier turns removed to fit the budget: turns 1, 3–4, 6, 8–9 and 2 more, 40 tokens]"
        );
        assert_eq!(branch_of("rag.docs.3"), "rag");
    }
}
