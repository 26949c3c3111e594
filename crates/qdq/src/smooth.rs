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
//! division: one `Mul` by `1/s` in front of their MatMuls does it ([`SmoothForm::ScaleNode`]), except an attention
//! context whose value projection takes it ([`SmoothForm::ValueProjection`]; for ONNX Runtime's fused `Attention`, the
//! V columns of its packed weight: [`SmoothForm::PackedValue`]). `smooth_targets = layernorm-context`
//! leaves the GELU outputs out: on ONNX Runtime's CPU EP their `Mul`s are the widest of these kernels.
//!
//! `s_j = max|X_j|^α / max|W_j|^(1-α)` (Xiao et al., SmoothQuant, 2023), with `max|X_j|` from calibration
//! (per-channel min/max along the last axis) and `max|W_j|` over all the site's MatMuls. α = 0 leaves activations
//! as they are relative to each other, α = 1 moves all of the spread into the weights.
//!
//! Invariants: rescaled parameters are written as new initializers (an original still read elsewhere stays, one
//! nothing reads any more is dropped, with its graph input if an old exporter listed it as one); graph inputs and
//! outputs keep their names and meaning; the model records what was done in its metadata
//! ([`SMOOTH_METADATA_KEY`]) so a later `quantize` can tell a smoothed model from a raw one.

use std::collections::{BTreeMap, HashMap, HashSet};

use onnx_ir::proto::{GraphProto, StringStringEntryProto};
use onnx_ir::{GraphExt, GraphIndex, Model, NameSet, node, tensor_from_vec, tensor_to_array};

use crate::error::{Error, Result};
use crate::patterns::{self, ConstWeightMatMul, LayerNormForm};
use crate::policy::{Matchers, Policy, SmoothContext, SmoothLayerNorm, SmoothTargets};

/// Model metadata key recording that (and how) a model was smoothed.
pub const SMOOTH_METADATA_KEY: &str = "qdq.smoothquant";

/// Bounds of a smoothing factor, so that a dead channel (max 0) or an extreme ratio cannot make a
/// weight or a LayerNorm parameter overflow or vanish.
const S_MIN: f64 = 1e-4;
const S_MAX: f64 = 1e4;

/// How a site's activation is divided by the factors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmoothForm {
    /// One LayerNorm node (`LayerNormalization`, or ONNX Runtime's `SkipLayerNormalization` /
    /// `EmbedLayerNormalization`): its scale and bias inputs absorb the division.
    LayerNorm,
    /// A decomposed LayerNorm ending in `Add(Mul(norm, γ), β)` (opset <= 16 exports): γ and β absorb it.
    DecomposedLayerNorm {
        /// The `Mul` node applying γ.
        mul: String,
    },
    /// Anything else (e.g. a GELU output): an explicit `Mul` by `1/s` in front of the MatMuls, which TensorRT fuses
    /// into the producer / the QuantizeLinear (ModelOpt's "pre-quant scale").
    ScaleNode,
    /// An attention context whose value projection absorbs the division (its weight's columns and its bias divided
    /// by `s`): nothing is added to the graph. Only with the policy's `smooth_context = projection` (`cpu`: on ORT's
    /// CPU EP a `Mul` is a kernel of its own, where TensorRT fuses it) and where the site's weights are its own; the
    /// merging `Reshape` then writes the smoothed tensor. Where `P·V` is quantized (tune's all-integer `cpu`
    /// candidate), its `V` input is the smoothed one and is calibrated as such.
    ValueProjection {
        /// The value projection `MatMul` node.
        matmul: String,
        /// Its bias `Add` node and bias initializer, if any.
        bias: Option<(String, String)>,
        /// The `Reshape` node writing the context.
        merge: String,
    },
    /// The same for a context written by ONNX Runtime's fused `Attention`: the V part of its packed weight's columns
    /// (and of its bias) absorbs the division, and the node writes the smoothed tensor.
    PackedValue {
        /// The `Attention` node.
        attention: String,
        /// The first column of V's part of the packed weight (`q + k`).
        offset: usize,
    },
}

/// A tensor that can be smoothed: an activation read by MatMuls with constant weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmoothSite {
    /// The activation (a LayerNorm output, or another as `smooth_targets` says).
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

/// Finds every smoothable site under `policy`: activations read as input A by quantized MatMuls whose B is a float
/// initializer of shape `[channels, out]`. LayerNorm outputs (either form) qualify unless `smooth_targets = others`;
/// other activations with `all` and `others`, and with `layernorm-context` the attention contexts and LayerNorm
/// outputs seen through shape-only ops (not the GELU outputs). Tensors excluded by the policy (`exclude_tensors`) and
/// MatMuls it does not quantize are left alone.
pub fn smoothing_sites(model: &Model, policy: &Policy) -> Result<Vec<SmoothSite>> {
    let (mut sites, targeted): (Vec<SmoothSite>, Vec<bool>) = sites_before_grouping(model, policy)?.into_iter().unzip();
    let mut keep = vec![true; sites.len()];
    let g = model.graph();
    // A site sharing its factors with others (ALBERT's layers read one output projection) keeps the Mul: the value
    // projections would have to share them too.
    for group in shared_weight_groups(g, &sites)? {
        if group.len() > 1 {
            for &k in &group {
                if matches!(sites[k].form, SmoothForm::ValueProjection { .. } | SmoothForm::PackedValue { .. }) {
                    sites[k].form = SmoothForm::ScaleNode;
                }
            }
        }
        // Sites sharing a weight are smoothed together or not at all (the weight is rescaled once for all of them): a
        // group is left out only when `smooth_targets` takes none of it (ALBERT's shared down projection), and a
        // group it takes keeps its other sites, each with its `Mul` (ALBERT's shared query, key and value read the
        // embedding projection's output in the first layer and a LayerNorm output after).
        if !group.iter().any(|&k| targeted[k]) {
            group.iter().for_each(|&k| keep[k] = false);
        }
    }
    Ok(sites.into_iter().zip(keep).filter_map(|(site, k)| k.then_some(site)).collect())
}

/// Each site with whether the policy's [`SmoothTargets`] takes it.
fn sites_before_grouping(model: &Model, policy: &Policy) -> Result<Vec<(SmoothSite, bool)>> {
    if !policy.op_types.iter().any(|o| crate::types::MATMUL_OPS.contains(&o.as_str())) {
        return Ok(vec![]);
    }
    let m = policy.matchers()?;
    let ix = GraphIndex::new(model.graph());
    // Before the statistics pass that smoothing needs, not after it.
    crate::select::check_node_patterns(&ix, policy, &m)?;
    let mut seen = HashSet::new();
    let mut sites = Vec::new();
    // Ranks for the value-projection check, computed once (only a policy dividing contexts there uses them).
    let ranks = if policy.smooth_context == SmoothContext::Projection {
        onnx_ir::ranks(ix.graph())
    } else {
        Default::default()
    };
    for i in 0..ix.graph().node.len() {
        let Some(mm) = patterns::const_weight_matmul(&ix, i, &m) else { continue };
        if m.tensor_excluded(mm.input) || !seen.insert(mm.input) {
            continue;
        }
        if let Some(site) = site_of(&ix, &m, mm, policy, &ranks)? {
            sites.push(site);
        }
    }
    Ok(sites)
}

/// The site of `mm`'s input: a LayerNorm output (γ / β absorb the division) or, with `smooth_targets = all`, any
/// other activation; with every constant-weight MatMul reading it whose weight has its channel count.
fn site_of(
    ix: &GraphIndex,
    m: &Matchers,
    mm: ConstWeightMatMul,
    policy: &Policy,
    ranks: &HashMap<String, usize>,
) -> Result<Option<(SmoothSite, bool)>> {
    let x = mm.input;
    let producer = ix.producer_node(x);
    let ln = match producer {
        Some(n) => patterns::layer_norm_params(ix, n)?,
        None => None,
    };
    let is_layer_norm = ln.is_some();
    let (form, gamma, beta, channels) = match (ln, policy.smooth_targets) {
        (Some(_), SmoothTargets::Others) | (None, SmoothTargets::LayerNorm) => return Ok(None),
        (Some(p), _) => (SmoothForm::from(p.form), Some(p.gamma), p.beta, p.channels),
        (None, _) => (SmoothForm::ScaleNode, None, None, mm.rows),
    };
    let mut matmuls = Vec::new();
    let mut other_readers = ix.is_graph_output(x);
    for &(r, _) in ix.readers(x) {
        match patterns::const_weight_matmul(ix, r, m) {
            Some(o) if o.input == x && o.rows == channels => {
                let name = ix.node(r).name().to_string();
                if !matmuls.contains(&name) {
                    matmuls.push(name);
                }
            }
            _ => other_readers = true,
        }
    }
    if matmuls.is_empty() {
        return Ok(None);
    }
    // `layernorm-context` takes what shape-only ops show to be a LayerNorm output (a `Gemm` export's `[B·S, H]` view)
    // or an attention's output, and leaves the rest (the GELU outputs).
    let targeted = policy.smooth_targets != SmoothTargets::LayerNormContext
        || is_layer_norm
        || match patterns::behind_shape_ops(ix, x) {
            Some(n) => {
                patterns::is_attention_output(ix, n)
                    || patterns::layer_norm_params(ix, n)?.is_some_and(|p| p.channels == channels)
            }
            None => false,
        };
    let form = final_form(ix, (x, channels, ranks), form, policy, other_readers);
    let (gamma, beta) = if form == SmoothForm::ScaleNode { (None, None) } else { (gamma, beta) };
    let producer = producer.map(|n| n.name().to_string()).unwrap_or_default();
    let site = SmoothSite { tensor: x.to_string(), producer, form, gamma, beta, matmuls, other_readers, channels };
    Ok(Some((site, targeted)))
}

/// The form a site of `x` (`channels` wide) found as `form` takes under `policy`: an attention context read by nothing
/// else in its value projection where `smooth_context = projection` lets it; a LayerNorm output others read too by a
/// `Mul` in front of its MatMuls under `smooth_layernorm = mul` (the residual path then reads it as it is).
fn final_form(
    ix: &GraphIndex,
    (x, channels, ranks): (&str, usize, &HashMap<String, usize>),
    form: SmoothForm,
    policy: &Policy,
    other_readers: bool,
) -> SmoothForm {
    match form {
        SmoothForm::ScaleNode if policy.smooth_context == SmoothContext::Projection && !other_readers => {
            context_form(ix, x, channels, ranks)
        }
        SmoothForm::LayerNorm | SmoothForm::DecomposedLayerNorm { .. }
            if policy.smooth_layernorm == SmoothLayerNorm::Mul && other_readers =>
        {
            SmoothForm::ScaleNode
        }
        f => f,
    }
}

/// How an attention context `x` read by nothing but its output projection takes the division: in its value
/// projection, in a fused `Attention`'s packed weight, else by a `Mul`.
fn context_form(ix: &GraphIndex, x: &str, channels: usize, ranks: &HashMap<String, usize>) -> SmoothForm {
    if let Some(v) = patterns::value_projection(ix, x, channels, ranks) {
        return SmoothForm::ValueProjection { matmul: v.matmul, bias: v.bias, merge: v.merge };
    }
    match patterns::packed_attention_value(ix, x, channels) {
        Some((attention, offset)) => SmoothForm::PackedValue { attention, offset },
        None => SmoothForm::ScaleNode,
    }
}

impl From<LayerNormForm> for SmoothForm {
    fn from(f: LayerNormForm) -> SmoothForm {
        match f {
            LayerNormForm::Fused => SmoothForm::LayerNorm,
            LayerNormForm::Decomposed { mul } => SmoothForm::DecomposedLayerNorm { mul },
        }
    }
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

/// Applies smoothing with strength `alpha` to every site of [`smoothing_sites`]. `absmax` holds, per site tensor,
/// the largest |value| of each channel seen in calibration; a site without an entry is an error (the caller
/// collects them for exactly [`smoothing_sites`]'s tensors). Returns the smoothed model and what was done per site.
pub fn smooth(
    model: &Model,
    policy: &Policy,
    absmax: &BTreeMap<String, Vec<f32>>,
    alpha: f32,
) -> Result<(Model, Vec<SmoothedSite>)> {
    let mut out = model.clone();
    let done = smooth_in_place(&mut out, policy, absmax, alpha)?;
    Ok((out, done))
}

/// [`smooth`] on the model itself, for callers that do not need the original (a model of gigabytes is then not held
/// twice). On an error the model may be partly rewritten: discard it.
pub fn smooth_in_place(
    out: &mut Model,
    policy: &Policy,
    absmax: &BTreeMap<String, Vec<f32>>,
    alpha: f32,
) -> Result<Vec<SmoothedSite>> {
    if !(0.0..=1.0).contains(&alpha) {
        return Err(Error::BadOptionValue {
            key: "smooth".into(),
            value: alpha.to_string(),
            expected: "a migration strength in [0, 1]".into(),
        });
    }
    let sites = smoothing_sites(out, policy)?;
    let mut done = Vec::with_capacity(sites.len());
    let g = out.graph_mut();
    let names = NameSet::from_graph(g);
    let mut rw = Rewrite { g, names, replaced: Vec::new(), rewritten: HashMap::new(), projections: Vec::new() };
    // Sites whose MatMuls share a weight (ALBERT's layers read one set) are smoothed together: one set of factors,
    // so the weight is rescaled once and stays one initializer. A group's weights are decoded while it is rewritten.
    for (group, members) in shared_weight_groups(rw.g, &sites)?.into_iter().enumerate() {
        let (factors, mut weights) = group_factors(rw.g, &sites, &members, absmax, alpha)?;
        for k in members {
            done.push((k, rw.smooth_site(group, &sites[k], &factors, &mut weights, absmax)?));
        }
    }
    done.sort_by_key(|(k, _)| *k);
    let done: Vec<SmoothedSite> = done.into_iter().map(|(_, d)| d).collect();
    // Last, so that a value projection's weight is divided in whatever form the LayerNorm site before it wrote.
    rw.divide_value_projections()?;
    rw.drop_replaced();
    if !done.is_empty() {
        out.proto.metadata_props.retain(|e| e.key() != SMOOTH_METADATA_KEY);
        out.proto.metadata_props.push(StringStringEntryProto {
            key: Some(SMOOTH_METADATA_KEY.into()),
            value: Some(format!("alpha={alpha}; tensors={}; factors={}", done.len(), fingerprint(&done))),
        });
    }
    Ok(done)
}

/// The factors of one group of sites sharing weights (`members`, indices into `sites`): each channel's largest
/// calibrated value over the group against its largest weight row over the group's MatMuls; with the group's weights
/// decoded, for the rescale.
fn group_factors(
    g: &GraphProto,
    sites: &[SmoothSite],
    members: &[usize],
    absmax: &BTreeMap<String, Vec<f32>>,
    alpha: f32,
) -> Result<(Vec<f32>, Weights)> {
    let channels = sites[members[0]].channels;
    let mut xmax = vec![0f32; channels];
    for &k in members {
        for (m, x) in xmax.iter_mut().zip(site_absmax(absmax, &sites[k])?) {
            *m = m.max(*x);
        }
    }
    let matmuls: Vec<&String> = members.iter().flat_map(|&k| &sites[k].matmuls).collect();
    let (wmax, weights) = weight_row_max(g, &matmuls, channels)?;
    Ok((factors(&xmax, &wmax, alpha), weights))
}

/// The calibrated per-channel max of a site's tensor, checked against its channel count.
fn site_absmax<'a>(absmax: &'a BTreeMap<String, Vec<f32>>, site: &SmoothSite) -> Result<&'a [f32]> {
    let xmax = absmax
        .get(&site.tensor)
        .ok_or_else(|| Error::MissingRange { tensor: site.tensor.clone(), node: site.matmuls[0].clone() })?;
    if xmax.len() != site.channels {
        return Err(Error::BadWeight {
            tensor: site.tensor.clone(),
            reason: format!("per-channel calibration has {} channels, the LayerNorm has {}", xmax.len(), site.channels),
        });
    }
    Ok(xmax)
}

/// A weight's values and shape, by initializer name.
type Weights = HashMap<String, (Vec<f32>, Vec<usize>)>;

/// The contracted axis of the weight of MatMul-like node `mm` (0 unless it reads B transposed).
fn contract_axis(g: &GraphProto, mm: usize) -> usize {
    patterns::matmul_rule(&g.node[mm]).and_then(|r| r.contract_axis).unwrap_or(0)
}

/// Index in a row-major `[rows, cols]` weight of element `k`'s contracted channel.
fn channel_of(k: usize, cols: usize, axis: usize) -> usize {
    if axis == 0 { k / cols.max(1) } else { k % cols.max(1) }
}

/// `max |W_j|` over the MatMuls `matmuls` (`j` along each weight's contracted axis, `channels` of them); each
/// distinct weight is decoded once and kept for the rescale.
fn weight_row_max(g: &GraphProto, matmuls: &[&String], channels: usize) -> Result<(Vec<f32>, Weights)> {
    let mut wmax = vec![0f32; channels];
    let mut weights = Weights::new();
    let mut seen = HashSet::new();
    for mm in matmuls {
        let i = node_index(g, mm)?;
        let wname = g.node[i].input[1].clone();
        let axis = contract_axis(g, i);
        if !seen.insert((wname.clone(), axis)) {
            continue;
        }
        if !weights.contains_key(&wname) {
            let (w, shape) = read_f32(g, &wname)?;
            weights.insert(wname.clone(), (w, shape));
        }
        let (w, shape) = &weights[&wname];
        for (k, v) in w.iter().enumerate() {
            let j = channel_of(k, shape[1], axis);
            wmax[j] = wmax[j].max(v.abs());
        }
    }
    Ok((wmax, weights))
}

/// The sites in groups that must share their factors, each group's sites in order, groups in the order of their
/// first site: sites whose MatMuls read one weight initializer along the same axis, over the same channel count,
/// are one group (transitively); every other site is a group of its own.
fn shared_weight_groups(g: &GraphProto, sites: &[SmoothSite]) -> Result<Vec<Vec<usize>>> {
    let mut parent: Vec<usize> = (0..sites.len()).collect();
    fn root(parent: &mut [usize], mut k: usize) -> usize {
        while parent[k] != k {
            parent[k] = parent[parent[k]];
            k = parent[k];
        }
        k
    }
    let mut first_reader: HashMap<(String, usize, usize), usize> = HashMap::new();
    for (k, site) in sites.iter().enumerate() {
        for mm in &site.matmuls {
            let i = node_index(g, mm)?;
            let key = (g.node[i].input[1].clone(), contract_axis(g, i), site.channels);
            let other = *first_reader.entry(key).or_insert(k);
            let (a, b) = (root(&mut parent, other), root(&mut parent, k));
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut at: HashMap<usize, usize> = HashMap::new();
    for k in 0..sites.len() {
        let r = root(&mut parent, k);
        let slot = *at.entry(r).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[slot].push(k);
    }
    Ok(groups)
}

/// `s_j = max|X_j|^α / max|W_j|^(1-α)`, clamped; 1 for a dead or non-finite channel.
fn factors(xmax: &[f32], wmax: &[f32], alpha: f32) -> Vec<f32> {
    xmax.iter()
        .zip(wmax)
        .map(|(&x, &w)| {
            if x > 0.0 && w > 0.0 && x.is_finite() && w.is_finite() {
                let s = (x as f64).powf(alpha as f64) / (w as f64).powf(1.0 - alpha as f64);
                s.clamp(S_MIN, S_MAX) as f32
            } else {
                1.0
            }
        })
        .collect()
}

/// The graph being smoothed, its names, the initializers replaced so far (dropped at the end if unread), and what
/// each group of sites sharing factors has written already (see [`Written`]), so that a shared parameter stays one.
struct Rewrite<'g> {
    g: &'g mut GraphProto,
    names: NameSet,
    replaced: Vec<String>,
    rewritten: HashMap<Written, String>,
    /// Value projections still to divide by their site's factors (their group, the site's form, the factors).
    projections: Vec<(usize, SmoothForm, Vec<f32>)>,
}

/// An initializer written for a group of sites (by group number): the rescaled copy of an original (a weight with its
/// contracted axis, or a LayerNorm parameter), or the group's factors / inverse factors a `Mul` reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Written {
    Weight(usize, String, usize),
    Param(usize, String),
    Factors(usize),
    Inverse(usize),
    /// A value projection's weight or bias divided along its output channels.
    Columns(usize, String),
}

impl Rewrite<'_> {
    /// Smooths one site of group `group` by the group's `factors`: LayerNorm parameters, weights, the division.
    fn smooth_site(
        &mut self,
        group: usize,
        site: &SmoothSite,
        factors: &[f32],
        weights: &mut Weights,
        absmax: &BTreeMap<String, Vec<f32>>,
    ) -> Result<SmoothedSite> {
        self.rescale_layer_norm(group, site, factors)?;
        let smoothed = self.names.fresh(&format!("{}_smoothed", site.tensor));
        self.rescale_weights(group, site, factors, weights, &smoothed)?;
        self.divide(group, site, factors, &smoothed)?;
        let own = site_absmax(absmax, site)?;
        let after: Vec<f32> = own.iter().zip(factors).map(|(x, s)| x / s).collect();
        Ok(SmoothedSite {
            spread_before: spread(own),
            spread_after: spread(&after),
            site: site.clone(),
            smoothed_tensor: smoothed,
            factors: factors.to_vec(),
        })
    }

    /// Makes input `slot` of node `node` read the initializer written as `key`, writing it (named after `base`) from
    /// `values()` the first time. A replaced original stays for its other readers and is dropped at the end if
    /// nothing reads it any more.
    fn read_written(
        &mut self,
        key: Written,
        (node, slot): (usize, usize),
        base: &str,
        shape: &[usize],
        values: impl FnOnce() -> Result<Vec<f32>>,
    ) -> Result<()> {
        let name = match self.rewritten.get(&key) {
            Some(name) => name.clone(),
            None => {
                let rescaled = matches!(key, Written::Weight(..) | Written::Param(..) | Written::Columns(..));
                let suffix = if rescaled { "_smoothed" } else { "" };
                let name = self.names.fresh(&format!("{base}{suffix}"));
                self.g.add_initializer(tensor_from_vec::<f32>(&name, shape, values()?)?);
                if rescaled {
                    self.replaced.push(base.to_string());
                }
                self.rewritten.insert(key, name.clone());
                name
            }
        };
        Ok(self.g.rewire_input(node, slot, &name)?)
    }

    /// γ, β ← γ / s, β / s (LayerNorm forms).
    fn rescale_layer_norm(&mut self, group: usize, site: &SmoothSite, factors: &[f32]) -> Result<()> {
        let g = &*self.g;
        let (gamma_at, beta_at) = match &site.form {
            SmoothForm::LayerNorm => {
                // γ, β are adjacent inputs: 1, 2 of LayerNormalization; 2, 3 of SkipLayerNormalization; 5, 6 of
                // EmbedLayerNormalization.
                let i = node_index(g, &site.producer)?;
                let gamma = g.node[i].input.iter().position(|x| Some(x) == site.gamma.as_ref()).unwrap_or(1);
                ((i, gamma), (i, gamma + 1))
            }
            SmoothForm::DecomposedLayerNorm { mul } => {
                let mi = node_index(g, mul)?;
                let slot = g.node[mi].input.iter().position(|x| Some(x) == site.gamma.as_ref()).unwrap_or(1);
                let ai = node_index(g, &site.producer)?;
                let bslot = g.node[ai].input.iter().position(|x| Some(x) == site.beta.as_ref()).unwrap_or(1);
                ((mi, slot), (ai, bslot))
            }
            SmoothForm::ScaleNode | SmoothForm::ValueProjection { .. } | SmoothForm::PackedValue { .. } => {
                return Ok(());
            }
        };
        for (at, param) in [(gamma_at, &site.gamma), (beta_at, &site.beta)] {
            let Some(param) = param else { continue };
            let (v, shape) = read_f32(self.g, param)?;
            let key = Written::Param(group, param.clone());
            self.read_written(key, at, param, &shape, || Ok(v.iter().zip(factors).map(|(v, s)| v / s).collect()))?;
        }
        Ok(())
    }

    /// W[j, :] ← W[j, :] · s_j (W[:, j] for a transposed weight), one copy per distinct weight and axis in the group;
    /// every MatMul of the site reads `smoothed`.
    fn rescale_weights(
        &mut self,
        group: usize,
        site: &SmoothSite,
        factors: &[f32],
        weights: &mut Weights,
        smoothed: &str,
    ) -> Result<()> {
        for mm in &site.matmuls {
            let i = node_index(self.g, mm)?;
            let wname = self.g.node[i].input[1].clone();
            let axis = contract_axis(self.g, i);
            let shape = match weights.get(&wname) {
                Some((_, shape)) => shape.clone(),
                None => {
                    return Err(Error::Missing { name: wname, what: "weight initializer read by a smoothed MatMul" });
                }
            };
            let key = Written::Weight(group, wname.clone(), axis);
            self.read_written(key, (i, 1), &wname, &shape, || {
                let (w, _) = &weights[&wname];
                Ok(w.iter().enumerate().map(|(k, v)| v * factors[channel_of(k, shape[1], axis)]).collect())
            })?;
            self.g.rewire_input(i, 0, smoothed)?;
        }
        Ok(())
    }

    /// Produces `smoothed = X / s`: a `Mul` by `1/s` in front of the MatMuls (other readers keep X), or, for a
    /// LayerNorm, the LayerNorm itself writing `smoothed` and one `Mul` by `s` restoring X for its other readers.
    fn divide(&mut self, group: usize, site: &SmoothSite, factors: &[f32], smoothed: &str) -> Result<()> {
        if site.form == SmoothForm::ScaleNode {
            let first = site.matmuls.iter().map(|mm| node_index(self.g, mm)).collect::<Result<Vec<_>>>()?;
            let at = first.into_iter().min().unwrap_or(0);
            let mul_name = self.names.fresh(&format!("{}_smooth", site.tensor));
            self.g.insert_nodes(at, vec![node("Mul", &mul_name, &[&site.tensor, ""], &[smoothed])]);
            let base = format!("{}_smooth_inverse", site.tensor);
            let inverse = || Ok(factors.iter().map(|s| 1.0 / s).collect());
            return self.read_written(Written::Inverse(group), (at, 1), &base, &[site.channels], inverse);
        }
        if let SmoothForm::ValueProjection { merge: writer, .. } | SmoothForm::PackedValue { attention: writer, .. } =
            &site.form
        {
            // The merge (or the fused Attention) writes the smoothed context (nothing else read it); its weights are
            // divided at the end.
            let mi = node_index(self.g, writer)?;
            self.g.node[mi].output[0] = smoothed.to_string();
            self.rename_value_info(&site.tensor, smoothed);
            self.projections.push((group, site.form.clone(), factors.to_vec()));
            return Ok(());
        }
        let pi = node_index(self.g, &site.producer)?;
        self.g.node[pi].output[0] = smoothed.to_string();
        if site.other_readers {
            let mul_name = self.names.fresh(&format!("{}_unsmooth", site.producer));
            self.g.insert_nodes(pi + 1, vec![node("Mul", &mul_name, &[smoothed, ""], &[&site.tensor])]);
            let base = format!("{}_smooth_factors", site.tensor);
            let restore = || Ok(factors.to_vec());
            self.read_written(Written::Factors(group), (pi + 1, 1), &base, &[site.channels], restore)?;
        } else {
            self.rename_value_info(&site.tensor, smoothed);
        }
        Ok(())
    }

    fn rename_value_info(&mut self, from: &str, to: &str) {
        if let Some(v) = self.g.value_info.iter_mut().find(|v| v.name() == from) {
            v.name = Some(to.to_string());
        }
    }

    /// W[:, j] ← W[:, j] / s_j and b_j ← b_j / s_j for every value projection recorded by [`Self::divide`], reading
    /// the weight its MatMul reads now (the row-rescaled copy when the LayerNorm before it was smoothed).
    fn divide_value_projections(&mut self) -> Result<()> {
        for (group, form, factors) in std::mem::take(&mut self.projections) {
            // (node, input slot) of each parameter divided, and the first of its columns that are the context's
            let (targets, offset) = match &form {
                SmoothForm::ValueProjection { matmul, bias, .. } => {
                    let mut targets = vec![(node_index(self.g, matmul)?, 1)];
                    if let Some((add, b)) = bias {
                        let ai = node_index(self.g, add)?;
                        let slot = self.g.node[ai].input.iter().position(|i| i == b);
                        targets
                            .push((ai, slot.ok_or_else(|| Error::Missing { name: add.clone(), what: "bias input" })?));
                    }
                    (targets, 0)
                }
                SmoothForm::PackedValue { attention, offset } => {
                    let ai = node_index(self.g, attention)?;
                    let bias = self.g.node[ai].input.get(2).is_some_and(|b| !b.is_empty());
                    (if bias { vec![(ai, 1), (ai, 2)] } else { vec![(ai, 1)] }, *offset)
                }
                _ => continue,
            };
            for (node, slot) in targets {
                self.divide_columns(group, (node, slot), &factors, offset)?;
            }
        }
        Ok(())
    }

    /// Divides the last `factors.len()` columns of the float parameter at `at` (node, input slot), which has `offset`
    /// columns before them (a packed weight's Q and K), by the factors, in the copy [`Self::read_written`] keeps for
    /// the group.
    fn divide_columns(&mut self, group: usize, at: (usize, usize), factors: &[f32], offset: usize) -> Result<()> {
        let name = self.g.node[at.0].input[at.1].clone();
        let (v, shape) = read_f32(self.g, &name)?;
        let cols = *shape.last().unwrap_or(&1);
        if cols != offset + factors.len() {
            return Err(Error::BadWeight {
                tensor: name,
                reason: format!("{cols} output channels, the attention context has {}", factors.len()),
            });
        }
        let divided = || {
            let factor = |k: usize| k.checked_sub(offset).and_then(|j| factors.get(j)).copied().unwrap_or(1.0);
            Ok(v.iter().enumerate().map(|(k, x)| x / factor(k % cols)).collect())
        };
        self.read_written(Written::Columns(group, name.clone()), at, &name, &shape, divided)
    }

    /// Drops the originals nothing reads any more (by name, subgraphs included), with their graph inputs where an old
    /// exporter listed them as such.
    fn drop_replaced(self) {
        let replaced: HashSet<String> = self.replaced.into_iter().collect();
        self.g.drop_unread_initializers(&replaced);
    }
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

/// FNV-1a (64 bits) over every site's tensor name and factor bits: the identity of one smoothing run, which
/// [`smoothing_fingerprint`] reads back and calibration tables record, so tables and smoothed models of different runs
/// cannot be mixed silently.
fn fingerprint(done: &[SmoothedSite]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for d in done {
        eat(d.site.tensor.as_bytes());
        for f in &d.factors {
            eat(&f.to_bits().to_le_bytes());
        }
    }
    format!("{h:016x}")
}

/// The fingerprint of the smoothing `model` went through (`factors=` of its [`SMOOTH_METADATA_KEY`] record), if it
/// was smoothed by a qdq that records one.
pub fn smoothing_fingerprint(model: &Model) -> Option<&str> {
    smoothing_record(model)?.split("; ").find_map(|p| p.strip_prefix("factors="))
}

/// The smoothing recorded in a model's metadata by [`smooth`], if any (e.g. `alpha=0.5; tensors=13; factors=...`).
pub fn smoothing_record(model: &Model) -> Option<&str> {
    model.proto.metadata_props.iter().find(|e| e.key() == SMOOTH_METADATA_KEY).map(|e| e.value())
}
