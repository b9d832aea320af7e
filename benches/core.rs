//! Criterion benchmarks of the pure core.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

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

criterion_group!(benches, count);
criterion_main!(benches);
