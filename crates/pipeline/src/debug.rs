//! `qdq debug`: where a QDQ model loses accuracy. Runs the FP32 model, the QDQ model and the QDQ model's float
//! reference ([`qdq::float_reference`]: its activation pairs taken out) on held-out questions and measures, for every
//! activation pair, the dequantized tensor against the float value it stands for (any rewrite, a shifted Softmax or
//! a smoothed input, is the same tensor in both), and the logits against FP32's.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use calib::ErrorStats;
use onnx_ir::{DataType, GraphExt, Model};
use runtime::{Session, SessionConfig};
use serde::Serialize;

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
    #[cfg_attr(feature = "cli", command(flatten))]
    pub runtime: RuntimeSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
}

/// One activation pair of the QDQ model, measured.
#[derive(Debug, Clone, Serialize)]
pub struct TensorError {
    /// The quantized float tensor (the QuantizeLinear's input in the QDQ model).
    pub tensor: String,
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
    /// Every activation pair, worst total SQNR first.
    pub tensors: Vec<TensorError>,
    /// Rows of the printed table.
    #[serde(skip)]
    pub top: usize,
}

/// Per activation pair: the tensor, the dequantized output it is read as, readers and range.
struct Probe {
    tensor: String,
    dequantized: String,
    readers: Vec<String>,
    range: (f32, f32),
}

/// The activation pairs of `int8`, one per quantized tensor (a tensor with several DequantizeLinear readers has
/// the same dequantized value in each); pairs without a per-tensor range are left out.
fn probes(int8: &Model) -> Vec<Probe> {
    let mut by_tensor: BTreeMap<String, Probe> = BTreeMap::new();
    for p in qdq::activation_pairs(int8) {
        let Some(range) = p.range() else { continue };
        let readers = p.consumers.iter().map(|(n, s)| format!("{n}[{s}]"));
        let probe = by_tensor.entry(p.tensor.clone()).or_insert_with(|| Probe {
            tensor: p.tensor.clone(),
            dequantized: p.output.clone(),
            readers: Vec::new(),
            range,
        });
        probe.readers.extend(readers);
    }
    by_tensor.into_values().collect()
}

/// A session on `model` with `extra` tensors exposed as float outputs.
fn session_with(model: &Model, extra: &[&str], label: &str, cfg: &SessionConfig) -> Result<Session> {
    let mut m = model.clone();
    let existing: Vec<String> = m.graph().output.iter().map(|o| o.name().to_owned()).collect();
    for t in extra.iter().filter(|t| !existing.iter().any(|e| e == *t)) {
        m.graph_mut().add_output(t, DataType::Float);
    }
    Ok(Session::from_bytes(&m.to_bytes()?, label, cfg)?)
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
    /// Adds a batch: `fp32` and `other` hold `[start, end]` as `[batch, seq]`, `mask` is `[batch, seq]`.
    fn add(&mut self, fp32: &[Vec<f32>; 2], other: &[Vec<f32>; 2], mask: &[i64], seq: usize) {
        for (row, m) in mask.chunks(seq.max(1)).enumerate() {
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

/// Runs [`DebugJob`].
pub fn debug_models(job: &DebugJob, progress: &dyn Progress) -> Result<DebugReport> {
    let (fp32_path, int8_path) = (resolve_model(&job.model)?, resolve_model(&job.qdq)?);
    if job.questions == 0 {
        return Err(Error::Config("--questions must be at least 1".into()));
    }
    let data_cfg = job.data.config(&fp32_path)?;
    let tokenizer = data_cfg.tokenizer()?;
    let (fp32, int8) = (Model::load(&fp32_path)?, Model::load(&int8_path)?);
    let mut data = Corpus::load_last(&job.dataset, &data_cfg, &tokenizer, job.questions)?;
    data.fit_model(&fp32, &fp32_path)?;
    let probes = probes(&int8);
    if probes.is_empty() {
        progress.note(&format!(
            "{} has no activation Q/DQ pairs (a dynamic or weight-only model?): only its logits are compared",
            int8_path.display()
        ));
    }
    let io = data.io().clone();
    let logits = [io.start_logits.as_str(), io.end_logits.as_str()];
    let dir = fp32_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let cfg = job.runtime.fp32_session(Some(dir), "debug");
    let tensors: Vec<&str> = probes.iter().map(|p| p.tensor.as_str()).collect();
    let mut int8_outputs = logits.to_vec();
    int8_outputs.extend(&tensors);
    int8_outputs.extend(probes.iter().map(|p| p.dequantized.as_str()));
    let mut ref_outputs = logits.to_vec();
    ref_outputs.extend(&tensors);
    let mut sessions = [
        session_with(&fp32, &logits, "FP32 model", &cfg)?,
        session_with(&qdq::float_reference(&int8), &ref_outputs, "float reference of the QDQ model", &cfg)?,
        session_with(&int8, &int8_outputs, "QDQ model", &cfg)?,
    ];
    drop((fp32, int8));

    let n = probes.len();
    let (mut total, mut own) = (vec![ErrorStats::default(); n], vec![ErrorStats::default(); n]);
    let (mut vs_int8, mut vs_ref) = (LogitSums::default(), LogitSums::default());
    progress.start("debugging", Some(data.questions() as u64));
    let mut features = 0;
    for batch in data.batches(1)? {
        let batch = batch?;
        let inputs = batch.inputs(&io);
        let seq = batch.input_ids.ncols();
        let mask = batch.attention_mask.as_slice().unwrap_or_default();
        let pair = |o: &[runtime::OutputRef<'_>]| [o[0].data.to_vec(), o[1].data.to_vec()];
        let f = sessions[0].run_with(&inputs, &logits, |o| Ok::<_, Error>(pair(o)))?;
        let (r_logits, reference) = sessions[1].run_with(&inputs, &ref_outputs, |o| {
            Ok::<_, Error>((pair(o), o[2..].iter().map(|t| t.data.to_vec()).collect::<Vec<_>>()))
        })?;
        sessions[2].run_with(&inputs, &int8_outputs, |o| {
            vs_int8.add(&f, &pair(o), mask, seq);
            for (i, p) in probes.iter().enumerate() {
                let (x, y) = (o[2 + i].data, o[2 + n + i].data);
                total[i].observe(&reference[i], y);
                own[i].observe(x, y);
                own[i].observe_clipping(x, p.range);
            }
            Ok::<_, Error>(())
        })?;
        vs_ref.add(&f, &r_logits, mask, seq);
        features += batch.len();
        progress.advance(crate::calibrate::questions_done(&batch));
    }
    progress.finish();

    let mut tensors: Vec<TensorError> = probes
        .into_iter()
        .zip(total.into_iter().zip(own))
        .map(|(p, (total, own))| TensorError { tensor: p.tensor, readers: p.readers, range: p.range, total, own })
        .collect();
    tensors.sort_by(|a, b| a.total.sqnr_db().total_cmp(&b.total.sqnr_db()));
    Ok(DebugReport {
        model: fp32_path,
        qdq: int8_path,
        dataset: job.dataset.clone(),
        questions: data.questions(),
        features,
        logits: vs_int8.agreement(),
        weights_only_logits: vs_ref.agreement(),
        tensors,
        top: job.top,
    })
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
            "\n{} activation pairs; the {shown} furthest from their float value (SQNR: signal to quantization noise, \
             higher is better; own = this pair's rounding and clipping alone):",
            self.tensors.len()
        )?;
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header(["tensor", "SQNR dB", "own dB", "rel. error", "clipped", "range", "read by"]);
        let db = |x: f64| if x.is_finite() { format!("{x:.1}") } else { "exact".into() };
        for e in &self.tensors[..shown] {
            let mut readers = e.readers.first().cloned().unwrap_or_default();
            if e.readers.len() > 1 {
                readers.push_str(&format!(" (+{})", e.readers.len() - 1));
            }
            t.add_row([
                e.tensor.clone(),
                db(e.total.sqnr_db()),
                db(e.own.sqnr_db()),
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
        write!(f, "{t}")
    }
}
