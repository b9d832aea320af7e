//! History turn groups and their scores, computed in one pass over columns.

use super::flags;

/// History turn groups (a user message and everything until the next one), oldest first.
///
/// Each vector is indexed by group; `start..end` is the group's range in the `(turn, seq)` order
/// it was built from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Groups {
    /// Turn number of the group.
    pub turn: Vec<u32>,
    /// Start of the group's range in the order.
    pub start: Vec<u32>,
    /// End (exclusive) of the group's range in the order.
    pub end: Vec<u32>,
    /// OR of its items' flags.
    pub flags: Vec<u8>,
    /// Smallest seq of its items.
    pub first_seq: Vec<u64>,
    /// Bit mask of the windows its items use.
    pub windows: Vec<u64>,
}

impl Groups {
    /// Aggregate history items given as `order` (slots sorted by `(turn, seq)`) over the item
    /// columns `turn`, `flags`, `seq`, `window` (indexed by slot).
    pub fn build(order: &[u32], turn: &[u32], flag: &[u8], seq: &[u64], window: &[u8]) -> Self {
        let mut g = Groups::default();
        for (pos, &slot) in order.iter().enumerate() {
            let s = slot as usize;
            let (t, f, q, w) = (turn[s], flag[s], seq[s], 1u64 << (window[s] & 63));
            let pos = pos as u32;
            match g.turn.last() {
                Some(&last) if last == t => {
                    let i = g.turn.len() - 1;
                    g.end[i] = pos + 1;
                    g.flags[i] |= f;
                    g.first_seq[i] = g.first_seq[i].min(q);
                    g.windows[i] |= w;
                }
                _ => {
                    g.turn.push(t);
                    g.start.push(pos);
                    g.end.push(pos + 1);
                    g.flags.push(f);
                    g.first_seq.push(q);
                    g.windows.push(w);
                }
            }
        }
        g
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.turn.len()
    }

    /// Whether there is no group.
    pub fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }
}

/// Scores of groups, oldest first: `w · [has_tool_call, feedback, recency, structural]` where
/// recency is the group's rank among groups scaled to `0..=1` (newest = 1). One pass, no branches
/// on data, so the compiler vectorizes it.
pub fn scores(group_flags: &[u8], weights: [f32; 4]) -> Vec<f32> {
    let n = group_flags.len();
    let step = if n > 1 { 1.0 / (n - 1) as f32 } else { 0.0 };
    let bit = |f: u8, b: u8| f32::from(u8::from(f & b != 0));
    group_flags
        .iter()
        .enumerate()
        .map(|(i, &f)| {
            let recency = if n > 1 { i as f32 * step } else { 1.0 };
            weights[0] * bit(f, flags::HAS_TOOL_CALL)
                + weights[1] * bit(f, flags::FEEDBACK)
                + weights[2] * recency
                + weights[3] * bit(f, flags::STRUCTURAL)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_aggregate_columns() {
        // slots 0..5 with turns 1,1,2,2,3 (already in (turn, seq) order).
        let order = [0, 1, 2, 3, 4];
        let turn = [1, 1, 2, 2, 3];
        let flag = [
            0,
            flags::HAS_TOOL_CALL,
            0,
            flags::STRUCTURAL,
            flags::FEEDBACK,
        ];
        let seq = [5, 6, 7, 8, 9];
        let window = [2, 3, 2, 2, 2];
        let g = Groups::build(&order, &turn, &flag, &seq, &window);
        assert_eq!(g.turn, vec![1, 2, 3]);
        assert_eq!(g.start, vec![0, 2, 4]);
        assert_eq!(g.end, vec![2, 4, 5]);
        assert_eq!(
            g.flags,
            vec![flags::HAS_TOOL_CALL, flags::STRUCTURAL, flags::FEEDBACK]
        );
        assert_eq!(g.windows, vec![0b1100, 0b100, 0b100]);
        assert_eq!(g.first_seq, vec![5, 7, 9]);
    }

    #[test]
    fn scores_weigh_features() {
        let w = [0.25, 0.3, 0.35, 0.1];
        let s = scores(
            &[flags::HAS_TOOL_CALL, 0, flags::FEEDBACK | flags::STRUCTURAL],
            w,
        );
        assert!((s[0] - 0.25).abs() < 1e-6);
        assert!((s[1] - 0.175).abs() < 1e-6);
        assert!((s[2] - (0.3 + 0.35 + 0.1)).abs() < 1e-6);
        assert_eq!(scores(&[0], w), vec![0.35]);
        assert!(scores(&[], w).is_empty());
    }
}
