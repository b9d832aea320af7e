//! Fusion of the grains of one render: grains sharing a `node_id` resolve to one winner.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::errors::{CoreError, CoreResult};

/// Result of [`fuse`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fused {
    /// For each input, the index of the winner of its `node_id` group (itself when it won).
    pub winner: Vec<u32>,
    /// Indices of the winners in render order: `(priority, rank, seq)`, then input index.
    pub order: Vec<u32>,
}

type Map<'a> = HashMap<&'a str, u32, BuildHasherDefault<ahash::AHasher>>;

/// Resolve grains sharing a `node_id`: the lowest priority wins, ties go to the lowest rank
/// (earliest-registered plugin), then the lowest seq, then the first input. Deterministic: the
/// map only groups, outputs never depend on its iteration order.
///
/// Errors with [`CoreError::Value`] when the columns differ in length.
pub fn fuse<S: AsRef<str>>(
    node_ids: &[S],
    priorities: &[i64],
    ranks: &[u32],
    seqs: &[u64],
) -> CoreResult<Fused> {
    let n = node_ids.len();
    check_lengths(
        n,
        &[
            ("priorities", priorities.len()),
            ("ranks", ranks.len()),
            ("seqs", seqs.len()),
        ],
    )?;
    let n32 = u32::try_from(n).map_err(|_| CoreError::Value(format!("fuse: {n} grains")))?;
    let key = |i: u32| {
        let x = i as usize;
        (priorities[x], ranks[x], seqs[x], i)
    };
    // One hash lookup per input: ids map to a group number, groups keep their best index.
    let mut groups: Map<'_> = Map::with_capacity_and_hasher(n, Default::default());
    let mut best: Vec<u32> = Vec::with_capacity(n);
    let mut group_of: Vec<u32> = Vec::with_capacity(n);
    for i in 0..n32 {
        let next = best.len() as u32;
        let g = *groups.entry(node_ids[i as usize].as_ref()).or_insert(next);
        if g == next {
            best.push(i);
        } else if key(i) < key(best[g as usize]) {
            best[g as usize] = i;
        }
        group_of.push(g);
    }
    let winner: Vec<u32> = group_of.iter().map(|&g| best[g as usize]).collect();
    let mut keyed: Vec<(i64, u32, u64, u32)> = best.iter().map(|&i| key(i)).collect();
    keyed.sort_unstable();
    let order = keyed.into_iter().map(|k| k.3).collect();
    Ok(Fused { winner, order })
}

fn check_lengths(n: usize, columns: &[(&str, usize)]) -> CoreResult<()> {
    match columns.iter().find(|(_, len)| *len != n) {
        Some((name, len)) => Err(CoreError::Value(format!(
            "fuse: column {name} has {len} values, node_ids has {n}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_priority_then_rank_then_seq_wins() {
        let ids = ["a", "b", "a", "a", "c", "b"];
        let pri = [50, 10, 20, 20, 5, 10];
        let rank = [0, 3, 2, 1, 0, 1];
        let seq = [0, 1, 2, 3, 4, 5];
        let f = fuse(&ids, &pri, &rank, &seq).expect("same lengths");
        assert_eq!(f.winner, vec![3, 5, 3, 3, 4, 5]);
        assert_eq!(f.order, vec![4, 5, 3]);
    }

    #[test]
    fn full_ties_go_to_the_first_input() {
        let f = fuse(&["x", "x"], &[1, 1], &[0, 0], &[7, 7]).expect("same lengths");
        assert_eq!(f.winner, vec![0, 0]);
        assert_eq!(f.order, vec![0]);
    }

    #[test]
    fn rejects_ragged_columns() {
        let err = fuse(&["x"], &[1, 2], &[0], &[0]);
        assert!(matches!(err, Err(CoreError::Value(m)) if m.contains("priorities")));
    }

    #[test]
    fn order_is_sorted_and_winners_are_minimal() {
        let mut x: u64 = 42;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for _ in 0..200 {
            let n = next(40) as usize;
            let ids: Vec<String> = (0..n).map(|_| format!("n{}", next(8))).collect();
            let pri: Vec<i64> = (0..n).map(|_| next(4) as i64).collect();
            let rank: Vec<u32> = (0..n).map(|_| next(3) as u32).collect();
            let seq: Vec<u64> = (0..n).map(|_| next(5)).collect();
            let f = fuse(&ids, &pri, &rank, &seq).expect("same lengths");
            for i in 0..n {
                let w = f.winner[i] as usize;
                assert_eq!(ids[w], ids[i]);
                assert!((pri[w], rank[w], seq[w], w) <= (pri[i], rank[i], seq[i], i));
            }
            let keys: Vec<_> = f
                .order
                .iter()
                .map(|&i| (pri[i as usize], rank[i as usize]))
                .collect();
            assert!(keys.windows(2).all(|w| w[0] <= w[1]));
        }
    }
}
