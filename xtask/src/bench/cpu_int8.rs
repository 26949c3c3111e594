//! `cargo xtask bench cpu-int8`: qdq's CPU INT8 models against FP32 and ONNX Runtime's `quantize_dynamic`
//! one-liner, on ORT's CPU EP. Four models: FP32; qdq's default for `--ep cpu` (static, the `cpu` preset); qdq
//! `--mode dynamic`; ORT's `quantize_dynamic` with its defaults, made by the bench venv's onnxruntime. Each is timed by
//! the same Python harness (xtask/python/cpu_int8.py: one session per model, fixed random-token batches at each shape,
//! warm-up, then rounds that run every model in turn) and scored with `qdq eval` on the first dev questions (whose
//! own dynamic-padding latency is reported too). Writes out/bench/cpu_int8.{json,md} with targets and verdicts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::bench::measure::wait_quiet;
use crate::bench::report::{Target, targets_table, write};
use crate::bench::rounds::Ratio;
use crate::bench::rows::{ShapeRow, Times, run_eval, shape_rows};
use crate::bench::venv::{Paths, ensure_venv, git_head, resolve_paths};
use crate::download::DownloadArgs;
use crate::e2e::{build_qdq, ort_library};
use crate::flags::{BenchData, CpuInt8Args, TimingArgs};
use crate::setup::LIBRARY_ENV;
use crate::workspace::{root, run_cmd};

/// The size target of the default CPU model, in MB (10^6 bytes).
const MAX_MB: f64 = 25.0;
/// How far the default CPU model's F1 may fall below FP32 (on the bench's questions; the whole dev set is
/// `cargo xtask e2e --check --samples 0`'s).
const MAX_DF1: f64 = 1.0;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ModelRow {
    name: String,
    what: String,
    path: PathBuf,
    bytes: u64,
    em: f64,
    f1: f64,
    /// `qdq eval`'s dynamic-padding latency (batch 1, after its warm-up), ms per feature, one per eval round.
    eval_ms_per_feature: Vec<f64>,
}

impl ModelRow {
    /// FP32 / this model per eval round: median, min, max.
    fn eval_speedup(&self, fp32: &ModelRow) -> Ratio {
        Ratio::of(fp32.eval_ms_per_feature.iter().zip(&self.eval_ms_per_feature).map(|(f, x)| f / x).collect())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CpuInt8Report {
    command: String,
    git: Option<String>,
    cpus: usize,
    /// The CPU, as qdq's results.json of the static model records it (its 8-bit dot-product instructions decide how
    /// much the integer kernels gain).
    #[serde(default)]
    machine: crate::qdq_json::Machine,
    onnxruntime: String,
    samples: usize,
    /// Dev questions of each `qdq eval` latency round.
    #[serde(default)]
    eval_samples: usize,
    rounds: usize,
    runs: usize,
    threads: usize,
    models: Vec<ModelRow>,
    shapes: Vec<ShapeRow>,
    targets: Vec<Target>,
}

/// The four models of the comparison, each named and described, and the qdq run that made the default one.
type Models = ([(&'static str, String, PathBuf); 4], PathBuf);

/// What the bench runs its steps with: the built `qdq` and the ONNX Runtime it loads, the bench venv's Python and
/// the harness.
struct Tools {
    qdq: PathBuf,
    lib: PathBuf,
    py: PathBuf,
    script: PathBuf,
}

impl Tools {
    /// `qdq <sub>` on the bench's ONNX Runtime.
    fn qdq(&self, sub: &str) -> Command {
        let mut c = Command::new(&self.qdq);
        c.arg(sub).env(LIBRARY_ENV, &self.lib);
        c
    }
}

pub fn cpu_int8(args: CpuInt8Args, timing: &TimingArgs, paths_from: BenchData, download: DownloadArgs) -> Result<()> {
    let mut download = download.resolved();
    download.set.get_or_insert_with(|| "minilm".to_owned());
    let mut paths = resolve_paths(&paths_from, &download)?;
    let script = root().join("xtask/python/cpu_int8.py");
    let tools = Tools { lib: ort_library()?, py: ensure_venv()?, qdq: build_qdq()?, script };
    let name = if args.ort_optimized { "cpu_int8_ort_optimized" } else { "cpu_int8" };
    let work = paths_from.out.join(name);
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    if args.ort_optimized {
        let optimized = work.join("model_ort_optimized.onnx");
        eprintln!("xtask: ONNX Runtime's transformers optimizer on {}", paths.model.display());
        run_cmd(
            Command::new(&tools.py)
                .arg(&tools.script)
                .args(["optimize", "--model"])
                .arg(&paths.model)
                .arg("--out")
                .arg(&optimized),
        )?;
        paths.model = optimized;
    }
    let (models, static_dir) = make_models(&tools, &args, &paths, paths_from.cal_num, &work)?;
    // Latency: every model in one harness, alternating.
    wait_quiet(paths_from.wait);
    let times = time_models(&tools, &models, &args.shapes, timing, &work)?;
    let rows = score_models(&tools, &models, &paths, &args)?;
    let made: crate::qdq_json::Results = crate::qdq_json::read(&static_dir.join("results.json"))?;
    let report = CpuInt8Report {
        command: format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        git: git_head(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        machine: made.provenance.machine,
        onnxruntime: times.versions.get("onnxruntime").cloned().unwrap_or_default(),
        samples: args.f1_samples,
        eval_samples: args.eval_samples,
        rounds: timing.rounds,
        runs: timing.runs,
        threads: timing.threads,
        shapes: shape_rows(&times),
        targets: vec![],
        models: rows,
    };
    let report = CpuInt8Report { targets: targets(&report), ..report };
    write(&report, &render(&report), &paths_from.out, name)
}

/// FP32, qdq's default CPU model (`qdq e2e --ep cpu --no-eval` on `cal_num` calibration questions), qdq's dynamic
/// mode and ORT's quantize_dynamic, made into `work`.
fn make_models(tools: &Tools, args: &CpuInt8Args, paths: &Paths, cal_num: usize, work: &Path) -> Result<Models> {
    eprintln!("xtask: qdq's default CPU model (qdq e2e --ep cpu --no-eval)");
    let static_dir = work.join("static");
    run_cmd(
        tools
            .qdq("e2e")
            .args(["--ep", "cpu", "--no-eval", "--model"])
            .arg(&paths.model)
            .arg("--vocab")
            .arg(&paths.vocab)
            .arg("--calibration-data")
            .arg(&paths.calibration)
            .arg("--cal-num")
            .arg(cal_num.to_string())
            .arg("--out")
            .arg(&static_dir),
    )?;
    let dynamic = work.join("qdq_dynamic.onnx");
    eprintln!("xtask: qdq quantize --mode dynamic");
    run_cmd(tools.qdq("quantize").arg("--model").arg(&paths.model).args(["--mode", "dynamic", "-o"]).arg(&dynamic))?;
    let ort_dynamic = work.join("ort_dynamic.onnx");
    eprintln!("xtask: ONNX Runtime quantize_dynamic");
    run_cmd(
        Command::new(&tools.py)
            .arg(&tools.script)
            .args(["dynamic", "--model"])
            .arg(&paths.model)
            .arg("--out")
            .arg(&ort_dynamic),
    )?;
    let form = if args.ort_optimized { ", ORT-optimized form" } else { "" };
    let models = [
        ("fp32", format!("FP32{form}"), paths.model.clone()),
        ("qdq", format!("qdq default for --ep cpu (static, `cpu` preset{form})"), static_dir.join("model_qdq.onnx")),
        ("qdq-dynamic", format!("qdq --mode dynamic{form}"), dynamic),
        ("ort-dynamic", format!("ORT quantize_dynamic (defaults{form})"), ort_dynamic),
    ];
    Ok((models, static_dir))
}

/// Every model timed by the harness at each of `shapes`, in alternation, into `work`/times.json.
fn time_models(
    tools: &Tools,
    models: &[(&'static str, String, PathBuf)],
    shapes: &str,
    timing: &TimingArgs,
    work: &Path,
) -> Result<Times> {
    eprintln!("xtask: timing {} models at {shapes} ({} rounds x {} runs)", models.len(), timing.rounds, timing.runs);
    let times_path = work.join("times.json");
    let list: Vec<String> = models.iter().map(|(n, _, p)| format!("{n}={}", p.display())).collect();
    run_cmd(
        Command::new(&tools.py)
            .arg(&tools.script)
            .args(["time", "--models", &list.join(","), "--shapes", shapes])
            .args(["--rounds", &timing.rounds.to_string(), "--runs", &timing.runs.to_string()])
            .args(["--threads", &timing.threads.to_string(), "--out"])
            .arg(&times_path),
    )?;
    serde_json::from_slice(&std::fs::read(&times_path)?).context("the timing harness wrote bad JSON")
}

/// Each model scored once on the bench's questions, then `qdq eval`'s own latency: short passes, every model in
/// turn, round after round, each round starting one model later (no model always runs right after another); a
/// model's answers must not change between rounds.
fn score_models(
    tools: &Tools,
    models: &[(&'static str, String, PathBuf)],
    paths: &Paths,
    args: &CpuInt8Args,
) -> Result<Vec<ModelRow>> {
    let mut rows = vec![];
    for (name, what, path) in models {
        eprintln!("xtask: qdq eval {name} on {} dev questions (F1)", args.f1_samples);
        let doc = run_eval(tools.qdq("eval"), paths, path, args.f1_samples)?;
        let (bytes, em, f1) = (std::fs::metadata(path)?.len(), doc.exact_match, doc.f1);
        let (name, what, path) = ((*name).to_owned(), what.clone(), path.clone());
        rows.push(ModelRow { name, what, path, bytes, em, f1, eval_ms_per_feature: vec![] });
    }
    let mut first_f1: Vec<Option<f64>> = vec![None; models.len()];
    for round in 0..args.eval_rounds {
        let (n, rounds) = (args.eval_samples, args.eval_rounds);
        eprintln!("xtask: qdq eval latency, {n} dev questions, round {} of {rounds}", round + 1);
        for i in (0..models.len()).map(|k| (k + round) % models.len()) {
            let doc = run_eval(tools.qdq("eval"), paths, &models[i].2, args.eval_samples)?;
            match first_f1[i] {
                Some(f1) if f1 != doc.f1 => {
                    bail!("qdq eval of {} scored F1 {f1} in round 1 and {} in round {}", models[i].0, doc.f1, round + 1)
                }
                _ => first_f1[i] = Some(doc.f1),
            }
            rows[i].eval_ms_per_feature.push(doc.latency.ms_per_feature.unwrap_or(f64::NAN));
        }
    }
    Ok(rows)
}

/// The issue's goals for qdq's default CPU model: at least ORT dynamic's speed-up at every shape and in `qdq eval`,
/// at most [`MAX_MB`], and F1 within [`MAX_DF1`] of FP32.
fn targets(r: &CpuInt8Report) -> Vec<Target> {
    let model = |n: &str| r.models.iter().find(|m| m.name == n);
    let mut out = vec![];
    for s in &r.shapes {
        let (Some(ours), Some(ort)) = (s.speedup.get("qdq"), s.speedup.get("ort-dynamic")) else { continue };
        out.push(Target {
            name: format!("speed-up over FP32 at {} (median of rounds)", s.shape),
            target: format!(">= ORT dynamic's {:.2}x", ort.median),
            value: format!("{:.2}x", ours.median),
            pass: ours.median >= ort.median,
        });
    }
    if let (Some(f), Some(q), Some(o)) = (model("fp32"), model("qdq"), model("ort-dynamic")) {
        let (ours, ort) = (q.eval_speedup(f).median, o.eval_speedup(f).median);
        out.push(Target {
            name: format!(
                "speed-up over FP32 in qdq eval (dynamic padding; median of {} alternating rounds)",
                f.eval_ms_per_feature.len()
            ),
            target: format!(">= ORT dynamic's {ort:.2}x"),
            value: format!("{ours:.2}x"),
            pass: ours >= ort,
        });
        let mb = q.bytes as f64 / 1e6;
        out.push(Target {
            name: "file size".into(),
            target: format!("<= {MAX_MB} MB"),
            value: format!("{mb:.1} MB"),
            pass: mb <= MAX_MB,
        });
        let df1 = q.f1 - f.f1;
        out.push(Target {
            name: format!("dF1 on the first {} dev questions", r.samples),
            target: format!(">= -{MAX_DF1}"),
            value: format!("{df1:+.2}"),
            pass: df1 >= -MAX_DF1,
        });
    }
    out
}

fn render(r: &CpuInt8Report) -> String {
    let mut md = String::from("# CPU INT8: qdq against FP32 and ONNX Runtime's quantize_dynamic\n\n");
    let _ = writeln!(
        md,
        "ONNX Runtime {} CPU EP, {} intra-op threads, {} CPUs ({}, 8-bit dot product: {}); latency: {} rounds x {} \
         runs per model and shape, the models run in turn in blocks (one untimed run, then the timed ones; each round \
         starts one model later); speed-up = FP32 / model per round (median, [min, max]). F1 with `qdq eval` on the first {} dev questions; \
         its dynamic-padding speed-up from {} rounds of {} questions, the models in turn. Commit {}. Command: `{}`.\n",
        r.onnxruntime,
        r.threads,
        r.cpus,
        r.machine.cpu,
        r.machine.int8_dot_product.as_deref().unwrap_or("none"),
        r.rounds,
        r.runs,
        r.samples,
        r.models.first().map_or(0, |m| m.eval_ms_per_feature.len()),
        r.eval_samples,
        r.git.as_deref().unwrap_or("?"),
        r.command
    );
    let shapes: Vec<&str> = r.shapes.iter().map(|s| s.shape.as_str()).collect();
    let _ = write!(md, "| model |");
    for s in &shapes {
        let _ = write!(md, " speed-up {s} |");
    }
    let _ = writeln!(md, " qdq eval speed-up | size MB | EM | F1 | dF1 |");
    let _ = writeln!(md, "|---|{}---:|---:|---:|---:|---:|", "---:|".repeat(shapes.len()));
    let fp32 = r.models.iter().find(|m| m.name == "fp32");
    for m in &r.models {
        let _ = write!(md, "| {} |", m.what);
        for s in &r.shapes {
            let cell = s
                .speedup
                .get(&m.name)
                .map_or("1.00x".to_owned(), |x| format!("{:.2}x [{:.2}, {:.2}]", x.median, x.min, x.max));
            let _ = write!(md, " {cell} |");
        }
        let eval = match fp32.map(|f| m.eval_speedup(f)) {
            Some(x) if fp32.is_some_and(|f| f.name != m.name) => {
                format!("{:.2}x [{:.2}, {:.2}]", x.median, x.min, x.max)
            }
            _ => "1.00x".to_owned(),
        };
        let df1 = fp32.filter(|f| f.name != m.name).map(|f| format!("{:+.2}", m.f1 - f.f1)).unwrap_or_default();
        let _ = writeln!(md, " {eval} | {:.1} | {:.2} | {:.2} | {df1} |", m.bytes as f64 / 1e6, m.em, m.f1);
    }
    targets_table(&mut md, "Targets (qdq's default CPU model)", &r.targets);
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times() -> Times {
        serde_json::from_str(
            r#"{"versions": {"onnxruntime": "1.31.1"}, "shapes": {"1x256": {
                "fp32": [30.0, 40.0, 30.0], "qdq": [10.0, 20.0, 15.0], "ort-dynamic": [15.0, 20.0, 15.0]}}}"#,
        )
        .unwrap()
    }

    #[test]
    fn speedups_are_per_round_ratios_and_targets_compare_with_ort() {
        let shapes = shape_rows(&times());
        let q = &shapes[0].speedup["qdq"];
        assert_eq!((q.min, q.median, q.max), (2.0, 2.0, 3.0));
        let o = &shapes[0].speedup["ort-dynamic"];
        assert_eq!((o.min, o.median, o.max), (2.0, 2.0, 2.0));
        let row = |name: &str, bytes: u64, f1: f64, ms: &[f64]| ModelRow {
            name: name.into(),
            what: name.into(),
            path: PathBuf::new(),
            bytes,
            em: 0.0,
            f1,
            eval_ms_per_feature: ms.to_vec(),
        };
        let r = CpuInt8Report {
            command: String::new(),
            git: None,
            cpus: 2,
            machine: crate::qdq_json::Machine { cpu: "AMD EPYC".into(), int8_dot_product: None },
            onnxruntime: "1.31.1".into(),
            samples: 1000,
            eval_samples: 200,
            rounds: 3,
            runs: 8,
            threads: 2,
            models: vec![
                // Eval rounds: qdq 2.0x, 1.5x, 3.0x (median 2.0); ORT 2.14x, 2.0x, 2.4x (median 2.14).
                row("fp32", 90_000_000, 73.0, &[30.0, 30.0, 36.0]),
                row("qdq", 23_000_000, 72.5, &[15.0, 20.0, 12.0]),
                row("ort-dynamic", 22_000_000, 69.0, &[14.0, 15.0, 15.0]),
            ],
            shapes,
            targets: vec![],
        };
        let t = targets(&r);
        let verdicts: Vec<(&str, bool)> = t.iter().map(|t| (t.name.as_str(), t.pass)).collect();
        assert_eq!(verdicts.len(), 4, "{verdicts:?}");
        assert!(t[0].pass, "equal medians pass");
        assert!(!t[1].pass, "qdq eval 2.00x < ORT's 2.14x fails");
        assert!(t[2].pass && t[3].pass);
        let md = render(&CpuInt8Report { targets: t, ..r });
        assert!(md.contains("| qdq | 2.00x [2.00, 3.00] | 2.00x [1.50, 3.00] |") && md.contains("FAIL"), "{md}");
    }
}
