//! History turn groups and their scores, computed in one pass over columns.

use super::{flags, kind, role};

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
    /// The other group of a request and its answer ([`Groups::pair`]; empty until then).
    pub partner: Vec<Option<usize>>,
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

    /// Pair each request with its answer: a group holding a user message and the next group
    /// when it holds the message right after it (the next turn, tool results aside) and that
    /// message is an assistant's. `partner[i]` is then the other group of the pair. The trim
    /// stages keep or remove such a pair whole, so the kept history never holds a request
    /// without its answer or an answer without its request. `order` is the order the groups
    /// were built from; `kind` and `role` the item columns (indexed by slot).
    pub fn pair(&mut self, order: &[u32], kind: &[u8], role: &[u8]) {
        // the role of the group's first and of its last message
        let ends = |i: usize| {
            let range = self.start[i] as usize..self.end[i] as usize;
            let mut messages = order
                .get(range)
                .unwrap_or(&[])
                .iter()
                .map(|&s| s as usize)
                .filter(|&s| kind[s] == kind::MESSAGE)
                .map(|s| role[s]);
            let first = messages.next();
            (first, messages.next_back().or(first))
        };
        let mut partner = vec![None; self.len()];
        for i in 1..self.len() {
            let next_turn = self.turn[i - 1].checked_add(1) == Some(self.turn[i]);
            if next_turn
                && partner[i - 1].is_none()
                && ends(i - 1).1 == Some(role::USER)
                && ends(i).0 == Some(role::ASSISTANT)
            {
                partner[i - 1] = Some(i);
                partner[i] = Some(i - 1);
            }
        }
        self.partner = partner;
    }

    /// Group `i` and its partner, if any: what the trim stages keep or remove together.
    pub fn unit(&self, i: usize) -> impl Iterator<Item = usize> {
        std::iter::once(i).chain(self.partner.get(i).copied().flatten())
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
    fn a_request_pairs_with_the_assistant_message_right_after_it() {
        // turns: 0 user, 1 assistant + result, 2 assistant, 3 user, 5 assistant (4 is gone),
        // 6 user, 7 user, 8 assistant
        let turn = [0, 1, 1, 2, 3, 5, 6, 7, 8];
        let m = kind::MESSAGE;
        let kind = [m, m, kind::TOOL_RESULT, m, m, m, m, m, m];
        let (u, a) = (role::USER, role::ASSISTANT);
        let role = [u, a, role::TOOL, a, u, a, u, u, a];
        let order: Vec<u32> = (0..9).collect();
        let mut g = Groups::build(&order, &turn, &[0; 9], &[0; 9], &[2; 9]);
        g.pair(&order, &kind, &role);
        assert_eq!(g.turn, vec![0, 1, 2, 3, 5, 6, 7, 8]);
        let want = vec![Some(1), Some(0), None, None, None, None, Some(7), Some(6)];
        assert_eq!(g.partner, want);
        assert_eq!(g.unit(0).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(g.unit(2).collect::<Vec<_>>(), vec![2]);
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
