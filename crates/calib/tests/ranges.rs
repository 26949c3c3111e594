//! Range algorithms against analytic answers.
use crate::common::*;
use qdq_calib::*;

fn close(got: f32, want: f32, tol: f32) {
    assert!((got - want).abs() <= tol, "got {got}, want {want} ± {tol}");
}

#[test]
fn minmax_uniform_is_exact_observed_range() {
    let data = uniform(50_000, -1.0, 3.0, 1);
    let lo = data.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = data.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let r = range_of(&data, &Method::MinMax { symmetric: false }, 7_000);
    assert_eq!((r.min, r.max), (lo, hi));
    let r = range_of(&data, &Method::MinMax { symmetric: true }, 7_000);
    assert_eq!((r.min, r.max), (-hi, hi));
}

#[test]
fn asymmetric_percentile_of_uniform_cuts_each_tail() {
    // 98 % kept: 1 % cut from each tail of U(-1, 3) -> [-0.96, 2.96]
    let data = uniform(200_000, -1.0, 3.0, 2);
    let r = range_of(&data, &Method::Percentile { percentile: 98.0, symmetric: false }, 50_000);
    close(r.min, -0.96, 0.01);
    close(r.max, 2.96, 0.01);
}

#[test]
fn symmetric_percentile_of_gaussian() {
    // P(|X| <= 2.5758) = 0.99 for X ~ N(0, 1)
    let data = normal(200_000, 0.0, 1.0, 3);
    let r = range_of(&data, &Method::Percentile { percentile: 99.0, symmetric: true }, 30_000);
    close(r.max, 2.5758, 0.03);
    close(r.min, -2.5758, 0.03);
    // P(|X| <= 1.96) = 0.95
    let r = range_of(&data, &Method::Percentile { percentile: 95.0, symmetric: true }, 30_000);
    close(r.max, 1.96, 0.03);
}

#[test]
fn percentile_100_is_clamped_to_observed() {
    let data = uniform(10_000, 0.5, 2.0, 4);
    let hi = data.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lo = data.iter().copied().fold(f32::INFINITY, f32::min);
    let r = range_of(&data, &Method::Percentile { percentile: 100.0, symmetric: true }, 10_000);
    // symmetric threshold >= max, then clamped to the observed range (all positive)
    assert_eq!((r.min, r.max), (lo, hi));
    let r = range_of(&data, &Method::Percentile { percentile: 100.0, symmetric: false }, 10_000);
    assert!(r.min >= lo && r.min <= lo + 2.0 / 2048.0 * 2.0, "{r:?}");
    assert_eq!(r.max, hi);
}

#[test]
fn distribution_recovers_mean_and_std() {
    let data = normal(100_000, 2.0, 0.5, 5);
    let mut s = CalibState::new(CollectOptions::for_methods(&[Method::Distribution], 2048));
    s.observe("t", &data, &[data.len()]).unwrap();
    let t = compute_ranges(&s, &Method::Distribution).unwrap();
    let d = t.distribution["t"];
    close(d.mean, 2.0, 0.01);
    close(d.std, 0.5, 0.01);
    // mean ± 4 std = [0, 4], clamped to the observed range
    let r = t.ranges["t"];
    let lo = data.iter().copied().fold(f32::INFINITY, f32::min);
    close(r.min, lo.max(0.0), 0.03);
    close(r.max, 4.0, 0.03);
}

#[test]
fn entropy_clips_outliers_far_below_max() {
    let mut data = normal(100_000, 0.0, 1.0, 6);
    data.extend([100.0f32; 5]);
    data.extend([-80.0f32; 5]);
    for nq in [128, 255] {
        let r = range_of(&data, &Method::Entropy { num_quantized_bins: nq }, 25_000);
        // bin width is 1/16 here (max 100, 2048 bins per side); the search must clip to a small fraction
        // of the max yet keep the Gaussian bulk
        assert!(r.max < 15.0 && r.max > 3.0, "nq {nq}: {r:?}");
        assert_eq!(r.min, -r.max);
    }
}

#[test]
fn entropy_keeps_the_whole_uniform_range() {
    // no tail: clipping a uniform folds a lot of mass into the edge bins, so the search keeps ~all of it
    let data = uniform(100_000, -1.0, 1.0, 7);
    let r = range_of(&data, &Method::Entropy { num_quantized_bins: 128 }, 100_000);
    assert!(r.max >= 0.9 && r.max <= 1.0, "{r:?}");
}

#[test]
fn mse_threshold_matches_aciq_for_gaussian_and_keeps_uniform() {
    // ACIQ (Banner et al.): the MSE-optimal 8-bit clip of N(0, 1) is about 3.9 sigma
    let data = normal(200_000, 0.0, 1.0, 8);
    let r = range_of(&data, &Method::Mse, 200_000);
    assert!(r.max > 3.3 && r.max < 4.6, "{r:?}");
    let data = uniform(100_000, -1.0, 1.0, 9);
    let r = range_of(&data, &Method::Mse, 100_000);
    assert!(r.max >= 0.97, "{r:?}");
}

/// The measured squared error of `data` through a float8 pair whose range is `[-t, t]`.
fn fp8_error(data: &[f32], f: Float8, t: f32) -> f64 {
    let scale = t / f.max();
    data.iter().map(|&x| f64::from(x - f.fake_quantize(x, scale)).powi(2)).sum()
}

/// fp8-mse's threshold is the one whose measured float8 error is lowest (within the histogram's resolution): on a
/// heavy-tailed tensor it clips far less than INT8's mse (the format's relative spacing makes rounding cheap and
/// clipping dear), and beats both INT8's threshold and the whole range.
#[test]
fn fp8_mse_minimises_the_measured_float8_error() {
    let mut data = normal(200_000, 0.0, 1.0, 10);
    // A few outlier values, as BERT's residual stream has.
    data.extend([40.0f32, -35.0, 60.0, 25.0]);
    for f in [Float8::E4M3Fn, Float8::E4M3Fnuz] {
        let t = range_of(&data, &Method::Fp8Mse { format: f }, 200_000).max;
        let int8 = range_of(&data, &Method::Mse, 200_000).max;
        assert!(t > 1.5 * int8, "{f}: {t} against INT8's {int8}");
        let best = fp8_error(&data, f, t);
        for other in [int8, 60.0, t * 0.5, (t * 1.5).min(60.0)] {
            assert!(best <= fp8_error(&data, f, other) * 1.02, "{f}: {t} ({best}) against {other}");
        }
    }
}

#[test]
fn zero_and_single_value_tensors() {
    for v in [0.0f32, 3.5, -2.25] {
        let data = vec![v; 1000];
        for m in all_methods() {
            let r = range_of(&data, &m, 300);
            let want = match m {
                Method::MinMax { symmetric: true } => Range { min: -v.abs(), max: v.abs() },
                _ => Range { min: v, max: v },
            };
            assert_eq!(r, want, "value {v}, method {m:?}");
        }
    }
}

#[test]
fn all_zero_first_batch_then_growth() {
    let mut s = CalibState::new(CollectOptions::for_methods(&all_methods(), 64));
    s.observe("t", &[0.0; 100], &[100]).unwrap();
    let h = s.tensor("t").unwrap().signed.as_ref().unwrap();
    assert!(h.width().unwrap() > 0.0);
    s.observe("t", &[-1.0, 1.0], &[2]).unwrap();
    let h = s.tensor("t").unwrap().signed.as_ref().unwrap();
    // 64 bins per side, t = 1 -> w = 1/32
    assert_eq!(h.width(), Some(1.0 / 32.0));
    assert_eq!(h.total(), 102);
    assert_eq!(h.counts()[64], 100);
    let r = compute_ranges(&s, &Method::MinMax { symmetric: false }).unwrap().ranges["t"];
    assert_eq!(r, Range { min: -1.0, max: 1.0 });
}

#[test]
fn nan_and_inf_are_counted_and_excluded() {
    let mut s = CalibState::new(CollectOptions::for_methods(&all_methods(), 128));
    let data = [1.0, f32::NAN, -2.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.5];
    s.observe("a", &data, &[7]).unwrap();
    s.observe("b", &[1.0, 2.0], &[]).unwrap();
    let nf = s.non_finite();
    assert_eq!(nf.len(), 1);
    assert_eq!(nf["a"], NonFiniteCounts { nan: 2, pos_inf: 1, neg_inf: 1 });
    let t = s.tensor("a").unwrap();
    assert_eq!(t.count, 3);
    assert_eq!(t.signed.as_ref().unwrap().total(), 3);
    assert_eq!(t.abs.as_ref().unwrap().counts().iter().sum::<u64>(), 3);
    for m in all_methods() {
        let r = compute_ranges(&s, &m).unwrap().ranges["a"];
        assert!(r.min >= -2.0 && r.max <= 2.0 && r.min <= r.max, "{m:?}: {r:?}");
    }
    // an all-NaN tensor has no range
    s.observe("c", &[f32::NAN], &[1]).unwrap();
    assert!(!compute_ranges(&s, &Method::Mse).unwrap().ranges.contains_key("c"));
}

#[test]
fn moving_average_hand_computed() {
    let opts = CollectOptions { moving_average: Some(0.5), ..Default::default() };
    let mut s = CalibState::try_new(opts).unwrap();
    s.observe("t", &[-1.0, 1.0], &[2]).unwrap();
    s.observe("t", &[-5.0, 3.0], &[2]).unwrap();
    s.observe("t", &[0.0, 1.0], &[2]).unwrap();
    // max: 1 -> 1 + .5 (3 - 1) = 2 -> 2 + .5 (1 - 2) = 1.5; min: -1 -> -3 -> -1.5
    let r = compute_ranges(&s, &Method::MinMax { symmetric: false }).unwrap().ranges["t"];
    assert_eq!(r, Range { min: -1.5, max: 1.5 });
}

#[test]
fn per_channel_minmax_hand_computed() {
    let opts = CollectOptions { per_channel_axis: Some(1), ..Default::default() };
    let mut s = CalibState::try_new(opts).unwrap();
    // shape [2, 3, 2]: channel c holds elements (o, c, *)
    let data = [1.0, 2.0, -3.0, 0.0, 5.0, 6.0, -1.0, 0.5, 4.0, 4.0, 7.0, -7.0];
    s.observe("t", &data, &[2, 3, 2]).unwrap();
    // a second batch with another leading dimension
    s.observe("t", &[10.0, 10.0, 0.0, 0.0, 0.0, 0.0], &[1, 3, 2]).unwrap();
    let t = compute_ranges(&s, &Method::MinMax { symmetric: false }).unwrap();
    let want = [Range { min: -1.0, max: 10.0 }, Range { min: -3.0, max: 4.0 }, Range { min: -7.0, max: 7.0 }];
    assert_eq!(t.channels["t"], want);
    assert_eq!(t.ranges["t"], Range { min: -7.0, max: 10.0 });
    let err = s.observe("t", &[0.0; 8], &[2, 4]).unwrap_err();
    assert!(err.to_string().contains("`t`") && err.to_string().contains("4 channels"), "{err}");
}

#[test]
fn shape_errors_name_the_tensor_and_batch_is_atomic() {
    let mut s = CalibState::new(CollectOptions::default());
    let err = s.observe("x", &[1.0; 5], &[2, 3]).unwrap_err();
    assert!(matches!(err, Error::Shape { ref tensor, .. } if tensor == "x"), "{err}");
    let ok = [1.0f32, 2.0];
    let bad = [1.0f32; 3];
    let batch: Vec<(&str, &[f32], &[usize])> = vec![("a", &ok, &[2]), ("b", &bad, &[2])];
    let err = s.observe_batch(&batch).unwrap_err();
    assert!(err.to_string().contains("`b`"), "{err}");
    assert_eq!(s.tensors().count(), 0);
}

#[test]
fn observe_batch_equals_sequential_observe() {
    let a = normal(3000, 0.0, 1.0, 10);
    let b = uniform(2000, -4.0, 1.0, 11);
    let opts = CollectOptions::for_methods(&all_methods(), 256);
    let mut seq = CalibState::new(opts.clone());
    seq.observe("a", &a[..1000], &[1000]).unwrap();
    seq.observe("b", &b, &[2, 1000]).unwrap();
    seq.observe("a", &a[1000..], &[2000]).unwrap();
    let mut par = CalibState::new(opts);
    let batch: Vec<(&str, &[f32], &[usize])> =
        vec![("a", &a[..1000], &[1000]), ("b", &b, &[2, 1000]), ("a", &a[1000..], &[2000])];
    par.observe_batch(&batch).unwrap();
    assert_eq!(seq, par);
}

#[test]
fn missing_statistic_is_a_typed_error() {
    let mut s = CalibState::new(CollectOptions::default());
    s.observe("t", &[1.0], &[1]).unwrap();
    let err = compute_ranges(&s, &Method::Entropy { num_quantized_bins: 128 }).unwrap_err();
    assert!(matches!(err, Error::NotCollected { ref tensor, needs: "signed histogram", .. } if tensor == "t"));
}

#[test]
fn for_methods_collects_only_what_is_needed() {
    let o = CollectOptions::for_methods(&[Method::MinMax { symmetric: true }], 2048);
    assert!(!o.signed_histogram && !o.abs_histogram);
    let o = CollectOptions::for_methods(&[Method::Mse], 512);
    assert!(!o.signed_histogram && o.abs_histogram && o.num_bins == 512);
    let o = CollectOptions::for_methods(&[Method::Entropy { num_quantized_bins: 128 }], 2048);
    assert!(o.signed_histogram && !o.abs_histogram);
}

#[test]
fn compute_all_gives_one_table_per_method() {
    let data = normal(5000, 0.0, 1.0, 12);
    let methods = all_methods();
    let mut s = CalibState::new(CollectOptions::for_methods(&methods, 512));
    s.observe("t", &data, &[5000]).unwrap();
    let tables = compute_all(&s, &methods).unwrap();
    assert_eq!(tables.len(), methods.len());
    for (t, m) in tables.iter().zip(&methods) {
        assert_eq!(t.method, m.name());
        assert_eq!(t, &compute_ranges(&s, m).unwrap());
    }
}

/// Straightforward TensorRT-style KL search, materialising p and q for every candidate.
fn naive_entropy(h: &hist::Histogram, nq: usize) -> f32 {
    let c: Vec<f64> = h.counts().iter().map(|&x| x as f64).collect();
    let half = h.per_side();
    let w = h.width().unwrap();
    let extent = (0..c.len()).filter(|&i| c[i] > 0.0).map(|i| {
        let k = h.bin_of_index(i);
        if k >= 0 { k + 1 } else { -k }
    });
    let extent = extent.max().unwrap() as usize;
    let smooth = |v: &[f64]| -> Vec<f64> {
        let nz = v.iter().filter(|&&x| x > 0.0).count() as f64;
        let e1 = 1e-4 * (v.len() as f64 - nz) / nz;
        v.iter().map(|&x| if x > 0.0 { x - e1 } else { 1e-4 }).collect()
    };
    let mut best = (f64::INFINITY, extent);
    for i in nq.div_ceil(2)..=extent {
        let (a, b) = (half - i, half + i);
        let sliced = &c[a..b];
        let mut p = sliced.to_vec();
        p[0] += c[..a].iter().sum::<f64>();
        *p.last_mut().unwrap() += c[b..].iter().sum::<f64>();
        let m = p.len() / nq;
        let mut q = vec![0.0; p.len()];
        for j in 0..nq {
            let (lo, hi) = (j * m, if j + 1 == nq { p.len() } else { (j + 1) * m });
            let mass: f64 = sliced[lo..hi].iter().sum();
            let nz = p[lo..hi].iter().filter(|&&x| x > 0.0).count();
            for k in lo..hi {
                if p[k] > 0.0 && nz > 0 {
                    q[k] = mass / nz as f64;
                }
            }
        }
        let (p, q) = (smooth(&p), smooth(&q));
        let (sp, sq): (f64, f64) = (p.iter().sum(), q.iter().sum());
        let kl: f64 = p.iter().zip(&q).map(|(x, y)| x / sp * ((x / sp) / (y / sq)).ln()).sum();
        if kl < best.0 {
            best = (kl, i);
        }
    }
    ((best.1 as f64 * w).min(f64::from(h.max_abs()))) as f32
}

#[test]
fn entropy_matches_naive_reference() {
    // Outliers on one side, then on both (empty edge bins that the outliers fill), and few values over many bins
    // (groups without mass).
    for (seed, nq) in [(30u64, 16usize), (31, 8), (32, 33), (33, 127), (34, 5)] {
        let mut data = normal(if seed == 34 { 300 } else { 20_000 }, 0.3, 1.0, seed);
        data.extend(uniform(50, 5.0, 9.0, seed + 100));
        if seed >= 33 {
            data.extend(uniform(20, -12.0, -7.0, seed + 200));
        }
        let m = Method::Entropy { num_quantized_bins: nq };
        let mut s = CalibState::new(CollectOptions::for_methods(std::slice::from_ref(&m), 128));
        s.observe("t", &data, &[data.len()]).unwrap();
        let h = s.tensor("t").unwrap().signed.as_ref().unwrap();
        let want = naive_entropy(h, nq);
        assert_eq!(hist_entropy(h, nq), want, "seed {seed} nq {nq}");
    }
}

fn hist_entropy(h: &hist::Histogram, nq: usize) -> f32 {
    qdq_calib::entropy_threshold(h, nq)
}

#[test]
fn per_channel_last_axis_matches_explicit_axis_and_skips_non_finite() {
    // shape [2, 3, 4]: axis -1 resolves to axis 2; the values are checked against the definition below.
    let data: Vec<f32> = (0..24)
        .map(|i| match i {
            5 => f32::NAN,
            10 => f32::INFINITY,
            _ => ((i * 7) % 11) as f32 - 5.0,
        })
        .collect();
    let run = |axis: isize| {
        let mut s = CalibState::try_new(CollectOptions { per_channel_axis: Some(axis), ..Default::default() }).unwrap();
        s.observe("t", &data, &[2, 3, 4]).unwrap();
        s.observe("t", &[9.0, -9.0, 0.0, 0.0], &[1, 1, 4]).unwrap();
        compute_ranges(&s, &Method::MinMax { symmetric: false }).unwrap().channels["t"].clone()
    };
    let last = run(-1);
    assert_eq!(last, run(2));
    // Channel c holds elements i with i % 4 == c, plus the second batch's value c.
    for (c, r) in last.iter().enumerate() {
        let vals: Vec<f32> = (0..24)
            .filter(|i| i % 4 == c && *i != 5 && *i != 10)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .chain([[9.0, -9.0, 0.0, 0.0][c]])
            .collect();
        let lo = vals.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = vals.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!((r.min, r.max), (lo, hi), "channel {c}");
    }
    let mut s = CalibState::try_new(CollectOptions { per_channel_axis: Some(-4), ..Default::default() }).unwrap();
    let err = s.observe("t", &data, &[2, 3, 4]).unwrap_err().to_string();
    assert!(err.contains("-4") && err.contains("out of range"), "{err}");
}

#[test]
fn range_spread_measures_halves_against_the_whole_tables_ranges() {
    let table = |ranges: &[(&str, f32, f32)]| RangeTable {
        method: "minmax".into(),
        options: Default::default(),
        ranges: ranges.iter().map(|&(t, min, max)| (t.to_owned(), Range { min, max })).collect(),
        channels: Default::default(),
        distribution: Default::default(),
        model: None,
        chosen: Default::default(),
    };
    let a = table(&[("x", -1.0, 2.0), ("y", 0.0, 10.0), ("z", -4.0, 4.0), ("only_a", 0.0, 1.0)]);
    let b = table(&[("x", -1.5, 2.0), ("y", 0.0, 9.0), ("z", -4.0, 4.0)]);
    let whole = table(&[("x", -1.5, 2.0), ("y", 0.0, 10.0), ("z", -4.0, 4.0), ("only_a", 0.0, 1.0)]);
    let s = range_spread(&a, &b, &whole).unwrap();
    // x: 0.5 / 2 = 0.25; y: 1 / 10 = 0.1; z: 0. "only_a" has no range in b.
    assert_eq!((s.tensors, s.tensor.as_str()), (3, "x"));
    assert!((s.max - 0.25).abs() < 1e-9 && (s.median - 0.1).abs() < 1e-9, "{s:?}");
    assert_eq!(range_spread(&a, &table(&[]), &whole), None);
}
