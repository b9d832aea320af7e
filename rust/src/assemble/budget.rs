//! Budget limits and window allocation by water-filling.

/// Slack for float products such as `0.9 × 1000 = 899.999…`.
const EPS: f64 = 1e-9;

/// `(available, target)` of a budget: `available = budget − reserve_share × budget`,
/// `target = min(pretrim_ratio × budget, available)`, both rounded down.
pub fn limits(budget: usize, reserve_share: f64, pretrim_ratio: f64) -> (usize, usize) {
    let b = budget as f64;
    let available = ((b * (1.0 - reserve_share) + EPS).floor().max(0.0) as usize).min(budget);
    let pretrim = ((b * pretrim_ratio + EPS).floor().max(0.0) as usize).min(budget);
    (available, pretrim.min(available))
}

/// Allocate `target` tokens across windows by water-filling.
///
/// Each window gets its share of what is left; a window demanding less than that gets its demand
/// and the rest flows to the others in proportion to their shares, until stable. The reserve
/// window gets 0. Guarantees: `Σ alloc ≤ target`, `alloc[i] ≤ demand[i]`, and every window gets
/// its demand when `Σ demand ≤ target`.
pub fn water_fill(
    shares: &[f64],
    demand: &[usize],
    target: usize,
    reserve: Option<usize>,
) -> Vec<usize> {
    let n = shares.len().min(demand.len());
    let mut alloc = vec![0usize; n];
    let mut active: Vec<usize> = (0..n).filter(|&i| Some(i) != reserve).collect();
    let mut remaining = target;
    while !active.is_empty() {
        let weights = effective_weights(shares, &active);
        let total: f64 = weights.iter().sum();
        let fair: Vec<f64> = weights
            .iter()
            .map(|w| remaining as f64 * w / total)
            .collect();
        let before = active.len();
        let mut kept = Vec::with_capacity(before);
        for (k, &i) in active.iter().enumerate() {
            let d = demand.get(i).copied().unwrap_or(0);
            if d as f64 <= fair.get(k).copied().unwrap_or(0.0) + EPS && d <= remaining {
                if let Some(a) = alloc.get_mut(i) {
                    *a = d;
                }
                remaining -= d;
            } else {
                kept.push(i);
            }
        }
        if kept.len() == before {
            split(&mut alloc, &active, &fair, remaining);
            break;
        }
        active = kept;
    }
    alloc
}

/// Shares of the active windows; equal weights when they all have a zero share.
fn effective_weights(shares: &[f64], active: &[usize]) -> Vec<f64> {
    let w: Vec<f64> = active
        .iter()
        .map(|&i| shares.get(i).copied().unwrap_or(0.0))
        .collect();
    if w.iter().sum::<f64>() > 0.0 {
        w
    } else {
        vec![1.0; active.len()]
    }
}

/// Give each active window the floor of its fair part, then the leftover tokens one by one by
/// largest remainder (ties: lowest index), so the parts sum to at most `remaining`.
fn split(alloc: &mut [usize], active: &[usize], fair: &[f64], remaining: usize) {
    let mut used = 0usize;
    let mut rest: Vec<(f64, usize)> = Vec::with_capacity(active.len());
    for (k, &i) in active.iter().enumerate() {
        let f = fair.get(k).copied().unwrap_or(0.0).max(0.0);
        let base = (f.floor() as usize).min(remaining - used);
        if let Some(a) = alloc.get_mut(i) {
            *a = base;
        }
        used += base;
        rest.push((f - f.floor(), i));
    }
    rest.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in rest.into_iter().take(remaining - used) {
        if let Some(a) = alloc.get_mut(i) {
            *a += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_down() {
        assert_eq!(limits(1000, 0.1, 0.8), (900, 800));
        assert_eq!(limits(1000, 0.1, 1.0), (900, 900));
        assert_eq!(limits(0, 0.1, 0.8), (0, 0));
        assert_eq!(limits(10, 0.0, 1.0), (10, 10));
    }

    #[test]
    fn unused_share_flows() {
        let shares = [0.15, 0.15, 0.4, 0.2, 0.1];
        // instruction and memory are small; history and tool split the rest 2:1.
        let alloc = water_fill(&shares, &[10, 20, 5000, 5000, 0], 1000, Some(4));
        assert_eq!(alloc[0], 10);
        assert_eq!(alloc[1], 20);
        assert_eq!(alloc[4], 0);
        assert_eq!(alloc.iter().sum::<usize>(), 1000);
        assert!((alloc[2] as i64 - 2 * alloc[3] as i64).abs() <= 2);
    }

    #[test]
    fn everything_fits() {
        let alloc = water_fill(&[0.5, 0.5], &[30, 60], 100, None);
        assert_eq!(alloc, vec![30, 60]);
    }

    #[test]
    fn properties_hold_on_generated_inputs() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            let n = 1 + next(6) as usize;
            let raw: Vec<f64> = (0..n).map(|_| next(10) as f64).collect();
            let sum: f64 = raw.iter().sum::<f64>().max(1.0);
            let shares: Vec<f64> = raw.iter().map(|r| r / sum).collect();
            let demand: Vec<usize> = (0..n).map(|_| next(3000) as usize).collect();
            let target = next(5000) as usize;
            let reserve = (next(2) == 0).then(|| next(n as u64) as usize);
            let alloc = water_fill(&shares, &demand, target, reserve);
            assert!(alloc.iter().sum::<usize>() <= target);
            assert!(alloc.iter().zip(&demand).all(|(a, d)| a <= d));
            let wanted: usize = (0..n)
                .filter(|&i| Some(i) != reserve)
                .map(|i| demand[i])
                .sum();
            if wanted <= target {
                assert!((0..n).all(|i| Some(i) == reserve || alloc[i] == demand[i]));
            }
            if let Some(r) = reserve {
                assert_eq!(alloc[r], 0);
            }
        }
    }
}
