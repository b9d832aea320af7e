//! Criterion benchmarks of the pure core.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use _core::assemble::score::{scores, Groups};
use _core::assemble::{self, Assembly, AssemblyConfig, ItemSpec};
use _core::tokens::{counter_for_encoding, Encoding};

fn count(c: &mut Criterion) {
    let text = "The quick brown fox jumps over the lazy dog. 0123456789\n".repeat(2_000);
    let mut group = c.benchmark_group("count");
    group.throughput(Throughput::Bytes(text.len() as u64));
    for enc in Encoding::ALL {
        let counter = counter_for_encoding(enc.name()).expect("known encoding");
        group.bench_function(enc.name(), |b| b.iter(|| counter.count(&text, false)));
    }
    group.finish();
}

/// A synthetic session of about `n` items: 5% context grains over three branches, the rest
/// user / assistant (tool call) / tool result turns; one tool result in four is long enough for
/// soft trim.
fn session(n: usize) -> Vec<ItemSpec> {
    let line = "src/lib.rs:42: fn assemble(&mut self) -> Result<Plan> { todo!() }\n";
    let mut items = Vec::with_capacity(n);
    for i in 0..n / 20 {
        let branch = ["mem", "rag", "task"][i % 3];
        items.push(ItemSpec {
            node_id: format!("{branch}.n{i}"),
            text: format!("note {i}: {}", line.repeat(3)),
            window: [1, 3, 3][i % 3],
            priority: (i % 7) as i64 * 10,
            rank: (i % 4) as u32,
            seq: i as u64,
            label: branch.to_string(),
            ..ItemSpec::default()
        });
    }
    let mut seq = 1_000_000u64;
    let mut turn = 0u32;
    while items.len() < n {
        for (role, kind) in [(1u8, 1u8), (2, 1), (3, 2)] {
            let lines = if role == 3 {
                [4, 12, 30, 80][turn as usize % 4]
            } else {
                1
            };
            items.push(ItemSpec {
                node_id: format!("hist.{seq}"),
                text: format!("turn {turn} seq {seq}\n{}", line.repeat(lines)),
                window: if role == 3 { 3 } else { 2 },
                seq,
                kind,
                role,
                turn,
                flags: if role == 2 {
                    1 | (u8::from(turn % 5 == 0) * 4)
                } else {
                    0
                },
                overhead: 4,
                label: "tool result: grep".to_string(),
                ..ItemSpec::default()
            });
            seq += 1;
        }
        turn += 1;
    }
    items
}

fn assembly(items: Vec<ItemSpec>) -> Assembly {
    let counter = counter_for_encoding("o200k_base").expect("known encoding");
    let windows = [
        ("instruction", 0.15),
        ("core_memory", 0.15),
        ("history", 0.4),
        ("tool", 0.2),
        ("reserve", 0.1),
    ];
    let mut config = AssemblyConfig::new(
        counter,
        windows.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
    );
    config.reserve = Some(4);
    let mut a = Assembly::new(config).expect("valid config");
    a.upsert(items).expect("valid items");
    a
}

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// Warm plans: everything fits; the ladder at 30% of the demand; one appended message + plan.
fn plan(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    group.sample_size(20);
    for n in SIZES {
        let mut a = assembly(session(n));
        let total = a.plan(usize::MAX / 2).expect("fits").total_before;
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("fits", n), &n, |b, _| {
            b.iter(|| a.plan(total * 2).expect("fits"))
        });
        let tight = total * 3 / 10;
        a.plan(tight).expect("plan");
        group.bench_with_input(BenchmarkId::new("ladder", n), &n, |b, _| {
            b.iter(|| a.plan(tight).expect("plan"))
        });
        let mut seq = u64::MAX / 2;
        group.bench_with_input(BenchmarkId::new("append_then_plan", n), &n, |b, _| {
            b.iter(|| {
                seq += 1;
                let item = ItemSpec {
                    node_id: format!("hist.new.{seq}"),
                    text: format!("follow-up question {seq}"),
                    window: 2,
                    seq,
                    kind: 1,
                    role: 1,
                    turn: u32::MAX - 1,
                    overhead: 4,
                    ..ItemSpec::default()
                };
                a.upsert(vec![item]).expect("valid");
                a.plan(tight).expect("plan")
            })
        });
    }
    group.finish();
}

/// Turn-group aggregation and scoring of `n` history items.
fn score(c: &mut Criterion) {
    let mut group = c.benchmark_group("score");
    for n in SIZES {
        let turn: Vec<u32> = (0..n as u32).map(|i| i / 3).collect();
        let flag: Vec<u8> = (0..n).map(|i| (i % 7) as u8 & 7).collect();
        let seq: Vec<u64> = (0..n as u64).collect();
        let window: Vec<u8> = (0..n).map(|i| 2 + (i % 3 == 2) as u8).collect();
        let order: Vec<u32> = (0..n as u32).collect();
        let weights = [0.25, 0.3, 0.35, 0.1];
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let g = Groups::build(&order, &turn, &flag, &seq, &window);
                scores(&g.flags, weights)
            })
        });
    }
    group.finish();
}

/// Fusion of `n` grains, one id in ten shared by two plugins.
fn fuse(c: &mut Criterion) {
    let mut group = c.benchmark_group("fuse");
    for n in SIZES {
        let ids: Vec<String> = (0..n)
            .map(|i| format!("rag.docs.{}", if i % 10 == 0 { i + 1 } else { i }))
            .collect();
        let pri: Vec<i64> = (0..n).map(|i| (i % 5) as i64 * 10).collect();
        let rank: Vec<u32> = (0..n).map(|i| (i % 3) as u32).collect();
        let seq: Vec<u64> = (0..n as u64).collect();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| assemble::fuse(&ids, &pri, &rank, &seq).expect("same lengths"))
        });
    }
    group.finish();
}

criterion_group!(benches, count, plan, score, fuse);
criterion_main!(benches);
