//! Choosing where Q/DQ pairs go ([`plan`]) and inserting them ([`Plan::apply`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use onnx_ir::proto::{GraphProto, NodeProto, TensorProto};
use onnx_ir::{DataType, GraphExt, Model, NameSet, NodeExt, attr_int, node};

use crate::error::{Error, Result};
use crate::policy::{Policy, ResidualAdd, SoftmaxRange, WeightStorage};
use crate::scale::{QuantSpec, QuantType, ScaleZp, compute_scale_zp, quantize_value};

/// Lowest default-domain opset with per-channel (`axis`) QuantizeLinear / DequantizeLinear.
pub const MIN_QDQ_OPSET: i64 = 13;

/// Ranges table: tensor name -> (min, max).
pub type Ranges = BTreeMap<String, (f32, f32)>;

/// What kind of tensor a pair quantizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    /// A tensor computed at run time; scale from its calibration range.
    Activation,
    /// A constant MatMul input; scale from its values.
    Weight,
    /// Another constant (e.g. an Add operand); quantized like an activation, range from its values.
    Constant,
}

/// One node input that will read a dequantized tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// Index of the node in `graph.node` of the planned model.
    pub node: usize,
    /// Node name (for display and checks).
    pub node_name: String,
    /// Input slot.
    pub slot: usize,
}

/// Q/DQ insertion for one tensor.
#[derive(Debug, Clone)]
pub struct PlannedTensor {
    /// Tensor that is quantized.
    pub tensor: String,
    /// Activation, weight or other constant.
    pub kind: TensorKind,
    /// Integer type.
    pub qtype: QuantType,
    /// One scale (per-tensor) or one per channel.
    pub scales: Vec<f32>,
    /// Zero points, same length as `scales`.
    pub zero_points: Vec<i32>,
    /// Channel axis for per-channel quantization.
    pub axis: Option<usize>,
    /// Weight stored as int8 initializer (+ DQ only) instead of FP32 + Q + DQ.
    pub int8_initializer: bool,
    /// Weight quantized to the 7-bit range.
    pub reduce_range: bool,
    /// One entry per Q/DQ pair: the inputs that read that pair's DQ output.
    pub pairs: Vec<Vec<Consumer>>,
    /// `Some(c)`: the pair quantizes `tensor - c` (shifted Softmax output); each reading MatMul's output gets
    /// `c · Σ_k B[.., k, :]` added back (see [`SoftmaxRange::Shifted`]).
    pub shift: Option<f32>,
}

/// Offset subtracted from Softmax outputs under [`SoftmaxRange::Shifted`].
pub const SOFTMAX_SHIFT: f32 = 0.5;

/// A tensor the policy wanted to quantize but that was left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Tensor name.
    pub tensor: String,
    /// Why.
    pub reason: String,
}

/// What [`Plan::apply`] will insert where.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Tensors that get Q/DQ, in the order they were first met.
    pub tensors: Vec<PlannedTensor>,
    /// Tensors left in float, with reasons.
    pub skipped: Vec<Skipped>,
    /// `Some((from, to))` if the default-domain opset will be raised.
    pub opset_bump: Option<(i64, i64)>,
    /// Number of nodes of the model the plan was made for.
    node_count: usize,
}

/// Selection of nodes and the tensors they want quantized, before ranges are looked at.
struct Selection {
    /// `(tensor, is_output, first receiving node)` in first-seen order.
    tensors: Vec<(String, usize)>,
    /// Tensor -> selected nodes reading it (unique, node order).
    receivers: HashMap<String, Vec<usize>>,
    /// Tensors marked because they are outputs of quantized nodes.
    outputs: HashSet<String>,
    skipped: Vec<Skipped>,
}

fn node_label(n: &NodeProto, i: usize) -> String {
    if n.name().is_empty() { format!("#{i}") } else { n.name().to_string() }
}

fn bad_node(n: &NodeProto, i: usize, reason: String) -> Error {
    Error::BadNode { node: node_label(n, i), op_type: n.op_type().to_string(), reason }
}

/// Element type declared for `name` in graph inputs, outputs or value_info, if any.
fn declared_elem_type(g: &GraphProto, name: &str) -> Option<i32> {
    use onnx_ir::proto::type_proto::Value;
    g.input.iter().chain(&g.output).chain(&g.value_info).find(|v| v.name() == name).and_then(|v| {
        match v.r#type.as_ref()?.value.as_ref()? {
            Value::TensorType(t) => Some(t.elem_type()),
            _ => None,
        }
    })
}

fn select(g: &GraphProto, policy: &Policy) -> Result<Selection> {
    let m = policy.matchers()?;
    let mut produced: HashSet<&str> = g.input.iter().map(|v| v.name()).collect();
    produced.extend(g.initializer.iter().map(|t| t.name()));
    let mut consumers_op: HashMap<&str, Vec<&str>> = HashMap::new();
    for n in &g.node {
        produced.extend(n.output.iter().map(String::as_str));
        for i in &n.input {
            consumers_op.entry(i.as_str()).or_default().push(n.op_type());
        }
    }
    if !g.node.iter().any(|n| policy.op_types.iter().any(|o| o == n.op_type())) {
        return Err(Error::NothingToQuantize { op_types: policy.op_types.join("/") });
    }
    let mut sel = Selection { tensors: vec![], receivers: HashMap::new(), outputs: HashSet::new(), skipped: vec![] };
    for (i, n) in g.node.iter().enumerate() {
        if !policy.op_types.iter().any(|o| o == n.op_type()) || !m.node_selected(n.name()) {
            continue;
        }
        if n.input.len() != 2 || n.output.len() != 1 {
            return Err(bad_node(
                n,
                i,
                format!("expected 2 inputs and 1 output, found {} and {}", n.input.len(), n.output.len()),
            ));
        }
        for inp in &n.input {
            if !produced.contains(inp.as_str()) {
                return Err(bad_node(
                    n,
                    i,
                    format!("input '{inp}' is neither an initializer, a graph input nor a node output"),
                ));
            }
        }
        match n.op_type() {
            "Add" => {
                let feeds_ln = consumers_op
                    .get(n.output[0].as_str())
                    .is_some_and(|ops| ops.iter().any(|o| *o == "ReduceMean" || *o == "LayerNormalization"));
                if !feeds_ln || policy.residual_add == ResidualAdd::Skip {
                    continue;
                }
            }
            "MatMul" if policy.matmul_const_b_only && !g.is_initializer(&n.input[1]) => continue,
            _ => {}
        }
        for inp in &n.input {
            let r = sel.receivers.entry(inp.clone()).or_default();
            if r.is_empty() {
                sel.tensors.push((inp.clone(), i));
            }
            if !r.contains(&i) {
                r.push(i);
            }
        }
        if policy.quantize_outputs {
            let out = &n.output[0];
            if sel.outputs.insert(out.clone()) && !sel.receivers.contains_key(out) {
                sel.tensors.push((out.clone(), i));
            }
        }
    }
    // Drop tensors that cannot or must not be quantized.
    let dq_outputs: HashSet<&str> = g
        .node
        .iter()
        .filter(|n| n.op_type() == "DequantizeLinear")
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    let mut kept = Vec::with_capacity(sel.tensors.len());
    for (t, first) in std::mem::take(&mut sel.tensors) {
        let elem = g.initializer(&t).map(|i| i.data_type()).or_else(|| declared_elem_type(g, &t));
        let reason = if m.tensor_excluded(&t) {
            Some("excluded by exclude_tensors".to_string())
        } else if dq_outputs.contains(t.as_str()) {
            Some("already the output of a DequantizeLinear".to_string())
        } else if elem.is_some_and(|e| e != DataType::Float as i32) {
            Some(format!("element type {} is not float32", onnx_ir::data_type_name(elem.unwrap_or_default())))
        } else {
            None
        };
        match reason {
            Some(reason) => sel.skipped.push(Skipped { tensor: t, reason }),
            None => kept.push((t, first)),
        }
    }
    sel.tensors = kept;
    Ok(sel)
}

/// The activation tensors that need calibration ranges under `policy`, in graph order of their
/// first quantized consumer (the pipeline exposes exactly these as extra outputs). Errors like
/// [`plan`] does for malformed selected nodes or a model without the policy's op types.
pub fn tensors_to_calibrate(model: &Model, policy: &Policy) -> Result<Vec<String>> {
    let g = model.graph();
    let sel = select(g, policy)?;
    Ok(sel.tensors.into_iter().map(|(t, _)| t).filter(|t| !g.is_initializer(t)).collect())
}

fn check_range(tensor: &str, (min, max): (f32, f32)) -> Result<()> {
    if min.is_finite() && max.is_finite() && min <= max {
        Ok(())
    } else {
        Err(Error::BadRange { tensor: tensor.to_string(), min, max })
    }
}

fn scale_zp(tensor: &str, min: f32, max: f32, spec: QuantSpec) -> ScaleZp {
    let p = compute_scale_zp(min, max, spec);
    if p.degenerate {
        tracing::warn!(tensor, min, max, "range too small to quantize; using scale 1, zero point 0");
    }
    p
}

fn min_max(values: impl Iterator<Item = f32>) -> (f32, f32) {
    values.fold((0.0f32, 0.0f32), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// Per-channel (axis 1 of a 2-D `[in, out]` weight) or per-tensor symmetric parameters.
fn weight_params(w: &TensorProto, per_channel: bool, spec: QuantSpec) -> Result<(Vec<ScaleZp>, Option<usize>)> {
    let a = onnx_ir::tensor_to_array::<f32>(w)?;
    if let Some(bad) = a.iter().find(|v| !v.is_finite()) {
        return Err(Error::BadWeight {
            tensor: w.name().to_string(),
            reason: format!("contains non-finite value {bad}"),
        });
    }
    if per_channel && a.ndim() == 2 {
        let params = a
            .axis_iter(ndarray::Axis(1))
            .map(|col| {
                let (lo, hi) = min_max(col.iter().copied());
                scale_zp(w.name(), lo, hi, spec)
            })
            .collect();
        Ok((params, Some(1)))
    } else {
        let (lo, hi) = min_max(a.iter().copied());
        Ok((vec![scale_zp(w.name(), lo, hi, spec)], None))
    }
}

/// Plans Q/DQ insertion for `model` under `policy` with activation ranges `ranges`.
///
/// Mirrors ORT's QDQQuantizer: selected nodes mark their inputs (and outputs if
/// `quantize_outputs`); with `dedicated_pairs` an activation read by more than one selected node
/// gets one pair per selected reader, otherwise a single pair feeds every reader of the tensor
/// (selected or not, unless `shared_pair_feeds_all` is off). Weights always get one pair feeding
/// all their readers. Difference from ORT: a quantized tensor that is also a graph output stays
/// the FP32 graph output (ORT renames the producer's output and makes the DQ output the graph
/// output); it does not occur in BERT graphs.
///
/// Tensors without a range are listed in [`Plan::skipped`] (an error under `strict`). A policy that smooths
/// (`smooth` set) is refused on a model it would smooth that carries no smoothing record ([`Error::NotSmoothed`]).
pub fn plan(model: &Model, ranges: &Ranges, policy: &Policy) -> Result<Plan> {
    crate::smooth::check_smoothed(model, policy)?;
    let g = model.graph();
    let sel = select(g, policy)?;
    let mut consumers: HashMap<&str, Vec<Consumer>> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        for (slot, inp) in n.input.iter().enumerate() {
            consumers.entry(inp.as_str()).or_default().push(Consumer {
                node: i,
                node_name: n.name().to_string(),
                slot,
            });
        }
    }
    let mut plan = Plan { tensors: vec![], skipped: sel.skipped, opset_bump: None, node_count: g.node.len() };
    for (t, first) in sel.tensors {
        let mut shift = None;
        let all: Vec<Consumer> = consumers.get(t.as_str()).cloned().unwrap_or_default();
        let (kind, qtype, params, axis) = if let Some(init) = g.initializer(&t) {
            let is_weight = sel.receivers.get(&t).is_some_and(|r| r.iter().any(|&i| g.node[i].op_type() == "MatMul"));
            if is_weight {
                let spec = policy.weight_spec();
                let (p, axis) = weight_params(init, policy.per_channel, spec)?;
                (TensorKind::Weight, spec.qtype, p, axis)
            } else {
                let a = onnx_ir::tensor_to_array::<f32>(init)?;
                let (lo, hi) = min_max(a.iter().copied());
                check_range(&t, (lo, hi))?;
                (
                    TensorKind::Constant,
                    policy.activations.spec().qtype,
                    vec![scale_zp(&t, lo, hi, policy.activations.spec())],
                    None,
                )
            }
        } else {
            let softmax_out = g.producer_of(&t).is_some_and(|i| g.node[i].op_type() == "Softmax");
            let range = match policy.softmax_range {
                SoftmaxRange::Shifted if softmax_out => {
                    // Shifting is exact only when every quantized reader is a MatMul reading it as A.
                    let receivers = sel.receivers.get(&t).map(Vec::as_slice).unwrap_or_default();
                    let as_matmul_a = !receivers.is_empty()
                        && receivers.iter().all(|&r| {
                            let n = &g.node[r];
                            n.op_type() == "MatMul" && n.input[0] == t && n.input[1] != t
                        });
                    if !policy.activations.spec().symmetric {
                        return Err(Error::BadOptionValue {
                            key: "softmax_range".into(),
                            value: "shifted".into(),
                            expected:
                                "full or calibrated with asymmetric activations (shifting only helps symmetric ones)"
                                    .into(),
                        });
                    }
                    if as_matmul_a {
                        shift = Some(SOFTMAX_SHIFT);
                        Some((-SOFTMAX_SHIFT, 1.0 - SOFTMAX_SHIFT))
                    } else {
                        Some((0.0, 1.0))
                    }
                }
                SoftmaxRange::Full | SoftmaxRange::Shifted if softmax_out => Some((0.0, 1.0)),
                _ => ranges.get(&t).copied(),
            };
            let Some(range) = range else {
                if policy.strict {
                    return Err(Error::MissingRange { tensor: t, node: node_label(&g.node[first], first) });
                }
                plan.skipped.push(Skipped { tensor: t, reason: "no calibration range".into() });
                continue;
            };
            check_range(&t, range)?;
            let p = scale_zp(&t, range.0, range.1, policy.activations.spec());
            (TensorKind::Activation, policy.activations.spec().qtype, vec![p], None)
        };
        let receivers = sel.receivers.get(&t).map(Vec::as_slice).unwrap_or_default();
        let pairs = if kind == TensorKind::Activation && policy.dedicated_pairs && receivers.len() > 1 {
            receivers.iter().map(|&r| all.iter().filter(|c| c.node == r).cloned().collect()).collect()
        } else if kind == TensorKind::Activation && !policy.shared_pair_feeds_all {
            vec![all.into_iter().filter(|c| receivers.contains(&c.node)).collect()]
        } else {
            vec![all]
        };
        plan.tensors.push(PlannedTensor {
            tensor: t,
            kind,
            qtype,
            scales: params.iter().map(|p| p.scale).collect(),
            zero_points: params.iter().map(|p| p.zero_point).collect(),
            axis,
            int8_initializer: kind == TensorKind::Weight && policy.weights == WeightStorage::Int8Initializer,
            reduce_range: kind == TensorKind::Weight && policy.reduce_range,
            pairs,
            shift,
        });
    }
    let opset = model.opset("").unwrap_or(1);
    if !plan.tensors.is_empty() && opset < MIN_QDQ_OPSET {
        plan.opset_bump = Some((opset, MIN_QDQ_OPSET));
    }
    Ok(plan)
}

fn zero_point_tensor(name: &str, qtype: QuantType, zps: &[i32], shape: &[usize]) -> Result<TensorProto> {
    // Zero points are produced inside the integer range, so the narrowing casts are exact.
    Ok(match qtype {
        QuantType::Int8 => onnx_ir::tensor_from_vec::<i8>(name, shape, zps.iter().map(|&z| z as i8).collect())?,
        QuantType::UInt8 => onnx_ir::tensor_from_vec::<u8>(name, shape, zps.iter().map(|&z| z as u8).collect())?,
    })
}

fn quantized_weight(name: &str, w: &TensorProto, p: &PlannedTensor, reduce_range: bool) -> Result<TensorProto> {
    let a = onnx_ir::tensor_to_array::<f32>(w)?;
    let (qmin, qmax) = p.qtype.range(true, reduce_range);
    let shape = a.shape().to_vec();
    let cols = shape.get(1).copied().unwrap_or(1);
    let values: Vec<i8> = a
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let c = if p.axis.is_some() { k % cols } else { 0 };
            let sz = ScaleZp { scale: p.scales[c.min(p.scales.len() - 1)], zero_point: 0, degenerate: false };
            quantize_value(v, sz, qmin, qmax) as i8
        })
        .collect();
    Ok(onnx_ir::tensor_from_vec::<i8>(name, &shape, values)?)
}

impl Plan {
    /// Number of Q/DQ pairs (DQ nodes) this plan inserts.
    pub fn pair_count(&self) -> usize {
        self.tensors.iter().map(|t| t.pairs.len()).sum()
    }

    /// Inserts the planned nodes and initializers into `model` (the model the plan was made for).
    ///
    /// On error the model may be partly edited; callers that need atomicity apply to a clone.
    pub fn apply(&self, model: &mut Model) -> Result<()> {
        if model.graph().node.len() != self.node_count {
            return Err(Error::PlanMismatch {
                reason: format!("plan made for {} nodes, model has {}", self.node_count, model.graph().node.len()),
            });
        }
        for t in &self.tensors {
            for c in t.pairs.iter().flatten() {
                let ok =
                    model.graph().node.get(c.node).is_some_and(|n| {
                        n.name() == c.node_name && n.input.get(c.slot).is_some_and(|i| *i == t.tensor)
                    });
                if !ok {
                    return Err(Error::PlanMismatch {
                        reason: format!("input {} of node '{}' is not '{}'", c.slot, c.node_name, t.tensor),
                    });
                }
            }
        }
        if let Some((_, to)) = self.opset_bump {
            let p = &mut model.proto;
            match p.opset_import.iter_mut().find(|o| o.domain().is_empty() || o.domain() == "ai.onnx") {
                Some(o) => o.version = Some(to),
                None => p
                    .opset_import
                    .push(onnx_ir::proto::OperatorSetIdProto { domain: Some(String::new()), version: Some(to) }),
            }
        }
        let g = model.graph_mut();
        let mut names = NameSet::from_graph(g);
        // (insert before node index, nodes); applied from the back so indices stay valid.
        let mut inserts: Vec<(usize, Vec<NodeProto>)> = vec![];
        // (MatMuls reading a shifted pair, the shift constant): their outputs are corrected once every pair is wired.
        let mut shifts: Vec<(Vec<Consumer>, String)> = vec![];
        for t in &self.tensors {
            let name = &t.tensor;
            let shape: Vec<usize> = if t.axis.is_some() { vec![t.scales.len()] } else { vec![] };
            let scale = names.fresh(&format!("{name}_scale"));
            let zp = names.fresh(&format!("{name}_zero_point"));
            g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&scale, &shape, t.scales.clone())?);
            g.add_initializer(zero_point_tensor(&zp, t.qtype, &t.zero_points, &shape)?);
            let with_axis = |n: NodeProto| match t.axis {
                Some(a) => n.with_axis(a),
                None => n,
            };
            let q_source = if t.int8_initializer {
                let w = g
                    .initializer(name)
                    .ok_or_else(|| Error::Missing { name: name.to_string(), what: "initializer" })?;
                let qname = names.fresh(&format!("{name}_quantized"));
                let qw = quantized_weight(&qname, w, t, t.reduce_range)?;
                g.add_initializer(qw);
                Some(qname)
            } else {
                None
            };
            let many = t.pairs.len() > 1;
            for (k, pair) in t.pairs.iter().enumerate() {
                let sfx = if many { format!("_{}", k + 1) } else { String::new() };
                let dq_out = names.fresh(&format!("{name}_DequantizeLinear_Output{sfx}"));
                let dq_name = names.fresh(&format!("{name}_DequantizeLinear{sfx}"));
                let mut nodes = vec![];
                let dq_in = match &q_source {
                    Some(q) => q.clone(),
                    None => {
                        let q_out = names.fresh(&format!("{name}_QuantizeLinear_Output{sfx}"));
                        let q_name = names.fresh(&format!("{name}_QuantizeLinear{sfx}"));
                        let q_in = match t.shift {
                            Some(c) => {
                                let cname = names.fresh(&format!("{name}_shift"));
                                g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&cname, &[], vec![c])?);
                                let shifted = names.fresh(&format!("{name}_shifted{sfx}"));
                                let sub = names.fresh(&format!("{name}_Shift{sfx}"));
                                nodes.push(node("Sub", &sub, &[name, &cname], &[&shifted]));
                                shifts.push((pair.clone(), cname));
                                shifted
                            }
                            None => name.clone(),
                        };
                        nodes.push(with_axis(node("QuantizeLinear", &q_name, &[&q_in, &scale, &zp], &[&q_out])));
                        q_out
                    }
                };
                nodes.push(with_axis(node("DequantizeLinear", &dq_name, &[&dq_in, &scale, &zp], &[&dq_out])));
                for c in pair {
                    g.rewire_input(c.node, c.slot, &dq_out)?;
                }
                let at = pair.iter().map(|c| c.node).min().unwrap_or(g.node.len());
                inserts.push((at, nodes));
            }
        }
        // A·B with A = DQ(Q(P - c)): add c · Σ_k B[.., k, :] (B as the MatMul reads it, i.e. dequantized), so the
        // output is exactly DQ(Q(P - c))·B + c·1·B.
        let has_shifts = !shifts.is_empty();
        if has_shifts {
            let axes = names.fresh("softmax_shift_reduce_axes");
            g.add_initializer(onnx_ir::tensor_from_vec::<i64>(&axes, &[1], vec![-2])?);
            for (pair, c) in shifts {
                for consumer in pair {
                    let mm = &g.node[consumer.node];
                    let (b, out) = (mm.input[1].clone(), mm.output[0].clone());
                    let product = names.fresh(&format!("{out}_shifted"));
                    let sum = names.fresh(&format!("{out}_shift_sum"));
                    let scaled = names.fresh(&format!("{out}_shift_correction"));
                    let base = &consumer.node_name;
                    let nodes = vec![
                        node("ReduceSum", &names.fresh(&format!("{base}_ShiftSum")), &[&b, &axes], &[&sum])
                            .with_attr(attr_int("keepdims", 1)),
                        node("Mul", &names.fresh(&format!("{base}_ShiftScale")), &[&sum, &c], &[&scaled]),
                        node("Add", &names.fresh(&format!("{base}_ShiftCorrect")), &[&product, &scaled], &[&out]),
                    ];
                    g.node[consumer.node].output[0] = product;
                    inserts.push((consumer.node + 1, nodes));
                }
            }
        }
        inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, nodes) in inserts {
            g.insert_nodes(at, nodes);
        }
        if has_shifts {
            // A correction and the pair of the MatMul output's next reader can share an insertion index; whichever
            // order they landed in, sorting makes it topological.
            g.sort_nodes()?;
        }
        if self.tensors.iter().any(|t| t.int8_initializer) {
            g.remove_unused_initializers();
        }
        Ok(())
    }
}

trait WithAxis {
    fn with_axis(self, axis: usize) -> Self;
}

impl WithAxis for NodeProto {
    fn with_axis(mut self, axis: usize) -> Self {
        self.attribute.push(attr_int("axis", axis as i64));
        self
    }
}

/// Plans and applies in one go: returns the quantized copy of `model` and the plan used.
pub fn quantize(model: &Model, ranges: &Ranges, policy: &Policy) -> Result<(Model, Plan)> {
    let p = plan(model, ranges, policy)?;
    let mut out = model.clone();
    p.apply(&mut out)?;
    Ok((out, p))
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} tensors, {} Q/DQ pairs", self.tensors.len(), self.pair_count())?;
        if let Some((from, to)) = self.opset_bump {
            writeln!(f, "opset: default domain raised from {from} to {to}")?;
        }
        writeln!(
            f,
            "{:<48} {:<10} {:<5} {:>12} {:>4} {:>5} consumers",
            "tensor", "kind", "type", "scale", "zp", "axis"
        )?;
        for t in &self.tensors {
            let kind = match (t.kind, t.int8_initializer) {
                (TensorKind::Weight, true) => "weight-i8",
                (TensorKind::Weight, false) => "weight",
                (TensorKind::Activation, _) if t.shift.is_some() => "shifted",
                (TensorKind::Activation, _) => "activation",
                (TensorKind::Constant, _) => "constant",
            };
            let qt = if t.qtype == QuantType::Int8 { "int8" } else { "uint8" };
            let (scale, zp, axis) = crate::coverage::param_columns(&t.scales, &t.zero_points, t.axis);
            let pairs: Vec<String> = t
                .pairs
                .iter()
                .map(|p| p.iter().map(|c| format!("{}[{}]", c.node_name, c.slot)).collect::<Vec<_>>().join(" "))
                .collect();
            writeln!(f, "{:<48} {kind:<10} {qt:<5} {scale:>12} {zp:>4} {axis:>5} {}", t.tensor, pairs.join(" | "))?;
        }
        if !self.skipped.is_empty() {
            writeln!(f, "skipped:")?;
            for s in &self.skipped {
                writeln!(f, "  {:<48} {}", s.tensor, s.reason)?;
            }
        }
        Ok(())
    }
}
