//! Plans: where Q/DQ pairs go and with which parameters ([`plan`]); [`Plan::apply`] (in `apply`) inserts them.

use std::fmt;

use onnx_ir::{GraphIndex, Model};

use crate::embedding::EmbeddingTable;
use crate::error::{Error, Result};
use crate::params::{TensorParams, tensor_params};
use crate::policy::{Policy, WeightStorage};
use crate::scale::QuantType;
use crate::select::{Selection, node_label, select};
pub use crate::types::{Consumer, PlannedTensor, Ranges, Skipped, TensorKind};

/// Lowest default-domain opset with per-channel (`axis`) QuantizeLinear / DequantizeLinear.
pub const MIN_QDQ_OPSET: i64 = 13;
/// Lowest default-domain opset with float8 QuantizeLinear / DequantizeLinear.
pub const MIN_FLOAT8_OPSET: i64 = 19;
/// Lowest default-domain opset with 16-bit integer QuantizeLinear / DequantizeLinear.
pub const MIN_INT16_OPSET: i64 = 21;

/// What [`Plan::apply`] will insert where.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    /// Tensors that get Q/DQ, in the order they were first met.
    pub tensors: Vec<PlannedTensor>,
    /// Tensors left in float, with reasons.
    pub skipped: Vec<Skipped>,
    /// Embedding tables stored as int8 (policy `embeddings = int8`).
    pub embeddings: Vec<EmbeddingTable>,
    /// `Some((from, to))` if the default-domain opset will be raised.
    pub opset_bump: Option<(i64, i64)>,
    /// Gemm biases stored as int32 (int8-initializer weights: ORT's CPU EP fuses `QGemm` only with them).
    pub biases: Vec<crate::bias::PlannedBias>,
    /// ONNX Runtime fused ops turned into their integer contrib forms (policy `contrib_ops`).
    pub contrib: crate::contrib::ContribRewrites,
    /// Number of nodes of the model the plan was made for.
    #[serde(skip)]
    pub(crate) node_count: usize,
    /// Outlier masks folded into their pairs (policy `outlier_mask = fold`).
    #[serde(skip)]
    pub(crate) fold_outlier_masks: bool,
}

/// The activation tensors that need calibration ranges under `policy`, in graph order of their
/// first quantized consumer (the pipeline exposes exactly these as extra outputs). Errors like
/// [`plan`] does for malformed selected nodes or a model without the policy's op types.
pub fn tensors_to_calibrate(model: &Model, policy: &Policy) -> Result<Vec<String>> {
    let ix = GraphIndex::new(model.graph());
    let sel = select(&ix, policy)?;
    Ok(sel.tensors.into_iter().map(|(t, _)| t).filter(|t| !ix.is_initializer(t)).collect())
}

/// Statistics of several calibration runs can be merged only when no run smooths `model`, splits off its outlier
/// channels or rounds its weights by GPTQ: each run does so with its own statistics, so their ranges would describe
/// different models.
pub fn check_mergeable(model: &Model, policy: &Policy) -> Result<()> {
    if policy.smooth.is_some() && !crate::smooth::smoothing_sites(model, policy)?.is_empty() {
        return Err(Error::MergeWithSmoothing);
    }
    if !crate::outliers::outlier_candidates(model, policy)?.is_empty() {
        return Err(Error::MergeWithOutliers);
    }
    if !crate::rounding::rounding_sites(model, policy)?.is_empty() {
        return Err(Error::MergeWithRounding);
    }
    Ok(())
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
    policy.check_precision()?;
    crate::smooth::check_smoothed(model, policy)?;
    crate::outliers::check_split(model, policy)?;
    let ix = GraphIndex::new(model.graph());
    let mut sel = select(&ix, policy)?;
    let skipped = std::mem::take(&mut sel.skipped);
    let embeddings = crate::embedding::plan_tables(&ix, policy)?;
    let node_count = ix.graph().node.len();
    let mut plan = Plan {
        tensors: vec![],
        skipped,
        embeddings,
        opset_bump: None,
        biases: vec![],
        contrib: Default::default(),
        node_count,
        fold_outlier_masks: policy.outlier_mask == crate::policy::OutlierMask::Fold,
    };
    for (t, first) in &sel.tensors {
        match tensor_params(&ix, &sel, t, ranges, policy)? {
            Some(p) => plan.tensors.push(planned_tensor(&ix, &sel, t, p, policy)),
            None if policy.strict => {
                let node = node_label(ix.node(*first), *first);
                return Err(Error::MissingRange { tensor: t.clone(), node });
            }
            None => plan.skipped.push(Skipped { tensor: t.clone(), reason: "no calibration range".into() }),
        }
    }
    plan.biases = crate::bias::plan_biases(&ix, &plan.tensors, policy);
    plan.contrib = crate::contrib::planned(&ix, &plan.tensors, policy);
    let opset = model.opset("").unwrap_or(1);
    // Per-channel DequantizeLinear (and the embeddings' axis -1) needs opset 13, a float8 pair 19, a 16-bit one 21.
    let needed = if plan.tensors.iter().any(|t| t.qtype == QuantType::Int16) {
        MIN_INT16_OPSET
    } else if plan.tensors.iter().any(|t| t.qtype.is_float8()) {
        MIN_FLOAT8_OPSET
    } else {
        MIN_QDQ_OPSET
    };
    if !(plan.tensors.is_empty() && plan.embeddings.is_empty()) && opset < needed {
        plan.opset_bump = Some((opset, needed));
    }
    Ok(plan)
}

/// Which inputs read which pair: with `dedicated_pairs` one pair per selected reader of an activation read by
/// several; a shared pair feeds every reader, or (`shared_pair_feeds_all` off) only the selected ones, except on a
/// quantized node's output, whose pair feeds every reader. Weights
/// and other constants always get one pair feeding all their readers.
fn pairs(ix: &GraphIndex, sel: &Selection, t: &str, kind: TensorKind, policy: &Policy) -> Vec<Vec<Consumer>> {
    let all: Vec<Consumer> = ix
        .readers(t)
        .iter()
        .map(|&(node, slot)| Consumer { node, node_name: ix.node(node).name().to_string(), slot })
        .collect();
    let receivers = sel.receivers(t);
    if kind == TensorKind::Activation && policy.dedicated_pairs && receivers.len() > 1 {
        receivers.iter().map(|&r| all.iter().filter(|c| c.node == r).cloned().collect()).collect()
    } else if kind == TensorKind::Activation && !policy.shared_pair_feeds_all && !sel.is_output(t) {
        vec![all.into_iter().filter(|c| receivers.contains(&c.node)).collect()]
    } else {
        vec![all]
    }
}

fn planned_tensor(ix: &GraphIndex, sel: &Selection, t: &str, p: TensorParams, policy: &Policy) -> PlannedTensor {
    PlannedTensor {
        tensor: t.to_string(),
        kind: p.kind,
        qtype: p.qtype,
        scales: p.params.iter().map(|p| p.scale).collect(),
        zero_points: p.params.iter().map(|p| p.zero_point).collect(),
        axis: p.axis,
        int8_initializer: p.kind == TensorKind::Weight && policy.weights == WeightStorage::Int8Initializer,
        reduce_range: p.kind == TensorKind::Weight && policy.reduce_range,
        pair_axes: p.pair_axes,
        pairs: pairs(ix, sel, t, p.kind, policy),
        shift: p.shift,
    }
}

impl Plan {
    /// What the plan writes besides Q/DQ pairs and int8 tables, one line each: ONNX Runtime's integer contrib ops
    /// (`as ONNX Runtime's QAttention: Attention_0, ...`) and int32 Gemm biases.
    pub fn integer_forms(&self) -> Vec<String> {
        let mut lines = self.contrib.lines();
        if !self.biases.is_empty() {
            lines.push(format!("Gemm biases as int32 (ONNX Runtime's CPU EP runs QGemm): {}", self.biases.len()));
        }
        lines
    }

    /// Number of Q/DQ pairs (DQ nodes) this plan inserts.
    pub fn pair_count(&self) -> usize {
        self.tensors.iter().map(|t| t.pairs.len()).sum()
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
            "{:<48} {:<10} {:<8} {:>12} {:>4} {:>5} consumers",
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
            let qt = t.qtype.name();
            let (scale, zp, axis) = crate::coverage::param_columns(&t.scales, &t.zero_points, t.axis);
            let pairs: Vec<String> = t
                .pairs
                .iter()
                .map(|p| p.iter().map(|c| format!("{}[{}]", c.node_name, c.slot)).collect::<Vec<_>>().join(" "))
                .collect();
            writeln!(f, "{:<48} {kind:<10} {qt:<8} {scale:>12} {zp:>4} {axis:>5} {}", t.tensor, pairs.join(" | "))?;
        }
        for e in &self.embeddings {
            let (scale, zp, axis) = crate::coverage::param_columns(&e.scales, &vec![0; e.scales.len()], Some(1));
            let gathers: Vec<String> = e.gathers.iter().map(|c| c.node_name.clone()).collect();
            writeln!(
                f,
                "{:<48} {:<10} int8     {scale:>12} {zp:>4} {axis:>5} {}",
                e.table,
                "embedding",
                gathers.join(" ")
            )?;
        }
        for b in &self.biases {
            let (scale, _, axis) = crate::coverage::param_columns(&b.scales, &[0], (b.scales.len() > 1).then_some(0));
            writeln!(
                f,
                "{:<48} {:<10} int32    {scale:>12} {:>4} {axis:>5} {}[2]",
                b.bias, "bias", 0, b.gemm.node_name
            )?;
        }
        for line in self.contrib.lines() {
            writeln!(f, "{line}")?;
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
