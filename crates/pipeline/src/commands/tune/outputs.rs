//! What `qdq tune` writes besides its candidates: the chosen model, the recipe that replays it, tune.json, tune.md
//! and the charts (the trade-off curve, the worst pairs' calibration histograms).

use std::path::Path;

use qdq::Policy;

use crate::disk::{read_bounded, write_atomic, write_json};
use crate::error::Result;
use crate::job::Report;
use crate::report::debug::DebugReport;
use crate::report::plots::{CurvePoint, calibrator_tables, curve_svg, histogram_panel, histograms_svg};
use crate::report::tune::{TuneReport, count_nodes};
use crate::settings::recipe::Recipe;

/// histograms.svg in `out`: the calibration histograms (calib_state.json of tune's own calibration, when it
/// `calibrated`) of the (at most four) pairs with the worst own rounding, each calibrator's range marked; `false` when
/// there is nothing to draw.
pub fn write_histograms(out: &Path, calibrated: bool, debugged: Option<&DebugReport>) -> Result<bool> {
    let path = out.join("calib_state.json");
    let Some(debugged) = debugged.filter(|_| calibrated && path.is_file()) else { return Ok(false) };
    let state = calib::CalibState::load_json(&path)?;
    let tables = calibrator_tables(&state);
    let panels: Vec<_> =
        debugged.tensors.iter().filter_map(|t| histogram_panel(&state, &tables, &t.tensor, 120)).take(4).collect();
    if panels.is_empty() {
        return Ok(false);
    }
    write_atomic(&out.join("histograms.svg"), histograms_svg(&panels)?.as_bytes())?;
    Ok(true)
}

/// The chosen model as out/model_qdq.onnx, the recipe that replays it, tune.json, curve.svg and tune.md.
pub fn write_outputs(out: &Path, report: &TuneReport, recipe: &Recipe, histograms: bool) -> Result<()> {
    let choice = report.choice();
    write_atomic(&out.join("model_qdq.onnx"), &read_bounded(&choice.timed.model)?)?;
    let others = match choice.timed.calibrator_choices {
        0 => String::new(),
        n => format!(", {n} ranges from other calibrators (`chosen` in the table)"),
    };
    let comment = format!(
        "qdq tune's choice ({} kept in float{others}, {} {:+.2} on {} {}).\nReplay: qdq quantize --recipe {} -o \
         model_qdq.onnx",
        count_nodes(choice.timed.float_nodes.len()),
        report.metric.delta(),
        choice.scored.delta_f1,
        report.questions,
        report.metric.unit,
        report.recipe.display(),
    );
    write_atomic(&report.recipe, recipe.to_toml(&comment)?.as_bytes())?;
    write_json(&out.join("tune.json"), &report.json())?;
    let points: Vec<CurvePoint> = report
        .curve
        .iter()
        .map(|c| CurvePoint {
            float_nodes: c.timed.float_nodes.len(),
            delta_f1: c.scored.delta_f1,
            interval: c.scored.delta_f1_interval,
            screen_only: c.scored.screen_only,
            speed: c.timed.speedup.median,
        })
        .collect();
    write_atomic(
        &out.join("curve.svg"),
        curve_svg(&points, report.budget, report.chosen, &report.metric.delta())?.as_bytes(),
    )?;
    let delta = report.metric.delta();
    let mut md = format!("# qdq tune\n\n{report}\n\n![{delta} and speed against nodes kept in float](curve.svg)\n");
    md.push_str(
        "\nEach pair's error (and the sensitivity behind the ranking, when there is one): [debug/debug.md](debug/debug.md).\n",
    );
    if histograms {
        md.push_str("\n![Calibration histograms of the worst pairs, each calibrator's range marked](histograms.svg)\n");
    }
    write_atomic(&out.join("tune.md"), md.as_bytes())
}

/// The recipe of the choice: the model candidates were made from, the chosen candidate's table, its whole policy.
pub fn recipe(base: &Path, ranges: &Path, policy: Policy) -> Recipe {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    Recipe { model: absolute(base), ranges: absolute(ranges), policy }
}
