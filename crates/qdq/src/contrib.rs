//! ONNX Runtime's integer kernels for its own fused transformer ops ([`Policy::contrib_ops`], the `cpu` preset).
//!
//! ORT's CPU EP turns `DequantizeLinear -> MatMul` into an integer kernel, but it has no such fusion for the
//! `Attention` and `EmbedLayerNormalization` nodes its transformers optimizer writes: behind Q/DQ pairs they would
//! dequantize the packed QKV weight (or the embedding tables) on every run and compute in float. So, after the pairs
//! are in place:
//! - an `Attention` whose input is a uint8 pair (QuantizeLinear -> DequantizeLinear, one scale) and whose weight is
//!   an int8 initializer behind its DequantizeLinear becomes `QAttention` reading the quantized input, the int8
//!   weight, their scales and zero points (per-column weight scales kept), the float bias and the mask: the
//!   projection runs as an integer GEMM, the rest of attention in float, as in ORT's dynamic quantization;
//! - an `EmbedLayerNormalization` whose tables are float initializers becomes `QEmbedLayerNormalization` over uint8
//!   copies (one asymmetric scale per tensor, the form the kernel takes) of the three tables and γ / β;
//! - a `MatMul` of a uint8 per-tensor pair by an int8 weight `[K, N]` whose only reader is an `Add` of a float bias
//!   `[N]` becomes one `MatMulIntegerToFloat` with that bias: ORT fuses the Q/DQ MatMul into the same kernel but
//!   leaves the bias `Add` as a node of its own (one more pass over the output and one more node to schedule, for
//!   each of BERT's 37 weighted MatMuls);
//! - a `MatMul` of two uint8 per-tensor pairs (attention's Q·K, when the policy quantizes it) whose only reader divides
//!   or multiplies it by a scalar constant (BERT's `1/sqrt(d)`) becomes one `MatMulIntegerToFloat` with that constant
//!   folded into the first input's scale: in float ORT folds the scalar into its `FusedMatMul`, but behind Q/DQ pairs
//!   the `Div` stays a node of its own (MiniLM, 1x256: 0.6 ms of 17 per run).
//!
//! All are com.microsoft ops only ORT's CPU EP runs; other policies keep the Q/DQ form.

use std::collections::HashMap;

use onnx_ir::proto::tensor_proto::DataType;
use onnx_ir::proto::{GraphProto, NodeProto, TensorProto};
use onnx_ir::{GraphExt, GraphIndex, NameSet, node};

use crate::error::{Error, Result};
use crate::policy::{Embeddings, Policy};
use crate::scale::{QuantSpec, QuantType, compute_scale_zp, quantize_value};
use crate::types::PlannedTensor;

pub(crate) const MS_DOMAIN: &str = "com.microsoft";

/// What the rewrite did, by node name.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ContribRewrites {
    /// `Attention` nodes now `QAttention`.
    pub attention: Vec<String>,
    /// `EmbedLayerNormalization` nodes now `QEmbedLayerNormalization`.
    pub embed_layer_norm: Vec<String>,
    /// `MatMul` nodes now `MatMulIntegerToFloat` with their bias `Add` folded in.
    pub matmul_bias: Vec<String>,
    /// `MatMul` nodes of two activations now `MatMulIntegerToFloat` with the scalar `Div` / `Mul` after them folded
    /// into the first input's scale.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matmul_scale: Vec<String>,
}

impl ContribRewrites {
    /// True if nothing was rewritten.
    pub fn is_empty(&self) -> bool {
        self.attention.is_empty()
            && self.embed_layer_norm.is_empty()
            && self.matmul_bias.is_empty()
            && self.matmul_scale.is_empty()
    }

    /// One line per op written (`as ONNX Runtime's QAttention: Attention_0, ...`; past four nodes, the count and the
    /// first three: the JSON forms list them all).
    pub fn lines(&self) -> Vec<String> {
        [
            ("QAttention", &self.attention),
            ("QEmbedLayerNormalization", &self.embed_layer_norm),
            ("MatMulIntegerToFloat with the bias Add folded in", &self.matmul_bias),
            ("MatMulIntegerToFloat with the scale Div folded in", &self.matmul_scale),
        ]
        .into_iter()
        .filter(|(_, nodes)| !nodes.is_empty())
        .map(|(op, nodes)| match nodes.len() {
            n if n > 4 => format!("as ONNX Runtime's {op}: {n} nodes ({}, ...)", nodes[..3].join(", ")),
            _ => format!("as ONNX Runtime's {op}: {}", nodes.join(", ")),
        })
        .collect()
    }
}

/// An ONNX Runtime `Attention` that `QAttention` can stand for: at least input and weight, nothing beyond `past`
/// (relative position bias and later inputs have no `QAttention` slot).
pub(crate) fn has_qattention_form(n: &NodeProto) -> bool {
    n.op_type() == "Attention"
        && n.domain() == MS_DOMAIN
        && n.input.len() >= 2
        && n.input.iter().skip(5).all(String::is_empty)
}

/// The `Add` (its index) that is the only reader of MatMul `n`'s output and adds a float initializer `[N]`, `N` being
/// the columns of `n`'s 2-D initializer weight.
fn bias_add(ix: &GraphIndex, n: &NodeProto) -> Option<usize> {
    let (a, w, y) = (n.input.first()?, n.input.get(1)?, n.output.first()?);
    let cols = match ix.graph().initializer(w)?.dims[..] {
        [_, cols] => cols,
        _ => return None,
    };
    let &[(r, _)] = ix.readers(y) else { return None };
    let add = ix.node(r);
    if ix.is_graph_output(y) || add.op_type() != "Add" || !add.domain().is_empty() || add.input.len() != 2 {
        return None;
    }
    let bias = if add.input[0] == *y { &add.input[1] } else { &add.input[0] };
    let t = ix.graph().initializer(bias)?;
    let float_vector = t.data_type() == DataType::Float as i32 && t.dims == [cols];
    (float_vector && bias != a && bias != y).then_some(r)
}

/// The first value of float initializer `name` (a scale, a scalar constant).
fn first_f32(g: &GraphProto, name: &str) -> Option<f32> {
    onnx_ir::f32_values(g.initializer(name)?).ok()?.1.next()
}

/// The reader (its index) of MatMul `n`'s output when it is the only one and divides or multiplies that output by a
/// scalar float initializer, with the factor it applies (`1 / c` or `c`; finite, not 0).
fn scalar_after(ix: &GraphIndex, n: &NodeProto) -> Option<(usize, f32)> {
    let y = n.output.first()?;
    let &[(r, slot)] = ix.readers(y) else { return None };
    let op = ix.node(r);
    if ix.is_graph_output(y) || !op.domain().is_empty() || op.input.len() != 2 {
        return None;
    }
    let (g, c) = (ix.graph(), &op.input[1 - slot]);
    let one_float = g.initializer(c)?.dims.iter().product::<i64>() == 1 && elem(g, c) == Some(DataType::Float as i32);
    let value = first_f32(g, c).filter(|_| one_float)?;
    let factor = match (op.op_type(), slot) {
        ("Div", 0) => 1.0 / value,
        ("Mul", _) => value,
        _ => return None,
    };
    (factor.is_finite() && factor != 0.0).then_some((r, factor))
}

/// The nodes [`rewrite`] will turn into their integer forms under `policy`, given the planned pairs: each selected
/// `Attention` whose input is planned as a uint8 per-tensor activation and whose weight as an int8 initializer,
/// (with int8 embeddings) each `EmbedLayerNormalization`, and each such `MatMul` followed by its bias `Add` (its
/// output not quantized).
pub(crate) fn planned(ix: &GraphIndex, tensors: &[PlannedTensor], policy: &Policy) -> ContribRewrites {
    let mut done = ContribRewrites::default();
    if !policy.contrib_ops {
        return done;
    }
    let Ok(m) = policy.matchers() else { return done };
    let planned = |t: &str| tensors.iter().find(|p| p.tensor == t);
    let uint8_activation =
        |t: &str| planned(t).is_some_and(|p| p.qtype == QuantType::UInt8 && p.axis.is_none() && p.shift.is_none());
    for n in &ix.graph().node {
        if !m.node_selected(n.name()) || n.name().is_empty() {
            continue;
        }
        if n.op_type() == "MatMul" && n.domain().is_empty() {
            let weight =
                n.input.get(1).and_then(|w| planned(w)).is_some_and(|p| p.int8_initializer && p.axis != Some(0));
            let out_float = n.output.first().is_some_and(|y| planned(y).is_none());
            if uint8_activation(&n.input[0]) && weight && out_float && bias_add(ix, n).is_some() {
                done.matmul_bias.push(n.name().to_owned());
            }
            let activations = uint8_activation(&n.input[0])
                && n.input.get(1).is_some_and(|b| uint8_activation(b) && !ix.is_initializer(b));
            if activations && out_float && scalar_after(ix, n).is_some() {
                done.matmul_scale.push(n.name().to_owned());
            }
            continue;
        }
        if n.domain() != MS_DOMAIN {
            continue;
        }
        match n.op_type() {
            "Attention" if has_qattention_form(n) => {
                let x = uint8_activation(&n.input[0]);
                let w = planned(&n.input[1]).is_some_and(|p| p.int8_initializer);
                if x && w && policy.op_types.iter().any(|o| o == "Attention") {
                    done.attention.push(n.name().to_owned());
                }
            }
            "EmbedLayerNormalization" if policy.embeddings == Embeddings::Int8 => {
                let slot = |k: usize| n.input.get(k).map_or("", String::as_str);
                let tables = [2, 3, 4, 5, 6].iter().all(|&k| ix.elem_type(slot(k)) == Some(DataType::Float as i32));
                let float = [2, 3, 4, 5, 6].iter().all(|&k| ix.is_initializer(slot(k)));
                if tables && float && !slot(0).is_empty() && !slot(1).is_empty() && slot(8).is_empty() {
                    done.embed_layer_norm.push(n.name().to_owned());
                }
            }
            _ => {}
        }
    }
    done
}

/// Rewrites the nodes `planned` names in `g` (pairs already inserted), as the module docs say.
pub(crate) fn rewrite(g: &mut GraphProto, names: &mut NameSet, planned: &ContribRewrites) -> Result<()> {
    if planned.is_empty() {
        return Ok(());
    }
    fold_bias_adds(g, &planned.matmul_bias)?;
    fold_scales(g, names, &planned.matmul_scale)?;
    let producers: HashMap<String, usize> =
        g.node.iter().enumerate().flat_map(|(i, n)| n.output.iter().map(move |o| (o.clone(), i))).collect();
    for i in 0..g.node.len() {
        let n = &g.node[i];
        let q = if planned.attention.iter().any(|a| a == n.name()) {
            qattention(g, &producers, n).ok_or_else(|| Error::PlanMismatch {
                reason: format!("Attention '{}' does not read a uint8 pair and an int8 weight", n.name()),
            })?
        } else if planned.embed_layer_norm.iter().any(|e| e == n.name()) {
            let n = n.clone();
            qembed_layer_norm(g, names, &n)?
        } else {
            continue;
        };
        g.node[i] = q;
    }
    g.remove_unread_nodes(&|n| n.op_type() == "DequantizeLinear");
    Ok(())
}

/// Replaces each MatMul named in `matmuls` and its bias `Add` by one `MatMulIntegerToFloat` (at the MatMul's place,
/// writing the Add's output).
fn fold_bias_adds(g: &mut GraphProto, matmuls: &[String]) -> Result<()> {
    if matmuls.is_empty() {
        return Ok(());
    }
    let producers: HashMap<String, usize> =
        g.node.iter().enumerate().flat_map(|(i, n)| n.output.iter().map(move |o| (o.clone(), i))).collect();
    let ix = GraphIndex::new(g);
    let mut fused = vec![];
    for (i, n) in ix.graph().node.iter().enumerate().filter(|(_, n)| matmuls.iter().any(|m| m == n.name())) {
        let mismatch = || Error::PlanMismatch {
            reason: format!(
                "MatMul '{}' does not read a uint8 pair and an int8 weight, or lost its bias Add",
                n.name()
            ),
        };
        let add = bias_add_after_pairs(&ix, &producers, n).ok_or_else(mismatch)?;
        let q = matmul_integer_to_float(ix.graph(), &producers, n, ix.node(add)).ok_or_else(mismatch)?;
        fused.push((i, q, add));
    }
    drop(ix);
    replace_folding(g, fused);
    Ok(())
}

/// Puts each `(i, q, r)`'s node `q` at index `i` and removes node `r` (the node folded into it).
fn replace_folding(g: &mut GraphProto, fused: Vec<(usize, NodeProto, usize)>) {
    let mut gone = vec![false; g.node.len()];
    for (i, q, r) in fused {
        g.node[i] = q;
        gone[r] = true;
    }
    let mut gone = gone.into_iter();
    g.node.retain(|_| !gone.next().unwrap_or(false));
}

/// Replaces each MatMul named in `matmuls` (two uint8 pairs in) and the scalar `Div` / `Mul` after it by one
/// `MatMulIntegerToFloat` (at the MatMul's place, writing the scaling node's output) whose first scale carries the
/// factor: `(a - za)(b - zb) · (sa · f) · sb` is `f · DQ(a)·DQ(b)`.
fn fold_scales(g: &mut GraphProto, names: &mut NameSet, matmuls: &[String]) -> Result<()> {
    if matmuls.is_empty() {
        return Ok(());
    }
    let producers: HashMap<String, usize> =
        g.node.iter().enumerate().flat_map(|(i, n)| n.output.iter().map(move |o| (o.clone(), i))).collect();
    let ix = GraphIndex::new(g);
    let (mut fused, mut scales) = (vec![], vec![]);
    for (i, n) in ix.graph().node.iter().enumerate().filter(|(_, n)| matmuls.iter().any(|m| m == n.name())) {
        let mismatch = || Error::PlanMismatch {
            reason: format!("MatMul '{}' does not read two uint8 pairs, or lost its scalar Div / Mul", n.name()),
        };
        let (r, factor) = scalar_after(&ix, n).ok_or_else(mismatch)?;
        let g = ix.graph();
        let [aq, a_scale, a_zp] = dq_inputs(g, &producers, &n.input[0]).ok_or_else(mismatch)?;
        let [bq, b_scale, b_zp] = dq_inputs(g, &producers, &n.input[1]).ok_or_else(mismatch)?;
        let from_quantize = |t: &str| producers.get(t).is_some_and(|&p| g.node[p].op_type() == "QuantizeLinear");
        let scale = first_f32(g, a_scale);
        let (Some(scale), true) = (scale, from_quantize(aq) && from_quantize(bq)) else { return Err(mismatch()) };
        let folded = names.fresh(&format!("{a_scale}_folded"));
        scales.push(onnx_ir::tensor_from_vec::<f32>(&folded, &[], vec![scale * factor])?);
        let y = ix.node(r).output[0].as_str();
        let mut q = node("MatMulIntegerToFloat", n.name(), &[aq, bq, &folded, b_scale, a_zp, b_zp], &[y]);
        q.domain = Some(MS_DOMAIN.into());
        fused.push((i, q, r));
    }
    drop(ix);
    for t in scales {
        g.add_initializer(t);
    }
    replace_folding(g, fused);
    Ok(())
}

/// [`bias_add`] of MatMul `n` once the pairs are in: its weight input is now a DequantizeLinear output, so the
/// weight's columns are read from the int8 initializer behind it.
fn bias_add_after_pairs(ix: &GraphIndex, producers: &HashMap<String, usize>, n: &NodeProto) -> Option<usize> {
    let [wq, _, _] = dq_inputs(ix.graph(), producers, n.input.get(1)?)?;
    let mut with_weight = n.clone();
    with_weight.input[1] = wq.to_owned();
    bias_add(ix, &with_weight)
}

/// The `MatMulIntegerToFloat` standing for MatMul `n` and its bias `add`: `n`'s name, the add's output.
fn matmul_integer_to_float(
    g: &GraphProto,
    producers: &HashMap<String, usize>,
    n: &NodeProto,
    add: &NodeProto,
) -> Option<NodeProto> {
    let [xq, xs, xzp] = dq_inputs(g, producers, n.input.first()?)?;
    let [wq, ws, wzp] = dq_inputs(g, producers, n.input.get(1)?)?;
    let x_quantized = producers.get(xq).is_some_and(|&p| g.node[p].op_type() == "QuantizeLinear");
    let len = |s: &str| g.initializer(s).map(|t| t.dims.iter().product::<i64>());
    if !x_quantized || len(xs) != Some(1) || elem(g, xzp) != Some(DataType::Uint8 as i32) {
        return None;
    }
    let cols = *g.initializer(wq)?.dims.get(1)?;
    // One scale, or one per column (the DequantizeLinear's axis 1 of the 2-D weight; 1 is ONNX's default).
    let axis = g.node[*producers.get(n.input[1].as_str())?].attribute.iter().find(|a| a.name() == "axis");
    let per_column = len(ws) == Some(cols) && len(wzp) == Some(cols) && axis.is_none_or(|a| matches!(a.i(), 1 | -1));
    let per_tensor = len(ws) == Some(1) && len(wzp) == Some(1);
    if elem(g, wq) != Some(DataType::Int8 as i32)
        || elem(g, wzp) != Some(DataType::Int8 as i32)
        || !(per_column || per_tensor)
    {
        return None;
    }
    let bias = add.input.iter().find(|t| *t != &n.output[0])?;
    let mut q = node("MatMulIntegerToFloat", n.name(), &[xq, wq, xs, ws, xzp, wzp, bias], &[add.output[0].as_str()]);
    q.domain = Some(MS_DOMAIN.into());
    Some(q)
}

/// `(quantized input, scale, zero point)` of the DequantizeLinear producing `t`, if it has one scale.
fn dq_inputs<'g>(g: &'g GraphProto, producers: &HashMap<String, usize>, t: &str) -> Option<[&'g str; 3]> {
    let dq = &g.node[*producers.get(t)?];
    if dq.op_type() != "DequantizeLinear" || dq.input.len() != 3 {
        return None;
    }
    Some([dq.input[0].as_str(), dq.input[1].as_str(), dq.input[2].as_str()])
}

fn elem(g: &GraphProto, name: &str) -> Option<i32> {
    g.initializer(name).map(TensorProto::data_type)
}

/// The `QAttention` replacing `n`, if its input is a uint8 per-tensor pair and its weight an int8 initializer's DQ.
fn qattention(g: &GraphProto, producers: &HashMap<String, usize>, n: &NodeProto) -> Option<NodeProto> {
    if !has_qattention_form(n) {
        return None;
    }
    let [xq, xs, xzp] = dq_inputs(g, producers, &n.input[0])?;
    let [wq, ws, wzp] = dq_inputs(g, producers, &n.input[1])?;
    let x_quantized = producers.get(xq).is_some_and(|&p| g.node[p].op_type() == "QuantizeLinear");
    let scalar = |s: &str| g.initializer(s).is_some_and(|t| t.dims.iter().product::<i64>() == 1);
    if !x_quantized || !scalar(xs) || elem(g, xzp) != Some(DataType::Uint8 as i32) {
        return None;
    }
    if elem(g, wq) != Some(DataType::Int8 as i32) || elem(g, wzp) != Some(DataType::Int8 as i32) {
        return None;
    }
    let slot = |k: usize| n.input.get(k).map_or("", String::as_str);
    let inputs = [xq, wq, slot(2), xs, ws, slot(3), xzp, wzp, slot(4)];
    Some(qattention_node(n, &inputs, &n.output.iter().map(String::as_str).collect::<Vec<_>>()))
}

/// The `QAttention` node standing for `Attention` `n` (its name and attributes), with `inputs` in QAttention's order
/// (input, weight, bias, input scale, weight scale, mask, input zero point, weight zero point, past; trailing empty
/// ones dropped).
pub(crate) fn qattention_node(n: &NodeProto, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let mut inputs = inputs.to_vec();
    while inputs.last() == Some(&"") {
        inputs.pop();
    }
    let mut q = node("QAttention", n.name(), &inputs, outputs);
    q.domain = Some(MS_DOMAIN.into());
    q.attribute = n.attribute.clone();
    q
}

/// uint8 asymmetric over the tensor's own min / max, as the kernel takes it.
const EMBED_SPEC: QuantSpec = QuantSpec { qtype: QuantType::UInt8, symmetric: false, reduce_range: false };

/// The `QEmbedLayerNormalization` replacing `n` (a planned one: float tables and γ / β, no `position_ids`), its
/// quantized tables and γ / β added to `g`.
fn qembed_layer_norm(g: &mut GraphProto, names: &mut NameSet, n: &NodeProto) -> Result<NodeProto> {
    let slot = |k: usize| n.input.get(k).map_or("", String::as_str);
    let params = [2, 3, 4, 5, 6].map(|k| slot(k).to_owned());
    let (mut quantized, mut scales, mut zps) = (vec![], vec![], vec![]);
    for p in &params {
        let [q, s, z] = uint8_copy(g, names, p)?;
        quantized.push(q);
        scales.push(s);
        zps.push(z);
    }
    let mut inputs: Vec<&str> = vec![slot(0), slot(1)];
    inputs.extend(quantized.iter().map(String::as_str));
    inputs.push(slot(7));
    inputs.extend(scales.iter().chain(&zps).map(String::as_str));
    let outputs: Vec<&str> = n.output.iter().map(String::as_str).collect();
    let mut q = node("QEmbedLayerNormalization", n.name(), &inputs, &outputs);
    q.domain = Some(MS_DOMAIN.into());
    q.attribute = n.attribute.iter().filter(|a| a.name() == "epsilon").cloned().collect();
    Ok(q)
}

/// A uint8 copy of float initializer `name` with its scale and zero point (scalars), added to `g`.
fn uint8_copy(g: &mut GraphProto, names: &mut NameSet, name: &str) -> Result<[String; 3]> {
    let t = g.initializer(name).ok_or_else(|| Error::Missing { name: name.to_owned(), what: "initializer" })?;
    let a = onnx_ir::tensor_to_array::<f32>(t)?;
    if let Some(bad) = a.iter().find(|v| !v.is_finite()) {
        return Err(Error::BadWeight { tensor: name.to_owned(), reason: format!("contains non-finite value {bad}") });
    }
    let (lo, hi) = crate::params::min_max(a.iter().copied());
    let p = compute_scale_zp(lo, hi, EMBED_SPEC);
    let values: Vec<u8> = a.iter().map(|&v| quantize_value(v, p, 0, 255) as u8).collect();
    let [q, s, z] = ["quantized", "scale", "zero_point"].map(|k| names.fresh(&format!("{name}_{k}")));
    let shape = a.shape().to_vec();
    g.add_initializer(onnx_ir::tensor_from_vec::<u8>(&q, &shape, values)?);
    g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&s, &[], vec![p.scale])?);
    g.add_initializer(onnx_ir::tensor_from_vec::<u8>(&z, &[], vec![p.zero_point as u8])?);
    Ok([q, s, z])
}

/// `model` with each `MatMulIntegerToFloat` that reads a quantized activation (a QuantizeLinear output) expanded back
/// into the Q/DQ form it stands for: DequantizeLinear of the uint8 input (one per quantized tensor, shared by its
/// readers), DequantizeLinear of the int8 weight (axis 1 with per-column scales), a MatMul under the node's name and,
/// with a bias, the `Add` of it. The two forms compute the same to float rounding (the fold's test compares them);
/// the expanded one has the activation pairs that [`crate::activation_pairs`] and the `qdq debug` / `qdq tune`
/// machinery take apart. A model without such nodes comes back unchanged. Takes the model by value: nothing is
/// copied (a model of a few GB is not held twice).
///
/// ```
/// use onnx_ir::tiny_bert::{TinyBertConfig, build};
///
/// let fp32 = build(&TinyBertConfig::default());
/// let policy = qdq::Policy { smooth: None, outlier_channels: None, ..qdq::Policy::preset("cpu").unwrap() };
/// let ranges: qdq::Ranges =
///     qdq::tensors_to_calibrate(&fp32, &policy).unwrap().into_iter().map(|t| (t, (-4.0, 4.0))).collect();
/// let (int8, _) = qdq::quantize(&fp32, &ranges, &policy).unwrap();
/// let count = |m: &onnx_ir::Model, op: &str| m.graph().node.iter().filter(|n| n.op_type() == op).count();
/// assert!(count(&int8, "MatMulIntegerToFloat") > 0);
/// let expanded = qdq::expand_integer_matmuls(int8.clone());
/// assert_eq!(count(&expanded, "MatMulIntegerToFloat"), 0);
/// assert!(!qdq::activation_pairs(&expanded).is_empty());
/// ```
pub fn expand_integer_matmuls(mut model: onnx_ir::Model) -> onnx_ir::Model {
    let g = model.graph_mut();
    // Each quantized activation with the scale and zero point of its QuantizeLinear.
    let quantized: HashMap<String, [String; 2]> = g
        .node
        .iter()
        .filter(|n| n.op_type() == "QuantizeLinear" && n.input.len() == 3)
        .flat_map(|n| Some((n.output.first()?.clone(), [n.input[1].clone(), n.input[2].clone()])))
        .collect();
    let expandable = |n: &NodeProto| {
        n.op_type() == "MatMulIntegerToFloat"
            && n.domain() == MS_DOMAIN
            && matches!(n.input.len(), 6 | 7)
            && quantized.contains_key(&n.input[0])
    };
    if !g.node.iter().any(expandable) {
        return model;
    }
    let mut names = NameSet::from_graph(g);
    let mut activation_dq = HashMap::new();
    let mut nodes = Vec::with_capacity(g.node.len() + 16);
    for n in std::mem::take(&mut g.node) {
        if !expandable(&n) {
            nodes.push(n);
            continue;
        }
        let per_column = g.initializer(&n.input[3]).is_some_and(|t| t.dims.iter().product::<i64>() > 1);
        // A scale folded into the first input's ([`fold_scales`]): the pair's own scale, and the factor after.
        let [qs, _] = &quantized[&n.input[0]];
        let factor = match (first_f32(g, qs), first_f32(g, &n.input[2])) {
            (Some(own), Some(folded)) if own != folded => Some(folded / own),
            _ => None,
        };
        let mut e = Expansion { names: &mut names, activation_dq: &mut activation_dq, quantized: &quantized };
        let (out, factor) = e.one(&n, per_column, factor);
        nodes.extend(out);
        if let Some(t) = factor {
            g.add_initializer(t);
        }
    }
    g.node = nodes;
    model
}

/// What [`expand_integer_matmuls`] shares between nodes.
struct Expansion<'a> {
    names: &'a mut NameSet,
    /// (quantized tensor, scale, zero point) -> the DequantizeLinear output already written for it.
    activation_dq: &'a mut HashMap<[String; 3], String>,
    /// Quantized activation -> its QuantizeLinear's scale and zero point.
    quantized: &'a HashMap<String, [String; 2]>,
}

impl Expansion<'_> {
    /// The DequantizeLinear output of a quantized activation (written once, shared by its readers).
    fn activation(&mut self, out: &mut Vec<NodeProto>, q: &str, scale: &str, zp: &str) -> String {
        let key = [q, scale, zp].map(str::to_owned);
        if let Some(x) = self.activation_dq.get(&key) {
            return x.clone();
        }
        let x = self.names.fresh(&format!("{q}_DequantizeLinear_Output"));
        let dq = self.names.fresh(&format!("{q}_DequantizeLinear"));
        out.push(node("DequantizeLinear", &dq, &[q, scale, zp], &[&x]));
        self.activation_dq.insert(key, x.clone());
        x
    }

    /// The Q/DQ form of one `MatMulIntegerToFloat` `n`: with `factor` (a scale folded into its first input's), that
    /// input's pair takes its QuantizeLinear's scale and a `Mul` by the factor follows (its initializer returned).
    fn one(&mut self, n: &NodeProto, per_column: bool, factor: Option<f32>) -> (Vec<NodeProto>, Option<TensorProto>) {
        let i = |k: usize| n.input.get(k).map(String::as_str).unwrap_or_default();
        let (name, y) = (n.name(), n.output[0].as_str());
        let mut out = Vec::with_capacity(5);
        let a_scale = match factor {
            Some(_) => self.quantized[i(0)][0].clone(),
            None => i(2).to_owned(),
        };
        let x = self.activation(&mut out, i(0), &a_scale, i(4));
        let w = if self.quantized.contains_key(i(1)) {
            self.activation(&mut out, i(1), i(3), i(5))
        } else {
            let w = self.names.fresh(&format!("{}_DequantizeLinear_Output", i(1)));
            let dq = self.names.fresh(&format!("{name}_weight_DequantizeLinear"));
            let mut wdq = node("DequantizeLinear", &dq, &[i(1), i(3), i(5)], &[&w]);
            if per_column {
                wdq.attribute.push(onnx_ir::attr_int("axis", 1));
            }
            out.push(wdq);
            w
        };
        // MatMul, then the factor, then the bias: `f · DQ(a)·DQ(b) + bias`, each step writing `y` when it is the last.
        let (bias, mut tensor) = (i(6), None);
        let mut last = match factor.is_some() || !bias.is_empty() {
            true => self.names.fresh(&format!("{name}_output_0")),
            false => y.to_owned(),
        };
        out.push(node("MatMul", name, &[&x, &w], &[&last]));
        if let Some(f) = factor {
            let c = self.names.fresh(&format!("{name}_folded_scale"));
            tensor = onnx_ir::tensor_from_vec::<f32>(&c, &[], vec![f]).ok();
            let scaled = if bias.is_empty() { y.to_owned() } else { self.names.fresh(&format!("{name}_scaled")) };
            out.push(node("Mul", &self.names.fresh(&format!("{name}_scale_Mul")), &[&last, &c], &[&scaled]));
            last = scaled;
        }
        if !bias.is_empty() {
            out.push(node("Add", &self.names.fresh(&format!("{name}_bias_Add")), &[&last, bias], &[y]));
        }
        (out, tensor)
    }
}
