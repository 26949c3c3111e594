//! `cargo xtask bench --openvino`: qdq's INT8 model for `--ep openvino` against FP32 (OpenVINO holding the float
//! parts at f32, and at its bf16) and NNCF's INT8 model of the same calibration questions, all on ONNX Runtime's
//! OpenVINO plugin EP (`cargo xtask setup --openvino`'s). NNCF is made in the bench venv (`nncf.quantize`,
//! `ModelType.TRANSFORMER`) from the features `qdq calibrate` builds; every model is timed by one Python harness
//! (xtask/python/ov_bench.py: fixed random-token batches at each shape, blocks in turn, each round starting one model
//! later) and scored with `qdq eval --ep openvino` on the first dev questions, qdq's against NNCF's paired by question.
//! Writes out/bench/openvino.{json,md} with targets and verdicts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::cpu_int8::{ShapeRow, Target, Times, shape_rows};
use crate::download::DownloadArgs;
use crate::e2e::{build_qdq, ort_library};
use crate::flags::{CpuInt8Args, VsPythonArgs};
use crate::setup::LIBRARY_ENV;
use crate::vs_python::measure::wait_quiet;
use crate::vs_python::{ensure_venv, export_features, git_head, resolve_paths};
use crate::{root, run_cmd, write_atomic};

/// NNCF as the issue measured it (its ONNX backend needs no OpenVINO).
pub(crate) const NNCF: &str = "nncf==3.4.0";
/// qdq's INT8 on OpenVINO at least this much faster than FP32 at f32 at 1x256 and 8x128 (the Python
/// measurement on a Xeon with AMX: 2.3-3.0x).
const MIN_SPEEDUP: f64 = 2.3;
/// qdq's INT8 on OpenVINO within this many F1 points of FP32 at f32 (whole dev set: `qdq e2e --ep openvino`).
const MAX_DF1: f64 = 0.5;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ModelRow {
    name: String,
    what: String,
    path: PathBuf,
    /// OpenVINO's precision for the float parts.
    precision: String,
    bytes: u64,
    em: f64,
    f1: f64,
    /// Why it was not scored (F1 and EM are NaN then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_scored: Option<String>,
}

/// A model more than this many times slower than FP32 at f32 at every shape is not scored on the bench's questions:
/// bf16 on a CPU without AMX / AVX512-BF16 is emulated (measured 50x slower; 1,000 questions would take most of an
/// hour).
const MAX_SLOWDOWN_TO_SCORE: f64 = 5.0;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct OpenVinoReport {
    command: String,
    git: Option<String>,
    cpu: String,
    int8_dot_product: Option<String>,
    onnxruntime: String,
    plugin: String,
    samples: usize,
    rounds: usize,
    runs: usize,
    threads: usize,
    models: Vec<ModelRow>,
    shapes: Vec<ShapeRow>,
    /// qdq's INT8 against NNCF's on the same questions (paired, qdq minus NNCF): `f1` and `exact_match`.
    qdq_vs_nncf: serde_json::Value,
    /// qdq's INT8 against FP32 at f32 (paired).
    qdq_vs_fp32: serde_json::Value,
    targets: Vec<Target>,
}

/// Installs NNCF into the bench venv (once).
pub(crate) fn ensure_nncf(py: &Path) -> Result<()> {
    let have = Command::new(py).args(["-c", "import nncf"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !have {
        eprintln!("xtask: installing {NNCF} into the bench venv from PyPI");
        run_cmd(Command::new(py).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", NNCF]))?;
    }
    Ok(())
}

pub fn openvino(args: CpuInt8Args, paths_from: VsPythonArgs, download: DownloadArgs) -> Result<()> {
    let mut download = download.resolved();
    download.set.get_or_insert_with(|| "minilm".to_owned());
    let paths = resolve_paths(&paths_from, &download)?;
    let (lib, py, qdq, plugin) = (ort_library()?, ensure_venv()?, build_qdq()?, crate::setup::openvino(false)?);
    ensure_nncf(&py)?;
    let work = paths_from.out.join("openvino");
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let script = root().join("xtask/python/ov_bench.py");
    let qdq_cmd = |sub: &str| {
        let mut c = Command::new(&qdq);
        c.arg(sub).env(LIBRARY_ENV, &lib).args(["--ep-plugin".as_ref(), plugin.as_os_str()]);
        c
    };

    eprintln!("xtask: qdq's INT8 for --ep openvino (qdq e2e --ep openvino --no-eval)");
    let qdq_dir = work.join("qdq");
    let cal_num = paths_from.cal_num.to_string();
    let mut e2e = qdq_cmd("e2e");
    e2e.args(["--ep", "openvino", "--no-eval", "--model"]).arg(&paths.model).arg("--vocab").arg(&paths.vocab);
    e2e.arg("--calibration-data").arg(&paths.calibration).args(["--cal-num", &cal_num, "--out"]).arg(&qdq_dir);
    run_cmd(&mut e2e)?;
    eprintln!("xtask: NNCF's INT8 from the same {cal_num} calibration questions' features");
    let features = work.join("features");
    export_features(
        &paths.calibration,
        &paths.vocab,
        paths_from.cal_num,
        paths_from.seq_len,
        paths_from.doc_stride,
        &features,
    )?;
    let nncf = work.join("nncf_int8.onnx");
    run_cmd(
        Command::new(&py)
            .arg(&script)
            .args(["nncf", "--model"])
            .arg(&paths.model)
            .arg("--features")
            .arg(&features)
            .arg("--out")
            .arg(&nncf),
    )?;
    let models = [
        ("fp32", "FP32, OpenVINO f32".to_owned(), paths.model.clone(), "f32"),
        (
            "fp32-bf16",
            "FP32, OpenVINO bf16 (its default with AMX / AVX512-BF16)".to_owned(),
            paths.model.clone(),
            "bf16",
        ),
        ("qdq", "qdq INT8 for --ep openvino (`cpu` preset)".to_owned(), qdq_dir.join("model_qdq.onnx"), "f32"),
        ("nncf", format!("NNCF INT8 ({NNCF}, ModelType.TRANSFORMER)"), nncf.clone(), "f32"),
    ];

    wait_quiet(paths_from.wait);
    eprintln!(
        "xtask: timing {} models on OpenVINO at {} ({} rounds x {} runs)",
        models.len(),
        args.shapes,
        args.rounds,
        args.runs
    );
    let times_path = work.join("times.json");
    let list: Vec<String> = models.iter().map(|(n, _, p, prec)| format!("{n}={}@{prec}", p.display())).collect();
    run_cmd(
        Command::new(&py)
            .arg(&script)
            .args(["time", "--plugin"])
            .arg(&plugin)
            .args(["--models", &list.join(","), "--shapes", &args.shapes])
            .args(["--rounds", &args.rounds.to_string(), "--runs", &args.runs.to_string()])
            .args(["--threads", &args.threads.to_string(), "--out"])
            .arg(&times_path),
    )?;
    let times: Times =
        serde_json::from_slice(&std::fs::read(&times_path)?).context("the timing harness wrote bad JSON")?;

    let shapes = shape_rows(&times);
    let mut rows = vec![];
    let mut docs = vec![];
    for (name, what, path, precision) in &models {
        let slowest = shapes.iter().filter_map(|s| s.speedup.get(*name)).map(|r| r.median).fold(0.0, f64::max);
        if *name != "fp32" && slowest > 0.0 && slowest < 1.0 / MAX_SLOWDOWN_TO_SCORE {
            let why = format!("at most {slowest:.2}x FP32's speed at any shape: not scored on the bench's questions");
            eprintln!("xtask: {name}: {why}");
            let (name, what, path, precision) =
                ((*name).to_owned(), what.clone(), path.clone(), (*precision).to_owned());
            let bytes = std::fs::metadata(&path)?.len();
            rows.push(ModelRow {
                name,
                what,
                path,
                precision,
                bytes,
                em: f64::NAN,
                f1: f64::NAN,
                not_scored: Some(why),
            });
            docs.push(serde_json::Value::Null);
            continue;
        }
        eprintln!(
            "xtask: qdq eval --ep openvino --ov-precision {precision} {name} on {} dev questions",
            args.f1_samples
        );
        let baseline = match *name {
            "qdq" => Some(nncf.as_path()),
            "nncf" => Some(paths.model.as_path()),
            _ => None,
        };
        let doc = eval_on_openvino(qdq_cmd("eval"), &paths, path, precision, baseline, args.f1_samples)?;
        let bytes = std::fs::metadata(path)?.len();
        let (em, f1) = (doc["exact_match"].as_f64().unwrap_or(f64::NAN), doc["f1"].as_f64().unwrap_or(f64::NAN));
        let (name, what, path, precision) = ((*name).to_owned(), what.clone(), path.clone(), (*precision).to_owned());
        rows.push(ModelRow { name, what, path, precision, bytes, em, f1, not_scored: None });
        docs.push(doc);
    }
    // qdq's against FP32 at f32, paired: the same eval with FP32 as the baseline.
    let vs_fp32 = eval_on_openvino(qdq_cmd("eval"), &paths, &models[2].2, "f32", Some(&paths.model), args.f1_samples)?;
    let made: crate::qdq_json::Results = crate::qdq_json::read(&qdq_dir.join("results.json"))?;
    let report = OpenVinoReport {
        command: format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        git: git_head(),
        cpu: made.provenance.machine.cpu.clone(),
        int8_dot_product: made.provenance.machine.int8_dot_product.clone(),
        onnxruntime: times.versions.get("onnxruntime").cloned().unwrap_or_default(),
        plugin: format!("onnxruntime-ep-openvino {}", crate::setup::OPENVINO_PLUGIN_VERSION),
        samples: args.f1_samples,
        rounds: args.rounds,
        runs: args.runs,
        threads: args.threads,
        models: rows,
        shapes,
        qdq_vs_nncf: docs[2]["vs_baseline"].clone(),
        qdq_vs_fp32: vs_fp32["vs_baseline"].clone(),
        targets: vec![],
    };
    let report = OpenVinoReport { targets: targets(&report), ..report };
    write_report(&report, &paths_from.out)
}

/// `qdq eval --ep openvino --ov-precision P --json` of `model` on the first `samples` dev questions, against
/// `baseline` when given.
fn eval_on_openvino(
    mut eval: Command,
    paths: &crate::vs_python::Paths,
    model: &Path,
    precision: &str,
    baseline: Option<&Path>,
    samples: usize,
) -> Result<serde_json::Value> {
    eval.args(["--ep", "openvino", "--ov-precision", precision, "--model"]).arg(model);
    eval.arg("--vocab").arg(&paths.vocab).arg("--dataset").arg(&paths.dataset);
    if let Some(b) = baseline {
        eval.arg("--baseline").arg(b);
    }
    let out = eval.args(["--samples", &samples.to_string(), "--json"]).current_dir(root()).output()?;
    if !out.status.success() {
        bail!("qdq eval of {} failed:\n{}", model.display(), String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).context("qdq eval --json")
}

/// The goals: qdq's INT8 at least [`MIN_SPEEDUP`] x FP32 (f32) at 1x256 and 8x128, at least NNCF's speed at
/// every shape, at least NNCF's F1, and within [`MAX_DF1`] of FP32 on these questions.
fn targets(r: &OpenVinoReport) -> Vec<Target> {
    let mut out = vec![];
    for s in &r.shapes {
        let (Some(ours), Some(nncf)) = (s.speedup.get("qdq"), s.speedup.get("nncf")) else { continue };
        if s.shape == "1x256" || s.shape == "8x128" {
            out.push(Target {
                name: format!("speed-up over FP32 (f32) at {} (median of rounds)", s.shape),
                target: format!(">= {MIN_SPEEDUP:.1}x"),
                value: format!("{:.2}x", ours.median),
                pass: ours.median >= MIN_SPEEDUP,
            });
        }
        out.push(Target {
            name: format!("speed-up over FP32 at {} against NNCF's", s.shape),
            target: format!(">= NNCF's {:.2}x", nncf.median),
            value: format!("{:.2}x", ours.median),
            pass: ours.median >= nncf.median,
        });
    }
    let delta = |v: &serde_json::Value| v["f1"]["delta"].as_f64().unwrap_or(f64::NAN);
    let interval = |v: &serde_json::Value| {
        format!(
            "{:+.2} [{:+.2}, {:+.2}]",
            delta(v),
            v["f1"]["low"].as_f64().unwrap_or(f64::NAN),
            v["f1"]["high"].as_f64().unwrap_or(f64::NAN)
        )
    };
    out.push(Target {
        name: format!("F1 against NNCF's on the first {} dev questions (paired)", r.samples),
        target: ">= +0.00".into(),
        value: interval(&r.qdq_vs_nncf),
        pass: delta(&r.qdq_vs_nncf) >= 0.0,
    });
    out.push(Target {
        name: format!("dF1 against FP32 (f32) on the first {} dev questions (paired)", r.samples),
        target: format!(">= -{MAX_DF1}"),
        value: interval(&r.qdq_vs_fp32),
        pass: delta(&r.qdq_vs_fp32) >= -MAX_DF1,
    });
    out
}

fn render(r: &OpenVinoReport) -> String {
    let mut md = String::from("# OpenVINO: qdq's INT8 against FP32 and NNCF's INT8\n\n");
    let _ = writeln!(
        md,
        "ONNX Runtime {} with {} (plugin EP, CPU device, CPU fallback off), {} threads, {} (8-bit dot product: {}); \
         latency: {} rounds x {} runs per model and shape, the models in turn in blocks, each round starting one model \
         later; speed-up = FP32 (f32) / model per round (median [min, max]). F1 with `qdq eval --ep openvino` on the \
         first {} dev questions. Commit {}. Command: `{}`.\n",
        r.onnxruntime,
        r.plugin,
        r.threads,
        r.cpu,
        r.int8_dot_product.as_deref().unwrap_or("none"),
        r.rounds,
        r.runs,
        r.samples,
        r.git.as_deref().unwrap_or("?"),
        r.command
    );
    let _ = write!(md, "| model |");
    for s in &r.shapes {
        let _ = write!(md, " speed-up {} |", s.shape);
    }
    let _ = writeln!(md, " size MB | EM | F1 |");
    let _ = writeln!(md, "|---|{}---:|---:|---:|", "---:|".repeat(r.shapes.len()));
    for m in &r.models {
        let _ = write!(md, "| {} |", m.what);
        for s in &r.shapes {
            let cell = s
                .speedup
                .get(&m.name)
                .map_or("1.00x".to_owned(), |x| format!("{:.2}x [{:.2}, {:.2}]", x.median, x.min, x.max));
            let _ = write!(md, " {cell} |");
        }
        match &m.not_scored {
            Some(why) => writeln!(md, " {:.1} | - | - ({why}) |", m.bytes as f64 / 1e6),
            None => writeln!(md, " {:.1} | {:.2} | {:.2} |", m.bytes as f64 / 1e6, m.em, m.f1),
        }
        .ok();
    }
    let _ =
        writeln!(md, "\n## Targets (qdq's INT8 on OpenVINO)\n\n| target | goal | value | verdict |\n|---|---|---|---|");
    for t in &r.targets {
        let _ = writeln!(md, "| {} | {} | {} | {} |", t.name, t.target, t.value, if t.pass { "pass" } else { "FAIL" });
    }
    md
}

fn write_report(r: &OpenVinoReport, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    write_atomic(&out.join("openvino.json"), &serde_json::to_vec_pretty(r)?)?;
    let md = render(r);
    write_atomic(&out.join("openvino.md"), md.as_bytes())?;
    print!("{md}");
    eprintln!("xtask: written {}", out.join("openvino.{json,md}").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rounds::Ratio;

    fn report(qdq_256: f64, nncf_256: f64, vs_nncf: f64, vs_fp32: f64) -> OpenVinoReport {
        let ratio = |m: f64| Ratio { median: m, min: m, max: m };
        let shape = ShapeRow {
            shape: "1x256".into(),
            rounds_ms: Default::default(),
            speedup: [("qdq".to_owned(), ratio(qdq_256)), ("nncf".to_owned(), ratio(nncf_256))].into_iter().collect(),
        };
        let diff = |d: f64| serde_json::json!({ "f1": { "delta": d, "low": d - 0.5, "high": d + 0.5 } });
        OpenVinoReport {
            command: String::new(),
            git: None,
            cpu: "cpu".into(),
            int8_dot_product: None,
            onnxruntime: "1.31.1".into(),
            plugin: String::new(),
            samples: 1000,
            rounds: 1,
            runs: 1,
            threads: 2,
            models: vec![],
            shapes: vec![shape],
            qdq_vs_nncf: diff(vs_nncf),
            qdq_vs_fp32: diff(vs_fp32),
            targets: vec![],
        }
    }

    #[test]
    fn targets_judge_speed_against_fp32_and_nncf_and_f1_against_both() {
        let verdicts = |r: &OpenVinoReport| targets(r).iter().map(|t| t.pass).collect::<Vec<_>>();
        assert_eq!(verdicts(&report(2.4, 2.0, 0.1, -0.2)), [true, true, true, true]);
        // Faster than NNCF but under the 2.3x goal; behind NNCF on F1; too far from FP32.
        assert_eq!(verdicts(&report(2.2, 2.0, -0.1, -0.6)), [false, true, false, false]);
        assert_eq!(verdicts(&report(2.4, 2.5, 0.0, -0.5)), [true, false, true, true]);
        let r = report(2.4, 2.0, 0.1, -0.2);
        let md = render(&OpenVinoReport { targets: targets(&r), ..r });
        assert!(md.contains("+0.10 [-0.40, +0.60]") && md.contains("| pass |"), "{md}");
    }
}
