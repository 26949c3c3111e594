//! Collection throughput, merge, and range-search speed. `cargo bench -p qdq-calib`.
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use qdq_calib::hist::Histogram;
use qdq_calib::*;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

fn normal(n: usize) -> Vec<f32> {
    let d = Normal::new(0.0f32, 1.0).unwrap();
    let mut r = rand::rngs::StdRng::seed_from_u64(7);
    (0..n).map(|_| d.sample(&mut r)).collect()
}

fn collect(c: &mut Criterion) {
    let mut g = c.benchmark_group("collect");
    for n in [1usize << 20, 16 << 20] {
        let data = normal(n);
        let max_abs = data.iter().fold(0f32, |a, x| a.max(x.abs()));
        g.throughput(Throughput::Elements(n as u64));
        for signed in [true, false] {
            let name = format!("{}_hist_2048/{}M", if signed { "signed" } else { "abs" }, n >> 20);
            g.bench_function(&name, |b| {
                b.iter(|| {
                    let mut h = Histogram::new(signed, 2048);
                    h.observe(black_box(&data), max_abs, n as u64);
                    h
                })
            });
        }
        let name = format!("observe_minmax_signed_abs/{}M", n >> 20);
        g.bench_function(&name, |b| {
            let opts = CollectOptions { signed_histogram: true, abs_histogram: true, ..Default::default() };
            b.iter(|| {
                let mut s = CalibState::new(opts.clone());
                s.observe("t", black_box(&data), &[n]).unwrap();
                s
            })
        });
    }
    g.finish();
}

/// One tensor of a calibration pass's size (a 384-token feature's FFN activation, 590k values; a softmax output's
/// 1.77M, 80 % zeros after masking) into a state that has seen it before (a grid that holds), on the calling thread:
/// what each session of a pass does per tensor per batch, for the percentile and the entropy methods' options.
fn observe_here(c: &mut Criterion) {
    let mut g = c.benchmark_group("observe_here");
    let ffn = normal(384 * 1536);
    let softmax: Vec<f32> = normal(12 * 384 * 384)
        .iter()
        .enumerate()
        .map(|(i, x)| if i % 384 < 300 { 0.0 } else { x.abs() * 0.01 })
        .collect();
    for (method, opts) in [
        (
            "percentile",
            CollectOptions::for_methods(&[Method::Percentile { percentile: 99.999, symmetric: true }], 2048),
        ),
        ("entropy", CollectOptions::for_methods(&[Method::Entropy { num_quantized_bins: 255 }], 8001)),
        ("minmax", CollectOptions::for_methods(&[Method::MinMax { symmetric: false }], 2048)),
    ] {
        for (what, data) in [("ffn_590k", &ffn), ("softmax_1770k", &softmax)] {
            let mut s = CalibState::new(opts.clone());
            s.observe_here("t", data, &[data.len()]).unwrap();
            g.throughput(Throughput::Elements(data.len() as u64));
            g.bench_function(format!("{method}/{what}"), |b| {
                b.iter(|| s.observe_here("t", black_box(data), &[data.len()]).unwrap())
            });
        }
    }
    g.finish();
}

fn state_with(num_bins: usize, tensors: usize) -> CalibState {
    let data = normal(100_000);
    let methods = [
        Method::Entropy { num_quantized_bins: 128 },
        Method::Mse,
        Method::Percentile { percentile: 99.999, symmetric: true },
    ];
    let mut s = CalibState::new(CollectOptions::for_methods(&methods, num_bins));
    for t in 0..tensors {
        s.observe(&format!("t{t}"), &data, &[data.len()]).unwrap();
    }
    s
}

fn ranges(c: &mut Criterion) {
    let mut g = c.benchmark_group("ranges");
    let s2048 = state_with(2048, 1);
    let s8001 = state_with(8001, 1);
    g.bench_function("entropy_2048bins_nq128", |b| {
        b.iter(|| compute_ranges(&s2048, &Method::Entropy { num_quantized_bins: 128 }).unwrap())
    });
    g.bench_function("entropy_8001bins_nq255", |b| {
        b.iter(|| compute_ranges(&s8001, &Method::Entropy { num_quantized_bins: 255 }).unwrap())
    });
    g.bench_function("percentile_2048bins", |b| {
        b.iter(|| compute_ranges(&s2048, &Method::Percentile { percentile: 99.999, symmetric: true }).unwrap())
    });
    g.bench_function("mse_2048bins", |b| b.iter(|| compute_ranges(&s2048, &Method::Mse).unwrap()));
    let mut other = s2048.clone();
    other.observe("t0", &normal(1000).iter().map(|x| x * 50.0).collect::<Vec<_>>(), &[1000]).unwrap();
    g.bench_function("merge_2048bins_1tensor", |b| {
        b.iter(|| {
            let mut a = s2048.clone();
            a.merge(black_box(&other)).unwrap();
            a
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = collect, observe_here, ranges
}
criterion_main!(benches);
