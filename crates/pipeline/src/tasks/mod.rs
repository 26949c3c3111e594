//! The tasks a BERT is measured on, behind one shape: [`Task::detect`] tells from the graph, the model's folder and
//! the names the user gave what the model is (once, into one value), and each task feeds its data, compares FP32 with
//! the quantized model in its own measures and reports them.
//!
//! - SQuAD question answering (start / end logits): EM / F1 on SQuAD questions (`inputs::squad`, `steps::evaluate`);
//! - classification and token classification (class logits): agreement with FP32 on any inputs ([`classify`]);
//! - sentence embeddings (a pooled output, or token states pooled as the folder says): fidelity to FP32 and retrieval
//!   quality ([`embed`]).

pub mod classify;
pub mod embed;

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::{Error, Result};
use crate::inputs::feeds::Feeds;
use crate::inputs::files::{InputSet, TextInputs};
use crate::inputs::roles::class_logits;
use crate::inputs::squad::{Corpus, DataConfig};
use crate::steps::held_out::HeldOut;
use crate::tasks::embed::EmbedTask;
use crate::tasks::embed::data::EmbedData;

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
        let named = cfg.io_names.named();
        let g = model.graph();
        if named.embedding.is_none() && named.logits.is_none() {
            let by_name = named.start.is_some() && named.end.is_some();
            if by_name || qdq::roles::logit_roles(g, named).is_ok() {
                return Ok(Task::Squad);
            }
        }
        if named.logits.is_none() {
            let found = qdq::roles::embedding_output(g, named, cfg.pooling.is_some())
                .map_err(|e| crate::inputs::roles::role_error(model_path, e))?;
            if let Some(found) = found {
                return Ok(Task::Embed(Box::new(EmbedTask::settle(found, model_path, cfg)?)));
            }
        }
        Ok(Task::Classify { output: class_logits(model, &cfg.io_names, model_path)? })
    }

    /// The task as calibration needs it: only how the data feeds the model matters there, so a model whose outputs
    /// cannot be told apart calibrates on arrays or text as a classifier would (its outputs are not read).
    pub fn for_calibration(model: &Model, model_path: &Path, cfg: &DataConfig) -> Result<Task> {
        match Task::detect(model, model_path, cfg) {
            Err(Error::Input { .. }) if cfg.io_names.named().embedding.is_none() && cfg.pooling.is_none() => {
                Ok(Task::Classify { output: String::new() })
            }
            found => found,
        }
    }

    /// Calibration units when none are asked for: 100 SQuAD questions (the seed scripts'), 100 inputs; 1,000
    /// questions (with their paragraphs) or texts for an embedding model, whose short texts hold few tokens each: on
    /// paraphrase-MiniLM-L3, 100 questions left the 1st percentile of the cosine to FP32 at 0.9957 where 1,000 gave
    /// 0.9987 (docs/QUANTIZATION.md).
    pub fn default_cal_num(&self) -> usize {
        match self {
            Task::Embed(_) => 1000,
            Task::Squad | Task::Classify { .. } => 100,
        }
    }

    /// The range method of integer pairs when none is asked for. mse (the range of least expected rounding and
    /// clipping error per value) where each token's output counts alone (a QA head's logits, a token classifier);
    /// percentile (99.999) for a pooled sentence embedding: pooling averages the rounding noise of a text's tokens
    /// away, which is independent from token to token, but keeps the error of values clipped at the range, which
    /// all lean one way, so the range that serves the pooled output clips less than mse's. On all-MiniLM-L6-v2
    /// (docs/QUANTIZATION.md) it halved the distance of the embeddings to FP32's.
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
            _ => Box::new(InputSet::load(path, model, text, n)?),
        };
        if n == 0 {
            let (units, unit) = feeds.units();
            tracing::info!("--cal-num 0: calibrating on all {units} {unit} of {} (the default is 100)", path.display());
        }
        Ok(feeds)
    }
}

impl Task {
    /// The held-out inputs `qdq debug` and `qdq tune` measure this task's models on, the last `n` units of `dataset`,
    /// with FP32's (`fp32`, loaded from `fp32_path`) outputs on them, run on `session`: SQuAD questions compared by
    /// their start and end logits, or texts (questions with their paragraphs from a SQuAD file) by their embedding.
    pub(crate) fn held_out(
        &self,
        (fp32, fp32_path): (&Model, &Path),
        dataset: &Path,
        n: usize,
        session: SessionConfig,
        cfg: &DataConfig,
    ) -> Result<HeldOut> {
        match self {
            Task::Squad => {
                let mut corpus = Corpus::load_last(dataset, cfg, &cfg.tokenizer()?, n)?;
                corpus.fit_model(fp32, fp32_path)?;
                let held = HeldOut::questions(fp32, &corpus, session)?;
                let what = format!(
                    "the last {} questions of {} ({} features)",
                    held.units(),
                    dataset.display(),
                    held.features()
                );
                Ok(held.described(what))
            }
            Task::Embed(e) => {
                let texts = EmbedData::held_out_texts(dataset, n)?;
                let set = InputSet::from_texts(dataset, &texts, &TextInputs::for_model(fp32, fp32_path, cfg))?;
                let held = HeldOut::texts(fp32, &set, e.head.clone(), session)?;
                let what = if dataset.extension().is_some_and(|x| x.eq_ignore_ascii_case("json")) {
                    format!(
                        "the last {n} questions of {} and their paragraphs ({} texts)",
                        dataset.display(),
                        set.len()
                    )
                } else {
                    format!("the last {} texts of {}", set.len(), dataset.display())
                };
                Ok(held.described(what))
            }
            Task::Classify { output } => Err(not_held_out(output, fp32_path)),
        }
    }

    /// Whether `qdq debug` and `qdq tune` measure this task's model (at `path`): SQuAD and embedding models; a
    /// classifier is refused naming what compares it.
    pub(crate) fn check_held_out(&self, path: &Path) -> Result<()> {
        match self {
            Task::Classify { output } => Err(not_held_out(output, path)),
            Task::Squad | Task::Embed(_) => Ok(()),
        }
    }
}

/// The error for a classifier (class logits `output`, the model at `path`) given to `qdq debug` or `qdq tune`.
fn not_held_out(output: &str, path: &Path) -> Error {
    Error::Input {
        path: path.to_path_buf(),
        reason: format!(
            "a classifier (class logits `{output}`): `qdq debug` and `qdq tune` measure SQuAD models (start / end \
             logits) and sentence-embedding models (cosine to FP32's); `qdq e2e` and `qdq eval --baseline` compare a \
             classifier's logits with FP32's"
        ),
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
        crate::steps::evaluate::ep_label(&self.ep, self.ep_precision.as_deref(), self.fallback_from.as_deref())
    }
}
