//! The report: targets and their verdicts, the analysis of what limits each one, the markdown, writing both files.

use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Targets and the report

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Target {
    pub(super) name: &'static str,
    pub(super) goal: &'static str,
    /// The measured figure, e.g. "7.9x (worst: normal_16m)"; None when nothing was measured.
    pub(super) measured: Option<String>,
    pub(super) pass: Option<bool>,
}

pub(super) fn div(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?).filter(|r| r.is_finite())
}

/// Each row's label and ratio.
type LabelledRatios = Vec<(String, Option<f64>)>;

/// A target on a ratio over the rows of a list of the report; judged on the worst row.
pub(super) struct Spec {
    pub(super) name: &'static str,
    pub(super) goal: &'static str,
    pub(super) rows: fn(&Report) -> LabelledRatios,
    /// The ratio must be at least (true) or at most (false) `limit`.
    pub(super) at_least: bool,
    pub(super) limit: f64,
}

pub(super) const TARGETS: [Spec; 5] = [
    Spec {
        name: "histogram collection vs numpy np.histogram",
        goal: ">= 5x",
        rows: |r| {
            let row =
                |c: &CollectionRow| (format!("{}, {} bins", c.array, c.bins), div(c.np_histogram_s, c.ours_observe_s));
            r.micro.collection.iter().map(row).collect()
        },
        at_least: true,
        limit: 5.0,
    },
    Spec {
        name: "entropy search vs ORT get_entropy_threshold",
        goal: ">= 100x",
        rows: |r| r.micro.entropy.iter().map(|e| (e.name.clone(), div(e.ort_s, e.ours_s))).collect(),
        at_least: true,
        limit: 100.0,
    },
    Spec {
        name: "whole calibration wall time, ours / ORT",
        goal: "<= 0.5x",
        rows: |r| r.methods.iter().map(|m| (m.method.clone(), div(m.ours.run.wall_s, m.ort.run.wall_s))).collect(),
        at_least: false,
        limit: 0.5,
    },
    Spec {
        name: "calibration pass / FP32 inference alone on the same features",
        goal: "<= 1.1x",
        rows: |r| {
            pass_views(r).into_iter().map(|v| (v.method, Some(v.ratio.median).filter(|x| x.is_finite()))).collect()
        },
        at_least: false,
        limit: 1.1,
    },
    Spec {
        name: "our peak RSS at --cal-num / at --memory-cal-num",
        goal: "<= 1.2x",
        rows: |r| {
            let row = |m: &MemoryRow| (m.method.clone(), div(m.ours_large.run.peak_rss_mb, m.ours_small.peak_rss_mb));
            r.memory.iter().map(row).collect()
        },
        at_least: false,
        limit: 1.2,
    },
];

/// The issues' targets, from the report's numbers.
pub(super) fn targets(report: &Report) -> Vec<Target> {
    TARGETS
        .iter()
        .map(|t| {
            let worse = |a: f64, b: f64| if t.at_least { a < b } else { a > b };
            let worst = (t.rows)(report)
                .into_iter()
                .filter_map(|(label, ratio)| Some((label, ratio?)))
                .reduce(|w, x| if worse(x.1, w.1) { x } else { w });
            match worst {
                Some((label, r)) => Target {
                    name: t.name,
                    goal: t.goal,
                    measured: Some(format!("{r:.2}x (worst: {label})")),
                    pass: Some(if t.at_least { r >= t.limit } else { r <= t.limit }),
                },
                None => Target { name: t.name, goal: t.goal, measured: None, pass: None },
            }
        })
        .collect()
}

pub(super) fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "—".to_owned(), |x| format!("{x:.digits$}"))
}

pub(super) fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_owned(), |x| format!("{:.3} %", x * 100.0))
}

/// A count that may be missing, as `?`.
fn count<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "?".to_owned(), |x| x.to_string())
}

pub(super) fn verdict(pass: Option<bool>) -> &'static str {
    match pass {
        Some(true) => "PASS",
        Some(false) => "MISS",
        None => "not measured",
    }
}

/// The markdown report.
pub(super) fn render_markdown(r: &Report) -> String {
    let mut md = String::new();
    let s = &r.setup;
    let v = |k: &str| s.versions.get(k).map_or("?", String::as_str);
    let _ = writeln!(md, "# qdq vs ONNX Runtime's Python quantization\n");
    let _ = writeln!(md, "Command: `{}`\n", r.command);
    let _ = writeln!(
        md,
        "Model `{}`; calibration on the first {} questions of `{}` ({} features, sequence length {} padded, doc \
         stride {}, batch 1); F1 on the first {} questions of `{}`. ORT {} (Python {}, numpy {}, onnx {}), fed {} \
         questions per collect_data call; ORT's calibrators limited to the {} tensors `qdq calibrate --policy \
         ort-compatible` collects; both tables quantized with ORT's seed-001 placement. {} \
         CPUs; git {}.\n",
        s.model.display(),
        s.cal_num,
        s.calibration_data.display(),
        count(s.features),
        s.seq_len,
        s.doc_stride,
        s.samples,
        s.dataset.display(),
        v("onnxruntime"),
        v("python"),
        v("numpy"),
        v("onnx"),
        s.stride,
        s.tensors,
        s.cpus,
        s.git.as_deref().unwrap_or("?"),
    );

    let _ = writeln!(md, "## Targets\n\n| target | goal | measured | verdict |\n|---|---|---|---|");
    for t in targets(r) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            t.name,
            t.goal,
            t.measured.as_deref().unwrap_or("—"),
            verdict(t.pass)
        );
    }
    let noisy = disturbed(r);
    if noisy.is_empty() {
        let _ = writeln!(md, "\nNo other process used more than a tenth of any timed step's wall time in CPU.");
    } else {
        let _ = writeln!(md, "\nDisturbed timings (other processes busy while they ran):\n\n- {}", noisy.join("\n- "));
    }
    calibration_section(&mut md, r);
    pass_section(&mut md, r);
    memory_section(&mut md, r);
    micro_section(&mut md, r);
    if !r.analysis.is_empty() {
        let _ = writeln!(md, "\n## What limits a missed target\n");
        for n in &r.analysis {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}

/// The worst tensor of a range comparison: `max (`tensor`: ours vs ort)`.
fn worst_tensor(ranges: &RangeAgreement) -> Option<String> {
    let w = ranges.worst.as_ref()?;
    Some(format!(
        "{} (`{}`: {} vs {})",
        pct(ranges.max_rel_diff),
        w.tensor,
        num(Some(w.ours_amax), 4),
        num(Some(w.ort_amax), 4)
    ))
}

/// One method's row of the calibration table; ORT's errors and skipped runs go to `errors` and `skipped`.
fn method_row(md: &mut String, m: &MethodRow, (errors, skipped): (&mut Vec<String>, &mut Vec<String>)) {
    let name = &m.method;
    let (ours, ort) = (&m.ours.run, &m.ort.run);
    let est = m.ort.estimated_wall_s;
    let ratio = match (div(ours.wall_s, ort.wall_s), div(ours.wall_s, est)) {
        (Some(x), _) => format!("{x:.2}x"),
        (None, Some(x)) => format!("≈ {x:.2}x (est.)"),
        _ => "—".to_owned(),
    };
    let ort_wall = match (ort.wall_s, est) {
        (Some(w), _) => format!("{w:.1}"),
        (None, Some(e)) => format!("skipped (≈ {e:.0} est.)"),
        _ => "—".to_owned(),
    };
    let ranges = m.ranges.as_ref().and_then(worst_tensor).unwrap_or_else(|| "—".to_owned());
    let f1 = |v: &Option<Score>| match v.as_ref().and_then(|v| v.em.zip(v.f1)) {
        Some((em, f1)) => format!("{f1:.2} (EM {em:.2})"),
        None => "—".to_owned(),
    };
    let _ = writeln!(
        md,
        "| {name} | {} | {ort_wall} | {ratio} | {} | {} | {ranges} | {} | {} | {} |",
        num(ours.wall_s, 1),
        num(ours.peak_rss_mb, 0),
        num(ort.peak_rss_mb, 0),
        pct(m.ranges.as_ref().and_then(|r| r.median_rel_diff)),
        f1(&m.f1.ours),
        f1(&m.f1.ort),
    );
    if let Some(e) = &m.ort.error {
        errors.push(format!("- ORT {name}: `{e}`"));
    }
    if let Some(why) = &m.ort.skipped {
        let est = m.ort.estimate.as_ref().map(|e| format!(" Estimate: {e}.")).unwrap_or_default();
        skipped.push(format!("- ORT {name}: {why}.{est}"));
    }
}

/// ORT's phases per method, as its script timed them.
fn ort_phases(md: &mut String, r: &Report) {
    let _ = writeln!(
        md,
        "\nORT's phases (seconds inside its script):\n\n| method | create_calibrator | inference (session.run) | collect_data other (copies, histograms) | compute_data |\n|---|---:|---:|---:|---:|"
    );
    for m in &r.methods {
        let p = m.ort.phases.clone().unwrap_or_default();
        let other = div(p.collect_data.zip(p.inference).map(|(a, b)| a - b), Some(1.0));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            m.method,
            num(p.create_calibrator, 1),
            num(p.inference, 1),
            num(other, 1),
            num(p.compute_data, 1)
        );
    }
}

fn calibration_section(md: &mut String, r: &Report) {
    let _ = writeln!(
        md,
        "\n## Calibration, per method ({} questions)\n\n| method | ours wall s | ORT wall s | ours / ORT | ours peak RSS MB | ORT peak RSS MB | ranges: max rel. diff of amax (worst tensor) | median | INT8 F1 ours | INT8 F1 ORT |\n|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
        r.setup.cal_num
    );
    let (mut errors, mut skipped) = (Vec::new(), Vec::new());
    for m in &r.methods {
        method_row(md, m, (&mut errors, &mut skipped));
    }
    if let Some(fp32) = r.fp32.as_ref().and_then(|s| s.f1) {
        let em = r.fp32.as_ref().and_then(|s| s.em);
        let _ = writeln!(md, "\nFP32 on the same questions: F1 {fp32:.2} (EM {}).", num(em, 2));
    }
    if let Some(one) = &r.one_pass {
        let _ = writeln!(
            md,
            "Ours, all methods from one pass (`{}`): {} s, peak RSS {} MB.",
            one.flags,
            num(one.run.wall_s, 1),
            num(one.run.peak_rss_mb, 0)
        );
    }
    if let Some(own) = &r.own_workflow {
        let _ = writeln!(
            md,
            "Ours as a user runs it (`qdq calibrate` with its defaults: features padded to their batch's longest, not \
             to {}; the preset for `--ep cpu` with its smoothing pass; mse): {} s, peak RSS {} MB. The rows above pad \
             every feature to {}, as the seeds do.",
            r.setup.seq_len,
            num(own.run.wall_s, 1),
            num(own.run.peak_rss_mb, 0),
            r.setup.seq_len
        );
    }
    if !errors.is_empty() {
        let _ = writeln!(md, "\nErrors of ORT's tools (recorded, not fatal):\n\n{}", errors.join("\n"));
    }
    if !skipped.is_empty() {
        let _ = writeln!(md, "\nNot run:\n\n{}", skipped.join("\n"));
    }
    ort_phases(md, r);
}

/// One method's calibration pass against FP32 inference alone on the same features: from the alternating rounds
/// (medians), or from a report written before them, from the single calibration run and the single inference run.
pub(super) struct PassView {
    pub(super) method: String,
    pub(super) sessions: Option<usize>,
    pub(super) rounds: usize,
    pub(super) pass_s: f64,
    pub(super) in_ort_s: f64,
    pub(super) statistics_s: f64,
    pub(super) inference_s: f64,
    pub(super) ratio: crate::bench::rounds::Ratio,
    /// Inference alone in one session, and the pass against it (None in a report written before the rounds).
    pub(super) one_session: Option<(f64, crate::bench::rounds::Ratio)>,
    pub(super) values_observed: Option<u64>,
}

pub(super) fn pass_views(r: &Report) -> Vec<PassView> {
    let observed = |method: &str| r.methods.iter().find(|m| m.method == method).and_then(|m| m.ours.values_observed);
    let mid = |v: &[f64]| crate::bench::rounds::Ratio::of(v.to_vec()).median;
    if !r.pass_rounds.is_empty() {
        return r
            .pass_rounds
            .iter()
            .map(|p| PassView {
                method: p.method.clone(),
                sessions: p.sessions,
                rounds: p.pass_s.len(),
                pass_s: mid(&p.pass_s),
                in_ort_s: mid(&p.in_ort_s),
                statistics_s: mid(&p.statistics_s),
                inference_s: mid(&p.inference_s),
                ratio: p.ratio(),
                one_session: Some((mid(&p.one_session_inference_s), p.ratio_to_one_session())),
                values_observed: observed(&p.method),
            })
            .collect();
    }
    let floor = r.inference_on_calibration_features.seconds().unwrap_or(f64::NAN);
    r.methods
        .iter()
        .filter_map(|m| {
            let p = m.ours.pass?;
            Some(PassView {
                method: m.method.clone(),
                sessions: p.sessions,
                rounds: 1,
                pass_s: p.pass_seconds,
                in_ort_s: p.inference_seconds,
                statistics_s: p.statistics_seconds,
                inference_s: floor,
                ratio: crate::bench::rounds::Ratio::of(vec![p.pass_seconds / floor]),
                one_session: None,
                values_observed: m.ours.values_observed,
            })
        })
        .collect()
}

/// The calibration pass beside FP32 inference alone on the same features: what the statistics cost.
fn pass_section(md: &mut String, r: &Report) {
    let views = pass_views(r);
    let rounds = views.first().map_or(0, |v| v.rounds);
    let features = count(r.inference_on_calibration_features.features);
    let ratio = |x: &crate::bench::rounds::Ratio| {
        if rounds > 1 { format!("{:.2}x [{:.2}, {:.2}]", x.median, x.min, x.max) } else { format!("{:.2}x", x.median) }
    };
    if views.iter().all(|v| v.one_session.is_none()) {
        let _ = writeln!(
            md,
            "\n## Calibration at the cost of inference\n\nOur calibration pass (first batch to ranges computed, session building left out) beside FP32 inference alone on the same {features} features (`qdq eval --pad-to-max --batch 1`), one run each.\n\n| method | pass s | in ONNX Runtime s | statistics s | inference alone s | pass / inference alone |\n|---|---:|---:|---:|---:|---:|"
        );
        for v in &views {
            let _ = writeln!(
                md,
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                v.method,
                v.pass_s,
                v.in_ort_s,
                v.statistics_s,
                v.inference_s,
                ratio(&v.ratio)
            );
        }
        return;
    }
    let _ = writeln!(
        md,
        "\n## Calibration at the cost of inference\n\nOur calibration pass (first batch to ranges computed, session building left out) beside FP32 inference alone on the same {features} features (`qdq eval --pad-to-max --batch 1`, wall time) with as many sessions side by side as the pass ran (`--workers`: the same layout, so the difference is reading the calibrated tensors (an `Observe` node on each on the CPU EP) and the statistics; the target) and with one session (`qdq eval`'s default), run in turn for {rounds} rounds per method (the compared methods with the settings above, and mse, qdq's default, with its own): medians, and each ratio's median [min, max] over the rounds. The time in ONNX Runtime and in statistics is each session's own (mean over the sessions): each session folds its tensors on its own thread as it computes them, while the other runs, on the same cores.\n\n| method | sessions | pass s | in ONNX Runtime s | statistics s | inference alone s | pass / inference alone | one session s | pass / one session |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for v in &views {
        let (one_s, one_ratio) =
            v.one_session.as_ref().map_or(("—".to_owned(), "—".to_owned()), |(s, x)| (format!("{s:.1}"), ratio(x)));
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {one_s} | {one_ratio} |",
            v.method,
            v.sessions.map_or("—".to_owned(), |n| n.to_string()),
            v.pass_s,
            v.in_ort_s,
            v.statistics_s,
            v.inference_s,
            ratio(&v.ratio),
        );
    }
}

fn memory_section(md: &mut String, r: &Report) {
    let _ = writeln!(
        md,
        "\n## Memory: calibration peak RSS (MB)\n\n| method | ours @{0} | ours @{1} | ours ratio | ORT @{0} | ORT @{1} | ORT ratio |\n|---|---:|---:|---:|---:|---:|---:|",
        r.setup.memory_cal_num, r.setup.cal_num
    );
    let ratio = |a: Option<f64>, b: Option<f64>| div(b, a).map_or("—".to_owned(), |x| format!("{x:.2}x"));
    for m in &r.memory {
        let (os, ol) = (m.ours_small.peak_rss_mb, m.ours_large.run.peak_rss_mb);
        let (rs, rl) = (m.ort_small.run.peak_rss_mb, m.ort_large.run.peak_rss_mb);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            m.method,
            num(os, 0),
            num(ol, 0),
            ratio(os, ol),
            num(rs, 0),
            num(rl, 0),
            ratio(rs, rl),
        );
    }
}

fn micro_section(md: &mut String, r: &Report) {
    let micro = &r.micro;
    let _ = writeln!(
        md,
        "\n## Micro-benchmarks (median of {} runs)\n\nHistogram collection of standard normal float32 values (the same .npy \
         file for both): ours = `CalibState::observe` (min/max scan + signed histogram, {} rayon threads; `1 thread` = \
         RAYON_NUM_THREADS=1), `min/max scan` = the same collecting min/max only, `histogram only` = \
         `Histogram::observe`; numpy = `np.histogram(x, bins, range=(-t, t))`; ORT = `HistogramCollector.collect_value` \
         (nanmin, nanmax, np.histogram).\n\n| array | values | bins | ours ms | ours 1 thread ms | ours min/max scan ms | ours histogram only ms (1 thread) | numpy ms | ORT collect_value ms | numpy / ours |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        r.setup.micro_repeat,
        count(micro.threads)
    );
    let ms = |v: Option<f64>| num(v.map(|x| x * 1e3), 2);
    for c in &micro.collection {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} |",
            c.array,
            c.values,
            c.bins,
            ms(c.ours_observe_s),
            ms(c.ours_observe_1t_s),
            ms(c.ours_minmax_only_s),
            ms(c.ours_histogram_only_s),
            ms(c.ours_histogram_only_1t_s),
            ms(c.np_histogram_s),
            ms(c.ort_collect_value_s),
            div(c.np_histogram_s, c.ours_observe_s).map_or("—".to_owned(), |x| format!("{x:.1}x")),
        );
    }
    let _ = writeln!(
        md,
        "\nEntropy threshold search (num_quantized_bins 255) on identical histograms (ours exported):\n\n| histogram | bins | ours candidates | ours ms | ORT candidates | ORT s | ORT / ours | ours threshold | ORT threshold |\n|---|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for e in &micro.entropy {
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | [{}, {}] |",
            e.name,
            e.bins,
            num(e.ours_candidates, 0),
            ms(e.ours_s),
            num(e.ort_candidates, 0),
            num(e.ort_s, 2),
            div(e.ort_s, e.ours_s).map_or("—".to_owned(), |x| format!("{x:.0}x")),
            num(e.ours_threshold, 4),
            num(e.ort_threshold.map(|t| t[0]), 4),
            num(e.ort_threshold.map(|t| t[1]), 4),
        );
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The run

/// Adds the targets and notes to `report`, writes it and its markdown into `out`, and prints the markdown.
pub(super) fn write_report(report: &mut Report, out: &Path) -> Result<()> {
    report.analysis = analysis(report);
    report.targets = targets(report)
        .into_iter()
        .map(|t| TargetRecord { target: t.name.into(), goal: t.goal.into(), measured: t.measured, pass: t.pass })
        .collect();
    let md = render_markdown(report);
    crate::workspace::write_atomic(&out.join("vs_python.json"), serde_json::to_string_pretty(report)?.as_bytes())?;
    crate::workspace::write_atomic(&out.join("vs_python.md"), md.as_bytes())?;
    print!("{md}");
    eprintln!("xtask: report written to {} and vs_python.json", out.join("vs_python.md").display());
    Ok(())
}

/// For a method whose ORT calibration was skipped: ORT's wall time estimated as its percentile run's time outside
/// compute_data (the same histogram collection) plus one threshold search per tensor at the time ORT took on the
/// micro-benchmark's normal histogram of the same size.
pub(super) fn estimate_skipped(r: &mut Report) {
    let tensors = r.setup.tensors as f64;
    let search = r.micro.entropy.iter().find(|e| e.name.starts_with("normal")).and_then(|e| e.ort_s);
    let base = r
        .methods
        .iter()
        .find(|m| m.method == "percentile")
        .and_then(|m| Some(m.ort.run.wall_s? - m.ort.phases.as_ref()?.compute_data?));
    let Some(search) = search else { return };
    for m in &mut r.methods {
        if m.ort.skipped.is_some() {
            m.ort.estimated_wall_s = Some(base.unwrap_or(0.0) + tensors * search);
            m.ort.estimate = Some(format!(
                "{tensors} tensors x {search:.1} s per threshold search (micro-benchmark){}",
                base.map(|b| format!(" + {b:.1} s of collection as in ORT's percentile run")).unwrap_or_default()
            ));
        }
    }
}

/// Where a target is missed, what limits it, in numbers; and where the two tools' ranges disagree, why.
pub(super) fn analysis(r: &Report) -> Vec<String> {
    let mut notes: Vec<String> = r.methods.iter().filter_map(|m| wall_time_note(r, m)).collect();
    let targets = targets(r);
    if targets[0].pass == Some(false)
        && let Some(row) = main_collection_row(r)
    {
        notes.push(collection_note(r, row, &targets[0]));
    }
    if targets[1].pass == Some(false) {
        notes.push(format!(
            "entropy search: {} against >= 100x (see the micro-benchmark table for the candidates each side searches).",
            targets[1].measured.as_deref().unwrap_or("?")
        ));
    }
    if targets[3].pass == Some(false) {
        notes.extend(pass_views(r).iter().filter_map(pass_note));
    }
    if targets[4].pass == Some(false) {
        for m in &r.memory {
            if let (Some(a), Some(b)) = (m.ours_small.peak_rss_mb, m.ours_large.run.peak_rss_mb) {
                notes.push(format!(
                    "peak RSS, {}: {a:.0} MB at {} questions, {b:.0} MB at {} (+{:.0} MB).",
                    m.method,
                    r.setup.memory_cal_num,
                    r.setup.cal_num,
                    b - a
                ));
            }
        }
    }
    notes.extend(r.methods.iter().filter_map(|m| entropy_note(r, m)));
    notes
}

/// Where a method's calibration pass goes beyond FP32 inference alone: ONNX Runtime running the augmented model,
/// and the statistics (their cost per value observed).
fn pass_note(v: &PassView) -> Option<String> {
    if v.ratio.median <= 1.1 {
        return None;
    }
    let sessions = v.sessions.unwrap_or(1);
    // Each session observed its share of the values.
    let per_value = v.values_observed.filter(|&n| n > 0).map(|n| v.statistics_s * sessions as f64 * 1e9 / n as f64);
    let each = if sessions > 1 { format!(" each of {sessions} sessions spent") } else { String::new() };
    // What the pass spent outside the sessions' runs: preparing their batches and the ranges after them (for entropy
    // its threshold search over every tensor's histogram).
    let outside = v.pass_s - v.in_ort_s - v.statistics_s;
    let rest = if outside >= 0.05 {
        let ranges = if v.method == "entropy" { "the ranges: the entropy threshold search" } else { "the ranges" };
        format!(", and {outside:.1} s outside the runs (preparing batches, {ranges})")
    } else {
        String::new()
    };
    let rounds = if v.rounds > 1 { format!("median of {} rounds", v.rounds) } else { "one run".to_owned() };
    Some(format!(
        "calibration pass, {}: {:.1} s against {:.1} s of FP32 inference alone ({:.2}x, {rounds}):{each} {:.1} s \
         in ONNX Runtime and {:.1} s on statistics ({} ns per value observed{}){rest}. The statistics take CPU \
         time ONNX Runtime would otherwise use: on these cores they are hidden only as far as inference leaves a core \
         idle.",
        v.method,
        v.pass_s,
        v.inference_s,
        v.ratio.median,
        v.in_ort_s,
        v.statistics_s,
        num(per_value, 2),
        if sessions > 1 { ", in its session" } else { "" },
    ))
}

/// Why a method's whole calibration misses 0.5x of ORT's time: where our seconds and ORT's go.
fn wall_time_note(r: &Report, m: &MethodRow) -> Option<String> {
    let (ours, ort) = (&m.ours, &m.ort);
    let ratio = div(ours.run.wall_s, ort.run.wall_s)?;
    if ratio <= 0.5 {
        return None;
    }
    let inf = &r.inference_on_calibration_features;
    let floor = div(inf.ms_per_feature.zip(inf.features).map(|(ms, n)| ms * n as f64 / 1e3), Some(1.0));
    let name = &m.method;
    let (wall, total) = (ours.run.wall_s.unwrap_or(f64::NAN), ort.run.wall_s.unwrap_or(f64::NAN));
    let observed = ours.values_observed.map(|n| n as f64);
    let stats = main_collection_row(r)
        .and_then(|row| ns_per_value(row, if name == "minmax" { row.ours_minmax_only_s } else { row.ours_observe_s }))
        .zip(observed)
        .map(|(ns, n)| ns * n / 1e9);
    let mut s = format!("whole calibration, {name}: ours {wall:.1} s vs ORT {total:.1} s ({ratio:.2}x).");
    if let Some(p) = ours.pipeline_s {
        let _ = write!(
            s,
            " Ours: {p:.1} s in the calibration pass and {:.1} s around it (model load, tokenization, ONNX Runtime load, writing tables).",
            wall - p
        );
        if let Some(fl) = floor {
            let _ = write!(
                s,
                " Within the pass, FP32 inference alone on the same features takes {fl:.1} s (`qdq eval`, {} ms/feature)",
                num(inf.ms_per_feature, 1)
            );
            match stats {
                Some(c) => {
                    let _ = write!(
                        s,
                        ", the statistics about {c:.1} s ({:.2e} values at the micro-benchmark's rate)",
                        observed.unwrap_or(0.0)
                    );
                    let rest = p - fl - c;
                    if rest > 0.0 {
                        let _ = write!(
                            s,
                            ", and the remaining {rest:.1} s is the cost of running the augmented model (an `Observe` node reading each calibrated tensor) and of computing the ranges."
                        );
                    } else {
                        s.push_str(", which together already exceed the pass: they overlap or the estimates are high.");
                    }
                }
                None => s.push('.'),
            }
        }
    }
    ort_side(&mut s, ort, (wall, total), floor);
    Some(s)
}

/// The ORT side of [`wall_time_note`]: where its `total` seconds go, and how FP32 inference alone (`floor`) bounds
/// ours (`wall`).
fn ort_side(s: &mut String, ort: &OrtRun, (wall, total): (f64, f64), floor: Option<f64>) {
    let ph = ort.phases.clone().unwrap_or_default();
    if let Some(run) = ph.inference {
        let _ = write!(
            *s,
            " ORT: {run:.1} s in session.run (its augmented model, optimisation disabled), {} s in the rest of collect_data, {} s in compute_data, {} s outside both (Python start-up and imports, create_calibrator, writing).",
            div(ph.collect_data.map(|c| c - run), Some(1.0)).map_or("?".into(), |x| format!("{x:.1}")),
            num(ph.compute_data, 1),
            div(ph.collect_data.zip(ph.compute_data).map(|(c, d)| total - c - d), Some(1.0))
                .map_or("?".into(), |x| format!("{x:.1}")),
        );
    }
    if let Some(fl) = floor {
        let share = fl / total;
        let _ = write!(*s, " FP32 inference alone is {share:.2}x of ORT's whole run");
        if share > 0.5 {
            s.push_str(": with free statistics and no overhead ours would still miss 0.5x; the model's inference, which both tools leave to ONNX Runtime, is what limits it.");
        } else {
            let _ = write!(
                s,
                ", so {:.1} s of ours above 0.5x of ORT's run are in the augmented model, the statistics and the process around the pass.",
                wall - 0.5 * total
            );
        }
    }
}

/// Why histogram collection misses 5x numpy: the per-value costs of its two steps and how they scale.
fn collection_note(r: &Report, row: &CollectionRow, target: &Target) -> String {
    let threads = count(r.micro.threads);
    let ns = |v: Option<f64>| ns_per_value(row, v).map_or("?".to_owned(), |x| format!("{x:.2}"));
    let best = ns_per_value(row, row.ours_minmax_only_1t_s)
        .zip(ns_per_value(row, row.ours_histogram_only_1t_s))
        .map(|(a, b)| (a + b) / r.micro.threads.unwrap_or(1).max(1) as f64);
    let mut s = format!(
        "histogram collection: {} (numpy {} ns/value, one thread). Ours on {} values, {} bins: {} ns/value with {threads} threads, {} ns/value on one thread, of which the min/max scan is {} and the binning {} ns/value (one thread).",
        target.measured.as_deref().unwrap_or("?"),
        ns(row.np_histogram_s),
        row.values,
        row.bins,
        ns(row.ours_observe_s),
        ns(row.ours_observe_1t_s),
        ns(row.ours_minmax_only_1t_s),
        ns(row.ours_histogram_only_1t_s),
    );
    if let (Some(b), Some(np)) = (best, ns_per_value(row, row.np_histogram_s)) {
        let _ = write!(
            s,
            " Even with perfect scaling over these threads the step would take {b:.2} ns/value, {:.1}x numpy: the per-value cost of the binning (bin index and a scattered increment per value) on one core is what limits it; 5x needs {:.2} ns/value per step.",
            np / b,
            np / 5.0
        );
    }
    if let Some(speedup) = div(row.ours_observe_1t_s, row.ours_observe_s) {
        let _ = write!(s, " With {threads} threads the step runs at {speedup:.2}x the speed of one thread.");
    }
    let small = r
        .micro
        .collection
        .iter()
        .filter(|c| c.array == row.array)
        .min_by_key(|c| c.bins)
        .filter(|c| c.bins != row.bins);
    if let Some(small) = small
        && let (Some(a), Some(b)) =
            (ns_per_value(small, small.ours_histogram_only_1t_s), ns_per_value(row, row.ours_histogram_only_1t_s))
    {
        let _ = write!(
            s,
            " Binning costs {a:.2} ns/value with {} bins and {b:.2} with {}: {}.",
            small.bins,
            row.bins,
            if (b / a - 1.0).abs() < 0.15 {
                "the table size hardly matters, so the cost is the work per value, not cache misses on the counts"
            } else {
                "the table size matters, so cache misses on the counts are part of the cost"
            }
        );
    }
    s
}

/// Why the entropy ranges of the two tools differ by more than 5 %.
fn entropy_note(r: &Report, m: &MethodRow) -> Option<String> {
    let ranges = m.ranges.as_ref()?;
    if m.method != "entropy" || ranges.max_rel_diff.is_none_or(|d| d <= 0.05) {
        return None;
    }
    let mut s = format!(
        "entropy ranges: ours and ORT's differ by up to {}, median {}.",
        worst_tensor(ranges).unwrap_or_else(|| pct(ranges.max_rel_diff)),
        pct(ranges.median_rel_diff)
    );
    if let Some(e) = r.micro.entropy.iter().find(|e| !e.name.starts_with("normal")) {
        let _ = write!(
            s,
            " The searches differ even on an identical histogram (`{}`: ours {}, ORT [{}, {}]):",
            e.name,
            num(e.ours_threshold, 4),
            num(e.ort_threshold.map(|t| t[0]), 4),
            num(e.ort_threshold.map(|t| t[1]), 4)
        );
    }
    s.push_str(
        " ORT's get_entropy_threshold expands the merged distribution q into an int64 array (each bin's share is truncated to an integer), leaves q at zero on the bins past the last whole group, and slices 2i+1 bins around the zero bin; ours keeps q fractional. Its histograms also differ (ORT: 8001 bins over [-max|x|, max|x|], widened as batches arrive; ours: 8001 bins per side on a power-of-two grid).",
    );
    Some(s)
}
