//! Bounded pairs (policy `bounded_pairs`, on in the `cpu` preset): every int8 weight's adjacent values along the axis
//! its MatMul contracts hold `|a| + |b| <= 128` (ONNX Runtime's u8 x s8 kernels on x86 without VNNI add such pairs
//! in a saturating 16-bit sum), in every graph form, weight storage and the dynamic mode, by a wider range rather
//! than by clipping, and with more than reduce_range's 7 bits used.
use crate::common::*;
use ndarray::{Array2, ArrayD, Axis};
use onnx_ir::tiny_bert::GraphForm;
use onnx_ir::{GraphExt, Model, get_attr_int};

fn feed_of(m: &Model) -> Vec<(&'static str, Array2<i64>)> {
    let mut feed = feed();
    if m.graph().input.iter().any(|i| i.name() == "token_type_ids") {
        feed.push(("token_type_ids", Array2::from_shape_fn((1, SEQ), |(_, j)| i64::from(j >= SEQ / 2))));
    }
    feed
}

/// The 2-D float weights of `m` that a MatMul-like node reads as B, with the axis that node contracts (the test's own
/// reading of the ops: `[in, out]` for MatMul and Attention, `[out, in]` for Gemm with `transB`).
fn weights(m: &Model) -> Vec<(String, usize)> {
    let g = m.graph();
    let mut out: Vec<(String, usize)> = vec![];
    for n in &g.node {
        let axis = match n.op_type() {
            "MatMul" | "Attention" => 0,
            "Gemm" if get_attr_int(n, "transB").ok().flatten() == Some(1) => 1,
            "Gemm" => 0,
            _ => continue,
        };
        let Some(w) = n.input.get(1).filter(|w| g.initializer(w).is_some_and(|t| t.dims.len() == 2)) else { continue };
        if !out.iter().any(|(x, _)| x == w) {
            out.push((w.clone(), axis));
        }
    }
    out
}

/// The largest `|a| + |b|` over pairs `(2j, 2j + 1)` along `axis`.
fn max_pair(q: &ArrayD<i32>, axis: usize) -> i32 {
    let mut best = 0;
    for lane in q.lanes(Axis(axis)) {
        for j in (0..lane.len() - 1).step_by(2) {
            best = best.max(lane[j].abs() + lane[j + 1].abs());
        }
    }
    best
}

/// For each weight of `fp32` written as int8 (`<weight>_quantized`) in `q`: its integers and contracted axis.
fn int8_weights(fp32: &Model, q: &Model) -> Vec<(String, ArrayD<i32>, usize)> {
    weights(fp32)
        .into_iter()
        .filter_map(|(w, axis)| {
            let t = q.graph().initializer(&format!("{w}_quantized"))?;
            Some((w, onnx_ir::tensor_to_array::<i8>(t).unwrap().mapv(i32::from), axis))
        })
        .collect()
}

fn quantized(fp32: &Model, policy: &qdq::Policy) -> Model {
    let tensors = qdq::tensors_to_calibrate(fp32, policy).unwrap();
    let ranges = observed_on(fp32, &tensors, &feed_of(fp32), runtime::OptLevel::default());
    qdq::quantize(fp32, &ranges, policy).unwrap().0
}

fn forms() -> Vec<(&'static str, Model)> {
    vec![
        ("hf", tiny_bert(Ln::Decomposed)),
        ("gemm", tiny_form(GraphForm::Gemm, 3)),
        ("ort-fused", tiny_form(GraphForm::OrtFused, 5)),
    ]
}

#[test]
fn int8_weight_pairs_stay_within_128_in_every_form_by_a_wider_range_with_more_than_7_bits() {
    let policy = unsmoothed("cpu");
    assert!(policy.bounded_pairs && !policy.reduce_range, "the cpu preset bounds pairs at 8 bits");
    let mut plain = policy.clone();
    plain.set("bounded_pairs", "false").unwrap();
    let (mut over_without, mut wide) = (0, 0);
    for (form, fp32) in forms() {
        let mut models = vec![("static", quantized(&fp32, &policy), quantized(&fp32, &plain))];
        if form == "hf" {
            let dynamic = |p: &qdq::Policy| qdq::quantize_dynamic(&fp32, p).unwrap().0;
            models.push(("dynamic", dynamic(&policy), dynamic(&plain)));
        }
        for (mode, bounded, unbounded) in models {
            let ints = int8_weights(&fp32, &bounded);
            assert!(ints.len() >= 6, "{form} {mode}: {} int8 weights", ints.len());
            for (w, q, axis) in &ints {
                assert!(max_pair(q, *axis) <= 128, "{form} {mode} {w}: pair sum {}", max_pair(q, *axis));
                // The range was widened, not the values clipped: each integer is round(w / scale) of its column.
                let scale =
                    onnx_ir::tensor_to_array::<f32>(bounded.graph().initializer(&format!("{w}_scale")).unwrap())
                        .unwrap();
                let f = onnx_ir::tensor_to_array::<f32>(fp32.graph().initializer(w).unwrap()).unwrap();
                for ((ix, &v), &qi) in f.indexed_iter().zip(q.iter()) {
                    let s = if scale.len() == 1 { scale[[]] } else { scale[ix[1 - *axis]] };
                    assert_eq!((v / s).round_ties_even() as i32, qi, "{form} {mode} {w}{:?}", ix);
                }
                wide += usize::from(q.iter().any(|v| v.abs() > 64));
            }
            for (_, q, axis) in int8_weights(&fp32, &unbounded) {
                over_without += usize::from(max_pair(&q, axis) > 128);
            }
        }
    }
    assert!(over_without > 0, "plain 8-bit weights of these models never exceed the limit: the test shows nothing");
    assert!(wide > 0, "no weight uses more than 7 bits");
}

/// Weights kept in float behind their pair (`weights = qdq_pair`): the float values lie on the bounded grid, so the
/// pair's QuantizeLinear gives integers within the limit whatever the runtime.
#[test]
fn float_weights_behind_their_pairs_lie_on_the_bounded_grid() {
    let mut policy = unsmoothed("ort-compatible");
    policy.set("bounded_pairs", "true").unwrap();
    let fp32 = tiny_bert(Ln::Decomposed);
    let q = quantized(&fp32, &policy);
    let mut checked = 0;
    for (w, axis) in weights(&fp32) {
        let Some(scale) = q.graph().initializer(&format!("{w}_scale")) else { continue };
        let scale = onnx_ir::tensor_to_array::<f32>(scale).unwrap();
        let v = onnx_ir::tensor_to_array::<f32>(q.graph().initializer(&w).unwrap()).unwrap();
        let ints = ArrayD::from_shape_fn(v.raw_dim(), |ix| {
            let s = if scale.len() == 1 { scale[[]] } else { scale[ix[1 - axis]] };
            let x = v[&ix] / s;
            assert!((x - x.round()).abs() < 1e-3, "{w}{:?}: {x} is not on the grid", ix);
            x.round() as i32
        });
        assert!(max_pair(&ints, axis) <= 128, "{w}: pair sum {}", max_pair(&ints, axis));
        checked += 1;
    }
    assert!(checked >= 6, "{checked} weights checked");
}
