//! What `qdq tune` reports: every candidate on the trade-off curve (built, timed, scored), the one chosen and why,
//! and where the time went; as text (also tune.md) and JSON (tune.json).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use comfy_table::{CellAlignment, Table, presets::ASCII_MARKDOWN};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::job::Report;
use crate::steps::speed::Speedup;
use crate::tasks::score::Metric;

/// A candidate built, measured on the held-out questions and timed against FP32. Scored, it is a [`Candidate`];
/// unscored, it is listed in [`TuneReport::not_scored`] (the all-integer candidate when it is slower than the
/// preset, since it could not be chosen).
#[derive(Debug, Clone, Serialize)]
pub struct Timed {
    /// The nodes kept in float (besides what the policy leaves in float).
    pub float_nodes: Vec<String>,
    pub model: PathBuf,
    /// FP32's time over this model's on the same held-out batches, in alternating rounds.
    pub speedup: Speedup,
    /// MatMul-like nodes of the model reading only dequantized inputs, of all of them.
    pub integer_matmuls: usize,
    pub matmuls: usize,
    /// Tensors whose range another calibrator gave (`TuneReport::calibrators`; 0 = the table's ranges).
    pub calibrator_choices: usize,
    /// Policy options this candidate sets besides the run's (`key=value`; the recipe carries them): the all-integer
    /// candidate's `matmul_const_b_only=false`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy_options: Vec<String>,
    /// The distance to FP32's outputs on the held-out inputs: the mean KL of the start / end logits (SQuAD), the mean
    /// cosine distance of the embeddings.
    pub held_out_kl: f64,
    /// The all-integer candidate only: the preset's time over this model's, the two run in turn on the same batches
    /// (above 1: faster than the preset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_preset: Option<Speedup>,
}

/// A candidate's scores on the evaluation questions (or queries, or texts: [`Metric`]); the fields keep SQuAD's names
/// (tune.json names them by the metric for other tasks: [`TuneReport`]'s JSON).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scored {
    /// SQuAD only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact_match: Option<f64>,
    pub f1: f64,
    /// F1 minus FP32's F1.
    pub delta_f1: f64,
    /// Standard error of `delta_f1` over the questions scored (paired: the spread of the per-question F1 differences
    /// over the square root of their number), in F1 points: a difference within about twice this is the noise of
    /// which questions were drawn.
    pub delta_f1_se: f64,
    /// The 95 % interval of `delta_f1` over the questions scored (paired, Student's t).
    pub delta_f1_interval: (f64, f64),
    /// Questions answered as FP32 answers them, with its 95 % interval (over the questions scored; a screen's
    /// estimate counts FP32's answers to the others as the same).
    #[serde(default)]
    pub same_answers: squad_metrics::Proportion,
    /// Milliseconds of wall time per feature in the evaluation: a throughput pass with one one-thread session per
    /// core side by side, minutes apart from FP32's (`speedup` is the comparison).
    pub ms_per_feature: f64,
    /// Questions the candidate answered: all of them, or only the screen's (`qdq tune --screen`), its scores then an
    /// estimate with FP32's answers to the other questions: over budget by the screen alone, or no better on the
    /// screen than a candidate found over budget on every question.
    pub questions_scored: usize,
    /// Scored on the screen alone: its scores are an estimate (FP32's answers taken for the other questions), and it
    /// is never chosen on them (a chosen screen is scored on every question first).
    pub screen_only: bool,
    /// A screened candidate's dF1 on its screen (FP32's answers taken for the other questions): what running it on
    /// the rest was decided on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub screen_delta_f1: Option<f64>,
}

/// One point of the trade-off curve: a candidate as built and timed, and its scores on the evaluation questions.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    #[serde(flatten)]
    pub timed: Timed,
    #[serde(flatten)]
    pub scored: Scored,
}

/// One tensor whose range now comes from another calibrator.
#[derive(Debug, Clone, Serialize)]
pub struct CalibratorChoice {
    pub tensor: String,
    /// The table's method, and its range for the tensor.
    pub from: String,
    pub from_range: (f32, f32),
    /// The calibrator kept, and its range.
    pub to: String,
    pub to_range: (f32, f32),
    /// Held-out logit KL (mean of start and end) before and after.
    pub kl_before: f64,
    pub kl_after: f64,
}

/// On an EP whose own default float precision is not the run's (OpenVINO's bf16 on a CPU with bf16 instructions, FP16
/// engines): every candidate was timed with its float parts at that precision against FP32 at it, the float its users
/// run, and FP32 at it was scored as the candidates are.
#[derive(Debug, Clone, Serialize)]
pub struct TunedAtDefault {
    /// `bf16`, `f16`, `fp16`.
    pub precision: String,
    /// What gives the CPU that precision (`AMX`, `AVX512-BF16`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// FP32 at that precision on the evaluation questions, against FP32 at the run's (its `same_answers`: the share
    /// `--min-same-of default` reads `--min-same` against), when it could be scored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp32: Option<Scored>,
    /// Why FP32 at that precision could not be scored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `qdq tune` did.
#[derive(Debug, Clone, Serialize)]
pub struct TuneReport {
    pub out: PathBuf,
    /// What the scores and the budget are in.
    pub metric: Metric,
    pub budget: f64,
    /// `--min-same`: the smallest share (0-1) of answers identical to FP32's accepted, if any (with `--min-same-of
    /// default`, already scaled by the share FP32 at the EP's default float precision keeps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_same_answers: Option<f64>,
    /// Candidates timed at the EP's own default float precision, where that is not the run's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_float: Option<TunedAtDefault>,
    pub fp32_f1: f64,
    pub fp32_ms_per_feature: f64,
    pub questions: usize,
    /// Every candidate scored, in order (float nodes 0, 1, 2, 4, ...).
    pub curve: Vec<Candidate>,
    /// Index into `curve` of the choice: the first within budget, else the best F1.
    pub chosen: usize,
    pub within_budget: bool,
    /// The sensitivity order the float nodes were taken in (most recovering first).
    pub ranking: Vec<String>,
    /// Ranges taken from another calibrator than the table's, in the order they were kept; the candidates from the
    /// first with `calibrator_choices > 0` on use them all.
    pub calibrators: Vec<CalibratorChoice>,
    pub recipe: PathBuf,
    /// Candidates timed but not scored, since their speed ruled them out (see [`Timed`]).
    pub not_scored: Vec<Timed>,
    /// Where the time went: seconds per phase, `total` the whole run up to writing the outputs.
    pub phase_seconds: BTreeMap<String, f64>,
    /// How much slower than the preset the all-integer candidate may be and still be chosen.
    #[serde(skip)]
    pub all_integer_slack: f64,
    #[serde(skip)]
    pub fail_above: Option<f64>,
}

impl TuneReport {
    pub fn choice(&self) -> &Candidate {
        &self.curve[self.chosen]
    }

    /// The line under the verdict: when the chosen candidate's interval holds the budget's limit, that these questions
    /// cannot decide, and about how many would (`--samples`); else, when no candidate met the budget, what to raise.
    pub fn advice(&self) -> Option<String> {
        let s = &self.choice().scored;
        let (low, high) = s.delta_f1_interval;
        let (limit, unit, delta) = (-self.budget, self.metric.unit, self.metric.delta());
        if low <= limit && limit <= high && s.delta_f1_se.is_finite() && s.delta_f1_se > 0.0 {
            let d = squad_metrics::PairedDifference {
                delta: s.delta_f1,
                se: s.delta_f1_se,
                low,
                high,
                questions: s.questions_scored,
            };
            let side = if self.within_budget { "Within" } else { "Over" };
            let more =
                d.questions_to_decide(limit).map_or(String::new(), |n| format!("; about {n} would (--samples {n})"));
            return Some(format!(
                "{side} the budget on these {} {unit}, but they cannot decide: the chosen {delta} {} holds -{:.2}{more}.",
                s.questions_scored,
                d.describe(),
                self.budget,
            ));
        }
        (!self.within_budget)
            .then(|| "No candidate met the budget; the best one is kept (raise --max-float or the budget).".to_owned())
    }
}

/// The keys of SQuAD's scores in tune.json, and theirs for another [`Metric`].
const SCORE_KEYS: [(&str, &str); 7] = [
    ("fp32_f1", "fp32_score"),
    ("f1", "score"),
    ("delta_f1", "delta"),
    ("delta_f1_se", "delta_se"),
    ("delta_f1_interval", "delta_interval"),
    ("same_answers", "same_top1"),
    ("held_out_kl", "held_out_distance"),
];

/// Renames `keys` (`from`, `to`) of the object `v`.
fn rename_keys(v: &mut serde_json::Value, keys: &[(&str, &str)]) {
    let Some(o) = v.as_object_mut() else { return };
    for (from, to) in keys {
        if let Some(x) = o.remove(*from) {
            o.insert((*to).to_owned(), x);
        }
    }
}

/// "4.2 s", "2 min 08 s".
fn duration(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else {
        let s = seconds.round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

/// "1 node", "3 nodes".
pub fn count_nodes(n: usize) -> String {
    format!("{n} node{}", if n == 1 { "" } else { "s" })
}

impl Report for TuneReport {
    /// The document `qdq tune --json` prints and tune.json holds (docs/JSON.md, schema `qdq.tune/1`).
    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        v["schema"] = "qdq.tune/1".into();
        if !self.metric.exact_match {
            // The scores under the metric's names: no `f1` holding an nDCG.
            rename_keys(&mut v, &SCORE_KEYS);
            for list in ["curve", "not_scored"] {
                if let Some(items) = v[list].as_array_mut() {
                    items.iter_mut().for_each(|c| rename_keys(c, &SCORE_KEYS));
                }
            }
        }
        v
    }

    /// `--fail-above`: an error when the chosen model loses more than allowed.
    fn verdict(&self) -> Result<()> {
        match self.fail_above {
            Some(limit) if -self.choice().scored.delta_f1 > limit => Err(Error::Gate(format!(
                "the chosen model loses {:.2} {}, more than --fail-above {limit}",
                -self.choice().scored.delta_f1,
                self.metric.name
            ))),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for TuneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, m) = (self.choice(), self.metric);
        let answers = self.min_same_answers.map_or(String::new(), |a| {
            format!(" and {:.1} % of answers = FP32's ({:.2} % here)", 100.0 * a, 100.0 * c.scored.same_answers.share)
        });
        writeln!(
            f,
            "{} within the budget of {:.2} {}{answers}: {} kept in float, {} {:.2} ({:+.2} vs FP32 {:.2}) on {} {}, \
             {}/{} MatMul-like nodes integer.",
            if self.within_budget { "Chosen" } else { "NOT" },
            self.budget,
            m.name,
            count_nodes(c.timed.float_nodes.len()),
            m.name,
            c.scored.f1,
            c.scored.delta_f1,
            self.fp32_f1,
            self.questions,
            m.unit,
            c.timed.integer_matmuls,
            c.timed.matmuls
        )?;
        if let Some(advice) = self.advice() {
            writeln!(f, "{advice}")?;
        }
        writeln!(f, "Model: {}; recipe: {}\n", self.out.join("model_qdq.onnx").display(), self.recipe.display())?;
        write!(f, "{}", self.curve_table())?;
        self.notes(f)?;
        self.default_float_note(f)?;
        self.time_split(f)?;
        self.unscored(f)?;
        self.calibrator_list(f)
    }
}

impl TuneReport {
    /// The speed column's head: against FP32 at the run's precision, or at the EP's own default.
    fn speed_header(&self) -> String {
        match &self.default_float {
            Some(d) => format!("vs FP32 {} (median, range)", d.precision),
            None => "vs FP32 (median, range)".to_owned(),
        }
    }

    /// What the timing at the EP's own default float precision means, and how much of FP32's answers that float
    /// keeps itself.
    fn default_float_note(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(d) = &self.default_float else { return Ok(()) };
        let by = d.instructions.as_ref().map_or(String::new(), |i| format!(" ({i})"));
        write!(
            f,
            "\n\nTimed at {}{by}, the EP's own default float precision here: every candidate with its float parts in \
             it, against FP32 in it (the float its users run).",
            d.precision
        )?;
        match (&d.fp32, &d.error) {
            (Some(s), _) => write!(
                f,
                " FP32 at {} against FP32 at the run's precision: {} {:.2} ({:+.2} [{:+.2}, {:+.2}]), {}: {}.",
                d.precision,
                self.metric.name,
                s.f1,
                s.delta_f1,
                s.delta_f1_interval.0,
                s.delta_f1_interval.1,
                self.metric.same,
                s.same_answers.describe()
            ),
            (None, Some(e)) => write!(f, " FP32 at {} could not be scored: {e}.", d.precision),
            (None, None) => Ok(()),
        }
    }

    /// Every candidate of the curve, one row each.
    fn curve_table(&self) -> Table {
        let m = self.metric;
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        let (delta, same, per) = (format!("{} [95 %]", m.delta()), format!("{} [95 %]", m.same), m.per);
        let header: Vec<String> = ["float nodes", "other calibrators"]
            .into_iter()
            .chain(m.exact_match.then_some("EM"))
            .map(str::to_owned)
            .chain([m.name.to_owned(), delta, same, m.unit.to_owned(), format!("ms/{per}")])
            .chain([self.speed_header(), "integer MatMuls".to_owned(), m.proxy.to_owned(), "last added".to_owned()])
            .collect();
        let columns = header.len();
        t.set_header(header);
        for (i, c) in self.curve.iter().enumerate() {
            let s = &c.scored;
            let mut row = vec![
                format!("{}{}", c.timed.float_nodes.len(), if i == self.chosen { " (chosen)" } else { "" }),
                c.timed.calibrator_choices.to_string(),
            ];
            if m.exact_match {
                row.push(s.exact_match.map_or(String::new(), |em| format!("{em:.2}")));
            }
            row.extend([
                format!("{:.2}", s.f1),
                match s.screen_only {
                    true => format!("{:+.2} (screen estimate)", s.delta_f1),
                    false => {
                        format!("{:+.2} [{:+.2}, {:+.2}]", s.delta_f1, s.delta_f1_interval.0, s.delta_f1_interval.1)
                    }
                },
                s.same_answers.describe(),
                if s.screen_only { format!("{} (screen)", s.questions_scored) } else { s.questions_scored.to_string() },
                format!("{:.2}", s.ms_per_feature),
                c.timed.speedup.describe(),
                format!("{}/{}", c.timed.integer_matmuls, c.timed.matmuls),
                format!("{:.5}", c.timed.held_out_kl),
                c.timed.float_nodes.last().cloned().unwrap_or_else(|| c.timed.policy_options.join(", ")),
            ]);
            t.add_row(row);
        }
        for col in 1..columns - 1 {
            if let Some(column) = t.column_mut(col) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
        t
    }

    /// What the ± 2 SE, the speed and a screen mean.
    fn notes(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, m) = (self.choice(), self.metric);
        let unit = m.one;
        write!(
            f,
            "\n\n{} [95 %]: {} minus FP32's, with the 95 % interval of that difference over these {} {} (paired: each \
             {unit}'s {} against FP32's): differences within it are the noise of which {} were drawn; vs FP32: the same \
             {} held-out {}s run by both models in turn, {} rounds.",
            m.delta(),
            m.name,
            self.questions,
            m.unit,
            m.name,
            m.unit,
            c.timed.speedup.features,
            m.per,
            c.timed.speedup.rounds
        )?;
        if self.curve.iter().any(|c| c.scored.screen_only) {
            write!(
                f,
                " (screen): run on the questions whose FP32 answers are nearest to flipping only, FP32's answers taken \
                 for the others; over budget on those alone, or no better there than a candidate over budget on every \
                 question, so not run on the rest (`--screen`)."
            )?;
        }
        Ok(())
    }

    /// Where the time went, phase by phase.
    fn time_split(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(total) = self.phase_seconds.get("total") else { return Ok(()) };
        let labels = [
            ("statistics", "statistics"),
            ("debug_and_sensitivity", "debug and sensitivity"),
            ("calibrator_choice", "calibrator choice"),
            ("fp32_scoring", "FP32 scored"),
            ("candidate_screening", "candidates screened"),
            ("candidate_scoring", "candidates scored"),
            ("held_out_fp32", "FP32 on the held-out inputs"),
            ("quantization", "candidates quantized"),
            ("held_out_kl", "candidates on the held-out inputs"),
            ("timing", "candidates timed"),
            ("outputs", "outputs"),
        ];
        let parts: Vec<String> = labels
            .iter()
            .filter_map(|(k, label)| self.phase_seconds.get(*k).map(|s| format!("{label} {}", duration(*s))))
            .collect();
        write!(f, "\n\nTook {}: {}.", duration(*total), parts.join(", "))
    }

    /// The candidates ruled out by their speed.
    fn unscored(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.not_scored {
            write!(
                f,
                "\n\nNot scored: {} in float{} ({}/{} MatMul-like nodes integer, {} {:.5}) runs at {} FP32's \
                 speed and {} the preset's (head to head), more than {:.0} % slower than the preset, so it could not \
                 be chosen.",
                count_nodes(t.float_nodes.len()),
                if t.policy_options.is_empty() { String::new() } else { format!(", {}", t.policy_options.join(", ")) },
                t.integer_matmuls,
                t.matmuls,
                self.metric.proxy,
                t.held_out_kl,
                t.speedup.describe(),
                t.vs_preset.map_or("?".to_owned(), |h| h.describe()),
                self.all_integer_slack * 100.0
            )?;
        }
        Ok(())
    }

    /// The ranges taken from other calibrators.
    fn calibrator_list(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.calibrators.is_empty() {
            return Ok(());
        }
        writeln!(f, "\n\nRanges from another calibrator ({} before -> after):\n", self.metric.proxy)?;
        for c in &self.calibrators {
            writeln!(
                f,
                "- `{}`: {} [{:.4}, {:.4}] -> {} [{:.4}, {:.4}], {:.5} -> {:.5}",
                c.tensor,
                c.from,
                c.from_range.0,
                c.from_range.1,
                c.to,
                c.to_range.0,
                c.to_range.1,
                c.kl_before,
                c.kl_after
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(delta_f1: f64, fail_above: Option<f64>) -> TuneReport {
        let c = Candidate {
            timed: Timed {
                float_nodes: vec![],
                model: "m.onnx".into(),
                speedup: Speedup {
                    median: 2.0,
                    min: 1.8,
                    max: 2.1,
                    rounds: 5,
                    features: 16,
                    reference_ms_per_feature: 10.0,
                    ms_per_feature: 5.0,
                },
                integer_matmuls: 40,
                matmuls: 49,
                calibrator_choices: 0,
                policy_options: vec![],
                held_out_kl: 0.01,
                vs_preset: None,
            },
            scored: Scored {
                exact_match: Some(60.0),
                f1: 70.0 + delta_f1,
                delta_f1,
                delta_f1_se: 0.1,
                delta_f1_interval: (delta_f1 - 0.2, delta_f1 + 0.2),
                same_answers: squad_metrics::Proportion::of(90, 100),
                ms_per_feature: 10.0,
                questions_scored: 100,
                screen_only: false,
                screen_delta_f1: None,
            },
        };
        TuneReport {
            out: "out".into(),
            metric: Metric::F1,
            budget: 1.0,
            min_same_answers: None,
            default_float: None,
            fp32_f1: 70.0,
            fp32_ms_per_feature: 20.0,
            questions: 100,
            curve: vec![c],
            chosen: 0,
            within_budget: delta_f1 >= -1.0,
            ranking: vec![],
            calibrators: vec![],
            recipe: "out/recipe.toml".into(),
            not_scored: vec![],
            phase_seconds: BTreeMap::new(),
            all_integer_slack: 0.02,
            fail_above,
        }
    }

    #[test]
    fn the_gate_fails_only_above_its_limit() {
        assert!(report(-0.4, Some(0.5)).verdict().is_ok());
        let e = report(-0.6, Some(0.5)).verdict().unwrap_err();
        assert!(matches!(e, Error::Gate(_)), "{e:?}");
        assert!(e.to_string().contains("loses 0.60 F1, more than --fail-above 0.5"), "{e}");
        assert!(report(-9.0, None).verdict().is_ok());
        let text = report(-0.6, None).to_string();
        assert!(
            text.contains("| 0 (chosen) ") && text.contains("2.00x (1.80-2.10)") && text.contains("40/49"),
            "{text}"
        );
    }

    /// Issue 50: when the chosen candidate's interval holds the budget's limit, the advice is more questions, with
    /// how many, within budget or not; a clear miss asks for more float nodes.
    #[test]
    fn advice_names_samples_when_the_interval_holds_the_budget() {
        for delta in [-0.9, -1.1] {
            let a = report(delta, None).advice().unwrap();
            assert!(a.contains("cannot decide") && a.contains("holds -1.00") && a.contains("(--samples "), "{a}");
            assert!(a.starts_with(if delta > -1.0 { "Within" } else { "Over" }), "{a}");
        }
        assert!(report(-0.5, None).advice().is_none());
        let a = report(-3.0, None).advice().unwrap();
        assert!(a.contains("raise --max-float") && !a.contains("--samples"), "{a}");
    }

    /// Issue 75: on an EP whose own default float precision is not the run's, the speed column says which FP32 it is
    /// read against, the lines under the table say what FP32 at that precision keeps itself, and tune.json has it.
    #[test]
    fn timing_at_the_default_float_is_said() {
        let plain = report(-0.5, None);
        assert!(plain.to_string().contains("| vs FP32 (median, range) |"), "{plain}");
        let fp32 = Scored { same_answers: squad_metrics::Proportion::of(986, 1000), ..plain.curve[0].scored };
        let at = TunedAtDefault {
            precision: "bf16".into(),
            instructions: Some("AMX".into()),
            fp32: Some(fp32),
            error: None,
        };
        let r = TuneReport { default_float: Some(at), ..report(-0.5, None) };
        let text = r.to_string();
        assert!(text.contains("| vs FP32 bf16 (median, range) |"), "{text}");
        assert!(text.contains("Timed at bf16 (AMX)") && text.contains("answers = FP32: 98.60 %"), "{text}");
        let v = r.json();
        assert_eq!(v["default_float"]["precision"], "bf16", "{v}");
        assert!(v["default_float"]["fp32"]["same_answers"].is_object(), "{v}");
    }

    /// A candidate's scores sit beside its build in tune.json, under the keys they always had.
    #[test]
    fn a_candidate_serializes_flat() {
        let v = serde_json::to_value(&report(-0.5, None).curve[0]).unwrap();
        for key in ["float_nodes", "model", "speedup", "integer_matmuls", "held_out_kl", "f1", "delta_f1_se"] {
            assert!(v.get(key).is_some(), "{key}: {v}");
        }
        assert!(v.get("screen_delta_f1").is_none() && v.get("policy_options").is_none(), "{v}");
    }
}
