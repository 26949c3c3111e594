//! Outlier channels carried in float beside an integer MatMul (policy `outlier_channels`).
//!
//! A per-tensor activation range has to cover the tensor's largest channel. Where one or two channels of a MatMul
//! input reach many times what the others do (BERT's GELU outputs: one channel per layer at 4-20x the rest), that
//! range spends the int8 levels of every channel on them, and an MSE range clips them instead. Before calibration,
//! [`split_outliers`] rewrites each such input `x` (a `[.., C]` activation read by constant-weight MatMuls, with
//! outlier channels `B`) so that
//!
//! ```text
//! x_rest = Mul(x, mask)          mask: 1, and 0 at B     (the MatMuls read x_rest: its pair, its range)
//! x_B    = Gather(x, B, axis=-1)                         (the outlier channels, in float)
//! y      = MatMul(x_rest, W) [+ bias] + MatMul(x_B, W[B, :])
//! ```
//!
//! which is the same product in float (`W`'s rows `B` are zeroed where only this MatMul reads `W`: `x_rest` is 0
//! there, and the rows then cost the other weights no range). Calibration then sees `x_rest`, whose range the rest
//! of the channels make; the branch (`k` rows, `k` the outlier count) stays in float: its nodes carry a marker
//! ([`patterns::is_outlier_branch`]) that every pass of qdq respects, so no policy quantizes them. The branch `Add`
//! comes after a bias `Add` reading the MatMul alone, so ONNX Runtime's `MatMulIntegerToFloat` still takes the bias.
//!
//! A channel is an outlier when its calibrated max |x| exceeds `ratio` times the median channel's; at most
//! [`MAX_SHARE`] of a tensor's channels (the largest) are taken. The model records the split in its metadata
//! ([`OUTLIER_METADATA_KEY`]).

use std::collections::{BTreeMap, HashSet};

use onnx_ir::proto::{NodeProto, StringStringEntryProto};
use onnx_ir::{GraphExt as _, GraphIndex, Model, NameSet, NodeExt as _, attr_int, node};

use crate::error::{Error, Result};
use crate::patterns;
use crate::policy::{OutlierBranch, Policy};

/// Model metadata key recording that (and how) a model's outlier channels were split off.
pub const OUTLIER_METADATA_KEY: &str = "qdq.outlier_channels";
/// The largest share of a tensor's channels taken as outliers (the largest ones): the branch stays small.
pub const MAX_SHARE: f32 = 1.0 / 32.0;

/// One input whose outlier channels [`split_outliers`] took out.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OutlierSplit {
    /// The activation (its readers now read `rest`).
    pub tensor: String,
    /// The tensor the MatMuls read instead: the activation with the outlier channels zeroed.
    pub rest: String,
    /// The outlier channels (indices along the last axis), ascending.
    pub channels: Vec<usize>,
    /// The largest channel's max |x| against the largest remaining channel's.
    pub max: f32,
    pub rest_max: f32,
    /// The MatMuls given a float branch.
    pub matmuls: Vec<String>,
}

/// The tensors a split model's MatMuls read in place of a split input (the input with its outlier channels zeroed):
/// their range should be their observed min/max, which the remaining channels bound. A range method that clips
/// (mse) fits the calibration sample's rest too closely, and the held-out logits pay for it (docs/QUANTIZATION.md).
pub fn outlier_rests(model: &Model) -> Vec<String> {
    model
        .graph()
        .node
        .iter()
        .filter(|n| patterns::is_outlier_branch(n) && n.op_type() == "Mul")
        .filter_map(|n| n.output.first().cloned())
        .collect()
}

/// The split recorded in a model's metadata by [`split_outliers`], if any (`ratio=6; tensors=4; channels=5`).
pub fn outlier_record(model: &Model) -> Option<&str> {
    model.proto.metadata_props.iter().find(|e| e.key() == OUTLIER_METADATA_KEY).map(|e| e.value())
}

/// A candidate MatMul: a plain product (`MatMul`, or `Gemm` / `FusedMatMul` without a scaling `alpha`) of activation
/// `x`'s last axis by a constant 2-D weight, which `policy` quantizes.
fn candidate(ix: &GraphIndex, i: usize, policy: &Policy, m: &crate::policy::Matchers) -> Option<(String, usize)> {
    let n = ix.node(i);
    if !policy.op_types.iter().any(|o| o == n.op_type()) || !matches!(n.op_type(), "MatMul" | "Gemm" | "FusedMatMul") {
        return None;
    }
    let alpha = onnx_ir::get_attr_float(n, "alpha").ok().flatten().unwrap_or(1.0);
    let mm = patterns::const_weight_matmul(ix, i, m)?;
    (alpha == 1.0 && !m.tensor_excluded(mm.input)).then(|| (mm.input.to_owned(), mm.rows))
}

/// The activations [`split_outliers`] looks at under `policy` (none when `outlier_channels` is off): the inputs of
/// constant-weight MatMuls the policy quantizes that smoothing leaves alone, in graph order. Their per-channel max
/// |x| is what the split needs (the pipeline collects it in smoothing's pass).
pub fn outlier_candidates(model: &Model, policy: &Policy) -> Result<Vec<String>> {
    if policy.outlier_channels.is_none() {
        return Ok(vec![]);
    }
    let smoothed: HashSet<String> = match policy.smooth {
        Some(_) => crate::smooth::smoothing_sites(model, policy)?.into_iter().map(|s| s.tensor).collect(),
        None => HashSet::new(),
    };
    let m = policy.matchers()?;
    let ix = GraphIndex::new(model.graph());
    let mut seen = HashSet::new();
    let mut out = vec![];
    for i in 0..ix.graph().node.len() {
        if let Some((x, _)) = candidate(&ix, i, policy, &m)
            && !smoothed.contains(&x)
            && seen.insert(x.clone())
        {
            out.push(x);
        }
    }
    Ok(out)
}

/// The outlier channels of a tensor whose channels reach `absmax`: over `ratio` times the median, at most
/// [`MAX_SHARE`] of them (the largest), ascending; none when the median is 0.
pub fn outlier_channels(absmax: &[f32], ratio: f32) -> Vec<usize> {
    let mut sorted: Vec<f32> = absmax.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.len() < 2 {
        return vec![];
    }
    sorted.sort_by(f32::total_cmp);
    let median = sorted[sorted.len() / 2];
    if median <= 0.0 {
        return vec![];
    }
    let mut over: Vec<usize> = (0..absmax.len()).filter(|&c| absmax[c] > ratio * median).collect();
    over.sort_by(|&a, &b| absmax[b].total_cmp(&absmax[a]));
    over.truncate(((absmax.len() as f32 * MAX_SHARE) as usize).max(1));
    over.sort_unstable();
    over
}

/// Splits the outlier channels of every [`outlier_candidates`] tensor off into a float branch, as the module docs
/// say, from each tensor's calibrated per-channel max |x| (`absmax`: the candidates of the model before smoothing,
/// which keep their names through it; a candidate of `model` without an entry is left alone).
/// Records the split in the model's metadata even when no tensor has outliers (the model was looked at: `plan`
/// then knows the ranges describe it). On an error the model may be partly rewritten: discard it.
pub fn split_outliers(
    model: &mut Model,
    policy: &Policy,
    absmax: &BTreeMap<String, Vec<f32>>,
) -> Result<Vec<OutlierSplit>> {
    let Some(ratio) = policy.outlier_channels else { return Ok(vec![]) };
    if let Some(record) = outlier_record(model) {
        return Err(Error::BadOptionValue {
            key: "outlier_channels".into(),
            value: ratio.to_string(),
            expected: format!("a model whose outlier channels are not split off yet (this one records `{record}`)"),
        });
    }
    let mut done = vec![];
    for x in outlier_candidates(model, policy)? {
        // Smoothing before may have given a MatMul a new input (a `Mul`, a `Reshape` seen through): not looked at.
        let Some(maxima) = absmax.get(&x) else { continue };
        let channels = outlier_channels(maxima, ratio);
        if !channels.is_empty() {
            done.push(split_one(model, policy, &x, maxima, channels)?);
        }
    }
    if !done.is_empty() {
        // The front nodes went before the first reader; a MatMul's Add after it: one sort puts every input first.
        model.graph_mut().sort_nodes()?;
    }
    let count: usize = done.iter().map(|d| d.channels.len()).sum();
    model.proto.metadata_props.push(StringStringEntryProto {
        key: Some(OUTLIER_METADATA_KEY.into()),
        value: Some(format!("ratio={ratio}; tensors={}; channels={count}", done.len())),
    });
    Ok(done)
}

/// The MatMuls reading `x` that get a branch: `(node index, weight, channels along the contracted axis)`.
fn branch_matmuls(model: &Model, policy: &Policy, x: &str) -> Result<Vec<(usize, String, usize)>> {
    let m = policy.matchers()?;
    let ix = GraphIndex::new(model.graph());
    Ok(ix
        .readers(x)
        .iter()
        .filter(|&&(_, slot)| slot == 0)
        .filter_map(|&(i, _)| candidate(&ix, i, policy, &m).map(|(_, rows)| (i, ix.node(i).input[1].clone(), rows)))
        .collect())
}

/// The nodes giving `out` the `channels` of split input `x`: recomputed from `source` where there is one, else
/// gathered from `x`.
fn outlier_source(
    g: &mut onnx_ir::proto::GraphProto,
    names: &mut NameSet,
    (x, source): (&str, Option<Recompute>),
    channels: &[usize],
    out: &str,
) -> Result<Vec<NodeProto>> {
    if let Some(source) = source {
        return source.branch(g, names, channels, out);
    }
    let idx = names.fresh(&format!("{x}_outlier_channels"));
    let ids: Vec<i64> = channels.iter().map(|&k| k as i64).collect();
    g.add_initializer(onnx_ir::tensor_from_vec::<i64>(&idx, &[channels.len()], ids)?);
    let gather = node("Gather", &names.fresh(&format!("{x}_outlier_Gather")), &[x, &idx], &[out]);
    Ok(vec![marked(gather.with_attr(attr_int("axis", -1)))])
}

fn split_one(
    model: &mut Model,
    policy: &Policy,
    x: &str,
    absmax: &[f32],
    channels: Vec<usize>,
) -> Result<OutlierSplit> {
    let readers = branch_matmuls(model, policy, x)?;
    let c = absmax.len();
    if let Some((i, _, rows)) = readers.iter().find(|r| r.2 != c) {
        let name = model.graph().node[*i].name().to_owned();
        return Err(Error::BadNode {
            node: name,
            op_type: "MatMul".into(),
            reason: format!("its weight contracts {rows} channels, but '{x}' was calibrated with {c}"),
        });
    }
    let source = match policy.outlier_branch {
        OutlierBranch::Recompute => recompute_source(&GraphIndex::new(model.graph()), x, c)?,
        OutlierBranch::Gather => None,
    };
    let g = model.graph_mut();
    let mut names = NameSet::from_graph(g);
    let mask = names.fresh(&format!("{x}_outlier_mask"));
    let keep: Vec<f32> = (0..c).map(|k| if channels.contains(&k) { 0.0 } else { 1.0 }).collect();
    g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&mask, &[c], keep)?);
    let rest = names.fresh(&format!("{x}_without_outliers"));
    let gathered = names.fresh(&format!("{x}_outliers"));
    let mut front = vec![marked(node("Mul", &names.fresh(&format!("{x}_outlier_mask_Mul")), &[x, &mask], &[&rest]))];
    front.extend(outlier_source(g, &mut names, (x, source), &channels, &gathered)?);
    let mut matmuls = vec![];
    let mut adds = vec![];
    for (i, w, _) in &readers {
        let mm = g.node[*i].clone();
        matmuls.push(mm.name().to_owned());
        let rows = weight_rows(g, &mut names, &mm, w, &channels)?;
        let part = names.fresh(&format!("{}_outlier_part", mm.name()));
        front.push(marked(node(
            "MatMul",
            &names.fresh(&format!("{}_outliers", mm.name())),
            &[&gathered, &rows],
            &[&part],
        )));
        adds.push((mm.name().to_owned(), part));
        g.rewire_input(*i, 0, &rest)?;
    }
    let first = readers.iter().map(|r| r.0).min().unwrap_or(g.node.len());
    g.insert_nodes(first, front);
    for (mm, part) in adds {
        add_branch(g, &mut names, &mm, &part)?;
    }
    let rest_max = (0..c).filter(|k| !channels.contains(k)).map(|k| absmax[k]).fold(0.0f32, f32::max);
    let max = channels.iter().map(|&k| absmax[k]).fold(0.0f32, f32::max);
    Ok(OutlierSplit { tensor: x.to_owned(), rest, channels, max, rest_max, matmuls })
}

/// Elementwise ops an activation between a fully connected layer and a split input may be made of (ONNX's own).
const ELEMENTWISE: [&str; 16] = [
    "Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sigmoid", "Relu", "Abs", "Neg", "Sqrt", "Exp", "Log", "Gelu",
    "Softplus",
];
/// The most nodes such an activation is followed through (the decomposed GELU has 5).
const MAX_CHAIN: usize = 16;

/// Where a split input's outlier channels can be recomputed from ([`OutlierBranch::Recompute`]): the fully connected
/// layer that made it (`input` times `weight` `[K, C]`, plus `bias`, giving `pre`) and the elementwise activation
/// after it (`chain`, in graph order, its other inputs scalars).
struct Recompute {
    /// What the branch's MatMul reads: the layer's input, or where smoothing's per-channel `Mul` in front of it reads
    /// from (its factors folded into `weight`'s rows), so the branch adds no reader to the pair's input.
    input: String,
    weight: ndarray::Array2<f32>,
    bias: Option<Vec<f32>>,
    pre: String,
    chain: Vec<NodeProto>,
}

impl Recompute {
    /// The branch's nodes computing `channels` of the split input into `out`: the layer on those columns, then the
    /// activation, each node marked.
    fn branch(
        self,
        g: &mut onnx_ir::proto::GraphProto,
        names: &mut NameSet,
        channels: &[usize],
        out: &str,
    ) -> Result<Vec<NodeProto>> {
        let w = names.fresh(&format!("{}_outlier_columns", self.pre));
        let columns = self.weight.select(ndarray::Axis(1), channels);
        g.add_initializer(onnx_ir::array_to_tensor(&w, &columns.into_dyn()));
        let product = names.fresh(&format!("{}_outlier_product", self.pre));
        let mut nodes =
            vec![marked(node("MatMul", &names.fresh(&format!("{w}_MatMul")), &[&self.input, &w], &[&product]))];
        let mut renamed = std::collections::HashMap::from([(self.pre.clone(), product.clone())]);
        if let Some(bias) = &self.bias {
            let (b, pre) =
                (names.fresh(&format!("{}_outlier_bias", self.pre)), names.fresh(&format!("{}_outliers", self.pre)));
            let taken: Vec<f32> = channels.iter().map(|&k| bias[k]).collect();
            g.add_initializer(onnx_ir::tensor_from_vec::<f32>(&b, &[channels.len()], taken)?);
            nodes.push(marked(node("Add", &names.fresh(&format!("{b}_Add")), &[&product, &b], &[&pre])));
            renamed.insert(self.pre.clone(), pre);
        }
        let last = self.chain.len().saturating_sub(1);
        for (i, n) in self.chain.into_iter().enumerate() {
            let mut copy = n.clone();
            copy.name = Some(names.fresh(&format!("{}_outlier_recompute", n.name())));
            for t in copy.input.iter_mut() {
                if let Some(r) = renamed.get(t) {
                    *t = r.clone();
                }
            }
            let o = if i == last { out.to_owned() } else { names.fresh(&format!("{}_outliers", n.output[0])) };
            renamed.insert(n.output[0].clone(), o.clone());
            copy.output = vec![o];
            nodes.push(marked(copy));
        }
        Ok(nodes)
    }
}

/// A scalar initializer (one value), as an activation's constants are.
fn scalar(ix: &GraphIndex, t: &str) -> bool {
    ix.initializer(t).is_some_and(|i| i.dims.iter().product::<i64>() == 1)
}

/// A fully connected layer: its input, weight `[K, C]` and bias `[C]`.
type Layer = (String, ndarray::Array2<f32>, Option<Vec<f32>>);

/// The fully connected layer whose output is `t`: `(input, weight [K, C], bias)` of `MatMul(input, W)` with a constant
/// 2-D float `W` of `channels` columns, or of an `Add` of a constant `[C]` bias to it.
fn fully_connected(ix: &GraphIndex, t: &str, channels: usize) -> Result<Option<Layer>> {
    let Some(p) = ix.producer_node(t) else { return Ok(None) };
    let (mm, bias) = match p.op_type() {
        "MatMul" => (p, None),
        "Add" if p.input.len() == 2 => {
            let (b, other) = match (ix.initializer(&p.input[0]), ix.initializer(&p.input[1])) {
                (Some(b), None) => (b, &p.input[1]),
                (None, Some(b)) => (b, &p.input[0]),
                _ => return Ok(None),
            };
            let Some(mm) = ix.producer_node(other).filter(|m| m.op_type() == "MatMul") else { return Ok(None) };
            let b = onnx_ir::tensor_to_array::<f32>(b).ok().filter(|b| b.len() == channels);
            let Some(b) = b else { return Ok(None) };
            (mm, Some(b.iter().copied().collect()))
        }
        _ => return Ok(None),
    };
    let w = match ix.initializer(&mm.input[1]) {
        Some(w) if w.data_type() == onnx_ir::DataType::Float as i32 && w.dims.len() == 2 => w,
        _ => return Ok(None),
    };
    let Ok(w) = onnx_ir::tensor_to_array::<f32>(w)?.into_dimensionality::<ndarray::Ix2>() else { return Ok(None) };
    Ok((w.ncols() == channels && !ix.is_initializer(&mm.input[0])).then(|| (mm.input[0].clone(), w, bias)))
}

/// Where split input `x` (`channels` wide) can be recomputed from ([`Recompute`]), when it is a fully connected
/// layer's output through an elementwise activation; `None` otherwise (its branch then gathers the channels).
fn recompute_source(ix: &GraphIndex, x: &str, channels: usize) -> Result<Option<Recompute>> {
    let (mut chain, mut pending, mut pre): (Vec<usize>, Vec<String>, Option<String>) =
        (vec![], vec![x.to_owned()], None);
    while let Some(t) = pending.pop() {
        if pre.as_deref() == Some(t.as_str()) || chain.iter().any(|&i| ix.node(i).output.first() == Some(&t)) {
            continue;
        }
        if t != x && fully_connected(ix, &t, channels)?.is_some() {
            // One layer feeds the activation.
            if pre.is_some() {
                return Ok(None);
            }
            pre = Some(t);
            continue;
        }
        let Some(i) = ix.producer(&t) else { return Ok(None) };
        let n = ix.node(i);
        if !ELEMENTWISE.contains(&n.op_type())
            || !n.domain().is_empty()
            || n.output.len() != 1
            || chain.len() >= MAX_CHAIN
        {
            return Ok(None);
        }
        chain.push(i);
        pending.extend(n.input.iter().filter(|t| !scalar(ix, t)).cloned());
    }
    let Some(pre) = pre.filter(|_| !chain.is_empty()) else { return Ok(None) };
    let Some((input, mut weight, bias)) = fully_connected(ix, &pre, channels)? else { return Ok(None) };
    // Through smoothing's per-channel Mul in front of the layer: its factors scale the weight's rows.
    let (input, weight) = match ix.producer_node(&input).filter(|m| m.op_type() == "Mul" && m.input.len() == 2) {
        Some(m) => {
            let factors = m.input.iter().find_map(|t| ix.initializer(t)).map(onnx_ir::tensor_to_array::<f32>);
            let other = m.input.iter().find(|t| !ix.is_initializer(t));
            match (factors, other) {
                (Some(f), Some(v)) if f.as_ref().is_ok_and(|f| f.len() == weight.nrows()) => {
                    for (mut row, f) in weight.rows_mut().into_iter().zip(f?.iter()) {
                        row *= *f;
                    }
                    (v.clone(), weight)
                }
                _ => (input, weight),
            }
        }
        None => (input, weight),
    };
    chain.sort_unstable();
    let chain = chain.into_iter().map(|i| ix.node(i).clone()).collect();
    Ok(Some(Recompute { input, weight, bias, pre, chain }))
}

fn marked(mut n: NodeProto) -> NodeProto {
    n.doc_string = Some(patterns::OUTLIER_BRANCH_MARK.into());
    n
}

/// The rows of MatMul `mm`'s weight `w` for `channels` as a new `[k, N]` initializer (read across a transposed
/// weight); the rows are zeroed in `w` itself when `mm` is its only reader.
fn weight_rows(
    g: &mut onnx_ir::proto::GraphProto,
    names: &mut NameSet,
    mm: &NodeProto,
    w: &str,
    channels: &[usize],
) -> Result<String> {
    let t = g.initializer(w).ok_or_else(|| Error::Missing { name: w.to_owned(), what: "initializer" })?;
    let a = onnx_ir::tensor_to_array::<f32>(t)?;
    let contract = patterns::b_contracted_axis(mm, 2).unwrap_or(0);
    let taken = a.select(ndarray::Axis(contract), channels);
    let taken = if contract == 1 { taken.t().to_owned() } else { taken };
    let rows = names.fresh(&format!("{w}_outlier_rows"));
    g.add_initializer(onnx_ir::array_to_tensor(&rows, &taken.into_dyn()));
    let only_reader = g.node.iter().filter(|n| n.input.iter().any(|i| i == w)).count() == 1;
    if only_reader {
        let mut zeroed = a;
        for &k in channels {
            zeroed.index_axis_mut(ndarray::Axis(contract), k).fill(0.0);
        }
        g.add_initializer(onnx_ir::array_to_tensor(w, &zeroed));
    }
    Ok(rows)
}

/// Adds `part` to MatMul `mm`'s result: after its bias `Add` when that is the MatMul's only reader and adds an
/// initializer (ONNX Runtime folds such a bias into its integer MatMul), else after the MatMul. The tensor the
/// readers read keeps its name.
fn add_branch(g: &mut onnx_ir::proto::GraphProto, names: &mut NameSet, mm: &str, part: &str) -> Result<()> {
    let i =
        g.node.iter().position(|n| n.name() == mm).ok_or_else(|| Error::Missing { name: mm.into(), what: "node" })?;
    let y = g.node[i].output[0].clone();
    let readers = g.consumers_of(&y);
    let outputs = g.output.iter().any(|o| o.name() == y);
    let bias = match readers[..] {
        [(r, _)] if !outputs && g.node[r].op_type() == "Add" && g.node[r].domain().is_empty() => {
            g.node[r].input.iter().any(|t| g.is_initializer(t)).then_some(r)
        }
        _ => None,
    };
    let at = bias.unwrap_or(i);
    let out = g.node[at].output[0].clone();
    let inner = names.fresh(&format!("{out}_without_outliers"));
    g.node[at].output[0] = inner.clone();
    let add = marked(node("Add", &names.fresh(&format!("{mm}_outlier_Add")), &[&inner, part], &[&out]));
    g.insert_nodes(at + 1, vec![add]);
    Ok(())
}

/// After the pairs are in: each outlier mask `Mul` whose rest only pairs read, and whose every integer MatMul reading
/// those pairs has a zero weight at the masked channels, is folded into the pairs (they read the input itself). The
/// outlier channels then saturate in the pair instead of being zeroed before it, and meet zero weights either way: the
/// same integers, without a kernel over the widest activation (on OpenVINO and the CPU EP a node of its own). A mask
/// that anything else reads, or whose MatMul shares its weight (rows not zeroed), stays. Returns how many were folded.
pub(crate) fn fold_masks(g: &mut onnx_ir::proto::GraphProto) -> Result<usize> {
    let masks: Vec<usize> = (0..g.node.len())
        .filter(|&i| {
            patterns::is_outlier_branch(&g.node[i]) && g.node[i].op_type() == "Mul" && g.node[i].input.len() == 2
        })
        .collect();
    let mut folded = vec![];
    for i in masks {
        let (x, mask, rest) = (g.node[i].input[0].clone(), g.node[i].input[1].clone(), g.node[i].output[0].clone());
        let Some(zeroed) = masked_channels(g, &mask) else { continue };
        let readers = g.consumers_of(&rest);
        let quantizers = readers.iter().all(|&(r, slot)| slot == 0 && g.node[r].op_type() == "QuantizeLinear");
        let outputs = g.output.iter().any(|o| o.name() == rest);
        if readers.is_empty() || !quantizers || outputs {
            continue;
        }
        let safe = readers.iter().all(|&(q, _)| integer_readers_meet_zeros(g, &g.node[q].output[0], &zeroed));
        if safe {
            for (q, slot) in readers {
                g.rewire_input(q, slot, &x)?;
            }
            folded.push(i);
        }
    }
    for &i in folded.iter().rev() {
        g.node.remove(i);
    }
    Ok(folded.len())
}

/// The channels a mask (a 1-D float initializer of 0s and 1s) zeroes; `None` for anything else.
fn masked_channels(g: &onnx_ir::proto::GraphProto, mask: &str) -> Option<Vec<usize>> {
    let a = onnx_ir::tensor_to_array::<f32>(g.initializer(mask)?).ok()?;
    let ok = a.ndim() == 1 && a.iter().all(|&v| v == 0.0 || v == 1.0);
    ok.then(|| a.iter().enumerate().filter(|(_, v)| **v == 0.0).map(|(k, _)| k).collect())
}

/// Whether everything reading quantized tensor `q` (through its DequantizeLinear, or as an integer MatMul's A) is a
/// MatMul whose weight is zero at `channels` of its contracted axis.
fn integer_readers_meet_zeros(g: &onnx_ir::proto::GraphProto, q: &str, channels: &[usize]) -> bool {
    let mut matmuls = vec![];
    for (r, slot) in g.consumers_of(q) {
        match g.node[r].op_type() {
            "DequantizeLinear" if slot == 0 => {
                let dq = &g.node[r].output[0];
                let readers = g.consumers_of(dq);
                if readers.is_empty() || g.output.iter().any(|o| o.name() == *dq) {
                    return false;
                }
                matmuls.extend(readers);
            }
            "MatMulIntegerToFloat" | "MatMulInteger" if slot == 0 => matmuls.push((r, slot)),
            _ => return false,
        }
    }
    matmuls.iter().all(|&(m, slot)| slot == 0 && weight_zero_at(g, m, channels))
}

/// Whether MatMul-like node `m`'s constant weight (B: an 8-bit initializer, one behind a DequantizeLinear, or a float
/// one behind its pair) is zero at `channels` of its contracted axis.
fn weight_zero_at(g: &onnx_ir::proto::GraphProto, m: usize, channels: &[usize]) -> bool {
    let n = &g.node[m];
    let Some(mut b) = n.input.get(1).cloned() else { return false };
    // Through the weight's DequantizeLinear, and a float weight's QuantizeLinear.
    for _ in 0..2 {
        match g.producer_of(&b).map(|p| &g.node[p]) {
            Some(p) if matches!(p.op_type(), "DequantizeLinear" | "QuantizeLinear") => b = p.input[0].clone(),
            Some(_) => return false,
            None => break,
        }
    }
    let Some(t) = g.initializer(&b) else { return false };
    let values: Option<ndarray::ArrayD<f32>> = match onnx_ir::DataType::try_from(t.data_type()) {
        Ok(onnx_ir::DataType::Float) => onnx_ir::tensor_to_array::<f32>(t).ok(),
        Ok(onnx_ir::DataType::Int8) => onnx_ir::tensor_to_array::<i8>(t).ok().map(|a| a.mapv(f32::from)),
        Ok(onnx_ir::DataType::Uint8) => return false,
        _ => None,
    };
    let Some(w) = values.filter(|w| w.ndim() == 2) else { return false };
    let op =
        if n.op_type() == "MatMulIntegerToFloat" || n.op_type() == "MatMulInteger" { "MatMul" } else { n.op_type() };
    let mut probe = n.clone();
    probe.op_type = Some(op.to_owned());
    let Some(axis) = patterns::b_contracted_axis(&probe, 2) else { return false };
    channels.iter().all(|&k| k < w.shape()[axis] && w.index_axis(ndarray::Axis(axis), k).iter().all(|&v| v == 0.0))
}

/// Refuses to plan an `outlier_channels` policy on a model it would split that is not split: its ranges name the
/// split model's tensors, so the raw model would lose those MatMul inputs' pairs without a word.
pub(crate) fn check_split(model: &Model, policy: &Policy) -> Result<()> {
    match policy.outlier_channels {
        Some(ratio) if outlier_record(model).is_none() && !outlier_candidates(model, policy)?.is_empty() => {
            Err(Error::NotSplit { ratio })
        }
        _ => Ok(()),
    }
}
