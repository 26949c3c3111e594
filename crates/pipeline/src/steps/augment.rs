//! Sessions on a model augmented to read its inner tensors: each an extra float output, or with an observer an
//! `Observe` node handing it over during the run ([`runtime::observe`]); and which rows of an output a batch with
//! filler rows really produced.

use std::sync::Arc;

use onnx_ir::{DataType, GraphExt as _, Model};
use runtime::{Session, SessionConfig};

use crate::error::{Error, Result};

/// The shape of the part of an output that `used` of `fed` batch rows produced: the first axis scaled down when it
/// is a multiple of `fed` (`[batch, ..]`, and `[batch * seq, ..]` of a model that flattens), else the whole output.
pub(crate) fn used_rows(shape: &[usize], used: usize, fed: usize) -> Vec<usize> {
    let mut shape = shape.to_vec();
    if used < fed
        && let Some(d0) = shape.first_mut()
        && *d0 % fed == 0
    {
        *d0 = *d0 / fed * used;
    }
    shape
}

/// The values of `o` that `used` of `fed` batch rows produced ([`used_rows`]).
pub(crate) fn used_data<'a>(o: &'a runtime::OutputRef<'_>, used: usize, fed: usize) -> &'a [f32] {
    &o.data[..used_rows(&o.shape, used, fed).iter().product::<usize>()]
}

/// A session on `model` with `tensors` exposed as float outputs (those already graph outputs stay as they are). The
/// edited copy is dropped before the session is built, so the model is not held twice beside ONNX Runtime's; a model
/// over 2 GiB goes through a temporary file instead, and is not copied in memory at all.
pub(crate) fn session_with_outputs(
    model: &Model,
    tensors: &[&str],
    label: &str,
    cfg: &SessionConfig,
) -> Result<Session> {
    let mut sessions = sessions_with_outputs(model, tensors, label, std::slice::from_ref(cfg))?;
    sessions.pop().ok_or_else(|| Error::Internal(format!("{label}: no session was made")))
}

/// [`session_with_outputs`] once per config in `cfgs`, from one augmented model, the sessions built side by side.
pub(crate) fn sessions_with_outputs(
    model: &Model,
    tensors: &[&str],
    label: &str,
    cfgs: &[SessionConfig],
) -> Result<Vec<Session>> {
    augmented_sessions(model, tensors, label, cfgs, None)
}

/// One session per config on `model` augmented to read `tensors`: each exposed as a float output (those already
/// graph outputs stay as they are), or with `observers` (one per config) an `Observe` node on each, its slot the
/// tensor's index, handing it to that session's observer during the run. The edited copy is dropped before the
/// sessions are built, so the model is not held twice beside ONNX Runtime's; a model over 2 GiB goes through a
/// temporary file instead, and is not copied in memory at all.
pub fn augmented_sessions(
    model: &Model,
    tensors: &[&str],
    label: &str,
    cfgs: &[SessionConfig],
    observers: Option<&[Arc<dyn runtime::Observer>]>,
) -> Result<Vec<Session>> {
    let graph_outputs: Vec<String> = model.graph().output.iter().map(|o| o.name().to_owned()).collect();
    let mut augment = |p: &mut onnx_ir::proto::ModelProto| match observers {
        Some(_) => add_observers(p, tensors),
        None => {
            let g = p.graph.get_or_insert_with(Default::default);
            for t in tensors.iter().filter(|t| !graph_outputs.iter().any(|o| o == *t)) {
                g.add_output(t, DataType::Float);
            }
        }
    };
    let float8 = crate::model::has_float8_pairs(model.graph());
    let open = |i: usize, source: runtime::ModelSource<'_>| -> Result<Session> {
        let cfg = crate::model::session_for(&cfgs[i], float8);
        Ok(match observers.and_then(|o| o.get(i)) {
            Some(o) => Session::open_observed(source, label, &cfg, Arc::clone(o))?,
            None => Session::open(source, label, &cfg)?,
        })
    };
    if model.encoded_len() > onnx_ir::PROTOBUF_LIMIT {
        // Over 2 GiB inline: ONNX Runtime reads the augmented model from a temporary file with the large tensors
        // beside it, written without copying the weights in memory.
        let dir = tempfile::tempdir().map_err(|e| Error::Output {
            path: std::env::temp_dir(),
            reason: format!("{label}: a temporary directory: {e}"),
        })?;
        let path = dir.path().join("augmented.onnx");
        // Gone when the sessions are made (they hold what they need), and on Ctrl-C / SIGTERM before that.
        let _scratch = [dir.path().to_path_buf(), path.clone(), dir.path().join("augmented.onnx.data")]
            .map(|p| files::signals::remove_on_signal(&p));
        let ext = onnx_ir::ExternalDataOptions::new("augmented.onnx.data");
        model.save_edited_with_external_data(&path, &ext, &mut augment)?;
        tracing::debug!("{label}: written to {} with its large tensors beside it", path.display());
        return build_each(cfgs.len(), |i| open(i, runtime::ModelSource::File(&path)));
    }
    // Nothing to read from inside (the model's own outputs only): its bytes as they are, no copy to edit.
    let bytes = if tensors.is_empty() && observers.is_none() {
        model.to_bytes()?
    } else {
        let mut augmented = model.clone();
        augment(&mut augmented.proto);
        augmented.to_bytes()?
    };
    build_each(cfgs.len(), |i| open(i, runtime::ModelSource::Bytes(&bytes)))
}

/// An `Observe` node ([`runtime::observe`]) on each of `tensors`, its slot the tensor's index, its one-value output
/// a graph output (so no optimisation drops it); and the import of the operator's domain. The nodes are listed so that
/// ONNX Runtime runs each right behind its tensor's producer (see the comment inside).
fn add_observers(p: &mut onnx_ir::proto::ModelProto, tensors: &[&str]) {
    use runtime::observe::{OBSERVE_DOMAIN, OBSERVE_OP, OBSERVE_SLOT};
    if !p.opset_import.iter().any(|o| o.domain() == OBSERVE_DOMAIN) {
        p.opset_import
            .push(onnx_ir::proto::OperatorSetIdProto { domain: Some(OBSERVE_DOMAIN.into()), version: Some(1) });
    }
    let g = p.graph.get_or_insert_with(Default::default);
    let mut names = onnx_ir::NameSet::from_graph(g);
    // ONNX Runtime's default execution order is a depth-first walk back from the graph's leaves (nodes whose outputs
    // no node reads), the last-listed leaf first, each node placed once the walk has placed all its inputs. Every
    // Observe is such a leaf: listed in slot order, the first walked observed a late tensor, so the whole model was
    // placed before it and every Observe ran after the model, reading tensors held to the end of the run (seen in ONNX
    // Runtime's profile). Listed latest-produced tensor first, the last-listed Observe is walked first and lands right
    // behind its tensor's producer, the next right behind its own, and so on. (Nodes are in topological order in an
    // ONNX graph; a tensor nothing produces, an input or initializer, counts as produced first.)
    let produced_at: std::collections::HashMap<&str, usize> =
        g.node.iter().enumerate().flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i + 1))).collect();
    let mut order: Vec<(usize, &str)> = tensors.iter().copied().enumerate().collect();
    order.sort_by_key(|&(_, t)| std::cmp::Reverse(produced_at.get(t).copied().unwrap_or(0)));
    let mut observes = Vec::with_capacity(order.len());
    for (slot, t) in order {
        let out = names.fresh(&format!("{t}_observed"));
        let mut node = onnx_ir::node(OBSERVE_OP, &names.fresh(&format!("{t}_observe")), &[t], &[&out]);
        node.domain = Some(OBSERVE_DOMAIN.into());
        node.attribute.push(onnx_ir::attr_int(OBSERVE_SLOT, slot as i64));
        observes.push(node);
        g.add_output(&out, DataType::Float);
    }
    g.node.extend(observes);
}

/// `n` sessions, built in threads of their own when there are several (ONNX Runtime builds a session on one core),
/// in order.
fn build_each(n: usize, build: impl Fn(usize) -> Result<Session> + Sync) -> Result<Vec<Session>> {
    if n == 1 {
        return Ok(vec![build(0)?]);
    }
    let build = &build;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n).map(|i| scope.spawn(move || build(i))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::Internal("building a session panicked".into()))))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::{add_observers, used_rows};

    /// The slots an observer was handed, in the order ONNX Runtime ran their `Observe` nodes.
    #[derive(Default)]
    struct Order(Mutex<Vec<usize>>);

    impl runtime::Observer for Order {
        fn observe(&self, slot: usize, _: &[usize], _: &[f32]) -> std::result::Result<(), String> {
            self.0.lock().map_err(|e| e.to_string())?.push(slot);
            Ok(())
        }
    }

    /// ONNX Runtime runs each `Observe` right behind its tensor's producer, so the nodes run in the order the tensors
    /// are computed, whatever order the slots are in (listed in slot order, they all ran after the model, the last
    /// slot first).
    #[test]
    fn observe_nodes_run_in_the_order_their_tensors_are_computed() {
        let model = onnx_ir::tiny_bert::build(&onnx_ir::tiny_bert::TinyBertConfig::default());
        let computed: Vec<String> = model
            .graph()
            .node
            .iter()
            .filter(|n| matches!(n.op_type(), "MatMul" | "Softmax"))
            .map(|n| n.output[0].clone())
            .collect();
        assert!(computed.len() >= 6, "{computed:?}");
        // Slots in an order unrelated to the graph's: reversed, then the two halves swapped.
        let mut slots: Vec<&str> = computed.iter().rev().map(String::as_str).collect();
        slots.rotate_left(computed.len() / 2);
        let mut proto = model.proto.clone();
        add_observers(&mut proto, &slots);
        let bytes = onnx_ir::Model::new(proto).to_bytes().unwrap();
        let order = Arc::new(Order::default());
        let observer: Arc<dyn runtime::Observer> = order.clone();
        let cfg = runtime::SessionConfig::default();
        let mut s =
            runtime::Session::open_observed(runtime::ModelSource::Bytes(&bytes), "tiny", &cfg, observer).unwrap();
        let ids = ndarray::Array2::from_shape_fn((1, 8), |(_, j)| 5 + j as i64);
        let (mask, segments) = (ndarray::Array2::ones((1, 8)), ndarray::Array2::zeros((1, 8)));
        let feeds = [("input_ids", ids.view()), ("attention_mask", mask.view()), ("token_type_ids", segments.view())];
        s.run_with(&feeds, &[], |_| Ok::<_, runtime::Error>(())).unwrap();
        let ran: Vec<&str> = order.0.lock().unwrap().iter().map(|&slot| slots[slot]).collect();
        assert_eq!(ran, computed, "Observe nodes ran out of the order their tensors are computed in");
    }

    #[test]
    fn filler_rows_are_cut_where_the_batch_leads_the_first_axis() {
        // 3 of 8 rows hold features: [batch, seq, hidden], [batch * seq, hidden] (a model that flattens), and a
        // tensor whose first axis is not the batch's.
        assert_eq!(used_rows(&[8, 5, 4], 3, 8), [3, 5, 4]);
        assert_eq!(used_rows(&[40, 4], 3, 8), [15, 4]);
        assert_eq!(used_rows(&[12, 4], 3, 8), [12, 4]);
        assert_eq!(used_rows(&[], 3, 8), Vec::<usize>::new());
        assert_eq!(used_rows(&[8, 5], 8, 8), [8, 5], "a full batch is whole");
    }
}
