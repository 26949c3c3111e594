//! The classifier room's answers to [`TaskRoom`]: a model with class logits (`[batch, classes]`, or `[batch, seq,
//! classes]` per token), calibrated on any inputs and measured by its agreement with FP32 (and accuracy with labels).

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::{Error, Result};
use crate::held_out::HeldOut;
use crate::inputs::config::DataConfig;
use crate::inputs::feeds::Feeds;
use crate::inputs::files::{InputSet, TextInputs};
use crate::inputs::folder::Loader;
use crate::job::Report;
use crate::progress::Progress;
use crate::steps::speed::OpProfile;
use crate::tasks::classify::{self, ClassOutput, ClassifierEval};
use crate::tasks::score::{ScoringRequest, TaskScoring};
use crate::tasks::{
    Detected, E2eRun, EvalRequest, TableLabels, Task, TaskData, TaskOutcome, TaskResult, TaskRoom, profile_inputs,
    rows_shared,
};

/// A classifier of class logits `output` (its name empty when calibrating a model whose outputs are not read).
#[derive(Debug, Clone)]
pub(crate) struct ClassifyTask {
    pub output: ClassOutput,
}

/// Class logits, as [`crate::inputs::roles::class_logits`] finds them (named by `--io-names logits=...`, or the
/// graph's one output of classes), make a classifier; the classes its folder's config.json names are checked
/// against the ones the output declares ([`classify::check_folder_labels`]). Not found: why, naming the roles to
/// give.
pub(crate) fn detect(model: &Model, model_path: &Path, cfg: &DataConfig) -> Result<Detected> {
    match crate::inputs::roles::class_logits(model, &cfg.io_names, model_path) {
        Ok(output) => {
            classify::check_folder_labels(model, &output, cfg)?;
            Ok(Detected::Is(Task::of(ClassifyTask { output: ClassOutput::of(model, output) })))
        }
        Err(why) => Ok(Detected::Not(Some(why))),
    }
}

impl TaskRoom for ClassifyTask {
    fn name(&self) -> &'static str {
        "classification"
    }

    fn unit(&self) -> &'static str {
        "inputs"
    }

    fn default_cal_num(&self) -> usize {
        100
    }

    /// mse: each input's (or token's) logits count alone.
    fn integer_method(&self) -> calib::MethodKind {
        calib::MethodKind::Mse
    }

    fn shifted_output(&self) -> Option<&str> {
        (!self.output.name.is_empty()).then_some(self.output.name.as_str())
    }

    fn loader(&self) -> Option<Loader> {
        Some(Loader::Optimum { class: "ORTModelForSequenceClassification".to_owned() })
    }

    fn confirm_instead(&self) -> Option<&'static str> {
        Some("for a classifier `qdq tune` scores candidates in accuracy points")
    }

    /// Text lines, TSV or JSONL; a SQuAD `.json` is refused.
    fn calibration_feeds(
        &self,
        (model, model_path): (&Model, &Path),
        path: &Path,
        n: usize,
        _: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn Feeds>> {
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
            return Err(Error::Input {
                path: path.to_path_buf(),
                reason: format!(
                    "SQuAD JSON calibrates SQuAD and embedding models, and {} is a classifier: give .npz (arrays \
                     named after the model inputs), .npy (token ids), text lines, TSV or JSONL",
                    model_path.display()
                ),
            });
        }
        Ok(Box::new(InputSet::load(path, model, text, n)?))
    }

    fn eval_data(
        &self,
        (model, _): (&Model, &Path),
        dataset: &Path,
        n: usize,
        _: &DataConfig,
        text: &TextInputs,
    ) -> Result<Box<dyn TaskData>> {
        let output = &self.output;
        tracing::info!("no start / end logits: evaluating `{output}` as class logits, INT8 against FP32");
        let set = classify::load_inputs(dataset, model, text, n, &output.name)?;
        Ok(Box::new(ClassifyData { set, output: output.clone() }))
    }

    fn eval(&self, req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>> {
        classify::eval(&self.output, req, progress)
    }

    fn scoring(&self, req: &ScoringRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn TaskScoring>> {
        Ok(Box::new(classify::score::ClassifyScoring::of(&self.output, req, progress)?))
    }

    /// The file's last inputs, compared by their class logits.
    fn held_out(
        &self,
        fp32: (&Model, &Path),
        dataset: &Path,
        n: usize,
        session: SessionConfig,
        cfg: &DataConfig,
    ) -> Result<HeldOut> {
        classify::held::held_out(&self.output, fp32, dataset, n, session, cfg)
    }
}

/// A classifier's evaluation inputs and the class logits compared.
struct ClassifyData {
    set: InputSet,
    output: ClassOutput,
}

impl TaskData for ClassifyData {
    fn calibration_overlap(&self, _: &Path, cal_num: usize, same_file: bool) -> Option<usize> {
        rows_shared(&self.set, cal_num, same_file)
    }

    fn e2e(
        &self,
        run: &E2eRun<'_>,
        progress: &dyn Progress,
        phases: &mut std::collections::BTreeMap<String, f64>,
    ) -> Result<TaskResult> {
        let t = std::time::Instant::now();
        let c = classify::evaluate_classifier(run.fp32, run.int8, &self.set, &self.output, run.eval, progress)?;
        phases.insert("evaluation".to_owned(), t.elapsed().as_secs_f64());
        Ok(TaskResult::new(c))
    }

    fn profile(&self, model: &Path, session: &SessionConfig, batch: usize) -> Result<OpProfile> {
        profile_inputs(model, session, batch, &self.set, &self.output.name)
    }
}

#[typetag::serde(name = "classification")]
impl TaskOutcome for ClassifierEval {
    fn table(&self, labels: &TableLabels) -> String {
        classify::table(self, &labels.row)
    }
}
