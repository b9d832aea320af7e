//! Criterion benchmarks of the pure core.
//!
//! `cargo bench --no-default-features --bench core` (add `-- --quick` for a short run). Inputs
//! are synthetic and deterministic: a mix of English prose, code, JSON, numbers and non-Latin
//! text, so every pre-tokenizer branch is exercised; no file is read.
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

use _core::assemble::score::{scores, Groups};
use _core::assemble::{self, Assembly, AssemblyConfig, ItemSpec};
use _core::tokens::{counter_for_encoding, counter_for_model, Counter, Encoding, TokenCache};

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

const WORDS: &[&str] = &[
    "the",
    "context",
    "window",
    "is",
    "full",
    "of",
    "tool",
    "results",
    "and",
    " ",
    "  ",
    "\n",
    "\n\n",
    "    ",
    "fn",
    "main()",
    "{",
    "}",
    "let",
    "x",
    "=",
    "42;",
    "self.count(text)",
    "\"role\":",
    "\"assistant\",",
    "{\"path\":",
    "\"src/lib.rs\"}",
    "3.14159",
    "2025-11-30",
    "0x7f",
    "日本語の",
    "テキスト",
    "Ünïcödé",
    "naïve",
    "😀",
    "—",
    "it's",
    "we'll",
    "HTTPError",
    "snake_case_name",
    "camelCaseName",
    "// comment",
    "# heading",
    "- item",
    "https://example.com/a?b=c",
];

/// Deterministic mixed text of exactly `bytes` bytes or a little less (whole characters).
fn mixed_text(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 64);
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    while out.len() < bytes {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let word = WORDS[(state >> 33) as usize % WORDS.len()];
        if !out.ends_with([' ', '\n']) && !word.starts_with([' ', '\n']) {
            out.push(' ');
        }
        out.push_str(word);
    }
    let mut end = bytes.min(out.len());
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    out.truncate(end);
    out
}

fn exact(enc: Encoding) -> Counter {
    counter_for_encoding(enc.name()).expect("known encoding")
}

fn count_sizes(c: &mut Criterion) {
    for enc in Encoding::ALL {
        let counter = exact(enc);
        let mut group = c.benchmark_group(format!("count_sizes/{}", enc.name()));
        for size in [1 << 10, 64 << 10, 1 << 20] {
            let text = mixed_text(size);
            group.throughput(Throughput::Bytes(text.len() as u64));
            group.bench_with_input(BenchmarkId::from_parameter(size), &text, |b, t| {
                b.iter(|| counter.count(black_box(t), false))
            });
        }
        group.finish();
    }
}

fn encode(c: &mut Criterion) {
    let text = mixed_text(64 << 10);
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Bytes(text.len() as u64));
    for enc in Encoding::ALL {
        group.bench_function(enc.name(), |b| b.iter(|| enc.encode(black_box(&text))));
    }
    group.finish();
}

fn count_many(c: &mut Criterion) {
    let counter = exact(Encoding::O200kBase);
    let texts: Vec<String> = (0..256).map(|i| mixed_text(4096 + i)).collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    let mut group = c.benchmark_group("count_many/o200k_base/256x4KB");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("parallel", |b| {
        b.iter(|| counter.count_many(black_box(&texts), false))
    });
    group.bench_function("sequential", |b| {
        b.iter(|| {
            texts
                .iter()
                .map(|t| counter.count(black_box(t), false))
                .collect::<Vec<_>>()
        })
    });
    // Through the process-wide cache, emptied before each run: every text is a miss (hash,
    // count, insert), as for fresh text. Parallel against sequential here is the cost of the
    // shared cache to two threads, without Python.
    let empty = || TokenCache::global().clear();
    group.bench_function("parallel, cache misses", |b| {
        b.iter_batched(
            empty,
            |()| counter.count_many(black_box(&texts), true),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("sequential, cache misses", |b| {
        b.iter_batched(
            empty,
            |()| {
                texts
                    .iter()
                    .map(|t| counter.count(black_box(t), true))
                    .collect::<Vec<_>>()
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn cache(c: &mut Criterion) {
    let text = mixed_text(1 << 20);
    let enc = Encoding::O200kBase;
    let cache = TokenCache::new(16);
    cache.count(enc, &text);
    let mut group = c.benchmark_group("cache/o200k_base/1MB");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function("hit", |b| b.iter(|| cache.count(enc, black_box(&text))));
    group.bench_function("uncached", |b| {
        b.iter(|| enc.count_uncached(black_box(&text)))
    });
    group.finish();
}

fn truncate(c: &mut Criterion) {
    let text = mixed_text(64 << 10);
    let mut group = c.benchmark_group("truncate/64KB");
    group.throughput(Throughput::Bytes(text.len() as u64));
    for model in ["o200k_base", "cl100k_base", "claude-sonnet-4-5"] {
        let counter = counter_for_model(model).expect("known model");
        for max in [100, 10_000] {
            group.bench_function(BenchmarkId::new(model, max), |b| {
                b.iter(|| counter.truncate(black_box(&text), max))
            });
        }
    }
    group.finish();
}

fn pathological(c: &mut Criterion) {
    let counter = exact(Encoding::O200kBase);
    let inputs = [
        ("spaces", " ".repeat(1 << 20)),
        ("one-char", "a".repeat(1 << 20)),
        (
            "no-whitespace",
            mixed_text(1 << 20).replace([' ', '\n'], ""),
        ),
    ];
    let mut group = c.benchmark_group("pathological/o200k_base/1MB");
    group.sample_size(20);
    for (name, text) in &inputs {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::new("count", name), text, |b, t| {
            b.iter(|| counter.count(black_box(t), false))
        });
        group.bench_with_input(BenchmarkId::new("encode", name), text, |b, t| {
            b.iter(|| counter.encoding.encode(black_box(t)))
        });
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
    let config = AssemblyConfig::design_defaults(counter);
    let mut a = Assembly::new(config).expect("valid config");
    a.upsert(items).expect("valid items");
    a
}

const ASSEMBLY_SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// Warm plans of `n` items: everything fits; the ladder at 5% of the demand (hard trim removes
/// most turns) and at 30% (soft trim suffices); one new user message (the previous one removed)
/// then a plan at 30%.
fn plan(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    group.sample_size(20);
    for n in ASSEMBLY_SIZES {
        let mut a = assembly(session(n));
        let total = a.plan(usize::MAX / 2).expect("fits").total_before;
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("fits", n), &n, |b, _| {
            b.iter(|| a.plan(total * 2).expect("fits"))
        });
        let hard = total / 20;
        a.plan(hard).expect("plan");
        group.bench_with_input(BenchmarkId::new("hard_trim", n), &n, |b, _| {
            b.iter(|| a.plan(hard).expect("plan"))
        });
        let tight = total * 3 / 10;
        a.plan(tight).expect("plan");
        group.bench_with_input(BenchmarkId::new("ladder", n), &n, |b, _| {
            b.iter(|| a.plan(tight).expect("plan"))
        });
        let mut seq = u64::MAX / 2;
        group.bench_with_input(BenchmarkId::new("append_then_plan", n), &n, |b, _| {
            b.iter(|| {
                a.remove(&[format!("hist.new.{seq}")]);
                seq += 1;
                let item = ItemSpec {
                    node_id: format!("hist.new.{seq}"),
                    text: format!("follow-up question {seq}"),
                    window: 2,
                    seq,
                    kind: 1,
                    role: 1,
                    turn: u32::MAX / 2 + (seq % 1_000_000) as u32,
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
    for n in ASSEMBLY_SIZES {
        let turn: Vec<u32> = (0..n as u32).map(|i| i / 3).collect();
        let flag: Vec<u8> = (0..n).map(|i| (i % 7) as u8).collect();
        let seq: Vec<u64> = (0..n as u64).collect();
        let window: Vec<u8> = (0..n).map(|i| 2 + u8::from(i % 3 == 2)).collect();
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
    for n in ASSEMBLY_SIZES {
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

criterion_group!(
    benches,
    count,
    count_sizes,
    encode,
    count_many,
    cache,
    truncate,
    pathological,
    plan,
    score,
    fuse
);
criterion_main!(benches);
