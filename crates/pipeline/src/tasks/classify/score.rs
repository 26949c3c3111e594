//! A classifier's score per input, the way `qdq tune` weighs candidates against FP32 (and `qdq debug --confirm`
//! confirms a node's sensitivity): with labels, 1 where the class (argmax) is the label, so a candidate's points are
//! its accuracy and a budget reads in accuracy points; without labels, 1 where the class is FP32's (agreement in
//! per cent). Either way the share of inputs whose class is FP32's is what `--min-same` holds.

use crate::error::{Error, Result};
use crate::inputs::files::{InputSet, TextInputs};
use crate::progress::Progress;
use crate::steps::run::EvalOptions;
use crate::tasks::Side;
use crate::tasks::classify::{ClassOutput, load_inputs, right, run_logits};
use crate::tasks::score::{Metric, Questions, ScoringRequest, TaskScoring, UnitScores};

/// Inputs per batch when candidates are scored (a throughput pass, as `qdq e2e` evaluates a classifier).
const CLASSIFY_BATCH: usize = 16;

/// The inputs a classifier's candidates are scored on, and FP32's classes of them.
pub struct ClassifyScoring {
    output: ClassOutput,
    set: InputSet,
    opts: EvalOptions,
    /// The labels scored against (none: agreement with FP32's class).
    labels: Option<Vec<i64>>,
    /// FP32's class of each row.
    fp32_classes: Vec<Option<usize>>,
    fp32_scores: UnitScores,
}

/// The argmax of each row.
fn classes_of(rows: &[Vec<f32>]) -> Vec<Option<usize>> {
    rows.iter().map(|r| calib::argmax(r, &[])).collect()
}

impl ClassifyScoring {
    /// The first `req.samples` inputs of `req.dataset` (every one for 0) and FP32's scores on them.
    pub(crate) fn of(
        output: &ClassOutput,
        req: &ScoringRequest<'_>,
        progress: &dyn Progress,
    ) -> Result<ClassifyScoring> {
        let text = TextInputs::for_model(req.graph, req.fp32, req.data);
        let set = load_inputs(req.dataset, req.graph, &text, req.samples, &output.name)?;
        let opts = EvalOptions {
            batch: CLASSIFY_BATCH,
            session: req.session.clone(),
            warmup: req.warmup,
            workers: 1,
            at_default_float: false,
        };
        let name = req.fp32.display().to_string();
        let (rows, latency, _, per_token) = run_logits(req.fp32, &name, &set, output, &opts, "FP32", progress)?;
        if rows.first().map(Vec::len) == Some(1) {
            return Err(Error::Input {
                path: req.fp32.to_path_buf(),
                reason: format!(
                    "a regression head (one output, `{output}`): `qdq tune` scores classes; `qdq debug` measures a \
                     regression output's difference from FP32's, `qdq e2e` its correlation"
                ),
            });
        }
        if !per_token && let Some(classes) = rows.first().map(Vec::len) {
            set.check_labels(classes, &output.name)?;
        }
        // A token classifier's rows are tokens, its labels (if any) inputs: scored by agreement.
        let labels = set.labels.clone().filter(|l| !per_token && l.len() == rows.len());
        let fp32_classes = classes_of(&rows);
        let per_unit = match &labels {
            Some(l) => right(&rows, Some(l)).unwrap_or_default(),
            None => vec![1.0; rows.len()],
        };
        let fp32_scores = UnitScores {
            points: UnitScores::mean_points(&per_unit),
            exact_match: None,
            scored: per_unit.len(),
            same_top1: (rows.len(), rows.len()),
            per_unit,
            ms_per_text: latency.ms_per_feature,
            screen_points: None,
        };
        let scoring = ClassifyScoring { output: output.clone(), set, opts, labels, fp32_classes, fp32_scores };
        progress.note(&format!(
            "candidates are scored by {} on {} {} (FP32 {:.2}); no screen (--screen is for SQuAD questions)",
            scoring.name(),
            scoring.fp32_scores.per_unit.len(),
            scoring.unit(),
            scoring.fp32_scores.points
        ));
        Ok(scoring)
    }

    /// `accuracy` with labels, else `agreement` (class = FP32's, in per cent).
    fn name(&self) -> &'static str {
        if self.labels.is_some() { "accuracy" } else { "agreement" }
    }

    /// `inputs`, or `tokens` for a token classifier scored per token.
    fn unit(&self) -> &'static str {
        if self.fp32_classes.len() == self.set.len() { "inputs" } else { "tokens" }
    }
}

impl TaskScoring for ClassifyScoring {
    fn metric(&self) -> Metric {
        let tokens = self.unit() == "tokens";
        Metric {
            name: self.name(),
            unit: self.unit(),
            one: if tokens { "token" } else { "input" },
            same: "class = FP32",
            proxy: "held-out KL",
            per: "input",
            delta: if self.labels.is_some() { "accuracy diff" } else { "agreement diff" },
            exact_match: false,
        }
    }

    fn fp32(&self) -> &UnitScores {
        &self.fp32_scores
    }

    /// Every input, whatever `on` says (no screen).
    fn score(&mut self, model: Side<'_>, _on: Questions, progress: &dyn Progress) -> Result<UnitScores> {
        let opts = EvalOptions { session: model.session.clone(), ..self.opts.clone() };
        let name = model.path.display().to_string();
        let (rows, latency, _, _) =
            run_logits(model.path, &name, &self.set, &self.output, &opts, "evaluating", progress)?;
        let classes = classes_of(&rows);
        let same = classes.iter().zip(&self.fp32_classes).filter(|(a, b)| a == b).count();
        let per_unit = match &self.labels {
            Some(l) => right(&rows, Some(l)).unwrap_or_default(),
            None => classes.iter().zip(&self.fp32_classes).map(|(a, b)| f64::from(u8::from(a == b))).collect(),
        };
        Ok(UnitScores {
            points: UnitScores::mean_points(&per_unit),
            exact_match: None,
            scored: per_unit.len(),
            per_unit,
            same_top1: (same, self.fp32_classes.len()),
            ms_per_text: latency.ms_per_feature,
            screen_points: None,
        })
    }
}
