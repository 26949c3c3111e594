//! The tasks a BERT is measured on, behind one shape: [`Task::detect`] tells from the graph, the model's folder and
//! the names the user gave what the model is (once, into one value), and each task feeds its data, compares FP32 with
//! the quantized model in its own measures and reports them.
//!
//! - SQuAD question answering (start / end logits): EM / F1 on SQuAD questions ([`squad`]);
//! - classification and token classification (class logits): agreement with FP32 on any inputs ([`classify`]);
//! - sentence embeddings (a pooled output, or token states pooled as the folder says): fidelity to FP32 and retrieval
//!   quality ([`embed`]).

pub mod classify;
pub mod default_float;
pub mod embed;
pub mod held;
pub mod score;
pub mod squad;

use std::path::{Path, PathBuf};

use onnx_ir::Model;
use runtime::SessionConfig;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::inputs::config::DataConfig;
use crate::inputs::feeds::Feeds;
use crate::inputs::files::{InputSet, TextInputs};
use crate::inputs::roles::class_logits;
use crate::job::Report;
use crate::progress::Progress;
use crate::steps::run::EvalOptions;
use crate::steps::speed::OpProfile;
use crate::tasks::embed::EmbedTask;
use crate::tasks::embed::data::EmbedData;
use crate::tasks::score::{ScoringRequest, TaskScoring};
use crate::tasks::squad::data::Corpus;

/// What a model is, as far as measuring it goes.
#[derive(Debug, Clone)]
pub enum Task {
    /// Start and end logits: SQuAD questions, EM / F1.
    Squad,
    /// Class logits (`[batch, classes]`, or `[batch, seq, classes]` per token): agreement with FP32.
    Classify { output: String },
    /// A sentence embedding: cosine to FP32's, neighbours, retrieval.
    Embed(Box<EmbedTask>),
}

impl Task {
    /// The task of `model` (loaded from `model_path`) under `cfg`: the roles `--io-names` names decide
    /// (`start`/`end`, `logits`, `embedding`); else start / end logits found in the graph make a SQuAD model, a
    /// sentence embedding or token states ([`qdq::roles::embedding_output`]) an embedding model, and anything else
    /// is taken for a classifier, its class logits found as [`class_logits`] finds them (an error naming the roles
    /// to give when they cannot be).
    pub fn detect(model: &Model, model_path: &Path, cfg: &DataConfig) -> Result<Task> {
        match Task::detect_squad_or_embedding(model, model_path, cfg)? {
            Some(task) => Ok(task),
            None => Task::classifier(class_logits(model, &cfg.io_names, model_path)?, model, cfg),
        }
    }

    /// A classifier of class logits `output`, the classes its folder's config.json names checked against the ones
    /// the output declares ([`classify::check_folder_labels`]).
    pub(crate) fn classifier(output: String, model: &Model, cfg: &DataConfig) -> Result<Task> {
        classify::check_folder_labels(model, &output, cfg)?;
        Ok(Task::Classify { output })
    }

    /// A SQuAD or an embedding model as its outputs (and what was named) tell; `None` when they tell neither. An
    /// error is what contradicts the model's own kind (a folder whose modules qdq cannot compute, a named output
    /// it does not have): callers that fall back to another task on `None` never fall back past it.
    pub(crate) fn detect_squad_or_embedding(
        model: &Model,
        model_path: &Path,
        cfg: &DataConfig,
    ) -> Result<Option<Task>> {
        let named = cfg.io_names.named();
        let g = model.graph();
        if named.embedding.is_none() && named.logits.is_none() {
            let by_name = named.start.is_some() && named.end.is_some();
            if by_name || qdq::roles::logit_roles(g, named).is_ok() {
                return Ok(Some(Task::Squad));
            }
        }
        if named.logits.is_none() {
            let found = qdq::roles::embedding_output(g, named, cfg.pooling.is_some())
                .map_err(|e| crate::inputs::roles::role_error(model_path, e))?;
            if let Some(found) = found {
                return Ok(Some(Task::Embed(Box::new(EmbedTask::settle(found, model_path, cfg)?))));
            }
        }
        Ok(None)
    }

    /// The task as calibration needs it: only how the data feeds the model matters there, so a model whose outputs
    /// cannot be told apart calibrates on arrays or text as a classifier would (its outputs are not read).
    pub fn for_calibration(model: &Model, model_path: &Path, cfg: &DataConfig) -> Result<Task> {
        if let Some(task) = Task::detect_squad_or_embedding(model, model_path, cfg)? {
            return Ok(task);
        }
        match class_logits(model, &cfg.io_names, model_path) {
            Ok(output) => Task::classifier(output, model, cfg),
            Err(Error::Input { .. }) if cfg.io_names.named().embedding.is_none() && cfg.pooling.is_none() => {
                Ok(Task::Classify { output: String::new() })
            }
            Err(e) => Err(e),
        }
    }

    /// Calibration units when none are asked for: 100 SQuAD questions (the seed scripts'), 100 inputs; 2,000
    /// questions (with their paragraphs) or texts for an embedding model, whose short texts hold few tokens each
    /// (docs/QUANTIZATION.md measures the counts).
    pub fn default_cal_num(&self) -> usize {
        match self {
            Task::Embed(_) => 2000,
            Task::Squad | Task::Classify { .. } => 100,
        }
    }

    /// Every method [`Task::integer_method`] may choose.
    pub(crate) const INTEGER_METHODS: [calib::MethodKind; 2] = [calib::MethodKind::Mse, calib::MethodKind::Percentile];

    /// The range method of integer pairs when none is asked for. mse (the range of least expected rounding and
    /// clipping error per value) where each token's output counts alone (a QA head's logits, a token classifier);
    /// percentile (99.999) for a pooled sentence embedding: pooling averages the rounding noise of a text's tokens
    /// away, which is independent from token to token, but keeps the error of values clipped at the range, which
    /// all lean one way, so the range that serves the pooled output clips less than mse's (docs/QUANTIZATION.md,
    /// "all-MiniLM-L6-v2").
    pub fn integer_method(&self) -> calib::MethodKind {
        match self {
            Task::Embed(_) => calib::MethodKind::Percentile,
            Task::Squad | Task::Classify { .. } => calib::MethodKind::Mse,
        }
    }

    /// results.json's `task`.
    pub fn name(&self) -> &'static str {
        match self {
            Task::Squad => "squad",
            Task::Classify { .. } => "classification",
            Task::Embed(_) => "embedding",
        }
    }

    /// What the task's evaluation units are called.
    pub fn unit(&self) -> &'static str {
        match self {
            Task::Squad => "questions",
            Task::Classify { .. } => "inputs",
            Task::Embed(_) => "texts",
        }
    }
}

impl Task {
    /// Calibration inputs for this task's `model` (loaded from `model_path`) from `path`, its first `n` units (0 =
    /// all): `.npz` / `.npy` arrays for any model; a SQuAD `.json` as questions for a SQuAD model and as both kinds of
    /// text (questions and their paragraphs, [`EmbedData::calibration_texts`]) for an embedding model; any other file
    /// as text lines, TSV or JSONL (for an embedding model, each text alone).
    pub fn calibration_feeds(
        &self,
        (model, model_path): (&Model, &Path),
        path: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn Feeds>> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
        let feeds: Box<dyn Feeds> = match (self, ext.as_str()) {
            (_, "npz" | "npy") => Box::new(InputSet::load(path, model, text, n)?),
            (Task::Embed(_), _) => {
                let texts = EmbedData::calibration_texts(path, n)?;
                Box::new(InputSet::from_texts(path, &texts, text)?)
            }
            (Task::Squad, "json") => {
                let mut c = Corpus::load(path, cfg, &text.loaded_tokenizer(cfg)?, n)?;
                c.fit_model(model, model_path)?;
                Box::new(c)
            }
            (Task::Classify { .. }, "json") => {
                return Err(Error::Input {
                    path: path.to_path_buf(),
                    reason: format!(
                        "SQuAD JSON calibrates SQuAD and embedding models, and {} is a classifier: give .npz (arrays \
                         named after the model inputs), .npy (token ids), text lines or JSONL",
                        model_path.display()
                    ),
                });
            }
            (Task::Squad | Task::Classify { .. }, _) => Box::new(InputSet::load(path, model, text, n)?),
        };
        if n == 0 {
            let (units, unit) = feeds.units();
            tracing::info!("--cal-num 0: calibrating on all {units} {unit} of {} (the default is 100)", path.display());
        }
        Ok(feeds)
    }
}

/// What a model is evaluated on, as its task reads it: SQuAD questions (checked against the model), a classifier's
/// inputs and the logits it compares, or the texts an embedding model embeds (and, with labels, retrieves among).
pub(crate) enum TaskData {
    Squad(Box<Corpus>),
    Classify(InputSet, String),
    Embed(Box<EmbedTask>, EmbedData, InputSet),
}

impl Task {
    /// The first `n` units (0 = all) of `dataset` as this task evaluates `model` (loaded from `model_path`) on them,
    /// read through `cfg` and the model's text inputs `text`.
    pub(crate) fn eval_data(
        &self,
        (model, model_path): (&Model, &Path),
        dataset: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<TaskData> {
        Ok(match self {
            Task::Squad => {
                let mut d = Corpus::load(dataset, cfg, &text.loaded_tokenizer(cfg)?, n)?;
                d.fit_model(model, model_path)?;
                TaskData::Squad(Box::new(d))
            }
            Task::Classify { output } => {
                tracing::info!("no start / end logits: evaluating `{output}` as class logits, INT8 against FP32");
                TaskData::Classify(classify::load_inputs(dataset, model, text, n, output)?, output.clone())
            }
            Task::Embed(e) => {
                let data = EmbedData::load(dataset, cfg.corpus.as_deref(), n)?;
                let set = InputSet::from_texts(dataset, &data.texts, text)?;
                TaskData::Embed(e.clone(), data, set)
            }
        })
    }
}

impl TaskData {
    /// How many of the first `cal_num` units of `calibration` are also evaluated: SQuAD questions by id (`None`
    /// unless `calibration` reads as a SQuAD dataset); inputs of a file have no ids, so when calibration and
    /// evaluation read one file (`same_file`) both take its first rows and the shorter run is all shared.
    pub(crate) fn calibration_overlap(&self, calibration: &Path, cal_num: usize, same_file: bool) -> Option<usize> {
        match self {
            TaskData::Squad(evaluated) => {
                let all = squad_metrics::load_dataset(calibration).ok()?;
                let calibrated = if cal_num == 0 { all } else { all.first_n(cal_num) };
                let evaluated: std::collections::HashSet<&str> = evaluated.question_ids().collect();
                Some(calibrated.questions().filter(|q| evaluated.contains(q.id.as_str())).count())
            }
            TaskData::Classify(set, _) | TaskData::Embed(_, _, set) if same_file => Some(cal_num.min(set.len())),
            _ => None,
        }
    }
}

/// What `qdq e2e` asks of the model's task once both models are written: FP32 and the quantized model with their
/// sessions, the evaluation's options, the output directory, the quantized model's label (`INT8`, `A16W8`, ...),
/// the models compared beside it and the other EPs (a SQuAD model's), and the lengths an embedding model is timed
/// at.
pub(crate) struct E2eRun<'a> {
    pub fp32: Side<'a>,
    pub int8: Side<'a>,
    pub eval: &'a EvalOptions,
    pub out: &'a Path,
    pub label: &'a str,
    /// `--compare-methods`: each method and its model.
    pub compared: &'a [(String, PathBuf)],
    /// `--precision`'s others, in their order.
    pub precisions: Vec<OtherPrecision>,
    /// `--ep`'s others: the FP32 and the quantized model's session on each.
    pub other_eps: Vec<(&'a SessionConfig, &'a SessionConfig)>,
    pub seq_len: usize,
    pub fixed_batch: Option<usize>,
}

/// One more `--precision`'s model of an e2e run.
pub(crate) struct OtherPrecision {
    /// The policy's `precision` (`fp8-e4m3fn`).
    pub precision: String,
    /// The range method its ranges came from.
    pub method: String,
    /// Its name in progress lines and tables (`FP8 E4M3FN`).
    pub label: String,
    pub path: PathBuf,
}

/// What the task measured in an e2e run: results.json's `result`, tagged by `task` (the task's name).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "task")]
pub enum TaskResult {
    #[serde(rename = "squad")]
    Squad(Box<squad::e2e::SquadE2e>),
    #[serde(rename = "classification")]
    Classify(Box<classify::ClassifierEval>),
    #[serde(rename = "embedding")]
    Embed(Box<embed::EmbeddingEval>),
}

/// A policy's precision as the table's rows name it: `INT8`, `FP8 E4M3FN`, `FP8 E4M3FNUZ`.
pub(crate) fn precision_label(precision: &str) -> String {
    match precision.split_once('-') {
        Some((fp8, format)) => format!("{} {}", fp8.to_uppercase(), format.to_uppercase()),
        None => precision.to_uppercase(),
    }
}

/// How an e2e table names the quantized model.
pub(crate) struct TableLabels {
    /// Its row: `INT8 (QDQ)`, `FP8 E4M3FN (QDQ)`, `INT8 (dynamic)`.
    pub row: String,
    /// Its precision as rows name it: `INT8`, `FP8 E4M3FN`.
    pub precision: String,
    /// Its pairs' precision as the policy names it: `int8`, `fp8-e4m3fn`.
    pub pairs: String,
    /// The range method of its calibration (none in dynamic mode).
    pub method: Option<String>,
}

impl TaskResult {
    /// A SQuAD model's measurements, if that is the task.
    pub fn squad(&self) -> Option<&squad::e2e::SquadE2e> {
        match self {
            TaskResult::Squad(r) => Some(r),
            _ => None,
        }
    }

    /// A classifier's, if that is the task.
    pub fn classification(&self) -> Option<&classify::ClassifierEval> {
        match self {
            TaskResult::Classify(c) => Some(c),
            _ => None,
        }
    }

    /// An embedding model's, if that is the task.
    pub fn embedding(&self) -> Option<&embed::EmbeddingEval> {
        match self {
            TaskResult::Embed(e) => Some(e),
            _ => None,
        }
    }

    /// The task's FP32 vs INT8 table, as printed and as in report.md.
    pub(crate) fn table(&self, labels: &TableLabels) -> String {
        match self {
            TaskResult::Squad(r) => squad::table::table(r, labels),
            TaskResult::Classify(c) => classify::table(c, &labels.row),
            TaskResult::Embed(e) => embed::report::embedding_table(e, &labels.row),
        }
    }
}

impl TaskData {
    /// FP32 against the quantized model(s) of `run` in this task's measures; each phase's seconds into `phases`.
    pub(crate) fn e2e(
        &self,
        run: &E2eRun<'_>,
        progress: &dyn Progress,
        phases: &mut std::collections::BTreeMap<String, f64>,
    ) -> Result<TaskResult> {
        let t = std::time::Instant::now();
        let sides = (run.fp32, run.int8);
        Ok(match self {
            TaskData::Squad(data) => TaskResult::Squad(Box::new(squad::e2e::e2e(run, data, progress, phases)?)),
            TaskData::Classify(set, output) => {
                let c = classify::evaluate_classifier(sides.0, sides.1, set, output, run.eval, progress)?;
                phases.insert("evaluation".to_owned(), t.elapsed().as_secs_f64());
                TaskResult::Classify(Box::new(c))
            }
            TaskData::Embed(task, data, set) => {
                let e = embed::e2e(sides, task, data, set, (run.eval, run.seq_len, run.fixed_batch), progress, phases)?;
                TaskResult::Embed(Box::new(e))
            }
        })
    }

    /// Where `model`'s time goes on `session` (`--profile-ops`): on the first features of the data (at most
    /// [`crate::steps::speed::FEATURES`]), in batches of `batch`.
    pub(crate) fn profile(&self, model: &Path, session: &SessionConfig, batch: usize) -> Result<OpProfile> {
        match self {
            TaskData::Squad(data) => squad::eval::profile_first_features(model, data, batch, session),
            TaskData::Classify(set, output) => profile_inputs(model, session, batch, set, output),
            TaskData::Embed(task, _, set) => profile_inputs(model, session, batch, set, task.head.output.name()),
        }
    }
}

/// The [`OpProfile`] of `model` (on `session`) on the first inputs of `set` (at most
/// [`crate::steps::speed::FEATURES`], in batches of `batch`), reading `output`.
fn profile_inputs(
    model: &Path,
    session: &SessionConfig,
    batch: usize,
    set: &InputSet,
    output: &str,
) -> Result<OpProfile> {
    let n = set.len().min(crate::steps::speed::FEATURES);
    let batch = batch.max(1);
    let batches: Vec<_> = (0..n).step_by(batch).map(|i| set.batch(i..(i + batch).min(n))).collect();
    crate::steps::speed::profile_ops(model, session, &[], (batches.len(), n), |s| {
        batches.iter().try_for_each(|b| {
            let feeds: Vec<(&str, ndarray::ArrayView2<i64>)> = b.iter().map(|(k, a)| (k.as_str(), a.view())).collect();
            s.run_with(&feeds, &[output], |_| Ok::<_, Error>(()))
        })
    })
}

/// What `qdq eval` asks of a model's task: the model (its graph, for the checks), the data and how much of it, the
/// session and batching of the first EP and the sessions of `--ep`'s others, `--baseline`, `--out` and
/// `--profile-ops`. Each task reads what it measures ([`Task::eval`]).
pub(crate) struct EvalRequest<'a> {
    pub model: &'a Path,
    pub graph: &'a Model,
    pub dataset: &'a Path,
    /// The first N units of `dataset` (0 = all).
    pub samples: usize,
    pub data: DataConfig,
    pub opts: EvalOptions,
    /// `--ep`'s others, each named, with its session.
    pub other_eps: Vec<(String, SessionConfig)>,
    /// The resolved `--baseline`.
    pub baseline: Option<PathBuf>,
    pub out: Option<&'a Path>,
    pub profile_ops: bool,
}

impl EvalRequest<'_> {
    /// --out, --profile-ops and a second --ep are a SQuAD model's: refused for `what`.
    pub(crate) fn one_ep_only(&self, what: &str) -> Result<()> {
        if self.out.is_some() || self.profile_ops || !self.other_eps.is_empty() {
            return Err(Error::Usage(format!(
                "--out, --profile-ops and a second --ep are for SQuAD models; {what} is evaluated on one EP"
            )));
        }
        Ok(())
    }
}

impl Task {
    /// `qdq eval`: the model of `req` in this task's measures (against its baseline where one is given).
    pub(crate) fn eval(&self, req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>> {
        match self {
            Task::Squad => squad::eval::eval(req, progress),
            Task::Embed(task) => embed::eval::eval(task, req, progress),
            Task::Classify { output } => classify::eval(output, req, progress),
        }
    }
}

impl Task {
    /// The scoring of this task's candidates.
    pub(crate) fn scoring(&self, req: &ScoringRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn TaskScoring>> {
        Ok(match self {
            Task::Embed(task) => Box::new(embed::score::EmbedScoring::of(task, req, progress)?),
            Task::Squad => Box::new(squad::score::SquadScoring::of(req, progress)?),
            Task::Classify { output } => Box::new(classify::score::ClassifyScoring::of(output, req, progress)?),
        })
    }
}

/// What one side of an evaluation runs: the model file (ONNX Runtime reads it, with any external data) and its
/// session.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    pub path: &'a Path,
    pub session: &'a SessionConfig,
}

/// Which model ran where (a task's model results flatten it, so results.json keeps one layout for every task): the
/// file, its size, the EP (`cpu` after a permitted fallback) and the one asked for when it fell back to CPU from it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct RanOn {
    pub model: String,
    pub model_bytes: u64,
    pub ep: String,
    /// The precision the EP ran the float parts in, where that is a setting of the EP's (OpenVINO's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ep_precision: Option<String>,
    /// The EP asked for, when it fell back to CPU from it (`--allow-fallback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_from: Option<String>,
}

impl RanOn {
    /// `model` (the file read, named `name`) in `session`.
    pub(crate) fn of(session: &runtime::Session, name: &str, model: &Path) -> RanOn {
        RanOn {
            model: name.to_owned(),
            model_bytes: crate::model::model_size(model),
            ep: session.ep().short_name().to_owned(),
            ep_precision: session.ep().float_precision().map(str::to_owned),
            fallback_from: session.fallback_from().map(str::to_owned),
        }
    }

    /// The EP as the tables name it.
    pub fn label(&self) -> String {
        crate::steps::run::ep_label(&self.ep, self.ep_precision.as_deref(), self.fallback_from.as_deref())
    }
}
