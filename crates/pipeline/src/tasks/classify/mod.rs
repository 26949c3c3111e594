//! Evaluation of a model that is not a SQuAD model (a BERT classifier, or any model with class logits): the INT8
//! model against FP32 on the same inputs (top-1 agreement, KL of the softmax, largest logit difference per input),
//! and each model's accuracy when the inputs are labelled.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::inputs::feeds::Feeds as _;
use crate::inputs::files::{InputSet, TextInputs};
use crate::job::Report;
use crate::progress::Progress;
use crate::steps::run::{EvalOptions, Latency};
use crate::tasks::default_float::{self, DefaultFloat, Which};
use crate::tasks::{EvalRequest, RanOn, Side};

pub mod held;
pub mod room;
pub mod score;

/// One model's side of a classifier evaluation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassifierModel {
    #[serde(flatten)]
    pub ran: RanOn,
    /// Share of labelled inputs whose argmax is the label (`None` without labels).
    pub accuracy: Option<f64>,
    pub latency: Latency,
}

/// How the INT8 logits agree with FP32's, over every input (every row of the logits' last axis).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Agreement {
    /// Rows compared: inputs, or with `per_token` the tokens the attention mask keeps.
    pub inputs: usize,
    /// Per-token logits (`[batch, seq, classes]`, a token-classification head): one row per unmasked token.
    #[serde(default)]
    pub per_token: bool,
    /// The output compared and its class count (last axis).
    pub output: String,
    pub classes: usize,
    /// Share of rows with the same argmax.
    pub top1: f64,
    /// Its 95 % interval (Wilson's, over the rows compared).
    #[serde(default)]
    pub top1_interval: [f64; 2],
    /// Mean and largest KL(softmax(FP32) ‖ softmax(INT8)) per row, in nats.
    pub mean_kl: f64,
    pub max_kl: f64,
    /// Largest |logit difference|.
    pub max_abs_diff: f64,
}

/// Both models and their agreement (results.json `classification`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassifierEval {
    /// The inputs evaluated on.
    pub data: String,
    pub fp32: ClassifierModel,
    pub int8: ClassifierModel,
    pub agreement: Agreement,
    /// With labels: INT8's accuracy minus FP32's in points, paired input by input (each input right or wrong for
    /// both), with its 95 % interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy_difference: Option<squad_metrics::PairedDifference>,
    /// With labels: per class, its inputs and how many of them each model gets right.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_class: Vec<ClassCount>,
    /// A regression head (one output, STS-B's similarity): INT8's values against FP32's, and each model's against the
    /// labelled scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression: Option<Regression>,
    /// Both models again with their float parts at the EP's own default precision, where that is not the run's: the
    /// FP32 its users run, with its logits against FP32's at the run's precision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_float: Option<DefaultFloat<ClassifierAt>>,
}

/// A regression head's values: INT8 against FP32 (Pearson's r, largest difference), and each against the scores the
/// inputs are labelled with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Regression {
    pub inputs: usize,
    /// Pearson's r of INT8's values against FP32's.
    pub r_int8_fp32: f64,
    pub max_abs_diff: f64,
    /// Pearson's r of each model's values against the labelled scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r_fp32_scores: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r_int8_scores: Option<f64>,
}

/// Pearson's correlation of `a` and `b` (NaN without spread).
fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len()) as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        ab += (x - ma) * (y - mb);
        aa += (x - ma).powi(2);
        bb += (y - mb).powi(2);
    }
    ab / (aa * bb).sqrt()
}

/// The regression measures of one-output rows (`None` for class logits or per-token rows).
fn regression(fp32: &[Vec<f32>], int8: &[Vec<f32>], scores: Option<&[f64]>) -> Option<Regression> {
    if fp32.first().map(Vec::len) != Some(1) {
        return None;
    }
    let values = |rows: &[Vec<f32>]| rows.iter().map(|r| f64::from(r[0])).collect::<Vec<f64>>();
    let (a, b) = (values(fp32), values(int8));
    let scores = scores.filter(|s| s.len() == a.len());
    Some(Regression {
        inputs: a.len(),
        r_int8_fp32: pearson(&b, &a),
        max_abs_diff: a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max),
        r_fp32_scores: scores.map(|s| pearson(&a, s)),
        r_int8_scores: scores.map(|s| pearson(&b, s)),
    })
}

/// One labelled class: its inputs, and how many of them FP32 and INT8 classify right.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassCount {
    pub class: i64,
    /// Its name in the model's config.json (`entailment`), when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub inputs: usize,
    pub fp32_right: usize,
    pub int8_right: usize,
}

/// A model at the EP's default float precision: its side, and its logits against FP32's at the run's precision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassifierAt {
    #[serde(flatten)]
    pub model: ClassifierModel,
    pub agreement: Agreement,
}

/// The output a classifier is measured by, and how its values are read: a Softmax's probabilities
/// ([`model_io::roles::class_probabilities`]) as their logarithms, the logits less one constant per input, so that KL,
/// the class and an output's shift mean for them what they mean for logits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClassOutput {
    pub name: String,
    pub probabilities: bool,
}

impl ClassOutput {
    /// Output `name` of `model`.
    pub(crate) fn of(model: &onnx_ir::Model, name: String) -> ClassOutput {
        let probabilities = model_io::roles::class_probabilities(model.graph(), &name);
        ClassOutput { name, probabilities }
    }

    /// One row of the output's values, as logits.
    pub(crate) fn row(&self, values: &[f32]) -> Vec<f32> {
        match self.probabilities {
            true => values.iter().copied().map(model_io::roles::probability_logit).collect(),
            false => values.to_vec(),
        }
    }
}

impl std::fmt::Display for ClassOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// Logits rows (last axis) of `model` on every input of `set`, with the per-batch timings. Per-token logits
/// (`[batch, seq, classes]` over a `[batch, seq]` mask, a token-classification head) give one row per position the
/// mask keeps, and `true`: padding is not compared.
pub(crate) fn run_logits(
    model: &std::path::Path,
    name: &str,
    set: &InputSet,
    output: &ClassOutput,
    opts: &EvalOptions,
    stage: &str,
    progress: &dyn Progress,
) -> Result<(Vec<Vec<f32>>, Latency, RanOn, bool)> {
    let (class_output, output) = (output, output.name.as_str());
    let mut session = crate::model::open_session(runtime::ModelSource::File(model), name, &opts.session)?;
    if let Some(why) = session.fallback() {
        progress.warn(why);
    }
    let batch = opts.batch.max(1);
    if opts.warmup > 0 {
        let first = set.batch(0..batch.min(set.len()));
        let feeds: Vec<(&str, ndarray::ArrayView2<i64>)> = first.iter().map(|(n, a)| (n.as_str(), a.view())).collect();
        for _ in 0..opts.warmup {
            session.run_with(&feeds, &[output], |_| Ok::<_, Error>(()))?;
        }
    }
    progress.start(stage, Some(set.len() as u64), "inputs");
    let (mut rows, mut timings, mut per_token) = (Vec::with_capacity(set.len()), vec![], false);
    set.each_batch(batch, &mut |feeds, _, n| {
        let n = n as usize;
        let t0 = Instant::now();
        session.run_with(feeds, &[output], |outs| -> Result<()> {
            timings.push((t0.elapsed().as_secs_f64(), n));
            let o = &outs[0];
            let classes = o.shape.last().copied().unwrap_or(0);
            if o.shape.first() != Some(&n) || classes == 0 || o.data.len() % classes != 0 {
                return Err(runtime::Error::BadOutput {
                    model: name.to_owned(),
                    output: output.to_owned(),
                    reason: format!("expected [batch {n}, ..., classes] logits, got {:?}", o.shape),
                }
                .into());
            }
            let mask = feeds.iter().find(|(name, _)| Some(*name) == set.mask()).map(|(_, m)| m);
            match mask.filter(|m| o.shape.len() == 3 && m.dim() == (n, o.shape[1])) {
                Some(mask) => {
                    per_token = true;
                    let kept = o.data.chunks(classes).zip(mask.iter()).filter(|(_, m)| **m != 0);
                    rows.extend(kept.map(|(row, _)| class_output.row(row)));
                }
                None => rows.extend(o.data.chunks(classes).map(|row| class_output.row(row))),
            }
            Ok(())
        })?;
        progress.advance(n as u64);
        Ok(())
    })?;
    progress.finish();
    Ok((rows, Latency::from_batches(&timings), RanOn::of(&session, name, model), per_token))
}

/// Per input, 1 where the row's argmax is its label, else 0 (`None` without labels, or when rows are not one per
/// input: a token classifier's).
pub(crate) fn right(rows: &[Vec<f32>], labels: Option<&[i64]>) -> Option<Vec<f64>> {
    let labels = labels?;
    if labels.is_empty() || rows.len() != labels.len() {
        return None;
    }
    let hit = |(r, l): (&Vec<f32>, &i64)| f64::from(u8::from(calib::argmax(r, &[]).map(|a| a as i64) == Some(*l)));
    Some(rows.iter().zip(labels).map(hit).collect())
}

/// Share of rows whose argmax is the label (labels are per input; rows per input may be several).
fn accuracy(rows: &[Vec<f32>], labels: Option<&[i64]>) -> Option<f64> {
    let right = right(rows, labels)?;
    Some(right.iter().sum::<f64>() / right.len() as f64)
}

/// Per labelled class, its inputs and each model's right ones.
fn per_class(fp32: &[f64], int8: &[f64], labels: &[i64], names: &BTreeMap<i64, String>) -> Vec<ClassCount> {
    let mut counts: BTreeMap<i64, ClassCount> = BTreeMap::new();
    for ((&class, a), b) in labels.iter().zip(fp32).zip(int8) {
        let c = counts.entry(class).or_insert_with(|| ClassCount {
            class,
            name: names.get(&class).cloned(),
            inputs: 0,
            fp32_right: 0,
            int8_right: 0,
        });
        c.inputs += 1;
        c.fp32_right += usize::from(*a > 0.5);
        c.int8_right += usize::from(*b > 0.5);
    }
    counts.into_values().collect()
}

/// The classes `model`'s output `output` declares (its last dimension), when the graph fixes it.
pub(crate) fn declared_classes(model: &onnx_ir::Model, output: &str) -> Option<usize> {
    let o = model.graph().output.iter().find(|o| o.name() == output)?;
    let last = onnx_ir::declared_dims(o)?.last()?.clone().ok()?;
    usize::try_from(last).ok().filter(|c| *c > 0)
}

/// The classes the model's folder names (config.json's `id2label`, else `num_labels`) against the ones its output
/// `output` declares: a config.json of another model (5 labels beside 2 logits) is an error naming it, before
/// anything is run or carried into the outputs.
pub(crate) fn check_folder_labels(
    model: &onnx_ir::Model,
    output: &str,
    cfg: &crate::inputs::config::DataConfig,
) -> Result<()> {
    let (Some(labels), Some(classes)) = (cfg.folder.labels, declared_classes(model, output)) else { return Ok(()) };
    if labels == classes {
        return Ok(());
    }
    Err(Error::Input {
        path: cfg.folder.folder.join("config.json"),
        reason: format!(
            "names {labels} classes (id2label / num_labels), but the model's output `{output}` has {classes}: this \
             config.json is not the model's"
        ),
    })
}

/// Loads the inputs of a classifier ([`InputSet::load`]), their labels checked against the classes its output
/// declares, before any inference (a model that leaves the number open has them checked against its first logits).
pub(crate) fn load_inputs(
    path: &std::path::Path,
    model: &onnx_ir::Model,
    text: &TextInputs,
    first: usize,
    output: &str,
) -> Result<InputSet> {
    let set = InputSet::load(path, model, text, first)?;
    if let Some(classes) = declared_classes(model, output) {
        set.check_labels(classes, output)?;
    }
    Ok(set)
}

/// Top-1 agreement, KL and largest difference of two models' logits rows (`per_token`: rows are unmasked tokens).
pub fn agreement(fp32: &[Vec<f32>], int8: &[Vec<f32>], output: &str, per_token: bool) -> Agreement {
    let (mut same, mut kl_sum, mut kl_max, mut diff) = (0usize, 0f64, 0f64, 0f64);
    for (a, b) in fp32.iter().zip(int8) {
        same += usize::from(calib::argmax(a, &[]) == calib::argmax(b, &[]));
        let kl = calib::softmax_kl(a, b, &[]);
        kl_sum += kl;
        kl_max = kl_max.max(kl);
        diff = a.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).fold(diff, f64::max);
    }
    let n = fp32.len().min(int8.len()).max(1) as f64;
    let interval = squad_metrics::Proportion::of(same, fp32.len().min(int8.len()));
    Agreement {
        top1_interval: [interval.low, interval.high],
        inputs: fp32.len(),
        per_token,
        output: output.to_owned(),
        classes: fp32.first().map_or(0, Vec::len),
        top1: same as f64 / n,
        mean_kl: kl_sum / n,
        max_kl: kl_max,
        max_abs_diff: diff,
    }
}

/// Runs both models on `set` and compares them; again at their EP's own default float precision, where that is not
/// the sessions' ([`default_float::measure`]).
pub fn evaluate_classifier(
    fp32: Side,
    int8: Side,
    set: &InputSet,
    output: &ClassOutput,
    opts: &EvalOptions,
    progress: &dyn Progress,
) -> Result<ClassifierEval> {
    let run = |side: &Side, stage: &str| -> Result<(ClassifierModel, Vec<Vec<f32>>, bool)> {
        let o = EvalOptions { session: side.session.clone(), ..opts.clone() };
        let name = side.path.display().to_string();
        let (rows, latency, on, per_token) = run_logits(side.path, &name, set, output, &o, stage, progress)?;
        if !per_token && let Some(classes) = rows.first().map(Vec::len) {
            set.check_labels(classes, &output.name)?;
        }
        let classes = set.labels.as_deref().filter(|_| rows.first().map(Vec::len) != Some(1));
        let accuracy = accuracy(&rows, classes);
        let model = ClassifierModel { ran: on, accuracy, latency };
        Ok((model, rows, per_token))
    };
    let (fp32_model, fp32_rows, per_token) = run(&fp32, "FP32")?;
    let (int8_model, int8_rows, _) = run(&int8, "INT8")?;
    let agreed = agreement(&fp32_rows, &int8_rows, &output.name, per_token);
    let eval = |which: Which, session: &runtime::SessionConfig| -> Result<ClassifierAt> {
        let (path, label) = match which {
            Which::Fp32 => (fp32.path, "FP32"),
            Which::Int8 => (int8.path, "INT8"),
        };
        let stage = format!("{label} at {}", session.ep.float_precision().unwrap_or("default"));
        let (model, rows, _) = run(&Side { path, session }, &stage)?;
        Ok(ClassifierAt { model, agreement: agreement(&fp32_rows, &rows, &output.name, per_token) })
    };
    let default_float = default_float::measure(opts, (fp32.session, int8.session), eval, |_, _| Ok(None), progress);
    let regression = if per_token { None } else { regression(&fp32_rows, &int8_rows, set.scores.as_deref()) };
    // A regression head's labels are scores, not classes.
    let labels = set.labels.as_deref().filter(|_| regression.is_none());
    let (a, b) = (right(&fp32_rows, labels), right(&int8_rows, labels));
    let (accuracy_difference, per_class) = match (a, b, labels) {
        (Some(a), Some(b), Some(l)) => {
            (Some(squad_metrics::paired_difference(&b, &a)), per_class(&a, &b, l, &set.label_names))
        }
        _ => (None, vec![]),
    };
    Ok(ClassifierEval {
        data: set.path().display().to_string(),
        fp32: fp32_model,
        int8: int8_model,
        agreement: agreed,
        accuracy_difference,
        per_class,
        regression,
        default_float,
    })
}

/// A classifier's FP32 vs INT8 table: accuracy (with labels), agreement with FP32, latency and size.
pub fn table(c: &ClassifierEval, int8: &str) -> String {
    use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header(["model", "EP", "accuracy", "top-1 = FP32", "mean KL", "max logit diff", "ms/input", "size (MB)"]);
    let a = &c.agreement;
    let mut rows = vec![("FP32", &c.fp32, None), (int8, &c.int8, Some(a))];
    if let Some(d) = &c.default_float {
        // The rows at the EP's own default float precision, each against FP32 at the run's.
        for (name, at) in [("FP32", &d.fp32), (int8, &d.int8)] {
            rows.extend(at.as_ref().map(|at| (name, &at.model, Some(&at.agreement))));
        }
    }
    for (name, m, same) in rows {
        let pct = |v: f64| format!("{:.2} %", 100.0 * v);
        t.add_row([
            name.to_owned(),
            m.ran.label(),
            m.accuracy.map_or("-".to_owned(), pct),
            same.map_or(String::new(), |a| {
                format!("{} [{:.2}, {:.2}]", pct(a.top1), 100.0 * a.top1_interval[0], 100.0 * a.top1_interval[1])
            }),
            same.map_or(String::new(), |a| format!("{:.2e}", a.mean_kl)),
            same.map_or(String::new(), |a| format!("{:.4}", a.max_abs_diff)),
            format!("{:.2}", m.latency.ms_per_feature),
            format!("{:.1}", m.ran.model_bytes as f64 / 1e6),
        ]);
    }
    for col in t.column_iter_mut().skip(2) {
        col.set_cell_alignment(CellAlignment::Right);
    }
    let rows = if a.per_token { "tokens (padding left out)" } else { "inputs" };
    let mut text = format!("{t}\n{} {rows}, output `{}` ({} classes)\n", a.inputs, a.output, a.classes);
    text.push_str(&accuracy_lines(c, int8));
    if let Some(d) = &c.default_float {
        let run = c.fp32.ran.ep_precision.as_deref().unwrap_or("the run's precision");
        text.push_str(&format!(
            "The rows at {} are {}'s own default float precision here (the FP32 its users run), each against FP32's \
             logits at {run}.\n",
            d.name(),
            c.int8.ran.ep
        ));
        if let Some(e) = &d.error {
            text.push_str(&format!("Not measured at {}: {e}.\n", d.precision));
        }
    }
    text
}

/// The accuracy difference with its interval and, per class, each model's right inputs (nothing without labels); a
/// regression head's correlations.
fn accuracy_lines(c: &ClassifierEval, int8: &str) -> String {
    if let Some(r) = &c.regression {
        let mut text = format!(
            "One output (a regression head): {int8} against FP32 Pearson r {:.5}, largest difference {:.4}",
            r.r_int8_fp32, r.max_abs_diff
        );
        if let (Some(f), Some(i)) = (r.r_fp32_scores, r.r_int8_scores) {
            text.push_str(&format!("; against the labelled scores r {f:.4} (FP32) and {i:.4} ({int8})"));
        }
        return text + ".\n";
    }
    let Some(d) = &c.accuracy_difference else { return String::new() };
    let verdict = if d.excludes(0.0) { "" } else { ": these inputs cannot tell the two apart" };
    let mut text = format!(
        "Accuracy, {int8} minus FP32: {} points [95 %, paired over the {} labelled inputs]{verdict}.\n",
        d.describe(),
        d.questions
    );
    if c.per_class.len() > 1 {
        let each: Vec<String> = c
            .per_class
            .iter()
            .map(|k| {
                let class =
                    k.name.as_ref().map_or_else(|| format!("class {}", k.class), |n| format!("{n} ({})", k.class));
                format!("{class}: {} inputs, FP32 {} right, {int8} {}", k.inputs, k.fp32_right, k.int8_right)
            })
            .collect();
        text.push_str(&format!("Per class: {}.\n", each.join("; ")));
    }
    text
}

/// A classifier on the inputs of `req` against its `--baseline` (as the quantized model against FP32 in `qdq e2e`):
/// agreement of the class logits (`output`), and accuracy where the inputs carry labels.
pub(crate) fn eval(output: &ClassOutput, req: EvalRequest<'_>, progress: &dyn Progress) -> Result<Box<dyn Report>> {
    let Some(baseline) = &req.baseline else {
        return Err(Error::Usage(format!(
            "{}: a classifier (class logits `{output}`) is measured against its baseline: give --baseline <FP32 \
             model>; eval then reports the agreement of the two models' logits, and accuracy where {} has labels",
            req.model.display(),
            req.dataset.display()
        )));
    };
    req.one_ep_only("a classifier")?;
    let (model, graph) = (req.model, req.graph);
    let text = TextInputs::for_model(graph, model, &req.data);
    let set = load_inputs(req.dataset, graph, &text, req.samples, &output.name)?;
    let opts = EvalOptions { workers: 1, ..req.opts.clone() };
    let (b, m) = (Side { path: baseline, session: &opts.session }, Side { path: model, session: &opts.session });
    let comparison = evaluate_classifier(b, m, &set, output, &opts, progress)?;
    Ok(Box::new(ClassifierEvalReport { model: model.to_path_buf(), baseline: baseline.clone(), comparison }))
}

/// A classifier against `--baseline`: the baseline as FP32, the model as the quantized side.
#[derive(Debug, Clone)]
pub struct ClassifierEvalReport {
    pub model: PathBuf,
    pub baseline: PathBuf,
    pub comparison: ClassifierEval,
}

impl Report for ClassifierEvalReport {
    /// The document `qdq eval --json` prints for a classifier.
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "schema": "qdq.eval/1",
            "task": "classification",
            "model": self.model,
            "baseline": self.baseline,
            "vs_baseline": self.comparison,
        })
    }
}

impl std::fmt::Display for ClassifierEvalReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", table(&self.comparison, "model").trim_end())?;
        write!(f, "\nbaseline (the FP32 row): {}", self.baseline.display())
    }
}
