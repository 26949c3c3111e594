//! `cargo xtask bench vs-python`: our pipeline against ONNX Runtime's Python quantization tools, side by side on
//! the same model and byte-identical calibration features.
//!
//! Steps: (1) featurize the first `--cal-num` calibration questions with the `squad` crate exactly as `qdq calibrate`
//! does (fixed padding) and write them as `.npy`; (2) per method, `qdq calibrate` and `xtask/python/vs_ort.py
//! calibrate` (create_calibrator on the same tensors), each a child process measured the same way (wall time, peak
//! RSS from `wait4`); (3) compare the ranges; (4) quantize both tables (ours with `--policy ort-compatible`, ORT's
//! with `quantize_static` and the seed-001 options) and evaluate both INT8 models with `qdq eval`; (5) memory at two
//! calibration sizes; (6) micro-benchmarks of histogram collection and entropy search against numpy / ORT on
//! identical arrays and histograms. Results: `<out>/vs_python.json` and `<out>/vs_python.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::download::DownloadArgs;
use crate::e2e::{build_qdq, ort_library, target_dir};
use crate::setup::LIBRARY_ENV;
use crate::workspace::{cargo, root, run_cmd};
use crate::{npy, qdq_json};

mod micro;
mod report;
mod types;

use crate::bench::measure::*;
use crate::bench::venv::{Paths, ensure_venv, export_features, git_head, resolve_paths};
use micro::*;
use report::*;
use types::*;

/// Values of the micro-benchmark arrays (standard normal float32).
const MICRO_SIZES: [(usize, &str); 2] = [(1 << 20, "normal_1m"), (16 << 20, "normal_16m")];
/// Bins per side of our signed histogram in the micro-benchmarks; numpy and ORT get twice as many in total: 8000
/// (the size of the seeds' 8001-bin entropy histograms) and 2048 (ORT's default for percentile).
const MICRO_BINS_PER_SIDE: [usize; 2] = [4000, 1024];

/// Options of `bench vs-python`.
pub type Opts = crate::flags::VsPythonArgs;

/// How each tool is told to use a method (the seeds' settings; our `--num-bins` is per side of zero for the signed
/// histogram, ORT's is the total).
fn method_flags(method: &str) -> (Vec<&'static str>, Vec<&'static str>) {
    match method {
        "minmax" => (vec!["--calibrate-method", "minmax"], vec!["--method", "minmax"]),
        // qdq's own default (ONNX Runtime has no mse): only in the pass-against-inference rounds.
        "mse" => (vec!["--calibrate-method", "mse"], vec![]),
        "percentile" => (
            vec!["--calibrate-method", "percentile", "--percentile", "99.999", "--num-bins", "2048", "--symmetric"],
            vec!["--method", "percentile", "--percentile", "99.999", "--num-bins", "2048"],
        ),
        _ => (
            vec!["--calibrate-method", "entropy", "--num-bins", "8001", "--num-quantized-bins", "255"],
            vec!["--method", "entropy", "--num-bins", "8001", "--num-quantized-bins", "255"],
        ),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Child processes, measured

// ---------------------------------------------------------------------------------------------------------------
// Reading results

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not the JSON this bench expects", path.display()))
}

/// Our calibration.json's `{tensor: {min, max}}` as `{tensor: amax}`.
fn amax_ours(ranges: &BTreeMap<String, MinMax>) -> BTreeMap<String, f64> {
    ranges.iter().map(|(k, r)| (k.clone(), r.min.abs().max(r.max.abs()))).collect()
}

/// ORT's `{tensor: [min, max]}` as `{tensor: amax}`.
fn amax_ort(ranges: &BTreeMap<String, [f64; 2]>) -> BTreeMap<String, f64> {
    ranges.iter().map(|(k, [lo, hi])| (k.clone(), lo.abs().max(hi.abs()))).collect()
}

/// Agreement of two range tables on amax: per tensor `|ours - ort| / ort`; the largest, the median, the worst
/// tensor, and tensors only one side has.
fn compare_ranges(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> RangeAgreement {
    let mut rel: Vec<(f64, &str)> = a
        .iter()
        .filter_map(|(k, &x)| {
            let y = *b.get(k)?;
            let d = (x - y).abs();
            Some((if d == 0.0 { 0.0 } else { d / y.abs().max(f64::MIN_POSITIVE) }, k.as_str()))
        })
        .collect();
    rel.sort_by(|p, q| p.0.total_cmp(&q.0));
    let only = |x: &BTreeMap<String, f64>, y: &BTreeMap<String, f64>| -> Vec<String> {
        x.keys().filter(|k| !y.contains_key(*k)).cloned().collect()
    };
    RangeAgreement {
        tensors: rel.len(),
        max_rel_diff: rel.last().map(|r| r.0),
        median_rel_diff: rel.get(rel.len() / 2).map(|r| r.0),
        within_1pct: rel.iter().filter(|r| r.0 <= 0.01).count(),
        worst: rel.last().map(|&(rel_diff, k)| WorstTensor {
            tensor: k.to_owned(),
            rel_diff,
            ours_amax: a[k],
            ort_amax: b[k],
        }),
        only_ours: only(a, b),
        only_ort: only(b, a),
    }
}

/// Finite values our calibration observed (sum of the per-tensor counts of calib_state.json).
fn values_observed(state: &StateCounts) -> u64 {
    state.tensors.values().map(|t| t.count).sum()
}

struct Ctx {
    opts: Opts,
    paths: Paths,
    qdq: PathBuf,
    lib: PathBuf,
    py: PathBuf,
    script: PathBuf,
    work: PathBuf,
    features: PathBuf,
    commands: Vec<String>,
    waited_s: f64,
}

impl Ctx {
    fn qdq(&self, sub: &str) -> Command {
        let mut c = Command::new(&self.qdq);
        c.arg(sub).env(LIBRARY_ENV, &self.lib);
        c
    }
    fn python(&self, sub: &str) -> Command {
        let mut c = Command::new(&self.py);
        c.arg(&self.script).arg(sub);
        c
    }
    fn log(&self, name: &str) -> PathBuf {
        self.work.join("logs").join(format!("{name}.log"))
    }
    fn data_flags(&self) -> Vec<String> {
        vec![
            "--vocab".into(),
            self.paths.vocab.display().to_string(),
            "--seq-len".into(),
            self.opts.data.seq_len.to_string(),
            "--doc-stride".into(),
            self.opts.data.doc_stride.to_string(),
        ]
    }
    fn quiet(&mut self) {
        self.waited_s += wait_quiet(self.opts.data.wait);
    }

    /// `qdq calibrate` of `method` on the first `cal_num` questions into `dir`.
    fn ours_calibrate(&mut self, method_flags: &[&str], cal_num: usize, dir: &Path, log: &str) -> Result<Run> {
        let mut cmd = self.qdq("calibrate");
        cmd.arg("--model")
            .arg(&self.paths.model)
            .args(self.data_flags())
            .arg("--calibration-data")
            .arg(&self.paths.calibration);
        // The tensors the ort-compatible placement quantizes: both INT8 models get ORT's seed-001 layout.
        cmd.args(["--policy", "ort-compatible", "--cal-num", &cal_num.to_string(), "--batch", "1", "--pad-to-max"]);
        cmd.args(method_flags).arg("--out").arg(dir).arg("--json");
        self.quiet();
        let log = self.log(log);
        measure_ok(&mut cmd, &log, &mut self.commands)
    }

    /// vs_ort.py calibrate; the run and the JSON it wrote (ranges, phases or the error).
    fn ort_calibrate(
        &mut self,
        method_flags: &[&str],
        cal_num: usize,
        tensors: &Path,
        out: &Path,
        log: &str,
    ) -> Result<(Run, OrtCalibration)> {
        let mut cmd = self.python("calibrate");
        cmd.arg("--model").arg(&self.paths.model).arg("--features").arg(&self.features).arg("--tensors").arg(tensors);
        cmd.args(method_flags).args([
            "--cal-num",
            &cal_num.to_string(),
            "--stride",
            &self.opts.stride.to_string(),
            "--batch",
            "1",
        ]);
        cmd.arg("--out").arg(out);
        let _ = std::fs::remove_file(out);
        self.quiet();
        let log = self.log(log);
        let run = measure(&mut cmd, &log, &mut self.commands)?;
        let result = read_json(out).unwrap_or_else(|_| OrtCalibration {
            error: Some(format!("no result; end of the log:\n{}", tail(&run.log_text(), 5))),
            ..Default::default()
        });
        Ok((run, result))
    }

    /// `qdq eval` of `model` on the first `samples` questions of `dataset`; its EM/F1 (or the error) and its JSON.
    fn eval(
        &mut self,
        model: &Path,
        dataset: &Path,
        samples: usize,
        extra: &[&str],
        log: &str,
    ) -> Result<(Score, Option<qdq_json::Eval>)> {
        let mut cmd = self.qdq("eval");
        cmd.arg("--model")
            .arg(model)
            .arg("--dataset")
            .arg(dataset)
            .args(["--samples", &samples.to_string()])
            .args(self.data_flags())
            .args(extra)
            .arg("--json");
        let log = self.log(log);
        let run = measure(&mut cmd, &log, &mut self.commands)?;
        let doc: Option<qdq_json::Eval> = run.stdout_json().filter(|_| run.ok());
        let score = match &doc {
            Some(d) => Score { em: Some(d.exact_match), f1: Some(d.f1), error: None },
            None => Score { error: Some(tail(&run.log_text(), 3)), ..Default::default() },
        };
        eprintln!("xtask:   {} -> {score:?}", model.display());
        Ok((score, doc))
    }
}

fn ort_summary(run: &Run, result: &OrtCalibration) -> OrtRun {
    let error = match &result.error {
        Some(e) => Some(e.lines().last().unwrap_or(e).to_owned()),
        None if !run.ok() => Some(format!("exit code {:?}", run.code)),
        None => None,
    };
    OrtRun { run: run.record(), phases: result.phases.clone(), features: result.features, error, ..Default::default() }
}

pub fn vs_python(opts: Opts) -> Result<()> {
    let mut download = opts.download.clone().resolved();
    // The project's reference model by default, even without a mirror once it is in .assets/.
    download.set.get_or_insert_with(|| "minilm".to_owned());
    let command = format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" "));
    if opts.render {
        let mut report: Report = read_json(&opts.data.out.join("vs_python.json"))?;
        return write_report(&mut report, &opts.data.out);
    }
    let (mut cx, example_index, microbench) = prepare(opts, &download)?;
    let o = cx.opts.clone();
    let mut report = Report { command, ..Default::default() };
    let Calibrated { models, tensors, ort_versions } = calibrate_each_method(&mut cx, &mut report.methods)?;
    report.one_pass = Some(one_pass(&mut cx)?);
    report.own_workflow = Some(own_workflow(&mut cx)?);
    report.memory = memory_rows(&mut cx, &report.methods)?;
    report.inference_on_calibration_features = inference_alone(&mut cx, &example_index)?;
    report.pass_rounds = pass_rounds(&mut cx)?;
    f1_of_models(&mut cx, &mut report, &models)?;
    report.micro = micro_benchmarks(&mut cx, &microbench)?;
    report.setup = Setup {
        model: cx.paths.model.clone(),
        vocab: cx.paths.vocab.clone(),
        dataset: cx.paths.dataset.clone(),
        calibration_data: cx.paths.calibration.clone(),
        cal_num: o.data.cal_num,
        memory_cal_num: o.memory_cal_num,
        samples: o.samples,
        seq_len: o.data.seq_len,
        doc_stride: o.data.doc_stride,
        stride: o.stride,
        micro_repeat: o.micro_repeat,
        features: Some(n_features_for(&example_index, o.data.cal_num)),
        features_exported: example_index.len(),
        tensors,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        versions: ort_versions.unwrap_or_else(|| report.micro.versions.clone()),
        git: git_head(),
        waited_for_quiet_s: cx.waited_s,
        quiet_check: o.data.wait,
    };
    report.commands = std::mem::take(&mut cx.commands);
    estimate_skipped(&mut report);
    write_report(&mut report, &o.data.out)
}

/// The run's context (the files, the tools, the work directory), the exported features' question indices and the
/// calib microbench built.
fn prepare(opts: Opts, download: &DownloadArgs) -> Result<(Ctx, Vec<i64>, PathBuf)> {
    let paths = resolve_paths(&opts.data, download)?;
    let lib = ort_library()?;
    let py = ensure_venv()?;
    let qdq = build_qdq()?;
    eprintln!("xtask: building calib's microbench example (release)");
    run_cmd(cargo().args(["build", "--release", "--locked", "-p", "qdq-calib", "--example", "microbench"]))?;
    let microbench = target_dir().join("release/examples/microbench");
    let work = opts.data.out.join("vs_python");
    for d in [work.join("logs"), work.join("micro")] {
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let features = work.join("features");
    let questions = opts.data.cal_num.max(opts.memory_cal_num);
    eprintln!("xtask: featurizing the first {questions} calibration questions into {}", features.display());
    let example_index = export_features(
        &paths.calibration,
        &paths.vocab,
        questions,
        opts.data.seq_len,
        opts.data.doc_stride,
        &features,
    )?;
    let script = root().join("xtask/python/vs_ort.py");
    let commands = Vec::new();
    let cx = Ctx { opts, paths, qdq, lib, py, script, work, features, commands, waited_s: 0.0 };
    Ok((cx, example_index, microbench))
}

/// Inference alone on the calibration features (no tensor read, no statistics): the floor of a calibration.
fn inference_alone(cx: &mut Ctx, example_index: &[i64]) -> Result<Inference> {
    eprintln!("xtask: FP32 inference alone on the calibration features");
    cx.quiet();
    let (model, calibration, cal_num) = (cx.paths.model.clone(), cx.paths.calibration.clone(), cx.opts.data.cal_num);
    let (_, doc) =
        cx.eval(&model, &calibration, cal_num, &["--pad-to-max", "--batch", "1"], "fp32_on_calibration_features")?;
    Ok(Inference {
        ms_per_feature: doc.and_then(|d| d.latency.ms_per_feature),
        features: Some(n_features_for(example_index, cal_num)),
    })
}

/// F1 of FP32 and every one of `models` on the first dev questions, into `report`.
fn f1_of_models(cx: &mut Ctx, report: &mut Report, models: &[ModelToEvaluate]) -> Result<()> {
    let samples = cx.opts.samples;
    eprintln!("xtask: evaluating FP32 and the INT8 models on {samples} dev questions");
    let (model, dataset) = (cx.paths.model.clone(), cx.paths.dataset.clone());
    report.fp32 = Some(cx.eval(&model, &dataset, samples, &[], "eval_fp32")?.0);
    for (method, tool, path) in models {
        let (score, _) = cx.eval(path, &dataset, samples, &[], &format!("eval_{tool}_{method}"))?;
        if let Some(m) = report.methods.iter_mut().find(|m| m.method == *method) {
            *if *tool == "ours" { &mut m.f1.ours } else { &mut m.f1.ort } = Some(score);
        }
    }
    Ok(())
}

/// A model to evaluate: (method, "ours" | "ort", path).
type ModelToEvaluate = (String, &'static str, PathBuf);

/// What the per-method calibrations leave for the rest of the run.
struct Calibrated {
    models: Vec<ModelToEvaluate>,
    /// Tensors our calibration collected.
    tensors: usize,
    /// The Python-side versions ORT's script reported.
    ort_versions: Option<BTreeMap<String, String>>,
}

/// Per method, `--pass-rounds` times in turn: our calibration pass on the calibration features (`pass_seconds`), then
/// FP32 inference alone on the same features (`qdq eval --pad-to-max --batch 1`, its inference time) with as many
/// sessions side by side as the pass ran (the same layout, so the difference is reading the calibrated tensors and
/// the statistics), and with one session (`qdq eval`'s default). Besides the compared methods, mse: qdq's default.
fn pass_rounds(cx: &mut Ctx) -> Result<Vec<PassRounds>> {
    let o = cx.opts.clone();
    let (model, calibration) = (cx.paths.model.clone(), cx.paths.calibration.clone());
    let methods = o.methods.iter().cloned().chain((!o.methods.iter().any(|m| m == "mse")).then(|| "mse".to_string()));
    let mut rows: Vec<PassRounds> = methods.map(|m| PassRounds { method: m, ..Default::default() }).collect();
    for round in 1..=o.pass_rounds {
        for row in &mut rows {
            eprintln!("xtask: pass against inference, round {round}/{}: {}", o.pass_rounds, row.method);
            let (flags, _) = method_flags(&row.method);
            let dir = cx.work.join("pass_rounds").join(&row.method);
            let run = cx.ours_calibrate(&flags, o.data.cal_num, &dir, "pass_rounds_calibrate")?;
            let json = run.stdout_json::<qdq_json::Calibrate>();
            let pass = json.and_then(|j| j.pass).context("qdq calibrate --json gave no pass")?;
            let sessions = pass.sessions.unwrap_or(1);
            row.sessions = Some(sessions);
            row.pass_s.push(pass.pass_seconds);
            row.in_ort_s.push(pass.inference_seconds);
            row.statistics_s.push(pass.statistics_seconds);
            let mut inference = |workers: usize| -> Result<f64> {
                cx.quiet();
                let flags = ["--pad-to-max", "--batch", "1", "--workers", &workers.to_string()];
                let (_, doc) = cx.eval(&model, &calibration, o.data.cal_num, &flags, "pass_rounds_eval")?;
                let wall = doc.and_then(|d| d.wall_seconds.or(d.latency.total_seconds));
                wall.context("qdq eval --json gave no inference time")
            };
            row.inference_s.push(inference(sessions)?);
            let one = if sessions > 1 { inference(1)? } else { row.inference_s.last().copied().unwrap_or(f64::NAN) };
            row.one_session_inference_s.push(one);
        }
    }
    Ok(rows)
}

/// Per method: both calibrations, their ranges compared, both tables quantized.
fn calibrate_each_method(cx: &mut Ctx, methods: &mut Vec<MethodRow>) -> Result<Calibrated> {
    let o = cx.opts.clone();
    let (mut models, mut tensors, mut ort_versions) = (Vec::new(), 0, None);
    for method in &o.methods {
        let (ours_flags, ort_flags) = method_flags(method);
        let dir = cx.work.join(format!("ours_{method}"));
        eprintln!("xtask: [{method}] qdq calibrate");
        let ours = cx.ours_calibrate(&ours_flags, o.data.cal_num, &dir, &format!("ours_calibrate_{method}"))?;
        let table: OursTable = read_json(&dir.join("calibration.json"))?;
        tensors = table.ranges.len();
        let json = ours.stdout_json::<qdq_json::Calibrate>();
        let ours_v = OursRun {
            run: ours.record(),
            pipeline_s: json.as_ref().and_then(|j| j.seconds),
            pass: json.and_then(|j| j.pass),
            values_observed: Some(read_json(&dir.join("calib_state.json")).map(|s| values_observed(&s)).unwrap_or(0)),
        };
        let ort_json = cx.work.join(format!("ort_{method}.json"));
        let (ort_v, ort_result) = if method == "entropy" && o.quick {
            eprintln!("xtask: [{method}] ORT skipped (--quick; its threshold search takes ~5 s per tensor)");
            let why = "not run (--quick): ORT's entropy threshold search takes ~5 s per tensor here";
            (OrtRun { skipped: Some(why.to_owned()), ..Default::default() }, OrtCalibration::default())
        } else {
            eprintln!("xtask: [{method}] ORT create_calibrator/collect_data/compute_data");
            let (ort, ort_result) = cx.ort_calibrate(
                &ort_flags,
                o.data.cal_num,
                &dir.join("calibration.json"),
                &ort_json,
                &format!("ort_calibrate_{method}"),
            )?;
            (ort_summary(&ort, &ort_result), ort_result)
        };
        if ort_versions.is_none() {
            ort_versions = ort_result.versions.clone();
        }
        let ranges = ort_result.ranges.as_ref().map(|r| compare_ranges(&amax_ours(&table.ranges), &amax_ort(r)));
        eprintln!(
            "xtask: [{method}] ours {:.1} s / {:.0} MB, ORT {} s / {} MB{}",
            ours.wall_s,
            ours.peak_rss_mb,
            num(ort_v.run.wall_s, 1),
            num(ort_v.run.peak_rss_mb, 0),
            ort_v.error.as_deref().map(|e| format!(" (ORT failed: {e})")).unwrap_or_default()
        );

        quantize_both(cx, method, &dir, &ort_json, ranges.is_some(), &mut models)?;
        methods.push(MethodRow {
            method: method.clone(),
            ours_flags: ours_flags.join(" "),
            ort_flags: ort_flags.join(" "),
            ours: ours_v,
            ort: ort_v,
            ranges,
            f1: ToolScores::default(),
        });
    }
    Ok(Calibrated { models, tensors, ort_versions })
}

/// Both tables of `method` quantized with the same policy (ours from `dir`, ORT's from `ort_json` when it has
/// ranges), each model made into `models`.
fn quantize_both(
    cx: &mut Ctx,
    method: &str,
    dir: &Path,
    ort_json: &Path,
    ort_has_ranges: bool,
    models: &mut Vec<ModelToEvaluate>,
) -> Result<()> {
    let ours_q = cx.work.join(format!("ours_{method}_qdq.onnx"));
    let mut cmd = cx.qdq("quantize");
    cmd.arg("--model")
        .arg(&cx.paths.model)
        .arg("--ranges")
        .arg(dir.join("calibration.json"))
        .args(["--policy", "ort-compatible", "--strict", "-o"])
        .arg(&ours_q);
    let log = cx.log(&format!("ours_quantize_{method}"));
    measure_ok(&mut cmd, &log, &mut cx.commands)?;
    models.push((method.to_owned(), "ours", ours_q));
    if ort_has_ranges {
        let ort_q = cx.work.join(format!("ort_{method}_qdq.onnx"));
        let mut cmd = cx.python("quantize");
        cmd.arg("--model").arg(&cx.paths.model).arg("--ranges").arg(ort_json).arg("--out").arg(&ort_q);
        let log = cx.log(&format!("ort_quantize_{method}"));
        if measure(&mut cmd, &log, &mut cx.commands)?.ok() {
            models.push((method.to_owned(), "ort", ort_q));
        }
    }
    Ok(())
}

/// Ours, every method from one pass.
fn one_pass(cx: &mut Ctx) -> Result<OnePass> {
    let methods = cx.opts.methods.clone();
    let mut flags = vec!["--calibrate-method", methods[0].as_str()];
    let compare = methods[1..].join(",");
    if !compare.is_empty() {
        flags.extend(["--compare-methods", compare.as_str()]);
    }
    flags.extend(["--percentile", "99.999", "--symmetric", "--num-bins", "8001", "--num-quantized-bins", "255"]);
    eprintln!("xtask: ours, all methods in one pass");
    let dir = cx.work.join("ours_one_pass");
    let one = cx.ours_calibrate(&flags, cx.opts.data.cal_num, &dir, "ours_calibrate_one_pass")?;
    Ok(OnePass { run: one.record(), flags: flags.join(" ") })
}

/// `qdq calibrate` as a user runs it: no padding to `--seq-len`, its default batch, preset and method.
fn own_workflow(cx: &mut Ctx) -> Result<OnePass> {
    eprintln!("xtask: ours, the default workflow (dynamic padding)");
    let mut cmd = cx.qdq("calibrate");
    cmd.arg("--model").arg(&cx.paths.model).args(cx.data_flags()).arg("--calibration-data").arg(&cx.paths.calibration);
    cmd.args(["--cal-num", &cx.opts.data.cal_num.to_string(), "--json", "--out"])
        .arg(cx.work.join("ours_own_workflow"));
    cx.quiet();
    let log = cx.log("ours_calibrate_own_workflow");
    let run = measure_ok(&mut cmd, &log, &mut cx.commands)?;
    Ok(OnePass { run: run.record(), flags: "(defaults)".into() })
}

/// Memory at two sizes (minmax and percentile: ORT's entropy search alone takes many minutes); the large size is
/// each method's calibration run.
fn memory_rows(cx: &mut Ctx, methods: &[MethodRow]) -> Result<Vec<MemoryRow>> {
    let o = cx.opts.clone();
    let mut memory = Vec::new();
    for method in o.methods.iter().filter(|m| *m != "entropy") {
        let (ours_flags, ort_flags) = method_flags(method);
        eprintln!("xtask: [{method}] memory at {} questions", o.memory_cal_num);
        let small = cx.ours_calibrate(
            &ours_flags,
            o.memory_cal_num,
            &cx.work.join(format!("ours_{method}_small")),
            &format!("ours_calibrate_{method}_small"),
        )?;
        let tensors_file = cx.work.join(format!("ours_{method}/calibration.json"));
        let (ort_small, ort_small_result) = cx.ort_calibrate(
            &ort_flags,
            o.memory_cal_num,
            &tensors_file,
            &cx.work.join(format!("ort_{method}_small.json")),
            &format!("ort_calibrate_{method}_small"),
        )?;
        let large = methods.iter().find(|m| m.method == *method).cloned().unwrap_or_default();
        memory.push(MemoryRow {
            method: method.clone(),
            ours_small: small.record(),
            ours_large: large.ours,
            ort_small: ort_summary(&ort_small, &ort_small_result),
            ort_large: large.ort,
        });
    }
    Ok(memory)
}

/// Features of the first `questions` questions, given each exported feature's question index.
fn n_features_for(example_index: &[i64], questions: usize) -> usize {
    example_index.iter().filter(|&&e| e < questions as i64).count()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn ranges_compare_on_amax_relative_to_ort() {
        let ours: OursTable = serde_json::from_value(json!({"ranges":
            {"a": {"min": -2.0, "max": 1.0}, "b": {"min": 0.0, "max": 4.0}, "c": {"min": -1.0, "max": 1.0}}}))
        .unwrap();
        let ort: OrtCalibration =
            serde_json::from_value(json!({"ranges": {"a": [-1.0, 2.0], "b": [0.0, 5.0], "d": [0.0, 1.0]}})).unwrap();
        let c = compare_ranges(&amax_ours(&ours.ranges), &amax_ort(ort.ranges.as_ref().unwrap()));
        assert_eq!(c.tensors, 2);
        assert_eq!(c.max_rel_diff, Some(0.2)); // b: |4 - 5| / 5; a has amax 2 on both sides
        let worst = c.worst.unwrap();
        assert_eq!((worst.tensor.as_str(), worst.ours_amax, worst.ort_amax), ("b", 4.0, 5.0));
        assert_eq!(c.within_1pct, 1);
        assert_eq!(c.only_ours, ["c"]);
        assert_eq!(c.only_ort, ["d"]);
    }

    #[test]
    fn calib_state_counts_add_up() {
        let state = serde_json::from_value(json!({"tensors": {"a": {"count": 10}, "b": {"count": 5}}})).unwrap();
        assert_eq!(values_observed(&state), 15);
    }

    #[test]
    fn quiet_check_recognises_qdq_runs_and_reads_cpu_ticks() {
        assert!(is_qdq_run(&strings(&["target/release/qdq", "eval", "--model", "m"])));
        assert!(is_qdq_run(&strings(&["qdq", "calibrate"])));
        assert!(!is_qdq_run(&strings(&["qdq", "inspect", "m"])));
        assert!(!is_qdq_run(&strings(&["grep", "qdq eval"])));
        let stat = "1234 (qdq (x) y) R 1 1234 1234 0 -1 4194304 100 0 0 0 250 17 0 0 20 0 3 0 100 0 0";
        assert_eq!(cpu_ticks(stat), Some(267));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn other_processes_cpu_is_counted_and_flagged() {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let snap =
            |v: &[(u32, u64, &str)]| -> Snapshot { v.iter().map(|&(p, t, c)| (p, (t, strings(&[c])))).collect() };
        let before = snap(&[(1, 100, "idle"), (2, 0, "busy"), (9, 5, "me")]);
        let after = snap(&[(1, 100, "idle"), (2, 3 * hz, "busy"), (3, hz / 2, "new"), (9, 500, "me")]);
        let used = cpu_between(&before, &after, 9);
        assert_eq!(used, vec![(2, 3.0, "busy".to_owned()), (3, 0.5, "new".to_owned())]);

        let report: Report = serde_json::from_value(json!({
            "methods": [{"ours": {"wall_s": 10.0, "other_cpu_s": 2.5, "log": "/x/logs/ours_calibrate_minmax.log"}}],
            "memory": [{"ours_small": {"wall_s": 10.0, "other_cpu_s": 0.5, "log": "/x/logs/quiet.log"},
                        "ort_large": {"wall_s": 4.0, "other_cpu_s": 0.5, "log": "/x/logs/ort.log"}}]}))
        .unwrap();
        assert_eq!(
            disturbed(&report),
            [
                "ort: other processes used 0.5 CPU-s during its 4.0 s",
                "ours_calibrate_minmax: other processes used 2.5 CPU-s during its 10.0 s"
            ]
        );
    }

    #[test]
    fn normal_values_are_deterministic_and_standard() {
        let a = normal_values(200_001, 1);
        assert_eq!(a.len(), 200_001);
        assert_eq!(a, normal_values(200_001, 1));
        assert_ne!(a[..10], normal_values(10, 2)[..]);
        let n = a.len() as f64;
        let mean = a.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = a.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        assert!(a.iter().all(|x| x.is_finite()));
    }

    fn sample_value() -> Value {
        json!({
            "command": "cargo xtask bench vs-python",
            "setup": {"model": "m.onnx", "cal_num": 100, "memory_cal_num": 10, "features": 105, "seq_len": 384,
                      "doc_stride": 128, "samples": 300, "stride": 10, "tensors": 63, "cpus": 2, "micro_repeat": 5,
                      "versions": {"onnxruntime": "1.31.1"}},
            "methods": [
                {"method": "minmax", "ours": {"wall_s": 10.0, "peak_rss_mb": 400.0, "pipeline_s": 8.0, "values_observed": 1_000_000_000u64,
                          "pass": {"pass_seconds": 22.0, "inference_seconds": 20.0, "statistics_seconds": 1.5}},
                 "ort": {"wall_s": 30.0, "peak_rss_mb": 900.0, "phases": {"inference": 20.0, "collect_data": 22.0, "compute_data": 0.5}},
                 "ranges": {"max_rel_diff": 1e-6, "median_rel_diff": 0.0, "worst": {"tensor": "t1", "ours_amax": 1.0, "ort_amax": 1.0}},
                 "f1": {"ours": {"em": 60.0, "f1": 72.5}, "ort": {"em": 60.0, "f1": 72.4}}},
                {"method": "percentile", "ours": {"wall_s": 30.0, "peak_rss_mb": 480.0, "pipeline_s": 27.0, "values_observed": 500_000_000u64,
                          "pass": {"pass_seconds": 26.0, "inference_seconds": 20.5, "statistics_seconds": 5.0}},
                 "ort": {"wall_s": 50.0, "peak_rss_mb": 1200.0, "phases": {"inference": 20.0, "collect_data": 45.0, "compute_data": 0.5}},
                 "ranges": {"max_rel_diff": 0.03, "median_rel_diff": 0.001, "worst": {"tensor": "t2", "ours_amax": 3.5, "ort_amax": 3.4}},
                 "f1": {"ours": {"em": 61.0, "f1": 73.0}, "ort": {"em": 61.0, "f1": 72.9}}},
                {"method": "entropy", "ours": {"wall_s": 12.0, "peak_rss_mb": 420.0},
                 "ort": {"skipped": "not run (--quick): slow"}, "ranges": null, "f1": {"ours": {"em": 11.0, "f1": 22.0}}}
            ],
            "memory": [
                {"method": "minmax", "ours_small": {"peak_rss_mb": 380.0}, "ours_large": {"peak_rss_mb": 400.0},
                 "ort_small": {"peak_rss_mb": 700.0}, "ort_large": {"peak_rss_mb": 900.0}},
                {"method": "percentile", "ours_small": {"peak_rss_mb": 380.0}, "ours_large": {"peak_rss_mb": 480.0},
                 "ort_small": {"peak_rss_mb": 800.0}, "ort_large": {"peak_rss_mb": 1200.0}}
            ],
            "inference_on_calibration_features": {"ms_per_feature": 200.0, "features": 105},
            "micro": {"threads": 2,
                "collection": [
                    {"array": "normal_1m.npy", "values": 1048576, "bins": 8000, "ours_observe_s": 0.001, "np_histogram_s": 0.012},
                    {"array": "normal_16m.npy", "values": 16777216, "bins": 8000, "ours_observe_s": 0.1, "ours_observe_1t_s": 0.16,
                     "ours_minmax_only_s": 0.015, "ours_minmax_only_1t_s": 0.02, "ours_histogram_only_s": 0.08,
                     "ours_histogram_only_1t_s": 0.12, "np_histogram_s": 0.2, "ort_collect_value_s": 0.25},
                    {"array": "normal_16m.npy", "values": 16777216, "bins": 2048, "ours_observe_s": 0.09, "ours_histogram_only_1t_s": 0.11,
                     "np_histogram_s": 0.2}],
                "entropy": [
                    {"name": "normal normal_16m", "bins": 8000, "ours_s": 0.02, "ours_candidates": 2682, "ort_s": 14.0, "ort_candidates": 3874, "ours_threshold": 4.72, "ort_threshold": [-4.74, 4.74]},
                    {"name": "t3", "bins": 16002, "ours_s": 0.05, "ort_s": 40.0, "ours_threshold": 14.35, "ort_threshold": [-10.7, 10.7]}]},
        })
    }

    fn report(v: Value) -> Report {
        serde_json::from_value(v).expect("the fixture has the report's shape")
    }

    fn sample_report() -> Report {
        report(sample_value())
    }

    #[test]
    fn a_report_survives_its_own_json() {
        let mut r = sample_report();
        estimate_skipped(&mut r);
        r.analysis = analysis(&r);
        let again = report(serde_json::to_value(&r).unwrap());
        assert_eq!(render_markdown(&again), render_markdown(&r));
        assert_eq!(again.methods[0].ort.phases.as_ref().unwrap().inference, Some(20.0));
    }

    #[test]
    fn targets_pick_the_worst_case_and_judge_it() {
        let t = targets(&sample_report());
        assert_eq!(t.len(), 5);
        assert_eq!(t[0].measured.as_deref(), Some("2.00x (worst: normal_16m.npy, 8000 bins)")); // 1m is 12x
        assert_eq!(t[0].pass, Some(false));
        assert_eq!(t[1].measured.as_deref(), Some("700.00x (worst: normal normal_16m)"));
        assert_eq!(t[1].pass, Some(true));
        assert_eq!(t[2].measured.as_deref(), Some("0.60x (worst: percentile)")); // skipped entropy does not count
        assert_eq!(t[2].pass, Some(false));
        // pass / inference alone: minmax 22 / 21 s passes, percentile 26 / 21 s misses; entropy has no pass times
        assert_eq!(t[3].measured.as_deref(), Some("1.24x (worst: percentile)"));
        assert_eq!(t[3].pass, Some(false));
        assert_eq!(t[4].measured.as_deref(), Some("1.26x (worst: percentile)"));
        assert_eq!(t[4].pass, Some(false));
        let empty = targets(&Report::default());
        assert!(empty.iter().all(|t| t.pass.is_none() && t.measured.is_none()));
    }

    #[test]
    fn skipped_ort_runs_get_an_estimate() {
        let mut r = sample_report();
        estimate_skipped(&mut r);
        let ort = &r.methods[2].ort;
        assert_eq!(ort.estimated_wall_s, Some(63.0 * 14.0 + 49.5)); // tensors x search + percentile's run w/o compute
        assert!(ort.estimate.as_deref().unwrap().starts_with("63 tensors x 14.0 s per threshold search"));
        assert!(r.methods[0].ort.estimated_wall_s.is_none());
    }

    #[test]
    fn analysis_explains_each_miss_with_its_numbers() {
        let notes = analysis(&sample_report());
        // whole calibration: only percentile is over 0.5x; 200 ms x 105 features = 21 s of inference
        let wall = notes.iter().find(|n| n.starts_with("whole calibration")).unwrap();
        assert!(wall.starts_with("whole calibration, percentile: ours 30.0 s vs ORT 50.0 s (0.60x)."), "{wall}");
        assert!(wall.contains("FP32 inference alone on the same features takes 21.0 s"), "{wall}");
        assert!(wall.contains("the statistics about 3.0 s (5.00e8 values"), "{wall}"); // at 5.96 ns/value
        assert!(wall.contains("the remaining 3.0 s is the cost of running the augmented model"), "{wall}");
        assert!(wall.contains("25.0 s in the rest of collect_data"), "{wall}");
        assert!(wall.contains("FP32 inference alone is 0.42x of ORT's whole run, so 5.0 s of ours"), "{wall}");
        assert_eq!(notes.iter().filter(|n| n.starts_with("whole calibration")).count(), 1);
        // collection: 11.92 ns/value numpy; best case (1.19 + 7.15) / 2 = 4.17 ns -> 2.9x; 5x needs 2.38 ns
        let hist = notes.iter().find(|n| n.starts_with("histogram collection")).unwrap();
        for part in [
            "numpy 11.92 ns/value",
            "min/max scan is 1.19 and the binning 7.15",
            "4.17 ns/value, 2.9x numpy",
            "5x needs 2.38",
            "With 2 threads the step runs at 1.60x the speed of one thread.",
            "Binning costs 6.56 ns/value with 2048 bins and 7.15 with 8000: the table size hardly matters",
        ] {
            assert!(hist.contains(part), "`{part}` not in {hist}");
        }
        let mut r = sample_report();
        r.methods[1].ours.values_observed = Some(1_600_000_000);
        assert!(analysis(&r)[0].contains("together already exceed the pass"));
        let pass: Vec<&String> = notes.iter().filter(|n| n.starts_with("calibration pass")).collect();
        assert_eq!(pass.len(), 1, "{pass:?}"); // minmax is within 1.1x
        for part in [
            "calibration pass, percentile: 26.0 s against 21.0 s of FP32 inference alone (1.24x, one run)",
            "20.5 s in ONNX Runtime and 5.0 s on statistics (10.00 ns per value observed)",
            "), and 0.5 s outside the runs (preparing batches, the ranges).",
        ] {
            assert!(pass[0].contains(part), "`{part}` not in {}", pass[0]);
        }
        // Alternating rounds, two sessions side by side: the medians, and each session's values.
        let mut r = sample_report();
        r.pass_rounds = vec![PassRounds {
            method: "percentile".into(),
            sessions: Some(2),
            pass_s: vec![24.0, 22.0, 30.0],
            in_ort_s: vec![20.0, 19.0, 21.0],
            statistics_s: vec![2.0, 1.5, 2.5],
            inference_s: vec![20.0, 20.0, 20.0],
            one_session_inference_s: vec![22.0, 24.0, 25.0],
        }];
        let notes = analysis(&r);
        let pass = notes.iter().find(|n| n.starts_with("calibration pass")).unwrap();
        for part in [
            "percentile: 24.0 s against 20.0 s of FP32 inference alone (1.20x, median of 3 rounds)",
            "each of 2 sessions spent 20.0 s in ONNX Runtime and 2.0 s on statistics (8.00 ns per value observed, in its session)",
            "in its session), and 2.0 s outside the runs (preparing batches, the ranges).",
        ] {
            assert!(pass.contains(part), "`{part}` not in {pass}");
        }
        let t = targets(&r).into_iter().find(|t| t.name.starts_with("calibration pass")).unwrap();
        assert_eq!((t.measured.as_deref(), t.pass), (Some("1.20x (worst: percentile)"), Some(false)));
        let md = render_markdown(&r);
        let row = "| percentile | 2 | 24.0 | 20.0 | 2.0 | 20.0 | 1.20x [1.10, 1.50] | 24.0 | 1.09x [0.92, 1.20] |";
        assert!(md.contains(row), "missing `{row}` in\n{md}");
        let rss = notes.iter().find(|n| n.starts_with("peak RSS, percentile")).unwrap();
        assert_eq!(rss, "peak RSS, percentile: 380 MB at 10 questions, 480 MB at 100 (+100 MB).");
        assert!(!notes.iter().any(|n| n.starts_with("entropy")));
    }

    #[test]
    fn entropy_disagreement_is_explained() {
        let mut v = sample_value();
        v["methods"][2]["ort"] = json!({"wall_s": 900.0});
        v["methods"][2]["ranges"] = json!({"max_rel_diff": 4.85, "median_rel_diff": 0.05, "worst": {"tensor": "sm", "ours_amax": 0.1865, "ort_amax": 0.0319}});
        let notes = analysis(&report(v));
        let note = notes.iter().find(|n| n.starts_with("entropy ranges")).unwrap();
        assert!(note.contains("up to 485.000 % (`sm`: 0.1865 vs 0.0319)"), "{note}");
        assert!(note.contains("identical histogram (`t3`: ours 14.3500, ORT [-10.7000, 10.7000])"), "{note}");
        assert!(note.contains("int64"), "{note}");
    }

    #[test]
    fn markdown_has_every_section_and_number() {
        let mut v = sample_value();
        v["methods"][0]["ort"]["error"] = "ValueError: Too many bins for data range".into();
        let mut r = report(v);
        estimate_skipped(&mut r);
        r.analysis = analysis(&r);
        let md = render_markdown(&r);
        for needle in [
            "| histogram collection vs numpy np.histogram | >= 5x | 2.00x (worst: normal_16m.npy, 8000 bins) | MISS |",
            "| entropy search vs ORT get_entropy_threshold | >= 100x | 700.00x (worst: normal normal_16m) | PASS |",
            "| minmax | 10.0 | 30.0 | 0.33x | 400 | 900 | 0.000 % (`t1`: 1.0000 vs 1.0000) | 0.000 % | 72.50 (EM 60.00) | 72.40 (EM 60.00) |",
            "| entropy | 12.0 | skipped (≈ 932 est.) | ≈ 0.01x (est.) | 420 | — | — | — | 22.00 (EM 11.00) | — |",
            "| calibration pass / FP32 inference alone on the same features | <= 1.1x | 1.24x (worst: percentile) | MISS |",
            "## Calibration at the cost of inference",
            "| minmax | 22.0 | 20.0 | 1.5 | 21.0 | 1.05x |",
            "- ORT minmax: `ValueError: Too many bins for data range`",
            "- ORT entropy: not run (--quick): slow. Estimate: 63 tensors x 14.0 s",
            "| minmax | 380 | 400 | 1.05x | 700 | 900 | 1.29x |",
            "| percentile | 380 | 480 | 1.26x | 800 | 1200 | 1.50x |",
            "| normal_16m.npy | 16777216 | 8000 | 100.00 | 160.00 | 15.00 | 80.00 (120.00) | 200.00 | 250.00 | 2.0x |",
            "| minmax | — | 20.0 | 2.0 | 0.5 |",
            "| `t3` | 16002 | — | 50.00 | — | 40.00 | 800x | 14.3500 | [-10.7000, 10.7000] |",
            "## What limits a missed target",
            "- whole calibration, percentile: ours 30.0 s",
            "No other process used more than a tenth of any timed step's wall time in CPU.",
        ] {
            assert!(md.contains(needle), "missing `{needle}` in\n{md}");
        }
    }
}
