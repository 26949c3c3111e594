//! Dynamic quantization ([`quantize_dynamic`]): no calibration. Each constant-weight MatMul the policy selects gets
//! its weight as an int8 initializer (per column or per tensor, 7-bit with `reduce_range`) and its input quantized at
//! run time, in the form ONNX Runtime's CPU EP fuses into `DynamicQuantizeMatMul`:
//!
//! ```text
//! x -> DynamicQuantizeLinear -> (x_q, x_scale, x_zp)          one per input tensor, shared by its MatMuls
//! MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast(float) -> Mul(x_scale * W_scale) -> the MatMul's output
//! ```
//!
//! MatMuls of two activations (attention) stay in float, as in ONNX Runtime's `quantize_dynamic`; embedding tables
//! follow the policy's `embeddings` option ([`crate::EmbeddingTable`]). Smoothing needs calibration and is not
//! applied. In ONNX Runtime's fused form (with `contrib_ops`, see `contrib`), an `Attention` becomes `QAttention`
//! reading the same run-time quantized input and its packed weight as int8, and an `EmbedLayerNormalization` (with
//! int8 embeddings) becomes `QEmbedLayerNormalization`, as ORT's `quantize_dynamic` does.

use std::collections::HashMap;
use std::fmt;

use onnx_ir::proto::{GraphProto, NodeProto};
use onnx_ir::{DataType, GraphExt, GraphIndex, Model, NameSet, NodeExt, attr_int, node};

use crate::embedding::{EmbeddingTable, apply_tables, plan_tables};
use crate::error::{Error, Result};
use crate::params::weight_params;
use crate::patterns::const_weight_matmul;
use crate::plan::MIN_QDQ_OPSET;
use crate::policy::Policy;
use crate::scale::{QuantSpec, QuantType};

/// What [`quantize_dynamic`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DynamicPlan {
    /// The MatMuls now integer, by node name.
    pub matmuls: Vec<String>,
    /// Their input tensors, each quantized once at run time.
    pub inputs: Vec<String>,
    /// Embedding tables stored as int8.
    pub embeddings: Vec<EmbeddingTable>,
    /// ONNX Runtime's fused ops now its integer contrib ops (`Attention` nodes now `QAttention` are also in
    /// `matmuls`).
    pub contrib: crate::contrib::ContribRewrites,
    /// `Some((from, to))` if the default-domain opset was raised.
    pub opset_bump: Option<(i64, i64)>,
}

impl fmt::Display for DynamicPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "dynamic: {} MatMuls integer ({} inputs quantized at run time), {} int8 embedding tables",
            self.matmuls.len(),
            self.inputs.len(),
            self.embeddings.len() + self.contrib.embed_layer_norm.len()
        )?;
        if let Some((from, to)) = self.opset_bump {
            writeln!(f, "opset: default domain raised from {from} to {to}")?;
        }
        for m in &self.matmuls {
            writeln!(f, "  {m}")?;
        }
        for e in &self.embeddings {
            writeln!(f, "  {} (embedding, {} Gathers)", e.table, e.gathers.len())?;
        }
        for line in self.contrib.lines() {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// The integer nodes replacing one MatMul, and the input they quantize.
struct Rewrite {
    input: String,
    nodes: Vec<NodeProto>,
}

/// The model-level edits after the graph's: the opset an int8 embedding's per-axis DequantizeLinear needs (returned
/// when raised), the com.microsoft domain where contrib ops were written, the Softmax shapes declared
/// ([`onnx_ir::annotate_shape_preserving`]).
fn finish(out: &mut Model, embeddings: bool, contrib: bool) -> Result<Option<(i64, i64)>> {
    let opset = out.opset("").unwrap_or(1);
    let opset_bump = (embeddings && opset < MIN_QDQ_OPSET).then_some((opset, MIN_QDQ_OPSET));
    if let Some((_, to)) = opset_bump {
        onnx_ir::upgrade_default_opset(out, to)?;
    }
    if contrib {
        crate::apply::import_domain(out, crate::contrib::MS_DOMAIN, 1);
    }
    onnx_ir::annotate_shape_preserving(out.graph_mut());
    Ok(opset_bump)
}

/// Names of one input's DynamicQuantizeLinear outputs: quantized, scale, zero point.
type Quantized = [String; 3];

/// A copy of `model` with the constant-weight MatMuls `policy` selects in the dynamic form (module docs), and what
/// was done. Errors when no MatMul qualifies.
/// Dynamic quantization is integer: a float8 `precision` is refused.
fn integer_only(policy: &Policy) -> Result<()> {
    match policy.precision.grid() {
        crate::Grid::Float8(_) => Err(crate::error::Error::BadOptionValue {
            key: "precision".into(),
            value: policy.precision.to_string(),
            expected: "int8 in dynamic mode (DynamicQuantizeLinear has no float8 form)".into(),
        }),
        crate::Grid::Integer => Ok(()),
    }
}

pub fn quantize_dynamic(model: &Model, policy: &Policy) -> Result<(Model, DynamicPlan)> {
    integer_only(policy)?;
    let m = policy.matchers()?;
    let ix = GraphIndex::new(model.graph());
    crate::select::check_node_patterns(&ix, policy, &m)?;
    let mut out = model.clone();
    let g = out.graph_mut();
    let mut names = NameSet::from_graph(g);
    let mut inputs: Vec<(String, Quantized)> = vec![];
    let mut rewrites: HashMap<usize, Rewrite> = HashMap::new();
    let (mut attention_names, mut weights) = (vec![], Int8Weights::new());
    for i in 0..ix.graph().node.len() {
        let n = ix.node(i);
        let attention = policy.contrib_ops && crate::contrib::has_qattention_form(n);
        // (A node without an output, which only a malformed file has, is left as it is.)
        let rewritable = (n.op_type() == "MatMul" || attention) && !n.output.is_empty();
        let Some(mm) = const_weight_matmul(&ix, i, &m).filter(|_| rewritable) else {
            continue;
        };
        if m.tensor_excluded(mm.input) || m.tensor_excluded(&ix.node(i).input[1]) {
            continue;
        }
        let x = mm.input.to_owned();
        if !inputs.iter().any(|(t, _)| *t == x) {
            let q = ["quantized", "scale", "zero_point"].map(|s| names.fresh(&format!("{x}_{s}")));
            inputs.push((x.clone(), q));
        }
        let q = &inputs.iter().find(|(t, _)| *t == x).expect("just added").1;
        let nodes = if attention {
            attention_names.push(n.name().to_owned());
            vec![qattention(g, &mut names, &mut weights, ix.node(i), q, policy)?]
        } else {
            rewrite_matmul(g, &mut names, &mut weights, ix.node(i), q, policy)?
        };
        rewrites.insert(i, Rewrite { input: x, nodes });
    }
    if rewrites.is_empty() {
        return Err(Error::NothingToQuantize { op_types: "MatMul with a constant weight".into() });
    }
    let matmuls = rewrites.keys().map(|&i| ix.node(i).name().to_owned()).collect::<std::collections::BTreeSet<_>>();
    splice(g, &mut names, rewrites, &inputs)?;
    let embeddings = plan_tables(&GraphIndex::new(g), policy)?;
    let mut contrib = crate::contrib::planned(&GraphIndex::new(g), &[], policy);
    crate::contrib::rewrite(g, &mut names, &contrib)?;
    contrib.attention = attention_names;
    let mut inserts = apply_tables(g, &mut names, &embeddings)?;
    inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    for (at, nodes) in inserts {
        g.insert_nodes(at, nodes);
    }
    g.sort_nodes()?;
    g.remove_unused_initializers();
    let opset_bump = finish(&mut out, !embeddings.is_empty(), !contrib.is_empty())?;
    let inputs = inputs.into_iter().map(|(t, _)| t).collect();
    Ok((out, DynamicPlan { matmuls: matmuls.into_iter().collect(), inputs, embeddings, contrib, opset_bump }))
}

/// The int8 copies written so far (quantized weight, scales, zero points), by float weight name.
type Int8Weights = HashMap<String, [String; 3]>;

/// The int8 copy of node `n`'s weight (input 1) with its scales and zero points (per column or per tensor), added to
/// `g` the first time that weight is read (a weight shared by several nodes, as ALBERT's layers share theirs, stays
/// one): their names.
fn int8_weight(
    g: &mut GraphProto,
    names: &mut NameSet,
    done: &mut Int8Weights,
    n: &NodeProto,
    policy: &Policy,
) -> Result<[String; 3]> {
    if let Some(written) = done.get(&n.input[1]) {
        return Ok(written.clone());
    }
    let spec = QuantSpec { qtype: QuantType::Int8, symmetric: true, reduce_range: policy.reduce_range };
    let w =
        g.initializer(&n.input[1]).ok_or_else(|| Error::Missing { name: n.input[1].clone(), what: "initializer" })?;
    let pair_axes = crate::params::pair_axes(std::iter::once(n), w.dims.len(), policy);
    let (params, axis) = weight_params(w, policy.per_channel.then_some(1), spec, &pair_axes)?;
    let scales: Vec<f32> = params.iter().map(|p| p.scale).collect();
    let shape: Vec<usize> = if axis.is_some() { vec![scales.len()] } else { vec![] };
    let [wq, ws, wzp] = ["quantized", "scale", "zero_point"].map(|s| names.fresh(&format!("{}_{s}", w.name())));
    let wq_tensor = crate::scale::quantized_along(
        &wq,
        w,
        &scales,
        1,
        spec.qtype,
        spec.qtype.range(true, spec.reduce_range),
        &pair_axes,
    )?;
    g.add_initializer(wq_tensor);
    g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&ws, &shape, scales.clone())?);
    g.add_initializer(onnx_ir::tensor_from_vec::<i8>(&wzp, &shape, vec![0; scales.len()])?);
    done.insert(n.input[1].clone(), [wq.clone(), ws.clone(), wzp.clone()]);
    Ok([wq, ws, wzp])
}

/// `QAttention` in place of ONNX Runtime's fused `Attention` `n`, reading the run-time quantized input.
fn qattention(
    g: &mut GraphProto,
    names: &mut NameSet,
    weights: &mut Int8Weights,
    n: &NodeProto,
    [xq, xs, xzp]: &Quantized,
    policy: &Policy,
) -> Result<NodeProto> {
    let [wq, ws, wzp] = int8_weight(g, names, weights, n, policy)?;
    let slot = |k: usize| n.input.get(k).map_or("", String::as_str);
    let inputs = [xq.as_str(), &wq, slot(2), xs, &ws, slot(3), xzp, &wzp, slot(4)];
    let outputs: Vec<&str> = n.output.iter().map(String::as_str).collect();
    Ok(crate::contrib::qattention_node(n, &inputs, &outputs))
}

/// The int8 weight of MatMul `n` (added to `g`) and the four nodes computing its output from the quantized input.
fn rewrite_matmul(
    g: &mut GraphProto,
    names: &mut NameSet,
    weights: &mut Int8Weights,
    n: &NodeProto,
    [xq, xs, xzp]: &Quantized,
    policy: &Policy,
) -> Result<Vec<NodeProto>> {
    let [wq, ws, wzp] = int8_weight(g, names, weights, n, policy)?;
    let out = &n.output[0];
    let mut named = |s: &str| names.fresh(&format!("{}_{s}", n.name()));
    let (scale_mul, quant, cast, out_mul, scale) =
        (named("scales_mul"), named("quant"), named("cast"), named("output_scale_mul"), named("scales"));
    let (int32, float) = (names.fresh(&format!("{out}_int32")), names.fresh(&format!("{out}_int32_float")));
    Ok(vec![
        node("Mul", &scale_mul, &[xs, &ws], &[&scale]),
        node("MatMulInteger", &quant, &[xq, &wq, xzp, &wzp], &[&int32]),
        node("Cast", &cast, &[&int32], &[&float]).with_attr(attr_int("to", DataType::Float as i64)),
        node("Mul", &out_mul, &[&float, &scale], &[out]),
    ])
}

/// Replaces each rewritten MatMul by its nodes, with one DynamicQuantizeLinear per input in front of the first
/// MatMul reading it.
fn splice(
    g: &mut GraphProto,
    names: &mut NameSet,
    mut rewrites: HashMap<usize, Rewrite>,
    inputs: &[(String, Quantized)],
) -> Result<()> {
    let mut done: Vec<&str> = vec![];
    for (i, n) in std::mem::take(&mut g.node).into_iter().enumerate() {
        let Some(r) = rewrites.remove(&i) else {
            g.node.push(n);
            continue;
        };
        if !done.contains(&r.input.as_str()) {
            let (x, [q, s, z]) = inputs
                .iter()
                .find(|(t, _)| *t == r.input)
                .ok_or_else(|| Error::Missing { name: r.input.clone(), what: "quantized input" })?;
            let dql = names.fresh(&format!("{x}_DynamicQuantizeLinear"));
            g.node.push(node("DynamicQuantizeLinear", &dql, &[x], &[q, s, z]));
            done.push(x);
        }
        g.node.extend(r.nodes);
    }
    Ok(())
}
