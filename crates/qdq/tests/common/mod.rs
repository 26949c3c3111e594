//! Test helpers: a tiny one-layer BERT built here (onnx-ir's `tiny_bert` had not landed), ORT
//! listing comparison, and range collection by running the FP32 model.
#![allow(dead_code)]

use std::collections::BTreeMap;

use ndarray::Array2;
use onnx_ir::proto::{GraphProto, ModelProto, OperatorSetIdProto, TensorProto, ValueInfoProto};
use onnx_ir::{DataType, GraphExt, Model, NodeExt, attr_float, attr_int, attr_ints, node, tensor_from_vec, value_info};

pub const VOCAB: usize = 16;
pub const SEQ: usize = 8;
pub const HIDDEN: usize = 8;
pub const FFN: usize = 16;

/// LayerNorm as the decomposed opset-14 HF export does it, or fused LayerNormalization (opset 17).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ln {
    Decomposed,
    Fused,
}

/// Deterministic weights in [-scale, scale) from a 64-bit LCG.
struct Rng(u64);
impl Rng {
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }
}

struct B {
    g: GraphProto,
    rng: Rng,
    ln: Ln,
}

impl B {
    fn init(&mut self, name: &str, shape: &[usize], scale: f32) -> String {
        let n: usize = shape.iter().product();
        let v = self.rng.vec(n, scale);
        self.g.initializer.push(tensor_from_vec::<f32>(name, shape, v).unwrap());
        name.to_string()
    }
    fn konst(&mut self, name: &str, shape: &[usize], v: Vec<f32>) -> String {
        self.g.initializer.push(tensor_from_vec::<f32>(name, shape, v).unwrap());
        name.to_string()
    }
    fn op(&mut self, op: &str, name: &str, inputs: &[&str]) -> String {
        let out = format!("{name}_output_0");
        self.g.node.push(node(op, name, inputs, &[&out]));
        out
    }
    fn op_attr(&mut self, op: &str, name: &str, inputs: &[&str], attrs: Vec<onnx_ir::proto::AttributeProto>) -> String {
        let out = format!("{name}_output_0");
        let mut n = node(op, name, inputs, &[&out]);
        for a in attrs {
            n = n.with_attr(a);
        }
        self.g.node.push(n);
        out
    }
    /// x @ W + b, named like the HF export (`{p}/MatMul`, `{p}/Add`).
    fn dense(&mut self, p: &str, x: &str, din: usize, dout: usize) -> String {
        let w = self.init(&format!("{p}.weight"), &[din, dout], 0.5);
        let b = self.init(&format!("{p}.bias"), &[dout], 0.1);
        let mm = self.op("MatMul", &format!("{p}/MatMul"), &[x, &w]);
        self.op("Add", &format!("{p}/Add"), &[&b, &mm])
    }
    fn layer_norm(&mut self, p: &str, x: &str) -> String {
        let gamma = self.konst(&format!("{p}.weight"), &[HIDDEN], (0..HIDDEN).map(|i| 1.0 + i as f32 * 0.01).collect());
        let beta = self.konst(&format!("{p}.bias"), &[HIDDEN], (0..HIDDEN).map(|i| i as f32 * 0.01).collect());
        match self.ln {
            Ln::Fused => self.op_attr(
                "LayerNormalization",
                &format!("{p}/LayerNormalization"),
                &[x, &gamma, &beta],
                vec![attr_int("axis", -1), attr_float("epsilon", 1e-12)],
            ),
            Ln::Decomposed => {
                let axes = || vec![attr_ints("axes", &[-1])];
                let mean = self.op_attr("ReduceMean", &format!("{p}/ReduceMean"), &[x], axes());
                let d = self.op("Sub", &format!("{p}/Sub"), &[x, &mean]);
                let two = self.konst(&format!("{p}/Constant_output_0"), &[], vec![2.0]);
                let sq = self.op("Pow", &format!("{p}/Pow"), &[&d, &two]);
                let var = self.op_attr("ReduceMean", &format!("{p}/ReduceMean_1"), &[&sq], axes());
                let eps = self.konst(&format!("{p}/Constant_1_output_0"), &[], vec![1e-12]);
                let ve = self.op("Add", &format!("{p}/Add"), &[&var, &eps]);
                let sd = self.op("Sqrt", &format!("{p}/Sqrt"), &[&ve]);
                let n = self.op("Div", &format!("{p}/Div"), &[&d, &sd]);
                let m = self.op("Mul", &format!("{p}/Mul"), &[&n, &gamma]);
                self.op("Add", &format!("{p}/Add_1"), &[&m, &beta])
            }
        }
    }
}

fn float_vi(name: &str, dims: &[i64]) -> ValueInfoProto {
    let d: Vec<Result<i64, &str>> = dims.iter().map(|&d| if d < 0 { Err("seq") } else { Ok(d) }).collect();
    value_info(name, DataType::Float, Some(&d))
}

/// One-layer, single-head BERT: embeddings + LN, attention with bias Adds, residual Adds
/// feeding LN, GELU-free FFN (Relu), qa head producing `start_logits` `[1, SEQ, 2]`.
pub fn tiny_bert(ln: Ln) -> Model {
    let mut b = B { g: GraphProto { name: Some("tiny_bert".into()), ..Default::default() }, rng: Rng(42), ln };
    b.g.input.push(value_info("input_ids", DataType::Int64, Some(&[Ok(1), Err("seq")])));
    let we = b.init("bert.embeddings.word_embeddings.weight", &[VOCAB, HIDDEN], 1.0);
    let pe = b.init("bert.embeddings.position_embeddings.weight", &[1, SEQ, HIDDEN], 0.2);
    let tok = b.op("Gather", "/bert/embeddings/word_embeddings/Gather", &[&we, "input_ids"]);
    let emb = b.op("Add", "/bert/embeddings/Add", &[&tok, &pe]);
    let x0 = b.layer_norm("/bert/embeddings/LayerNorm", &emb);
    let p = "/bert/encoder/layer.0/attention/self";
    let q = b.dense(&format!("{p}/query"), &x0, HIDDEN, HIDDEN);
    let k = b.dense(&format!("{p}/key"), &x0, HIDDEN, HIDDEN);
    let v = b.dense(&format!("{p}/value"), &x0, HIDDEN, HIDDEN);
    let kt = b.op_attr("Transpose", &format!("{p}/Transpose"), &[&k], vec![attr_ints("perm", &[0, 2, 1])]);
    let scores = b.op("MatMul", &format!("{p}/MatMul"), &[&q, &kt]);
    let sqrt_d = b.konst(&format!("{p}/Constant_output_0"), &[], vec![(HIDDEN as f32).sqrt()]);
    let scaled = b.op("Div", &format!("{p}/Div"), &[&scores, &sqrt_d]);
    let probs = b.op_attr("Softmax", &format!("{p}/Softmax"), &[&scaled], vec![attr_int("axis", -1)]);
    let ctx = b.op("MatMul", &format!("{p}/MatMul_1"), &[&probs, &v]);
    let o = "/bert/encoder/layer.0/attention/output";
    let dense = b.dense(&format!("{o}/dense"), &ctx, HIDDEN, HIDDEN);
    let res1 = b.op("Add", &format!("{o}/Add"), &[&dense, &x0]);
    let x1 = b.layer_norm(&format!("{o}/LayerNorm"), &res1);
    let h = b.dense("/bert/encoder/layer.0/intermediate/dense", &x1, HIDDEN, FFN);
    let act = b.op("Relu", "/bert/encoder/layer.0/intermediate/intermediate_act_fn/Relu", &[&h]);
    let out = "/bert/encoder/layer.0/output";
    let d2 = b.dense(&format!("{out}/dense"), &act, FFN, HIDDEN);
    let res2 = b.op("Add", &format!("{out}/Add"), &[&d2, &x1]);
    let x2 = b.layer_norm(&format!("{out}/LayerNorm"), &res2);
    let logits = b.dense("/qa_outputs", &x2, HIDDEN, 2);
    b.g.node.push(node("Identity", "/Identity", &[&logits], &["start_logits"]));
    b.g.output.push(float_vi("start_logits", &[1, -1, 2]));
    let opset = if ln == Ln::Fused { 17 } else { 14 };
    Model::new(ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
        producer_name: Some("qdq-tests".into()),
        graph: Some(b.g),
        ..Default::default()
    })
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

/// Runs the model and returns `outputs` in order.
pub fn run(model: &Model, outputs: &[&str]) -> Vec<ndarray::ArrayD<f32>> {
    let mut s = session(model, &runtime::SessionConfig::default());
    let ids = input_ids();
    s.run(&[("input_ids", ids.view())], outputs).unwrap()
}

/// Ranges of `tensors` observed by running the FP32 model on [`input_ids`], widened by 10%.
pub fn observed_ranges(model: &Model, tensors: &[String]) -> qdq::Ranges {
    let mut m = model.clone();
    for t in tensors {
        m.graph_mut().add_output(t, DataType::Float);
    }
    let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
    let outs = run(&m, &names);
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

/// A preset with smoothing off: these tests place pairs on raw (unsmoothed) models, which `qdq::plan` refuses for a
/// policy that smooths (see `smoothing_policy_needs_a_smoothed_model`).
#[allow(dead_code)]
pub fn unsmoothed(preset: &str) -> qdq::Policy {
    let mut p = qdq::Policy::preset(preset).unwrap();
    p.set("smooth", "off").unwrap();
    p
}
