//! SVG charts of `qdq debug` and `qdq tune`, drawn with plotters: each activation pair's SQNR in graph order, and the
//! trade-off curve (dF1 and speed against the number of nodes kept in float), the worst pairs' calibration
//! histograms. Charts take plain numbers; the reports that own them call in (this module knows no report).

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::error::{Error, Result};

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("cannot draw the chart: {e}"))
}

/// Bars of every activation pair's SQNR against its float value (`rows`: graph position, SQNR, own SQNR; drawn in
/// graph order, from the first layer to the last), with the SQNR of its own rounding as dots: a low bar under a high
/// dot is error carried in from upstream. Pairs with an infinite or undefined SQNR are left out.
pub fn sqnr_svg(rows: &[(usize, f64, f64)]) -> Result<String> {
    let mut rows: Vec<(usize, f64, f64)> =
        rows.iter().copied().filter(|(_, a, b)| a.is_finite() && b.is_finite()).collect();
    rows.sort_by_key(|r| r.0);
    let top = rows.iter().map(|r| r.1.max(r.2)).fold(10.0, f64::max) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("SQNR of each quantized activation (graph order)", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..rows.len().max(1) as f64, 0f64..top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("activation pair (graph order)")
            .y_desc("SQNR (dB, higher is better)")
            .disable_x_mesh()
            .draw()
            .map_err(plot_error)?;
        let bars = rows.iter().enumerate().map(|(i, r)| {
            Rectangle::new([(i as f64 + 0.1, 0.0), (i as f64 + 0.9, r.1.max(0.0))], BLUE.mix(0.6).filled())
        });
        chart
            .draw_series(bars)
            .map_err(plot_error)?
            .label("against its float value")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BLUE.mix(0.6).filled()));
        let dots = rows.iter().enumerate().map(|(i, r)| Circle::new((i as f64 + 0.5, r.2), 3, RED.filled()));
        chart
            .draw_series(dots)
            .map_err(plot_error)?
            .label("its own rounding and clipping")
            .legend(|(x, y)| Circle::new((x + 6, y), 3, RED.filled()));
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).draw().map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// One candidate of `qdq tune` on the trade-off curve.
#[derive(Debug, Clone, Copy)]
pub struct CurvePoint {
    pub float_nodes: usize,
    pub delta_f1: f64,
    /// The 95 % interval of `delta_f1` (its bar).
    pub interval: (f64, f64),
    /// Scored on the screen alone (an estimate: drawn hollow).
    pub screen_only: bool,
    /// Speed-up over FP32.
    pub speed: f64,
}

/// The difference to FP32 (`delta`: `dF1`, `dnDCG@10`) with its 95 % interval (left axis) and speed against FP32
/// (right axis) for each candidate, screen estimates hollow, with the budget (in the same points) as a line and the
/// point at index `chosen` circled.
pub fn curve_svg(points: &[CurvePoint], budget: f64, chosen: usize, delta: &str) -> Result<String> {
    let x_max = points.iter().map(|c| c.float_nodes as f64).fold(1.0, f64::max);
    let ends = points.iter().flat_map(|c| [c.delta_f1, c.interval.0, c.interval.1]).filter(|v| v.is_finite());
    let lo = ends.clone().chain([-budget]).fold(0.0, f64::min) - 0.5;
    let hi = ends.fold(0.0, f64::max) + 0.5;
    let s_hi = points.iter().map(|c| c.speed).filter(|s| s.is_finite()).fold(1.0, f64::max) * 1.2;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("qdq tune: accuracy and speed against nodes kept in float", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .right_y_label_area_size(48)
            .build_cartesian_2d(-0.5f64..x_max + 0.5, lo..hi)
            .map_err(plot_error)?
            .set_secondary_coord(-0.5f64..x_max + 0.5, 0f64..s_hi);
        chart
            .configure_mesh()
            .x_desc("nodes kept in float")
            .y_desc(format!("{delta} vs FP32"))
            .draw()
            .map_err(plot_error)?;
        chart.configure_secondary_axes().y_desc("speed vs FP32 (x)").draw().map_err(plot_error)?;
        let budget = [(-0.5, -budget), (x_max + 0.5, -budget)];
        chart
            .draw_series(LineSeries::new(budget, BLACK.stroke_width(1)))
            .map_err(plot_error)?
            .label("budget")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLACK));
        draw_delta_f1(&mut chart, points, delta)?;
        let fast: Vec<(f64, f64)> = points.iter().map(|c| (c.float_nodes as f64, c.speed)).collect();
        chart
            .draw_secondary_series(LineSeries::new(fast, RED.stroke_width(2)))
            .map_err(plot_error)?
            .label("speed vs FP32")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], RED));
        if let Some(c) = points.get(chosen) {
            let mark = (c.float_nodes as f64, c.delta_f1);
            chart.draw_series([Circle::new(mark, 8, GREEN.stroke_width(2))]).map_err(plot_error)?;
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).draw().map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// The curve's dF1: a line through the candidates, each with its interval's bar, filled when scored on every
/// question and hollow when the screen alone estimates it.
fn draw_delta_f1<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    points: &[CurvePoint],
    delta: &str,
) -> Result<()> {
    let at = |c: &CurvePoint| (c.float_nodes as f64, c.delta_f1);
    chart
        .draw_series(LineSeries::new(points.iter().map(at), BLUE.stroke_width(2)))
        .map_err(plot_error)?
        .label(format!("{delta}, 95 % interval"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLUE));
    let bars = points.iter().filter(|c| c.interval.0.is_finite() && c.interval.1.is_finite()).map(|c| {
        let x = c.float_nodes as f64;
        PathElement::new([(x, c.interval.0), (x, c.interval.1)], BLUE.stroke_width(1))
    });
    chart.draw_series(bars).map_err(plot_error)?;
    let whole = points.iter().filter(|c| !c.screen_only).map(|c| Circle::new(at(c), 4, BLUE.filled()));
    chart.draw_series(whole).map_err(plot_error)?;
    if points.iter().any(|c| c.screen_only) {
        let screened = points.iter().filter(|c| c.screen_only).map(|c| Circle::new(at(c), 4, BLUE.stroke_width(2)));
        chart
            .draw_series(screened)
            .map_err(plot_error)?
            .label("screen estimate")
            .legend(|(x, y)| Circle::new((x + 7, y), 4, BLUE.stroke_width(2)));
    }
    Ok(())
}

/// One tensor's calibration histogram and the ranges the calibrators chose for it.
#[derive(Debug, Clone)]
pub struct HistogramPanel {
    pub tensor: String,
    /// `(low, high, count)` per displayed bin.
    pub bins: Vec<(f64, f64, u64)>,
    /// `(method, min, max)`.
    pub ranges: Vec<(String, f32, f32)>,
    /// The values counted only together, not bin by bin (a histogram collected for a percentile's or mse's tails:
    /// [`calib::CollectOptions::tails`]): `(low, high)` of `x`, or of `|x|` for an absolute histogram.
    pub unbinned: Option<(f64, f64)>,
}

/// The range tables of every calibrator `state` holds the statistics for (default options).
pub fn calibrator_tables(state: &calib::CalibState) -> Vec<calib::RangeTable> {
    let options = calib::MethodOptions::default();
    calib::MethodKind::ALL
        .iter()
        .filter_map(|&k| calib::compute_ranges(state, &calib::Method::new(k, &options).ok()?).ok())
        .collect()
}

/// The histogram of `tensor` in `state` (the signed one, else |x|) merged into `display` bins over the values seen,
/// with the range each of `tables` gives it (a histogram that kept only its tails shows them, and which values it
/// did not bin); `None` when the tensor has no histogram.
pub fn histogram_panel(
    state: &calib::CalibState,
    tables: &[calib::RangeTable],
    tensor: &str,
    display: usize,
) -> Option<HistogramPanel> {
    let t = state.tensor(tensor)?;
    let h = t.signed.as_ref().or(t.abs.as_ref())?;
    let w = h.width()?;
    let unbinned = h.folded().map(|(a, b)| (h.bin_of_index(a) as f64 * w, h.bin_of_index(b) as f64 * w));
    let reach = f64::from(h.max_abs()).max(w);
    let lo = if h.is_signed() { -reach } else { 0.0 };
    let step = (reach - lo) / display.max(1) as f64;
    let mut bins: Vec<(f64, f64, u64)> =
        (0..display).map(|i| (lo + i as f64 * step, lo + (i + 1) as f64 * step, 0)).collect();
    for (i, &c) in h.counts().iter().enumerate().filter(|(_, c)| **c > 0) {
        let x = (h.bin_of_index(i) as f64 + 0.5) * w;
        let at = (((x - lo) / step).floor().max(0.0) as usize).min(display - 1);
        bins[at].2 += c;
    }
    let ranges = tables.iter().filter_map(|t| t.ranges.get(tensor).map(|r| (t.method.clone(), r.min, r.max))).collect();
    Some(HistogramPanel { tensor: tensor.to_owned(), bins, ranges, unbinned })
}

/// One panel per tensor: its calibration histogram (log counts) and each calibrator's range as vertical lines.
pub fn histograms_svg(panels: &[HistogramPanel]) -> Result<String> {
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    let mut svg = String::new();
    {
        let height = 260 * panels.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        for (panel, area) in panels.iter().zip(root.split_evenly((panels.len().max(1), 1))) {
            let lo = panel.bins.first().map_or(-1.0, |b| b.0);
            let hi = panel.bins.last().map_or(1.0, |b| b.1);
            let ranges_lo = panel.ranges.iter().map(|r| f64::from(r.1)).fold(lo, f64::min);
            let ranges_hi = panel.ranges.iter().map(|r| f64::from(r.2)).fold(hi, f64::max);
            let top = panel.bins.iter().map(|b| ((b.2 + 1) as f64).log10()).fold(1.0, f64::max) * 1.1;
            let mut chart = ChartBuilder::on(&area)
                .caption(caption(panel), ("sans-serif", 13))
                .margin(8)
                .x_label_area_size(24)
                .y_label_area_size(44)
                .build_cartesian_2d(ranges_lo..ranges_hi, 0f64..top)
                .map_err(plot_error)?;
            chart.configure_mesh().y_desc("log10(count + 1)").disable_x_mesh().draw().map_err(plot_error)?;
            let bars = panel
                .bins
                .iter()
                .map(|b| Rectangle::new([(b.0, 0.0), (b.1, ((b.2 + 1) as f64).log10())], BLACK.mix(0.35).filled()));
            chart.draw_series(bars).map_err(plot_error)?;
            for ((method, min, max), color) in panel.ranges.iter().zip(colors.iter().cycle()) {
                let lines = [f64::from(*min), f64::from(*max)]
                    .map(|x| PathElement::new([(x, 0.0), (x, top)], color.stroke_width(2)));
                chart
                    .draw_series(lines)
                    .map_err(plot_error)?
                    .label(method.as_str())
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
            }
            chart.configure_series_labels().background_style(WHITE.mix(0.8)).draw().map_err(plot_error)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// A panel's title: its tensor, and the values its histogram counted only together.
fn caption(panel: &HistogramPanel) -> String {
    match panel.unbinned {
        Some((lo, hi)) => format!("{} (values in [{lo:.4}, {hi:.4}) counted, not binned: tails only)", panel.tensor),
        None => panel.tensor.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A histogram that kept only its tails is drawn too, its title saying which values it did not bin.
    #[test]
    fn a_tails_only_histogram_is_drawn_with_its_unbinned_values_named() {
        let methods = [calib::Method::Mse];
        let values: Vec<f32> = (0..400_000u64).map(|i| ((i * 7919 % 100_003) as f32 / 100_003.0 - 0.5) * 4.0).collect();
        let collect = |opts: calib::CollectOptions| {
            let mut s = calib::CalibState::new(opts);
            for b in values.chunks(50_000) {
                s.observe_here("t", b, &[b.len()]).unwrap();
            }
            s
        };
        let opts = calib::CollectOptions::for_methods(&methods, 2048);
        let (tails, whole) = (collect(opts.clone()), collect(calib::CollectOptions { tails: None, ..opts }));
        let tables = calib::compute_all(&tails, &methods).unwrap();
        let panel = histogram_panel(&tails, &tables, "t", 120).unwrap();
        let (lo, hi) = panel.unbinned.unwrap();
        assert!(lo == 0.0 && hi > 1.5 && hi < 2.0, "{lo} {hi}");
        assert!(caption(&panel).contains("not binned"), "{}", caption(&panel));
        assert!(histograms_svg(&[panel]).unwrap().contains("not binned"));
        let panel = histogram_panel(&whole, &tables, "t", 120).unwrap();
        assert_eq!((panel.unbinned, caption(&panel)), (None, "t".to_string()));
    }
}
