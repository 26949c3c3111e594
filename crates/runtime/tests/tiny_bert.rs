//! onnx-ir's tiny BERT runs in ONNX Runtime (both LayerNorm forms), padding is masked out, and a graph edited with
//! onnx-ir (a node inserted, a consumer rewired) still runs with the same outputs.

use ndarray::{Array2, ArrayD};
use onnx_ir::tiny_bert::{LayerNormKind, TinyBertConfig, build};
use onnx_ir::{GraphExt as _, Model, NodeExt as _, node};
use qdq_runtime::{OptLevel, Session, SessionConfig};

const SEQ: usize = 10;

fn inputs(rows: usize, len: usize, real: usize) -> [Array2<i64>; 3] {
    let ids = Array2::from_shape_fn((rows, len), |(_, j)| if j < real { ((j * 53 + 7) % 1000) as i64 } else { 0 });
    let mask = Array2::from_shape_fn((rows, len), |(_, j)| i64::from(j < real));
    let types = Array2::from_shape_fn((rows, len), |(_, j)| i64::from(j >= real / 2 && j < real));
    [ids, mask, types]
}

fn run(model: &Model, x: &[Array2<i64>; 3]) -> Vec<ArrayD<f32>> {
    let cfg = SessionConfig { opt_level: OptLevel::Disable, ..Default::default() };
    let mut s = Session::from_bytes(&model.to_bytes().unwrap(), "tiny_bert.onnx", &cfg).unwrap();
    let names: Vec<&str> = s.inputs().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["input_ids", "attention_mask", "token_type_ids"]);
    s.run(
        &[("input_ids", x[0].view()), ("attention_mask", x[1].view()), ("token_type_ids", x[2].view())],
        &["start_logits", "end_logits"],
    )
    .unwrap()
}

#[test]
fn tiny_bert_runs_in_both_layer_norm_forms_and_masks_padding() {
    for kind in [LayerNormKind::Decomposed, LayerNormKind::Fused] {
        let model = build(&TinyBertConfig { layer_norm: kind, ..Default::default() });
        let expected_opset = if kind == LayerNormKind::Fused { 17 } else { 14 };
        assert_eq!(model.opset(""), Some(expected_opset));
        let out = run(&model, &inputs(1, SEQ, SEQ));
        assert_eq!(out.len(), 2);
        for o in &out {
            assert_eq!(o.shape(), [1, SEQ], "{kind:?}");
            assert!(o.iter().all(|v| v.is_finite()), "{kind:?}");
        }
        assert_ne!(out[0], out[1], "{kind:?}: start and end heads must differ");
        let spread = out[0].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
            - out[0].iter().fold(f32::INFINITY, |m, &v| m.min(v));
        assert!(spread > 1e-4, "{kind:?}: constant logits");

        // The same sequence padded to 2*SEQ: the real positions must not see the padding.
        let padded = run(&model, &inputs(2, 2 * SEQ, SEQ));
        for (a, b) in out.iter().zip(&padded) {
            for row in 0..2 {
                for j in 0..SEQ {
                    let (x, y) = (a[[0, j]], b[[row, j]]);
                    assert!((x - y).abs() <= 1e-4 * (1.0 + x.abs()), "{kind:?} row {row} pos {j}: {x} vs {y}");
                }
            }
        }
    }
}

#[test]
fn an_edited_graph_runs_with_the_same_outputs() {
    let model = build(&TinyBertConfig::default());
    let x = inputs(2, SEQ, SEQ - 3);
    let before = run(&model, &x);

    // Insert an Identity in front of every reader of the first MatMul's output.
    let mut edited = model.clone();
    let g = edited.graph_mut();
    let (pos, tensor) = g
        .node
        .iter()
        .enumerate()
        .find(|(_, n)| n.op_type() == "MatMul")
        .map(|(i, n)| (i, n.output[0].clone()))
        .unwrap();
    let readers = g.consumers_of(&tensor);
    assert!(!readers.is_empty());
    let copy = g.fresh_name(&format!("{tensor}_copy"));
    g.insert_nodes(pos + 1, vec![node("Identity", &g.fresh_name("inserted_identity"), &[&tensor], &[&copy])]);
    for (reader, slot) in g.consumers_of(&tensor).into_iter().filter(|(n, _)| *n != pos + 1) {
        g.rewire_input(reader, slot, &copy).unwrap();
    }
    g.validate().unwrap();
    assert_eq!(edited.graph().node.len(), model.graph().node.len() + 1);

    // Through bytes and back, as a saved model would be.
    let reloaded = Model::from_bytes(&edited.to_bytes().unwrap(), "edited.onnx").unwrap();
    assert!(reloaded.graph().node.iter().any(|n| n.op_type() == "Identity" && n.output[0] == copy));
    let after = run(&reloaded, &x);
    assert_eq!(before, after);
}

#[test]
fn inputs_named_for_zeros_are_fed_zeros_of_their_declared_shape_when_not_given() {
    use onnx_ir::{DataType, value_info};
    let mut model = build(&TinyBertConfig::default());
    let g = model.graph_mut();
    // A `unique_ids` the model only copies to an output (ONNX Model Zoo BERT-Squad), and a float [batch, seq, 3] one.
    g.input.insert(0, value_info("unique_ids", DataType::Int64, Some(&[Err("n")])));
    g.input.push(value_info("extra", DataType::Float, Some(&[Err("n"), Err("s"), Ok(3)])));
    g.push_node(node("Identity", "pass_ids", &["unique_ids"], &["unique_ids_out"]));
    g.push_node(node("ReduceSum", "sum_extra", &["extra"], &["extra_sum"]));
    g.output.push(value_info("unique_ids_out", DataType::Int64, None));
    g.output.push(value_info("extra_sum", DataType::Float, None));
    let x = inputs(2, SEQ, SEQ);
    let given = [("input_ids", x[0].view()), ("attention_mask", x[1].view()), ("token_type_ids", x[2].view())];
    let cfg = SessionConfig { opt_level: OptLevel::Disable, ..Default::default() };
    let mut s = Session::from_bytes(&model.to_bytes().unwrap(), "m.onnx", &cfg).unwrap();
    let err = s.run(&given, &["start_logits"]).unwrap_err().to_string();
    assert!(err.contains("needs input `unique_ids`"), "{err}");
    let err = s.feed_zeros(&["nope".into()]).unwrap_err().to_string();
    assert!(err.contains("`nope`") && err.contains("no such input") && err.contains("unique_ids, input_ids"), "{err}");
    s.feed_zeros(&["unique_ids".into(), "extra".into()]).unwrap();
    let out = s.run(&given, &["start_logits", "extra_sum"]).unwrap();
    assert_eq!(out[0].shape(), [2, SEQ]);
    assert_eq!(out[1].iter().copied().collect::<Vec<_>>(), [0.0], "a [2, {SEQ}, 3] array of zeros");
    assert_eq!(out[0], run(&build(&TinyBertConfig::default()), &x)[0], "the logits are the plain model's");

    // A dynamic dimension past the sequence axis cannot be guessed.
    let mut odd = model.clone();
    odd.graph_mut().input.last_mut().unwrap().clone_from(&value_info(
        "extra",
        DataType::Float,
        Some(&[Err("n"), Ok(1), Err("k")]),
    ));
    let mut s = Session::from_bytes(&odd.to_bytes().unwrap(), "odd.onnx", &cfg).unwrap();
    let err = s.feed_zeros(&["extra".into()]).unwrap_err().to_string();
    assert!(err.contains("input `extra`") && err.contains("dimension 2"), "{err}");
}

/// Exports take the mask as float32 (multiplied in directly) or bool, the ids as int32: each is fed the int64 rows
/// converted, and the logits are the int64 model's.
#[test]
fn inputs_declared_float_bool_or_int32_are_fed_the_rows_converted() {
    use onnx_ir::{DataType, attr_int, value_info};
    let plain = build(&TinyBertConfig::default());
    let x = inputs(2, SEQ, SEQ - 3);
    let want = run(&plain, &x);
    let given = [("input_ids", x[0].view()), ("attention_mask", x[1].view()), ("token_type_ids", x[2].view())];
    let cfg = SessionConfig { opt_level: OptLevel::Disable, ..Default::default() };
    for (input, dt) in [
        ("attention_mask", DataType::Float),
        ("attention_mask", DataType::Float16),
        ("attention_mask", DataType::Bool),
        ("input_ids", DataType::Int32),
    ] {
        let mut m = plain.clone();
        let g = m.graph_mut();
        let inner = format!("{input}_int64");
        for n in &mut g.node {
            n.input.iter_mut().filter(|i| *i == input).for_each(|i| i.clone_from(&inner));
        }
        g.node
            .insert(0, node("Cast", "cast_in", &[input], &[&inner]).with_attr(attr_int("to", DataType::Int64 as i64)));
        let v = g.input.iter_mut().find(|v| v.name() == input).unwrap();
        *v = value_info(input, dt, Some(&[Err("batch"), Err("seq")]));
        let mut s = Session::from_bytes(&m.to_bytes().unwrap(), "m.onnx", &cfg).unwrap();
        let got = s.run(&given, &["start_logits", "end_logits"]).unwrap();
        assert_eq!(got, want, "{input} declared {dt:?}");
    }
}

/// A profiled session's file sums up per operator type: tiny BERT's unoptimised graph has its MatMuls (two heads'
/// worth of projections per layer and the QA head), Softmax per layer; the counted runs are those after the skipped.
#[test]
fn a_profiled_session_reports_kernel_time_per_operator_type() {
    let model = build(&TinyBertConfig::default());
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        SessionConfig { opt_level: OptLevel::Disable, profile: Some(dir.path().join("tiny")), ..Default::default() };
    let mut s = Session::from_bytes(&model.to_bytes().unwrap(), "tiny_bert.onnx", &cfg).unwrap();
    let x = inputs(2, SEQ, SEQ);
    for _ in 0..4 {
        s.run(
            &[("input_ids", x[0].view()), ("attention_mask", x[1].view()), ("token_type_ids", x[2].view())],
            &["start_logits", "end_logits"],
        )
        .unwrap();
    }
    let file = s.end_profiling().unwrap();
    assert!(file.starts_with(dir.path()), "{}", file.display());
    let t = qdq_runtime::OpTimes::read(&file, 1).unwrap();
    assert_eq!(t.runs, 3);
    let nodes = |op: &str| t.ops.iter().find(|o| o.op == op).map_or(0, |o| o.nodes);
    let graph_nodes = |op: &str| model.graph().node.iter().filter(|n| n.op_type() == op).count();
    for op in ["MatMul", "Softmax", "Gather"] {
        assert!(graph_nodes(op) > 0, "{op}");
        assert_eq!(nodes(op), graph_nodes(op), "{op}: {:?}", t.ops);
    }
    assert!(t.ops.iter().all(|o| o.micros >= 0.0 && o.provider == "CPUExecutionProvider"), "{:?}", t.ops);
    assert!(t.kernel_micros() > 0.0 && t.kernel_micros() <= t.run_micros, "{t:?}");
    // A session made without a profile has none to end.
    let mut plain =
        Session::from_bytes(&model.to_bytes().unwrap(), "tiny_bert.onnx", &SessionConfig::default()).unwrap();
    assert!(plain.end_profiling().is_err());
}
