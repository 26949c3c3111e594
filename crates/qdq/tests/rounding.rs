//! GPTQ-style weight rounding on tiny BERT: the Gram matrices, that the rounded weights' MatMul outputs are closer to
//! the float ones than round-to-nearest's on the same inputs, and that the plan quantizes the rounded weights with
//! the original parameters to exactly the integers chosen.
use std::collections::BTreeMap;

use crate::common::*;
use ndarray::{Array2, ArrayView2};
use onnx_ir::{DataType, GraphExt, Model};
use qdq::{Gram, Policy, RoundingSite};

/// The `cpu` preset without smoothing, weights rounded by GPTQ (8 bits, pairs bounded).
fn gptq_policy() -> Policy {
    let mut p = Policy::preset("cpu").unwrap();
    p.set("smooth", "off").unwrap();
    p.set("outlier_channels", "off").unwrap();
    p.set("weight_rounding", "gptq").unwrap();
    p
}

/// [`gptq_policy`] on the 7-bit grid (`reduce_range`) instead of bounded pairs.
fn seven_bit_policy() -> Policy {
    let mut p = gptq_policy();
    p.set("bounded_pairs", "false").unwrap();
    p.set("reduce_range", "true").unwrap();
    p
}

/// Eight rows of token ids (64 positions, more than the widest MatMul input's 16 channels).
fn batch() -> Vec<(&'static str, Array2<i64>)> {
    let ids = Array2::from_shape_fn((8, SEQ), |(i, j)| ((i * 7 + j * 3 + i * j) % VOCAB) as i64);
    vec![("input_ids", ids), ("attention_mask", Array2::<i64>::ones((8, SEQ)))]
}

/// Each tensor's values on [`batch`], as `[positions, channels]`.
fn activations(model: &Model, tensors: &[String]) -> BTreeMap<String, Array2<f32>> {
    let mut m = model.clone();
    for t in tensors {
        m.graph_mut().add_output(t, DataType::Float);
    }
    let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
    let outs = run_feed(&m, &batch(), &names, runtime::OptLevel::default());
    tensors
        .iter()
        .zip(outs)
        .map(|(t, a)| {
            let c = *a.shape().last().unwrap();
            let rows = a.len() / c;
            (t.clone(), a.into_shape_with_order((rows, c)).unwrap())
        })
        .collect()
}

fn grams(acts: &BTreeMap<String, Array2<f32>>) -> BTreeMap<String, Gram> {
    acts.iter()
        .map(|(t, a)| {
            let mut g = Gram::new(a.ncols());
            g.observe(t, a.as_slice().unwrap(), &[a.nrows(), a.ncols()]).unwrap();
            (t.clone(), g)
        })
        .collect()
}

fn weight(m: &Model, name: &str) -> Array2<f32> {
    let t = m.graph().initializer(name).unwrap();
    onnx_ir::tensor_to_array::<f32>(t).unwrap().into_dimensionality().unwrap()
}

/// Round-to-nearest of `w` (`[in, out]`) on the policy's grid: symmetric, one scale per column; with bounded pairs
/// the column's range widened until its largest sum of rows `2j` and `2j + 1` lands on 128 levels.
fn nearest(w: &Array2<f32>, policy: &Policy) -> Array2<f32> {
    let spec = policy.weight_spec();
    let (qmin, qmax) = spec.qtype.range(spec.symmetric, spec.reduce_range);
    let mut out = w.clone();
    for (c, mut col) in out.columns_mut().into_iter().enumerate() {
        let lo = w.column(c).iter().fold(0.0f32, |a, &v| a.min(v));
        let hi = w.column(c).iter().fold(0.0f32, |a, &v| a.max(v));
        let pairs = w.column(c).exact_chunks(2).into_iter().map(|p| p[0].abs() + p[1].abs()).fold(0.0f32, f32::max);
        let t = if policy.bounded_pairs { (pairs * qmax as f32 / 128.0).max(hi).max(-lo) } else { hi.max(-lo) };
        let p = qdq::compute_scale_zp(-t, t, spec);
        col.mapv_inplace(|v| (qdq::quantize_value(v, p, qmin, qmax) - p.zero_point) as f32 * p.scale);
    }
    out
}

/// `‖X W - X Ŵ‖²` summed over the rows of `x`.
fn output_error(x: ArrayView2<f32>, w: &Array2<f32>, q: &Array2<f32>) -> f64 {
    let d = (w - q).mapv(f64::from);
    let y = x.mapv(f64::from).dot(&d);
    y.iter().map(|v| v * v).sum()
}

fn sites_and_inputs(m: &Model, p: &Policy) -> (Vec<RoundingSite>, Vec<String>) {
    let sites = qdq::rounding_sites(m, p).unwrap();
    let mut inputs: Vec<String> = sites.iter().flat_map(|s| s.inputs.clone()).collect();
    inputs.sort();
    inputs.dedup();
    (sites, inputs)
}

#[test]
fn every_constant_weight_matmul_is_a_site_and_nearest_rounds_none() {
    let m = tiny_bert(Ln::Decomposed);
    let (sites, _) = sites_and_inputs(&m, &gptq_policy());
    // Q, K, V, the attention output, FFN up and down, the QA head.
    assert_eq!(sites.len(), 7, "{sites:?}");
    assert!(sites.iter().all(|s| s.axis == 1 && s.inputs.len() == 1));
    let mut nearest = gptq_policy();
    nearest.set("weight_rounding", "nearest").unwrap();
    assert!(qdq::rounding_sites(&m, &nearest).unwrap().is_empty());
    // Runs rounding against their own inputs describe different models: their statistics are not merged.
    assert!(matches!(qdq::check_mergeable(&m, &gptq_policy()), Err(qdq::Error::MergeWithRounding)));
    qdq::check_mergeable(&m, &nearest).unwrap();
    let mut fp8 = Policy::preset("tensorrt").unwrap();
    fp8.set("weight_rounding", "gptq").unwrap();
    fp8.set("precision", "fp8-e4m3fn").unwrap();
    assert!(qdq::rounding_sites(&m, &fp8).unwrap().is_empty(), "GPTQ rounds integer grids only");
}

#[test]
fn gptq_lowers_every_matmul_output_error_below_round_to_nearest() {
    for (ln, policy, record) in [
        (Ln::Decomposed, gptq_policy(), "gptq; weights=7; bits=8; per_channel=true; bounded_pairs=true"),
        (Ln::Fused, gptq_policy(), "gptq; weights=7; bits=8; per_channel=true; bounded_pairs=true"),
        (Ln::Decomposed, seven_bit_policy(), "gptq; weights=7; bits=7; per_channel=true; bounded_pairs=false"),
    ] {
        let original = tiny_bert(ln);
        let (sites, inputs) = sites_and_inputs(&original, &policy);
        let acts = activations(&original, &inputs);
        let mut rounded = original.clone();
        let report = qdq::round_weights(&mut rounded, &policy, &sites, &grams(&acts)).unwrap();
        assert_eq!(report.len(), sites.len());
        assert_eq!(qdq::rounding_record(&rounded), Some(record));
        for (site, r) in sites.iter().zip(&report) {
            let x = acts[&site.inputs[0]].view();
            let w = weight(&original, &site.weight);
            let gptq = output_error(x, &w, &weight(&rounded, &site.weight));
            let rtn = output_error(x, &w, &nearest(&w, &policy));
            assert!(gptq < 0.9 * rtn, "{}: GPTQ {gptq} against round-to-nearest {rtn}", site.weight);
            // What the report says is the same error per row of the inputs.
            let rows = x.nrows() as f64;
            assert!((r.gptq_error - gptq / rows).abs() <= 1e-3 * gptq / rows + 1e-12, "{r:?} vs {}", gptq / rows);
            assert!((r.nearest_error - rtn / rows).abs() <= 1e-3 * rtn / rows + 1e-12, "{r:?} vs {}", rtn / rows);
        }
    }
}

#[test]
fn the_plan_quantizes_rounded_weights_with_the_original_parameters_to_the_chosen_integers() {
    let original = tiny_bert(Ln::Decomposed);
    let policy = gptq_policy();
    let (sites, inputs) = sites_and_inputs(&original, &policy);
    let mut rounded = original.clone();
    qdq::round_weights(&mut rounded, &policy, &sites, &grams(&activations(&original, &inputs))).unwrap();
    let tensors = qdq::tensors_to_calibrate(&original, &policy).unwrap();
    let ranges = observed_ranges(&original, &tensors);
    let before = qdq::plan(&original, &ranges, &policy).unwrap();
    let after = qdq::plan(&rounded, &ranges, &policy).unwrap();
    let (mut changed, mut wide) = (0, false);
    for site in &sites {
        let find = |p: &qdq::Plan| p.tensors.iter().find(|t| t.tensor == site.weight).unwrap().scales.clone();
        let scales = find(&before);
        assert_eq!(scales, find(&after), "{}: the rounded weight's scales", site.weight);
        let w = weight(&rounded, &site.weight);
        let mut ints = Array2::<i32>::zeros(w.dim());
        for ((r, c), &v) in w.indexed_iter() {
            let q = f64::from(v) / f64::from(scales[c]);
            // The kept ends of a column widened by a pair lie off the grid (the plan rounds them); the rest on it.
            ints[(r, c)] = q.round() as i32;
            assert!(q.abs() <= 127.0 + 1e-4, "{}: {v} is outside the grid", site.weight);
        }
        let on_grid = w.indexed_iter().filter(|&((_, c), &v)| {
            let q = f64::from(v) / f64::from(scales[c]);
            (q - q.round()).abs() < 1e-4
        });
        assert!(on_grid.count() + 2 * w.ncols() >= w.len(), "{}: off the grid", site.weight);
        // Bounded pairs: the integers of rows 2j and 2j + 1 stay within 128 together.
        for col in ints.columns() {
            let worst = col.exact_chunks(2).into_iter().map(|p| p[0].abs() + p[1].abs()).max().unwrap();
            assert!(worst <= 128, "{}: pair sum {worst}", site.weight);
        }
        wide |= ints.iter().any(|q| q.abs() > 64);
        changed += (&w - &nearest(&weight(&original, &site.weight), &policy)).iter().filter(|d| **d != 0.0).count();
    }
    assert!(changed > 0, "GPTQ chose round-to-nearest's integers everywhere");
    assert!(wide, "no rounded weight uses more than 7 bits");
}

#[test]
fn gram_matrices_sum_in_parts_as_in_one_and_name_a_bad_tensor() {
    let a: Vec<f32> = (0..6 * 4).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let mut one = Gram::new(4);
    one.observe("x", &a, &[2, 3, 4]).unwrap();
    let (mut first, mut second) = (Gram::new(4), Gram::new(4));
    first.observe("x", &a[..8], &[2, 4]).unwrap();
    second.observe("x", &a[8..], &[4, 4]).unwrap();
    first.merge("x", &second).unwrap();
    assert_eq!((one.rows(), first.rows()), (6, 6));
    let x = Array2::from_shape_vec((6, 4), a.iter().map(|&v| f64::from(v)).collect()).unwrap();
    let want = x.t().dot(&x) / 6.0;
    for g in [&one, &first] {
        let got = g.second_moment();
        assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-9), "{got} vs {want}");
    }
    let err = Gram::new(4).observe("layer.0/ffn", &a, &[6, 3]).unwrap_err().to_string();
    assert!(err.contains("layer.0/ffn") && err.contains("4 channels"), "{err}");
    // A row holding NaN is left out, as calibration leaves such values out.
    let mut nan = a.clone();
    nan[5] = f32::NAN;
    let mut g = Gram::new(4);
    g.observe("ctx", &nan, &[6, 4]).unwrap();
    assert_eq!(g.rows(), 5);
    let kept: Vec<f64> = a[..4].iter().chain(&a[8..]).map(|&v| f64::from(v)).collect();
    let x = Array2::from_shape_vec((5, 4), kept).unwrap();
    let want = x.t().dot(&x) / 5.0;
    assert!(g.second_moment().iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-9));
    let err = first.merge("wide", &Gram::new(8)).unwrap_err().to_string();
    assert!(err.contains("wide") && err.contains("8 channels"), "{err}");
}
