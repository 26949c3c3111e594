//! A SQuAD model's e2e table: EM, F1 and dF1 with its interval, the answers FP32 gives, speed and size, one row per
//! model and EP, and what is said under it.

use crate::steps::run::ep_label;
use crate::tasks::squad::data::Comparison;
use crate::tasks::squad::e2e::{ModelResult, OtherEp, SquadE2e};
use crate::tasks::{TableLabels, precision_label};

/// One row of the table: its name, the model's result, its comparison with FP32.
type SquadRow<'a> = (String, Option<&'a ModelResult>, Option<Comparison>);

/// The SQuAD table's rows (name, result, comparison with FP32) and how many of them are on the first EP: FP32,
/// the main model, `--compare-methods`' and `--precision`'s others, then FP32 and the main model on each other EP.
fn squad_rows<'a>(r: &'a SquadE2e, l: &TableLabels) -> (Vec<SquadRow<'a>>, usize) {
    let main = &l.precision;
    let mut rows = vec![("FP32".to_owned(), Some(&r.fp32), None), (l.row.clone(), Some(&r.int8), Some(r.int8_vs_fp32))];
    let method = l.method.as_deref();
    let others = !(r.compared_methods.is_empty() && r.compared_precisions.is_empty());
    if let (Some(m), true) = (method, others) {
        rows[1].0 = format!("{main} (QDQ, {m})");
    }
    rows.extend(
        r.compared_methods.iter().map(|c| (format!("{main} (QDQ, {})", c.method), Some(&c.int8), Some(c.vs_fp32))),
    );
    rows.extend(
        r.compared_precisions.iter().map(|c| {
            (format!("{} (QDQ, {})", precision_label(&c.precision), c.method), Some(&c.result), Some(c.vs_fp32))
        }),
    );
    // --ep's others: the same two models on each, INT8 against FP32 on that EP (what these questions cannot
    // tell apart there is said in the EP's own note).
    let first_ep_rows = rows.len();
    for o in &r.other_eps {
        rows.push(("FP32".to_owned(), o.fp32.as_ref(), None));
        rows.push((rows[1].0.clone(), o.int8.as_ref(), Some(o.int8_vs_fp32)));
    }
    (rows, first_ep_rows)
}

/// A SQuAD model's table: EM, F1 and dF1 with its interval, speed and size, one row per model and EP.
pub(crate) fn table(res: &SquadE2e, l: &TableLabels) -> String {
    use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
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
    let (rows, first_ep_rows) = squad_rows(res, l);
    let mut undecided = Vec::new();
    for (i, (name, r, vs)) in rows.into_iter().enumerate() {
        let Some(r) = r else { continue };
        let d = vs.map_or(String::new(), |c| c.f1.describe());
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
    notes(res, l, format!("{t}\n"), undecided)
}

/// Where the run's FP8 models were evaluated, said for the note under the table (`None` without one): ONNX
/// Runtime's CPU EP executes the pairs as ONNX defines them, another EP as it computes them.
fn float8_ran_on(r: &SquadE2e, l: &TableLabels) -> Option<String> {
    let main = l.pairs.starts_with("fp8").then_some(&r.int8);
    let compared = r.compared_precisions.iter().filter(|c| c.precision.starts_with("fp8"));
    let mut eps: Vec<String> = main.into_iter().chain(compared.map(|c| &c.result)).map(|r| r.ran.label()).collect();
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
fn notes(r: &SquadE2e, l: &TableLabels, mut text: String, undecided: Vec<String>) -> String {
    text.push_str(&format!(
        "\ndF1 [95 %]: F1 minus FP32's, with the 95 % interval of that difference over these {} questions (paired: \
         each question's F1 against FP32's; it is as wide as which answers happen to flip). answers = FP32: the \
         questions answered with FP32's very text, the fidelity measure these questions resolve where F1 cannot.\n",
        r.int8_vs_fp32.f1.questions
    ));
    for line in undecided {
        text.push_str(&format!("{line}\n"));
    }
    for o in &r.other_eps {
        text.push_str(&other_ep_note(o));
    }
    if let Some(ran_on) = float8_ran_on(r, l) {
        text.push_str(&format!(
            "\nFP8 ran on {ran_on}: its accuracy is the model's (a GPU's FP8 kernels accumulate in their own order), \
             its speed here says nothing of a GPU's. FP8 speed needs a Hopper / Ada GPU (TensorRT) or an MI300 \
             (MIGraphX) and was not measured.\n",
        ));
    }
    if let Some(s) = &r.speedup {
        let main = &l.precision;
        text.push_str(&format!(
            "\n{main} runs at {} FP32's speed: both models run the same {} features in turn, {} rounds (median, \
             slowest-fastest round); the ms/feature columns are single passes minutes apart.\n",
            s.describe(),
            s.features,
            s.rounds
        ));
        if let Some(d) = &r.speedup_default_precision {
            text.push_str(&format!("{}\n", d.describe(&r.int8.ran.ep, main)));
        }
    }
    text
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
