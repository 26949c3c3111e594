//! A SQuAD model's candidates scored as `qdq tune` weighs them: F1 on the evaluation questions (official scoring),
//! each question's F1 paired with FP32's, the answers identical to FP32's; with `--screen`, first on the questions
//! whose FP32 answers are nearest to flipping ([`ScreenSplit`]), FP32's answers standing in for the rest.

use std::collections::HashMap;
use std::path::PathBuf;

use runtime::ModelSource;

use crate::error::Result;
use crate::progress::Progress;
use crate::steps::run::EvalOptions;
use crate::tasks::Side;
use crate::tasks::score::{Metric, Questions, ScoringRequest, TaskScoring, UnitScores};
use crate::tasks::squad::data::{Corpus, Score};
use crate::tasks::squad::evaluate::{Evaluation, evaluate, scored_questions};
use crate::tasks::squad::screen::ScreenSplit;

/// The evaluation questions, FP32's answers to them, and how candidates are run on them.
pub struct SquadScoring {
    all: Corpus,
    /// The screen's split, and each part as a corpus (fragile, rest).
    screen: Option<(ScreenSplit, Corpus, Corpus)>,
    gold: squad_metrics::Dataset,
    v2: bool,
    fp32: Evaluation,
    fp32_scores: UnitScores,
    opts: EvalOptions,
    /// A screened candidate's answers (FP32's to the rest) and its scores on the screen, by model.
    screened: HashMap<PathBuf, (HashMap<String, String>, UnitScores)>,
}

impl SquadScoring {
    /// FP32 on the first `req.samples` questions of `req.dataset`, and the screen its answers' margins give.
    pub(crate) fn of(req: &ScoringRequest<'_>, progress: &dyn Progress) -> Result<SquadScoring> {
        let mut all = Corpus::load(req.dataset, req.data, &req.data.tokenizer()?, req.samples)?;
        all.fit_model(req.graph, req.fp32)?;
        // Scoring is a throughput pass (the speed comes from the timing): one one-thread session per core.
        let workers = runtime::threads_or_cores(req.session.intra_threads);
        let opts = EvalOptions {
            batch: 1,
            session: req.session.clone(),
            warmup: req.warmup,
            workers,
            at_default_float: false,
        };
        let name = req.fp32.display().to_string();
        let fp32 = evaluate(ModelSource::File(req.fp32), &name, &all, &opts, "evaluating", progress)?;
        // Per-question F1 against FP32's: how far the question sample alone moves each candidate's dF1.
        let (gold, v2) = scored_questions(req.dataset, req.samples, req.version_2)?;
        let fp32_scores = UnitScores {
            per_unit: squad_metrics::question_f1(&gold, &fp32.predictions, v2),
            points: fp32.score.f1,
            exact_match: Some(fp32.score.exact_match),
            same_top1: (gold.num_questions(), gold.num_questions()),
            ms_per_text: fp32.wall_ms_per_feature(),
            scored: fp32.score.questions,
            screen_points: None,
        };
        let screen = match ScreenSplit::new(&gold, &fp32.margins, req.screen) {
            Some(s) => {
                progress.note(&format!(
                    "candidates are screened on the {} of {} questions whose FP32 answers are nearest to flipping \
                     (--screen {}); only one the screen puts within budget is scored on the rest",
                    s.fragile.len(),
                    s.fragile.len() + s.rest.len(),
                    req.screen
                ));
                let (fragile, rest) = (all.restricted(&s.fragile)?, all.restricted(&s.rest)?);
                Some((s, fragile, rest))
            }
            None => None,
        };
        Ok(SquadScoring { all, screen, gold, v2, fp32, fp32_scores, opts, screened: HashMap::new() })
    }

    /// `model`'s answers to the questions `on` asks.
    fn answers(&self, model: Side<'_>, on: Questions, progress: &dyn Progress) -> Result<Evaluation> {
        let corpus = match (&self.screen, on) {
            (Some((_, fragile, _)), Questions::Screen) => fragile,
            (Some((_, _, rest)), Questions::Rest) => rest,
            _ => &self.all,
        };
        let name = model.path.display().to_string();
        let opts = EvalOptions { session: model.session.clone(), ..self.opts.clone() };
        evaluate(ModelSource::File(model.path), &name, corpus, &opts, "evaluating", progress)
    }

    /// Scores `answers` (FP32's for the questions they leave out) against the gold answers.
    fn rate(&self, answers: &HashMap<String, String>, scored: usize, ms_per_text: f64) -> UnitScores {
        let Score { exact_match, f1, .. } = Score::of(&self.gold, answers, self.v2);
        let same = self.gold.questions().filter(|g| answers.get(&g.id) == self.fp32.predictions.get(&g.id)).count();
        UnitScores {
            per_unit: squad_metrics::question_f1(&self.gold, answers, self.v2),
            points: f1,
            exact_match: Some(exact_match),
            same_top1: (same, self.gold.num_questions()),
            ms_per_text,
            scored,
            screen_points: None,
        }
    }
}

impl TaskScoring for SquadScoring {
    fn metric(&self) -> Metric {
        Metric::F1
    }

    fn fp32(&self) -> &UnitScores {
        &self.fp32_scores
    }

    fn screens(&self) -> bool {
        self.screen.is_some()
    }

    fn score(&mut self, model: Side<'_>, on: Questions, progress: &dyn Progress) -> Result<UnitScores> {
        let total = self.fp32_scores.scored;
        match on {
            Questions::All => {
                let e = self.answers(model, on, progress)?;
                Ok(self.rate(&e.predictions, total, e.wall_ms_per_feature()))
            }
            Questions::Screen => {
                let fragile = self.screen.as_ref().map_or(total, |(s, _, _)| s.fragile.len());
                let e = self.answers(model, on, progress)?;
                let ms = e.wall_ms_per_feature();
                let mut answers = self.fp32.predictions.clone();
                answers.extend(e.predictions);
                let s = self.rate(&answers, fragile, ms);
                self.screened.insert(model.path.to_path_buf(), (answers, s.clone()));
                Ok(s)
            }
            Questions::Rest => {
                let Some((mut answers, screened)) = self.screened.remove(model.path) else {
                    return self.score(model, Questions::All, progress);
                };
                let rest = self.screen.as_ref().map_or(0, |(s, _, _)| s.rest.len());
                let e = self.answers(model, on, progress)?;
                let n = screened.scored;
                let ms = (screened.ms_per_text * n as f64 + e.wall_ms_per_feature() * rest as f64) / (n + rest) as f64;
                answers.extend(e.predictions);
                Ok(UnitScores { screen_points: Some(screened.points), ..self.rate(&answers, total, ms) })
            }
        }
    }
}
