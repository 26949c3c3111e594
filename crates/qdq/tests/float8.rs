//! FP8 (E4M3) pairs: values through a pair as ONNX Runtime computes them, the opset-19 upgrade they need, and what
//! they hold that INT8 cannot: a planted outlier channel.
use calib::{CalibState, CollectOptions, Float8, Method};
use ndarray::Array2;
use onnx_ir::proto::{GraphProto, ModelProto, OperatorSetIdProto};
use onnx_ir::{DataType, GraphExt, Model, node, tensor_from_raw, tensor_from_vec, value_info};
use qdq::{Policy, QuantType, Ranges};

use crate::common::*;

/// `(x / scale, E4M3FN's value, E4M3FNUZ's value)`: ties to even, saturation, subnormals, as the ONNX
/// specification defines `QuantizeLinear` (opset 19, `saturate = 1`).
const TABLE: &[(f32, f32, f32)] = &[
    (0.0, 0.0, 0.0),
    (1.0, 1.0, 1.0),
    (-2.5, -2.5, -2.5),
    // Halfway between 1 and 1.125: the even mantissa (1.0); between 1.125 and 1.25: 1.25.
    (1.0625, 1.0, 1.0),
    (1.1875, 1.25, 1.25),
    // Spacing 2 in [16, 32): 17 is halfway, 16 is even.
    (17.0, 16.0, 16.0),
    (240.0, 240.0, 240.0),
    (448.0, 448.0, 240.0),
    // Beyond the largest finite value: saturated (there are no infinities).
    (464.0, 448.0, 240.0),
    (1000.0, 448.0, 240.0),
    (-1e6, -448.0, -240.0),
    // Smallest normals: 2^-6 (FN), 2^-7 (FNUZ); smallest subnormals 2^-9 and 2^-10.
    (0.015625, 0.015625, 0.015625),
    (0.001953125, 0.001953125, 0.001953125),
    (0.0009765625, 0.0, 0.0009765625),
    // Halfway between 0 and FNUZ's smallest subnormal: 0 (even); 3 * 2^-10 is halfway between 2^-9 and 2^-8 in FN.
    (0.00048828125, 0.0, 0.0),
    (0.0029296875, 0.00390625, 0.0029296875),
];

const SCALE: f32 = 0.5;

/// `input_ids` picks values of a table, which go through one float8 pair: `y = DQ(Q(values[input_ids]))`.
fn pair_model(format: QuantType, values: &[f32]) -> Model {
    let n = values.len();
    let mut g = GraphProto { name: Some("pair".into()), ..Default::default() };
    g.input.push(value_info("input_ids", DataType::Int64, Some(&[Ok(1), Ok(n as i64)])));
    g.initializer.push(tensor_from_vec::<f32>("values", &[n], values.to_vec()).unwrap());
    g.initializer.push(tensor_from_vec::<f32>("scale", &[], vec![SCALE]).unwrap());
    let dt = if format == QuantType::Float8E4M3Fn { DataType::Float8e4m3fn } else { DataType::Float8e4m3fnuz };
    g.initializer.push(tensor_from_raw("zero_point", &[], dt, vec![0]).unwrap());
    g.node.push(node("Gather", "pick", &["values", "input_ids"], &["x"]));
    g.node.push(node("QuantizeLinear", "q", &["x", "scale", "zero_point"], &["xq"]));
    g.node.push(node("DequantizeLinear", "dq", &["xq", "scale", "zero_point"], &["y"]));
    g.output.push(value_info("y", DataType::Float, Some(&[Ok(1), Ok(n as i64)])));
    Model::new(ModelProto {
        ir_version: Some(9),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(19) }],
        graph: Some(g),
        ..Default::default()
    })
}

/// ONNX Runtime's float8 pairs give the table's values, and so does calib's model of them (what fp8-mse prices).
#[test]
fn float8_pairs_round_trip_values_as_onnx_runtime_computes_them() {
    let values: Vec<f32> = TABLE.iter().map(|(y, _, _)| y * SCALE).collect();
    let ids = Array2::from_shape_fn((1, values.len()), |(_, j)| j as i64);
    for (format, f8, column) in
        [(QuantType::Float8E4M3Fn, Float8::E4M3Fn, 1), (QuantType::Float8E4M3Fnuz, Float8::E4M3Fnuz, 2)]
    {
        let m = pair_model(format, &values);
        let got = run_feed(&m, &[("input_ids", ids.clone())], &["y"], runtime::OptLevel::Disable).remove(0);
        for (k, ((x, row), ort)) in values.iter().zip(TABLE).zip(got.iter()).enumerate() {
            let want = if column == 1 { row.1 } else { row.2 } * SCALE;
            assert_eq!(*ort, want, "{format}: row {k}, x = {x}: ONNX Runtime");
            assert_eq!(f8.fake_quantize(*x, SCALE), want, "{format}: row {k}, x = {x}: calib::Float8");
        }
    }
}

/// The opset-19 upgrade (reductions' `axes` as inputs) keeps the tiny BERT's logits, in both LayerNorm forms.
#[test]
fn raising_tiny_bert_to_opset_19_keeps_its_logits() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = tiny_bert(ln);
        let mut up = m.clone();
        let done = onnx_ir::upgrade_default_opset(&mut up, 19).unwrap().unwrap();
        assert_eq!(up.opset(""), Some(19));
        if ln == Ln::Decomposed {
            assert!(done.describe().contains("ReduceMean"), "{}", done.describe());
        }
        up.validate().unwrap();
        let (a, b) = (run(&m, &["start_logits"]).remove(0), run(&up, &["start_logits"]).remove(0));
        assert_eq!(a, b, "{ln:?}");
    }
}

/// The tensorrt preset in E4M3FN: every pair float8 with a float8 zero point, Softmax outputs over [0, 1]
/// (unshifted), the model at opset 19, running on ONNX Runtime close to FP32.
#[test]
fn an_fp8_policy_writes_float8_pairs_at_opset_19() {
    for ln in [Ln::Decomposed, Ln::Fused] {
        let m = tiny_bert(ln);
        let mut policy = unsmoothed("tensorrt");
        policy.set("precision", "fp8-e4m3fn").unwrap();
        let tensors = qdq::tensors_to_calibrate(&m, &policy).unwrap();
        let (q, plan) = qdq::quantize(&m, &observed_ranges(&m, &tensors), &policy).unwrap();
        assert_eq!(plan.opset_bump.map(|(_, to)| to), Some(qdq::MIN_FLOAT8_OPSET), "{ln:?}");
        assert!(
            plan.tensors.iter().all(|t| t.qtype == QuantType::Float8E4M3Fn && t.zero_points.iter().all(|z| *z == 0))
        );
        let softmax = plan.tensors.iter().find(|t| t.tensor.contains("Softmax")).expect("a Softmax output pair");
        assert_eq!((softmax.scales[0], softmax.shift), (1.0 / 448.0, None));
        q.validate().unwrap();
        let cov = qdq::coverage(&q);
        assert_eq!(cov.precisions(), format!("{} e4m3fn", plan.pair_count()));
        assert!(cov.float_matmul_like.is_empty(), "{:?}", cov.float_matmul_like);
        let (a, b) = (logits(&m, runtime::OptLevel::All), logits(&q, runtime::OptLevel::Basic));
        let scale = a.iter().fold(0f32, |x, v| x.max(v.abs()));
        assert!(max_abs_diff(&a, &b) < 0.05 * scale, "{ln:?}: {} against {scale}", max_abs_diff(&a, &b));
        // Weights stored as float8 initializers hold exactly what ONNX Runtime's QuantizeLinear makes of the float
        // ones: the same logits, bit for bit, from a model whose weights take a quarter of the bytes.
        policy.set("weights", "int8-initializer").unwrap();
        let (stored, _) = qdq::quantize(&m, &observed_ranges(&m, &tensors), &policy).unwrap();
        let f8 = stored.graph().initializer.iter().filter(|t| t.data_type() == DataType::Float8e4m3fn as i32);
        assert!(f8.filter(|t| t.dims.len() == 2).count() >= 4, "float8 weight initializers");
        assert_eq!(logits(&stored, runtime::OptLevel::Basic), b, "{ln:?}");
        // The options a float8 pair cannot go with are refused, naming them.
        let mut cpu = Policy::preset("cpu").unwrap();
        cpu.set("precision", "fp8-e4m3fnuz").unwrap();
        let e = qdq::plan(&m, &Ranges::new(), &cpu).unwrap_err().to_string();
        assert!(e.contains("contrib_ops") && e.contains("false"), "{e}");
    }
}

fn logits(m: &Model, opt: runtime::OptLevel) -> Vec<f32> {
    run_feed(m, &feed(), &["start_logits"], opt).remove(0).into_iter().collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

const EMB_LN_OUT: &str = "/bert/embeddings/LayerNorm/Add_1_output_0";
const OUTLIER: usize = 3;

/// The tiny BERT whose embedding LayerNorm output has one channel about 60 times the others (its γ and β), as BERT's
/// residual stream has.
fn with_outlier() -> Model {
    let mut m = tiny_bert(Ln::Decomposed);
    let g = m.graph_mut();
    for (name, v) in [("bert.embeddings.LayerNorm.weight", 60.0f32), ("bert.embeddings.LayerNorm.bias", 20.0)] {
        let t = g.initializer(name).unwrap().clone();
        let mut vals = onnx_ir::tensor_to_array::<f32>(&t).unwrap().into_iter().collect::<Vec<_>>();
        vals[OUTLIER] = v;
        g.add_initializer(tensor_from_vec::<f32>(name, &[HIDDEN], vals).unwrap());
    }
    m
}

/// `method`'s range of every tensor in `tensors`, from the values the FP32 model computes on [`feed`].
fn ranges_by(m: &Model, tensors: &[String], method: &Method) -> Ranges {
    let mut probe = m.clone();
    for t in tensors {
        probe.graph_mut().add_output(t, DataType::Float);
    }
    let names: Vec<&str> = tensors.iter().map(String::as_str).collect();
    let outs = run_feed(&probe, &feed(), &names, runtime::OptLevel::Disable);
    let mut state = CalibState::new(CollectOptions::for_methods(std::slice::from_ref(method), 2048));
    for (t, a) in tensors.iter().zip(&outs) {
        state.observe(t, a.as_slice().unwrap(), a.shape()).unwrap();
    }
    calib::compute_ranges(&state, method).unwrap().min_max()
}

/// A planted outlier channel: INT8's one grid must either span it (its mse range does here), leaving the other
/// channels a few levels, or clip it; E4M3FN's fp8-mse range holds it and keeps every value of the tensor within the
/// format's relative step (2^-4, half a mantissa step, above the subnormals).
#[test]
fn a_planted_outlier_channel_that_int8_clips_is_carried_by_fp8() {
    let m = with_outlier();
    let int8 = unsmoothed("tensorrt");
    let mut fp8 = int8.clone();
    fp8.set("precision", "fp8-e4m3fn").unwrap();
    let tensors = qdq::tensors_to_calibrate(&m, &int8).unwrap();
    let reference = run_feed(&probe(&m, EMB_LN_OUT), &feed(), &[EMB_LN_OUT], runtime::OptLevel::Disable).remove(0);
    let x: Vec<f32> = reference.iter().copied().collect();
    let peak = x.iter().skip(OUTLIER).step_by(HIDDEN).fold(0f32, |a, v| a.max(v.abs()));
    let others = x.iter().enumerate().filter(|(i, _)| i % HIDDEN != OUTLIER).fold(0f32, |a, (_, v)| a.max(v.abs()));
    assert!(peak > 20.0 * others, "the planted channel is an outlier: {peak} against {others}");
    // What the readers of the LayerNorm output see, through its pair: the model quantized with `ranges`.
    let seen = |policy: &Policy, ranges: &Ranges| -> Vec<f32> {
        let (q, _) = qdq::quantize(&m, ranges, policy).unwrap();
        let out = qdq::coverage(&q).pairs.into_iter().find(|p| p.tensor == EMB_LN_OUT).unwrap().output;
        run_feed(&probe(&q, &out), &feed(), &[&out], runtime::OptLevel::Disable).remove(0).into_iter().collect()
    };
    let rf = ranges_by(&m, &tensors, &Method::Fp8Mse { format: Float8::E4M3Fn });
    assert!(rf[EMB_LN_OUT].1 >= 0.99 * peak, "FP8 holds the outlier: {:?} against {peak}", rf[EMB_LN_OUT]);
    let step = rf[EMB_LN_OUT].1 / 448.0 * 2f32.powi(-9);
    for (k, (a, b)) in x.iter().zip(seen(&fp8, &rf)).enumerate() {
        assert!((a - b).abs() <= a.abs() / 16.0 + step / 2.0, "FP8 value {k}: {a} -> {b}");
    }
    // INT8 over its mse range (the outlier's): the ordinary channels' mean relative error is many times FP8's.
    let rel = |seen: &[f32], channel: &dyn Fn(usize) -> bool| -> f32 {
        let errs: Vec<f32> = x
            .iter()
            .zip(seen)
            .enumerate()
            .filter(|(i, _)| channel(i % HIDDEN))
            .map(|(_, (a, b))| (a - b).abs() / a.abs().max(1e-3))
            .collect();
        errs.iter().sum::<f32>() / errs.len() as f32
    };
    let ordinary = |c: usize| c != OUTLIER;
    let r8 = ranges_by(&m, &tensors, &Method::Mse);
    let (e8, ef) = (rel(&seen(&int8, &r8), &ordinary), rel(&seen(&fp8, &rf), &ordinary));
    assert!(e8 > 4.0 * ef, "INT8's mean relative error {e8} against FP8's {ef} on the ordinary channels");
    // INT8 over a range that resolves them clips the outlier.
    let mut resolving = r8.clone();
    resolving.insert(EMB_LN_OUT.to_owned(), (-others, others));
    let clipped = seen(&int8, &resolving);
    let worst = x.iter().zip(&clipped).skip(OUTLIER).step_by(HIDDEN).fold(0f32, |a, (x, c)| a.max((x - c).abs()));
    assert!(worst > 0.5 * peak, "INT8 clips the outlier: off by {worst} of {peak}");
}

/// `m` with `tensor` as an output too.
fn probe(m: &Model, tensor: &str) -> Model {
    let mut m = m.clone();
    m.graph_mut().add_output(tensor, DataType::Float);
    m
}
