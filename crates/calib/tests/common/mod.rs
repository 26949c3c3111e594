#![allow(dead_code)]
use qdq_calib::{CalibState, CollectOptions, Float8, Method, Range, RangeTable, compute_ranges};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal, Uniform};

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

pub fn uniform(n: usize, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
    let d = Uniform::new(lo, hi).unwrap();
    let mut r = rng(seed);
    (0..n).map(|_| d.sample(&mut r)).collect()
}

pub fn normal(n: usize, mean: f32, std: f32, seed: u64) -> Vec<f32> {
    let d = Normal::new(mean, std).unwrap();
    let mut r = rng(seed);
    (0..n).map(|_| d.sample(&mut r)).collect()
}

/// Collect `data` (in batches of `batch`) for `method` and return the tensor's range.
pub fn range_of(data: &[f32], method: &Method, batch: usize) -> Range {
    let mut s = CalibState::new(CollectOptions::for_methods(std::slice::from_ref(method), 2048));
    for chunk in data.chunks(batch) {
        s.observe("t", chunk, &[chunk.len()]).unwrap();
    }
    table(&s, method).ranges["t"]
}

pub fn table(s: &CalibState, m: &Method) -> RangeTable {
    compute_ranges(s, m).unwrap()
}

pub fn all_methods() -> Vec<Method> {
    vec![
        Method::MinMax { symmetric: false },
        Method::MinMax { symmetric: true },
        Method::Percentile { percentile: 99.0, symmetric: true },
        Method::Percentile { percentile: 98.0, symmetric: false },
        Method::Entropy { num_quantized_bins: 8 },
        Method::Distribution,
        Method::Mse,
        Method::Fp8Mse { format: Float8::E4M3Fn },
    ]
}
