//! The `Observe` operator hands its input to the session's observer during the run: the values a session exposing
//! the same tensors as outputs returns (float16 widened), and an observer's error fails the run with its message.

use std::sync::{Arc, Mutex};

use ndarray::Array2;
use onnx_ir::tiny_bert::{TinyBertConfig, build};
use onnx_ir::{DataType, GraphExt as _, Model, attr_int, node};
use qdq_runtime::observe::{OBSERVE_DOMAIN, OBSERVE_OP, OBSERVE_SLOT};
use qdq_runtime::{ModelSource, Observer, Session, SessionConfig};

/// One call: slot, shape and values.
type Call = (usize, Vec<usize>, Vec<f32>);

/// What an observer saw, in the order it saw it; fails on `fail_slot`.
#[derive(Default)]
struct Seen {
    seen: Mutex<Vec<Call>>,
    fail_slot: Option<usize>,
}

impl Observer for Seen {
    fn observe(&self, slot: usize, shape: &[usize], data: &[f32]) -> Result<(), String> {
        if self.fail_slot == Some(slot) {
            return Err(format!("slot {slot} refused"));
        }
        self.seen.lock().unwrap().push((slot, shape.to_vec(), data.to_vec()));
        Ok(())
    }
}

fn inputs() -> [Array2<i64>; 3] {
    let ids = Array2::from_shape_fn((2, 8), |(i, j)| ((i * 31 + j * 53 + 7) % 1000) as i64);
    let mask = Array2::from_shape_fn((2, 8), |(i, j)| i64::from(j < 8 - 3 * i));
    [ids, mask, Array2::zeros((2, 8))]
}

fn feeds(x: &[Array2<i64>; 3]) -> [(&'static str, ndarray::ArrayView2<'_, i64>); 3] {
    [("input_ids", x[0].view()), ("attention_mask", x[1].view()), ("token_type_ids", x[2].view())]
}

/// The tiny BERT with an `Observe` node on each of `tensors` (slot = index).
fn observed(model: &Model, tensors: &[&str]) -> Model {
    let mut m = model.clone();
    m.proto
        .opset_import
        .push(onnx_ir::proto::OperatorSetIdProto { domain: Some(OBSERVE_DOMAIN.into()), version: Some(1) });
    let g = m.graph_mut();
    for (slot, t) in tensors.iter().enumerate() {
        let out = format!("{t}_observed");
        let mut n = node(OBSERVE_OP, &format!("{t}_observe"), &[t], &[&out]);
        n.domain = Some(OBSERVE_DOMAIN.into());
        n.attribute.push(attr_int(OBSERVE_SLOT, slot as i64));
        g.node.push(n);
        g.add_output(&out, DataType::Float);
    }
    m
}

#[test]
fn an_observe_node_hands_the_observer_what_an_exposed_output_returns() {
    let mut model = build(&TinyBertConfig::default());
    // A float16 tensor too: the first LayerNorm's output cast down.
    let g = model.graph_mut();
    let ln = g.node.iter().find(|n| n.op_type() == "LayerNormalization" || n.name().contains("LayerNorm")).unwrap();
    let ln_out = ln.output[0].clone();
    let mut cast = node("Cast", "to_half", &[&ln_out], &["ln_half"]);
    cast.attribute.push(attr_int("to", DataType::Float16 as i64));
    g.node.push(cast);
    let matmuls: Vec<String> =
        g.node.iter().filter(|n| n.op_type() == "MatMul").take(3).map(|n| n.output[0].clone()).collect();
    let mut tensors: Vec<&str> = matmuls.iter().map(String::as_str).collect();
    tensors.push("ln_half");
    let x = inputs();

    // Exposed as outputs, with optimisation off: the reference values.
    let mut exposed = model.clone();
    for t in &tensors {
        let ty = if *t == "ln_half" { DataType::Float16 } else { DataType::Float };
        exposed.graph_mut().add_output(t, ty);
    }
    let plain = SessionConfig { opt_level: qdq_runtime::OptLevel::Disable, ..Default::default() };
    let mut s = Session::from_bytes(&exposed.to_bytes().unwrap(), "exposed", &plain).unwrap();
    let want = s.run(&feeds(&x), &tensors).unwrap();

    // Observed, with ONNX Runtime's full optimisation: the same values, handed over during the run.
    let seen = Arc::new(Seen::default());
    let bytes = observed(&model, &tensors).to_bytes().unwrap();
    let mut s = Session::open_observed(ModelSource::Bytes(&bytes), "observed", &SessionConfig::default(), seen.clone())
        .unwrap();
    s.run_with(&feeds(&x), &[], |_| Ok::<_, qdq_runtime::Error>(())).unwrap();
    let mut got = std::mem::take(&mut *seen.seen.lock().unwrap());
    got.sort_by_key(|(slot, ..)| *slot);
    assert_eq!(got.len(), tensors.len(), "one call per Observe node");
    for ((slot, shape, data), w) in got.iter().zip(&want) {
        assert_eq!(shape.as_slice(), w.shape(), "{}", tensors[*slot]);
        let close = data.iter().zip(w.iter()).all(|(a, b)| (a - b).abs() <= 1e-5 * (1.0 + b.abs()));
        assert!(close, "{}: observed values differ from the exposed output's", tensors[*slot]);
    }

    // An observer's error fails the run and its message reaches the caller.
    let refusing = Arc::new(Seen { fail_slot: Some(1), ..Default::default() });
    let mut s =
        Session::open_observed(ModelSource::Bytes(&bytes), "observed", &SessionConfig::default(), refusing).unwrap();
    let e = s.run_with(&feeds(&x), &[], |_| Ok::<_, qdq_runtime::Error>(())).unwrap_err().to_string();
    assert!(e.contains("slot 1 refused"), "{e}");
}
