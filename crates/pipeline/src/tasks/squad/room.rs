//! The SQuAD room's answers to [`TaskRoom`]: a model with start and end logits, calibrated on SQuAD questions (or
//! any inputs) and measured by EM / F1.

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::Result;
use crate::held_out::HeldOut;
use crate::inputs::config::DataConfig;
use crate::inputs::feeds::Feeds;
use crate::inputs::files::{InputSet, TextInputs};
use crate::inputs::folder::Loader;
use crate::job::Report;
use crate::progress::Progress;
use crate::steps::speed::OpProfile;
use crate::tasks::score::{ScoringRequest, TaskScoring};
use crate::tasks::squad::data::Corpus;
use crate::tasks::squad::e2e::SquadE2e;
use crate::tasks::{Detected, E2eRun, EvalRequest, TableLabels, Task, TaskData, TaskOutcome, TaskResult, TaskRoom};

/// A SQuAD model: start and end logits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SquadTask;

/// Start and end logits (named by `--io-names start=... end=...`, or found in the graph) make a SQuAD model, unless
/// an embedding or class logits were named.
pub(crate) fn detect(model: &Model, _: &Path, cfg: &DataConfig) -> Result<Detected> {
    let named = cfg.io_names.named();
    if named.embedding.is_some() || named.logits.is_some() {
        return Ok(Detected::Not(None));
    }
    let by_name = named.start.is_some() && named.end.is_some();
    Ok(match by_name || model_io::roles::logit_roles(model.graph(), named).is_ok() {
        true => Detected::Is(Task::of(SquadTask)),
        false => Detected::Not(None),
    })
}

impl TaskRoom for SquadTask {
    fn name(&self) -> &'static str {
        "squad"
    }

    fn unit(&self) -> &'static str {
        "questions"
    }

    /// The seed scripts' 100 questions.
    fn default_cal_num(&self) -> usize {
        100
    }

    /// mse: each token's start and end logit counts alone.
    fn integer_method(&self) -> calib::MethodKind {
        calib::MethodKind::Mse
    }

    fn on_several_eps(&self) -> bool {
        true
    }

    fn shifted_output(&self) -> Option<&str> {
        None
    }

    fn loader(&self) -> Option<Loader> {
        Some(Loader::Optimum { class: "ORTModelForQuestionAnswering".to_owned() })
    }

    fn confirm_instead(&self) -> Option<&'static str> {
        None
    }

    /// A SQuAD `.json` as questions; any other file as inputs.
    fn calibration_feeds(
        &self,
        (model, model_path): (&Model, &Path),
        path: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn Feeds>> {
        Ok(match path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
            true => {
                let mut c = Corpus::load(path, cfg, &text.loaded_tokenizer(cfg)?, n)?;
                c.fit_model(model, model_path)?;
                Box::new(c)
            }
            false => Box::new(InputSet::load(path, model, text, n)?),
        })
    }

    fn eval_data(
        &self,
        (model, model_path): (&Model, &Path),
        dataset: &Path,
        n: usize,
        cfg: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn TaskData>> {
        let mut d = Corpus::load(dataset, cfg, &text.loaded_tokenizer(cfg)?, n)?;
        d.fit_model(model, model_path)?;
        Ok(Box::new(d))
    }

    fn eval(&self, req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>> {
        crate::tasks::squad::eval::eval(req, progress)
    }

    fn scoring(&self, req: &ScoringRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn TaskScoring>> {
        Ok(Box::new(crate::tasks::squad::score::SquadScoring::of(req, progress)?))
    }

    /// SQuAD questions, compared by their start and end logits.
    fn held_out(
        &self,
        fp32: (&Model, &Path),
        dataset: &Path,
        n: usize,
        session: SessionConfig,
        cfg: &DataConfig,
    ) -> Result<HeldOut> {
        crate::tasks::squad::held::held_out(fp32, dataset, n, session, cfg)
    }
}

impl TaskData for Corpus {
    /// SQuAD questions by id (`None` unless `calibration` reads as a SQuAD dataset).
    fn calibration_overlap(&self, calibration: &Path, cal_num: usize, _: bool) -> Option<usize> {
        let all = squad_metrics::load_dataset(calibration).ok()?;
        let calibrated = if cal_num == 0 { all } else { all.first_n(cal_num) };
        let evaluated: std::collections::HashSet<&str> = self.question_ids().collect();
        Some(calibrated.questions().filter(|q| evaluated.contains(q.id.as_str())).count())
    }

    fn e2e(
        &self,
        run: &E2eRun<'_>,
        progress: &dyn Progress,
        phases: &mut std::collections::BTreeMap<String, f64>,
    ) -> Result<TaskResult> {
        Ok(TaskResult::new(crate::tasks::squad::e2e::e2e(run, self, progress, phases)?))
    }

    fn profile(&self, model: &Path, session: &SessionConfig, batch: usize) -> Result<OpProfile> {
        crate::tasks::squad::eval::profile_first_features(model, self, batch, session)
    }
}

#[typetag::serde(name = "squad")]
impl TaskOutcome for SquadE2e {
    fn table(&self, labels: &TableLabels) -> String {
        crate::tasks::squad::table::table(self, labels)
    }
}
