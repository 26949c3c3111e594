//! The tasks a BERT is measured on, behind one shape: each task's room (`squad/`, `classify/`, `embed/`) implements
//! [`TaskRoom`] (what the task calibrates on, evaluates on, scores `qdq tune`'s candidates by, holds out for `qdq
//! debug`) and [`TaskData`] (its evaluation data in `qdq e2e`), its results.json part is a [`TaskOutcome`], and
//! [`DETECTORS`] lists the rooms in the order they claim a model. [`Task`] is the room that claimed it.
//!
//! - SQuAD question answering (start / end logits): EM / F1 on SQuAD questions ([`squad`]);
//! - classification and token classification (class logits): agreement with FP32 on any inputs ([`classify`]);
//! - sentence embeddings (a pooled output, or token states pooled as the folder says): fidelity to FP32 and retrieval
//!   quality ([`embed`]).

pub mod classify;
pub mod default_float;
pub mod embed;
pub mod score;
pub mod squad;

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_ir::Model;
use runtime::SessionConfig;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::held_out::HeldOut;
use crate::inputs::config::DataConfig;
use crate::inputs::feeds::Feeds;
use crate::inputs::files::{InputSet, TextInputs};
use crate::inputs::folder::Loader;
use crate::job::Report;
use crate::progress::Progress;
use crate::steps::run::EvalOptions;
use crate::steps::speed::OpProfile;
use crate::tasks::score::{ScoringRequest, TaskScoring};

/// What qdq asks of one task, each task's room answering for its own: its name and units, how it calibrates, what it
/// evaluates on and how, how `qdq tune` scores its candidates and which inputs `qdq debug` holds out.
pub(crate) trait TaskRoom: std::fmt::Debug + Send + Sync {
    /// results.json's `task`.
    fn name(&self) -> &'static str;
    /// What the task's evaluation units are called (`questions`, `inputs`, `texts`).
    fn unit(&self) -> &'static str;
    /// Calibration units when none are asked for.
    fn default_cal_num(&self) -> usize;
    /// The range method of integer pairs when none is asked for (one of [`Task::INTEGER_METHODS`]).
    fn integer_method(&self) -> calib::MethodKind;
    /// What the model was settled as, in one line for the log (an embedding model's output and pooling).
    fn describe(&self) -> Option<String> {
        None
    }
    /// Whether `qdq e2e` evaluates this task on each of several `--ep`s (else on the first only).
    fn on_several_eps(&self) -> bool {
        false
    }
    /// The Python library (and class) that loads a folder of this task's model, if one does.
    fn loader(&self) -> Option<Loader>;
    /// The output whose mean shift under quantization moves the task's decisions (a classifier's class logits), to be
    /// corrected in its bias (policy `output_bias`); `None` where a shift common to all inputs decides nothing
    /// (SQuAD's span logits: a constant per position) or is not the layer's to correct (a pooled embedding).
    fn shifted_output(&self) -> Option<&str>;
    /// What scores a candidate when `qdq debug --confirm` (SQuAD's F1 beside the sensitivity) does not apply: `None`
    /// when it does.
    fn confirm_instead(&self) -> Option<&'static str>;
    /// Calibration inputs for `model` (loaded from `model_path`) from `path` (not `.npz` / `.npy`, which every task
    /// reads alike), its first `n` units (0 = all).
    fn calibration_feeds(
        &self,
        model: (&Model, &Path),
        path: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn Feeds>>;
    /// The first `n` units (0 = all) of `dataset` as this task evaluates `model` on them.
    fn eval_data(
        &self,
        model: (&Model, &Path),
        dataset: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn TaskData>>;
    /// `qdq eval`: the model of `req` in this task's measures (against its baseline where one is given).
    fn eval(&self, req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>>;
    /// The scoring of `qdq tune`'s candidates.
    fn scoring(&self, req: &ScoringRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn TaskScoring>>;
    /// The last `n` units of `dataset` held out for `qdq debug` and `qdq tune`, with FP32's outputs on them.
    fn held_out(
        &self,
        fp32: (&Model, &Path),
        dataset: &Path,
        n: usize,
        session: SessionConfig,
        cfg: &DataConfig,
    ) -> Result<HeldOut>;
}

/// A task's evaluation data in `qdq e2e`, as its room reads it.
pub(crate) trait TaskData {
    /// How many of the first `cal_num` units of `calibration` are also evaluated, when that can be told.
    fn calibration_overlap(&self, calibration: &Path, cal_num: usize, same_file: bool) -> Option<usize>;
    /// FP32 against the quantized model(s) of `run` in this task's measures; each phase's seconds into `phases`.
    fn e2e(
        &self,
        run: &E2eRun<'_>,
        progress: &dyn Progress,
        phases: &mut std::collections::BTreeMap<String, f64>,
    ) -> Result<TaskResult>;
    /// Where `model`'s time goes on `session` (`--profile-ops`): on the first features of the data (at most
    /// [`crate::steps::speed::FEATURES`]), in batches of `batch`.
    fn profile(&self, model: &Path, session: &SessionConfig, batch: usize) -> Result<OpProfile>;
}

/// Whether a room claims a model: [`Detected::Is`] its task; [`Detected::Not`] with why, when the room can say
/// (the error shown if no room claims the model). An `Err` is a model that contradicts its own kind (a folder whose
/// modules qdq cannot compute, a named output the graph lacks): detection stops there.
pub(crate) enum Detected {
    Is(Task),
    Not(Option<Error>),
}

/// A room's detector: whether `model` (loaded from the path) is its task under the data configuration.
pub(crate) type Detector = fn(&Model, &Path, &DataConfig) -> Result<Detected>;

/// The rooms in the order they claim a model: start / end logits make a SQuAD model; then a sentence embedding or
/// token states an embedding model ([`model_io::roles::embedding_output`]); then class logits a classifier
/// ([`crate::inputs::roles::class_logits`]). The roles `--io-names` names decide first within each. A new task is
/// its room and one line here.
pub(crate) const DETECTORS: [(&str, Detector); 3] =
    [("squad", squad::room::detect), ("embedding", embed::room::detect), ("classification", classify::room::detect)];

/// What a command does with a model no room claims (its outputs cannot be told apart), unless an embedding or a
/// pooling was asked for (then it is always the error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unclaimed {
    /// Refuse it, with the last room's reason (`qdq e2e`, `debug`, `tune`).
    Refuse,
    /// Calibrate on its inputs alone, its outputs unread (`qdq calibrate`: only how the data feeds the model matters).
    CalibrateInputs,
    /// Score it on SQuAD, whose checks name what does not fit (`qdq eval`).
    ScoreAsSquad,
}

/// What a model is, as far as measuring it goes: the room that claimed it ([`DETECTORS`]).
#[derive(Debug, Clone)]
pub struct Task(Arc<dyn TaskRoom>);

impl Task {
    /// The task of `room`.
    pub(crate) fn of(room: impl TaskRoom + 'static) -> Task {
        Task(Arc::new(room))
    }

    /// The task of `model` (loaded from `model_path`) under `cfg`: the first room of [`DETECTORS`] to claim it; a
    /// model none claims is an error naming the roles to give.
    pub fn detect(model: &Model, model_path: &Path, cfg: &DataConfig) -> Result<Task> {
        Task::detect_or(model, model_path, cfg, Unclaimed::Refuse)
    }

    /// As [`Task::detect`], a model no room claims taken as `unclaimed` says.
    pub fn detect_or(model: &Model, model_path: &Path, cfg: &DataConfig, unclaimed: Unclaimed) -> Result<Task> {
        let mut why = None;
        for (_, detect) in DETECTORS {
            match detect(model, model_path, cfg)? {
                Detected::Is(task) => return Ok(task),
                Detected::Not(reason) => why = reason.or(why),
            }
        }
        let named = cfg.io_names.named().embedding.is_some() || cfg.pooling.is_some();
        let why = why.unwrap_or_else(|| Error::Input {
            path: model_path.to_path_buf(),
            reason: "no output qdq can measure: name the outputs with --io-names".to_owned(),
        });
        match (unclaimed, why) {
            (Unclaimed::CalibrateInputs, Error::Input { .. }) if !named => {
                Ok(Task::of(classify::room::ClassifyTask { output: classify::ClassOutput::of(model, String::new()) }))
            }
            (Unclaimed::ScoreAsSquad, _) if !named => Ok(Task::of(squad::room::SquadTask)),
            (_, why) => Err(why),
        }
    }

    /// Every method [`TaskRoom::integer_method`] may choose.
    pub(crate) const INTEGER_METHODS: [calib::MethodKind; 2] = [calib::MethodKind::Mse, calib::MethodKind::Percentile];

    /// Calibration units when none are asked for: 100 SQuAD questions (the seed scripts'), 100 inputs; 2,000
    /// questions (with their paragraphs) or texts for an embedding model, whose short texts hold few tokens each
    /// (docs/QUANTIZATION.md measures the counts).
    pub fn default_cal_num(&self) -> usize {
        self.0.default_cal_num()
    }

    /// The range method of integer pairs when none is asked for: mse where each token's output counts alone (a QA
    /// head's logits, a classifier); percentile for a pooled sentence embedding (docs/QUANTIZATION.md,
    /// "all-MiniLM-L6-v2").
    pub fn integer_method(&self) -> calib::MethodKind {
        self.0.integer_method()
    }

    /// results.json's `task`.
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// What the task's evaluation units are called.
    pub fn unit(&self) -> &'static str {
        self.0.unit()
    }

    /// What the model was settled as, in one line for the log (an embedding model's output and pooling).
    pub fn describe(&self) -> Option<String> {
        self.0.describe()
    }

    /// Whether `qdq e2e` evaluates this task on each of several `--ep`s.
    pub(crate) fn on_several_eps(&self) -> bool {
        self.0.on_several_eps()
    }

    /// [`TaskRoom::loader`].
    pub(crate) fn loader(&self) -> Option<Loader> {
        self.0.loader()
    }

    /// [`TaskRoom::shifted_output`].
    pub(crate) fn shifted_output(&self) -> Option<&str> {
        self.0.shifted_output()
    }

    /// [`TaskRoom::confirm_instead`].
    pub(crate) fn confirm_instead(&self) -> Option<&'static str> {
        self.0.confirm_instead()
    }

    /// Calibration inputs for this task's `model` (loaded from `model_path`) from `path`, its first `n` units (0 =
    /// all): `.npz` / `.npy` arrays for any model; any other file as the task reads it (a SQuAD `.json` as questions
    /// for a SQuAD model and as both kinds of text for an embedding model; text lines, TSV or JSONL).
    pub fn calibration_feeds(
        &self,
        (model, model_path): (&Model, &Path),
        path: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn Feeds>> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
        let feeds: Box<dyn Feeds> = match ext.as_str() {
            "npz" | "npy" => Box::new(InputSet::load(path, model, text, n)?),
            _ => self.0.calibration_feeds((model, model_path), path, n, cfg, text)?,
        };
        if n == 0 {
            let (units, unit) = feeds.units();
            tracing::info!("--cal-num 0: calibrating on all {units} {unit} of {} (the default is 100)", path.display());
        }
        Ok(feeds)
    }

    /// The first `n` units (0 = all) of `dataset` as this task evaluates `model` (loaded from `model_path`) on them,
    /// read through `cfg` and the model's text inputs `text`.
    pub(crate) fn eval_data(
        &self,
        model: (&Model, &Path),
        dataset: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn TaskData>> {
        self.0.eval_data(model, dataset, n, cfg, text)
    }

    /// `qdq eval`: the model of `req` in this task's measures (against its baseline where one is given).
    pub(crate) fn eval(&self, req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>> {
        self.0.eval(req, progress)
    }

    /// The scoring of this task's candidates.
    pub(crate) fn scoring(&self, req: &ScoringRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn TaskScoring>> {
        self.0.scoring(req, progress)
    }

    /// The held-out inputs `qdq debug` and `qdq tune` measure this task's models on, the last `n` units of `dataset`,
    /// with FP32's (`fp32`, loaded from `fp32_path`) outputs on them, run on `session`.
    pub(crate) fn held_out(
        &self,
        fp32: (&Model, &Path),
        dataset: &Path,
        n: usize,
        session: SessionConfig,
        cfg: &DataConfig,
    ) -> Result<HeldOut> {
        self.0.held_out(fp32, dataset, n, session, cfg)
    }
}

/// The inputs of a file as a classifier or an embedding model reads them have no ids: when calibration and
/// evaluation read one file (`same_file`) both take its first rows and the shorter run is all shared.
pub(crate) fn rows_shared(set: &InputSet, cal_num: usize, same_file: bool) -> Option<usize> {
    same_file.then(|| cal_num.min(set.len()))
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

/// What a task measured in an e2e run, as its room reports it: results.json's `result`, tagged by `task` (the
/// room registers its type under the task's name with `#[typetag::serde(name = ...)]`).
#[typetag::serde(tag = "task")]
pub(crate) trait TaskOutcome: OutcomeBase + std::fmt::Debug + Send + Sync {
    /// The task's FP32 vs INT8 table, as printed and as in report.md.
    fn table(&self, labels: &TableLabels) -> String;
}

/// What every [`TaskOutcome`] has by being a plain value: a downcast, a clone, an equality.
pub(crate) trait OutcomeBase {
    fn as_any(&self) -> &dyn Any;
    fn boxed(&self) -> Box<dyn TaskOutcome>;
    fn same_as(&self, other: &dyn TaskOutcome) -> bool;
}

impl<T: TaskOutcome + Clone + PartialEq + 'static> OutcomeBase for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn boxed(&self) -> Box<dyn TaskOutcome> {
        Box::new(self.clone())
    }
    fn same_as(&self, other: &dyn TaskOutcome) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
}

/// What the task measured in an e2e run: results.json's `result`, tagged by `task` (the task's name).
#[derive(Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskResult(Box<dyn TaskOutcome>);

impl Clone for TaskResult {
    fn clone(&self) -> Self {
        TaskResult(self.0.boxed())
    }
}

impl PartialEq for TaskResult {
    fn eq(&self, other: &Self) -> bool {
        self.0.same_as(&*other.0)
    }
}

impl TaskResult {
    /// A room's measurements as a result.
    pub(crate) fn new(outcome: impl TaskOutcome + 'static) -> TaskResult {
        TaskResult(Box::new(outcome))
    }

    /// The measurements, if they are a `T` (a task room's: [`squad::e2e::SquadE2e`], [`classify::ClassifierEval`],
    /// [`embed::EmbeddingEval`]).
    pub fn of<T: 'static>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }

    /// A SQuAD model's measurements, if that is the task.
    pub fn squad(&self) -> Option<&squad::e2e::SquadE2e> {
        self.of()
    }

    /// A classifier's, if that is the task.
    pub fn classification(&self) -> Option<&classify::ClassifierEval> {
        self.of()
    }

    /// An embedding model's, if that is the task.
    pub fn embedding(&self) -> Option<&embed::EmbeddingEval> {
        self.of()
    }

    /// The task's FP32 vs INT8 table, as printed and as in report.md.
    pub(crate) fn table(&self, labels: &TableLabels) -> String {
        self.0.table(labels)
    }
}

/// The [`OpProfile`] of `model` (on `session`) on the first inputs of `set` (at most
/// [`crate::steps::speed::FEATURES`], in batches of `batch`), reading `output`.
pub(crate) fn profile_inputs(
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

#[cfg(test)]
mod tests {
    use model_io::roles::NamedRoles;
    use onnx_ir::tiny_bert::{Head, TinyBertConfig, build};

    use super::*;
    use crate::inputs::roles::IoNames;
    use crate::settings::data::{DataSettings, SquadVersion};

    fn cfg(dir: &Path, io_names: IoNames) -> DataConfig {
        let vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/squad/vocab.txt");
        let settings = DataSettings {
            vocab: Some(vocab),
            tokenizer_json: None,
            lowercase: true,
            version: SquadVersion::V1_1,
            seq_len: Some(64),
            query_len: Some(16),
            doc_stride: Some(24),
            io_names,
            force: false,
            pad_to_max: false,
            pooling: None,
            corpus: None,
        };
        settings.config(&dir.join("model.onnx")).unwrap()
    }

    const EVERY: [Unclaimed; 3] = [Unclaimed::Refuse, Unclaimed::CalibrateInputs, Unclaimed::ScoreAsSquad];

    /// Each head is claimed by its room whatever the command; a model no room claims is refused, calibrated on its
    /// inputs or scored on SQuAD as the command says; a named embedding the graph lacks is an error for every command.
    #[test]
    fn the_first_room_to_claim_a_model_is_its_task() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.onnx");
        let heads = [
            (Head::Qa, "squad"),
            (Head::QaStacked, "squad"),
            (Head::Classifier { labels: 3 }, "classification"),
            (Head::Token { labels: 4 }, "classification"),
            (Head::MeanPooled { torch_names: false }, "embedding"),
        ];
        for (head, name) in heads {
            let m = build(&TinyBertConfig { head, ..Default::default() });
            for unclaimed in EVERY {
                let task = Task::detect_or(&m, &path, &cfg(dir.path(), IoNames::Auto), unclaimed).unwrap();
                assert_eq!(task.name(), name, "{head:?} {unclaimed:?}");
            }
        }
        let qa = build(&TinyBertConfig::default());
        let named = |roles: NamedRoles| cfg(dir.path(), IoNames::Explicit(roles));
        let nope = NamedRoles { logits: Some("nope".into()), ..Default::default() };
        let e = Task::detect_or(&qa, &path, &named(nope.clone()), Unclaimed::Refuse).unwrap_err().to_string();
        assert!(e.contains("logits=nope") && e.contains("start_logits"), "{e}");
        let calibrated = Task::detect_or(&qa, &path, &named(nope.clone()), Unclaimed::CalibrateInputs).unwrap();
        assert_eq!((calibrated.name(), calibrated.unit()), ("classification", "inputs"));
        assert_eq!(Task::detect_or(&qa, &path, &named(nope), Unclaimed::ScoreAsSquad).unwrap().name(), "squad");
        let embedding = NamedRoles { embedding: Some("nope".into()), ..Default::default() };
        for unclaimed in EVERY {
            let e = Task::detect_or(&qa, &path, &named(embedding.clone()), unclaimed).unwrap_err().to_string();
            assert!(e.contains("nope"), "{unclaimed:?}: {e}");
        }
    }
}
