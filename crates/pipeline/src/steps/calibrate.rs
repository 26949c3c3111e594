//! Calibration: the statistics pass over the tensors to calibrate, every requested method's ranges from it (the
//! pass again with whole histograms where a range needs more than the tails kept), and the tables written.

use std::path::Path;
use std::time::Instant;

use calib::{CalibState, CollectOptions, RangeTable};
use onnx_ir::Model;

use crate::disk::create_out_dir;
use crate::error::{Error, Result};
use crate::inputs::feeds::Feeds;
use crate::progress::Progress;
use crate::steps::collect::{CalibrateOptions, Pass, PassTimes, collect_stats};

/// The result of a calibration pass.
#[derive(Debug)]
pub struct Calibration {
    /// Mergeable statistics (calib_state.json).
    pub state: CalibState,
    /// Ranges per method, in the order of [`CalibrateOptions::methods`].
    pub tables: Vec<RangeTable>,
    pub tensors: Vec<String>,
    /// Units of data seen (SQuAD questions, or inputs of another task), and what they are.
    pub questions: usize,
    pub unit: &'static str,
    pub features: usize,
    /// Wall time of the whole calibration (session creation, the pass, the ranges).
    pub seconds: f64,
    /// Where the pass itself went, and on how many sessions.
    pub times: PassTimes,
    /// How far the main method's ranges of the two halves of the data lie apart ([`halves_spread`]).
    pub halves: Option<calib::RangeSpread>,
}

/// Runs `data` through `model` with `tensors` exposed, and computes the ranges of every requested method.
pub fn calibrate(
    model: &Model,
    tensors: &[String],
    data: &dyn Feeds,
    opts: &CalibrateOptions,
    progress: &dyn Progress,
) -> Result<Calibration> {
    if opts.methods.is_empty() {
        return Err(Error::Internal("calibration needs at least one range method".into()));
    }
    let started = Instant::now();
    let collect = CollectOptions::for_methods(&opts.methods, opts.num_bins);
    let pass = collect_stats(model, tensors, data, opts, collect, "calibrating", progress)?;
    let (units, unit) = data.units();
    let again = |whole| collect_stats(model, tensors, data, opts, whole, "calibrating again", progress);
    let (Pass { state, halves, features, mut times }, mut tables, ranges_s) = ranges_of(pass, &opts.methods, again)?;
    hold_rests(model, &state, &mut tables);
    let halves = halves_spread(&halves, &tables[0], &opts.methods[0]);
    // Computing the ranges belongs to the pass: it is work inference alone does not do.
    times.pass_s += ranges_s;
    report_non_finite(&state, &tables[0], tensors);
    // Tables of a smoothed model carry its smoothing's fingerprint: `quantize` refuses them with another model.
    for t in &mut tables {
        t.model = qdq::smoothing_fingerprint(model).map(str::to_owned);
    }
    Ok(Calibration {
        state,
        tables,
        tensors: tensors.to_vec(),
        questions: units as usize,
        unit,
        features,
        seconds: started.elapsed().as_secs_f64(),
        times,
        halves,
    })
}

/// The inputs a split model's MatMuls read instead of a split input (policy `outlier_channels`,
/// [`qdq::outlier_rests`]) take their observed min/max in every table: once the outlier channels are out, the
/// largest remaining channel bounds them, and clipping them (mse) fits the calibration sample too closely.
fn hold_rests(model: &Model, state: &calib::CalibState, tables: &mut [RangeTable]) {
    for rest in qdq::outlier_rests(model) {
        let Some(r) = state.tensor(&rest).and_then(|t| t.minmax) else { continue };
        for t in tables.iter_mut().filter(|t| t.method != "minmax") {
            t.ranges.insert(rest.clone(), r);
            t.chosen.insert(rest.clone(), "minmax".to_owned());
        }
    }
}

/// The spread of `method`'s ranges between the two halves of the statistics against `whole` (the ranges of both);
/// `None` when a half holds no batch, or its histograms cannot give the range (the tails it kept are too thin).
fn halves_spread(halves: &[CalibState; 2], whole: &RangeTable, method: &calib::Method) -> Option<calib::RangeSpread> {
    let table = |s: &CalibState| match calib::compute_ranges(s, method) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::debug!("no range spread between the calibration data's halves: {e}");
            None
        }
    };
    calib::range_spread(&table(&halves[0])?, &table(&halves[1])?, whole)
}

/// One line on `spread` for logs and reports: `ranges move 1.2 % between the halves of the calibration data (median
/// of 49 tensors; at most 8.4 %, in <tensor>)`.
pub fn describe_spread(spread: &calib::RangeSpread) -> String {
    format!(
        "ranges move {:.1} % between the halves of the calibration data (median of {} tensors; at most {:.1} %, in {})",
        100.0 * spread.median,
        spread.tensors,
        100.0 * spread.max,
        spread.tensor
    )
}

/// The range tables of `methods` from `pass`, and the seconds computing them took. Where the pass kept only the
/// histograms' tails (a percentile's or mse's, [`calib::CollectOptions::tails`]) and a range needs the folded middle
/// (the tails the first batches showed were thinner than the rest), the statistics are collected `again` with whole
/// histograms, and that pass (its time including the first one's) is returned.
fn ranges_of(
    pass: Pass,
    methods: &[calib::Method],
    again: impl FnOnce(CollectOptions) -> Result<Pass>,
) -> Result<(Pass, Vec<calib::RangeTable>, f64)> {
    let started = Instant::now();
    match calib::compute_all(&pass.state, methods) {
        Err(calib::Error::TailTooThin { tensor, method }) if pass.state.options().tails.is_some() => {
            tracing::warn!(
                "{tensor}: its {method} range needs more of the histogram than the tails kept from the first batches; \
                 counting every tensor's histogram again in full"
            );
            let whole = CollectOptions { tails: None, ..pass.state.options().clone() };
            let mut second = again(whole)?;
            second.times.pass_s += pass.times.pass_s;
            let started = Instant::now();
            let tables = calib::compute_all(&second.state, methods)?;
            Ok((second, tables, started.elapsed().as_secs_f64()))
        }
        r => Ok((pass, r?, started.elapsed().as_secs_f64())),
    }
}

/// Says which tensors held NaN or ±Inf (left out of their statistics), and which got no range at all (no finite
/// value: they stay in float, and would otherwise vanish from calibration.json without a word).
fn report_non_finite(state: &CalibState, main: &RangeTable, tensors: &[String]) {
    for (t, c) in state.non_finite() {
        tracing::warn!("{t}: {} NaN, {} +Inf, {} -Inf values left out of its calibration", c.nan, c.pos_inf, c.neg_inf);
    }
    for t in tensors.iter().filter(|t| !main.ranges.contains_key(*t)) {
        tracing::warn!("{t}: no finite value seen in calibration, so no range: it stays in float");
    }
}

/// Writes calibration.json (first method), calibration_<method>.json for the others, the ORT flatbuffers table,
/// the TensorRT cache and the mergeable statistics into `dir`.
///
/// `integer`: the main table is an integer model's, and TensorRT's and ONNX Runtime's INT8 tables
/// (calibration.flatbuffers, calibration.cache) are written from it; a float8 model's scales live in the model alone.
pub fn write_tables(cal: &Calibration, dir: &Path, integer: bool) -> Result<()> {
    let Some(main) = cal.tables.first() else {
        return Err(Error::Internal("no range table to write".into()));
    };
    create_out_dir(dir, "--out")?;
    // The set lands together as far as SIGINT / SIGTERM go: they wait for the last table.
    let _held = files::signals::hold();
    calib::tables::write_json(dir.join("calibration.json"), main)?;
    for t in &cal.tables[1..] {
        calib::tables::write_json(dir.join(format!("calibration_{}.json", t.method)), t)?;
    }
    if integer {
        calib::tables::write_ort_flatbuffers(dir.join("calibration.flatbuffers"), main)?;
        calib::tables::write_trt_cache(dir.join("calibration.cache"), main, calib::tables::DEFAULT_TRT_VERSION)?;
    } else {
        tracing::info!(
            "FP8 scales live in the model: no calibration.flatbuffers or calibration.cache (TensorRT's and ONNX \
             Runtime's INT8 tables) is written"
        );
    }
    cal.state.save_json(dir.join("calib_state.json"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use calib::{CalibState, CollectOptions, Method};

    use super::ranges_of;
    use crate::steps::collect::{Pass, PassTimes};

    /// A pass over `batches` (values of one tensor `t`) collected with `opts`, as if it took `seconds`.
    fn pass(opts: CollectOptions, batches: &[Vec<f32>], seconds: f64) -> Pass {
        let mut state = CalibState::new(opts.clone());
        let mut halves = [CalibState::new(opts.clone()), CalibState::new(opts)];
        for (i, b) in batches.iter().enumerate() {
            state.observe_here("t", b, &[b.len()]).unwrap();
            halves[i % 2].observe_here("t", b, &[b.len()]).unwrap();
        }
        let times = PassTimes { pass_s: seconds, ..PassTimes::default() };
        Pass { state, halves, features: batches.len(), times }
    }

    /// A percentile whose tails, chosen on the first batch, the later batches leave behind: the statistics are
    /// collected again with whole histograms, that pass's ranges are returned and its time includes the first one's;
    /// where the tails hold the percentile, no second pass runs.
    #[test]
    fn a_percentile_past_its_kept_tails_is_collected_again_in_full() {
        let m = Method::Percentile { percentile: 99.0, symmetric: true };
        // The first batch (values 1..2) decides the folding for a tail of one in a million: every bin below 1 is
        // folded, and the 99th percentile of the whole lies in 0..0.5, where the 40 later batches are.
        let mut batches =
            vec![(0..calib::TAIL_MIN).map(|i| 1.0 + i as f32 / calib::TAIL_MIN as f32).collect::<Vec<_>>()];
        batches.extend((0..40).map(|k| (0..100_000).map(|i| ((i * 7 + k) % 1000) as f32 / 2000.0).collect()));
        let thin = CollectOptions { tails: Some(1e-6), ..CollectOptions::for_methods(std::slice::from_ref(&m), 256) };
        let whole = CollectOptions { tails: None, ..thin.clone() };
        let mut asked = None;
        let (second, tables, _) = ranges_of(pass(thin.clone(), &batches, 2.0), std::slice::from_ref(&m), |o| {
            asked = Some(o.clone());
            Ok(pass(o, &batches, 3.0))
        })
        .unwrap();
        assert_eq!(asked.as_ref(), Some(&whole), "collected again with whole histograms");
        assert!(second.state.tensor("t").unwrap().abs.as_ref().unwrap().folded().is_none());
        assert_eq!(second.times.pass_s, 5.0, "both passes' time");
        let want = calib::compute_ranges(&pass(whole, &batches, 0.0).state, &m).unwrap();
        assert_eq!(tables[0].ranges["t"], want.ranges["t"]);
        assert!(tables[0].ranges["t"].max < 0.5, "{:?}", tables[0].ranges["t"]);

        // Tails wide enough (the same later batches alone, the 99.99th percentile): folded, and one pass.
        let m = Method::Percentile { percentile: 99.99, symmetric: true };
        let ok = CollectOptions::for_methods(std::slice::from_ref(&m), 256);
        let (first, tables, _) =
            ranges_of(pass(ok, &batches[1..], 2.0), std::slice::from_ref(&m), |_| panic!("no second pass is needed"))
                .unwrap();
        assert!(first.state.tensor("t").unwrap().abs.as_ref().unwrap().folded().is_some());
        assert_eq!(first.times.pass_s, 2.0);
        let whole = CollectOptions { tails: None, ..first.state.options().clone() };
        let want = calib::compute_ranges(&pass(whole, &batches[1..], 0.0).state, &m).unwrap();
        assert_eq!(tables[0].ranges["t"], want.ranges["t"]);
    }
}
