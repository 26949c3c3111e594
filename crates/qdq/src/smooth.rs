//! SmoothQuant-style migration of activation outlier channels into the following weights.
//!
//! A LayerNorm output `X` (BERT's residual stream after normalisation) has a few channels far larger than the
//! rest, so one per-tensor int8 scale wastes most of its levels on them. For a site where `X = LN(x) · γ + β` feeds
//! MatMuls with constant weights `W` (`[in, out]`), dividing channel `j` of `X` by `s_j` and multiplying row `j` of
//! every `W` by `s_j` leaves `X W` unchanged in exact arithmetic:
//!
//! - `γ_j / s_j`, `β_j / s_j` (the LayerNorm's own parameters absorb the division, no new node on that path);
//! - `W[j, :] · s_j` (per-channel weight quantization, one scale per output column, absorbs the larger rows);
//! - the LayerNorm's other readers (the residual Add, graph outputs) read `X' · s` through one float `Mul`
//!   that restores the original tensor under its original name.
//!
//! Other MatMul inputs (attention context, GELU output; `smooth_targets = all`) have no parameters to absorb the
//! division: one `Mul` by `1/s` in front of their MatMuls does it ([`SmoothForm::ScaleNode`]).
//!
//! `s_j = max|X_j|^α / max|W_j|^(1-α)` (Xiao et al., SmoothQuant, 2023), with `max|X_j|` from calibration
//! (per-channel min/max along the last axis) and `max|W_j|` over all the site's MatMuls. α = 0 leaves activations
//! as they are relative to each other, α = 1 moves all of the spread into the weights.
//!
//! Invariants: rescaled parameters are written as new initializers (an original still read elsewhere stays, one
//! nothing reads any more is dropped); graph inputs and
//! outputs keep their names and meaning; the model records what was done in its metadata
//! ([`SMOOTH_METADATA_KEY`]) so a later `quantize` can tell a smoothed model from a raw one.

use std::collections::{BTreeMap, HashMap};

use onnx_ir::proto::{GraphProto, StringStringEntryProto};
use onnx_ir::{DataType, GraphExt, Model, NameSet, get_attr_int, node, tensor_from_vec, tensor_to_array};

use crate::error::{Error, Result};
use crate::policy::{Policy, SmoothTargets};

/// Model metadata key recording that (and how) a model was smoothed.
pub const SMOOTH_METADATA_KEY: &str = "qdq.smoothquant";

/// Bounds of a smoothing factor, so that a dead channel (max 0) or an extreme ratio cannot make a
/// weight or a LayerNorm parameter overflow or vanish.
const S_MIN: f64 = 1e-4;
const S_MAX: f64 = 1e4;

/// How a site's activation is divided by the factors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmoothForm {
    /// A `LayerNormalization` node (opset 17): its scale and bias (inputs 1 and 2) absorb the division.
    LayerNorm,
    /// A decomposed LayerNorm ending in `Add(Mul(norm, γ), β)` (opset <= 16 exports): γ and β absorb it.
    DecomposedLayerNorm {
        /// The `Mul` node applying γ.
        mul: String,
    },
    /// Anything else (e.g. a GELU output): an explicit `Mul` by `1/s` in front of the MatMuls, which TensorRT fuses
    /// into the producer / the QuantizeLinear (ModelOpt's "pre-quant scale").
    ScaleNode,
}

/// A tensor that can be smoothed: an activation read by MatMuls with constant weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmoothSite {
    /// The activation (a LayerNorm output, or any other with `smooth_targets = all`).
    pub tensor: String,
    /// The node producing it ("" for a graph input).
    pub producer: String,
    /// How the division is applied.
    pub form: SmoothForm,
    /// γ initializer (LayerNorm forms).
    pub gamma: Option<String>,
    /// β initializer, if any.
    pub beta: Option<String>,
    /// Names of the MatMuls reading the tensor as input A whose B is a constant `[channels, out]` weight.
    pub matmuls: Vec<String>,
    /// Whether anything else reads the tensor (then a restoring `Mul` is inserted).
    pub other_readers: bool,
    /// Length of the channel axis (the last one).
    pub channels: usize,
}

/// What smoothing did at one site.
#[derive(Debug, Clone)]
pub struct SmoothedSite {
    pub site: SmoothSite,
    /// The tensor the MatMuls now read (the smoothed LayerNorm output).
    pub smoothed_tensor: String,
    /// The factors `s_j`.
    pub factors: Vec<f32>,
    /// Largest channel max over the median channel max, before and after.
    pub spread_before: f32,
    pub spread_after: f32,
}

fn median(v: &[f32]) -> f32 {
    let mut s: Vec<f32> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f32::total_cmp);
    s[s.len() / 2]
}

fn spread(v: &[f32]) -> f32 {
    let m = median(v);
    let max = v.iter().copied().fold(0.0f32, f32::max);
    if m > 0.0 { max / m } else { 0.0 }
}

/// A 1-D float initializer of length `len` (or a `[1, .., len]` one), by name.
fn vector_init(g: &GraphProto, name: &str) -> Option<usize> {
    let t = g.initializer(name)?;
    if t.data_type() != DataType::Float as i32 {
        return None;
    }
    let dims: Vec<i64> = t.dims.clone();
    let last = *dims.last()?;
    (last > 1 && dims[..dims.len() - 1].iter().all(|&d| d == 1)).then_some(last as usize)
}

/// Where a LayerNorm output's γ / β live.
struct LnParams {
    form: SmoothForm,
    gamma: String,
    beta: Option<String>,
    channels: usize,
}

/// γ / β of the LayerNorm output `n` produces, if it is one.
fn layer_norm_params(
    g: &GraphProto,
    n: &onnx_ir::proto::NodeProto,
    producer: &HashMap<&str, usize>,
    readers: &HashMap<&str, Vec<usize>>,
    graph_outputs: &[&str],
) -> Result<Option<LnParams>> {
    match n.op_type() {
        "LayerNormalization" => {
            // Only normalisation over the last axis has per-channel γ / β along the axis MatMul contracts.
            let axis = get_attr_int(n, "axis")?.unwrap_or(-1);
            let Some(gamma) = n.input.get(1).filter(|s| !s.is_empty()) else { return Ok(None) };
            let Some(c) = vector_init(g, gamma) else { return Ok(None) };
            let beta = n.input.get(2).filter(|s| !s.is_empty()).cloned();
            if axis != -1 || n.output.len() > 1 && n.output[1..].iter().any(|o| !o.is_empty()) {
                return Ok(None);
            }
            if beta.as_deref().is_some_and(|b| vector_init(g, b) != Some(c)) {
                return Ok(None);
            }
            Ok(Some(LnParams { form: SmoothForm::LayerNorm, gamma: gamma.clone(), beta, channels: c }))
        }
        "Add" if n.input.len() == 2 => {
            // Add(Mul(norm, γ), β) with γ, β constant vectors of the same length, the Mul read only here.
            let (mul_out, beta) = if g.is_initializer(&n.input[1]) {
                (&n.input[0], &n.input[1])
            } else if g.is_initializer(&n.input[0]) {
                (&n.input[1], &n.input[0])
            } else {
                return Ok(None);
            };
            let Some(&mi) = producer.get(mul_out.as_str()) else { return Ok(None) };
            let mul = &g.node[mi];
            if mul.op_type() != "Mul" || mul.input.len() != 2 {
                return Ok(None);
            }
            if readers.get(mul_out.as_str()).map(Vec::len) != Some(1) || graph_outputs.contains(&mul_out.as_str()) {
                return Ok(None);
            }
            let Some(gamma) = mul.input.iter().find(|i| g.is_initializer(i)) else { return Ok(None) };
            let other = mul.input.iter().find(|i| *i != gamma);
            // The normalised input must come from a Div (x - mean) / std: a plain scaled tensor is not a LayerNorm.
            if other.and_then(|o| producer.get(o.as_str())).is_none_or(|&p| g.node[p].op_type() != "Div") {
                return Ok(None);
            }
            let (Some(c), Some(cb)) = (vector_init(g, gamma), vector_init(g, beta)) else { return Ok(None) };
            if c != cb {
                return Ok(None);
            }
            let form = SmoothForm::DecomposedLayerNorm { mul: mul.name().to_string() };
            Ok(Some(LnParams { form, gamma: gamma.clone(), beta: Some(beta.clone()), channels: c }))
        }
        _ => Ok(None),
    }
}

/// Finds every smoothable site under `policy`: activations read as input A by quantized MatMuls whose B is a float
/// initializer of shape `[channels, out]`. LayerNorm outputs (either form) always qualify; other activations only
/// with `smooth_targets = all`. Tensors excluded by the policy (`exclude_tensors`) and MatMuls it does not quantize
/// are left alone.
pub fn smoothing_sites(model: &Model, policy: &Policy) -> Result<Vec<SmoothSite>> {
    if !policy.op_types.iter().any(|o| o == "MatMul") {
        return Ok(vec![]);
    }
    let m = policy.matchers()?;
    let g = model.graph();
    let graph_outputs: Vec<&str> = g.output.iter().map(|o| o.name()).collect();
    let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        for inp in &n.input {
            readers.entry(inp.as_str()).or_default().push(i);
        }
    }
    let producer: HashMap<&str, usize> =
        g.node.iter().enumerate().flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i))).collect();
    // Input A of every MatMul that smoothing may rescale, with its weight's row count, in node order.
    let eligible = |i: usize| -> Option<(&str, usize)> {
        let n = &g.node[i];
        if n.op_type() != "MatMul" || n.input.len() != 2 || n.name().is_empty() || !m.node_selected(n.name()) {
            return None;
        }
        let (x, w) = (&n.input[0], &n.input[1]);
        if x == w || g.is_initializer(x) {
            return None;
        }
        let w = g.initializer(w)?;
        (w.data_type() == DataType::Float as i32 && w.dims.len() == 2 && w.dims[0] > 1)
            .then_some((x.as_str(), w.dims[0] as usize))
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut sites = Vec::new();
    for i in 0..g.node.len() {
        let Some((x, weight_rows)) = eligible(i) else { continue };
        if seen.contains(&x) || m.tensor_excluded(x) {
            continue;
        }
        seen.push(x);
        let ln = match producer.get(x) {
            Some(&p) => layer_norm_params(g, &g.node[p], &producer, &readers, &graph_outputs)?,
            None => None,
        };
        let (form, gamma, beta, channels, producer_name) = match ln {
            Some(p) => (p.form, Some(p.gamma), p.beta, p.channels, g.node[producer[x]].name().to_string()),
            None if policy.smooth_targets == SmoothTargets::All => {
                let name = producer.get(x).map(|&p| g.node[p].name().to_string()).unwrap_or_default();
                (SmoothForm::ScaleNode, None, None, weight_rows, name)
            }
            None => continue,
        };
        let mut matmuls = Vec::new();
        let mut other_readers = graph_outputs.contains(&x);
        for &r in readers.get(x).map(Vec::as_slice).unwrap_or_default() {
            match eligible(r) {
                Some((rx, c)) if rx == x && c == channels => {
                    let name = g.node[r].name().to_string();
                    if !matmuls.contains(&name) {
                        matmuls.push(name);
                    }
                }
                _ => other_readers = true,
            }
        }
        if matmuls.is_empty() {
            continue;
        }
        sites.push(SmoothSite {
            tensor: x.to_string(),
            producer: producer_name,
            form,
            gamma,
            beta,
            matmuls,
            other_readers,
            channels,
        });
    }
    Ok(sites)
}

fn node_index(g: &GraphProto, name: &str) -> Result<usize> {
    g.node.iter().position(|n| n.name() == name).ok_or_else(|| Error::Missing { name: name.to_string(), what: "node" })
}

/// Reads a float initializer as a flat vector with its dims.
fn read_f32(g: &GraphProto, name: &str) -> Result<(Vec<f32>, Vec<usize>)> {
    let t = g.initializer(name).ok_or_else(|| Error::Missing { name: name.to_string(), what: "initializer" })?;
    let a = tensor_to_array::<f32>(t)?;
    let shape = a.shape().to_vec();
    Ok((a.into_iter().collect(), shape))
}

/// Makes input `slot` of node `node` read a new initializer holding `values` (named after `base`). The old
/// initializer stays for its other readers and is dropped at the end if nothing reads it any more.
fn replace_input(
    g: &mut GraphProto,
    names: &mut NameSet,
    node: usize,
    slot: usize,
    base: &str,
    shape: &[usize],
    values: Vec<f32>,
) -> Result<()> {
    let name = names.fresh(&format!("{base}_smoothed"));
    g.add_initializer(tensor_from_vec::<f32>(&name, shape, values)?);
    g.rewire_input(node, slot, &name)?;
    Ok(())
}

/// Applies smoothing with strength `alpha` to every site of [`smoothing_sites`]. `absmax` holds, per site tensor,
/// the largest |value| of each channel seen in calibration; a site without an entry is an error (the caller
/// collects them for exactly [`smoothing_sites`]'s tensors). Returns the smoothed model and what was done per site.
pub fn smooth(
    model: &Model,
    policy: &Policy,
    absmax: &BTreeMap<String, Vec<f32>>,
    alpha: f32,
) -> Result<(Model, Vec<SmoothedSite>)> {
    if !(0.0..=1.0).contains(&alpha) {
        return Err(Error::BadOptionValue {
            key: "smooth".into(),
            value: alpha.to_string(),
            expected: "a migration strength in [0, 1]".into(),
        });
    }
    let sites = smoothing_sites(model, policy)?;
    let mut out = model.clone();
    let mut done = Vec::with_capacity(sites.len());
    let g = out.graph_mut();
    let mut names = NameSet::from_graph(g);
    let mut replaced: Vec<String> = Vec::new();
    for site in sites {
        let xmax = absmax
            .get(&site.tensor)
            .ok_or_else(|| Error::MissingRange { tensor: site.tensor.clone(), node: site.matmuls[0].clone() })?;
        if xmax.len() != site.channels {
            return Err(Error::BadWeight {
                tensor: site.tensor.clone(),
                reason: format!(
                    "per-channel calibration has {} channels, the LayerNorm has {}",
                    xmax.len(),
                    site.channels
                ),
            });
        }
        // max |W_j| over every MatMul of the site; each distinct weight is decoded once and kept for the rescale.
        let mut wmax = vec![0f32; site.channels];
        let mut weights: HashMap<String, (Vec<f32>, Vec<usize>)> = HashMap::new();
        for mm in &site.matmuls {
            let wname = g.node[node_index(g, mm)?].input[1].clone();
            if weights.contains_key(&wname) {
                continue;
            }
            let (w, shape) = read_f32(g, &wname)?;
            for (j, row) in w.chunks_exact(shape[1].max(1)).enumerate() {
                let m = row.iter().fold(0f32, |a, v| a.max(v.abs()));
                wmax[j] = wmax[j].max(m);
            }
            weights.insert(wname, (w, shape));
        }
        let factors: Vec<f32> = xmax
            .iter()
            .zip(&wmax)
            .map(|(&x, &w)| {
                if x > 0.0 && w > 0.0 && x.is_finite() && w.is_finite() {
                    let s = (x as f64).powf(alpha as f64) / (w as f64).powf(1.0 - alpha as f64);
                    s.clamp(S_MIN, S_MAX) as f32
                } else {
                    1.0
                }
            })
            .collect();

        // γ, β ← γ / s, β / s (LayerNorm forms).
        let ln_params = match &site.form {
            SmoothForm::LayerNorm => {
                let i = node_index(g, &site.producer)?;
                Some((i, 1, (i, 2)))
            }
            SmoothForm::DecomposedLayerNorm { mul } => {
                let mi = node_index(g, mul)?;
                let slot = g.node[mi].input.iter().position(|x| Some(x) == site.gamma.as_ref()).unwrap_or(1);
                let ai = node_index(g, &site.producer)?;
                let bslot = g.node[ai].input.iter().position(|x| Some(x) == site.beta.as_ref()).unwrap_or(1);
                Some((mi, slot, (ai, bslot)))
            }
            SmoothForm::ScaleNode => None,
        };
        if let (Some((gamma_node, gamma_slot, (bn, bs))), Some(gamma)) = (ln_params, &site.gamma) {
            let (gv, gshape) = read_f32(g, gamma)?;
            let gv: Vec<f32> = gv.iter().zip(&factors).map(|(v, s)| v / s).collect();
            replace_input(g, &mut names, gamma_node, gamma_slot, gamma, &gshape, gv)?;
            replaced.push(gamma.clone());
            if let Some(beta) = &site.beta {
                let (bv, bshape) = read_f32(g, beta)?;
                let bv: Vec<f32> = bv.iter().zip(&factors).map(|(v, s)| v / s).collect();
                replace_input(g, &mut names, bn, bs, beta, &bshape, bv)?;
                replaced.push(beta.clone());
            }
        }
        // W[j, :] ← W[j, :] · s_j, one copy per distinct weight.
        let mut rewritten: HashMap<String, String> = HashMap::new();
        let smoothed = names.fresh(&format!("{}_smoothed", site.tensor));
        for mm in &site.matmuls {
            let i = node_index(g, mm)?;
            let wname = g.node[i].input[1].clone();
            if let Some(new) = rewritten.get(&wname) {
                g.rewire_input(i, 1, &new.clone())?;
            } else if let Some((mut w, shape)) = weights.remove(&wname) {
                let cols = shape[1].max(1);
                for (row, s) in w.chunks_exact_mut(cols).zip(&factors) {
                    row.iter_mut().for_each(|v| *v *= s);
                }
                replace_input(g, &mut names, i, 1, &wname, &shape, w)?;
                rewritten.insert(wname.clone(), g.node[i].input[1].clone());
                replaced.push(wname);
            } else {
                return Err(Error::PlanMismatch { reason: format!("weight '{wname}' of '{mm}' was not read") });
            }
            g.rewire_input(i, 0, &smoothed)?;
        }
        if site.form == SmoothForm::ScaleNode {
            // X' = X · (1/s) in front of the MatMuls (placed before the first of them); other readers keep X.
            let first = site.matmuls.iter().map(|mm| node_index(g, mm)).collect::<Result<Vec<_>>>()?;
            let at = first.into_iter().min().unwrap_or(0);
            let sname = names.fresh(&format!("{}_smooth_inverse", site.tensor));
            let inverse: Vec<f32> = factors.iter().map(|s| 1.0 / s).collect();
            g.add_initializer(tensor_from_vec::<f32>(&sname, &[site.channels], inverse)?);
            let mul_name = names.fresh(&format!("{}_smooth", site.tensor));
            g.insert_nodes(at, vec![node("Mul", &mul_name, &[&site.tensor, &sname], &[&smoothed])]);
        } else {
            // The LayerNorm now writes the smoothed tensor; other readers get the original back through one Mul.
            let pi = node_index(g, &site.producer)?;
            g.node[pi].output[0] = smoothed.clone();
            if site.other_readers {
                let sname = names.fresh(&format!("{}_smooth_factors", site.tensor));
                g.add_initializer(tensor_from_vec::<f32>(&sname, &[site.channels], factors.clone())?);
                let mul_name = names.fresh(&format!("{}_unsmooth", site.producer));
                g.insert_nodes(pi + 1, vec![node("Mul", &mul_name, &[&smoothed, &sname], &[&site.tensor])]);
            } else if let Some(v) = g.value_info.iter_mut().find(|v| v.name() == site.tensor) {
                v.name = Some(smoothed.clone());
            }
        }
        let after: Vec<f32> = xmax.iter().zip(&factors).map(|(x, s)| x / s).collect();
        done.push(SmoothedSite {
            spread_before: spread(xmax),
            spread_after: spread(&after),
            site,
            smoothed_tensor: smoothed,
            factors,
        });
    }
    // Drop the originals nothing reads any more (not touching anything else of the model; a graph with subgraphs
    // keeps them, as subgraphs may read outer initializers).
    let has_subgraphs = g.node.iter().any(|n| onnx_ir::subgraphs(n).next().is_some());
    if !has_subgraphs {
        let keep: Vec<String> = g.output.iter().chain(&g.input).map(|v| v.name().to_string()).collect();
        replaced.retain(|r| g.consumers_of(r).is_empty() && !keep.contains(r));
        g.initializer.retain(|t| !replaced.iter().any(|r| r == t.name()));
    }
    if !done.is_empty() {
        out.proto.metadata_props.retain(|e| e.key() != SMOOTH_METADATA_KEY);
        out.proto.metadata_props.push(StringStringEntryProto {
            key: Some(SMOOTH_METADATA_KEY.into()),
            value: Some(format!("alpha={alpha}; tensors={}", done.len())),
        });
    }
    Ok((out, done))
}

/// Refuses to plan a smoothing policy on a model it would smooth but that is not smoothed: the policy's ranges
/// name the smoothed model's tensors, so the raw model would silently lose those MatMul inputs' pairs.
pub(crate) fn check_smoothed(model: &Model, policy: &Policy) -> Result<()> {
    match policy.smooth {
        Some(alpha) if smoothing_record(model).is_none() && !smoothing_sites(model, policy)?.is_empty() => {
            Err(Error::NotSmoothed { alpha })
        }
        _ => Ok(()),
    }
}

/// Statistics of several calibration runs can be merged only when no run smooths `model`: each run smooths with its
/// own statistics, so their ranges would describe different models.
pub fn check_mergeable(model: &Model, policy: &Policy) -> Result<()> {
    if policy.smooth.is_some() && !smoothing_sites(model, policy)?.is_empty() {
        return Err(Error::MergeWithSmoothing);
    }
    Ok(())
}

/// The smoothing recorded in a model's metadata by [`smooth`], if any (e.g. `alpha=0.5; tensors=13`).
pub fn smoothing_record(model: &Model) -> Option<&str> {
    model.proto.metadata_props.iter().find(|e| e.key() == SMOOTH_METADATA_KEY).map(|e| e.value())
}
