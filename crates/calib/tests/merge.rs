//! Sharded collection + merge is identical to one pass; JSON state round trip.
use crate::common::all_methods;
use proptest::prelude::*;
use qdq_calib::*;

fn batches() -> impl Strategy<Value = Vec<Vec<f32>>> {
    // values spanning many magnitudes (and exact zeros) so shards start from very different bin widths
    let value = prop_oneof![
        Just(0.0f32),
        (-1.0f32..1.0).prop_map(|x| x * 1e-3),
        -1.0f32..1.0,
        (-1.0f32..1.0).prop_map(|x| x * 300.0),
    ];
    prop::collection::vec(prop::collection::vec(value, 0..40), 1..8)
}

fn collect(batches: &[Vec<f32>], opts: &CollectOptions) -> CalibState {
    let mut s = CalibState::new(opts.clone());
    for b in batches {
        s.observe("t", b, &[b.len()]).unwrap();
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn shards_merged_equal_one_pass(batches in batches(), split in 0usize..8, reverse: bool) {
        let opts = CollectOptions::for_methods(&all_methods(), 16);
        let one = collect(&batches, &opts);
        let split = split.min(batches.len());
        let (a, b) = batches.split_at(split);
        let (mut first, second) = if reverse {
            (collect(b, &opts), collect(a, &opts))
        } else {
            (collect(a, &opts), collect(b, &opts))
        };
        first.merge(&second).unwrap();
        prop_assert_eq!(&first, &one);
        for m in all_methods() {
            prop_assert_eq!(compute_ranges(&first, &m).unwrap(), compute_ranges(&one, &m).unwrap());
        }
        // batch order does not matter either
        let mut rev = batches.clone();
        rev.reverse();
        prop_assert_eq!(collect(&rev, &opts), one);
    }
}

#[test]
fn merge_mismatch_names_the_field() {
    let a = CalibState::new(CollectOptions { num_bins: 64, ..Default::default() });
    let mut b = CalibState::new(CollectOptions { num_bins: 128, ..Default::default() });
    let e = b.merge(&a).unwrap_err();
    assert!(matches!(e, Error::MergeMismatch { field: "num_bins", .. }), "{e}");
    let a = CalibState::new(CollectOptions { abs_histogram: true, ..Default::default() });
    let e = CalibState::new(CollectOptions::default()).merge(&a).unwrap_err();
    assert!(e.to_string().contains("abs_histogram"), "{e}");
}

#[test]
fn moving_average_states_do_not_merge() {
    let opts = CollectOptions { moving_average: Some(0.1), ..Default::default() };
    let mut a = CalibState::new(opts.clone());
    a.observe("t", &[1.0], &[1]).unwrap();
    let mut b = CalibState::new(opts);
    b.observe("t", &[2.0], &[1]).unwrap();
    let before = a.clone();
    assert!(matches!(a.merge(&b), Err(Error::NotMergeable(_))));
    assert_eq!(a, before, "a failed merge leaves the state untouched");
}

#[test]
fn json_round_trip_and_bad_file() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let mut s = CalibState::new(CollectOptions::for_methods(&all_methods(), 32));
    s.observe("x", &[1.0, -2.0, f32::NAN, 0.0], &[2, 2]).unwrap();
    let path = dir.join("state.json");
    s.save_json(&path).unwrap();
    assert_eq!(CalibState::load_json(&path).unwrap(), s);
    std::fs::write(dir.join("bad.json"), b"{\"options\": 3}").unwrap();
    let e = CalibState::load_json(dir.join("bad.json")).unwrap_err();
    assert!(matches!(e, Error::Json { .. }) && e.to_string().contains("bad.json"), "{e}");
    let e = CalibState::load_json(dir.join("missing.json")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }) && e.to_string().contains("missing.json"), "{e}");
    // a tampered histogram is rejected instead of panicking later
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["tensors"]["x"]["signed"]["counts"] = serde_json::json!([1, 2]);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let e = CalibState::load_json(&path).unwrap_err().to_string();
    assert!(e.contains("`x`") && e.contains("signed histogram"), "{e}");
    // no temporary files left behind
    let names: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn large_parallel_batch_equals_small_batches() {
    // > 2^18 values takes the parallel chunked path
    let data = crate::common::normal(300_000, 0.5, 2.0, 21);
    let opts = CollectOptions::for_methods(&all_methods(), 256);
    let mut big = CalibState::new(opts.clone());
    big.observe("t", &data, &[data.len()]).unwrap();
    let mut small = CalibState::new(opts);
    for c in data.chunks(10_007) {
        small.observe("t", c, &[c.len()]).unwrap();
    }
    assert_eq!(big, small);
    assert_eq!(big.tensor("t").unwrap().signed.as_ref().unwrap().total(), 300_000);
}

/// Counts of the signed (`x`) and absolute (`|x|`) histograms computed directly from their definition:
/// bin `floor(x / w)` with `w = 2^width_log2_for(max|x|)`, non-finite values left out.
fn naive_counts(data: &[f32], per_side: usize, signed: bool) -> Vec<u64> {
    let finite: Vec<f64> = data.iter().filter(|x| x.is_finite()).map(|&x| f64::from(x)).collect();
    let t = finite.iter().fold(0f64, |a, x| a.max(x.abs())) as f32;
    let w = 2f64.powi(hist::width_log2_for(t, per_side));
    let (len, offset) = if signed { (2 * per_side, per_side as i64) } else { (per_side, 0) };
    let mut counts = vec![0u64; len];
    for x in finite {
        let v = if signed { x } else { x.abs() };
        counts[((v / w).floor() as i64 + offset) as usize] += 1;
    }
    counts
}

#[test]
fn one_large_batch_matches_the_histogram_definition() {
    // More than two parallel chunks (2^18 values each), magnitudes growing along the batch so every chunk
    // starts on a finer grid than the final one, plus non-finite values and exact zeros scattered through it.
    let mut data = crate::common::normal(700_000, -0.25, 1.0, 5);
    for (i, x) in data.iter_mut().enumerate() {
        *x *= 1.0 + (i as f32 / 700_000.0) * 40.0;
        match i % 9973 {
            0 => *x = f32::NAN,
            1 => *x = f32::INFINITY,
            2 => *x = f32::NEG_INFINITY,
            3 => *x = 0.0,
            _ => {}
        }
    }
    let opts = CollectOptions { signed_histogram: true, abs_histogram: true, num_bins: 1000, ..Default::default() };
    let mut s = CalibState::new(opts);
    s.observe("t", &data, &[data.len()]).unwrap();
    let t = s.tensor("t").unwrap();
    let (signed, abs) = (t.signed.as_ref().unwrap(), t.abs.as_ref().unwrap());
    assert_eq!(signed.counts(), naive_counts(&data, 1000, true).as_slice());
    assert_eq!(abs.counts(), naive_counts(&data, 2000, false).as_slice());
    let finite = data.iter().filter(|x| x.is_finite()).count() as u64;
    assert_eq!((signed.total(), abs.total(), t.count), (finite, finite, finite));
    let nf = s.non_finite()["t"];
    assert_eq!((nf.nan, nf.pos_inf, nf.neg_inf), (71, 71, 71));
    let max_abs = data.iter().filter(|x| x.is_finite()).fold(0f32, |a, x| a.max(x.abs()));
    assert_eq!(signed.max_abs(), max_abs);
}

#[test]
fn zero_runs_and_tensors_in_turn_match_the_histogram_definition() {
    // Runs of exact zeros of many lengths (padding, masked attention), runs of one non-zero value and of NaN, tiny
    // values on either side of zero (bin 0 and bin -1), -0.0, and several tensors binned one after the other on one thread and in one batch: every histogram
    // must still be its definition (a binning shortcut for the zero bin or scratch reused between tensors would show).
    let mut rng = 7u64;
    let mut next = || {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (rng >> 33) as u32
    };
    let tensors: Vec<Vec<f32>> = (0..6)
        .map(|t| {
            let mut data = Vec::new();
            for run in 0..400 {
                data.extend(std::iter::repeat_n(0.0f32, (run * 7 + t) % 71));
                let x = match next() % 5 {
                    0 => 1e-7,
                    1 => -1e-7,
                    2 => -0.0,
                    3 => f32::NAN,
                    _ => (next() % 2000) as f32 / 100.0 - 10.0,
                };
                // Runs of one non-zero value too (saturated activations), and of NaN (never counted).
                data.extend(std::iter::repeat_n(x * (t + 1) as f32, 1 + (run % 3) * (next() % 40) as usize));
            }
            data
        })
        .collect();
    let opts = CollectOptions { signed_histogram: true, abs_histogram: true, num_bins: 300, ..Default::default() };
    let mut one_by_one = CalibState::new(opts.clone());
    for (i, data) in tensors.iter().enumerate() {
        one_by_one.observe(&format!("t{i}"), data, &[data.len()]).unwrap();
    }
    let mut batched = CalibState::new(opts);
    let names: Vec<String> = (0..tensors.len()).map(|i| format!("t{i}")).collect();
    let batch: Vec<(&str, &[f32], &[usize])> =
        names.iter().zip(&tensors).map(|(n, d)| (n.as_str(), d.as_slice(), &[][..])).collect();
    batched.observe_batch(&batch).unwrap();
    for (i, data) in tensors.iter().enumerate() {
        for state in [&one_by_one, &batched] {
            let t = state.tensor(&format!("t{i}")).unwrap();
            assert_eq!(t.signed.as_ref().unwrap().counts(), naive_counts(data, 300, true).as_slice(), "t{i} signed");
            assert_eq!(t.abs.as_ref().unwrap().counts(), naive_counts(data, 600, false).as_slice(), "t{i} abs");
        }
    }
}
