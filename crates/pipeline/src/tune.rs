//! `qdq tune`: the most-integer QDQ model within an F1 budget. Calibrates once; quantizes with the policy; if the
//! INT8 model loses more F1 than the budget, ranks the nodes reading quantized activations by the sensitivity of
//! `qdq debug` (logit KL on held-out questions with only that node's inputs in float) and keeps the most sensitive
//! 1, 2, 4, 8, ... of them in float (`exclude_nodes`, same ranges, no re-calibration), scoring each candidate on
//! the evaluation questions, until one is within budget. Each candidate is screened first on the questions whose
//! FP32 answers are nearest to flipping ([`TuneJob::screen`]) and run on the rest only when within budget there and
//! better there than every candidate already found over budget on every question ([`ScreenVerdict`]). Scoring
//! passes run one one-thread session per core side by side ([`crate::EvalOptions::workers`]): a throughput job.
//! Before any node goes to float, the pairs with the worst own rounding may take another calibrator's range from the
//! same statistics ([`calibrators`]): a model that stays wholly integer. A preset within budget that keeps MatMuls
//! float by design (`matmul_const_b_only`) is also tried with every MatMul integer, kept unless it is more than 2 %
//! slower than the preset, timed head to head.
//! Every candidate is timed against FP32 in alternation ([`crate::speed`]). Writes the chosen model, a recipe that
//! `qdq quantize --config` replays exactly, and the trade-off curve.

mod calibrators;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

pub use self::calibrators::CalibratorChoice;
use crate::debug::{DebugJob, HeldOut, debug_with};
use crate::jobs::{
    CalibrateJob, EvalJob, QuantizeJob, QuantizeReport, Report, calibrate_to_dir, evaluate_questions, quantize_file,
};
use crate::progress::Progress;
use crate::settings::{CalibSettings, DataSettings, PolicySettings, RuntimeSettings, resolve_model};
use crate::speed::{self, PairedTiming, Speedup};
use crate::{Error, Result, write_atomic};

/// `qdq tune`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct TuneJob {
    /// The FP32 ONNX model (file or model directory).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub model: PathBuf,
    /// SQuAD file: candidates are scored on its first --samples questions, the sensitivity on its last --held-out
    /// (or on --held-out-data).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub dataset: PathBuf,
    /// SQuAD file whose last --held-out questions the sensitivity is measured on, instead of --dataset's: with
    /// `--samples 0` (every question scored) a separate file keeps the ranking off the questions reported, e.g. the
    /// training slice calibration reads its first --cal-num questions from.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub held_out_data: Option<PathBuf>,
    /// Output directory: the calibration, candidates/, model_qdq.onnx (the choice), recipe.toml, tune.json, tune.md.
    #[cfg_attr(feature = "cli", arg(long, default_value = "out-tune", value_name = "DIR"))]
    pub out: PathBuf,
    /// The largest F1 loss against FP32 accepted, in F1 points (a negative one, met by no candidate, walks the whole
    /// float ladder up to --max-float: the full trade-off curve).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1.0, value_name = "DF1", allow_negative_numbers = true))]
    pub budget: f64,
    /// Evaluation questions each candidate is scored on (the first N of --dataset; 0 = all).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1000, value_name = "N"))]
    pub samples: usize,
    /// Share of the evaluation questions each candidate is screened on first: those whose FP32 answer is nearest to
    /// flipping (the smallest gap between its score and the next different answer's, from FP32's own pass). A
    /// candidate is scored on the other questions only when its screen, the others taken as answered as FP32 answers
    /// them, puts it within budget; the chosen model's F1 is always measured on every question. 1 = every candidate
    /// on every question.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0.3, value_name = "SHARE"))]
    pub screen: f64,
    /// Held-out questions the sensitivity is measured on (the last N of --dataset).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 32, value_name = "N"))]
    pub held_out: usize,
    /// Ranges to use instead of calibrating (any table `qdq quantize --ranges` reads); --model is then the model they
    /// were calibrated on (model_smoothed.onnx of `qdq calibrate` when the policy smooths).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub ranges: Option<PathBuf>,
    /// The most nodes kept in float.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 16, value_name = "N"))]
    pub max_float: usize,
    /// Before keeping nodes in float: for the N pairs with the worst own rounding (lowest SQNR in `qdq debug`), try
    /// every other calibrator's range from the same statistics and keep one when it lowers the held-out logit KL by
    /// at least 2 % (the table written as ranges_tuned.json). Needs the statistics: tune's own calibration, or
    /// calib_state.json beside --ranges. 0 = keep the table's ranges.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 4, value_name = "N"))]
    pub calibrator_trials: usize,
    /// Exit with an error (after writing everything) when the chosen model loses more than DF1 F1 points: a CI gate.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DF1", allow_negative_numbers = true))]
    pub fail_above: Option<f64>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub runtime: RuntimeSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub data: DataSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub calib: CalibSettings,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub policy: PolicySettings,
}

/// One point of the trade-off curve: a candidate as built and timed, and its scores on the evaluation questions.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    #[serde(flatten)]
    pub timed: Timed,
    pub exact_match: f64,
    pub f1: f64,
    /// F1 minus FP32's F1.
    pub delta_f1: f64,
    /// Standard error of `delta_f1` over the questions scored (paired: the spread of the per-question F1 differences
    /// over the square root of their number), in F1 points: a difference within about twice this is the noise of
    /// which questions were drawn.
    pub delta_f1_se: f64,
    /// Milliseconds of wall time per feature in the evaluation: a throughput pass with one one-thread session per
    /// core side by side, minutes apart from FP32's (`speedup` is the comparison).
    pub ms_per_feature: f64,
    /// Questions the candidate answered: all of them, or only the screen's ([`TuneJob::screen`]), its scores then an
    /// estimate with FP32's answers to the other questions: over budget by the screen alone, or no better on the
    /// screen than a candidate found over budget on every question.
    pub questions_scored: usize,
    /// A screened candidate's dF1 on its screen (FP32's answers taken for the other questions): what running it on
    /// the rest was decided on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub screen_delta_f1: Option<f64>,
    /// The candidate's answers, FP32's where it was not run.
    #[serde(skip)]
    answers: HashMap<String, String>,
}

/// A candidate built, measured on the held-out questions and timed against FP32. Scored, it is a [`Candidate`];
/// unscored, it is listed in [`TuneReport::not_scored`] (the all-integer candidate when it is slower than the
/// preset, since it could not be chosen).
#[derive(Debug, Clone, Serialize)]
pub struct Timed {
    /// The nodes kept in float (besides what the policy leaves in float).
    pub float_nodes: Vec<String>,
    pub model: PathBuf,
    /// FP32's time over this model's on the same held-out batches, in alternating rounds.
    pub speedup: Speedup,
    /// MatMul-like nodes of the model reading only dequantized inputs, of all of them.
    pub integer_matmuls: usize,
    pub matmuls: usize,
    /// Tensors whose range another calibrator gave (`TuneReport::calibrators`; 0 = the table's ranges).
    pub calibrator_choices: usize,
    /// Policy options this candidate sets besides the run's (`key=value`; the recipe carries them): the all-integer
    /// candidate's `matmul_const_b_only=false`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy_options: Vec<String>,
    /// Mean KL of the start/end logits against FP32's on the held-out questions.
    pub held_out_kl: f64,
    /// The all-integer candidate only: the preset's time over this model's, the two run in turn on the same batches
    /// (above 1: faster than the preset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_preset: Option<Speedup>,
}

/// What `qdq tune` did.
#[derive(Debug, Clone, Serialize)]
pub struct TuneReport {
    pub out: PathBuf,
    pub budget: f64,
    pub fp32_f1: f64,
    pub fp32_ms_per_feature: f64,
    pub questions: usize,
    /// Every candidate scored, in order (float nodes 0, 1, 2, 4, ...).
    pub curve: Vec<Candidate>,
    /// Index into `curve` of the choice: the first within budget, else the best F1.
    pub chosen: usize,
    pub within_budget: bool,
    /// The sensitivity order the float nodes were taken in (most recovering first).
    pub ranking: Vec<String>,
    /// Ranges taken from another calibrator than the table's, in the order they were kept; the candidates from the
    /// first with `calibrator_choices > 0` on use them all.
    pub calibrators: Vec<CalibratorChoice>,
    pub recipe: PathBuf,
    /// Candidates timed but not scored, since their speed ruled them out (see [`Timed`]).
    pub not_scored: Vec<Timed>,
    /// Where the time went: seconds per phase (see [`Clock`]), `total` the whole run up to writing the outputs.
    pub phase_seconds: BTreeMap<String, f64>,
    #[serde(skip)]
    pub fail_above: Option<f64>,
}

impl TuneReport {
    pub fn choice(&self) -> &Candidate {
        &self.curve[self.chosen]
    }

    /// `--fail-above`: an error when the chosen model loses more than allowed.
    pub fn gate(&self) -> Result<()> {
        match self.fail_above {
            Some(limit) if -self.choice().delta_f1 > limit => Err(Error::Config(format!(
                "the chosen model loses {:.2} F1, more than --fail-above {limit}",
                -self.choice().delta_f1
            ))),
            _ => Ok(()),
        }
    }
}

/// The policy option the all-integer candidate sets.
const ALL_INTEGER: &str = "matmul_const_b_only=false";
/// How much slower than the preset (head to head) the all-integer candidate may be and still be chosen: a tie in
/// speed goes to the model with more integer MatMuls. About what the head-to-head median resolves here.
const ALL_INTEGER_SLACK: f64 = 0.02;

/// Runs [`TuneJob`].
pub fn tune(job: &TuneJob, progress: &dyn Progress) -> Result<TuneReport> {
    let started = Instant::now();
    if !job.budget.is_finite() {
        return Err(Error::Config(format!("--budget must be a number of F1 points, not {}", job.budget)));
    }
    if !(job.screen > 0.0 && job.screen <= 1.0) {
        return Err(Error::Config(format!(
            "--screen must be a share of the questions above 0 and at most 1, not {}",
            job.screen
        )));
    }
    if job.samples == 0 && job.held_out_data.is_none() {
        tracing::warn!(
            "--samples 0 scores every question of --dataset, its last {} (the sensitivity's) included; \
             --held-out-data FILE measures the sensitivity elsewhere",
            job.held_out
        );
    }
    let clock = Clock::default();
    // The candidates go to out/candidates (quantize_file wants its directory to exist).
    crate::prepare_out_dir(&job.out.join("candidates"), "--out")?;
    let fp32_path = resolve_model(&job.model)?;
    // The tokenizer found beside the FP32 model serves every candidate (they are written elsewhere).
    let found = job.data.config(&fp32_path)?;
    let data = DataSettings { vocab: Some(found.vocab), tokenizer_json: found.tokenizer_json, ..job.data.clone() };
    let job = &TuneJob { model: fp32_path.clone(), data, ..job.clone() };
    let (base, ranges) = match &job.ranges {
        Some(r) => (fp32_path.clone(), r.clone()),
        None => {
            let calibrated = clock.time("statistics", || {
                calibrate_to_dir(
                    &CalibrateJob {
                        model: fp32_path.clone(),
                        batch: 1,
                        out: job.out.clone(),
                        merge: Vec::new(),
                        data: job.data.clone(),
                        calib: calib_settings(job),
                        policy: calibration_policy(job)?,
                        ep: job.runtime.ep.clone(),
                        ort_lib: job.runtime.ort_lib.clone(),
                    },
                    progress,
                )
            })?;
            (calibrated.smoothed.map_or(fp32_path.clone(), |(_, p)| p), job.out.join("calibration.json"))
        }
    };
    let eval = |model: &Path, only: Option<&HashSet<String>>, phase: &'static str| -> Result<crate::Evaluation> {
        let job = EvalJob {
            model: model.to_path_buf(),
            dataset: job.dataset.clone(),
            samples: job.samples,
            batch: 1,
            predictions: None,
            // Scoring is a throughput pass (the speed comes from `timing`): one one-thread session per core.
            workers: runtime::threads_or_cores(job.runtime.threads),
            profile_ops: false,
            runtime: job.runtime.clone(),
            data: job.data.clone(),
        };
        Ok(clock.time(phase, || evaluate_questions(&job, only, progress))?.evaluation)
    };
    let fp32 = eval(&fp32_path, None, "fp32_scoring")?;
    // Per-question F1 against FP32's: how far the question sample alone moves each candidate's dF1.
    let (gold, v2) = crate::evaluate::scored_questions(&job.dataset, job.samples, job.data.version)?;
    let fp32_questions = squad_metrics::question_f1(&gold, &fp32.predictions, v2);
    let delta_se = |predictions: &HashMap<String, String>| -> f64 {
        squad_metrics::paired_standard_error(&squad_metrics::question_f1(&gold, predictions, v2), &fp32_questions)
    };
    let screen = Screen::new(&gold, &fp32.margins, job.screen);
    if let Some(s) = &screen {
        progress.note(&format!(
            "candidates are screened on the {} of {} questions whose FP32 answers are nearest to flipping (--screen \
             {}); only one the screen puts within budget is scored on the rest",
            s.fragile.len(),
            s.fragile.len() + s.rest.len(),
            job.screen
        ));
    }
    // The held-out questions: FP32's logits on them once, for every candidate's logit KL and for debug; and the
    // batches every candidate is timed on against FP32, in alternation.
    let held_out_started = Instant::now();
    let held = HeldOut::new(
        &fp32_path,
        &onnx_ir::Model::load(&fp32_path)?,
        job.held_out_data.as_ref().unwrap_or(&job.dataset),
        job.held_out,
        &job.runtime,
        &job.data,
    )?;
    let fp32_session = job.runtime.fp32_session(None, "tune");
    // As `qdq eval` runs the candidates.
    let int8_session = if job.runtime.int8 {
        job.runtime.int8_session(&fp32_session, Path::new("calibration.flatbuffers"))
    } else {
        fp32_session.clone()
    };
    let (batches, io) = held.batches();
    let timing = PairedTiming::new(&fp32_path, &fp32_session, batches, io, speed::FEATURES, speed::ROUNDS)?;
    clock.add("held_out_fp32", held_out_started);
    // One candidate: quantized with `nodes` in float, measured on the held-out questions (the proxy) and timed against
    // FP32 (`built`), then scored on the evaluation questions (`scored`).
    let built = |nodes: &[String], ranges: &Path, chosen: usize, options: &[&str]| -> Result<Timed> {
        let name = format!(
            "model_qdq_float{}{}{}.onnx",
            nodes.len(),
            if chosen > 0 { "_calibrators" } else { "" },
            if options.is_empty() { "" } else { "_all_integer" }
        );
        let model = job.out.join("candidates").join(name);
        let (integer_matmuls, matmuls) =
            clock.time("quantization", || quantize_with_float(job, &base, ranges, nodes, options, &model))?;
        let held_out_kl =
            clock.time("held_out_kl", || held.agreement(&onnx_ir::Model::load(&model)?, "candidate"))?.kl();
        let speedup = clock.time("timing", || timing.against(&model, &int8_session))?;
        Ok(Timed {
            float_nodes: nodes.to_vec(),
            model,
            speedup,
            integer_matmuls,
            matmuls,
            calibrator_choices: chosen,
            policy_options: options.iter().map(|o| o.to_string()).collect(),
            held_out_kl,
            vs_preset: None,
        })
    };
    // A candidate from its answers (FP32's to the questions it was not run on).
    let rated = |b: Timed, answers: HashMap<String, String>, questions_scored: usize, ms_per_feature: f64| {
        let crate::Score { exact_match, f1, .. } = crate::Score::of(&gold, &answers, v2);
        Candidate {
            exact_match,
            f1,
            delta_f1: f1 - fp32.score.f1,
            delta_f1_se: delta_se(&answers),
            ms_per_feature,
            questions_scored,
            screen_delta_f1: None,
            answers,
            timed: b,
        }
    };
    // A screened candidate's answers to the other questions: its scores measured on every question.
    let completed = |c: Candidate| -> Result<Candidate> {
        let Some(s) = screen.as_ref().filter(|_| c.questions_scored < fp32.score.questions) else { return Ok(c) };
        let e = eval(&c.timed.model, Some(&s.rest), "candidate_scoring")?;
        let n = c.questions_scored;
        let ms =
            (c.ms_per_feature * n as f64 + e.wall_ms_per_feature() * s.rest.len() as f64) / (n + s.rest.len()) as f64;
        let mut answers = c.answers;
        answers.extend(e.predictions);
        Ok(Candidate { screen_delta_f1: c.screen_delta_f1, ..rated(c.timed, answers, fp32.score.questions, ms) })
    };
    // The best screen of the candidates run on every question and found over budget there: a candidate no better on
    // the same questions is not run on the rest. The rest (the questions FP32 answers firmly) moved every candidate
    // alike where measured (MiniLM, tensorrt: -0.15, -0.12, -0.11 F1 over the screens), so what failed with a better
    // screen is not expected to pass; the model chosen is always measured on every question.
    let failed_screen: Cell<Option<f64>> = Cell::new(None);
    let scored = |b: Timed| -> Result<Candidate> {
        let c = match &screen {
            None => {
                let e = eval(&b.model, None, "candidate_scoring")?;
                let ms = e.wall_ms_per_feature();
                rated(b, e.predictions, fp32.score.questions, ms)
            }
            Some(s) => {
                let e = eval(&b.model, Some(&s.fragile), "candidate_screening")?;
                let ms = e.wall_ms_per_feature();
                let mut answers = fp32.predictions.clone();
                answers.extend(e.predictions);
                let c = rated(b, answers, s.fragile.len(), ms);
                let c = Candidate { screen_delta_f1: Some(c.delta_f1), ..c };
                let (nodes, screened, fragile, rest) =
                    (count_nodes(c.timed.float_nodes.len()), c.delta_f1, s.fragile.len(), s.rest.len());
                match ScreenVerdict::of(screened, job.budget, failed_screen.get()) {
                    ScreenVerdict::OverBudget => c,
                    ScreenVerdict::NoBetterThan(f) => {
                        progress.note(&format!(
                            "{nodes} in float: dF1 {screened:+.2} on its screen of {fragile} questions, within budget \
                             but no better than {f:+.2}, the screen of a candidate over budget on every question: not \
                             run on the other {rest}"
                        ));
                        c
                    }
                    ScreenVerdict::RunOnRest => {
                        progress.note(&format!(
                            "{nodes} in float: dF1 {screened:+.2} on its screen of {fragile} questions, within budget: \
                             run on the other {rest}"
                        ));
                        let c = completed(c)?;
                        if -c.delta_f1 > job.budget {
                            failed_screen.set(Some(failed_screen.get().map_or(screened, |f| f.max(screened))));
                        }
                        c
                    }
                }
            }
        };
        let mut also = match c.timed.calibrator_choices {
            0 => String::new(),
            n => format!(" ({n} ranges from other calibrators)"),
        };
        if !c.timed.policy_options.is_empty() {
            also.push_str(&format!(" ({})", c.timed.policy_options.join(", ")));
        }
        let estimate = if c.questions_scored < fp32.score.questions {
            format!(" on its screen of {} questions: not scored on the rest", c.questions_scored)
        } else {
            String::new()
        };
        progress.note(&format!(
            "{} in float{also}: F1 {:.2} ({:+.2}){estimate}, {} FP32's speed",
            count_nodes(c.timed.float_nodes.len()),
            c.f1,
            c.delta_f1,
            c.timed.speedup.describe(),
        ));
        Ok(c)
    };
    let candidate = |nodes: &[String], ranges: &Path, chosen: usize| scored(built(nodes, ranges, chosen, &[])?);
    // Only a candidate scored on every question can be within budget.
    let within = |c: &Candidate| -c.delta_f1 <= job.budget && c.questions_scored == fp32.score.questions;
    let mut curve = vec![candidate(&[], &ranges, 0)?];
    let over = !within(&curve[0]);
    // Within budget, with MatMuls the preset keeps float by design (the `cpu` layout's attention MatMuls): the same
    // model with every MatMul integer, kept when it is within budget and at most ALL_INTEGER_SLACK slower than the
    // preset, timed head to head (MiniLM, AVX-512 VNNI: level; on AVX2 alone one tune had it 8 % slower, another
    // level). It is timed first and scored only when it passes: a model that cannot be chosen costs no evaluation.
    let (mut all_integer, mut not_faster) = (None, None);
    if !over
        && curve[0].timed.integer_matmuls < curve[0].timed.matmuls
        && job.policy.policy(&job.runtime.ep)?.0.matmul_const_b_only
    {
        let mut b = built(&[], &ranges, 0, &[ALL_INTEGER])?;
        if b.integer_matmuls <= curve[0].timed.integer_matmuls {
            // A --ranges table calibrated for the preset has no ranges for what it keeps float.
            progress.note(&format!(
                "no candidate with every MatMul integer: {} has no ranges for the MatMul inputs the preset keeps float",
                ranges.display()
            ));
        } else {
            let preset = &curve[0].timed.model;
            let h = clock.time("timing", || timing.head_to_head(preset, &b.model, &int8_session))?;
            b.vs_preset = Some(h);
            let what = format!(
                "every MatMul integer ({}/{}): {} the preset's speed",
                b.integer_matmuls,
                b.matmuls,
                h.describe()
            );
            if h.median >= 1.0 - ALL_INTEGER_SLACK {
                progress.note(&format!("{what}, timed head to head: scored"));
                curve.push(scored(b)?);
                if within(&curve[1]) {
                    all_integer = Some(1);
                }
            } else {
                let slack = ALL_INTEGER_SLACK * 100.0;
                progress.note(&format!("{what}, timed head to head: more than {slack:.0} % slower, not scored"));
                not_faster = Some(b);
            }
        }
    }
    let statistics = if over && job.calibrator_trials > 0 { statistics_for(job, &ranges)? } else { None };
    // The per-pair errors (debug/), and the sensitivity ranking when nodes may have to go to float.
    let mut debugged = clock.time("debug_and_sensitivity", || {
        debug_run(
            job,
            &held,
            &fp32_path,
            &curve[0].timed.model,
            over && statistics.is_none() && job.max_float > 0,
            progress,
        )
    })?;
    let (mut tuned, mut calibrators) = (ranges.clone(), Vec::new());
    if let Some((table, state)) = statistics {
        let worst: Vec<String> =
            debugged.tensors.iter().take(job.calibrator_trials).map(|t| t.tensor.clone()).collect();
        let (policy, _) = job.policy.policy(&job.runtime.ep)?;
        // Every method, with the run's options: what calibration collected the statistics for.
        let methods = calib_settings(job).methods.methods()?;
        let base_model = crate::load_for_quantization(&base)?;
        let trials = calibrators::Trials { base: &base_model, policy: &policy, held: &held, methods };
        let chosen =
            clock.time("calibrator_choice", || calibrators::choose(&trials, &table, &state, &worst, progress))?;
        progress.note(&format!(
            "calibrator choice: {} of {} pairs tried took another calibrator's range; held-out logit KL {:.5} -> {:.5}",
            chosen.choices.len(),
            worst.len(),
            chosen.kl_start,
            chosen.kl_end
        ));
        if !chosen.choices.is_empty() {
            tuned = job.out.join("ranges_tuned.json");
            calib::tables::write_json(&tuned, &chosen.table)?;
            curve.push(candidate(&[], &tuned, chosen.choices.len())?);
            calibrators = chosen.choices;
        }
        if !within(curve.last().expect("one candidate")) && job.max_float > 0 {
            let last = curve.last().expect("one candidate").timed.model.clone();
            debugged =
                clock.time("debug_and_sensitivity", || debug_run(job, &held, &fp32_path, &last, true, progress))?;
        }
    }
    let mut ranking = Vec::new();
    if !within(curve.last().expect("one candidate")) && job.max_float > 0 {
        ranking = debugged.sensitivity.iter().map(|n| n.node.clone()).collect();
        let chosen = calibrators.len();
        let mut k = 1;
        while k <= job.max_float.min(ranking.len()) && !within(curve.last().expect("one candidate")) {
            curve.push(candidate(&ranking[..k], &tuned, chosen)?);
            k *= 2;
        }
    }
    // None within budget: the best F1 of those scored on every question, else the best screen, whose scores are
    // then measured on every question too.
    let best = |complete: bool| {
        (0..curve.len())
            .filter(|&i| (curve[i].questions_scored == fp32.score.questions) == complete)
            .max_by(|&a, &b| curve[a].f1.total_cmp(&curve[b].f1))
    };
    let chosen = all_integer
        .or_else(|| curve.iter().position(within))
        .or_else(|| best(true))
        .or_else(|| best(false))
        .unwrap_or(0);
    if curve[chosen].questions_scored < fp32.score.questions {
        let c = curve[chosen].clone();
        let nodes = count_nodes(c.timed.float_nodes.len());
        progress.note(&format!("none within budget: the best screen, {nodes} in float, run on the other questions"));
        curve[chosen] = completed(c)?;
    }
    let mut report = TuneReport {
        out: job.out.clone(),
        budget: job.budget,
        fp32_f1: fp32.score.f1,
        fp32_ms_per_feature: fp32.wall_ms_per_feature(),
        questions: fp32.score.questions,
        within_budget: within(&curve[chosen]),
        curve,
        chosen,
        ranking,
        calibrators,
        recipe: job.out.join("recipe.toml"),
        not_scored: not_faster.into_iter().collect(),
        phase_seconds: BTreeMap::new(),
        fail_above: job.fail_above,
    };
    let histograms = clock.time("outputs", || write_histograms(job, &debugged))?;
    let ranges = if report.choice().timed.calibrator_choices > 0 { tuned } else { ranges };
    report.phase_seconds = clock.finish(started);
    write_outputs(job, &report, &base, &ranges, histograms)?;
    Ok(report)
}

/// The policy tune's own calibration collects ranges for: the job's, and when it keeps MatMuls with a variable B in
/// float (`matmul_const_b_only`, the `cpu` preset's attention MatMuls) also their inputs, for the all-integer
/// candidate. Only the choice of tensors differs: smoothing and every range the preset reads are the same.
fn calibration_policy(job: &TuneJob) -> Result<PolicySettings> {
    let mut policy = job.policy.clone();
    if job.policy.policy(&job.runtime.ep)?.0.matmul_const_b_only {
        let (k, v) = ALL_INTEGER.split_once('=').unwrap_or((ALL_INTEGER, ""));
        policy.options.push((k.to_owned(), v.to_owned()));
    }
    Ok(policy)
}

/// The calibration settings of tune's own calibration: with the calibrator choice, the statistics every method reads
/// (both histograms) are collected in the same pass, and each method's table is written beside (calibration_*.json).
fn calib_settings(job: &TuneJob) -> CalibSettings {
    let mut calib = job.calib.clone();
    if job.calibrator_trials > 0 {
        for k in calib::MethodKind::ALL {
            if !calib.methods.compare.contains(&k) {
                calib.methods.compare.push(k);
            }
        }
    }
    calib
}

/// The table as a qdq range table and the statistics it was computed from, when both are at hand: tune's own
/// calibration, or calib_state.json beside a `--ranges` table of qdq's.
fn statistics_for(job: &TuneJob, ranges: &Path) -> Result<Option<(calib::RangeTable, calib::CalibState)>> {
    let state = match &job.ranges {
        None => job.out.join("calib_state.json"),
        Some(r) => r.with_file_name("calib_state.json"),
    };
    if !state.is_file() {
        if job.ranges.is_some() {
            tracing::info!("no calib_state.json beside --ranges: the calibrator choice is skipped");
        }
        return Ok(None);
    }
    let Ok(table) = calib::tables::read_json(ranges) else {
        tracing::info!("{} is not qdq's range table: the calibrator choice is skipped", ranges.display());
        return Ok(None);
    };
    Ok(Some((table, calib::CalibState::load_json(&state)?)))
}

/// Quantizes `base` with the job's policy plus `nodes` kept in float into `output`; returns (integer MatMul-like
/// nodes, all MatMul-like nodes).
fn quantize_with_float(
    job: &TuneJob,
    base: &Path,
    ranges: &Path,
    nodes: &[String],
    options: &[&str],
    output: &Path,
) -> Result<(usize, usize)> {
    let mut policy = job.policy.clone();
    policy.exclude_nodes.extend(nodes.iter().cloned());
    for o in options {
        let (k, v) = o.split_once('=').unwrap_or((o, ""));
        policy.options.push((k.to_owned(), v.to_owned()));
    }
    let q = QuantizeJob {
        model: base.to_path_buf(),
        ranges: Some(ranges.to_path_buf()),
        output: Some(output.to_path_buf()),
        dry_run: false,
        policy,
        ep: job.runtime.ep.clone(),
    };
    let QuantizeReport::Written { float_matmul_like, .. } = quantize_file(&q)? else {
        return Err(Error::Config("quantize wrote no model".into()));
    };
    // Counted in the model quantized: the CPU layout's integer forms (MatMulIntegerToFloat, QAttention, ...) are no
    // longer MatMul-like nodes in the output, while what stays float is listed by name.
    let model = onnx_ir::Model::load_graph_only(base)?;
    let matmuls = model.graph().node.iter().filter(|n| qdq::MATMUL_LIKE.contains(&n.op_type())).count();
    Ok((matmuls.saturating_sub(float_matmul_like.len()), matmuls))
}

/// `qdq debug` of the first candidate into out/debug (with the nodes' sensitivity, most recovering first, when
/// `sensitivity`).
fn debug_run(
    job: &TuneJob,
    held: &HeldOut,
    fp32: &Path,
    int8: &Path,
    sensitivity: bool,
    progress: &dyn Progress,
) -> Result<crate::debug::DebugReport> {
    let debug = DebugJob {
        model: fp32.to_path_buf(),
        qdq: int8.to_path_buf(),
        dataset: job.held_out_data.clone().unwrap_or_else(|| job.dataset.clone()),
        questions: job.held_out,
        top: 20,
        out: Some(job.out.join("debug")),
        sensitivity,
        confirm: 0,
        confirm_samples: 0,
        runtime: job.runtime.clone(),
        data: job.data.clone(),
    };
    debug_with(&debug, fp32, int8, held, progress)
}

/// histograms.svg: the calibration histograms of the (at most four) pairs with the worst own rounding, each
/// calibrator's range marked; nothing when the run did not calibrate (`--ranges`).
fn write_histograms(job: &TuneJob, debugged: &crate::debug::DebugReport) -> Result<bool> {
    let path = job.out.join("calib_state.json");
    if job.ranges.is_some() || !path.is_file() {
        return Ok(false);
    }
    let state = calib::CalibState::load_json(&path)?;
    let tables = crate::plots::calibrator_tables(&state);
    let panels: Vec<_> = debugged
        .tensors
        .iter()
        .filter_map(|t| crate::plots::histogram_panel(&state, &tables, &t.tensor, 120))
        .take(4)
        .collect();
    if panels.is_empty() {
        return Ok(false);
    }
    write_atomic(&job.out.join("histograms.svg"), crate::plots::histograms_svg(&panels)?.as_bytes())?;
    Ok(true)
}

/// The chosen model as out/model_qdq.onnx, the recipe that replays it, tune.json and tune.md.
fn write_outputs(job: &TuneJob, report: &TuneReport, base: &Path, ranges: &Path, histograms: bool) -> Result<()> {
    let choice = report.choice();
    let bytes = std::fs::read(&choice.timed.model)
        .map_err(|e| Error::Input { path: choice.timed.model.clone(), reason: e.to_string() })?;
    write_atomic(&job.out.join("model_qdq.onnx"), &bytes)?;
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut recipe = toml::Table::new();
    let mut put = |k: &str, v: toml::Value| {
        recipe.insert(k.to_owned(), v);
    };
    put("model", absolute(base).display().to_string().into());
    put("ranges", absolute(ranges).display().to_string().into());
    put("ep", job.runtime.ep.to_string().into());
    if let Some(p) = &job.policy.preset {
        put("policy", p.clone().into());
    }
    if job.policy.ort_quant {
        put("ort-quant", true.into());
    }
    let options: Vec<toml::Value> = job
        .policy
        .options
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain(choice.timed.policy_options.iter().cloned())
        .map(Into::into)
        .collect();
    if !options.is_empty() {
        put("policy-option", options.into());
    }
    let nodes: Vec<toml::Value> =
        job.policy.exclude_nodes.iter().chain(&choice.timed.float_nodes).map(|n| n.clone().into()).collect();
    if !nodes.is_empty() {
        put("exclude-node", nodes.into());
    }
    let others = match choice.timed.calibrator_choices {
        0 => String::new(),
        n => format!(", {n} ranges from other calibrators (`chosen` in the table)"),
    };
    let text = format!(
        "# qdq tune's choice ({} kept in float{others}, dF1 {:+.2} on {} questions).\n# Replay: qdq quantize \
         --config {} -o model_qdq.onnx\n{}",
        count_nodes(choice.timed.float_nodes.len()),
        choice.delta_f1,
        report.questions,
        report.recipe.display(),
        toml::to_string(&recipe).map_err(|e| Error::Config(format!("cannot write the recipe: {e}")))?
    );
    write_atomic(&report.recipe, text.as_bytes())?;
    let json = serde_json::to_string_pretty(&report.json()).map_err(|e| Error::Config(e.to_string()))?;
    write_atomic(&job.out.join("tune.json"), json.as_bytes())?;
    let points: Vec<crate::plots::CurvePoint> = report
        .curve
        .iter()
        .map(|c| crate::plots::CurvePoint {
            float_nodes: c.timed.float_nodes.len(),
            delta_f1: c.delta_f1,
            speed: c.timed.speedup.median,
        })
        .collect();
    let curve = crate::plots::curve_svg(&points, report.budget, report.chosen)?;
    write_atomic(&job.out.join("curve.svg"), curve.as_bytes())?;
    let mut md = format!("# qdq tune\n\n{report}\n\n![dF1 and speed against nodes kept in float](curve.svg)\n");
    md.push_str("\nEach pair's error (and the sensitivity behind the ranking, when there is one): [debug/debug.md](debug/debug.md).\n");
    if histograms {
        md.push_str("\n![Calibration histograms of the worst pairs, each calibrator's range marked](histograms.svg)\n");
    }
    write_atomic(&job.out.join("tune.md"), md.as_bytes())
}

/// Seconds per phase of a tune, added up over the phase's recurrences: `statistics` (tune's calibration),
/// `fp32_scoring`, `candidate_screening` (F1 on the questions nearest to flipping) and `candidate_scoring` (on the
/// others, or on all without a screen: the confirmation), `held_out_fp32` (FP32's
/// logits on the held-out questions and its timing warm-up), `quantization`, `held_out_kl` and `timing` (each
/// candidate built, measured on the held-out questions, timed against FP32), `debug_and_sensitivity` (the per-pair
/// errors and the node ranking), `calibrator_choice`, `outputs` (the histograms). Closures share it by reference.
#[derive(Default)]
struct Clock(RefCell<BTreeMap<&'static str, f64>>);

impl Clock {
    fn time<T>(&self, phase: &'static str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.add(phase, t);
        out
    }

    fn add(&self, phase: &'static str, since: Instant) {
        *self.0.borrow_mut().entry(phase).or_default() += since.elapsed().as_secs_f64();
    }

    /// The phases, and `total` since `started`.
    fn finish(&self, started: Instant) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = self.0.borrow().iter().map(|(k, v)| (k.to_string(), *v)).collect();
        out.insert("total".to_owned(), started.elapsed().as_secs_f64());
        out
    }
}

/// What a candidate's screen decides ([`TuneJob::screen`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum ScreenVerdict {
    /// Over budget on the screen alone (the other questions taken as FP32 answers them).
    OverBudget,
    /// Within budget, but no better than this screen of a candidate found over budget on every question.
    NoBetterThan(f64),
    /// Run on the other questions.
    RunOnRest,
}

impl ScreenVerdict {
    /// The verdict on a screen's dF1 against the budget and the best screen among the candidates over budget on
    /// every question (`failed`).
    fn of(screen_delta_f1: f64, budget: f64, failed: Option<f64>) -> ScreenVerdict {
        if -screen_delta_f1 > budget {
            ScreenVerdict::OverBudget
        } else if let Some(f) = failed.filter(|&f| screen_delta_f1 <= f) {
            ScreenVerdict::NoBetterThan(f)
        } else {
            ScreenVerdict::RunOnRest
        }
    }
}

/// The evaluation questions split for screening ([`TuneJob::screen`]): `fragile`, the share whose FP32 answers have
/// the smallest margins (questions FP32 did not answer first; ties in file order), and `rest`.
#[derive(Debug)]
struct Screen {
    fragile: HashSet<String>,
    rest: HashSet<String>,
}

impl Screen {
    /// `None` when the share covers every question.
    fn new(gold: &squad_metrics::Dataset, margins: &HashMap<String, f32>, share: f64) -> Option<Screen> {
        let mut ids: Vec<(&str, f32)> = gold
            .questions()
            .map(|q| (q.id.as_str(), margins.get(&q.id).copied().unwrap_or(f32::NEG_INFINITY)))
            .collect();
        let n = (share * ids.len() as f64).ceil() as usize;
        if n >= ids.len() {
            return None;
        }
        ids.sort_by(|a, b| a.1.total_cmp(&b.1));
        let fragile: HashSet<String> = ids[..n].iter().map(|(id, _)| id.to_string()).collect();
        // An id that occurs twice is screened wherever its first copy falls.
        let rest = ids[n..].iter().filter(|(id, _)| !fragile.contains(*id)).map(|(id, _)| id.to_string()).collect();
        Some(Screen { fragile, rest })
    }
}

/// "4.2 s", "2 min 08 s".
fn duration(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else {
        let s = seconds.round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

/// "1 node", "3 nodes".
fn count_nodes(n: usize) -> String {
    format!("{n} node{}", if n == 1 { "" } else { "s" })
}

impl Report for TuneReport {
    /// The document `qdq tune --json` prints and tune.json holds (docs/JSON.md, schema `qdq.tune/1`).
    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        v["schema"] = "qdq.tune/1".into();
        v
    }
}

impl fmt::Display for TuneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
        let c = self.choice();
        writeln!(
            f,
            "{} within the budget of {:.2} F1: {} kept in float, F1 {:.2} ({:+.2} vs FP32 {:.2}) on {} \
             questions, {}/{} MatMul-like nodes integer.",
            if self.within_budget { "Chosen" } else { "NOT" },
            self.budget,
            count_nodes(c.timed.float_nodes.len()),
            c.f1,
            c.delta_f1,
            self.fp32_f1,
            self.questions,
            c.timed.integer_matmuls,
            c.timed.matmuls
        )?;
        if !self.within_budget {
            writeln!(f, "No candidate met the budget; the best one is kept (raise --max-float or the budget).")?;
        }
        writeln!(f, "Model: {}; recipe: {}\n", self.out.join("model_qdq.onnx").display(), self.recipe.display())?;
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header([
            "float nodes",
            "other calibrators",
            "EM",
            "F1",
            "dF1",
            "± 2 SE",
            "questions",
            "ms/feature",
            "vs FP32 (median, range)",
            "integer MatMuls",
            "held-out KL",
            "last added",
        ]);
        for (i, c) in self.curve.iter().enumerate() {
            t.add_row([
                format!("{}{}", c.timed.float_nodes.len(), if i == self.chosen { " (chosen)" } else { "" }),
                c.timed.calibrator_choices.to_string(),
                format!("{:.2}", c.exact_match),
                format!("{:.2}", c.f1),
                format!("{:+.2}", c.delta_f1),
                format!("{:.2}", 2.0 * c.delta_f1_se),
                if c.questions_scored < self.questions {
                    format!("{} (screen)", c.questions_scored)
                } else {
                    c.questions_scored.to_string()
                },
                format!("{:.2}", c.ms_per_feature),
                c.timed.speedup.describe(),
                format!("{}/{}", c.timed.integer_matmuls, c.timed.matmuls),
                format!("{:.5}", c.timed.held_out_kl),
                c.timed.float_nodes.last().cloned().unwrap_or_else(|| c.timed.policy_options.join(", ")),
            ]);
        }
        for col in 1..=10 {
            if let Some(column) = t.column_mut(col) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
        write!(f, "{t}")?;
        write!(
            f,
            "\n\n± 2 SE: twice the standard error of dF1 over these {} questions (each question's F1 against FP32's): \
             differences within it are the noise of which questions were drawn; vs FP32: the same {} held-out features \
             run by both models in turn, {} rounds.",
            self.questions, c.timed.speedup.features, c.timed.speedup.rounds
        )?;
        if self.curve.iter().any(|c| c.questions_scored < self.questions) {
            write!(
                f,
                " (screen): run on the questions whose FP32 answers are nearest to flipping only, FP32's answers taken \
                 for the others; over budget on those alone, or no better there than a candidate over budget on every \
                 question, so not run on the rest (`--screen`)."
            )?;
        }
        if let Some(total) = self.phase_seconds.get("total") {
            // The issue's split: statistics, sensitivity, confirmation (the F1 scoring), and the rest.
            let labels = [
                ("statistics", "statistics"),
                ("debug_and_sensitivity", "debug and sensitivity"),
                ("calibrator_choice", "calibrator choice"),
                ("fp32_scoring", "FP32 scored"),
                ("candidate_screening", "candidates screened"),
                ("candidate_scoring", "candidates scored"),
                ("held_out_fp32", "FP32 on the held-out questions"),
                ("quantization", "candidates quantized"),
                ("held_out_kl", "candidates' held-out KL"),
                ("timing", "candidates timed"),
                ("outputs", "outputs"),
            ];
            let parts: Vec<String> = labels
                .iter()
                .filter_map(|(k, label)| self.phase_seconds.get(*k).map(|s| format!("{label} {}", duration(*s))))
                .collect();
            write!(f, "\n\nTook {}: {}.", duration(*total), parts.join(", "))?;
        }
        for t in &self.not_scored {
            write!(
                f,
                "\n\nNot scored: {} in float{} ({}/{} MatMul-like nodes integer, held-out KL {:.5}) runs at {} FP32's \
                 speed and {} the preset's (head to head), more than {:.0} % slower than the preset, so it could not \
                 be chosen.",
                count_nodes(t.float_nodes.len()),
                if t.policy_options.is_empty() { String::new() } else { format!(", {}", t.policy_options.join(", ")) },
                t.integer_matmuls,
                t.matmuls,
                t.held_out_kl,
                t.speedup.describe(),
                t.vs_preset.map_or("?".to_owned(), |h| h.describe()),
                ALL_INTEGER_SLACK * 100.0
            )?;
        }
        if !self.calibrators.is_empty() {
            writeln!(f, "\n\nRanges from another calibrator (held-out logit KL before -> after):\n")?;
            for c in &self.calibrators {
                writeln!(
                    f,
                    "- `{}`: {} [{:.4}, {:.4}] -> {} [{:.4}, {:.4}], KL {:.5} -> {:.5}",
                    c.tensor,
                    c.from,
                    c.from_range.0,
                    c.from_range.1,
                    c.to,
                    c.to_range.0,
                    c.to_range.1,
                    c.kl_before,
                    c.kl_after
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(delta_f1: f64, fail_above: Option<f64>) -> TuneReport {
        let c = Candidate {
            timed: Timed {
                float_nodes: vec![],
                model: "m.onnx".into(),
                speedup: Speedup { median: 2.0, min: 1.8, max: 2.1, rounds: 5, features: 16 },
                integer_matmuls: 40,
                matmuls: 49,
                calibrator_choices: 0,
                policy_options: vec![],
                held_out_kl: 0.01,
                vs_preset: None,
            },
            exact_match: 60.0,
            f1: 70.0 + delta_f1,
            delta_f1,
            delta_f1_se: 0.1,
            ms_per_feature: 10.0,
            questions_scored: 100,
            screen_delta_f1: None,
            answers: HashMap::new(),
        };
        TuneReport {
            out: "out".into(),
            budget: 1.0,
            fp32_f1: 70.0,
            fp32_ms_per_feature: 20.0,
            questions: 100,
            curve: vec![c],
            chosen: 0,
            within_budget: delta_f1 >= -1.0,
            ranking: vec![],
            calibrators: vec![],
            recipe: "out/recipe.toml".into(),
            not_scored: vec![],
            phase_seconds: BTreeMap::new(),
            fail_above,
        }
    }

    /// Ten questions with margins 9, 8, ..., 0 (question "q9" nearest to flipping), "q3" unanswered.
    fn margins() -> (squad_metrics::Dataset, HashMap<String, f32>) {
        let qas: Vec<String> = (0..10)
            .map(|i| format!(r#"{{"id": "q{i}", "question": "?", "answers": [{{"text": "a", "answer_start": 0}}]}}"#))
            .collect();
        let json = format!(
            r#"{{"version": "1.1", "data": [{{"title": "t", "paragraphs": [{{"context": "a", "qas": [{}]}}]}}]}}"#,
            qas.join(",")
        );
        let gold: squad_metrics::Dataset = serde_json::from_str(&json).unwrap();
        let margins = (0..10).filter(|&i| i != 3).map(|i| (format!("q{i}"), (9 - i) as f32)).collect();
        (gold, margins)
    }

    #[test]
    fn a_screen_no_better_than_a_failed_one_is_not_run_on_the_rest() {
        // The tensorrt tune on MiniLM: the preset's screen -0.19 became -0.34 on every question (budget 0.3).
        assert_eq!(ScreenVerdict::of(-0.19, 0.3, None), ScreenVerdict::RunOnRest);
        assert_eq!(ScreenVerdict::of(-0.31, 0.3, None), ScreenVerdict::OverBudget);
        assert_eq!(ScreenVerdict::of(-0.31, 0.3, Some(-0.19)), ScreenVerdict::OverBudget);
        // Its calibrator candidate screened -0.28, no better: not run; one node in float screened -0.18: run.
        assert_eq!(ScreenVerdict::of(-0.28, 0.3, Some(-0.19)), ScreenVerdict::NoBetterThan(-0.19));
        assert_eq!(ScreenVerdict::of(-0.19, 0.3, Some(-0.19)), ScreenVerdict::NoBetterThan(-0.19));
        assert_eq!(ScreenVerdict::of(-0.18, 0.3, Some(-0.19)), ScreenVerdict::RunOnRest);
    }

    #[test]
    fn the_screen_takes_the_answers_nearest_to_flipping() {
        let (gold, margins) = margins();
        let s = Screen::new(&gold, &margins, 0.3).unwrap();
        // ceil(0.3 * 10) = 3: the unanswered question first, then the two smallest margins.
        fn ids(set: &HashSet<String>) -> Vec<&str> {
            let mut v: Vec<&str> = set.iter().map(String::as_str).collect();
            v.sort();
            v
        }
        assert_eq!(ids(&s.fragile), ["q3", "q8", "q9"]);
        assert_eq!(s.rest.len(), 7);
        assert!(s.rest.is_disjoint(&s.fragile));
        assert_eq!(Screen::new(&gold, &margins, 0.01).unwrap().fragile.len(), 1);
        // A share that covers every question is no screen.
        assert!(Screen::new(&gold, &margins, 1.0).is_none());
        assert!(Screen::new(&gold, &margins, 0.95).is_none());
    }

    #[test]
    fn the_gate_fails_only_above_its_limit() {
        assert!(report(-0.4, Some(0.5)).gate().is_ok());
        let e = report(-0.6, Some(0.5)).gate().unwrap_err().to_string();
        assert!(e.contains("loses 0.60 F1, more than --fail-above 0.5"), "{e}");
        assert!(report(-9.0, None).gate().is_ok());
        let text = report(-0.6, None).to_string();
        assert!(
            text.contains("| 0 (chosen) ") && text.contains("2.00x (1.80-2.10)") && text.contains("40/49"),
            "{text}"
        );
    }
}
