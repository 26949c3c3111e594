//! The text of an e2e run: the FP32 vs INT8 table (printed and in report.md), report.md, and the command's report.

use std::fmt::{self, Write as _};
use std::path::PathBuf;

use crate::job::Report;
use crate::report::results::{CalibrationSummary, E2eResults, OVERLAP_EFFECT, QuantizationSummary};
use crate::settings::policy::Mode;
use crate::steps::ops::op_table;
use crate::steps::run::ep_label;
use crate::tasks::embed::report::embedding_table;
use crate::tasks::squad::data::Comparison;
use crate::tasks::squad::e2e::{ModelResult, OtherEp};

/// What `qdq e2e` did: the results (as results.json) and where everything went.
#[derive(Debug, Clone)]
pub struct E2eReport {
    pub results: E2eResults,
    pub out: PathBuf,
}

impl fmt::Display for E2eReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.results;
        if r.fp32.is_none() && r.int8.is_none() && r.classification.is_none() && r.embedding.is_none() {
            writeln!(f, "Quantized (no evaluation: --no-eval)")?;
        } else {
            writeln!(f, "{}", self.results.table())?;
        }
        write!(f, "Outputs written to {}", self.out.display())?;
        for line in crate::inputs::folder::loaders(&self.out, "model_qdq.onnx", &self.results.task) {
            write!(f, "\n{line}")?;
        }
        Ok(())
    }
}

impl Report for E2eReport {
    /// results.json's fields, with the schema (`qdq.e2e/1`) and the output directory.
    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.results).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("schema".into(), "qdq.e2e/1".into());
            m.insert("out".into(), serde_json::json!(self.out));
        }
        v
    }
}

/// What the table's rows of another EP (`--ep cpu,openvino`) do not show: each model there against the same model on
/// the first EP (paired dF1, answers the same, logits), and INT8's speed against FP32 there.
fn other_ep_note(o: &OtherEp) -> String {
    let label = o.int8.as_ref().map_or(o.ep.clone(), |r| ep_label(&r.ran.ep, r.ran.ep_precision.as_deref(), None));
    let logits = |l: &Option<crate::steps::speed::LogitsAgreement>| {
        l.map_or(String::new(), |l| format!("; logits differ by {}", l.describe()))
    };
    let mut text = format!(
        "\nOn {label} against {first}, the same models (paired): FP32 dF1 {} with {:.1} % of the answers the same{}; \
         the quantized model dF1 {} with {:.1} % the same{}.\n",
        o.fp32_vs_first.f1.describe(),
        100.0 * o.fp32_same_answers,
        logits(&o.fp32_logits),
        o.int8_vs_first.f1.describe(),
        100.0 * o.int8_same_answers,
        logits(&o.int8_logits),
        first = o.first_ep,
    );
    if let Some(line) = o.int8_vs_fp32.undecided(&format!("the quantized model on {label}"), "FP32") {
        text.push_str(&format!("{line}\n"));
    }
    if let Some(s) = &o.speedup {
        text.push_str(&format!(
            "On {label}, the quantized model runs at {} FP32's speed (in alternation).\n",
            s.describe()
        ));
    }
    if let Some(d) = &o.speedup_default_precision {
        text.push_str(&format!("{}\n", d.describe(&o.ep, "the quantized model")));
    }
    text
}

/// A policy's precision as the table's rows name it: `INT8`, `FP8 E4M3FN`, `FP8 E4M3FNUZ`.
pub(crate) fn precision_label(precision: &str) -> String {
    match precision.split_once('-') {
        Some((fp8, format)) => format!("{} {}", fp8.to_uppercase(), format.to_uppercase()),
        None => precision.to_uppercase(),
    }
}

/// One row of the SQuAD table: its name, the model's result, its comparison with FP32.
type SquadRow<'a> = (String, &'a Option<ModelResult>, Option<Comparison>);

impl E2eResults {
    /// The quantized model's row name: `INT8 (QDQ)`, `FP8 E4M3FN (QDQ)`, `INT8 (dynamic)`.
    fn quantized_label(&self) -> String {
        match self.quantization.mode {
            Mode::Dynamic => "INT8 (dynamic)".to_owned(),
            Mode::Static => format!("{} (QDQ)", precision_label(&self.quantization.precision)),
        }
    }

    /// The FP32 vs INT8 table, as printed and as in report.md: columns aligned, and valid Markdown; the task's own
    /// for a classifier or an embedding model.
    pub fn table(&self) -> String {
        let int8 = self.quantized_label();
        match (&self.classification, &self.embedding) {
            (Some(c), _) => crate::tasks::classify::table(c, &int8),
            (_, Some(e)) => embedding_table(e, &int8),
            _ => self.squad_table(&int8),
        }
    }

    /// The SQuAD table's rows (name, result, comparison with FP32) and how many of them are on the first EP: FP32,
    /// the main model, `--compare-methods`' and `--precision`'s others, then FP32 and the main model on each other EP.
    fn squad_rows(&self, int8: &str, main: &str) -> (Vec<SquadRow<'_>>, usize) {
        let mut rows = vec![("FP32".to_owned(), &self.fp32, None), (int8.to_owned(), &self.int8, self.int8_vs_fp32)];
        let method = self.calibration.as_ref().map(|c| c.method.as_str());
        let others = !(self.compared_methods.is_empty() && self.compared_precisions.is_empty());
        if let (Some(m), true) = (method, others) {
            rows[1].0 = format!("{main} (QDQ, {m})");
        }
        rows.extend(self.compared_methods.iter().map(|c| (format!("{main} (QDQ, {})", c.method), &c.int8, c.vs_fp32)));
        rows.extend(
            self.compared_precisions
                .iter()
                .map(|c| (format!("{} (QDQ, {})", precision_label(&c.precision), c.method), &c.result, c.vs_fp32)),
        );
        // --ep's others: the same two models on each, INT8 against FP32 on that EP (what these questions cannot
        // tell apart there is said in the EP's own note).
        let first_ep_rows = rows.len();
        for o in &self.other_eps {
            rows.push(("FP32".to_owned(), &o.fp32, None));
            rows.push((rows[1].0.clone(), &o.int8, Some(o.int8_vs_fp32)));
        }
        (rows, first_ep_rows)
    }

    /// A SQuAD model's table: EM, F1 and dF1 with its interval, speed and size, one row per model and EP.
    fn squad_table(&self, int8: &str) -> String {
        use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
        let main = precision_label(&self.quantization.precision);
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        let same = "answers = FP32 [95 %]";
        t.set_header([
            "model",
            "EP",
            "EM",
            "F1",
            "dF1 [95 %]",
            same,
            "ms/feature",
            "p50",
            "p90",
            "features/s",
            "size (MB)",
        ]);
        let (rows, first_ep_rows) = self.squad_rows(int8, &main);
        let mut undecided = Vec::new();
        for (i, (name, r, vs)) in rows.into_iter().enumerate() {
            let Some(r) = r else { continue };
            let d = match (&self.fp32, vs) {
                (_, Some(c)) => c.f1.describe(),
                (Some(f), None) if name != "FP32" => format!("{:+.2}", r.score.f1 - f.score.f1),
                _ => String::new(),
            };
            undecided.extend(vs.filter(|_| i < first_ep_rows).and_then(|c| c.undecided(&name, "FP32")));
            // No speed from an EP that is not timed (QNN's emulated HTP): "-".
            let timed = runtime::Ep::is_timed_name(&r.ran.ep);
            let speed = |v: f64, digits: usize| if timed { format!("{v:.digits$}") } else { "-".to_owned() };
            t.add_row([
                name,
                r.ran.label(),
                format!("{:.2}", r.score.exact_match),
                format!("{:.2}", r.score.f1),
                d,
                vs.map_or(String::new(), |c| c.same_answers.describe()),
                speed(r.latency.ms_per_feature, 2),
                speed(r.latency.p50_ms_per_feature, 2),
                speed(r.latency.p90_ms_per_feature, 2),
                speed(r.latency.features_per_second, 1),
                format!("{:.1}", r.ran.model_bytes as f64 / 1e6),
            ]);
        }
        for c in t.column_iter_mut().skip(2) {
            c.set_cell_alignment(CellAlignment::Right);
        }
        self.notes(format!("{t}\n"), undecided)
    }

    /// Where the run's FP8 models were evaluated, said for the note under the table (`None` without one): ONNX
    /// Runtime's CPU EP executes the pairs as ONNX defines them, another EP as it computes them.
    fn float8_ran_on(&self) -> Option<String> {
        let main = self.quantization.precision.starts_with("fp8").then_some(self.int8.as_ref()).flatten();
        let compared = self.compared_precisions.iter().filter(|c| c.precision.starts_with("fp8"));
        let mut eps: Vec<String> =
            main.into_iter().chain(compared.filter_map(|c| c.result.as_ref())).map(|r| r.ran.label()).collect();
        eps.dedup();
        match eps.as_slice() {
            [] => None,
            [cpu] if cpu == "cpu" || cpu.starts_with("cpu (") => Some(
                "ONNX Runtime's CPU EP, which executes its pairs as ONNX defines them (at its basic optimisation level)"
                    .into(),
            ),
            many => Some(many.join(", ")),
        }
    }

    /// The table's `text` and what is said under it: what the interval is, which differences these questions cannot
    /// tell from none (`undecided`), the speed against FP32.
    fn notes(&self, mut text: String, undecided: Vec<String>) -> String {
        if let Some(c) = &self.int8_vs_fp32 {
            text.push_str(&format!(
                "\ndF1 [95 %]: F1 minus FP32's, with the 95 % interval of that difference over these {} questions \
                 (paired: each question's F1 against FP32's; it is as wide as which answers happen to flip). answers = \
                 FP32: the questions answered with FP32's very text, the fidelity measure these questions resolve \
                 where F1 cannot.\n",
                c.f1.questions
            ));
        }
        for line in undecided {
            text.push_str(&format!("{line}\n"));
        }
        for o in &self.other_eps {
            text.push_str(&other_ep_note(o));
        }
        if let Some(ran_on) = self.float8_ran_on() {
            text.push_str(&format!(
                "\nFP8 ran on {ran_on}: its accuracy is the model's (a GPU's FP8 kernels accumulate in their own order), \
                 its speed here says nothing of a GPU's. FP8 speed needs a Hopper / Ada GPU (TensorRT) or an MI300 \
                 (MIGraphX) and was not measured.\n",
            ));
        }
        if let Some(s) = &self.speedup {
            let main = match self.quantization.mode {
                Mode::Dynamic => "INT8".to_owned(),
                Mode::Static => precision_label(&self.quantization.precision),
            };
            text.push_str(&format!(
                "\n{main} runs at {} FP32's speed: both models run the same {} features in turn, {} rounds (median, \
                 slowest-fastest round); the ms/feature columns are single passes minutes apart.\n",
                s.describe(),
                s.features,
                s.rounds
            ));
            if let Some(d) = &self.speedup_default_precision {
                let ep = self.int8.as_ref().map_or("the EP", |r| r.ran.ep.as_str());
                text.push_str(&format!("{}\n", d.describe(ep, &main)));
            }
        }
        text
    }

    /// report.md: the table plus how the numbers were made.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# qdq e2e report\n");
        let _ = writeln!(md, "Dataset: `{}` (task: {})\n", self.dataset, self.task);
        md.push_str(&self.table());
        if let Some(p) = &self.op_profile {
            let _ = writeln!(md, "\n## Where the time goes\n");
            md.push_str(&op_table(&[("FP32", &p.fp32), ("INT8", &p.int8)]));
        }
        let _ = writeln!(md, "\n## Calibration\n");
        let unit = match self.task.as_str() {
            "squad" => "questions",
            "embedding" => "texts",
            _ => "inputs",
        };
        match &self.calibration {
            Some(c) => calibration_section(&mut md, c, unit),
            None => {
                let _ = writeln!(md, "- none: dynamic mode quantizes each MatMul input at run time");
            }
        }
        let _ = writeln!(md, "\n## Quantization\n");
        quantization_section(&mut md, &self.quantization);
        md
    }
}

/// report.md's calibration list.
fn calibration_section(md: &mut String, c: &CalibrationSummary, unit: &str) {
    let _ = writeln!(
        md,
        "- data: `{}` ({} {unit}, {} features)\n- method: {}\n- tensors calibrated: {}\n- time: {:.1} s{}",
        c.data,
        c.questions,
        c.features,
        c.method,
        c.tensors,
        c.seconds,
        c.pass.map(|p| format!(" ({})", p.describe())).unwrap_or_default()
    );
    if !c.non_finite_tensors.is_empty() {
        let _ = writeln!(md, "- tensors with NaN/Inf values (excluded): {}", c.non_finite_tensors.join(", "));
    }
    if let Some(n) = c.also_evaluated.filter(|&n| n > 0) {
        let _ = writeln!(md, "- {n} of the calibration {unit} are also evaluated: {OVERLAP_EFFECT}");
    }
}

/// report.md's quantization list.
fn quantization_section(md: &mut String, q: &QuantizationSummary) {
    let _ = writeln!(
        md,
        "- mode: {}\n- policy: {} (chosen by {})\n- quantized tensors: {}\n- int8 embedding tables: {}\n- \
         QuantizeLinear nodes: {}, DequantizeLinear nodes: {}",
        q.mode,
        q.policy,
        q.policy_chosen_by,
        q.quantized_tensors,
        q.embedding_tables,
        q.quantize_nodes,
        q.dequantize_nodes
    );
    if let Some(s) = &q.smoothing {
        let _ = writeln!(md, "- smoothing: {s}");
    }
    for line in &q.integer_forms {
        let _ = writeln!(md, "- {line}");
    }
    if !q.float_matmul_like.is_empty() {
        let _ = writeln!(md, "- MatMul-like nodes left in float ({}):", q.float_matmul_like.len());
        for n in &q.float_matmul_like {
            let _ = writeln!(md, "  - {n}");
        }
    }
    if !q.skipped.is_empty() {
        let _ = writeln!(md, "- skipped ({}):", q.skipped.len());
        for s in &q.skipped {
            let _ = writeln!(md, "  - {s}");
        }
    }
}
