//! `qdq eval`: one model (FP32 or quantized) in its task's measures: a SQuAD model's EM, F1 and speed; an embedding
//! model's retrieval and, with `--baseline`, its embeddings against the baseline's; a classifier against its baseline.

use std::path::{Path, PathBuf};

use onnx_ir::Model;
use runtime::ModelSource;

use crate::disk::{check_writable, parent_dir, write_predictions};
use crate::error::Error;
use crate::error::Result;
use crate::inputs::files::{InputSet, TextInputs};
use crate::inputs::squad::Corpus;
use crate::inputs::squad::DataConfig;
use crate::job::Job;
use crate::model::resolve_model;
use crate::progress::Progress;
use crate::report::eval::{
    Baseline, ClassifierEvalReport, EmbeddingEvalReport, EvalReport, OtherEpEval, SquadEvalReport,
};
use crate::settings::data::DataSettings;
use crate::settings::runtime::{BatchSize, RuntimeSettings};
use crate::steps::evaluate::{EvalOptions, evaluate};
use crate::steps::speed::{self, OpProfile, profile_batches};
use crate::tasks::classify::evaluate_classifier;
use crate::tasks::embed::data::EmbedData;
use crate::tasks::embed::{EmbedTask, embed_side, evaluate_embeddings, retrieval_of};
use crate::tasks::{Side, Task};

/// `qdq eval`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct EvalJob {
    /// The ONNX model (FP32 or QDQ; file or model directory)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub model: PathBuf,
    /// SQuAD file to evaluate on, or texts (embedding models, classifiers)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub dataset: PathBuf,
    /// Also a second model on the same questions, and the difference
    ///
    /// E.g. the FP32 model a quantized --model came from: both are evaluated, and dF1 and dEM are printed with their
    /// paired 95 % intervals (each question's score of one against the other's), saying so when these questions
    /// cannot tell the two apart. An embedding model: its embeddings against the baseline's; a classifier (which
    /// needs it): the agreement of their class logits.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub baseline: Option<PathBuf>,
    /// Questions to evaluate: the first N of --dataset (0 = all)
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0, value_name = "N", help_heading = "Model and data"))]
    pub samples: usize,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub runtime: RuntimeSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub batching: BatchSize,
    /// Sessions run side by side on the CPU EP (throughput)
    ///
    /// Each on its share of --threads, each taking the next batch: more questions per second where one session's
    /// threads wait on each other, the same answers. The latency printed is then each session's own; the pass's
    /// wall time is in --json (`wall_seconds`).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 1,
            value_name = "N",
            value_parser = crate::settings::parsers::positive,
            help_heading = "Runtime"
        )
    )]
    pub workers: usize,
    /// Write the predictions here (SQuAD predictions JSON)
    #[cfg_attr(
        feature = "cli",
        arg(long, short = 'o', alias = "predictions", value_name = "FILE", help_heading = "Output")
    )]
    pub out: Option<PathBuf>,
    /// Also show where the time goes, per operator type
    ///
    /// The model runs under ONNX Runtime's profiler on its first features (at most 16): kernel time per operator
    /// type as ONNX Runtime ran them (integer MatMuls, fused attention, what stayed in float). A few seconds more; in
    /// --json as `op_profile`.
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Output"))]
    pub profile_ops: bool,
}

impl Job for EvalJob {
    type Report = EvalReport;

    /// With `save_load` the optimised model goes beside the evaluated one (model_eval_optimized.onnx); with `int8`
    /// TensorRT / MIGraphX run in INT8 mode reading calibration.flatbuffers.
    fn run(&self, progress: &dyn Progress) -> Result<EvalReport> {
        let model = resolve_model(&self.model)?;
        if let Some(p) = &self.out {
            check_writable(p, "--out")?;
        }
        let mut data_cfg = self.data.config(&model)?;
        // The graph is enough for the checks; ONNX Runtime reads the file itself, with any external data (a model
        // over 2 GiB cannot be serialized inline, and none is held twice).
        let graph = Model::load_graph_only(&model)?;
        // A model that is neither an embedding model nor a classifier is scored on SQuAD, whose checks name what does
        // not fit.
        match Task::detect(&graph, &model, &data_cfg) {
            Ok(Task::Embed(task)) => {
                tracing::info!("{}", task.describe());
                return self.embeddings(&model, &task, &data_cfg, progress);
            }
            Ok(Task::Classify { output }) => return self.classifier(&model, &graph, &output, &data_cfg, progress),
            Err(e) if data_cfg.io_names.named().embedding.is_some() || data_cfg.pooling.is_some() => return Err(e),
            _ => {}
        }
        let (session, other_sessions) = self.sessions(&model, &mut data_cfg);
        let tokenizer = data_cfg.tokenizer()?;
        let mut data = Corpus::load(&self.dataset, &data_cfg, &tokenizer, self.samples)?;
        data.fit_model(&graph, &model)?;
        drop(graph);
        if let Some(p) = &session.optimized_model_path {
            progress.note(&format!("the model as optimised by ONNX Runtime goes to {}", p.display()));
        }
        let session = self.runtime.evaluation_session(&session);
        let opts =
            EvalOptions { batch: self.batching.batch, session, warmup: self.runtime.warmup, workers: self.workers };
        let name = model.display().to_string();
        let evaluation = evaluate(ModelSource::File(&model), &name, &data, &opts, "evaluating", progress)?;
        if let Some(p) = &self.out {
            write_predictions(p, &evaluation.predictions)?;
        }
        let baseline = match &self.baseline {
            Some(b) => {
                let b = resolve_model(b)?;
                let name = b.display().to_string();
                let e = evaluate(ModelSource::File(&b), &name, &data, &opts, "evaluating the baseline", progress)?;
                let difference = data.compare(&evaluation.predictions, &e.predictions);
                Some(Baseline { model: b, evaluation: e, difference })
            }
            None => None,
        };
        let op_profile = if self.profile_ops { Some(profile_first_features(&model, &data, &opts)?) } else { None };
        // --ep's others: the same model on each, against its answers on the first.
        let mut other_eps = Vec::new();
        for (ep, session) in other_sessions {
            let opts = EvalOptions { session, ..opts.clone() };
            let what = format!("evaluating on {ep}");
            let e = evaluate(ModelSource::File(&model), &name, &data, &opts, &what, progress)?;
            let vs_first = data.compare(&e.predictions, &evaluation.predictions);
            other_eps.push(OtherEpEval { evaluation: e, vs_first });
        }
        Ok(EvalReport::Squad(Box::new(SquadEvalReport { model, evaluation, op_profile, baseline, other_eps })))
    }
}

impl EvalJob {
    /// The sessions of the first EP and of the others (`--ep cpu,qnn`), made before the data is read: an EP that runs
    /// static shapes only (QNN) has the features padded to `--seq-len` for every EP ([`DataConfig::fix_shapes`]).
    fn sessions<'a>(
        &'a self,
        model: &Path,
        data_cfg: &mut DataConfig,
    ) -> (runtime::SessionConfig, Vec<(&'a runtime::Ep, runtime::SessionConfig)>) {
        let mut session = self.runtime.fp32_session(Some(parent_dir(model)), "eval");
        data_cfg.fix_shapes(&mut session, self.batching.batch);
        let mut others = Vec::new();
        for ep in self.runtime.other_eps() {
            let mut s = self.runtime.evaluation_session(&self.runtime.fp32_session_on(ep, None, "eval"));
            data_cfg.fix_shapes(&mut s, self.batching.batch);
            others.push((ep, s));
        }
        (session, others)
    }

    /// A classifier on its inputs against `--baseline` (as the quantized model against FP32 in `qdq e2e`): agreement
    /// of the class logits, and accuracy where the inputs carry labels.
    fn classifier(
        &self,
        model: &Path,
        graph: &Model,
        output: &str,
        data_cfg: &DataConfig,
        progress: &dyn Progress,
    ) -> Result<EvalReport> {
        let Some(baseline) = &self.baseline else {
            return Err(Error::Usage(format!(
                "{}: a classifier (class logits `{output}`) is measured against its baseline: give --baseline <FP32 \
                 model>; eval then reports the agreement of the two models' logits, and accuracy where {} has labels",
                model.display(),
                self.dataset.display()
            )));
        };
        self.one_ep_only("a classifier")?;
        let text = TextInputs::for_model(graph, model, data_cfg);
        let set = InputSet::load(&self.dataset, graph, &text, self.samples)?;
        let session = self.runtime.evaluation_session(&self.runtime.fp32_session(None, "eval"));
        let opts = EvalOptions { batch: self.batching.batch, session, warmup: self.runtime.warmup, workers: 1 };
        let baseline = resolve_model(baseline)?;
        let (b, m) = (Side { path: &baseline, session: &opts.session }, Side { path: model, session: &opts.session });
        let comparison = evaluate_classifier(b, m, &set, output, &opts, progress)?;
        Ok(EvalReport::Classify(Box::new(ClassifierEvalReport { model: model.to_path_buf(), baseline, comparison })))
    }

    /// --out, --profile-ops and a second --ep are a SQuAD model's: refused for `what`.
    fn one_ep_only(&self, what: &str) -> Result<()> {
        if self.out.is_some() || self.profile_ops || !self.runtime.other_eps().is_empty() {
            return Err(Error::Usage(format!(
                "--out, --profile-ops and a second --ep are for SQuAD models; {what} is evaluated on one EP"
            )));
        }
        Ok(())
    }

    /// An embedding model on texts: its retrieval scores on labelled data, and with --baseline its embeddings
    /// against the baseline's (as the quantized model's against FP32's in `qdq e2e`).
    fn embeddings(
        &self,
        model: &Path,
        task: &EmbedTask,
        data_cfg: &DataConfig,
        progress: &dyn Progress,
    ) -> Result<EvalReport> {
        self.one_ep_only("an embedding model")?;
        let graph = Model::load_graph_only(model)?;
        let text = TextInputs::for_model(&graph, model, data_cfg);
        drop(graph);
        let data = EmbedData::load(&self.dataset, data_cfg.corpus.as_deref(), self.samples)?;
        let set = InputSet::from_texts(&self.dataset, &data.texts, &text)?;
        let session = self.runtime.evaluation_session(&self.runtime.fp32_session(None, "eval"));
        let opts = EvalOptions { batch: self.batching.batch, session, warmup: self.runtime.warmup, workers: 1 };
        let side = Side { path: model, session: &opts.session };
        let vs_baseline = match &self.baseline {
            Some(b) => {
                let b = resolve_model(b)?;
                let baseline = Side { path: &b, session: &opts.session };
                Some(evaluate_embeddings((baseline, side), task, &data, &set, &opts, progress)?)
            }
            None => None,
        };
        let evaluation = match &vs_baseline {
            Some(e) => e.int8.clone(),
            None => {
                let (mut m, vectors) = embed_side(side, task, &set, &opts, ("evaluating", progress))?;
                m.retrieval = data.retrieval.as_ref().map(|r| retrieval_of(&vectors, r).0.scores());
                m
            }
        };
        Ok(EvalReport::Embedding(Box::new(EmbeddingEvalReport { model: model.to_path_buf(), evaluation, vs_baseline })))
    }
}

/// The [`OpProfile`] of `model` on the first batches of `data` (at most [`speed::FEATURES`] features, at least one
/// batch).
fn profile_first_features(model: &Path, data: &Corpus, opts: &EvalOptions) -> Result<OpProfile> {
    // Enough batches for FEATURES features (each holds at least one).
    let batches: Vec<squad::Batch> =
        data.batches(opts.batch)?.take(speed::FEATURES).collect::<std::result::Result<_, _>>()?;
    profile_batches(model, &opts.session, speed::leading(&batches, speed::FEATURES), data.io())
}
