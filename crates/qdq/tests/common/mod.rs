//! Test helpers: onnx-ir's tiny BERT at small sizes, ORT listing comparison, and range collection by running the
//! FP32 model.
#![allow(dead_code)]

use std::collections::BTreeMap;

use ndarray::Array2;
use onnx_ir::proto::TensorProto;
use onnx_ir::tiny_bert::TinyBertConfig;
use onnx_ir::{DataType, GraphExt, Model, tensor_from_vec};

pub const VOCAB: usize = 16;
pub const SEQ: usize = 8;
pub const HIDDEN: usize = 8;
pub const FFN: usize = 16;

/// LayerNorm as the decomposed opset-14 HF export does it, or fused LayerNormalization (opset 17).
pub use onnx_ir::tiny_bert::LayerNormKind as Ln;

/// onnx-ir's tiny BERT at this file's sizes: one layer, one head, no token types (inputs `input_ids` and
/// `attention_mask`), both LayerNorm forms; names as the Hugging Face export (initializers `bert.encoder.layer.0...`,
/// nodes `/bert/encoder/layer.0/...`).
pub fn tiny_bert(layer_norm: Ln) -> Model {
    onnx_ir::tiny_bert::build(&tiny_config(layer_norm))
}

/// The configuration [`tiny_bert`] builds.
pub fn tiny_config(layer_norm: Ln) -> TinyBertConfig {
    TinyBertConfig {
        layers: 1,
        hidden: HIDDEN,
        heads: 1,
        intermediate: FFN,
        vocab_size: VOCAB,
        max_positions: SEQ,
        type_vocab: 0,
        layer_norm,
        seed: 42,
        ..Default::default()
    }
}

/// [`tiny_bert`] with two layers reading one set of weights, biases and LayerNorm parameters, as ALBERT's do.
pub fn albert_like(layer_norm: Ln) -> Model {
    onnx_ir::tiny_bert::build(&TinyBertConfig { layers: 2, shared_layers: true, ..tiny_config(layer_norm) })
}

/// How many initializers hold at least `HIDDEN * HIDDEN` values (the weights and embedding tables, in whatever
/// type): a weight written twice counts twice.
pub fn big_initializers(m: &Model) -> usize {
    m.graph().initializer.iter().filter(|t| t.dims.iter().product::<i64>() >= (HIDDEN * HIDDEN) as i64).count()
}

/// onnx-ir's tiny BERT at this file's sizes in another graph form: two layers, two heads, token types (the fused
/// form needs them).
pub fn tiny_form(form: onnx_ir::tiny_bert::GraphForm, seed: u64) -> Model {
    two_heads(form, 2, seed)
}

/// onnx-ir's tiny BERT at this file's sizes with two layers of two heads, `type_vocab` token types (0: no
/// `token_type_ids` input, as [`tiny_bert`]).
pub fn two_heads(form: onnx_ir::tiny_bert::GraphForm, type_vocab: usize, seed: u64) -> Model {
    let cfg = TinyBertConfig {
        layers: 2,
        hidden: HIDDEN,
        heads: 2,
        intermediate: FFN,
        vocab_size: VOCAB,
        max_positions: SEQ,
        type_vocab,
        form,
        seed,
        ..Default::default()
    };
    onnx_ir::tiny_bert::build(&cfg)
}

/// Names of the tiny variants as used in testdata file names.
pub fn variant_name(ln: Ln) -> &'static str {
    match ln {
        Ln::Decomposed => "decomposed",
        Ln::Fused => "fused",
    }
}

pub fn testdata(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/qdq").join(file)
}

/// Reads a `tensor -> [min, max]` JSON file.
pub fn load_ranges(path: &std::path::Path) -> qdq::Ranges {
    let v: BTreeMap<String, [f32; 2]> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v.into_iter().map(|(k, [lo, hi])| (k, (lo, hi))).collect()
}

pub fn input_ids() -> Array2<i64> {
    Array2::from_shape_fn((1, SEQ), |(_, j)| ((j * 5 + 3) % VOCAB) as i64)
}

pub fn session(model: &Model, cfg: &runtime::SessionConfig) -> runtime::Session {
    runtime::Session::from_bytes(&model.to_bytes().unwrap(), "tiny", cfg).unwrap()
}

/// The inputs of this file's tiny BERT: [`input_ids`] and an all-ones mask.
pub fn feed() -> Vec<(&'static str, Array2<i64>)> {
    vec![("input_ids", input_ids()), ("attention_mask", Array2::<i64>::ones((1, SEQ)))]
}

/// Runs the model on [`feed`] and returns `outputs` in order.
pub fn run(model: &Model, outputs: &[&str]) -> Vec<ndarray::ArrayD<f32>> {
    run_feed(model, &feed(), outputs, runtime::OptLevel::default())
}

/// Runs the model on `feed` at ORT optimisation level `opt` and returns `outputs` in order.
pub fn run_feed(
    model: &Model,
    feed: &[(&str, Array2<i64>)],
    outputs: &[&str],
    opt: runtime::OptLevel,
) -> Vec<ndarray::ArrayD<f32>> {
    let mut s = session(model, &runtime::SessionConfig { opt_level: opt, ..Default::default() });
    let inputs: Vec<(&str, ndarray::ArrayView2<i64>)> = feed.iter().map(|(n, a)| (*n, a.view())).collect();
    s.run(&inputs, outputs).unwrap()
}

/// Ranges of `tensors` observed by running the FP32 model on [`feed`], widened by 10%.
pub fn observed_ranges(model: &Model, tensors: &[String]) -> qdq::Ranges {
    observed_on(model, tensors, &feed(), runtime::OptLevel::default())
}

/// Ranges of `tensors` observed by running the FP32 model on `feed` at optimisation level `opt`, widened by 10%.
pub fn observed_on(
    model: &Model,
    tensors: &[String],
    feed: &[(&str, Array2<i64>)],
    opt: runtime::OptLevel,
) -> qdq::Ranges {
    let mut m = model.clone();
    for t in tensors {
        m.graph_mut().add_output(t, DataType::Float);
    }
    let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
    let outs = run_feed(&m, feed, &names, opt);
    tensors
        .iter()
        .zip(outs)
        .map(|(t, a)| {
            let lo = a.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = a.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            (t.clone(), (lo * 1.1, hi * 1.1))
        })
        .collect()
}

/// One Q/DQ pair as listed by `testdata/qdq/ort_reference.py`.
#[derive(serde::Deserialize, Debug)]
pub struct RefPair {
    pub tensor: String,
    pub is_initializer: bool,
    pub scale: Vec<f64>,
    pub scale_count: usize,
    pub scale_sum: f64,
    pub zero_point: Vec<i32>,
    pub axis: Option<i64>,
    pub consumers: Vec<(String, usize)>,
}

#[derive(serde::Deserialize, Debug)]
pub struct RefListing {
    pub opset: i64,
    pub pairs: Vec<RefPair>,
}

fn rel_close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(f64::MIN_POSITIVE)
}

/// Compares the Q/DQ pairs of `quantized` with an ORT listing; returns the differences.
pub fn compare_with_reference(quantized: &Model, reference: &RefListing) -> Vec<String> {
    let ours = qdq::coverage(quantized).pairs;
    let mut diffs = vec![];
    if ours.len() != reference.pairs.len() {
        diffs.push(format!("{} pairs, ORT has {}", ours.len(), reference.pairs.len()));
    }
    let key = |t: &str, c: &[(String, usize)]| format!("{t} -> {c:?}");
    let ref_by_key: BTreeMap<String, &RefPair> =
        reference.pairs.iter().map(|p| (key(&p.tensor, &p.consumers), p)).collect();
    let our_keys: std::collections::BTreeSet<String> = ours.iter().map(|p| key(&p.tensor, &p.consumers)).collect();
    for k in ref_by_key.keys().filter(|k| !our_keys.contains(*k)) {
        diffs.push(format!("missing pair {k}"));
    }
    for p in &ours {
        let k = key(&p.tensor, &p.consumers);
        let Some(r) = ref_by_key.get(&k) else {
            diffs.push(format!("extra pair {k}"));
            continue;
        };
        if p.is_initializer != r.is_initializer {
            diffs.push(format!("{k}: is_initializer {} vs ORT {}", p.is_initializer, r.is_initializer));
        }
        let sum: f64 = p.scales.iter().map(|&s| f64::from(s)).sum();
        let listed_ok = r.scale.iter().zip(&p.scales).all(|(a, b)| rel_close(*a, f64::from(*b), 1e-6));
        if p.scales.len() != r.scale_count || !listed_ok || !rel_close(sum, r.scale_sum, 1e-6) {
            diffs.push(format!(
                "{k}: scales {:?}.. (n={}) vs ORT {:?}.. (n={})",
                &p.scales[..p.scales.len().min(4)],
                p.scales.len(),
                &r.scale[..r.scale.len().min(4)],
                r.scale_count
            ));
        }
        let zp_ok =
            r.zero_point.iter().zip(&p.zero_points).all(|(a, b)| a == b) && p.zero_points.len() == r.scale_count;
        if !zp_ok {
            diffs.push(format!("{k}: zero points differ"));
        }
        let axis = if p.scales.len() > 1 { p.axis } else { None };
        if axis != r.axis {
            diffs.push(format!("{k}: axis {axis:?} vs ORT {:?}", r.axis));
        }
    }
    diffs
}

/// Builds a float32 initializer (for hand-made graphs in tests).
pub fn f32_init(name: &str, shape: &[usize], v: Vec<f32>) -> TensorProto {
    tensor_from_vec::<f32>(name, shape, v).unwrap()
}

/// A preset with smoothing and the outlier split off: these tests place pairs on raw models, which `qdq::plan`
/// refuses for a policy that smooths or splits (see `smoothing_policy_needs_a_smoothed_model` and
/// `a_planted_outlier_channel_is_carried_in_float_and_the_rest_keeps_its_levels`).
#[allow(dead_code)]
pub fn unsmoothed(preset: &str) -> qdq::Policy {
    let mut p = qdq::Policy::preset(preset).unwrap();
    p.set("smooth", "off").unwrap();
    p.set("outlier_channels", "off").unwrap();
    p
}

/// A preset without the outlier split (`outlier_channels = off`), for tests of something else that plan on a model
/// they did not split.
#[allow(dead_code)]
pub fn unsplit(preset: &str) -> qdq::Policy {
    let mut p = qdq::Policy::preset(preset).unwrap();
    p.set("outlier_channels", "off").unwrap();
    p
}

/// Per-channel max |x| (last axis) of each tensor, from running the model on `feed` (what smoothing needs).
pub fn channel_absmax_on(
    model: &Model,
    tensors: &[String],
    feed: &[(&str, Array2<i64>)],
) -> BTreeMap<String, Vec<f32>> {
    let mut m = model.clone();
    for t in tensors {
        m.graph_mut().add_output(t, DataType::Float);
    }
    let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
    let outs = run_feed(&m, feed, &names, runtime::OptLevel::default());
    tensors
        .iter()
        .zip(outs)
        .map(|(t, a)| {
            let c = *a.shape().last().unwrap();
            let mut mx = vec![0f32; c];
            for (i, v) in a.iter().enumerate() {
                mx[i % c] = mx[i % c].max(v.abs());
            }
            (t.clone(), mx)
        })
        .collect()
}
