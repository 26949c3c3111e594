//! A QDQ model's activation pairs measured on held-out inputs: every pair's dequantized tensor against the float
//! value it stands for in the model's float reference ([`qdq::float_reference`]), and each node's sensitivity (the
//! task's outputs, logits or embedding, with only that node's pairs taken out); and the same QDQ model on a second EP
//! against the first, pair by pair.

use std::collections::{BTreeMap, HashSet};

use calib::ErrorStats;
use onnx_ir::Model;
use rayon::prelude::*;
use runtime::SessionConfig;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::held_out::agreement::OutputAgreement;
use crate::held_out::{HeldOut, Values};
use crate::progress::Progress;
use crate::steps::augment::{session_with_outputs, used_data};

/// One activation pair of the QDQ model, measured.
#[derive(Debug, Clone, Serialize)]
pub struct TensorError {
    /// The quantized float tensor (the QuantizeLinear's input in the QDQ model).
    pub tensor: String,
    /// Position of its QuantizeLinear among the graph's nodes (the graph's order is the layers' order).
    pub graph_order: usize,
    /// The nodes reading its dequantized value, `node[slot]`.
    pub readers: Vec<String>,
    /// The pair's range `[(qmin - zp)·scale, (qmax - zp)·scale]`.
    pub range: (f32, f32),
    /// The dequantized tensor against the float reference's value of the same tensor: everything upstream plus
    /// this pair's rounding and clipping.
    pub total: ErrorStats,
    /// The dequantized tensor against the tensor it quantizes in the same (QDQ) run: this pair's rounding and
    /// clipping alone.
    pub own: ErrorStats,
}

/// The QDQ model with one node's quantized activation inputs kept in float, against FP32.
#[derive(Debug, Clone, Serialize)]
pub struct NodeSensitivity {
    /// The node whose dequantized inputs were replaced by the float tensors.
    pub node: String,
    pub op_type: String,
    /// Its quantized activation inputs.
    pub inputs: Vec<String>,
    /// The task's outputs against FP32's with this node's inputs in float.
    pub logits: OutputAgreement,
    /// The share of the QDQ model's distance from FP32 ([`OutputAgreement::loss`]: the logits' KL, the embeddings' cosine
    /// distance) this recovers; negative when it gets worse.
    pub recovered: f64,
    /// With --confirm, for the first nodes: F1 with this node's inputs in float minus the QDQ model's F1.
    pub f1_recovered: Option<f64>,
    /// With --confirm: twice the standard error of `f1_recovered` over the scored questions (paired by question): an
    /// effect inside ± this is as large as which answers happen to flip.
    pub f1_two_se: Option<f64>,
    /// With --confirm: `f1_recovered` with its paired 95 % interval over the scored questions.
    pub f1_difference: Option<squad_metrics::PairedDifference>,
}

/// One activation pair's dequantized tensor as a second EP computes it, against the first EP's (the same QDQ model on
/// the same inputs).
#[derive(Debug, Clone, Serialize)]
pub struct EpTensor {
    /// The quantized float tensor.
    pub tensor: String,
    /// Position of its QuantizeLinear among the graph's nodes.
    pub graph_order: usize,
    /// The pair's range.
    pub range: (f32, f32),
    /// The second EP's dequantized values against the first's.
    pub stats: ErrorStats,
}

/// The QDQ model on a second EP against the first: its outputs and every activation pair.
#[derive(Debug, Clone, Serialize)]
pub struct EpComparison {
    /// The second EP, and the first it is set against.
    pub ep: String,
    pub against: String,
    /// The QDQ model's outputs on `ep` against FP32's (run on the first EP).
    pub vs_fp32: OutputAgreement,
    /// The QDQ model's outputs on `ep` against its own on the first EP.
    pub vs_first: OutputAgreement,
    /// Every activation pair, in graph order (where the two EPs part shows as the first low SQNR).
    pub tensors: Vec<EpTensor>,
}

/// Per activation pair: the tensor, the dequantized output it is read as, readers and range.
pub struct Probe {
    tensor: String,
    graph_order: usize,
    dequantized: String,
    readers: Vec<String>,
    range: (f32, f32),
}

/// The activation pairs of `int8`, one per quantized tensor (a tensor with several DequantizeLinear readers has
/// the same dequantized value in each); pairs without a per-tensor range are left out.
pub fn probes(int8: &Model) -> Vec<Probe> {
    let order: BTreeMap<&str, usize> = int8.graph().node.iter().enumerate().map(|(i, n)| (n.name(), i)).collect();
    let mut by_tensor: BTreeMap<String, Probe> = BTreeMap::new();
    for p in qdq::activation_pairs(int8) {
        let Some(range) = p.range() else { continue };
        let readers = p.consumers.iter().map(|(n, s)| format!("{n}[{s}]"));
        let graph_order = p.quantize_node.as_deref().and_then(|q| order.get(q)).copied().unwrap_or(usize::MAX);
        let probe = by_tensor.entry(p.tensor.clone()).or_insert_with(|| Probe {
            tensor: p.tensor.clone(),
            graph_order,
            dequantized: p.output.clone(),
            readers: Vec::new(),
            range,
        });
        probe.readers.extend(readers);
    }
    by_tensor.into_values().collect()
}

/// What [`measure`] found: the QDQ model's outputs against FP32's, the float reference's (one entry per batch), and
/// every pair, the worst own rounding first.
pub struct Measured {
    pub logits: OutputAgreement,
    pub(crate) reference_values: Vec<Values>,
    pub tensors: Vec<TensorError>,
}

/// The running errors of every probe: against the float reference (`total`), and of its own rounding (`own`).
struct Errors {
    total: Vec<ErrorStats>,
    own: Vec<ErrorStats>,
}

/// The QDQ model and its float reference on the held-out inputs, batch by batch (one batch's tensors in memory at a
/// time): the QDQ model's outputs against FP32's, the reference's outputs, and every probe against the reference's
/// value.
pub fn measure(held: &HeldOut, int8: &Model, probes: &[Probe], progress: &dyn Progress) -> Result<Measured> {
    let runs = &held.runs;
    let output_names = runs.output_names();
    let k = output_names.len();
    let mut ref_names = output_names.clone();
    ref_names.extend(probes.iter().map(|p| p.tensor.as_str()));
    let mut names = ref_names.clone();
    names.extend(probes.iter().map(|p| p.dequantized.as_str()));
    const REFERENCE: &str = "float reference of the QDQ model";
    let reference = qdq::float_reference(int8);
    let mut ref_session = session_with_outputs(&reference, &ref_names, REFERENCE, &runs.cfg)?;
    drop(reference);
    ref_session.feed_zeros(runs.zero_inputs())?;
    let mut session = session_with_outputs(int8, &names, "QDQ model", &runs.cfg)?;
    session.feed_zeros(runs.zero_inputs())?;
    let n = probes.len();
    let mut errors = Errors { total: vec![ErrorStats::default(); n], own: vec![ErrorStats::default(); n] };
    let (mut sums, mut reference_values) = (runs.sums(), Vec::with_capacity(runs.batches.len()));
    for (b, batch) in runs.batches.iter().enumerate() {
        let inputs = batch.feeds();
        // A fixed-batch model's filler rows are not compared.
        let used = |t: &runtime::OutputRef<'_>| used_data(t, batch.used, batch.rows()).to_vec();
        let (outputs, values) = ref_session.run_with(&inputs, &ref_names, |o| {
            let outputs = runs.read(o, batch, REFERENCE)?;
            Ok::<_, Error>((outputs, o[k..].iter().map(used).collect::<Vec<_>>()))
        })?;
        reference_values.push(outputs);
        session.run_with(&inputs, &names, |o| {
            sums.add(&held.fp32[b], &runs.read(o, batch, "QDQ model")?, batch);
            let part = |t| used_data(t, batch.used, batch.rows());
            errors.observe(probes, &values, |i| (part(&o[k + i]), part(&o[k + n + i])));
            Ok::<_, Error>(())
        })?;
        progress.advance(batch.units);
    }
    Ok(Measured { logits: sums.agreement(), reference_values, tensors: errors.finish(probes) })
}

/// The QDQ model on the first EP (the held-out runs' session) and on `other`, batch by batch with its dequantized
/// activations as outputs on both: the outputs on `other` against FP32's and against the first EP's, and every pair's
/// dequantized tensor on `other` against the first EP's.
pub fn across_eps(
    held: &HeldOut,
    int8: &Model,
    probes: &[Probe],
    other: &SessionConfig,
    progress: &dyn Progress,
) -> Result<EpComparison> {
    let runs = &held.runs;
    let mut names = runs.output_names();
    let k = names.len();
    names.extend(probes.iter().map(|p| p.dequantized.as_str()));
    let label = format!("QDQ model on {}", other.ep);
    let mut first = session_with_outputs(int8, &names, "QDQ model", &runs.cfg)?;
    first.feed_zeros(runs.zero_inputs())?;
    let mut second = session_with_outputs(int8, &names, &label, other)?;
    second.feed_zeros(runs.zero_inputs())?;
    let mut stats = vec![ErrorStats::default(); probes.len()];
    let (mut vs_fp32, mut vs_first) = (runs.sums(), runs.sums());
    for (b, batch) in runs.batches.iter().enumerate() {
        let inputs = batch.feeds();
        let used = |t: &runtime::OutputRef<'_>| used_data(t, batch.used, batch.rows()).to_vec();
        let (ours, values) = first.run_with(&inputs, &names, |o| {
            Ok::<_, Error>((runs.read(o, batch, "QDQ model")?, o[k..].iter().map(used).collect::<Vec<_>>()))
        })?;
        second.run_with(&inputs, &names, |o| {
            let theirs = runs.read(o, batch, &label)?;
            vs_fp32.add(&held.fp32[b], &theirs, batch);
            vs_first.add(&ours, &theirs, batch);
            for (i, s) in stats.iter_mut().enumerate() {
                s.observe(&values[i], used_data(&o[k + i], batch.used, batch.rows()));
            }
            Ok::<_, Error>(())
        })?;
        progress.advance(batch.units);
    }
    let mut tensors: Vec<EpTensor> = probes
        .iter()
        .zip(stats)
        .map(|(p, stats)| EpTensor { tensor: p.tensor.clone(), graph_order: p.graph_order, range: p.range, stats })
        .collect();
    tensors.sort_by_key(|t| t.graph_order);
    Ok(EpComparison {
        ep: other.ep.to_string(),
        against: runs.cfg.ep.to_string(),
        vs_fp32: vs_fp32.agreement(),
        vs_first: vs_first.agreement(),
        tensors,
    })
}

impl Errors {
    /// Folds one batch in: `values[i]` is probe `i`'s float value in the reference, `run(i)` its quantized input
    /// and dequantized output in the QDQ model.
    fn observe<'a>(&mut self, probes: &[Probe], values: &[Vec<f32>], run: impl Fn(usize) -> (&'a [f32], &'a [f32])) {
        for (i, p) in probes.iter().enumerate() {
            let (x, y) = run(i);
            self.total[i].observe(&values[i], y);
            self.own[i].observe(x, y);
            self.own[i].observe_clipping(x, p.range);
        }
    }

    /// Every probe's errors, the worst own rounding (lowest own SQNR) first.
    fn finish(self, probes: &[Probe]) -> Vec<TensorError> {
        let mut tensors: Vec<TensorError> = probes
            .iter()
            .zip(self.total.into_iter().zip(self.own))
            .map(|(p, (total, own))| TensorError {
                tensor: p.tensor.clone(),
                graph_order: p.graph_order,
                readers: p.readers.clone(),
                range: p.range,
                total,
                own,
            })
            .collect();
        tensors.sort_by(|a, b| a.own.sqnr_db().total_cmp(&b.own.sqnr_db()));
        tensors
    }
}

/// Per node reading quantized activations: the task's outputs with only that node's activation pairs taken out,
/// against FP32's, the most recovering (of `base`, the QDQ model's [`OutputAgreement::loss`]) first.
pub fn sensitivity(held: &HeldOut, int8: &Model, base: f64, progress: &dyn Progress) -> Result<Vec<NodeSensitivity>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in qdq::activation_pairs(int8) {
        for (node, _) in &p.consumers {
            groups.entry(node.clone()).or_default().push(p.tensor.clone());
        }
    }
    progress.start("sensitivity", Some(groups.len() as u64), "nodes");
    let groups: Vec<(String, Vec<String>)> = groups.into_iter().collect();
    let measured = side_by_side(held, int8, &groups, progress)?;
    let op_of: BTreeMap<&str, &str> = int8.graph().node.iter().map(|n| (n.name(), n.op_type())).collect();
    let mut out = Vec::with_capacity(groups.len());
    for ((node, mut inputs), a) in groups.into_iter().zip(measured) {
        let recovered = if base > 0.0 { (base - a.loss()) / base } else { 0.0 };
        inputs.dedup();
        let op_type = op_of.get(node.as_str()).copied().unwrap_or("?").to_owned();
        out.push(NodeSensitivity {
            node,
            op_type,
            inputs,
            logits: a,
            recovered,
            f1_recovered: None,
            f1_two_se: None,
            f1_difference: None,
        });
    }
    progress.finish();
    out.sort_by(|a, b| a.logits.loss().total_cmp(&b.logits.loss()));
    Ok(out)
}

/// The outputs' agreement with FP32 of `int8` with each group's node in float, measured side by side: one one-thread
/// session per core on the CPU EP (MiniLM: 49 nodes of 32 questions each), the same outputs, more nodes per second
/// than one session on every core.
fn side_by_side(
    held: &HeldOut,
    int8: &Model,
    groups: &[(String, Vec<String>)],
    progress: &dyn Progress,
) -> Result<Vec<OutputAgreement>> {
    let runs = &held.runs;
    let configs = runs.cfg.side_by_side(runtime::threads_or_cores(runs.cfg.intra_threads).min(groups.len()));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(configs.len())
        .build()
        .map_err(|e| Error::Internal(format!("sensitivity: cannot start {} threads: {e}", configs.len())))?;
    pool.install(|| {
        groups
            .par_iter()
            .map(|(node, _)| -> Result<OutputAgreement> {
                let cfg = &configs[rayon::current_thread_index().unwrap_or(0) % configs.len()];
                let model = qdq::with_float_inputs(int8, &HashSet::from([node.as_str()]));
                let values = runs.values_on(&model, &format!("QDQ model with {node}'s inputs in float"), cfg)?;
                progress.advance(1);
                Ok(held.agreement_of(&values))
            })
            .collect::<Result<_>>()
    })
}
