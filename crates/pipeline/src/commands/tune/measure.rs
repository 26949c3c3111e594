//! `qdq tune`'s [`Scorer`] on ONNX Runtime: candidates quantized in memory from one loaded model and one range
//! table (written to candidates/ for the sessions), measured on the held-out questions, timed against FP32 in
//! alternation, and scored on the evaluation questions (one one-thread session per core: a throughput pass).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Instant;

use onnx_ir::Model;
use qdq::Policy;
use runtime::SessionConfig;

use crate::commands::debug::DebugJob;
use crate::commands::tune::calibrators::{self, Trials};
use crate::commands::tune::search::{Scorer, Spec};
use crate::error::Result;
use crate::held_out::HeldOut;
use crate::model::save_model;
use crate::progress::Progress;
use crate::report::debug::DebugReport;
use crate::report::tune::{CalibratorChoice, Scored, Timed};
use crate::steps::quantize::float_matmul_like;
use crate::steps::speed::{PairedTiming, Speedup};
use crate::tasks::Side;
use crate::tasks::score::Metric;
use crate::tasks::score::{Questions, TaskScoring};

/// Seconds per phase of a tune, added up over the phase's recurrences: `statistics` (tune's calibration),
/// `fp32_scoring`, `candidate_screening` (F1 on the questions nearest to flipping) and `candidate_scoring` (on the
/// others, or on all without a screen: the confirmation), `held_out_fp32` (FP32's logits on the held-out questions
/// and its timing warm-up), `quantization`, `held_out_kl` and `timing` (each candidate built, measured on the
/// held-out questions, timed against FP32), `debug_and_sensitivity` (the per-pair errors and the node ranking),
/// `calibrator_choice`, `outputs` (the histograms and files).
#[derive(Default)]
pub struct Clock(RefCell<BTreeMap<&'static str, f64>>);

impl Clock {
    pub fn time<T>(&self, phase: &'static str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.add(phase, t);
        out
    }

    pub fn add(&self, phase: &'static str, since: Instant) {
        *self.0.borrow_mut().entry(phase).or_default() += since.elapsed().as_secs_f64();
    }

    /// The phases, and `total` since `started`.
    pub fn finish(&self, started: Instant) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = self.0.borrow().iter().map(|(k, v)| (k.to_string(), *v)).collect();
        out.insert("total".to_owned(), started.elapsed().as_secs_f64());
        out
    }
}

/// What candidates are built from: the model quantized (the smoothed one when the policy smooths), the run's policy,
/// the table's ranges, and where candidates go.
pub struct Base<'a> {
    pub model: &'a Model,
    pub path: &'a Path,
    pub policy: &'a Policy,
    pub ranges: qdq::Ranges,
    pub out: &'a Path,
}

/// FP32's scores in the task's terms, as the report names them: the score, its wall ms per feature (or text), the
/// units scored, and what the score is in.
pub fn fp32_summary(scoring: &dyn TaskScoring) -> (f64, f64, usize, Metric) {
    let f = scoring.fp32();
    (f.points, f.ms_per_text, f.scored, scoring.metric())
}

/// Other calibrators' ranges: the table as qdq wrote it, the statistics it came from, how many pairs to try.
pub struct Statistics {
    pub table: calib::RangeTable,
    pub state: calib::CalibState,
    pub methods: Vec<calib::Method>,
    pub trials: usize,
}

/// The ONNX Runtime scorer.
pub struct Measure<'a> {
    pub base: Base<'a>,
    pub questions: Box<dyn TaskScoring>,
    pub held: &'a HeldOut,
    pub timing: PairedTiming,
    /// The session candidates run on (as `qdq eval` runs them).
    pub session: SessionConfig,
    /// The session candidates are timed on: `session`, with the float parts at the EP's own default precision where
    /// that is not the run's (FP32 `timing` then runs at it too).
    pub timing_session: SessionConfig,
    /// `qdq debug` of candidates (into out/debug).
    pub debug: DebugJob,
    pub fp32_path: &'a Path,
    pub statistics: Option<Statistics>,
    pub clock: &'a Clock,
    pub progress: &'a dyn Progress,
    /// Ranges with other calibrators' choices, once made.
    pub tuned: Option<qdq::Ranges>,
    /// The last `qdq debug` of a candidate: its pairs, worst own rounding first.
    pub debugged: Option<DebugReport>,
}

impl Measure<'_> {
    /// The sensitivity's nodes that can be kept in float: those of the model quantized (not the nodes quantization
    /// adds, such as a shifted Softmax's correction).
    fn excludable(&self, ranking: Vec<String>) -> Vec<String> {
        let g = self.base.model.graph();
        let named: HashSet<&str> = g.node.iter().map(|n| n.name()).collect();
        ranking.into_iter().filter(|n| named.contains(n.as_str())).collect()
    }
}

impl Measure<'_> {
    /// `side`'s scores on `on` against FP32's, the time into the clock's `phase`.
    pub fn score_side(&mut self, side: Side<'_>, on: Questions, phase: &'static str) -> Result<Scored> {
        let u = self.clock.time(phase, || self.questions.score(side, on, self.progress))?;
        let fp32 = self.questions.fp32();
        let paired = squad_metrics::paired_difference(&u.per_unit, &fp32.per_unit);
        let scored = Scored {
            exact_match: u.exact_match,
            f1: u.points,
            delta_f1: u.points - fp32.points,
            delta_f1_se: paired.se,
            delta_f1_interval: (paired.low, paired.high),
            same_answers: squad_metrics::Proportion::of(u.same_top1.0, u.same_top1.1),
            ms_per_feature: u.ms_per_text,
            questions_scored: u.scored,
            screen_only: false,
            screen_delta_f1: None,
        };
        Ok(match on {
            Questions::Screen => Scored { screen_delta_f1: Some(scored.delta_f1), screen_only: true, ..scored },
            Questions::Rest => Scored { screen_delta_f1: u.screen_points.map(|p| p - fp32.points), ..scored },
            Questions::All => scored,
        })
    }
}

impl Scorer for Measure<'_> {
    fn questions(&self) -> usize {
        self.questions.fp32().scored
    }

    fn screens(&self) -> bool {
        self.questions.screens()
    }

    fn has_statistics(&self) -> bool {
        self.statistics.is_some()
    }

    fn build(&mut self, spec: &Spec) -> Result<Timed> {
        let path = self.base.out.join("candidates").join(spec.file_name());
        let ranges = if spec.calibrator_choices > 0 { self.tuned.as_ref() } else { None };
        let ranges = ranges.unwrap_or(&self.base.ranges);
        let model = self.clock.time("quantization", || -> Result<Model> {
            let policy = spec.policy(self.base.policy);
            let plan = crate::steps::quantize::plan(self.base.model, self.base.path, ranges, &policy)?;
            let mut model = self.base.model.clone();
            plan.apply(&mut model)?;
            save_model(&model, &path)?;
            Ok(model)
        })?;
        // Counted in the model quantized: the CPU layout's integer forms (MatMulIntegerToFloat, QAttention, ...) are
        // no longer MatMul-like nodes in the output, while what stays float is listed by name.
        let matmuls = self.base.model.graph().node.iter().filter(|n| qdq::MATMUL_LIKE.contains(&n.op_type())).count();
        let integer_matmuls = matmuls.saturating_sub(float_matmul_like(&model).len());
        let held_out_kl = self.clock.time("held_out_kl", || self.held.agreement(&model, "candidate"))?.loss();
        drop(model);
        let speedup = self.clock.time("timing", || self.timing.against(&path, &self.timing_session))?;
        Ok(Timed {
            float_nodes: spec.float_nodes.clone(),
            model: path,
            speedup,
            integer_matmuls,
            matmuls,
            calibrator_choices: spec.calibrator_choices,
            policy_options: spec.policy_options(),
            held_out_kl,
            vs_preset: None,
        })
    }

    fn head_to_head(&mut self, preset: &Timed, other: &Timed) -> Result<Speedup> {
        self.clock.time("timing", || self.timing.head_to_head(&preset.model, &other.model, &self.timing_session))
    }

    fn score(&mut self, t: &Timed, on: Questions) -> Result<Scored> {
        let phase = if on == Questions::Screen { "candidate_screening" } else { "candidate_scoring" };
        let session = self.session.clone();
        self.score_side(Side { path: &t.model, session: &session }, on, phase)
    }

    fn examine(&mut self, t: &Timed, sensitivity: bool) -> Result<Vec<String>> {
        let debug = DebugJob { sensitivity, ..self.debug.clone() };
        let report = self
            .clock
            .time("debug_and_sensitivity", || debug.run_on(self.fp32_path, &t.model, self.held, self.progress))?;
        let ranking = self.excludable(report.sensitivity.iter().map(|n| n.node.clone()).collect());
        self.debugged = Some(report);
        Ok(ranking)
    }

    fn calibrators(&mut self) -> Result<Vec<CalibratorChoice>> {
        let (Some(s), Some(debugged)) = (&self.statistics, &self.debugged) else { return Ok(Vec::new()) };
        let worst: Vec<String> = debugged.tensors.iter().take(s.trials).map(|t| t.tensor.clone()).collect();
        let trials =
            Trials { base: self.base.model, policy: self.base.policy, held: self.held, methods: s.methods.clone() };
        let chosen = self
            .clock
            .time("calibrator_choice", || calibrators::choose(&trials, &s.table, &s.state, &worst, self.progress))?;
        self.progress.note(&format!(
            "calibrator choice: {} of {} pairs tried took another calibrator's range; held-out distance to FP32 {:.5} \
             -> {:.5}",
            chosen.choices.len(),
            worst.len(),
            chosen.kl_start,
            chosen.kl_end
        ));
        if !chosen.choices.is_empty() {
            calib::tables::write_json(self.base.out.join("ranges_tuned.json"), &chosen.table)?;
            self.tuned = Some(chosen.table.min_max());
        }
        Ok(chosen.choices)
    }
}
