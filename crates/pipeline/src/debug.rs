//! `qdq debug`: where a QDQ model loses accuracy. Runs the FP32 model, the QDQ model and the QDQ model's float
//! reference ([`qdq::float_reference`]: its activation pairs taken out) on held-out questions and measures, for every
//! activation pair, the dequantized tensor against the float value it stands for (any rewrite, a shifted Softmax or
//! a smoothed input, is the same tensor in both), and the logits against FP32's.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use calib::ErrorStats;
use onnx_ir::Model;
use rayon::prelude::*;
use runtime::SessionConfig;
use serde::Serialize;

use crate::calibrate::session_with_outputs;
use crate::data::Corpus;
use crate::jobs::Report;
use crate::progress::Progress;
use crate::settings::{DataSettings, RuntimeSettings, resolve_model};
use crate::{Error, Result};

/// `qdq debug`: the FP32 model, the QDQ model made from it, held-out questions.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct DebugJob {
    /// The FP32 model (file or model directory) the QDQ model was made from.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub model: PathBuf,
    /// The QDQ model to explain (model_qdq.onnx of `qdq e2e` / `qdq quantize`).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub qdq: PathBuf,
    /// SQuAD file; its last --questions questions are run (held out from an evaluation of its first ones).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub dataset: PathBuf,
    /// Held-out questions to run (the last N of --dataset).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 32, value_name = "N"))]
    pub questions: usize,
    /// Tensors in the printed table, worst first (--json lists all).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 20, value_name = "N"))]
    pub top: usize,
    /// Also write debug.json, debug.md and sqnr.svg (each pair's SQNR, graph order) into this directory.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub out: Option<PathBuf>,
    /// Also measure each node's sensitivity: the logits' KL against FP32 with only that node's quantized inputs
    /// kept in float (same ranges, no re-calibration; one more run of the questions per node).
    #[cfg_attr(feature = "cli", arg(long))]
    pub sensitivity: bool,
    /// With --sensitivity: also score F1 on the first --confirm-samples questions of --dataset for FP32, the QDQ model
    /// and the QDQ model with each of the N most recovering nodes in float, one at a time, so each node's KL stands
    /// beside the F1 it recovers (N + 2 evaluations). 0 = no F1.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0, value_name = "N", requires = "sensitivity"))]
    pub confirm: usize,
    /// Evaluation questions of --confirm (the first N of --dataset; keep them apart from the last --questions).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1000, value_name = "N"))]
    pub confirm_samples: usize,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub runtime: RuntimeSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
}

mod confirm;

pub use confirm::Confirmation;
use confirm::confirm;

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

/// How two models' start and end logits agree, per feature, over the feature's real tokens.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LogitAgreement {
    /// Mean KL(softmax(FP32) ‖ softmax(other)) in nats.
    pub kl_start: f64,
    pub kl_end: f64,
    /// Share of features whose argmax is the same.
    pub argmax_start: f64,
    pub argmax_end: f64,
    /// Largest |logit difference|.
    pub max_abs_diff: f64,
}

/// The QDQ model with one node's quantized activation inputs kept in float, against FP32.
#[derive(Debug, Clone, Serialize)]
pub struct NodeSensitivity {
    /// The node whose dequantized inputs were replaced by the float tensors.
    pub node: String,
    pub op_type: String,
    /// Its quantized activation inputs.
    pub inputs: Vec<String>,
    pub logits: LogitAgreement,
    /// The share of the QDQ model's KL (mean of start and end) this recovers; negative when it gets worse.
    pub recovered: f64,
    /// With --confirm, for the first nodes: F1 with this node's inputs in float minus the QDQ model's F1.
    pub f1_recovered: Option<f64>,
    /// With --confirm: twice the standard error of `f1_recovered` over the scored questions (paired by question): an
    /// effect inside ± this is as large as which answers happen to flip.
    pub f1_two_se: Option<f64>,
}

impl LogitAgreement {
    /// The mean of the start and end KL.
    pub fn kl(&self) -> f64 {
        (self.kl_start + self.kl_end) / 2.0
    }
}

/// What `qdq debug` found.
#[derive(Debug, Clone, Serialize)]
pub struct DebugReport {
    pub model: PathBuf,
    pub qdq: PathBuf,
    pub dataset: PathBuf,
    pub questions: usize,
    pub features: usize,
    /// The QDQ model against FP32.
    pub logits: LogitAgreement,
    /// The float reference (the QDQ model without its activation pairs: only its weights quantized) against FP32.
    pub weights_only_logits: LogitAgreement,
    /// Every activation pair, the worst own rounding (lowest `own` SQNR) first: the pairs that add the most error
    /// themselves, not those that only carry error from upstream.
    pub tensors: Vec<TensorError>,
    /// With `--sensitivity`: every node reading quantized activations, most recovering first.
    pub sensitivity: Vec<NodeSensitivity>,
    /// With `--confirm`.
    pub confirmation: Option<Confirmation>,
    /// Rows of the printed table.
    #[serde(skip)]
    pub top: usize,
}

/// Per activation pair: the tensor, the dequantized output it is read as, readers and range.
struct Probe {
    tensor: String,
    graph_order: usize,
    dequantized: String,
    readers: Vec<String>,
    range: (f32, f32),
}

/// The activation pairs of `int8`, one per quantized tensor (a tensor with several DequantizeLinear readers has
/// the same dequantized value in each); pairs without a per-tensor range are left out.
fn probes(int8: &Model) -> Vec<Probe> {
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

/// Sums of per-feature logit agreement.
#[derive(Default)]
struct LogitSums {
    kl: [f64; 2],
    same: [u64; 2],
    max_abs: f64,
    features: u64,
}

impl LogitSums {
    /// Adds a batch: `fp32` and `other` hold `[start, end]` as `[batch, seq]`; positions the batch's attention
    /// mask leaves out do not count.
    fn add(&mut self, fp32: &Logits, other: &Logits, batch: &squad::Batch) {
        let seq = batch.input_ids.ncols();
        // Only the rows holding features (a fixed-batch model's filler rows have no logits here: run_logits).
        for (row, m) in batch.attention_mask.rows().into_iter().take(batch.len()).enumerate() {
            let keep: Vec<bool> = m.iter().map(|&v| v != 0).collect();
            for k in 0..2 {
                let (a, b) = (&fp32[k][row * seq..(row + 1) * seq], &other[k][row * seq..(row + 1) * seq]);
                self.kl[k] += calib::softmax_kl(a, b, &keep);
                self.same[k] += u64::from(calib::argmax(a, &keep) == calib::argmax(b, &keep));
                let diff = a.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).fold(0.0, f64::max);
                self.max_abs = self.max_abs.max(diff);
            }
            self.features += 1;
        }
    }

    fn agreement(&self) -> LogitAgreement {
        let n = self.features.max(1) as f64;
        LogitAgreement {
            kl_start: self.kl[0] / n,
            kl_end: self.kl[1] / n,
            argmax_start: self.same[0] as f64 / n,
            argmax_end: self.same[1] as f64 / n,
            max_abs_diff: self.max_abs,
        }
    }
}

/// The FP32 logits `[start, end]` of one batch.
type Logits = [Vec<f32>; 2];

/// Runs [`DebugJob`].
pub fn debug_models(job: &DebugJob, progress: &dyn Progress) -> Result<DebugReport> {
    let (fp32_path, int8_path) = (resolve_model(&job.model)?, resolve_model(&job.qdq)?);
    let fp32 = Model::load(&fp32_path)?;
    if let Some(held) = crate::quantized_ops_text(&fp32) {
        return Err(Error::Input {
            path: fp32_path,
            reason: format!(
                "--model holds a quantized model ({held}): debug compares the quantized model (--qdq) with the FP32 \
                 model it was made from (--model); were the two given the other way round?"
            ),
        });
    }
    check_job(job)?;
    let held = HeldOut::new(&fp32_path, &fp32, &job.dataset, job.questions, &job.runtime, &job.data)?;
    drop(fp32);
    debug_with(job, &fp32_path, &int8_path, &held, progress)
}

fn check_job(job: &DebugJob) -> Result<()> {
    if job.questions == 0 {
        return Err(Error::Config("--questions must be at least 1".into()));
    }
    if let Some(dir) = &job.out {
        crate::prepare_out_dir(dir, "--out")?;
    }
    Ok(())
}

/// [`debug_models`] on held-out questions already run through FP32 (`held`: `job`'s dataset and questions, as
/// `qdq tune` shares them with its candidates' measurements).
pub(crate) fn debug_with(
    job: &DebugJob,
    fp32_path: &Path,
    int8_path: &Path,
    held: &HeldOut,
    progress: &dyn Progress,
) -> Result<DebugReport> {
    check_job(job)?;
    // The CPU layout's integer MatMuls read the quantized tensors directly: in their Q/DQ form (the same values),
    // each has its activation pair to measure and take out.
    let int8 = qdq::expand_integer_matmuls(Model::load(int8_path)?);
    let probes = probes(&int8);
    if probes.is_empty() {
        progress.note(&format!(
            "{} has no activation Q/DQ pairs (a dynamic or weight-only model?): only its logits are compared",
            int8_path.display()
        ));
    }
    let (run, fp32_logits) = (&held.runs, &held.fp32);
    progress.start("debugging", Some(held.questions as u64), "questions");
    let (logits, reference_logits, tensors) = run.measure(&int8, &probes, fp32_logits, progress)?;
    progress.finish();
    let mut sensitivity =
        if job.sensitivity { run.sensitivity(&int8, fp32_logits, logits.kl(), progress)? } else { Vec::new() };
    let confirmation = if job.confirm > 0 && !sensitivity.is_empty() {
        Some(confirm(job, fp32_path, &int8, &mut sensitivity, progress)?)
    } else {
        None
    };
    let report = DebugReport {
        model: fp32_path.to_path_buf(),
        qdq: int8_path.to_path_buf(),
        dataset: job.dataset.clone(),
        questions: held.questions,
        features: run.batches.iter().map(squad::Batch::len).sum(),
        logits,
        weights_only_logits: agreement(fp32_logits, &reference_logits, &run.batches),
        tensors,
        sensitivity,
        confirmation,
        top: job.top,
    };
    if let Some(dir) = &job.out {
        report.write(dir)?;
    }
    Ok(report)
}

impl DebugReport {
    /// debug.json, debug.md (the text, the chart linked) and sqnr.svg into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_string_pretty(&self.json()).map_err(|e| Error::Config(e.to_string()))?;
        crate::write_atomic(&dir.join("debug.json"), json.as_bytes())?;
        let rows: Vec<(usize, f64, f64)> =
            self.tensors.iter().map(|t| (t.graph_order, t.total.sqnr_db(), t.own.sqnr_db())).collect();
        crate::write_atomic(&dir.join("sqnr.svg"), crate::plots::sqnr_svg(&rows)?.as_bytes())?;
        let md = format!("# qdq debug\n\n{self}\n\n![SQNR of each quantized activation](sqnr.svg)\n");
        crate::write_atomic(&dir.join("debug.md"), md.as_bytes())
    }
}

/// Held-out questions and FP32's logits on them: scores other models by how their logits agree with FP32's.
pub(crate) struct HeldOut {
    runs: Runs,
    fp32: Vec<Logits>,
    questions: usize,
}

impl HeldOut {
    /// The last `questions` questions of `dataset`, tokenized for `fp32` (loaded from `fp32_path`), and its logits.
    pub(crate) fn new(
        fp32_path: &Path,
        fp32: &Model,
        dataset: &Path,
        questions: usize,
        runtime: &RuntimeSettings,
        data: &DataSettings,
    ) -> Result<Self> {
        let data_cfg = data.config(fp32_path)?;
        let tokenizer = data_cfg.tokenizer()?;
        let mut data = Corpus::load_last(dataset, &data_cfg, &tokenizer, questions)?;
        data.fit_model(fp32, fp32_path)?;
        let batches = data.batches(1)?.collect::<std::result::Result<Vec<_>, _>>()?;
        let dir = fp32_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let runs = Runs { cfg: runtime.fp32_session(Some(dir), "debug"), io: data.io().clone(), batches };
        let fp32 = runs.values(fp32, "FP32 model")?;
        Ok(HeldOut { runs, fp32, questions: data.questions() })
    }

    /// The held-out batches (batch 1) and the names they are fed by: what `qdq tune` times its candidates on.
    pub(crate) fn batches(&self) -> (&[squad::Batch], &squad::ModelIo) {
        (&self.runs.batches, &self.runs.io)
    }

    /// How `model`'s logits agree with FP32's (`label` names it in errors).
    pub(crate) fn agreement(&self, model: &Model, label: &str) -> Result<LogitAgreement> {
        let logits = self.runs.values(model, label)?;
        Ok(agreement(&self.fp32, &logits, &self.runs.batches))
    }
}

/// The held-out batches and how to run a model on them.
struct Runs {
    cfg: SessionConfig,
    io: squad::ModelIo,
    batches: Vec<squad::Batch>,
}

impl Runs {
    /// The outputs the logits come from (both, or one stacked output), fetched first in every run.
    fn logit_names(&self) -> Vec<&str> {
        self.io.logit_outputs()
    }

    /// The `[start, end]` logits of a run's outputs (the first [`Runs::logit_names`]).
    fn pair(&self, o: &[runtime::OutputRef<'_>], batch: &squad::Batch, model: &str) -> Result<Logits> {
        let l = crate::data::run_logits(o, &self.io, batch.len(), model)?;
        Ok([l.start.into_owned(), l.end.into_owned()])
    }

    /// `model`'s logits on every batch.
    fn values(&self, model: &Model, label: &str) -> Result<Vec<Logits>> {
        self.values_on(model, label, &self.cfg)
    }

    /// [`Runs::values`] in a session built with `cfg`.
    fn values_on(&self, model: &Model, label: &str, cfg: &SessionConfig) -> Result<Vec<Logits>> {
        let names = self.logit_names();
        let mut session = session_with_outputs(model, &names, label, cfg)?;
        session.feed_zeros(&self.io.zero_inputs)?;
        let mut logits = Vec::with_capacity(self.batches.len());
        for batch in &self.batches {
            logits.push(session.run_with(&batch.inputs(&self.io), &names, |o| self.pair(o, batch, label))?);
        }
        Ok(logits)
    }

    /// The QDQ model and its float reference, batch by batch (one batch's tensors in memory at a time): the QDQ
    /// model's logits against FP32's, the reference's logits, and every probe against the reference's value.
    fn measure(
        &self,
        int8: &Model,
        probes: &[Probe],
        fp32: &[Logits],
        progress: &dyn Progress,
    ) -> Result<(LogitAgreement, Vec<Logits>, Vec<TensorError>)> {
        let n = probes.len();
        let mut ref_names = self.logit_names();
        let k = ref_names.len();
        ref_names.extend(probes.iter().map(|p| p.tensor.as_str()));
        let mut names = ref_names.clone();
        names.extend(probes.iter().map(|p| p.dequantized.as_str()));
        let reference = qdq::float_reference(int8);
        let mut ref_session =
            session_with_outputs(&reference, &ref_names, "float reference of the QDQ model", &self.cfg)?;
        drop(reference);
        ref_session.feed_zeros(&self.io.zero_inputs)?;
        let mut session = session_with_outputs(int8, &names, "QDQ model", &self.cfg)?;
        session.feed_zeros(&self.io.zero_inputs)?;
        let (mut total, mut own) = (vec![ErrorStats::default(); n], vec![ErrorStats::default(); n]);
        let (mut sums, mut reference_logits) = (LogitSums::default(), Vec::with_capacity(self.batches.len()));
        for (b, batch) in self.batches.iter().enumerate() {
            let inputs = batch.inputs(&self.io);
            // A fixed-batch model's filler rows are not compared.
            let used = |t: &runtime::OutputRef<'_>| -> Vec<f32> {
                crate::calibrate::used_data(t, batch.len(), batch.rows()).to_vec()
            };
            let (logits, values) = ref_session.run_with(&inputs, &ref_names, |o| {
                let logits = self.pair(o, batch, "float reference of the QDQ model")?;
                Ok::<_, Error>((logits, o[k..].iter().map(used).collect::<Vec<_>>()))
            })?;
            reference_logits.push(logits);
            session.run_with(&inputs, &names, |o| {
                sums.add(&fp32[b], &self.pair(o, batch, "QDQ model")?, batch);
                for (i, p) in probes.iter().enumerate() {
                    let part = |t| crate::calibrate::used_data(t, batch.len(), batch.rows());
                    let (x, y) = (part(&o[k + i]), part(&o[k + n + i]));
                    total[i].observe(&values[i], y);
                    own[i].observe(x, y);
                    own[i].observe_clipping(x, p.range);
                }
                Ok::<_, Error>(())
            })?;
            progress.advance(crate::data::questions_done(batch));
        }
        let mut tensors: Vec<TensorError> = probes
            .iter()
            .zip(total.into_iter().zip(own))
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
        Ok((sums.agreement(), reference_logits, tensors))
    }

    /// Per node reading quantized activations: the logits with only that node's activation pairs taken out.
    fn sensitivity(
        &self,
        int8: &Model,
        fp32: &[Logits],
        base_kl: f64,
        progress: &dyn Progress,
    ) -> Result<Vec<NodeSensitivity>> {
        let op_of: BTreeMap<&str, &str> = int8.graph().node.iter().map(|n| (n.name(), n.op_type())).collect();
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for p in qdq::activation_pairs(int8) {
            for (node, _) in &p.consumers {
                groups.entry(node.clone()).or_default().push(p.tensor.clone());
            }
        }
        progress.start("sensitivity", Some(groups.len() as u64), "nodes");
        let groups: Vec<(String, Vec<String>)> = groups.into_iter().collect();
        // The nodes are measured side by side, one one-thread session per core on the CPU EP (MiniLM: 49 nodes of 32
        // questions each): the same logits, more nodes per second than one session on every core.
        let configs = self.cfg.side_by_side(runtime::threads_or_cores(self.cfg.intra_threads).min(groups.len()));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(configs.len())
            .build()
            .map_err(|e| Error::Config(format!("sensitivity: cannot start {} threads: {e}", configs.len())))?;
        let measured: Vec<LogitAgreement> = pool.install(|| {
            groups
                .par_iter()
                .map(|(node, _)| -> Result<LogitAgreement> {
                    let cfg = &configs[rayon::current_thread_index().unwrap_or(0) % configs.len()];
                    let model = qdq::with_float_inputs(int8, &std::collections::HashSet::from([node.as_str()]));
                    let logits = self.values_on(&model, &format!("QDQ model with {node}'s inputs in float"), cfg)?;
                    progress.advance(1);
                    Ok(agreement(fp32, &logits, &self.batches))
                })
                .collect::<Result<_>>()
        })?;
        let mut out = Vec::with_capacity(groups.len());
        for ((node, mut inputs), a) in groups.into_iter().zip(measured) {
            let recovered = if base_kl > 0.0 { (base_kl - a.kl()) / base_kl } else { 0.0 };
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
            });
        }
        progress.finish();
        out.sort_by(|a, b| a.logits.kl().total_cmp(&b.logits.kl()));
        Ok(out)
    }
}

/// How `other`'s logits agree with `fp32`'s over `batches`.
fn agreement(fp32: &[Logits], other: &[Logits], batches: &[squad::Batch]) -> LogitAgreement {
    let mut sums = LogitSums::default();
    for ((f, o), b) in fp32.iter().zip(other).zip(batches) {
        sums.add(f, o, b);
    }
    sums.agreement()
}

impl Report for DebugReport {
    /// The document `qdq debug --json` prints (docs/JSON.md, schema `qdq.debug/1`).
    fn json(&self) -> serde_json::Value {
        let tensors: Vec<serde_json::Value> = self
            .tensors
            .iter()
            .map(|t| {
                serde_json::json!({
                    "tensor": t.tensor,
                    "readers": t.readers,
                    "range": [t.range.0, t.range.1],
                    "sqnr_db": finite(t.total.sqnr_db()),
                    "relative_error": finite(t.total.relative_error()),
                    "max_abs_error": t.total.max_abs_error,
                    "own_sqnr_db": finite(t.own.sqnr_db()),
                    "clipped_fraction": t.own.clipped_fraction(),
                    "values": t.total.values,
                })
            })
            .collect();
        serde_json::json!({
            "schema": "qdq.debug/1",
            "model": self.model,
            "qdq": self.qdq,
            "dataset": self.dataset,
            "questions": self.questions,
            "features": self.features,
            "logits": self.logits,
            "weights_only_logits": self.weights_only_logits,
            "tensors": tensors,
            "sensitivity": self.sensitivity.iter().map(|n| serde_json::json!({
                "node": n.node,
                "op_type": n.op_type,
                "inputs": n.inputs,
                "logits": n.logits,
                "recovered": finite(n.recovered),
                "f1_recovered": n.f1_recovered,
                "f1_two_se": n.f1_two_se,
            })).collect::<Vec<_>>(),
            "confirmation": self.confirmation,
        })
    }
}

/// A float for JSON: infinite (an exact tensor's SQNR) and NaN become null.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl fmt::Display for DebugReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
        let agree = |a: &LogitAgreement| {
            format!(
                "KL start {:.4} / end {:.4} nats, same argmax {:.1} % / {:.1} %, max |diff| {:.3}",
                a.kl_start,
                a.kl_end,
                100.0 * a.argmax_start,
                100.0 * a.argmax_end,
                a.max_abs_diff
            )
        };
        writeln!(
            f,
            "{} against {}: the last {} questions of {} ({} features)",
            self.qdq.display(),
            self.model.display(),
            self.questions,
            self.dataset.display(),
            self.features
        )?;
        writeln!(f, "logits vs FP32:        {}", agree(&self.logits))?;
        writeln!(f, "weights only vs FP32:  {}", agree(&self.weights_only_logits))?;
        if self.tensors.is_empty() {
            return Ok(());
        }
        let shown = self.top.min(self.tensors.len());
        writeln!(
            f,
            "\n{} activation pairs; the {shown} that add the most error themselves (own: SQNR of this pair's rounding \
             and clipping alone; SQNR: the dequantized tensor against its float value, upstream error included; \
             higher is better):",
            self.tensors.len()
        )?;
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header(["tensor", "own dB", "SQNR dB", "rel. error", "clipped", "range", "read by"]);
        let db = |x: f64| if x.is_finite() { format!("{x:.1}") } else { "exact".into() };
        for e in &self.tensors[..shown] {
            let mut readers = e.readers.first().cloned().unwrap_or_default();
            if e.readers.len() > 1 {
                readers.push_str(&format!(" (+{})", e.readers.len() - 1));
            }
            t.add_row([
                e.tensor.clone(),
                db(e.own.sqnr_db()),
                db(e.total.sqnr_db()),
                format!("{:.4}", e.total.relative_error()),
                format!("{:.3} %", 100.0 * e.own.clipped_fraction()),
                format!("[{:.3}, {:.3}]", e.range.0, e.range.1),
                readers,
            ]);
        }
        for c in 1..=4 {
            if let Some(col) = t.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        write!(f, "{t}")?;
        if self.sensitivity.is_empty() {
            return Ok(());
        }
        let shown = self.top.min(self.sensitivity.len());
        writeln!(
            f,
            "\n\nSensitivity: the {shown} nodes (of {}) whose quantized inputs, kept in float alone, bring the logits \
             closest to FP32 (KL: mean of start and end; recovered: share of the QDQ model's KL {:.4}):",
            self.sensitivity.len(),
            self.logits.kl()
        )?;
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header(["node", "op", "KL", "recovered", "F1 recovered", "same argmax", "inputs"]);
        for n in &self.sensitivity[..shown] {
            t.add_row([
                n.node.clone(),
                n.op_type.clone(),
                format!("{:.4}", n.logits.kl()),
                // `+ 0.0` turns a -0 that rounds from a tiny loss into 0 (no "-0 %" in the table).
                format!("{:.0} %", (100.0 * n.recovered).round() + 0.0),
                match (n.f1_recovered, n.f1_two_se) {
                    (Some(d), Some(se)) if se.is_finite() => format!("{d:+.2} ± {se:.2}"),
                    (Some(d), _) => format!("{d:+.2}"),
                    _ => String::new(),
                },
                format!("{:.1} %", 50.0 * (n.logits.argmax_start + n.logits.argmax_end)),
                n.inputs.join(", "),
            ]);
        }
        for c in 2..=5 {
            if let Some(col) = t.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        write!(f, "{t}")?;
        if let Some(c) = &self.confirmation {
            write!(
                f,
                "\n\nF1 recovered: each node alone in float, scored on the first {} questions (FP32 {:.2}, QDQ model \
                 {:.2}); rank correlation of KL recovered with F1 recovered: {}",
                c.questions,
                c.fp32_f1,
                c.qdq_f1,
                c.rank_correlation
                    .map_or_else(|| "n/a (under 3 nodes, or one column constant)".to_owned(), |r| format!("{r:+.2}"))
            )?;
            let confirmed = self.sensitivity.iter().filter(|n| n.f1_recovered.is_some()).count();
            write!(
                f,
                ". Effects outside their ± 2 SE (the spread of which answers happen to flip): {} of {confirmed}",
                c.outside_noise
            )?;
            if c.outside_noise == 0 && confirmed > 0 {
                write!(
                    f,
                    " (on these questions no single node's F1 effect can be told from that spread, so F1 cannot check \
                     the order: more questions, or a model where single nodes matter, can)"
                )?;
            }
        }
        Ok(())
    }
}
