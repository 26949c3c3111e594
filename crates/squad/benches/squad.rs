//! Featurization and post-processing throughput on the tiny fixtures (per-feature cost; the real dev set takes
//! ~1.7 s to featurize in release, see the `featurize` example).

use criterion::{Criterion, criterion_group, criterion_main};
use qdq_squad::*;
use std::hint::black_box;
use std::path::PathBuf;
use tokenizer::Tokenizer;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/squad").join(name)
}

fn bench(c: &mut Criterion) {
    let data = load_squad(fixture("tiny-v1.1.json")).unwrap();
    let tok = Tokenizer::from_vocab(fixture("vocab.txt"), true).unwrap();
    let config = FeatureConfig { max_seq_len: 64, doc_stride: 16, max_query_len: 16 };
    let stream = || FeatureStream::new(&data.examples, &tok, config, 8, Padding::Longest).unwrap();
    c.bench_function("featurize tiny-v1.1 (seq 64)", |b| {
        b.iter(|| black_box(stream().map(|x| x.unwrap().len()).sum::<usize>()))
    });
    let batches: Vec<Batch> = stream().map(Result::unwrap).collect();
    c.bench_function("post-process tiny-v1.1 (seq 64)", |b| {
        b.iter(|| {
            let mut acc = PredictionAccumulator::new(&data.examples, None, PostProcessConfig::default()).unwrap();
            for batch in &batches {
                // Deterministic pseudo-logits.
                let logits = batch.input_ids.mapv(|id| ((id * 7919) % 97) as f32 / 10.0);
                acc.push_batch(batch, logits.view(), logits.view()).unwrap();
            }
            black_box(acc.take_ready().len())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
