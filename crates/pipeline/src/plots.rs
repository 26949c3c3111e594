//! SVG charts of `qdq debug` and `qdq tune`, drawn with plotters: each activation pair's SQNR in graph order, and the
//! trade-off curve (dF1 and speed against the number of nodes kept in float).

use plotters::prelude::*;

use crate::debug::DebugReport;
use crate::tune::TuneReport;
use crate::{Error, Result};

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::Config(format!("cannot draw the chart: {e}"))
}

/// Bars of every activation pair's SQNR against its float value (graph order, from the first layer to the last),
/// with the SQNR of its own rounding as dots: a low bar under a high dot is error carried in from upstream.
pub fn sqnr_svg(report: &DebugReport) -> Result<String> {
    let mut rows: Vec<(usize, f64, f64)> = report
        .tensors
        .iter()
        .map(|t| (t.graph_order, t.total.sqnr_db(), t.own.sqnr_db()))
        .filter(|(_, a, b)| a.is_finite() && b.is_finite())
        .collect();
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

/// dF1 (left axis) and speed against FP32 (right axis) for each candidate of `qdq tune`, with the budget as a line.
pub fn curve_svg(report: &TuneReport) -> Result<String> {
    let xs: Vec<f64> = report.curve.iter().map(|c| c.float_nodes.len() as f64).collect();
    let df1: Vec<f64> = report.curve.iter().map(|c| c.delta_f1).collect();
    let speed: Vec<f64> = report.curve.iter().map(|c| report.fp32_ms_per_feature / c.ms_per_feature).collect();
    let x_max = xs.iter().copied().fold(1.0, f64::max);
    let lo = df1.iter().copied().chain([-report.budget]).fold(0.0, f64::min) - 0.5;
    let hi = df1.iter().copied().fold(0.0, f64::max) + 0.5;
    let s_hi = speed.iter().copied().filter(|s| s.is_finite()).fold(1.0, f64::max) * 1.2;
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
        chart.configure_mesh().x_desc("nodes kept in float").y_desc("dF1 vs FP32").draw().map_err(plot_error)?;
        chart.configure_secondary_axes().y_desc("speed vs FP32 (x)").draw().map_err(plot_error)?;
        let budget = [(-0.5, -report.budget), (x_max + 0.5, -report.budget)];
        chart
            .draw_series(LineSeries::new(budget, BLACK.stroke_width(1)))
            .map_err(plot_error)?
            .label("budget")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLACK));
        let points: Vec<(f64, f64)> = xs.iter().copied().zip(df1.iter().copied()).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))
            .map_err(plot_error)?
            .label("dF1")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLUE));
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, BLUE.filled()))).map_err(plot_error)?;
        let fast: Vec<(f64, f64)> = xs.iter().copied().zip(speed.iter().copied()).collect();
        chart
            .draw_secondary_series(LineSeries::new(fast, RED.stroke_width(2)))
            .map_err(plot_error)?
            .label("speed vs FP32")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], RED));
        let chosen = report.choice();
        let mark = (chosen.float_nodes.len() as f64, chosen.delta_f1);
        chart.draw_series([Circle::new(mark, 8, GREEN.stroke_width(2))]).map_err(plot_error)?;
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).draw().map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}
