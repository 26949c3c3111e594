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

pub(super) fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

pub(super) fn div(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?).filter(|r| r.is_finite())
}

/// `v[path[0]][path[1]]...`
pub(super) fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| &v[*k])
}

/// A target on a ratio `numerator / denominator` over the rows of a list of the report; judged on the worst row.
pub(super) struct Spec {
    pub(super) name: &'static str,
    pub(super) goal: &'static str,
    pub(super) rows: &'static [&'static str],
    pub(super) label: fn(&Value) -> String,
    pub(super) numerator: &'static [&'static str],
    pub(super) denominator: &'static [&'static str],
    /// The ratio must be at least (true) or at most (false) `limit`.
    pub(super) at_least: bool,
    pub(super) limit: f64,
}

pub(super) const TARGETS: [Spec; 4] = [
    Spec {
        name: "histogram collection vs numpy np.histogram",
        goal: ">= 5x",
        rows: &["micro", "collection"],
        label: |c| format!("{}, {} bins", c["array"].as_str().unwrap_or("?"), c["bins"]),
        numerator: &["np_histogram_s"],
        denominator: &["ours_observe_s"],
        at_least: true,
        limit: 5.0,
    },
    Spec {
        name: "entropy search vs ORT get_entropy_threshold",
        goal: ">= 100x",
        rows: &["micro", "entropy"],
        label: |e| e["name"].as_str().unwrap_or("?").to_owned(),
        numerator: &["ort_s"],
        denominator: &["ours_s"],
        at_least: true,
        limit: 100.0,
    },
    Spec {
        name: "whole calibration wall time, ours / ORT",
        goal: "<= 0.5x",
        rows: &["methods"],
        label: |m| m["method"].as_str().unwrap_or("?").to_owned(),
        numerator: &["ours", "wall_s"],
        denominator: &["ort", "wall_s"],
        at_least: false,
        limit: 0.5,
    },
    Spec {
        name: "our peak RSS at --cal-num / at --memory-cal-num",
        goal: "<= 1.2x",
        rows: &["memory"],
        label: |m| m["method"].as_str().unwrap_or("?").to_owned(),
        numerator: &["ours_large", "peak_rss_mb"],
        denominator: &["ours_small", "peak_rss_mb"],
        at_least: false,
        limit: 1.2,
    },
];

/// The four targets of the issue, from the report's numbers.
pub(super) fn targets(report: &Value) -> Vec<Target> {
    TARGETS
        .iter()
        .map(|t| {
            let rows = at(report, t.rows).as_array().map(Vec::as_slice).unwrap_or_default();
            let worse = |a: f64, b: f64| if t.at_least { a < b } else { a > b };
            let worst = rows
                .iter()
                .filter_map(|row| Some(((t.label)(row), div(f(at(row, t.numerator)), f(at(row, t.denominator)))?)))
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

pub(super) fn num(v: &Value, digits: usize) -> String {
    v.as_f64().map_or_else(|| "—".to_owned(), |x| format!("{x:.digits$}"))
}

pub(super) fn pct(v: &Value) -> String {
    v.as_f64().map_or_else(|| "—".to_owned(), |x| format!("{:.3} %", x * 100.0))
}

pub(super) fn verdict(pass: Option<bool>) -> &'static str {
    match pass {
        Some(true) => "PASS",
        Some(false) => "MISS",
        None => "not measured",
    }
}

/// The markdown report.
pub(super) fn render_markdown(r: &Value) -> String {
    let mut md = String::new();
    let s = &r["setup"];
    let _ = writeln!(md, "# qdq vs ONNX Runtime's Python quantization\n");
    let _ = writeln!(md, "Command: `{}`\n", r["command"].as_str().unwrap_or(""));
    let _ = writeln!(
        md,
        "Model `{}`; calibration on the first {} questions of `{}` ({} features, sequence length {} padded, doc \
         stride {}, batch 1); F1 on the first {} questions of `{}`. ORT {} (Python {}, numpy {}, onnx {}), fed {} \
         questions per collect_data call; ORT's calibrators limited to the {} tensors `qdq calibrate --policy \
         ort-compatible` collects; both tables quantized with ORT's seed-001 placement. {} \
         CPUs; git {}.\n",
        s["model"].as_str().unwrap_or("?"),
        s["cal_num"],
        s["calibration_data"].as_str().unwrap_or("?"),
        s["features"],
        s["seq_len"],
        s["doc_stride"],
        s["samples"],
        s["dataset"].as_str().unwrap_or("?"),
        s["versions"]["onnxruntime"].as_str().unwrap_or("?"),
        s["versions"]["python"].as_str().unwrap_or("?"),
        s["versions"]["numpy"].as_str().unwrap_or("?"),
        s["versions"]["onnx"].as_str().unwrap_or("?"),
        s["stride"],
        s["tensors"],
        s["cpus"],
        s["git"].as_str().unwrap_or("?"),
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

    let mut noisy = Vec::new();
    disturbed(r, &mut noisy);
    noisy.sort();
    noisy.dedup();
    if noisy.is_empty() {
        let _ = writeln!(md, "\nNo other process used more than a tenth of any timed step's wall time in CPU.");
    } else {
        let _ = writeln!(md, "\nDisturbed timings (other processes busy while they ran):\n\n- {}", noisy.join("\n- "));
    }
    let _ = writeln!(
        md,
        "\n## Calibration, per method ({} questions)\n\n| method | ours wall s | ORT wall s | ours / ORT | ours peak RSS MB | ORT peak RSS MB | ranges: max rel. diff of amax (worst tensor) | median | INT8 F1 ours | INT8 F1 ORT |\n|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
        s["cal_num"]
    );
    let (mut errors, mut skipped) = (Vec::new(), Vec::new());
    for m in r["methods"].as_array().into_iter().flatten() {
        let name = m["method"].as_str().unwrap_or("?");
        let est = f(&m["ort"]["estimated_wall_s"]);
        let ratio = match (div(f(&m["ours"]["wall_s"]), f(&m["ort"]["wall_s"])), div(f(&m["ours"]["wall_s"]), est)) {
            (Some(x), _) => format!("{x:.2}x"),
            (None, Some(x)) => format!("≈ {x:.2}x (est.)"),
            _ => "—".to_owned(),
        };
        let ort_wall = match (f(&m["ort"]["wall_s"]), est) {
            (Some(w), _) => format!("{w:.1}"),
            (None, Some(e)) => format!("skipped (≈ {e:.0} est.)"),
            _ => "—".to_owned(),
        };
        let worst = &m["ranges"]["worst"];
        let ranges = if worst.is_object() {
            format!(
                "{} (`{}`: {} vs {})",
                pct(&m["ranges"]["max_rel_diff"]),
                worst["tensor"].as_str().unwrap_or("?"),
                num(&worst["ours_amax"], 4),
                num(&worst["ort_amax"], 4)
            )
        } else {
            "—".to_owned()
        };
        let f1 = |v: &Value| match (f(&v["em"]), f(&v["f1"])) {
            (Some(em), Some(f1)) => format!("{f1:.2} (EM {em:.2})"),
            _ => "—".to_owned(),
        };
        let _ = writeln!(
            md,
            "| {name} | {} | {ort_wall} | {ratio} | {} | {} | {ranges} | {} | {} | {} |",
            num(&m["ours"]["wall_s"], 1),
            num(&m["ours"]["peak_rss_mb"], 0),
            num(&m["ort"]["peak_rss_mb"], 0),
            pct(&m["ranges"]["median_rel_diff"]),
            f1(&m["f1"]["ours"]),
            f1(&m["f1"]["ort"]),
        );
        if let Some(e) = m["ort"]["error"].as_str() {
            errors.push(format!("- ORT {name}: `{e}`"));
        }
        if let Some(why) = m["ort"]["skipped"].as_str() {
            let est = m["ort"]["estimate"].as_str().map(|e| format!(" Estimate: {e}.")).unwrap_or_default();
            skipped.push(format!("- ORT {name}: {why}.{est}"));
        }
    }
    if let Some(fp32) = r["fp32"]["f1"].as_f64() {
        let _ = writeln!(md, "\nFP32 on the same questions: F1 {fp32:.2} (EM {}).", num(&r["fp32"]["em"], 2));
    }
    if let Some(one) = r["one_pass"].as_object() {
        let _ = writeln!(
            md,
            "Ours, all methods from one pass (`{}`): {} s, peak RSS {} MB.",
            one.get("flags").and_then(Value::as_str).unwrap_or(""),
            num(&one["wall_s"], 1),
            num(&one["peak_rss_mb"], 0)
        );
    }
    if !errors.is_empty() {
        let _ = writeln!(md, "\nErrors of ORT's tools (recorded, not fatal):\n\n{}", errors.join("\n"));
    }
    if !skipped.is_empty() {
        let _ = writeln!(md, "\nNot run:\n\n{}", skipped.join("\n"));
    }
    let _ = writeln!(
        md,
        "\nORT's phases (seconds inside its script):\n\n| method | create_calibrator | inference (session.run) | collect_data other (copies, histograms) | compute_data |\n|---|---:|---:|---:|---:|"
    );
    for m in r["methods"].as_array().into_iter().flatten() {
        let p = &m["ort"]["phases"];
        let other = div(f(&p["collect_data"]).zip(f(&p["inference"])).map(|(a, b)| a - b), Some(1.0));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            m["method"].as_str().unwrap_or("?"),
            num(&p["create_calibrator"], 1),
            num(&p["inference"], 1),
            other.map_or("—".to_owned(), |x| format!("{x:.1}")),
            num(&p["compute_data"], 1)
        );
    }

    let _ = writeln!(
        md,
        "\n## Memory: calibration peak RSS (MB)\n\n| method | ours @{0} | ours @{1} | ours ratio | ORT @{0} | ORT @{1} | ORT ratio |\n|---|---:|---:|---:|---:|---:|---:|",
        s["memory_cal_num"], s["cal_num"]
    );
    for m in r["memory"].as_array().into_iter().flatten() {
        let ratio = |a: &Value, b: &Value| {
            div(f(&b["peak_rss_mb"]), f(&a["peak_rss_mb"])).map_or("—".to_owned(), |x| format!("{x:.2}x"))
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            m["method"].as_str().unwrap_or("?"),
            num(&m["ours_small"]["peak_rss_mb"], 0),
            num(&m["ours_large"]["peak_rss_mb"], 0),
            ratio(&m["ours_small"], &m["ours_large"]),
            num(&m["ort_small"]["peak_rss_mb"], 0),
            num(&m["ort_large"]["peak_rss_mb"], 0),
            ratio(&m["ort_small"], &m["ort_large"]),
        );
    }

    let micro = &r["micro"];
    let _ = writeln!(
        md,
        "\n## Micro-benchmarks (median of {} runs)\n\nHistogram collection of standard normal float32 values (the same .npy \
         file for both): ours = `CalibState::observe` (min/max scan + signed histogram, {} rayon threads; `1 thread` = \
         RAYON_NUM_THREADS=1), `min/max scan` = the same collecting min/max only, `histogram only` = \
         `Histogram::observe`; numpy = `np.histogram(x, bins, range=(-t, t))`; ORT = `HistogramCollector.collect_value` \
         (nanmin, nanmax, np.histogram).\n\n| array | values | bins | ours ms | ours 1 thread ms | ours min/max scan ms | ours histogram only ms (1 thread) | numpy ms | ORT collect_value ms | numpy / ours |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        s["micro_repeat"], micro["threads"]
    );
    let ms = |v: &Value| v.as_f64().map_or("—".to_owned(), |x| format!("{:.2}", x * 1e3));
    for c in micro["collection"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} |",
            c["array"].as_str().unwrap_or("?"),
            c["values"],
            c["bins"],
            ms(&c["ours_observe_s"]),
            ms(&c["ours_observe_1t_s"]),
            ms(&c["ours_minmax_only_s"]),
            ms(&c["ours_histogram_only_s"]),
            ms(&c["ours_histogram_only_1t_s"]),
            ms(&c["np_histogram_s"]),
            ms(&c["ort_collect_value_s"]),
            div(f(&c["np_histogram_s"]), f(&c["ours_observe_s"])).map_or("—".to_owned(), |x| format!("{x:.1}x")),
        );
    }
    let _ = writeln!(
        md,
        "\nEntropy threshold search (num_quantized_bins 255) on identical histograms (ours exported):\n\n| histogram | bins | ours candidates | ours ms | ORT candidates | ORT s | ORT / ours | ours threshold | ORT threshold |\n|---|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for e in micro["entropy"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | [{}, {}] |",
            e["name"].as_str().unwrap_or("?"),
            e["bins"],
            num(&e["ours_candidates"], 0),
            ms(&e["ours_s"]),
            num(&e["ort_candidates"], 0),
            num(&e["ort_s"], 2),
            div(f(&e["ort_s"]), f(&e["ours_s"])).map_or("—".to_owned(), |x| format!("{x:.0}x")),
            num(&e["ours_threshold"], 4),
            num(&e["ort_threshold"][0], 4),
            num(&e["ort_threshold"][1], 4),
        );
    }
    if let Some(notes) = r["analysis"].as_array().filter(|a| !a.is_empty()) {
        let _ = writeln!(md, "\n## What limits a missed target\n");
        for n in notes {
            let _ = writeln!(md, "- {}", n.as_str().unwrap_or(""));
        }
    }
    md
}

// ---------------------------------------------------------------------------------------------------------------
// The run

/// Adds the targets and notes to `report`, writes it and its markdown into `out`, and prints the markdown.
pub(super) fn write_report(report: &mut Value, out: &Path) -> Result<()> {
    report["analysis"] = analysis(report).into();
    report["targets"] = targets(report)
        .iter()
        .map(|t| json!({"target": t.name, "goal": t.goal, "measured": t.measured, "pass": t.pass}))
        .collect::<Vec<_>>()
        .into();
    let md = render_markdown(report);
    crate::write_atomic(&out.join("vs_python.json"), serde_json::to_string_pretty(report)?.as_bytes())?;
    crate::write_atomic(&out.join("vs_python.md"), md.as_bytes())?;
    print!("{md}");
    eprintln!("xtask: report written to {} and vs_python.json", out.join("vs_python.md").display());
    Ok(())
}

/// For a method whose ORT calibration was skipped: ORT's wall time estimated as its percentile run's time outside
/// compute_data (the same histogram collection) plus one threshold search per tensor at the time ORT took on the
/// micro-benchmark's normal histogram of the same size.
pub(super) fn estimate_skipped(r: &mut Value) {
    let tensors = f(&r["setup"]["tensors"]);
    let search = r["micro"]["entropy"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"].as_str().is_some_and(|n| n.starts_with("normal"))))
        .and_then(|e| f(&e["ort_s"]));
    let base = r["methods"].as_array().and_then(|m| m.iter().find(|m| m["method"] == "percentile")).and_then(|m| {
        let ort = &m["ort"];
        Some(f(&ort["wall_s"])? - f(&ort["phases"]["compute_data"])?)
    });
    let (Some(tensors), Some(search)) = (tensors, search) else { return };
    for m in r["methods"].as_array_mut().into_iter().flatten() {
        if m["ort"]["skipped"].is_string() {
            m["ort"]["estimated_wall_s"] = (base.unwrap_or(0.0) + tensors * search).into();
            m["ort"]["estimate"] = format!(
                "{tensors} tensors x {search:.1} s per threshold search (micro-benchmark){}",
                base.map(|b| format!(" + {b:.1} s of collection as in ORT's percentile run")).unwrap_or_default()
            )
            .into();
        }
    }
}

/// Where a target is missed, what limits it, in numbers; and where the two tools' ranges disagree, why.
pub(super) fn analysis(r: &Value) -> Vec<String> {
    let mut notes = Vec::new();
    let inf = &r["inference_on_calibration_features"];
    let floor = div(f(&inf["ms_per_feature"]).zip(f(&inf["features"])).map(|(ms, n)| ms * n / 1e3), Some(1.0));
    let row = main_collection_row(r);
    for m in r["methods"].as_array().into_iter().flatten() {
        let (ours, ort) = (&m["ours"], &m["ort"]);
        let name = m["method"].as_str().unwrap_or("?");
        let Some(ratio) = div(f(&ours["wall_s"]), f(&ort["wall_s"])) else { continue };
        if ratio <= 0.5 {
            continue;
        }
        let (wall, total) = (f(&ours["wall_s"]).unwrap_or(f64::NAN), f(&ort["wall_s"]).unwrap_or(f64::NAN));
        let key = if name == "minmax" { "ours_minmax_only_s" } else { "ours_observe_s" };
        let stats =
            row.and_then(|row| ns_per_value(row, key)).zip(f(&ours["values_observed"])).map(|(ns, n)| ns * n / 1e9);
        let mut s = format!("whole calibration, {name}: ours {wall:.1} s vs ORT {total:.1} s ({ratio:.2}x).");
        if let Some(p) = f(&ours["pipeline_s"]) {
            let _ = write!(
                s,
                " Ours: {p:.1} s in the calibration pass and {:.1} s around it (model load, tokenization, ONNX Runtime load, writing tables).",
                wall - p
            );
            if let Some(fl) = floor {
                let _ = write!(
                    s,
                    " Within the pass, FP32 inference alone on the same features takes {fl:.1} s (`qdq eval`, {} ms/feature)",
                    num(&inf["ms_per_feature"], 1)
                );
                match stats {
                    Some(c) => {
                        let _ = write!(
                            s,
                            ", the statistics about {c:.1} s ({:.2e} values at the micro-benchmark's rate)",
                            f(&ours["values_observed"]).unwrap_or(0.0)
                        );
                        let rest = p - fl - c;
                        if rest > 0.0 {
                            let _ = write!(
                                s,
                                ", and the remaining {rest:.1} s is the cost of running the augmented model (every calibrated tensor an extra output, graph optimisation `basic`) and of computing the ranges."
                            );
                        } else {
                            s.push_str(
                                ", which together already exceed the pass: they overlap or the estimates are high.",
                            );
                        }
                    }
                    None => s.push('.'),
                }
            }
        }
        let ph = &ort["phases"];
        if let Some(run) = f(&ph["inference"]) {
            let _ = write!(
                s,
                " ORT: {run:.1} s in session.run (its augmented model, optimisation disabled), {} s in the rest of collect_data, {} s in compute_data, {} s outside both (Python start-up and imports, create_calibrator, writing).",
                div(f(&ph["collect_data"]).map(|c| c - run), Some(1.0)).map_or("?".into(), |x| format!("{x:.1}")),
                num(&ph["compute_data"], 1),
                div(f(&ph["collect_data"]).zip(f(&ph["compute_data"])).map(|(c, d)| total - c - d), Some(1.0))
                    .map_or("?".into(), |x| format!("{x:.1}")),
            );
        }
        if let Some(fl) = floor {
            let share = fl / total;
            let _ = write!(s, " FP32 inference alone is {share:.2}x of ORT's whole run");
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
        notes.push(s);
    }
    let targets = targets(r);
    if targets[0].pass == Some(false)
        && let Some(row) = row
    {
        let ns = |k: &str| ns_per_value(row, k).map_or("?".to_owned(), |x| format!("{x:.2}"));
        let best = ns_per_value(row, "ours_minmax_only_1t_s")
            .zip(ns_per_value(row, "ours_histogram_only_1t_s"))
            .map(|(a, b)| (a + b) / f(&r["micro"]["threads"]).unwrap_or(1.0).max(1.0));
        let mut s = format!(
            "histogram collection: {} (numpy {} ns/value, one thread). Ours on {} values, {} bins: {} ns/value with {} threads, {} ns/value on one thread, of which the min/max scan is {} and the binning {} ns/value (one thread).",
            targets[0].measured.as_deref().unwrap_or("?"),
            ns("np_histogram_s"),
            row["values"],
            row["bins"],
            ns("ours_observe_s"),
            r["micro"]["threads"],
            ns("ours_observe_1t_s"),
            ns("ours_minmax_only_1t_s"),
            ns("ours_histogram_only_1t_s"),
        );
        if let (Some(b), Some(np)) = (best, ns_per_value(row, "np_histogram_s")) {
            let _ = write!(
                s,
                " Even with perfect scaling over these threads the step would take {b:.2} ns/value, {:.1}x numpy: the per-value cost of the binning (bin index and a scattered increment per value) on one core is what limits it; 5x needs {:.2} ns/value per step.",
                np / b,
                np / 5.0
            );
        }
        if let Some(speedup) = div(f(&row["ours_observe_1t_s"]), f(&row["ours_observe_s"])) {
            let _ = write!(
                s,
                " With {} threads the step runs at {speedup:.2}x the speed of one thread.",
                r["micro"]["threads"]
            );
        }
        let small = r["micro"]["collection"]
            .as_array()
            .and_then(|rows| {
                rows.iter().filter(|c| c["array"] == row["array"]).min_by_key(|c| c["bins"].as_u64().unwrap_or(0))
            })
            .filter(|c| c["bins"] != row["bins"]);
        if let Some(small) = small
            && let (Some(a), Some(b)) =
                (ns_per_value(small, "ours_histogram_only_1t_s"), ns_per_value(row, "ours_histogram_only_1t_s"))
        {
            let _ = write!(
                s,
                " Binning costs {a:.2} ns/value with {} bins and {b:.2} with {}: {}.",
                small["bins"],
                row["bins"],
                if (b / a - 1.0).abs() < 0.15 {
                    "the table size hardly matters, so the cost is the work per value, not cache misses on the counts"
                } else {
                    "the table size matters, so cache misses on the counts are part of the cost"
                }
            );
        }
        notes.push(s);
    }
    if targets[1].pass == Some(false) {
        notes.push(format!(
            "entropy search: {} against >= 100x (see the micro-benchmark table for the candidates each side searches).",
            targets[1].measured.as_deref().unwrap_or("?")
        ));
    }
    if targets[3].pass == Some(false) {
        for m in r["memory"].as_array().into_iter().flatten() {
            let (a, b) = (f(&m["ours_small"]["peak_rss_mb"]), f(&m["ours_large"]["peak_rss_mb"]));
            if let (Some(a), Some(b)) = (a, b) {
                notes.push(format!(
                    "peak RSS, {}: {a:.0} MB at {} questions, {b:.0} MB at {} (+{:.0} MB).",
                    m["method"].as_str().unwrap_or("?"),
                    r["setup"]["memory_cal_num"],
                    r["setup"]["cal_num"],
                    b - a
                ));
            }
        }
    }
    for m in r["methods"].as_array().into_iter().flatten() {
        let worst = &m["ranges"]["worst"];
        if m["method"] == "entropy" && f(&m["ranges"]["max_rel_diff"]).is_some_and(|d| d > 0.05) {
            let mut s = format!(
                "entropy ranges: ours and ORT's differ by up to {} (`{}`: {} vs {}), median {}.",
                pct(&m["ranges"]["max_rel_diff"]),
                worst["tensor"].as_str().unwrap_or("?"),
                num(&worst["ours_amax"], 4),
                num(&worst["ort_amax"], 4),
                pct(&m["ranges"]["median_rel_diff"])
            );
            if let Some(e) = r["micro"]["entropy"]
                .as_array()
                .and_then(|e| e.iter().find(|e| !e["name"].as_str().unwrap_or("").starts_with("normal")))
            {
                let _ = write!(
                    s,
                    " The searches differ even on an identical histogram (`{}`: ours {}, ORT [{}, {}]):",
                    e["name"].as_str().unwrap_or("?"),
                    num(&e["ours_threshold"], 4),
                    num(&e["ort_threshold"][0], 4),
                    num(&e["ort_threshold"][1], 4)
                );
            }
            s.push_str(
                " ORT's get_entropy_threshold expands the merged distribution q into an int64 array (each bin's share is truncated to an integer), leaves q at zero on the bins past the last whole group, and slices 2i+1 bins around the zero bin; ours keeps q fractional. Its histograms also differ (ORT: 8001 bins over [-max|x|, max|x|], widened as batches arrive; ours: 8001 bins per side on a power-of-two grid).",
            );
            notes.push(s);
        }
    }
    notes
}
