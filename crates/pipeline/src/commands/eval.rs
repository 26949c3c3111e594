//! `qdq eval`: one model (FP32 or quantized) in its task's measures: a SQuAD model's EM, F1 and speed; an embedding
//! model's retrieval and, with `--baseline`, its embeddings against the baseline's; a classifier against its baseline.

use std::path::{Path, PathBuf};

use onnx_ir::Model;

use crate::disk::{check_writable, parent_dir};
use crate::error::Result;
use crate::guard::InOut;
use crate::inputs::config::DataConfig;
use crate::job::Job;
use crate::model::resolve_model;
use crate::progress::Progress;
use crate::report::eval::EvalReport;
use crate::settings::data::DataSettings;
use crate::settings::runtime::{BatchSize, RuntimeSettings};
use crate::steps::run::EvalOptions;
use crate::tasks::{EvalRequest, Task, Unclaimed};

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
    /// TensorRT / MIGraphX run in INT8 mode reading calibration.flatbuffers. What is measured is the model's task's
    /// ([`Task::eval`]).
    fn run(&self, progress: &dyn Progress) -> Result<EvalReport> {
        let model = resolve_model(&self.model)?;
        if let Some(p) = &self.out {
            check_writable(p, "--out")?;
        }
        let mut data = self.data_config(&model)?;
        // The graph is enough for the checks; ONNX Runtime reads the file itself, with any external data (a model
        // over 2 GiB cannot be serialized inline, and none is held twice).
        let graph = Model::load_graph_only(&model)?;
        // A model whose outputs cannot be told apart is scored on SQuAD, whose checks name what does not fit.
        let task = Task::detect_or(&graph, &model, &data, Unclaimed::ScoreAsSquad)?;
        if let Some(d) = task.describe() {
            tracing::info!("{d}");
        }
        let (session, other_eps) = self.sessions(&model, &mut data);
        let baseline = self.baseline.as_deref().map(resolve_model).transpose()?;
        let mut io = InOut::new().model("--model", &model).input("--dataset", Some(&self.dataset)).data(&data);
        if let Some(b) = &baseline {
            io = io.model("--baseline", b);
        }
        if let Some(p) = &self.out {
            io = io.out_file("--out", p);
        }
        if let Some(p) = &session.optimized_model_path {
            io = io.out_file("--save-load", p);
        }
        io.check()?;
        if let Some(p) = &session.optimized_model_path {
            progress.note(&format!("the model as optimised by ONNX Runtime goes to {}", p.display()));
        }
        let session = self.runtime.evaluation_session(&session);
        let opts = EvalOptions {
            batch: self.batching.batch,
            session,
            warmup: self.runtime.warmup,
            workers: self.workers,
            at_default_float: !self.runtime.no_default_float,
        };
        let req = EvalRequest {
            model: &model,
            graph: &graph,
            dataset: &self.dataset,
            samples: self.samples,
            data,
            opts,
            other_eps,
            baseline,
            out: self.out.as_deref(),
            profile_ops: self.profile_ops,
        };
        Ok(EvalReport(task.eval(req, progress)?))
    }
}

impl EvalJob {
    /// The data configuration for `model`; for another tool's INT8 file alone (no tokenizer beside it), its
    /// `--baseline`'s folder gives the tokenizer, the length, the pooling and the labels, the shapes staying the
    /// model's own.
    fn data_config(&self, model: &Path) -> Result<DataConfig> {
        let mut data = self.data.config(model)?;
        if data.no_tokenizer_in.is_some()
            && let Some(baseline) = &self.baseline
        {
            let from = self.data.config(&resolve_model(baseline)?)?;
            tracing::info!(
                "tokenizer and folder files: the --baseline's ({}; none beside --model)",
                from.folder.folder.display()
            );
            let own = std::mem::replace(&mut data, from);
            (data.fixed_batch, data.symbolic_dims, data.padding) = (own.fixed_batch, own.symbolic_dims, own.padding);
        }
        Ok(data)
    }

    /// The sessions of the first EP and of the others (`--ep cpu,qnn`), made before the data is read: an EP that runs
    /// static shapes only (QNN) has the features padded to `--seq-len` for every EP ([`DataConfig::fix_shapes`]).
    fn sessions(
        &self,
        model: &Path,
        data_cfg: &mut DataConfig,
    ) -> (runtime::SessionConfig, Vec<(String, runtime::SessionConfig)>) {
        let mut session = self.runtime.fp32_session(Some(parent_dir(model)), "eval");
        data_cfg.fix_shapes(&mut session, self.batching.batch);
        let mut others = Vec::new();
        for ep in self.runtime.other_eps() {
            let mut s = self.runtime.evaluation_session(&self.runtime.fp32_session_on(ep, None, "eval"));
            data_cfg.fix_shapes(&mut s, self.batching.batch);
            others.push((ep.to_string(), s));
        }
        (session, others)
    }
}
