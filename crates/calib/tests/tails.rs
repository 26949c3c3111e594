//! Histograms collected for a percentile's tails alone (`CollectOptions::tails`): the ranges are those of whole
//! histograms, the middle bins are really left uncounted, states merge and round-trip, and a range that falls in the
//! folded bins, or a method that needs the whole histogram, is an error instead of a guess.

use qdq_calib::*;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Normal, StudentT};

/// `batches` batches of `n` values each from `draw`.
fn batches(seed: u64, batches: usize, n: usize, mut draw: impl FnMut(&mut StdRng) -> f32) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..batches).map(|_| (0..n).map(|_| draw(&mut rng)).collect()).collect()
}

fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh())
}

fn collect(opts: CollectOptions, data: &[Vec<f32>]) -> CalibState {
    let mut s = CalibState::new(opts);
    for b in data {
        s.observe_here("t", b, &[b.len()]).unwrap();
    }
    s
}

/// The methods that read tails alone: percentiles, and mse.
fn tail_methods() -> Vec<Method> {
    let mut m = vec![Method::Mse];
    for p in [99.0, 99.9, 99.99, 99.999, 100.0] {
        for symmetric in [true, false] {
            m.push(Method::Percentile { percentile: p, symmetric });
        }
    }
    m
}

#[test]
fn tails_alone_give_the_ranges_of_whole_histograms() {
    let normal = Normal::new(0.3f32, 1.0).unwrap();
    let heavy = StudentT::new(2.0f32).unwrap();
    let cases: Vec<(&str, Vec<Vec<f32>>)> = vec![
        ("normal", batches(1, 40, 20_000, |r| normal.sample(r))),
        ("heavy tails", batches(2, 40, 20_000, |r| heavy.sample(r))),
        // Mostly zeros and small probabilities, as a masked Softmax output.
        (
            "softmax-like",
            batches(3, 40, 20_000, |r| if r.random::<f32>() < 0.6 { 0.0 } else { r.random::<f32>().powi(6) }),
        ),
        // A first batch far wider than the rest: the grid coarsens once, later values stay in the folded middle.
        ("wide first", {
            let mut b = batches(4, 30, 20_000, |r| normal.sample(r));
            b.insert(0, batches(5, 1, 20_000, |r| 50.0 * normal.sample(r)).remove(0));
            b
        }),
        // Growing values: the grid coarsens batch after batch, with bins folded.
        (
            "growing",
            (0..30).map(|i| batches(6 + i, 1, 20_000, |r| (1.0 + i as f32) * normal.sample(r)).remove(0)).collect(),
        ),
        // GELU outputs of growing inputs: a dense lower end (GELU's minimum, about -0.17) one bin wide on a grid
        // that coarsens after the bins are first folded.
        (
            "gelu, growing",
            (0..30)
                .map(|i| batches(40 + i, 1, 20_000, |r| gelu((1.0 + i as f32 / 4.0) * normal.sample(r))).remove(0))
                .collect(),
        ),
    ];
    for (name, data) in cases {
        for m in tail_methods() {
            for bins in [128, 2048] {
                let opts = CollectOptions::for_methods(std::slice::from_ref(&m), bins);
                let whole = collect(CollectOptions { tails: None, ..opts.clone() }, &data);
                assert!(opts.tails.is_some(), "{m:?}");
                let tails = collect(opts.clone(), &data);
                let h = tails.tensor("t").unwrap();
                let h = h.signed.as_ref().or(h.abs.as_ref()).unwrap();
                let share = opts.tails.unwrap() * TAIL_MARGIN;
                // The middle really is left uncounted: most values are in no bin. Not so the softmax-like data's
                // signed histogram: its lower end is the bin of its zeros, most of the values, so nothing is folded;
                // nor on 128 bins heavy tails, or GELU's signed histogram: the folded bins are groups of four or
                // more, and the groups that could be folded (next to zero; GELU's few negative bins) hold too many
                // of the values.
                if name == "softmax-like" && h.is_signed() {
                    assert_eq!(h.folded(), None, "{m:?}");
                } else if share < 0.1
                    && (bins > 128 || !(name == "heavy tails" || h.is_signed() && name.starts_with("gelu")))
                {
                    let kept: u64 = h.counts().iter().sum();
                    assert!(
                        h.folded().is_some() && kept < h.total() / 8,
                        "{name} {m:?}: {kept} of {} binned",
                        h.total()
                    );
                }
                // Bin by bin: outside the folded bins the counts of the whole histogram, inside none, and the
                // folded values as many as the whole histogram holds there.
                let w = whole.tensor("t").unwrap();
                let w = w.signed.as_ref().or(w.abs.as_ref()).unwrap();
                assert_eq!((h.width_log2(), h.total()), (w.width_log2(), w.total()), "{name} {m:?}");
                let (a, b) = h.folded().unwrap_or((0, 0));
                for (i, (&got, &want)) in h.counts().iter().zip(w.counts()).enumerate() {
                    let want = if (a..b).contains(&i) { 0 } else { want };
                    assert_eq!(got, want, "{name} {m:?} bins {bins}: bin {i} of folded {a}..{b}");
                }
                let folded_mass: u64 = w.counts()[a..b].iter().sum();
                assert_eq!(h.total() - h.counts().iter().sum::<u64>(), folded_mass, "{name} {m:?}");
                let want = compute_ranges(&whole, &m).unwrap().ranges["t"];
                let got = compute_ranges(&tails, &m).unwrap().ranges["t"];
                assert_eq!(
                    (got.min.to_bits(), got.max.to_bits()),
                    (want.min.to_bits(), want.max.to_bits()),
                    "{name} {m:?} bins {bins}: {got:?} vs {want:?}"
                );
            }
        }
    }
}

/// A tail chosen on the first batches that later batches leave behind: the range falls in the folded bins, and the
/// error says so rather than reading a guess; so does a method that needs the whole histogram.
#[test]
fn a_range_in_the_folded_bins_is_an_error_not_a_guess() {
    let m = Method::Percentile { percentile: 99.0, symmetric: true };
    // A first batch of TAIL_MIN values in 1..2 decides the folding (collected for a tail of one in a million: all
    // of them stay binned, every bin below 1 is folded); the 6.4 million values after it all lie in 0..0.5, where the
    // 99th percentile of the whole is.
    let mut data = batches(7, 1, TAIL_MIN as usize, |r| 1.0 + r.random::<f32>());
    data.extend(batches(8, 64, 100_000, |r| r.random::<f32>() * 0.5));
    // The signed histogram too, for a method that needs it whole.
    let opts = CollectOptions {
        tails: Some(1e-6),
        signed_histogram: true,
        ..CollectOptions::for_methods(std::slice::from_ref(&m), 256)
    };
    let s = collect(opts, &data);
    assert!(s.tensor("t").unwrap().signed.as_ref().unwrap().folded().is_some());
    let e = compute_ranges(&s, &m).unwrap_err();
    assert!(matches!(e, Error::TailTooThin { .. }), "{e}");
    assert!(e.to_string().contains("`t`") && e.to_string().contains("collect again with whole histograms"), "{e}");
    let entropy = Method::Entropy { num_quantized_bins: 128 };
    let e = compute_ranges(&s, &entropy).unwrap_err();
    assert!(matches!(e, Error::TailsOnly { .. }) && e.to_string().contains("kept only its tails"), "{e}");
    // Whole histograms of the same data answer.
    let whole = collect(CollectOptions { tails: None, ..s.options().clone() }, &data);
    assert!(compute_ranges(&whole, &m).is_ok() && compute_ranges(&whole, &entropy).is_ok());
}

/// Methods read from one collection keep the thickest tail any of them reads: mse with a thin percentile reads mse's
/// 1 % (the percentile's 256 x 5e-6 would be too thin for mse), each range the whole histogram's.
#[test]
fn methods_collected_together_keep_the_thickest_tail() {
    let normal = Normal::new(0.0f32, 1.0).unwrap();
    let data = batches(14, 40, 20_000, |r| normal.sample(r));
    let methods = [Method::Percentile { percentile: 99.999, symmetric: false }, Method::Mse];
    let opts = CollectOptions::for_methods(&methods, 2048);
    let (tails, whole) = (collect(opts.clone(), &data), collect(CollectOptions { tails: None, ..opts }, &data));
    assert!(tails.tensor("t").unwrap().abs.as_ref().unwrap().folded().is_some());
    for m in &methods {
        let (got, want) =
            (compute_ranges(&tails, m).unwrap().ranges["t"], compute_ranges(&whole, m).unwrap().ranges["t"]);
        assert_eq!((got.min.to_bits(), got.max.to_bits()), (want.min.to_bits(), want.max.to_bits()), "{m:?}");
    }
}

/// mse's threshold from the top bins alone is proven (every threshold inside the folded bins clips the kept values
/// more than the best one costs in all) or refused.
#[test]
fn mse_from_tails_is_proven_or_refused() {
    // Kept: a first batch of TAIL_MIN values in 1..2, every bin below folded; after it 3.2 million values in 0..0.5.
    // The best threshold, near 2, costs their rounding noise (~ 8); the folded ones clip the kept values by about
    // their distance to 1, ~ 4,096 / 3 in all: proven, and the whole histogram's threshold.
    let first = |r: &mut StdRng| 1.0 + r.random::<f32>();
    let mut data = batches(10, 1, TAIL_MIN as usize, first);
    data.extend(batches(11, 32, 100_000, |r| r.random::<f32>() * 0.5));
    let opts = CollectOptions::for_methods(&[Method::Mse], 256);
    let (tails, whole) = (collect(opts.clone(), &data), collect(CollectOptions { tails: None, ..opts }, &data));
    let h = tails.tensor("t").unwrap().abs.clone().unwrap();
    assert!(h.folded().is_some_and(|(_, b)| b > 0), "{:?}", h.folded());
    let (got, want) = (mse_threshold(&h), mse_threshold(whole.tensor("t").unwrap().abs.as_ref().unwrap()));
    assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits));
    assert!(got.is_some_and(|t| t > 1.5), "{got:?}");
    // Kept values all just past the folded bins' edge clip by next to nothing below it: folded as a percentile's
    // tails would be (as a merged state's may be), nothing proves the best threshold, and mse refuses.
    let mut data = batches(12, 1, TAIL_MIN as usize, |_| 1.0);
    data.extend(batches(13, 32, 100_000, |r| r.random::<f32>() * 0.5));
    let opts = CollectOptions::for_methods(&[Method::Mse], 256);
    assert!(opts.mse_tails);
    let s = collect(CollectOptions { mse_tails: false, ..opts.clone() }, &data);
    assert!(s.tensor("t").unwrap().abs.as_ref().unwrap().folded().is_some());
    let e = compute_ranges(&s, &Method::Mse).unwrap_err();
    assert!(matches!(e, Error::TailTooThin { .. }), "{e}");
    // Collected for mse, bins are folded only below where its threshold stays proven: the whole histogram's.
    let (s, whole) = (collect(opts.clone(), &data), collect(CollectOptions { tails: None, ..opts }, &data));
    let (got, want) = (
        compute_ranges(&s, &Method::Mse).unwrap().ranges["t"],
        compute_ranges(&whole, &Method::Mse).unwrap().ranges["t"],
    );
    assert_eq!(got.max.to_bits(), want.max.to_bits());
    let folded = s.tensor("t").unwrap().abs.as_ref().unwrap().folded();
    assert!(folded.is_some(), "nothing folded");
}

#[test]
fn tail_states_merge_and_round_trip_as_one_collection() {
    let heavy = StudentT::new(3.0f32).unwrap();
    let data = batches(9, 24, 30_000, |r| heavy.sample(r));
    let m = Method::Percentile { percentile: 99.99, symmetric: false };
    let opts = CollectOptions::for_methods(std::slice::from_ref(&m), 512);
    let (first, second) = data.split_at(10);
    let mut a = collect(opts.clone(), first);
    let b = collect(opts.clone(), second);
    a.merge(&b).unwrap();
    let whole = collect(CollectOptions { tails: None, ..opts.clone() }, &data);
    let (got, want) = (compute_ranges(&a, &m).unwrap().ranges["t"], compute_ranges(&whole, &m).unwrap().ranges["t"]);
    assert_eq!((got.min.to_bits(), got.max.to_bits()), (want.min.to_bits(), want.max.to_bits()));
    let h = a.tensor("t").unwrap().signed.as_ref().unwrap();
    assert!(h.folded().is_some() && h.is_consistent());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    a.save_json(&path).unwrap();
    assert_eq!(CalibState::load_json(&path).unwrap(), a);
    // Counts inside the folded bins are refused on load.
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let (lo, _) = h.folded().unwrap();
    v["tensors"]["t"]["signed"]["counts"][lo] = serde_json::json!(1);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(CalibState::load_json(&path).is_err());
}

/// A state whose histogram folded merged with one whose did not (a session that saw too few values to fold): the sum
/// is folded where the first was, holds no count there, and gives the whole histogram's ranges.
#[test]
fn a_folded_histogram_merged_with_a_whole_one_stays_folded_and_exact() {
    let normal = Normal::new(0.0f32, 1.0).unwrap();
    let data = batches(15, 20, 20_000, |r| normal.sample(r));
    let methods = [Method::Mse, Method::Percentile { percentile: 99.99, symmetric: true }];
    let opts = CollectOptions::for_methods(&methods, 1024);
    let (many, few) = data.split_at(19);
    // The few: under TAIL_MIN values past any bin at the top, nothing folds.
    let few: Vec<Vec<f32>> = few.iter().map(|b| b[..2_000].to_vec()).collect();
    for (mut a, b) in [
        (collect(opts.clone(), many), collect(opts.clone(), &few)),
        (collect(opts.clone(), &few), collect(opts.clone(), many)),
    ] {
        a.merge(&b).unwrap();
        let h = a.tensor("t").unwrap().abs.as_ref().unwrap();
        assert!(h.folded().is_some() && h.is_consistent(), "{:?}", h.folded());
        let all: Vec<Vec<f32>> = many.iter().chain(&few).cloned().collect();
        let whole = collect(CollectOptions { tails: None, ..opts.clone() }, &all);
        for m in &methods {
            let (got, want) =
                (compute_ranges(&a, m).unwrap().ranges["t"], compute_ranges(&whole, m).unwrap().ranges["t"]);
            assert_eq!(got.max.to_bits(), want.max.to_bits(), "{m:?}");
        }
    }
}

#[test]
fn only_percentile_and_mse_collections_keep_tails_alone() {
    let p = Method::Percentile { percentile: 99.9, symmetric: false };
    let q = Method::Percentile { percentile: 99.99, symmetric: true };
    // Signed: half the cut at each end; |x|: the whole cut at the top; several percentiles: the thickest tail (its
    // bins hold the thinner ones).
    let share = |m: &[Method]| CollectOptions::for_methods(m, 64).tails.unwrap();
    assert!((share(std::slice::from_ref(&p)) - 0.0005).abs() < 1e-12);
    assert!((share(std::slice::from_ref(&q)) - 0.0001).abs() < 1e-12);
    assert!((share(&[q.clone(), p.clone(), Method::MinMax { symmetric: false }]) - 0.0005).abs() < 1e-12);
    for other in [Method::Entropy { num_quantized_bins: 128 }, Method::Distribution] {
        assert_eq!(CollectOptions::for_methods(&[p.clone(), other], 64).tails, None);
    }
    // mse keeps its own share, or a thicker percentile's.
    assert_eq!(share(&[Method::Mse]), MSE_TAILS);
    assert!((share(&[Method::Mse, q]) - MSE_TAILS.max(0.0001)).abs() < 1e-12);
    assert!((share(&[p.clone(), Method::Mse]) - MSE_TAILS.max(0.0005)).abs() < 1e-12);
    assert_eq!(CollectOptions::for_methods(&[Method::MinMax { symmetric: true }], 64).tails, None);
}
