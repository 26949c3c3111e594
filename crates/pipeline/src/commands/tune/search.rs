//! `qdq tune`'s search, apart from how candidates are measured. A candidate is a value ([`Spec`]: which nodes stay
//! in float, whose ranges another calibrator gives, whether every MatMul is integer); a [`Scorer`] builds, times,
//! examines and scores it (ONNX Runtime in `qdq tune`, a table in the tests below). The search takes named steps:
//!
//! - **screen**: a candidate is scored on the questions nearest to flipping first ([`ScreenVerdict`]), and on the
//!   rest only when that puts it within budget and above every candidate already found over budget on every question;
//! - **score**: the preset, the all-integer form of a preset within budget, the table with other calibrators' ranges
//!   for the worst pairs, then the most sensitive 1, 2, 4, ... nodes in float, until one is within budget;
//! - **time**: the all-integer candidate head to head against the preset, scored only when at most
//!   [`ALL_INTEGER_SLACK`] slower;
//! - **choose**: the all-integer candidate within budget, else the first within budget, else the best F1 of those
//!   scored on every question, else the best screen, then scored on every question.

use qdq::Policy;

use crate::error::Result;
use crate::progress::Progress;
use crate::report::tune::{CalibratorChoice, Candidate, Scored, Timed, count_nodes};
use crate::steps::speed::Speedup;
pub use crate::tasks::score::Questions;

/// How much slower than the preset (head to head) the all-integer candidate may be and still be chosen: a tie in
/// speed goes to the model with more integer MatMuls. About what the head-to-head median resolves.
pub const ALL_INTEGER_SLACK: f64 = 0.02;

/// A candidate as a value: what it changes of the run's policy and ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spec {
    /// Nodes kept in float, besides the policy's own exclusions.
    pub float_nodes: Vec<String>,
    /// Tensors whose range another calibrator gives (0: the table's ranges).
    pub calibrator_choices: usize,
    /// Every MatMul integer: the policy's `matmul_const_b_only` off.
    pub all_integer: bool,
}

impl Spec {
    /// The spec a candidate was built from.
    pub fn of(t: &Timed) -> Spec {
        Spec {
            float_nodes: t.float_nodes.clone(),
            calibrator_choices: t.calibrator_choices,
            all_integer: !t.policy_options.is_empty(),
        }
    }

    /// The candidate's policy: `base` with its float nodes excluded and, when all-integer, every MatMul quantized.
    pub fn policy(&self, base: &Policy) -> Policy {
        let mut policy = base.clone();
        policy.exclude_nodes.extend(self.float_nodes.iter().cloned());
        if self.all_integer {
            policy.matmul_const_b_only = false;
        }
        policy
    }

    /// Its file in candidates/.
    pub fn file_name(&self) -> String {
        format!(
            "model_qdq_float{}{}{}.onnx",
            self.float_nodes.len(),
            if self.calibrator_choices > 0 { "_calibrators" } else { "" },
            if self.all_integer { "_all_integer" } else { "" }
        )
    }

    /// The policy options it sets besides the run's, as `key=value` (the report lists them).
    pub fn policy_options(&self) -> Vec<String> {
        if self.all_integer { vec!["matmul_const_b_only=false".to_owned()] } else { Vec::new() }
    }
}

/// What the search asks of the models.
pub trait Scorer {
    /// The evaluation questions in all.
    fn questions(&self) -> usize;
    /// Whether candidates are screened first (the screen holds fewer than every question).
    fn screens(&self) -> bool;
    /// Whether the run has the statistics other calibrators' ranges come from.
    fn has_statistics(&self) -> bool;
    /// Builds `spec` (quantized and written), measures its held-out KL and times it against FP32.
    fn build(&mut self, spec: &Spec) -> Result<Timed>;
    /// `other`'s speed against `preset`'s, the two run in turn on the same batches (above 1: faster).
    fn head_to_head(&mut self, preset: &Timed, other: &Timed) -> Result<Speedup>;
    /// `t`'s scores on `on` (a screened candidate's scores completed, for [`Questions::Rest`]).
    fn score(&mut self, t: &Timed, on: Questions) -> Result<Scored>;
    /// Measures `t`'s pairs (`qdq debug`) and, with `sensitivity`, ranks its nodes, most recovering first.
    fn examine(&mut self, t: &Timed, sensitivity: bool) -> Result<Vec<String>>;
    /// Tries other calibrators' ranges for the worst pairs of the last candidate examined; the choices kept (the
    /// candidates of specs with `calibrator_choices > 0` use them).
    fn calibrators(&mut self) -> Result<Vec<CalibratorChoice>>;
}

/// The search's settings.
#[derive(Debug, Clone, Copy)]
pub struct Search {
    /// The largest F1 loss against FP32 accepted.
    pub budget: f64,
    /// The smallest share (0-1) of answers identical to FP32's accepted, if any.
    pub min_same_answers: Option<f64>,
    /// The most nodes kept in float.
    pub max_float: usize,
    /// Whether other calibrators' ranges are tried before nodes go to float.
    pub calibrators: bool,
    /// Whether the policy keeps MatMuls with a variable B in float by design (the all-integer form exists).
    pub all_integer: bool,
}

/// What the search found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every candidate scored, in order.
    pub curve: Vec<Candidate>,
    /// Index into `curve` of the choice.
    pub chosen: usize,
    pub within_budget: bool,
    /// The sensitivity order the float nodes were taken in.
    pub ranking: Vec<String>,
    pub calibrators: Vec<CalibratorChoice>,
    /// Candidates timed but not scored (the all-integer one, slower than the preset).
    pub not_scored: Vec<Timed>,
}

/// What a candidate's screen decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScreenVerdict {
    /// Over budget on the screen alone (the other questions taken as FP32 answers them).
    OverBudget,
    /// Within budget, but no better than this screen of a candidate found over budget on every question.
    NoBetterThan(f64),
    /// Run on the other questions.
    RunOnRest,
}

impl ScreenVerdict {
    /// The verdict on a screen's dF1 against the budget and the best screen among the candidates over budget on
    /// every question (`failed`). The rest (the questions FP32 answers firmly) moved every candidate alike where
    /// measured (docs/QUANTIZATION.md), so what failed with a better screen is not expected to pass.
    pub fn of(screen_delta_f1: f64, budget: f64, failed: Option<f64>) -> ScreenVerdict {
        if -screen_delta_f1 > budget {
            ScreenVerdict::OverBudget
        } else if let Some(f) = failed.filter(|&f| screen_delta_f1 <= f) {
            ScreenVerdict::NoBetterThan(f)
        } else {
            ScreenVerdict::RunOnRest
        }
    }
}

/// A search under way: its settings, the scorer, and what it has found.
struct Walk<'a> {
    search: &'a Search,
    scorer: &'a mut dyn Scorer,
    progress: &'a dyn Progress,
    curve: Vec<Candidate>,
    /// The best screen among the candidates found over budget on every question.
    failed_screen: Option<f64>,
}

impl Search {
    /// Runs the search (see the module docs).
    pub fn run(&self, scorer: &mut dyn Scorer, progress: &dyn Progress) -> Result<Outcome> {
        let mut walk = Walk { search: self, scorer, progress, curve: Vec::new(), failed_screen: None };
        let preset = walk.build_and_score(&Spec::default())?;
        walk.curve.push(preset);
        let over = !walk.within(&walk.curve[0]);
        let (all_integer, not_scored) = if over { (None, None) } else { walk.time_all_integer()? };
        let calibrate = over && self.calibrators && walk.scorer.has_statistics();
        let preset = walk.curve[0].timed.clone();
        let mut ranking = walk.scorer.examine(&preset, over && !calibrate && self.max_float > 0)?;
        let mut calibrators = Vec::new();
        if calibrate {
            calibrators = walk.scorer.calibrators()?;
            if !calibrators.is_empty() {
                let tuned = Spec { calibrator_choices: calibrators.len(), ..Spec::default() };
                let c = walk.build_and_score(&tuned)?;
                walk.curve.push(c);
            }
            if !walk.last_within() && self.max_float > 0 {
                let last = walk.last().timed.clone();
                ranking = walk.scorer.examine(&last, true)?;
            }
        }
        if walk.last_within() || self.max_float == 0 {
            ranking.clear();
        }
        walk.ladder(&ranking, calibrators.len())?;
        let chosen = walk.choose(all_integer)?;
        let within_budget = walk.within(&walk.curve[chosen]);
        Ok(Outcome {
            curve: walk.curve,
            chosen,
            within_budget,
            ranking,
            calibrators,
            not_scored: not_scored.into_iter().collect(),
        })
    }
}

impl Walk<'_> {
    /// Only a candidate scored on every question can be within budget.
    fn within(&self, c: &Candidate) -> bool {
        let faithful = self.search.min_same_answers.is_none_or(|m| c.scored.same_answers.share >= m);
        -c.scored.delta_f1 <= self.search.budget && faithful && c.scored.questions_scored == self.scorer.questions()
    }

    fn last(&self) -> &Candidate {
        self.curve.last().expect("the preset is always scored")
    }

    fn last_within(&self) -> bool {
        self.within(self.last())
    }

    fn build_and_score(&mut self, spec: &Spec) -> Result<Candidate> {
        let t = self.scorer.build(spec)?;
        self.score(t)
    }

    /// **score** (and **screen**): `t` on every question, or screened first.
    fn score(&mut self, t: Timed) -> Result<Candidate> {
        let scored = if self.scorer.screens() { self.screen(&t)? } else { self.scorer.score(&t, Questions::All)? };
        let c = Candidate { timed: t, scored };
        let mut also = match c.timed.calibrator_choices {
            0 => String::new(),
            n => format!(" ({n} ranges from other calibrators)"),
        };
        if !c.timed.policy_options.is_empty() {
            also.push_str(&format!(" ({})", c.timed.policy_options.join(", ")));
        }
        let estimate = if c.scored.questions_scored < self.scorer.questions() {
            format!(" on its screen of {} questions: not scored on the rest", c.scored.questions_scored)
        } else {
            String::new()
        };
        self.progress.note(&format!(
            "{} in float{also}: F1 {:.2} ({:+.2}){estimate}, {} FP32's speed",
            count_nodes(c.timed.float_nodes.len()),
            c.scored.f1,
            c.scored.delta_f1,
            c.timed.speedup.describe(),
        ));
        Ok(c)
    }

    /// **screen**: `t` on the questions nearest to flipping, then on the rest when [`ScreenVerdict::RunOnRest`].
    fn screen(&mut self, t: &Timed) -> Result<Scored> {
        let screened = self.scorer.score(t, Questions::Screen)?;
        let (nodes, dropped) = (count_nodes(t.float_nodes.len()), self.scorer.questions() - screened.questions_scored);
        let (delta, n) = (screened.delta_f1, screened.questions_scored);
        match ScreenVerdict::of(delta, self.search.budget, self.failed_screen) {
            ScreenVerdict::OverBudget => Ok(screened),
            ScreenVerdict::NoBetterThan(f) => {
                self.progress.note(&format!(
                    "{nodes} in float: dF1 {delta:+.2} on its screen of {n} questions, within budget but no better than \
                     {f:+.2}, the screen of a candidate over budget on every question: not run on the other {dropped}"
                ));
                Ok(screened)
            }
            ScreenVerdict::RunOnRest => {
                self.progress.note(&format!(
                    "{nodes} in float: dF1 {delta:+.2} on its screen of {n} questions, within budget: run on the other \
                     {dropped}"
                ));
                let whole = self.scorer.score(t, Questions::Rest)?;
                if -whole.delta_f1 > self.search.budget {
                    self.failed_screen = Some(self.failed_screen.map_or(delta, |f| f.max(delta)));
                }
                Ok(whole)
            }
        }
    }

    /// **time**: a preset within budget that keeps MatMuls in float by design, with every MatMul integer: scored
    /// when at most [`ALL_INTEGER_SLACK`] slower than the preset head to head (its index in the curve when then
    /// within budget), else returned unscored. Timed first: a model that cannot be chosen costs no evaluation.
    fn time_all_integer(&mut self) -> Result<(Option<usize>, Option<Timed>)> {
        let preset = self.curve[0].timed.clone();
        if !self.search.all_integer || preset.integer_matmuls >= preset.matmuls {
            return Ok((None, None));
        }
        let mut b = self.scorer.build(&Spec { all_integer: true, ..Spec::default() })?;
        if b.integer_matmuls <= preset.integer_matmuls {
            // A --ranges table calibrated for the preset has no ranges for what it keeps float.
            self.progress.note(
                "no candidate with every MatMul integer: the ranges have none for the MatMul inputs the preset keeps \
                 float",
            );
            return Ok((None, None));
        }
        let h = self.scorer.head_to_head(&preset, &b)?;
        b.vs_preset = Some(h);
        let what =
            format!("every MatMul integer ({}/{}): {} the preset's speed", b.integer_matmuls, b.matmuls, h.describe());
        if h.median < 1.0 - ALL_INTEGER_SLACK {
            let slack = ALL_INTEGER_SLACK * 100.0;
            self.progress.note(&format!("{what}, timed head to head: more than {slack:.0} % slower, not scored"));
            return Ok((None, Some(b)));
        }
        self.progress.note(&format!("{what}, timed head to head: scored"));
        let c = self.score(b)?;
        let within = self.within(&c);
        self.curve.push(c);
        Ok((within.then_some(self.curve.len() - 1), None))
    }

    /// The most sensitive 1, 2, 4, ... nodes of `ranking` in float (with the calibrators' ranges, if any were
    /// kept), until one is within budget or `max_float` is reached.
    fn ladder(&mut self, ranking: &[String], calibrator_choices: usize) -> Result<()> {
        let mut k = 1;
        while k <= self.search.max_float.min(ranking.len()) && !self.last_within() {
            let spec = Spec { float_nodes: ranking[..k].to_vec(), calibrator_choices, all_integer: false };
            let c = self.build_and_score(&spec)?;
            self.curve.push(c);
            k *= 2;
        }
        Ok(())
    }

    /// **choose**: see the module docs. A chosen screen is scored on every question.
    fn choose(&mut self, all_integer: Option<usize>) -> Result<usize> {
        let total = self.scorer.questions();
        let best = |curve: &[Candidate], complete: bool| {
            (0..curve.len())
                .filter(|&i| (curve[i].scored.questions_scored == total) == complete)
                .max_by(|&a, &b| curve[a].scored.f1.total_cmp(&curve[b].scored.f1))
        };
        let chosen = all_integer
            .or_else(|| self.curve.iter().position(|c| self.within(c)))
            .or_else(|| best(&self.curve, true))
            .or_else(|| best(&self.curve, false))
            .unwrap_or(0);
        if self.curve[chosen].scored.questions_scored < total {
            let nodes = count_nodes(self.curve[chosen].timed.float_nodes.len());
            self.progress
                .note(&format!("none within budget: the best screen, {nodes} in float, run on the other questions"));
            self.curve[chosen].scored = self.scorer.score(&self.curve[chosen].timed, Questions::Rest)?;
        }
        Ok(chosen)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::progress::NoProgress;

    /// A scorer from tables: each candidate's dF1 by its float nodes (and calibrator choices, all-integer), on the
    /// screen and on every question; it records what it was asked.
    struct Fake {
        questions: usize,
        screen: Option<usize>,
        statistics: bool,
        /// dF1 on every question, by (float nodes, calibrator choices, all-integer).
        whole: HashMap<(usize, usize, bool), f64>,
        /// dF1 on the screen (FP32's answers for the rest); the whole dF1 when absent.
        screened: HashMap<(usize, usize, bool), f64>,
        ranking: Vec<String>,
        choices: usize,
        vs_preset: f64,
        asked: Vec<String>,
    }

    fn key(t: &Timed) -> (usize, usize, bool) {
        (t.float_nodes.len(), t.calibrator_choices, !t.policy_options.is_empty())
    }

    fn fake(whole: &[((usize, usize, bool), f64)]) -> Fake {
        Fake {
            questions: 100,
            screen: None,
            statistics: false,
            whole: whole.iter().copied().collect(),
            screened: HashMap::new(),
            ranking: (0..10).map(|i| format!("node{i}")).collect(),
            choices: 0,
            vs_preset: 1.0,
            asked: Vec::new(),
        }
    }

    const SPEED: Speedup = Speedup {
        median: 2.0,
        min: 1.9,
        max: 2.1,
        rounds: 5,
        features: 16,
        reference_ms_per_feature: 10.0,
        ms_per_feature: 5.0,
    };

    impl Scorer for Fake {
        fn questions(&self) -> usize {
            self.questions
        }
        fn screens(&self) -> bool {
            self.screen.is_some()
        }
        fn has_statistics(&self) -> bool {
            self.statistics
        }
        fn build(&mut self, spec: &Spec) -> Result<Timed> {
            self.asked.push(format!("build {}", spec.file_name()));
            let integer = 40 + if spec.all_integer { 6 } else { 0 } - spec.float_nodes.len();
            Ok(Timed {
                float_nodes: spec.float_nodes.clone(),
                model: spec.file_name().into(),
                speedup: SPEED,
                integer_matmuls: integer,
                matmuls: 46,
                calibrator_choices: spec.calibrator_choices,
                policy_options: spec.policy_options(),
                held_out_kl: 0.1,
                vs_preset: None,
            })
        }
        fn head_to_head(&mut self, _: &Timed, _: &Timed) -> Result<Speedup> {
            self.asked.push("head to head".into());
            Ok(Speedup { median: self.vs_preset, ..SPEED })
        }
        fn score(&mut self, t: &Timed, on: Questions) -> Result<Scored> {
            self.asked.push(format!("score {} {on:?}", t.model.display()));
            let whole = self.whole[&key(t)];
            let (delta, n) = match (on, self.screen) {
                (Questions::Screen, Some(n)) => (self.screened.get(&key(t)).copied().unwrap_or(whole), n),
                _ => (whole, self.questions),
            };
            Ok(Scored {
                exact_match: Some(60.0),
                f1: 70.0 + delta,
                delta_f1: delta,
                delta_f1_se: 0.1,
                delta_f1_interval: (delta - 0.2, delta + 0.2),
                same_answers: squad_metrics::Proportion::of(90, 100),
                ms_per_feature: 5.0,
                questions_scored: n,
                screen_only: on == Questions::Screen && self.screen.is_some(),
                screen_delta_f1: (on != Questions::All && self.screen.is_some())
                    .then(|| self.screened.get(&key(t)).copied().unwrap_or(whole)),
            })
        }
        fn examine(&mut self, t: &Timed, sensitivity: bool) -> Result<Vec<String>> {
            self.asked.push(format!("examine {} {sensitivity}", t.model.display()));
            Ok(if sensitivity { self.ranking.clone() } else { Vec::new() })
        }
        fn calibrators(&mut self) -> Result<Vec<CalibratorChoice>> {
            self.asked.push("calibrators".into());
            let choice = CalibratorChoice {
                tensor: "t".into(),
                from: "mse".into(),
                from_range: (0.0, 1.0),
                to: "minmax".into(),
                to_range: (0.0, 2.0),
                kl_before: 0.2,
                kl_after: 0.1,
            };
            Ok(vec![choice; self.choices])
        }
    }

    fn search(budget: f64, max_float: usize) -> Search {
        Search { budget, min_same_answers: None, max_float, calibrators: true, all_integer: false }
    }

    fn floats(o: &Outcome) -> Vec<usize> {
        o.curve.iter().map(|c| c.timed.float_nodes.len()).collect()
    }

    #[test]
    fn a_preset_within_budget_is_chosen_at_once() {
        let mut f = fake(&[((0, 0, false), -0.2)]);
        let o = search(0.5, 8).run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen, o.within_budget), (vec![0], 0, true));
        assert!(o.ranking.is_empty() && o.not_scored.is_empty());
        // The pairs are measured (debug/), the sensitivity is not: no node has to go to float.
        assert_eq!(
            f.asked,
            ["build model_qdq_float0.onnx", "score model_qdq_float0.onnx All", "examine model_qdq_float0.onnx false"]
        );
    }

    /// With a share of answers identical to FP32's to keep, a candidate within the F1 budget that answers fewer (the
    /// fake: 90 %) is not within budget: the ladder goes on, and ends without a choice within both.
    #[test]
    fn the_answers_kept_are_a_budget_too() {
        let table = [((0, 0, false), -0.2), ((1, 0, false), -0.1), ((2, 0, false), -0.1)];
        let mut f = fake(&table);
        let o = Search { min_same_answers: Some(0.95), ..search(0.5, 2) }.run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.within_budget), (vec![0, 1, 2], false));
        let mut f = fake(&table);
        let o = Search { min_same_answers: Some(0.90), ..search(0.5, 2) }.run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen, o.within_budget), (vec![0], 0, true));
    }

    #[test]
    fn nodes_go_to_float_1_2_4_until_the_budget_is_met() {
        let mut f = fake(&[((0, 0, false), -2.0), ((1, 0, false), -1.5), ((2, 0, false), -0.9), ((4, 0, false), -0.4)]);
        let o = search(0.5, 8).run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen, o.within_budget), (vec![0, 1, 2, 4], 3, true));
        assert_eq!(o.curve[3].timed.float_nodes, ["node0", "node1", "node2", "node3"]);
        assert!(f.asked.contains(&"examine model_qdq_float0.onnx true".to_owned()), "{:?}", f.asked);
        assert_eq!(o.ranking.len(), 10);
    }

    #[test]
    fn never_within_budget_the_best_f1_is_kept() {
        let mut f = fake(&[((0, 0, false), -3.0), ((1, 0, false), -2.0), ((2, 0, false), -1.1), ((4, 0, false), -1.4)]);
        let o = search(0.5, 4).run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen, o.within_budget), (vec![0, 1, 2, 4], 2, false));
        // max_float 0: no ladder, the preset is kept.
        let mut f = fake(&[((0, 0, false), -3.0)]);
        let o = search(0.5, 0).run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen, o.within_budget), (vec![0], 0, false));
        assert!(o.ranking.is_empty());
    }

    #[test]
    fn a_screen_over_budget_or_no_better_than_a_failed_one_is_not_run_on_the_rest() {
        let mut f = fake(&[((0, 0, false), -2.0), ((1, 0, false), -0.9), ((2, 0, false), -0.8), ((4, 0, false), -0.3)]);
        f.screen = Some(30);
        // The preset fails its screen; one node passes its screen but not the rest; two nodes screen no better than
        // one did (not run on the rest); four pass both.
        f.screened = [((0, 0, false), -1.0), ((1, 0, false), -0.3), ((2, 0, false), -0.35), ((4, 0, false), -0.1)]
            .into_iter()
            .collect();
        let o = search(0.5, 8).run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen, o.within_budget), (vec![0, 1, 2, 4], 3, true));
        let scored: Vec<usize> = o.curve.iter().map(|c| c.scored.questions_scored).collect();
        assert_eq!(scored, [30, 100, 30, 100]);
        for model in ["model_qdq_float0.onnx", "model_qdq_float2.onnx"] {
            assert!(!f.asked.contains(&format!("score {model} Rest")), "{model}: {:?}", f.asked);
        }
        assert!(f.asked.contains(&"score model_qdq_float1.onnx Rest".to_owned()));
        assert_eq!(ScreenVerdict::of(-0.35, 0.5, Some(-0.3)), ScreenVerdict::NoBetterThan(-0.3));
        assert_eq!(ScreenVerdict::of(-0.6, 0.5, None), ScreenVerdict::OverBudget);
        assert_eq!(ScreenVerdict::of(-0.2, 0.5, Some(-0.3)), ScreenVerdict::RunOnRest);
    }

    #[test]
    fn with_no_candidate_complete_the_best_screen_is_scored_on_every_question() {
        let mut f = fake(&[((0, 0, false), -3.0), ((1, 0, false), -2.5)]);
        f.screen = Some(30);
        let o = search(0.5, 1).run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen, o.within_budget), (vec![0, 1], 1, false));
        assert_eq!(o.curve[1].scored.questions_scored, 100);
        assert_eq!(o.curve[0].scored.questions_scored, 30);
        assert_eq!(f.asked.last().map(String::as_str), Some("score model_qdq_float1.onnx Rest"));
    }

    #[test]
    fn every_matmul_integer_is_chosen_only_within_budget_and_within_the_slack() {
        let table = [((0, 0, false), -0.2), ((0, 0, true), -0.3)];
        let all_integer = Search { all_integer: true, ..search(0.5, 8) };
        let mut f = fake(&table);
        let o = all_integer.run(&mut f, &NoProgress).unwrap();
        assert_eq!((o.curve.len(), o.chosen, o.within_budget), (2, 1, true));
        assert_eq!(o.curve[1].timed.policy_options, ["matmul_const_b_only=false"]);
        assert!(o.curve[1].timed.vs_preset.is_some());
        // 10 % slower than the preset: timed, not scored.
        let mut f = fake(&table);
        f.vs_preset = 0.9;
        let o = all_integer.run(&mut f, &NoProgress).unwrap();
        assert_eq!((o.curve.len(), o.chosen, o.not_scored.len()), (1, 0, 1));
        assert!(!f.asked.iter().any(|a| a.contains("all_integer.onnx All")), "{:?}", f.asked);
        // Scored but over budget: the preset stays.
        let mut f = fake(&[((0, 0, false), -0.2), ((0, 0, true), -0.9)]);
        let o = all_integer.run(&mut f, &NoProgress).unwrap();
        assert_eq!((o.curve.len(), o.chosen), (2, 0));
    }

    #[test]
    fn other_calibrators_come_before_nodes_in_float() {
        let mut f = fake(&[((0, 0, false), -2.0), ((0, 3, false), -0.4)]);
        f.statistics = true;
        f.choices = 3;
        let o = search(0.5, 8).run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen, o.within_budget, o.calibrators.len()), (vec![0, 0], 1, true, 3));
        assert!(o.ranking.is_empty());
        // The first examine measures the pairs only: the calibrators come first.
        assert_eq!(f.asked[2], "examine model_qdq_float0.onnx false");
        // Still over budget with them: the ranking is taken on that candidate, and its nodes go to float with them.
        let mut f = fake(&[((0, 0, false), -2.0), ((0, 3, false), -1.0), ((1, 3, false), -0.2)]);
        f.statistics = true;
        f.choices = 3;
        let o = search(0.5, 8).run(&mut f, &NoProgress).unwrap();
        assert_eq!((floats(&o), o.chosen), (vec![0, 0, 1], 2));
        assert!(f.asked.contains(&"examine model_qdq_float0_calibrators.onnx true".to_owned()), "{:?}", f.asked);
        assert_eq!(o.curve[2].timed.calibrator_choices, 3);
    }
}
