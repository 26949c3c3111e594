//! [`qdq::shift_output_bias`] on tiny models: a classifier's logits move by exactly the amount asked (FP32 outputs
//! before and after), through the Gemm behind its Identity; heads without a bias of their own are refused and left
//! unchanged.
use crate::common::*;
use onnx_ir::tiny_bert::{Head, TinyBertConfig};
use onnx_ir::{GraphExt, Model, node};

fn classifier(labels: usize) -> Model {
    let cfg = TinyBertConfig { head: Head::Classifier { labels }, ..tiny_config(Ln::Fused) };
    onnx_ir::tiny_bert::build(&cfg)
}

#[test]
fn a_classifiers_logits_move_by_the_shift_given() {
    let mut model = classifier(3);
    let before = run(&model, &["logits"]).remove(0);
    let by = [0.25f32, -0.5, 0.125];
    let bias = qdq::shift_output_bias(&mut model, "logits", &by).unwrap();
    assert_eq!(bias, "classifier.bias");
    let after = run(&model, &["logits"]).remove(0);
    assert_eq!(before.shape(), after.shape());
    for (row_b, row_a) in before.outer_iter().zip(after.outer_iter()) {
        for ((b, a), d) in row_b.iter().zip(row_a.iter()).zip(by) {
            assert!((b - d - a).abs() < 1e-5, "{b} - {d} != {a}");
        }
    }
    assert_eq!(qdq::output_bias_record(&model), Some("logits: -0.2500 +0.5000 -0.1250"));
}

#[test]
fn an_add_bias_is_moved_and_a_second_shift_is_recorded_beside_the_first() {
    let mut model = classifier(2);
    // The head's bias as an Add of its own (an exporter that writes the Gemm without C).
    let g = model.graph_mut();
    let gemm = g.node.iter().position(|n| n.name() == "/classifier/Gemm").unwrap();
    let c = g.node[gemm].input.pop().unwrap();
    let out = std::mem::replace(&mut g.node[gemm].output[0], "mm".into());
    g.insert_nodes(gemm + 1, vec![node("Add", "/classifier/Add", &["mm", &c], &[&out])]);
    let before = run(&model, &["logits"]).remove(0);
    qdq::shift_output_bias(&mut model, "logits", &[1.0, 2.0]).unwrap();
    qdq::shift_output_bias(&mut model, "logits", &[0.5, 0.0]).unwrap();
    let after = run(&model, &["logits"]).remove(0);
    for (b, a) in before.outer_iter().zip(after.outer_iter()) {
        assert!((b[0] - 1.5 - a[0]).abs() < 1e-5 && (b[1] - 2.0 - a[1]).abs() < 1e-5);
    }
    assert_eq!(qdq::output_bias_record(&model), Some("logits: -1.0000 -2.0000; logits: -0.5000 -0.0000"));
}

#[test]
fn an_output_without_a_bias_of_its_own_is_refused_and_the_model_left_alone() {
    // SQuAD's start / end logits come out of Split + Squeeze.
    let mut qa = tiny_bert(Ln::Fused);
    let bytes = qa.to_bytes().unwrap();
    let e = qdq::shift_output_bias(&mut qa, "start_logits", &[0.1]).unwrap_err();
    assert!(e.to_string().contains("output 'start_logits' has no bias to correct: it is written by Squeeze"), "{e}");
    assert_eq!(qa.to_bytes().unwrap(), bytes);
    // Not an output; a count that is not the output's channels.
    let mut model = classifier(2);
    let bytes = model.to_bytes().unwrap();
    let e = qdq::shift_output_bias(&mut model, "classifier.bias", &[0.1, 0.2]).unwrap_err();
    assert!(e.to_string().contains("it is not a graph output"), "{e}");
    let e = qdq::shift_output_bias(&mut model, "logits", &[0.1, 0.2, 0.3]).unwrap_err();
    assert!(e.to_string().contains("has 2 values, not one per channel of the 3 measured"), "{e}");
    // A bias another node reads too.
    model.graph_mut().push_node(node("Identity", "/spy", &["classifier.bias"], &["spy"]));
    let e = qdq::shift_output_bias(&mut model, "logits", &[0.1, 0.2]).unwrap_err();
    assert!(e.to_string().contains("is read by other nodes too"), "{e}");
    model.graph_mut().node.pop();
    assert_eq!(model.to_bytes().unwrap(), bytes);
}

/// `model`'s `logits` passed through a Softmax (`axis` as given, none when `None`): a classifier exported with its
/// Softmax, whose one output holds probabilities.
fn with_softmax(mut model: Model, axis: Option<i64>) -> Model {
    use onnx_ir::NodeExt as _;
    let g = model.graph_mut();
    let last = g.producer_of("logits").unwrap();
    g.node[last].output[0] = "scores".into();
    let softmax = node("Softmax", "/softmax", &["scores"], &["logits"]);
    g.push_node(match axis {
        Some(a) => softmax.with_attr(onnx_ir::attr_int("axis", a)),
        None => softmax,
    });
    model
}

/// A Softmax over the last axis in front of the output: its logits are found behind it and their bias moved, so the
/// log-probabilities move by the shift less one constant per input; over another axis the output is refused.
#[test]
fn probabilities_are_shifted_through_their_softmax_in_log_space() {
    for axis in [Some(-1), Some(1), None] {
        let mut model = with_softmax(classifier(3), axis);
        assert_eq!(qdq::softmax_logits(model.graph(), "logits").as_deref(), Some("scores"), "{axis:?}");
        let before = run(&model, &["logits"]).remove(0);
        let by = [0.25f32, -0.5, 0.125];
        assert_eq!(qdq::shift_output_bias(&mut model, "logits", &by).unwrap(), "classifier.bias");
        let after = run(&model, &["logits"]).remove(0);
        for (b, a) in before.outer_iter().zip(after.outer_iter()) {
            let moved: Vec<f32> = b.iter().zip(a.iter()).map(|(b, a)| a.ln() - b.ln()).collect();
            for (m, d) in moved.iter().zip(by) {
                assert!((m - moved[0] + d - by[0]).abs() < 1e-4, "{axis:?}: {moved:?} against {by:?}");
            }
        }
    }
    let mut model = with_softmax(classifier(2), Some(0));
    assert_eq!(qdq::softmax_logits(model.graph(), "logits"), None);
    let e = qdq::shift_output_bias(&mut model, "logits", &[0.1, 0.2]).unwrap_err();
    assert!(e.to_string().contains("written by Softmax"), "{e}");
}
