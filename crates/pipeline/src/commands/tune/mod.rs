//! `qdq tune`: the most-integer QDQ model within a budget of the task's score (SQuAD F1; an embedding model's
//! nDCG@10, or cosine to FP32's; a classifier's accuracy, or agreement with FP32's class). Calibrates once (or takes `--ranges`), then searches ([`search`]): the preset, its
//! all-integer form, other calibrators' ranges for the worst pairs ([`calibrators`]), then the most sensitive nodes in
//! float, each candidate built in memory, measured and timed on held-out inputs and scored on the evaluation
//! questions (screened first: [`screen`]) or texts by [`measure`]. Writes the chosen model, a
//! recipe `qdq quantize --recipe` replays exactly, and the trade-off curve ([`outputs`]).

mod calibrators;
mod measure;
mod outputs;
pub mod search;

use std::path::{Path, PathBuf};
use std::time::Instant;

use onnx_ir::Model;

use self::measure::{Base, Clock, Measure, Statistics, fp32_summary};
use self::search::{ALL_INTEGER_SLACK, Outcome, Search, Spec};
use crate::commands::calibrate::CalibrateJob;
use crate::commands::debug::DebugJob;
use crate::disk::{create_out_dir, finish_run_dir, open_run_dir};
use crate::error::{Error, Result};
use crate::guard::InOut;
use crate::inputs::config::DataConfig;
use crate::job::Job;
use crate::model::{carry_tokenizer, load_for_quantization, resolve_model};
use crate::progress::Progress;
use crate::report::tune::{TuneReport, TunedAtDefault};
use crate::settings::calib::CalibSettings;
use crate::settings::data::DataSettings;
use crate::settings::policy::{PolicySettings, Target};
use crate::settings::runtime::{BatchSize, RuntimeSettings};
use crate::steps::quantize::read_table;
use crate::steps::speed::{self, PairedTiming};
use crate::tasks::default_float::{self, DefaultSessions};
use crate::tasks::score::{Questions, ScoringRequest, TaskScoring};
use crate::tasks::{Side, Task};

/// `qdq tune`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct TuneJob {
    /// The FP32 ONNX model (file or model directory)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub model: PathBuf,
    /// SQuAD file to score candidates on (and rank nodes on)
    ///
    /// Candidates are scored on its first --samples questions, the nodes ranked on its last --held-out.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub dataset: PathBuf,
    /// Questions to score candidates on (first N; 0 = all)
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1000, value_name = "N", help_heading = "Model and data"))]
    pub samples: usize,
    /// Held-out questions the nodes are ranked on (last N)
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 32, value_name = "N", help_heading = "Model and data"))]
    pub held_out: usize,
    /// SQuAD file to take the held-out questions from instead
    ///
    /// Its last --held-out questions. With `--samples 0` (every question scored) a separate file keeps the ranking off the questions reported, e.g.
    /// the training slice calibration reads its first --cal-num questions from.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub held_out_data: Option<PathBuf>,
    /// Ranges to use instead of calibrating (any table `qdq quantize` reads)
    ///
    /// --model is then the model they were calibrated on (model_smoothed.onnx of `qdq calibrate` when the policy
    /// smooths).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Model and data"))]
    pub ranges: Option<PathBuf>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub calib: CalibSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub policy: PolicySettings,
    /// The largest loss against FP32 accepted, in task points
    ///
    /// In the task's points: SQuAD F1; an embedding model's nDCG@10 x100 on retrieval data, else its cosine to FP32's
    /// x100 per text; a classifier's accuracy on labelled inputs, else its agreement with FP32's class (%). A
    /// negative one, met by no candidate, walks the whole float ladder up to --max-float: the full trade-off curve.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 1.0, value_name = "DF1", allow_negative_numbers = true, help_heading = "Search")
    )]
    pub budget: f64,
    /// And at least this % of answers identical to FP32's
    ///
    /// A candidate is within budget only when it also answers at least this share of the questions with FP32's very
    /// text (an embedding model: retrieves FP32's nearest document for this share of the queries; a classifier: gives
    /// FP32's class for this share of the inputs): the fidelity the
    /// questions resolve where F1 cannot (its interval on the whole SQuAD dev set is about +-0.25 F1, this share's
    /// about +-0.5 points).
    #[cfg_attr(feature = "cli", arg(long = "min-same", value_name = "PCT", help_heading = "Search"))]
    pub min_same_answers: Option<f64>,
    /// What --min-same is a share of: run or default
    ///
    /// run: FP32's answers at the run's precision. default: the share FP32 itself keeps at the EP's own default float
    /// precision (OpenVINO's bf16 on a CPU with bf16 instructions, FP16 engines), the float its users run: with bf16
    /// keeping 98.6 % of the answers, `--min-same 97` then asks for 95.6 %.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value = "run", value_name = "OF", value_parser = ["run", "default"], help_heading = "Search")
    )]
    pub min_same_of: String,
    /// Share of questions each candidate is screened on first
    ///
    /// Those whose FP32 answer is nearest to flipping (the smallest gap between its score and the next different
    /// answer's, from FP32's own pass). A candidate is scored on the other questions only when its screen, the others
    /// taken as answered as FP32 answers them, puts it within budget; the chosen model's F1 is always measured on
    /// every question. 1 = every candidate on every question.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0.3, value_name = "SHARE", help_heading = "Search"))]
    pub screen: f64,
    /// The most nodes kept in float
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 16, value_name = "N", help_heading = "Search"))]
    pub max_float: usize,
    /// Pairs that may take another calibrator's range first
    ///
    /// Before keeping nodes in float: for the N pairs with the worst own rounding (lowest SQNR in `qdq debug`), try
    /// every other calibrator's range from the same statistics and keep one when it lowers the held-out logit KL by
    /// at least 2 % (the table written as ranges_tuned.json). Needs the statistics: tune's own calibration, or
    /// calib_state.json beside --ranges. 0 = keep the table's ranges.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 4, value_name = "N", help_heading = "Search"))]
    pub calibrator_trials: usize,
    /// Fail (after writing everything) when the choice loses more than DF1
    ///
    /// A CI gate: exit 1 when the chosen model loses more than DF1 F1 points.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DF1", allow_negative_numbers = true, help_heading = "Search"))]
    pub fail_above: Option<f64>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub runtime: RuntimeSettings,
    /// Output directory
    ///
    /// The calibration, candidates/, model_qdq.onnx (the choice), recipe.toml, tune.json, tune.md, curve.svg,
    /// debug/.
    #[cfg_attr(
        feature = "cli",
        arg(long, short = 'o', default_value = "out-tune", value_name = "DIR", help_heading = "Output")
    )]
    pub out: PathBuf,
}

impl Job for TuneJob {
    type Report = TuneReport;

    fn run(&self, progress: &dyn Progress) -> Result<TuneReport> {
        let started = Instant::now();
        self.runtime.one_ep("tune")?;
        self.check()?;
        let clock = Clock::default();
        let run = open_run_dir(&self.out, "--out", "qdq tune")?;
        let fp32_path = resolve_model(&self.model)?;
        // The tokenizer found beside the FP32 model serves every model of the run.
        let data = self.data.config(&fp32_path)?;
        InOut::new()
            .model("--model", &fp32_path)
            .input("--dataset", Some(&self.dataset))
            .input("--held-out-data", self.held_out_data.as_deref())
            .input("--ranges", self.ranges.as_deref())
            .input("--calibration-data", self.calib.calibration_data.as_deref())
            .data(&data)
            .out_dir("--out", &self.out)
            .check()?;
        let graph = Model::load_graph_only(&fp32_path)?;
        let task = Task::detect(&graph, &fp32_path, &data)?;
        if let Some(d) = task.describe() {
            progress.note(&d);
        }
        // The candidates go to out/candidates.
        create_out_dir(&self.out.join("candidates"), "--out")?;
        self.runtime.one_ep("tune")?;
        let (policy, _) = self.policy.policy(&self.runtime.configured_ep())?;
        let cx = Context { fp32: &fp32_path, data: &data, clock: &clock, progress, started };
        let (base_path, ranges_path) = self.calibrated(&cx, &policy)?;
        let base_model = load_for_quantization(&base_path)?;
        let ranges = read_table(&ranges_path, &base_model, &base_path, &policy)?;
        let req = ScoringRequest {
            fp32: &fp32_path,
            graph: &graph,
            data: &data,
            dataset: &self.dataset,
            samples: self.samples,
            session: self.runtime.evaluation_session(&self.runtime.fp32_session(None, "eval")),
            warmup: self.runtime.warmup,
            version_2: self.data.version_2(),
            screen: self.screen,
        };
        let scoring = clock.time("fp32_scoring", || task.scoring(&req, progress))?;
        drop(graph);
        let base = Base { model: &base_model, path: &base_path, policy: &policy, ranges, out: &self.out };
        let report = self.search(&cx, &task, base, scoring, &ranges_path)?;
        carry_tokenizer(&data.tokenizer_files(), &self.out)?;
        finish_run_dir(run)?;
        Ok(report)
    }
}

/// What every step of a tune shares: the FP32 model, the data configuration, the clock, progress.
struct Context<'a> {
    fp32: &'a Path,
    data: &'a DataConfig,
    clock: &'a Clock,
    progress: &'a dyn Progress,
    started: Instant,
}

/// FP32 (`fp32`) scored on every question at the EP's own default float precision (`at`: its session, name and the
/// instructions behind it), or why it could not be.
fn scored_at(measure: &mut Measure<'_>, fp32: &Path, at: DefaultSessions) -> TunedAtDefault {
    let (session, _, name, instructions) = at;
    let (fp32, error) = match measure.score_side(Side { path: fp32, session: &session }, Questions::All, "fp32_scoring")
    {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.to_string())),
    };
    TunedAtDefault { precision: name.to_owned(), instructions, fp32, error }
}

impl TuneJob {
    fn check(&self) -> Result<()> {
        if !self.budget.is_finite() {
            return Err(Error::Usage(format!(
                "--budget must be a number of points (F1, nDCG@10, accuracy), not {}",
                self.budget
            )));
        }
        if let Some(p) = self.min_same_answers.filter(|p| !(0.0..=100.0).contains(p)) {
            return Err(Error::Usage(format!("--min-same must be a share in per cent, 0 to 100, not {p}")));
        }
        if !(self.screen > 0.0 && self.screen <= 1.0) {
            return Err(Error::Usage(format!(
                "--screen must be a share of the questions above 0 and at most 1, not {}",
                self.screen
            )));
        }
        if self.ranges.is_none() && self.calib.calibration_data.is_none() {
            return Err(Error::Usage(
                "qdq tune needs --calibration-data FILE to calibrate, or --ranges TABLE (a table qdq calibrate wrote)"
                    .into(),
            ));
        }
        if self.samples == 0 && self.held_out_data.is_none() {
            tracing::warn!(
                "--samples 0 scores every question of --dataset, its last {} (the sensitivity's) included; \
                 --held-out-data FILE measures the sensitivity elsewhere",
                self.held_out
            );
        }
        Ok(())
    }

    /// The model candidates are made from and its range table: `--ranges` with `--model`, else tune's own
    /// calibration into `out` (the smoothed model when the policy smooths). The calibration reads the ranges the
    /// all-integer candidate needs too (the policy with `matmul_const_b_only` off: only the choice of tensors
    /// differs), and with the calibrator choice every method's statistics.
    fn calibrated(&self, cx: &Context<'_>, policy: &qdq::Policy) -> Result<(PathBuf, PathBuf)> {
        let (fp32_path, data) = (cx.fp32, cx.data);
        if let Some(r) = &self.ranges {
            return Ok((fp32_path.to_path_buf(), r.clone()));
        }
        let mut calib = self.calib.clone();
        if self.calibrator_trials > 0 {
            for k in calib::MethodKind::ALL {
                if !calib.methods.compare.contains(&k) {
                    calib.methods.compare.push(k);
                }
            }
        }
        let job = CalibrateJob {
            model: fp32_path.to_path_buf(),
            batching: BatchSize::default(),
            out: self.out.clone(),
            merge: Vec::new(),
            data: DataSettings {
                vocab: Some(data.vocab.clone()),
                tokenizer_json: data.tokenizer_json.clone(),
                ..self.data.clone()
            },
            calib,
            policy: self.policy.clone(),
            target: Target { ep: self.runtime.configured_ep(), ov_cpu: None },
            library: self.runtime.library.clone(),
        };
        let wider = Spec { all_integer: policy.matmul_const_b_only, ..Spec::default() }.policy(policy);
        let (_, smoothed) = cx.clock.time("statistics", || job.calibrate(&wider, cx.progress))?;
        Ok((smoothed.map_or(fp32_path.to_path_buf(), |(_, p)| p), self.out.join("calibration.json")))
    }

    /// The search on ONNX Runtime ([`Measure`]), and its outputs.
    fn search(
        &self,
        cx: &Context<'_>,
        task: &Task,
        base: Base<'_>,
        questions: Box<dyn TaskScoring>,
        ranges_path: &Path,
    ) -> Result<TuneReport> {
        // The held-out inputs: FP32's outputs on them once, for every candidate's distance to FP32 and for debug; and
        // the batches every candidate is timed on against FP32, in alternation.
        let held_out_started = Instant::now();
        let held_out_data = self.held_out_data.as_ref().unwrap_or(&self.dataset);
        let fp32_model = Model::load(cx.fp32)?;
        let held =
            task.held_out((&fp32_model, cx.fp32), held_out_data, self.held_out, self.debug_session(cx.fp32), cx.data)?;
        drop(fp32_model);
        let (fp32_session, session, at_default) = self.sessions();
        let (timing_fp32, timing_session) = match &at_default {
            Some((f, q, ..)) => (f.clone(), q.clone()),
            None => (fp32_session, session.clone()),
        };
        let timing = PairedTiming::on(cx.fp32, &timing_fp32, held.workload(speed::FEATURES), speed::ROUNDS)?;
        cx.clock.add("held_out_fp32", held_out_started);
        let precision = base.policy.precision;
        let mut measure = Measure {
            base,
            questions,
            held: &held,
            timing,
            session,
            timing_session,
            debug: self.debug_job(cx.fp32, held_out_data),
            fp32_path: cx.fp32,
            statistics: self.statistics(ranges_path, precision)?,
            clock: cx.clock,
            progress: cx.progress,
            tuned: None,
            debugged: None,
        };
        let default_float = at_default.map(|at| scored_at(&mut measure, cx.fp32, at));
        let search = Search {
            budget: self.budget,
            min_same_answers: self.min_same(default_float.as_ref())?,
            max_float: self.max_float,
            calibrators: self.calibrator_trials > 0,
            all_integer: measure.base.policy.matmul_const_b_only,
        };
        let outcome = search.run(&mut measure, cx.progress)?;
        let mut report = self.report(outcome, measure.questions.as_ref());
        report.min_same_answers = search.min_same_answers;
        report.default_float = default_float;
        self.write(report, &measure, ranges_path, cx.started)
    }

    /// The report of the search's `outcome` (`scoring`: FP32 on the evaluation questions or texts), before its
    /// outputs.
    fn report(&self, outcome: Outcome, scoring: &dyn TaskScoring) -> TuneReport {
        let (fp32_f1, fp32_ms_per_feature, questions, metric) = fp32_summary(scoring);
        TuneReport {
            out: self.out.clone(),
            metric,
            budget: self.budget,
            min_same_answers: self.min_same_answers.map(|p| p / 100.0),
            default_float: None,
            fp32_f1,
            fp32_ms_per_feature,
            questions,
            within_budget: outcome.within_budget,
            curve: outcome.curve,
            chosen: outcome.chosen,
            ranking: outcome.ranking,
            calibrators: outcome.calibrators,
            recipe: self.out.join("recipe.toml"),
            not_scored: outcome.not_scored,
            phase_seconds: Default::default(),
            all_integer_slack: ALL_INTEGER_SLACK,
            fail_above: self.fail_above,
        }
    }

    /// `--min-same` as a share (0-1): of FP32's answers at the run's precision, or with `--min-same-of default` of the
    /// share FP32 keeps at the EP's own default float precision (`default`, measured); an error when that is asked
    /// for on an EP without one, or could not be measured.
    fn min_same(&self, default: Option<&TunedAtDefault>) -> Result<Option<f64>> {
        let Some(p) = self.min_same_answers.map(|p| p / 100.0) else { return Ok(None) };
        if self.min_same_of != "default" {
            return Ok(Some(p));
        }
        match default.map(|d| (d, d.fp32.as_ref())) {
            Some((_, Some(fp32))) => Ok(Some(p * fp32.same_answers.share)),
            Some((d, None)) => Err(Error::Usage(format!(
                "--min-same-of default: FP32 at {} could not be scored ({})",
                d.precision,
                d.error.as_deref().unwrap_or("no reason given")
            ))),
            None => Err(Error::Usage(format!(
                "--min-same-of default reads --min-same against the EP's own default float precision, and --ep {} runs \
                 FP32 at the run's (give --min-same-of run)",
                self.runtime.ep()
            ))),
        }
    }

    /// FP32's session, the candidates' (as `qdq eval` runs them), and both at the EP's own default float precision
    /// where that is not the run's (OpenVINO's bf16) and not left out (`--no-default-float`): candidates are then
    /// timed as their users run them, against FP32 at it.
    fn sessions(&self) -> (runtime::SessionConfig, runtime::SessionConfig, Option<DefaultSessions>) {
        let fp32 = self.runtime.fp32_session(None, "tune");
        let session = self.runtime.evaluation_session(&fp32);
        let at_default = default_float::sessions(&fp32, &session).filter(|_| !self.runtime.no_default_float);
        (fp32, session, at_default)
    }

    /// The session FP32 and the candidates run on for the held-out questions (`qdq debug`'s).
    fn debug_session(&self, fp32_path: &Path) -> runtime::SessionConfig {
        self.runtime.fp32_session(Some(crate::disk::parent_dir(fp32_path)), "debug")
    }

    /// `qdq debug` of a candidate into out/debug, on the held-out questions.
    fn debug_job(&self, fp32_path: &Path, held_out_data: &Path) -> DebugJob {
        DebugJob {
            model: fp32_path.to_path_buf(),
            qdq: PathBuf::new(),
            dataset: held_out_data.to_path_buf(),
            held_out: self.held_out,
            top: 20,
            out: Some(self.out.join("debug")),
            sensitivity: false,
            confirm: 0,
            samples: 0,
            runtime: self.runtime.clone(),
            data: self.data.clone(),
        }
    }

    /// The table as a qdq range table and the statistics it was computed from, when both are at hand: tune's own
    /// calibration, or calib_state.json beside a `--ranges` table of qdq's.
    fn statistics(&self, ranges: &Path, precision: qdq::Precision) -> Result<Option<Statistics>> {
        if self.calibrator_trials == 0 {
            return Ok(None);
        }
        let state = match &self.ranges {
            None => self.out.join("calib_state.json"),
            Some(r) => r.with_file_name("calib_state.json"),
        };
        if !state.is_file() {
            if self.ranges.is_some() {
                tracing::info!("no calib_state.json beside --ranges: the calibrator choice is skipped");
            }
            return Ok(None);
        }
        let Ok(table) = calib::tables::read_json(ranges) else {
            tracing::info!("{} is not qdq's range table: the calibrator choice is skipped", ranges.display());
            return Ok(None);
        };
        let state = calib::CalibState::load_json(&state)?;
        // Every method, with the run's options: what calibration collected the statistics for.
        let mut methods = self.calib.methods.clone();
        methods.compare.extend(calib::MethodKind::ALL);
        Ok(Some(Statistics { table, state, methods: methods.methods(&[precision])?, trials: self.calibrator_trials }))
    }

    /// The outputs, and the report with where the time went.
    fn write(
        &self,
        mut report: TuneReport,
        measure: &Measure<'_>,
        ranges: &Path,
        started: Instant,
    ) -> Result<TuneReport> {
        let histograms = measure.clock.time("outputs", || {
            outputs::write_histograms(&self.out, self.ranges.is_none(), measure.debugged.as_ref())
        })?;
        let choice = report.choice();
        let ranges =
            if choice.timed.calibrator_choices > 0 { self.out.join("ranges_tuned.json") } else { ranges.to_path_buf() };
        let policy = Spec::of(&choice.timed).policy(measure.base.policy);
        let recipe = outputs::recipe(measure.base.path, &ranges, policy);
        report.phase_seconds = measure.clock.finish(started);
        outputs::write_outputs(&self.out, &report, &recipe, histograms)?;
        Ok(report)
    }
}
