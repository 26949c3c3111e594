//! `pipeline`: the one crate that ties the others together: calibrate → quantize → evaluate.
//!
//! Data flows one way: SQuAD features (squad) run through the model (runtime); the activations feed the collectors
//! (calib); the ranges drive Q/DQ placement (qdq); both models are run again (runtime) and scored (squad-metrics).
//!
//! Rooms, from the ground up (each uses only the ones before it):
//! - `error`, `disk`, `model`, `progress`, `provenance`, `job`: the error type, files in and out, loading and saving
//!   models, progress, how a result was made, and the shape of every command ([`Job`] → [`Report`]);
//! - `inputs`: SQuAD questions and other inputs as batches, and which model inputs and outputs they feed;
//! - `steps`: the passes the commands share (calibration, smoothing, evaluation, held-out measurements, timing);
//! - `tasks`: what a model is (SQuAD QA, classifier, sentence embedding), told once from its graph and folder, and
//!   each task's data, measures and table;
//! - `settings`: the typed settings of the command line (feature `cli`: their flags), turned into the steps' configs;
//! - `report`: what the commands hand back and write (text, JSON, results.json, report.md, charts);
//! - `commands`: one module per command, its settings struct and its [`Job::run`].
//!
//! Invariants:
//! - Memory is flat in the amount of data: calibration folds each batch into fixed-size statistics; evaluation turns
//!   an example's logits into an answer as soon as its last window is scored.
//! - Every file is written atomically ([`write_atomic`]: unnamed temporary file, synced, linked into place, umask
//!   mode).
//! - Errors name the file, tensor or setting concerned; nothing here panics on user input.

mod commands;
mod disk;
mod error;
mod guard;
mod held_out;
mod inputs;
mod job;
mod model;
mod progress;
mod provenance;
mod report;
mod settings;
mod steps;
mod tasks;

// The commands: settings that run into reports.
pub use commands::calibrate::CalibrateJob;
pub use commands::debug::DebugJob;
pub use commands::e2e::{E2eConfig, E2eJob, e2e};
pub use commands::eval::EvalJob;
pub use commands::inspect::InspectJob;
pub use commands::providers::ProvidersJob;
pub use commands::quantize::QuantizeJob;
pub use commands::tune::TuneJob;
pub use commands::tune::search::{Questions, Scorer, Search, Spec};
pub use job::{Job, Report};
pub use report::calibrate::CalibrateReport;
pub use report::debug::{Confirmation, DebugReport};
pub use report::e2e::E2eReport;
pub use report::eval::EvalReport;
pub use report::inspect::Inspection;
pub use report::providers::ProvidersReport;
pub use report::quantize::QuantizeReport;
pub use report::results::{
    CalibrationSummary, ComparedMethod, ComparedPrecision, E2eResults, OpProfiles, QuantizationSummary,
};
pub use report::tune::{CalibratorChoice, Candidate, Scored, Timed, TuneReport};
pub use tasks::TaskResult;
pub use tasks::classify::ClassifierEvalReport;
pub use tasks::embed::eval::EmbeddingEvalReport;
pub use tasks::squad::e2e::{MethodResult, ModelResult, OtherEp, PrecisionResult, SquadE2e};
pub use tasks::squad::eval::{OtherEpEval, SquadEvalReport};

// The settings, grouped as the command line groups its flags.
pub use settings::calib::{CalibSettings, MethodSettings};
pub use settings::data::{DataSettings, SquadVersion};
/// clap value parsers of the settings' flags, for the binary's own flags too.
#[cfg(feature = "cli")]
pub use settings::parsers as value_parsers;
pub use settings::policy::{
    Mode, PolicyChoice, PolicyOverride, PolicySettings, PrecisionChoice, Target, describe_policies, preset_for_ep,
};
pub use settings::recipe::Recipe;
pub use settings::runtime::{BatchSize, OrtLibrary, RuntimeSettings, calibration_session};

// The steps, for callers that drive them themselves.
pub use held_out::agreement::OutputAgreement;
pub use held_out::pairs::{NodeSensitivity, TensorError};
pub use inputs::config::DataConfig;
pub use inputs::feeds::Feeds;
pub use inputs::files::{InputSet, TextInputs};
pub use inputs::pooling::{PoolMode, Pooling};
pub use inputs::roles::{IoNames, class_logits, detect_inputs, detect_io, is_squad_model};
pub use model_io::roles::{InputRoles, NamedRoles};
pub use steps::calibrate::{Calibration, calibrate, write_tables};
pub use steps::collect::{
    CalibrateOptions, Pass, PassTimes, Reading, SIDE_BY_SIDE_MAX_BYTES, collect_stats, pass_workers,
};
pub use steps::run::{EvalOptions, Latency};
pub use steps::smooth::{Smoothing, smooth_model};
pub use steps::speed::{OpProfile, OpShare, Speedup};
pub use tasks::classify::held::ClassAgreement;
pub use tasks::classify::{Agreement, ClassifierEval, ClassifierModel};
pub use tasks::embed::data::{EmbedData, Retrieval};
pub use tasks::embed::held::EmbeddingAgreement;
pub use tasks::embed::measure::{Fidelity, Neighbours, RetrievalDifference, RetrievalScores};
pub use tasks::embed::{EmbedTask, EmbeddingEval, EmbeddingModel, RetrievalEval};
pub use tasks::squad::data::{Batches, Comparison, Corpus, Score};
pub use tasks::squad::evaluate::{Evaluation, evaluate};
pub use tasks::squad::held::LogitAgreement;
pub use tasks::{Side, Task};

// Files, models, progress and provenance.
pub use disk::{check_writable, open_run_dir, read_bounded, read_text, write_atomic, write_predictions};
pub use error::{Error, Result};
/// SIGINT / SIGTERM held while outputs are put in place (the binary calls `signals::defer_during_commits`).
pub use files::signals;
pub use model::{load_for_quantization, resolve_model, save_model};
pub use progress::{LogProgress, NoProgress, Progress};
pub use provenance::{Invocation, Machine, OnnxRuntime, Provenance};
// The types a caller of the jobs names: EPs and their options, range methods.
pub use calib::{MethodKind, MethodOptions};
pub use runtime::{Ep, OptLevel, OrtInfo, SessionConfig};
