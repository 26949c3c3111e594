//! A SQuAD model's e2e table: EM, F1 and dF1 with its interval, the answers FP32 gives, speed and size, one row per
//! model and EP, and what is said under it.

use crate::steps::run::ep_label;
use crate::steps::speed::Speedup;
use crate::tasks::default_float::DefaultFloat;
use crate::tasks::squad::data::Comparison;
use crate::tasks::squad::e2e::{ModelResult, OtherEp, SquadAt, SquadE2e};
use crate::tasks::{TableLabels, precision_label};

/// One row of the table: its name, the model's result, its comparison with FP32, its speed against the FP32 of its
/// group (the same EP and float precision; empty where not timed).
type SquadRow<'a> = (String, Option<&'a ModelResult>, Option<Comparison>, String);

/// The speed cells of a group's FP32 and quantized rows: `1.00x` and the quantized model's speed-up, when timed.
fn speed_cells(s: Option<&Speedup>) -> (String, String) {
    s.map_or((String::new(), String::new()), |s| ("1.00x".to_owned(), s.describe()))
}

/// The SQuAD table's rows (name, result, comparison with FP32, speed) and how many of them are on the first EP:
/// FP32, the main model, `--compare-methods`' and `--precision`'s others, FP32 and the main model at the EP's own
/// default float precision, then FP32 and the main model on each other EP.
fn squad_rows<'a>(r: &'a SquadE2e, l: &TableLabels) -> (Vec<SquadRow<'a>>, usize) {
    let main = &l.precision;
    let (fp32_speed, int8_speed) = speed_cells(r.speedup.as_ref());
    let mut rows = vec![
        ("FP32".to_owned(), Some(&r.fp32), None, fp32_speed),
        (l.row.clone(), Some(&r.int8), Some(r.int8_vs_fp32), int8_speed),
    ];
    let method = l.method.as_deref();
    let others = !(r.compared_methods.is_empty() && r.compared_precisions.is_empty());
    if let (Some(m), true) = (method, others) {
        rows[1].0 = format!("{main} (QDQ, {m})");
    }
    rows.extend(
        r.compared_methods
            .iter()
            .map(|c| (format!("{main} (QDQ, {})", c.method), Some(&c.int8), Some(c.vs_fp32), String::new())),
    );
    rows.extend(r.compared_precisions.iter().map(|c| {
        let name = format!("{} (QDQ, {})", precision_label(&c.precision), c.method);
        (name, Some(&c.result), Some(c.vs_fp32), String::new())
    }));
    let at_default = r.speedup_default_precision.as_ref().and_then(|s| s.speedup.as_ref());
    let name = rows[1].0.clone();
    rows.extend(default_float_rows(r.default_float.as_ref(), at_default, &name));
    // --ep's others: the same two models on each, INT8 against FP32 on that EP (what these questions cannot
    // tell apart there is said in the EP's own note).
    let first_ep_rows = rows.len();
    for o in &r.other_eps {
        let (fp32_speed, int8_speed) = speed_cells(o.speedup.as_ref());
        let name = rows[1].0.clone();
        rows.push(("FP32".to_owned(), o.fp32.as_ref(), None, fp32_speed));
        rows.push((name.clone(), o.int8.as_ref(), Some(o.int8_vs_fp32), int8_speed));
        let at_default = o.speedup_default_precision.as_ref().and_then(|s| s.speedup.as_ref());
        rows.extend(default_float_rows(o.default_float.as_ref(), at_default, &name));
    }
    (rows, first_ep_rows)
}

/// The rows at an EP's own default float precision: FP32 there and the quantized model (`name`), each against FP32's
/// answers at the run's precision, their speed against FP32 at that precision (`speed`: the quantized model's).
fn default_float_rows<'a>(
    d: Option<&'a DefaultFloat<SquadAt>>,
    speed: Option<&Speedup>,
    name: &str,
) -> Vec<SquadRow<'a>> {
    let Some(d) = d else { return vec![] };
    let (fp32_speed, int8_speed) = speed_cells(speed);
    let mut rows = vec![];
    if let Some(m) = &d.fp32 {
        rows.push(("FP32".to_owned(), Some(&m.result), Some(m.vs_fp32), fp32_speed));
    }
    if let Some(m) = &d.int8 {
        rows.push((name.to_owned(), Some(&m.result), Some(m.vs_fp32), int8_speed));
    }
    rows
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
        "speed vs FP32",
        "ms/feature",
        "p50",
        "p90",
        "features/s",
        "size (MB)",
    ]);
    let (rows, first_ep_rows) = squad_rows(res, l);
    let mut undecided = Vec::new();
    for (i, (name, r, vs, speedup)) in rows.into_iter().enumerate() {
        let Some(r) = r else { continue };
        let d = vs.map_or(String::new(), |c| c.f1.describe());
        // A row at another float precision than the run's (the EP's own default) says so.
        let (run, at) = (res.fp32.ran.ep_precision.as_deref(), r.ran.ep_precision.as_deref());
        let (said, reference) = match (run, at) {
            (Some(run), Some(at)) if run != at => (format!("{name} at {at}"), format!("FP32 at {run}")),
            _ => (name.clone(), "FP32".to_owned()),
        };
        undecided.extend(vs.filter(|_| i < first_ep_rows).and_then(|c| c.undecided(&said, &reference)));
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
            if timed { speedup } else { "-".to_owned() },
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
        let run = r.fp32.ran.ep_precision.as_deref().unwrap_or("the run's precision");
        let speed = r.speedup_default_precision.as_ref().and_then(|s| s.speedup.as_ref());
        match (&r.default_float, &r.speedup_default_precision) {
            (Some(d), _) => text.push_str(&default_float_note(&r.int8.ran.ep, run, d, speed, main)),
            (None, Some(d)) => text.push_str(&format!("{}\n", d.describe(&r.int8.ran.ep, main))),
            (None, None) => {}
        }
    }
    text
}

/// What the rows at `ep`'s own default float precision say, in words: how much of FP32's answers at the run's
/// precision (`run`) the float its users run keeps, and the quantized model's (`main`) answers and speed (`speed`,
/// against FP32 at that precision).
fn default_float_note(ep: &str, run: &str, d: &DefaultFloat<SquadAt>, speed: Option<&Speedup>, main: &str) -> String {
    let mut text = format!(
        "\nAt {}, {ep}'s own default float precision here (the FP32 its users run), against FP32's answers at {run}:",
        d.name()
    );
    if let Some(f) = &d.fp32 {
        let same = &f.vs_fp32.same_answers;
        text.push_str(&format!(" FP32 keeps {} of the answers, dF1 {}", same.describe(), f.vs_fp32.f1.describe()));
    }
    if let Some(q) = &d.int8 {
        let at = speed.map_or(String::new(), |s| format!(" at {} its speed", s.describe()));
        text.push_str(&format!("; {main} keeps {}{at}", q.vs_fp32.same_answers.describe()));
    }
    text.push_str(".\n");
    if let Some(s) = &d.fp32_speedup {
        text.push_str(&format!("FP32 at {run} runs at {} the speed of FP32 at {} here.\n", s.describe(), d.precision));
    }
    if let Some(e) = &d.error {
        text.push_str(&format!("Not measured at {}: {e}.\n", d.precision));
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
    let run = o.fp32.as_ref().and_then(|f| f.ran.ep_precision.as_deref()).unwrap_or("the run's precision");
    let speed = o.speedup_default_precision.as_ref().and_then(|s| s.speedup.as_ref());
    match (&o.default_float, &o.speedup_default_precision) {
        (Some(d), _) => text.push_str(&default_float_note(&o.ep, run, d, speed, "the quantized model")),
        (None, Some(d)) => text.push_str(&format!("{}\n", d.describe(&o.ep, "the quantized model"))),
        (None, None) => {}
    }
    text
}
