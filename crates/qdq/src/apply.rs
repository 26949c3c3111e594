//! Application: [`Plan::apply`] inserts the planned initializers and Q/DQ nodes and rewires the readers.

use onnx_ir::proto::{GraphProto, NodeProto, TensorProto};
use onnx_ir::{GraphExt, Model, NameSet, NodeExt, attr_int, node};

use crate::error::{Error, Result};
use crate::plan::{Plan, PlannedTensor};
use crate::scale::QuantType;
use crate::shift;
use crate::types::Consumer;

/// Nodes to insert before a node index; applied from the back so indices stay valid.
type Inserts = Vec<(usize, Vec<NodeProto>)>;
/// MatMuls reading a shifted pair, with the shift constant's name: corrected once every pair is wired.
type Shifts = Vec<(Vec<Consumer>, String)>;

fn zero_point_tensor(name: &str, qtype: QuantType, zps: &[i32], shape: &[usize]) -> Result<TensorProto> {
    // Zero points are produced inside the integer range, so the narrowing casts are exact.
    Ok(match qtype {
        QuantType::Int8 => onnx_ir::tensor_from_vec::<i8>(name, shape, zps.iter().map(|&z| z as i8).collect())?,
        QuantType::UInt8 => onnx_ir::tensor_from_vec::<u8>(name, shape, zps.iter().map(|&z| z as u8).collect())?,
        QuantType::Int16 => onnx_ir::tensor_from_vec::<i16>(name, shape, zps.iter().map(|&z| z as i16).collect())?,
        // 0.0 is the byte 0 in both E4M3 formats (and every float8 zero point qdq writes is 0.0).
        QuantType::Float8E4M3Fn | QuantType::Float8E4M3Fnuz => {
            onnx_ir::tensor_from_raw(name, shape, qtype.data_type(), vec![0; zps.len()])?
        }
    })
}

fn quantized_weight(name: &str, w: &TensorProto, p: &PlannedTensor) -> Result<TensorProto> {
    let scales = if p.axis.is_some() { &p.scales[..] } else { &p.scales[..1] };
    let range = p.qtype.range(true, p.reduce_range);
    crate::scale::quantized_along(name, w, scales, p.axis.unwrap_or(0), p.qtype, range, &p.pair_axes)
}

/// A weight kept in float behind its pair (`weights = qdq_pair`) whose pairs are bounded: its values become the
/// bounded integers times their scales, which the pair's QuantizeLinear maps back to exactly those integers.
fn snap_weight(g: &mut GraphProto, t: &PlannedTensor) -> Result<()> {
    let name = &t.tensor;
    let w = g.initializer(name).ok_or_else(|| Error::Missing { name: name.to_string(), what: "initializer" })?;
    let q = onnx_ir::tensor_to_array::<i8>(&quantized_weight(name, w, t)?)?;
    let dims = q.shape().to_vec();
    let stride: usize = t.axis.map_or(1, |a| dims[a + 1..].iter().product());
    let scale = |k: usize| t.axis.map_or(t.scales[0], |a| t.scales[(k / stride.max(1)) % dims[a]]);
    let values = q.iter().enumerate().map(|(k, &v)| f32::from(v) * scale(k)).collect();
    g.add_initializer(onnx_ir::tensor_from_vec::<f32>(name, &dims, values)?);
    Ok(())
}

fn with_axis(n: NodeProto, axis: Option<usize>) -> NodeProto {
    match axis {
        Some(a) => n.with_attr(attr_int("axis", a as i64)),
        None => n,
    }
}

impl Plan {
    /// Inserts the planned nodes and initializers into `model` (the model the plan was made for).
    ///
    /// On error the model may be partly edited; callers that need atomicity apply to a clone.
    pub fn apply(&self, model: &mut Model) -> Result<()> {
        self.check_matches(model)?;
        let g = model.graph_mut();
        let mut names = NameSet::from_graph(g);
        let (mut inserts, mut shifts) = (Inserts::new(), Shifts::new());
        // Embeddings first: they edit nodes by the plan's indices and add no node before any other insert point.
        inserts.extend(crate::embedding::apply_tables(g, &mut names, &self.embeddings)?);
        for t in &self.tensors {
            insert_pairs(g, &mut names, t, &mut inserts, &mut shifts)?;
        }
        inserts.extend(crate::bias::apply_biases(g, &mut names, &self.biases)?);
        let resort = !shifts.is_empty() || !self.embeddings.is_empty();
        if !shifts.is_empty() {
            shift::correct(g, &mut names, shifts, &mut inserts)?;
        }
        inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, nodes) in inserts {
            g.insert_nodes(at, nodes);
        }
        crate::contrib::rewrite(g, &mut names, &self.contrib)?;
        let folded = if self.fold_outlier_masks { crate::outliers::fold_masks(g)? } else { 0 };
        if resort {
            // A correction (or an embedding's DequantizeLinear) and the pair of the next reader can share an insertion
            // index; whichever order they landed in, sorting makes it topological.
            g.sort_nodes()?;
        }
        let edited = !self.embeddings.is_empty() || !self.contrib.is_empty() || folded > 0;
        if self.tensors.iter().any(|t| t.int8_initializer) || edited {
            g.remove_unused_initializers();
        }
        if !self.contrib.is_empty() {
            import_domain(model, crate::contrib::MS_DOMAIN, 1);
        }
        // Last: the upgrade may add nodes, and everything above edits by the plan's node indices.
        if let Some((_, to)) = self.opset_bump {
            onnx_ir::upgrade_default_opset(model, to)?;
        }
        // The attention probabilities computed in place by ONNX Runtime (docs/QUANTIZATION.md, "What decides CPU speed").
        onnx_ir::annotate_shape_preserving(model.graph_mut());
        Ok(())
    }

    /// The model has the node count and every planned reader the plan was made for.
    fn check_matches(&self, model: &Model) -> Result<()> {
        let nodes = &model.graph().node;
        if nodes.len() != self.node_count {
            return Err(Error::PlanMismatch {
                reason: format!("plan made for {} nodes, model has {}", self.node_count, nodes.len()),
            });
        }
        for t in &self.tensors {
            for c in t.pairs.iter().flatten() {
                let ok = nodes
                    .get(c.node)
                    .is_some_and(|n| n.name() == c.node_name && n.input.get(c.slot).is_some_and(|i| *i == t.tensor));
                if !ok {
                    return Err(Error::PlanMismatch {
                        reason: format!("input {} of node '{}' is not '{}'", c.slot, c.node_name, t.tensor),
                    });
                }
            }
        }
        for b in &self.biases {
            let ok =
                nodes.get(b.gemm.node).is_some_and(|n| n.name() == b.gemm.node_name && n.input.get(2) == Some(&b.bias));
            if !ok {
                let reason = format!("input 2 of node '{}' is not the bias '{}'", b.gemm.node_name, b.bias);
                return Err(Error::PlanMismatch { reason });
            }
        }
        for e in &self.embeddings {
            for c in &e.gathers {
                let ok = nodes
                    .get(c.node)
                    .is_some_and(|n| n.name() == c.node_name && n.input.first().is_some_and(|i| *i == e.table));
                if !ok {
                    let reason = format!("input 0 of node '{}' is not the table '{}'", c.node_name, e.table);
                    return Err(Error::PlanMismatch { reason });
                }
            }
        }
        Ok(())
    }
}

/// Declares operator set `domain` (at `version`) unless the model already imports it: a model using an op of a
/// domain it does not import is invalid ONNX (ONNX Runtime runs it, `onnx.checker` and shape inference refuse it).
pub(crate) fn import_domain(model: &mut Model, domain: &str, version: i64) {
    let p = &mut model.proto;
    if !p.opset_import.iter().any(|o| o.domain() == domain) {
        p.opset_import.push(onnx_ir::proto::OperatorSetIdProto { domain: Some(domain.into()), version: Some(version) });
    }
}

/// One tensor's scale / zero-point initializers (and int8 weight), then each of its pairs.
fn insert_pairs(
    g: &mut GraphProto,
    names: &mut NameSet,
    t: &PlannedTensor,
    inserts: &mut Inserts,
    shifts: &mut Shifts,
) -> Result<()> {
    let name = &t.tensor;
    let shape: Vec<usize> = if t.axis.is_some() { vec![t.scales.len()] } else { vec![] };
    let scale = names.fresh(&format!("{name}_scale"));
    let zp = names.fresh(&format!("{name}_zero_point"));
    g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&scale, &shape, t.scales.clone())?);
    g.add_initializer(zero_point_tensor(&zp, t.qtype, &t.zero_points, &shape)?);
    let int8_weight = if t.int8_initializer {
        let w = g.initializer(name).ok_or_else(|| Error::Missing { name: name.to_string(), what: "initializer" })?;
        let qname = names.fresh(&format!("{name}_quantized"));
        let qw = quantized_weight(&qname, w, t)?;
        g.add_initializer(qw);
        Some(qname)
    } else {
        if !t.pair_axes.is_empty() {
            snap_weight(g, t)?;
        }
        None
    };
    let many = t.pairs.len() > 1;
    for (k, pair) in t.pairs.iter().enumerate() {
        let sfx = if many { format!("_{}", k + 1) } else { String::new() };
        let dq_out = names.fresh(&format!("{name}_DequantizeLinear_Output{sfx}"));
        let dq_name = names.fresh(&format!("{name}_DequantizeLinear{sfx}"));
        let mut nodes = vec![];
        let dq_in = match &int8_weight {
            Some(q) => q.clone(),
            None => quantize_node(g, names, t, &sfx, (&scale, &zp), pair, &mut nodes, shifts)?,
        };
        nodes.push(with_axis(node("DequantizeLinear", &dq_name, &[&dq_in, &scale, &zp], &[&dq_out]), t.axis));
        for c in pair {
            g.rewire_input(c.node, c.slot, &dq_out)?;
        }
        let at = pair.iter().map(|c| c.node).min().unwrap_or(g.node.len());
        inserts.push((at, nodes));
    }
    Ok(())
}

/// The QuantizeLinear of one pair (behind the shift's `Sub` for a shifted pair); returns its output.
#[allow(clippy::too_many_arguments)]
fn quantize_node(
    g: &mut GraphProto,
    names: &mut NameSet,
    t: &PlannedTensor,
    sfx: &str,
    (scale, zp): (&str, &str),
    pair: &[Consumer],
    nodes: &mut Vec<NodeProto>,
    shifts: &mut Shifts,
) -> Result<String> {
    let name = &t.tensor;
    let q_out = names.fresh(&format!("{name}_QuantizeLinear_Output{sfx}"));
    let q_name = names.fresh(&format!("{name}_QuantizeLinear{sfx}"));
    let q_in = match t.shift {
        Some(c) => {
            let (shifted, cname) = shift::shift_node(g, names, name, sfx, c, nodes)?;
            shifts.push((pair.to_vec(), cname));
            shifted
        }
        None => name.clone(),
    };
    nodes.push(with_axis(node("QuantizeLinear", &q_name, &[&q_in, scale, zp], &[&q_out]), t.axis));
    Ok(q_out)
}
