//! `cargo xtask bench openvino`: qdq's INT8 models for `--ep openvino` (the `openvino` preset) against NNCF's of the
//! same calibration data and against FP32, on OpenVINO, for the SQuAD model and every sentence-embedding model of the
//! assets. FP32 is the baseline twice: with OpenVINO's float parts at f32, and at OpenVINO's own default precision
//! for this CPU (bf16 where it has AMX or AVX512-BF16), the FP32 its users run.
//!
//! Timing: one Python harness (xtask/python/ov_bench.py `time`: fixed random-token batches at each shape, blocks in
//! turn, each round starting one model later), one process per precision, through ONNX Runtime's OpenVINO plugin EP
//! where it offers a CPU device (Intel CPUs), else through the `openvino` package of the same release (its ONNX
//! front end reads the files as the plugin does; AMD CPUs). Scoring: `qdq eval --ep openvino` at f32 where the plugin
//! runs, else the CPU EP (the same Q/DQ arithmetic, computed by ONNX Runtime's kernels): SQuAD F1 and the answers
//! identical to FP32's, paired by question; retrieval and cosine to FP32 for the embedding models. Writes
//! out/bench/openvino.{json,md} with targets and verdicts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::bench::embeddings::onnx_in;
use crate::bench::measure::wait_quiet;
use crate::bench::report::{Target, targets_table, write};
use crate::bench::rounds::Ratio;
use crate::bench::rows::{ShapeRow, Times, shape_rows};
use crate::bench::venv::{NNCF, ensure_nncf, ensure_package, ensure_venv, export_features, git_head, resolve_paths};
use crate::e2e::{Assets, build_qdq, ort_library};
use crate::flags::{BenchData, EmbeddingModels, OpenVinoBenchArgs, TimingArgs};
use crate::qdq_json::Embedding;
use crate::setup::LIBRARY_ENV;
use crate::workspace::{root, run_cmd, write_atomic};

/// The OpenVINO runtime of the plugin's release, for timing where the plugin offers no device.
const OPENVINO: &str = "openvino==2026.4.1";
/// qdq's INT8 at least this many times NNCF's speed at every shape, at OpenVINO's own default precision here (the
/// SQuAD model and a base-size embedding model; the small embedding models: NNCF's).
const MIN_VS_NNCF: f64 = 1.05;
/// qdq's answers identical to FP32's at least this many points above NNCF's.
const MIN_SAME_LEAD: f64 = 1.0;
/// qdq's F1 within this many points of FP32's (paired).
const MAX_DF1: f64 = 0.3;
/// On a CPU with AMX: qdq's INT8 at least this many times FP32 at OpenVINO's bf16 at every shape (MiniLM: the int8
/// GEMMs run 1.4-1.6x the bf16 ones there, and the rest of the model is the same size in both).
const MIN_VS_BF16_AMX: f64 = 1.15;
/// The same for a base-size model, whose GEMMs are most of its time.
const MIN_VS_BF16_AMX_BASE: f64 = 1.4;

/// What `ov_bench.py devices` found.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Devices {
    plugin_cpu: bool,
    cpu: String,
    capabilities: Vec<String>,
    default_precision: String,
    openvino: String,
}

/// One model file of a task.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ModelFile {
    name: String,
    what: String,
    path: PathBuf,
    bytes: u64,
}

/// Every model of a task timed at one precision of OpenVINO's float parts.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Timing {
    precision: String,
    shapes: Vec<ShapeRow>,
    /// Per shape, NNCF's time over qdq's per round (above 1: qdq faster).
    vs_nncf: BTreeMap<String, Ratio>,
}

/// A paired difference with its 95 % interval (points).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Paired {
    delta: f64,
    low: f64,
    high: f64,
}

impl Paired {
    fn of(ours: &[f64], theirs: &[f64]) -> Paired {
        let d = squad_metrics::paired_difference(ours, theirs);
        Paired { delta: d.delta, low: d.low, high: d.high }
    }

    fn describe(&self) -> String {
        format!("{:+.2} [{:+.2}, {:+.2}]", self.delta, self.low, self.high)
    }
}

/// A SQuAD model's scores on the bench's questions.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct QaScore {
    name: String,
    em: f64,
    f1: f64,
    /// Against FP32's predictions (paired by question): F1, and the share of answers identical to FP32's (%).
    df1: Option<Paired>,
    same_answers: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct QaScores {
    questions: usize,
    models: Vec<QaScore>,
    /// qdq minus NNCF, paired: F1, and the answers identical to FP32's (points).
    qdq_vs_nncf_f1: Paired,
    qdq_vs_nncf_same: Paired,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TaskReport {
    /// `squad`, or the embedding model's folder name.
    name: String,
    /// A base-size model (`--base-model`): the bars of a model where INT8 pays most.
    #[serde(default)]
    base: bool,
    models: Vec<ModelFile>,
    timing: Vec<Timing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    qa: Option<QaScores>,
    /// An embedding model's INT8 models against FP32 (`qdq eval --baseline`), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    embeddings: BTreeMap<String, Embedding>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct OpenVinoReport {
    command: String,
    git: Option<String>,
    devices: Devices,
    /// `plugin` (ONNX Runtime's OpenVINO plugin EP) or `runtime` (the `openvino` package).
    timed_with: String,
    /// `openvino` (f32) or `cpu` (ONNX Runtime's CPU EP: the same Q/DQ arithmetic).
    scored_on: String,
    /// Whether the CPU has AMX (OpenVINO's bf16 on AMX is the bar the AMX target sets).
    amx: bool,
    rounds: usize,
    runs: usize,
    threads: usize,
    tasks: Vec<TaskReport>,
    targets: Vec<Target>,
    /// Targets this host cannot measure, and why.
    not_measured: Vec<String>,
}

/// Whether Linux lists AMX among the CPU's flags.
fn has_amx() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| {
        s.lines().find(|l| l.starts_with("flags")).is_some_and(|l| l.split_whitespace().any(|f| f == "amx_bf16"))
    })
}

/// Everything the tasks share: the tools, where they run, the work directory.
struct Bench<'a> {
    qdq: PathBuf,
    lib: PathBuf,
    py: PathBuf,
    plugin: PathBuf,
    devices: Devices,
    timing: &'a TimingArgs,
    work: PathBuf,
    wait: bool,
}

impl Bench<'_> {
    fn qdq(&self, sub: &str) -> Command {
        let mut c = Command::new(&self.qdq);
        c.arg(sub).env(LIBRARY_ENV, &self.lib);
        c
    }

    /// `qdq eval` on OpenVINO (f32) where the plugin serves this CPU, else on the CPU EP.
    fn eval(&self) -> Command {
        self.eval_at("f32")
    }

    /// `qdq eval` on OpenVINO with its float parts at `precision` where the plugin serves this CPU, else on the CPU
    /// EP.
    fn eval_at(&self, precision: &str) -> Command {
        let mut c = self.qdq("eval");
        if self.devices.plugin_cpu {
            c.args(["--ep", "openvino", "--ov-precision", precision, "--ep-plugin"]).arg(&self.plugin);
        }
        c
    }

    /// OpenVINO's own default float precision here when it is not f32 and models can be scored at it (the plugin
    /// serves this CPU): the float its users run.
    fn scored_default(&self) -> Option<&str> {
        (self.devices.plugin_cpu && self.devices.default_precision != "f32").then_some(&self.devices.default_precision)
    }

    /// The precisions timed: f32, and OpenVINO's own default where it is another.
    fn precisions(&self) -> Vec<String> {
        let mut p = vec!["f32".to_owned()];
        if self.devices.default_precision != "f32" {
            p.push(self.devices.default_precision.clone());
        }
        p
    }

    /// `models` timed at `shapes` at each precision, one harness process per precision.
    fn time(&self, task: &str, models: &[ModelFile], shapes: &str) -> Result<Vec<Timing>> {
        let script = root().join("xtask/python/ov_bench.py");
        let mut out = vec![];
        for precision in self.precisions() {
            wait_quiet(self.wait);
            eprintln!(
                "xtask: timing {task}'s {} models on OpenVINO ({}) at {precision}, {shapes} ({} rounds x {} runs)",
                models.len(),
                if self.devices.plugin_cpu { "plugin EP" } else { "runtime" },
                self.timing.rounds,
                self.timing.runs
            );
            let list: Vec<String> =
                models.iter().map(|m| format!("{}={}@{precision}", m.name, m.path.display())).collect();
            let times_path = self.work.join(format!("times_{task}_{precision}.json"));
            let mut c = Command::new(&self.py);
            c.arg(&script).args(["time", "--plugin"]);
            if self.devices.plugin_cpu {
                c.arg(&self.plugin);
            } else {
                c.arg("runtime");
            }
            c.args(["--models", &list.join(","), "--shapes", shapes]);
            c.args(["--rounds", &self.timing.rounds.to_string(), "--runs", &self.timing.runs.to_string()]);
            run_cmd(c.args(["--threads", &self.timing.threads.to_string(), "--out"]).arg(&times_path))?;
            let times: Times =
                serde_json::from_slice(&std::fs::read(&times_path)?).context("the timing harness wrote bad JSON")?;
            let shapes = shape_rows(&times);
            let vs_nncf = shapes
                .iter()
                .filter_map(|s| {
                    let (q, n) = (s.rounds_ms.get("qdq")?, s.rounds_ms.get("nncf")?);
                    Some((s.shape.clone(), Ratio::of(n.iter().zip(q).map(|(n, q)| n / q).collect())))
                })
                .collect();
            out.push(Timing { precision, shapes, vs_nncf });
        }
        Ok(out)
    }
}

/// What OpenVINO offers here (`ov_bench.py devices` through the bench venv's `py`, with the plugin library
/// `plugin`), said when the plugin has no CPU device.
fn devices(py: &Path, plugin: &Path) -> Result<Devices> {
    let probe = Command::new(py)
        .arg(root().join("xtask/python/ov_bench.py"))
        .args(["devices", "--plugin"])
        .arg(plugin)
        .output()?;
    if !probe.status.success() {
        bail!("cannot query OpenVINO:\n{}", String::from_utf8_lossy(&probe.stderr));
    }
    let devices: Devices = serde_json::from_slice(&probe.stdout).context("ov_bench.py devices wrote bad JSON")?;
    if !devices.plugin_cpu {
        eprintln!(
            "xtask: the OpenVINO plugin offers no CPU device on this {} (it serves Intel CPUs): timing with the openvino \
             package's runtime of the same release, scoring on the CPU EP",
            devices.cpu
        );
    }
    Ok(devices)
}

pub fn openvino(bench: crate::flags::OpenVinoBench) -> Result<()> {
    let crate::flags::OpenVinoBench { args, embeddings: embed, timing, data: vs, download } = bench;
    let timing = &timing;
    let mut download = download.resolved();
    download.set.get_or_insert_with(|| "minilm".to_owned());
    let paths = resolve_paths(&vs, &download)?;
    let (lib, py, qdq, plugin) = (ort_library()?, ensure_venv()?, build_qdq()?, crate::setup::openvino(false)?);
    ensure_nncf(&py)?;
    ensure_package(&py, "openvino", OPENVINO)?;
    let work = vs.out.join("openvino");
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let devices = devices(&py, &plugin)?;
    let bench = Bench { qdq, lib, py, plugin, devices, timing, work, wait: vs.wait };
    let mut tasks = vec![squad(&bench, &paths, &vs, &args)?];
    if !args.ov_squad_only {
        let assets = Assets::download(&download)?;
        let folders = match &embed.embedding_model {
            Some(m) => vec![m.clone()],
            None => assets.embedding_models.clone(),
        };
        for folder in folders {
            tasks.push(embedding(&bench, &folder, &paths.dataset, &paths.calibration, &embed, false)?);
        }
        if let Some(base) = &embed.base_model {
            tasks.push(embedding(&bench, base, &paths.dataset, &paths.calibration, &embed, true)?);
        }
    }
    let amx = has_amx();
    let report = OpenVinoReport {
        command: format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        git: git_head(),
        timed_with: if bench.devices.plugin_cpu { "plugin" } else { "runtime" }.into(),
        scored_on: if bench.devices.plugin_cpu { "openvino" } else { "cpu" }.into(),
        devices: bench.devices.clone(),
        amx,
        rounds: timing.rounds,
        runs: timing.runs,
        threads: timing.threads,
        tasks,
        targets: vec![],
        not_measured: vec![],
    };
    let (targets, not_measured) = targets(&report);
    let report = OpenVinoReport { targets, not_measured, ..report };
    write(&report, &render(&report), &vs.out, "openvino")
}

/// FP32, qdq's and NNCF's models of a task, as the report names them.
fn three_models(fp32: PathBuf, qdq: PathBuf, nncf: PathBuf) -> Vec<ModelFile> {
    let file =
        |name: &str, what: String, path: PathBuf| ModelFile { name: name.into(), what, bytes: bytes(&path), path };
    vec![
        file("fp32", "FP32".into(), fp32),
        file("qdq", "qdq INT8 (`openvino` preset)".into(), qdq),
        file("nncf", format!("NNCF INT8 ({NNCF}, ModelType.TRANSFORMER)"), nncf),
    ]
}

/// The file's size, 0 when it cannot be read.
fn bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The SQuAD model: qdq's and NNCF's INT8 from the same calibration questions, timed, and scored on the first
/// `--ov-samples` dev questions (0: all).
fn squad(b: &Bench, paths: &crate::bench::venv::Paths, vs: &BenchData, args: &OpenVinoBenchArgs) -> Result<TaskReport> {
    eprintln!("xtask: qdq's INT8 for --ep openvino (qdq e2e --policy openvino --no-eval)");
    let qdq_dir = b.work.join("qdq");
    let cal_num = vs.cal_num.to_string();
    let mut e2e = b.qdq("e2e");
    e2e.args(["--policy", "openvino", "--no-eval", "--model"]).arg(&paths.model).arg("--vocab").arg(&paths.vocab);
    run_cmd(
        e2e.arg("--calibration-data").arg(&paths.calibration).args(["--cal-num", &cal_num, "--out"]).arg(&qdq_dir),
    )?;
    eprintln!("xtask: NNCF's INT8 from the same {cal_num} calibration questions' features");
    let features = b.work.join("features");
    export_features(&paths.calibration, &paths.vocab, vs.cal_num, vs.seq_len, vs.doc_stride, &features)?;
    let nncf = b.work.join("nncf_int8.onnx");
    let script = root().join("xtask/python/ov_bench.py");
    run_cmd(
        Command::new(&b.py)
            .arg(&script)
            .args(["nncf", "--model"])
            .arg(&paths.model)
            .arg("--features")
            .arg(&features)
            .arg("--out")
            .arg(&nncf),
    )?;
    let qdq_model = qdq_dir.join("model_qdq.onnx");
    let mut models = three_models(paths.model.clone(), qdq_model, nncf);
    models.extend(tuned(b, paths, vs, args)?);
    let timing = b.time("squad", &models, &args.ov_shapes)?;
    let qa = score_squad(b, paths, &models, args.ov_samples)?;
    Ok(TaskReport { name: "squad".into(), base: false, models, timing, qa: Some(qa), embeddings: BTreeMap::new() })
}

/// `qdq tune --ep openvino --min-same P` of the SQuAD model for each P of `--ov-tune` (the plugin serving this CPU:
/// candidates timed at OpenVINO's own default precision against FP32 at it), each as a model of the bench.
fn tuned(
    b: &Bench,
    paths: &crate::bench::venv::Paths,
    vs: &BenchData,
    args: &OpenVinoBenchArgs,
) -> Result<Vec<ModelFile>> {
    if !b.devices.plugin_cpu {
        return Ok(vec![]);
    }
    let mut out = vec![];
    for &share in &args.ov_tune {
        let dir = b.work.join(format!("tune_{share}"));
        eprintln!(
            "xtask: qdq tune --ep openvino --min-same {share} (candidates on the first {} questions)",
            args.ov_tune_samples
        );
        let mut c = b.qdq("tune");
        c.args(["--ep", "openvino", "--ov-precision", "f32", "--ep-plugin"]).arg(&b.plugin);
        c.arg("--model").arg(&paths.model).arg("--vocab").arg(&paths.vocab).arg("--dataset").arg(&paths.dataset);
        c.arg("--calibration-data").arg(&paths.calibration).args(["--cal-num", &vs.cal_num.to_string()]);
        c.args(["--samples", &args.ov_tune_samples.to_string(), "--min-same", &share.to_string(), "--out"]).arg(&dir);
        run_cmd(&mut c)?;
        let path = dir.join("model_qdq.onnx");
        let what = format!("qdq tuned (`qdq tune --ep openvino --min-same {share}`)");
        out.push(ModelFile { name: format!("tuned{share}"), what, bytes: bytes(&path), path });
    }
    Ok(out)
}

/// Each model's predictions on the first `samples` dev questions (0: all), scored and paired with FP32's and with
/// each other by question.
fn score_squad(b: &Bench, paths: &crate::bench::venv::Paths, models: &[ModelFile], samples: usize) -> Result<QaScores> {
    let mut dataset = squad_metrics::load_dataset(&paths.dataset)?;
    if samples > 0 {
        dataset = dataset.first_n(samples);
    }
    let mut preds = BTreeMap::new();
    // Every model at f32, and FP32 again at OpenVINO's own default precision where that is another: the float its
    // users run, scored against FP32's answers as the INT8 models are.
    let fp32_default = models.first().zip(b.scored_default()).map(|(m, p)| (m, format!("fp32_{p}"), p.to_owned()));
    let runs = models.iter().map(|m| (m, m.name.clone(), "f32".to_owned())).chain(fp32_default);
    let mut names = vec![];
    for (m, name, precision) in runs {
        eprintln!("xtask: qdq eval {name} on {samples} dev questions (0 = all)");
        let out = b.work.join(format!("predictions_{name}.json"));
        let mut eval = b.eval_at(&precision);
        eval.arg("--model").arg(&m.path).arg("--vocab").arg(&paths.vocab).arg("--dataset").arg(&paths.dataset);
        run_cmd(eval.args(["--samples", &samples.to_string(), "--out"]).arg(&out))?;
        preds.insert(name.clone(), squad_metrics::load_predictions(&out)?);
        names.push(name);
    }
    let f1 = |name: &str| squad_metrics::question_f1(&dataset, &preds[name], false);
    let em = |name: &str| squad_metrics::question_em(&dataset, &preds[name], false);
    // Each question's scores are 0-1 (the paired difference reports points); the table shows per cent.
    let same = |name: &str| -> Vec<f64> {
        dataset.questions().map(|q| f64::from(u8::from(preds[name].get(&q.id) == preds["fp32"].get(&q.id)))).collect()
    };
    let mean = |v: &[f64]| 100.0 * v.iter().sum::<f64>() / v.len().max(1) as f64;
    let fp32_f1 = f1("fp32");
    let scores = names
        .iter()
        .map(|name| {
            let (f, e) = (f1(name), em(name));
            let vs = name != "fp32";
            QaScore {
                name: name.clone(),
                em: mean(&e),
                f1: mean(&f),
                df1: vs.then(|| Paired::of(&f, &fp32_f1)),
                same_answers: vs.then(|| mean(&same(name))),
            }
        })
        .collect();
    Ok(QaScores {
        questions: dataset.num_questions(),
        models: scores,
        qdq_vs_nncf_f1: Paired::of(&f1("qdq"), &f1("nncf")),
        qdq_vs_nncf_same: Paired::of(&same("qdq"), &same("nncf")),
    })
}

/// An embedding model: qdq's and NNCF's INT8 from the same calibration texts, timed at one text and 32 at its
/// length, and compared with FP32 on the dev set as retrieval.
fn embedding(
    b: &Bench,
    folder: &Path,
    dataset: &Path,
    calibration: &Path,
    args: &EmbeddingModels,
    base: bool,
) -> Result<TaskReport> {
    let name = folder.file_name().map_or("embedding".into(), |n| n.to_string_lossy().into_owned());
    let work = b.work.join(&name);
    std::fs::create_dir_all(&work)?;
    let seq_len = crate::bench::embeddings::max_seq_length(folder).unwrap_or(128);
    eprintln!(
        "xtask: {name}: qdq's INT8 for --ep openvino ({} calibration questions and their paragraphs)",
        args.embedding_cal_num
    );
    let qdq_dir = work.join("qdq");
    let mut e2e = b.qdq("e2e");
    e2e.args(["--policy", "openvino", "--no-eval", "--model"]).arg(folder).arg("--calibration-data").arg(calibration);
    run_cmd(e2e.args(["--cal-num", &args.embedding_cal_num.to_string(), "--out"]).arg(&qdq_dir))?;
    eprintln!("xtask: {name}: NNCF's INT8 from the same calibration texts");
    let texts = work.join("calibration_texts.json");
    let ids = crate::bench::embeddings::calibration_ids(calibration, folder, args.embedding_cal_num, seq_len)?;
    write_atomic(&texts, &serde_json::to_vec(&ids)?)?;
    let fp32 = onnx_in(folder);
    let nncf = work.join("nncf_int8.onnx");
    let mut c = Command::new(&b.py);
    c.arg(root().join("xtask/python/embed_bench.py")).args(["nncf", "--model"]).arg(&fp32);
    run_cmd(c.arg("--texts").arg(&texts).arg("--out").arg(&nncf))?;
    let qdq_model = qdq_dir.join("model_qdq.onnx");
    let models = three_models(fp32, qdq_model, nncf);
    // A base-size model at the shapes (one text of its length, 8x128); the small ones at 1 and 32 texts.
    let shapes = if base { format!("1x{seq_len},8x128") } else { format!("1x{seq_len},32x{seq_len}") };
    let timing = b.time(&name, &models, &shapes)?;
    let mut embeddings = BTreeMap::new();
    for m in models.iter().filter(|m| m.name != "fp32") {
        eprintln!("xtask: {name}: qdq eval {} against FP32 ({} queries; 0 = all)", m.name, args.embedding_samples);
        // qdq's evaluation also gives both models at OpenVINO's own default precision (FP32 there: the float its
        // users run); the peer's leaves it out.
        let mut eval = b.eval();
        if m.name != "qdq" {
            eval.arg("--no-default-float");
        }
        let e = crate::bench::embeddings::score(eval, &m.path, folder, (dataset, args.embedding_samples), seq_len)?;
        embeddings.insert(m.name.clone(), e);
    }
    Ok(TaskReport { name, base, models, timing, qa: None, embeddings })
}

/// The targets, and what this host cannot measure.
fn targets(r: &OpenVinoReport) -> (Vec<Target>, Vec<String>) {
    let (mut out, mut not) = (vec![], vec![]);
    for t in &r.tasks {
        speed_targets(r, t, &mut out, &mut not);
        if let Some(qa) = &t.qa {
            qa_targets(r, t, qa, &mut out);
        }
        if let (Some(q), Some(n)) = (t.embeddings.get("qdq"), t.embeddings.get("nncf")) {
            let (a, b) = (q.fidelity.mean_cosine, n.fidelity.mean_cosine);
            let name = format!("{}: mean cosine to FP32 against NNCF's (on {})", t.name, r.scored_on);
            out.push(Target::new(name, format!(">= {b:.5}"), format!("{a:.5}"), a >= b));
        }
    }
    if r.timed_with == "runtime" {
        not.push(format!(
            "through ONNX Runtime's OpenVINO plugin EP: it offers no device on this CPU ({}); timed with the openvino \
             package of the same release, scored on the CPU EP",
            r.devices.cpu
        ));
    }
    (out, not)
}

/// A task's speed bars: qdq against NNCF at OpenVINO's own default precision here (1.05x for the SQuAD model and a
/// base-size one, NNCF's for the small embedding models), and on AMX against FP32 at bf16 (1.15x, a base-size model
/// 1.4x); elsewhere that bar is said to be unmeasured.
fn speed_targets(r: &OpenVinoReport, t: &TaskReport, out: &mut Vec<Target>, not: &mut Vec<String>) {
    let at = |p: &str| t.timing.iter().find(|x| x.precision == p);
    let default = r.devices.default_precision.as_str();
    if let Some(timing) = at(default).or_else(|| at("f32")) {
        let min = if t.qa.is_some() || t.base { MIN_VS_NNCF } else { 1.0 };
        for (shape, v) in &timing.vs_nncf {
            let name = format!("{}: speed against NNCF's at {shape} ({}, median of rounds)", t.name, timing.precision);
            let value = format!("{:.3}x [{:.3}, {:.3}]", v.median, v.min, v.max);
            out.push(Target::new(name, format!(">= {min:.2}x"), value, v.median >= min));
        }
    }
    let bar = if t.base { MIN_VS_BF16_AMX_BASE } else { MIN_VS_BF16_AMX };
    match (r.amx, at("bf16")) {
        (true, Some(bf16)) if t.qa.is_some() || t.base => {
            for s in &bf16.shapes {
                let Some(q) = s.speedup.get("qdq") else { continue };
                let name = format!("{}: speed against FP32 at OpenVINO's bf16 at {} (AMX)", t.name, s.shape);
                let value = format!("{:.2}x [{:.2}, {:.2}]", q.median, q.min, q.max);
                out.push(Target::new(name, format!(">= {bar}x"), value, q.median >= bar));
            }
        }
        _ if t.qa.is_some() || t.base => not.push(format!(
            "{}: INT8 against FP32 at bf16 on AMX (>= {bar}x): this CPU ({}) has no AMX",
            t.name, r.devices.cpu
        )),
        _ => {}
    }
}

/// The SQuAD model's fidelity bars: dF1, the lead over NNCF in answers identical to FP32's, and each tuned model's
/// `--min-same` share kept while running faster than FP32 at OpenVINO's own default precision.
fn qa_targets(r: &OpenVinoReport, t: &TaskReport, qa: &QaScores, out: &mut Vec<Target>) {
    let q = qa.models.iter().find(|m| m.name == "qdq");
    if let Some(d) = q.and_then(|q| q.df1) {
        let name = format!("{}: dF1 against FP32 on {} questions (paired, on {})", t.name, qa.questions, r.scored_on);
        out.push(Target::new(name, format!(">= -{MAX_DF1}"), d.describe(), d.delta >= -MAX_DF1));
    }
    let s = &qa.qdq_vs_nncf_same;
    let name = format!("{}: answers = FP32's, qdq minus NNCF (points, paired, on {})", t.name, r.scored_on);
    out.push(Target::new(name, format!(">= +{MIN_SAME_LEAD:.1}"), s.describe(), s.delta >= MIN_SAME_LEAD));
    let default = r.devices.default_precision.as_str();
    let timing = t.timing.iter().find(|x| x.precision == default);
    for m in t.models.iter().filter(|m| m.name.starts_with("tuned")) {
        let share: f64 = m.name.trim_start_matches("tuned").parse().unwrap_or(f64::NAN);
        let same = qa.models.iter().find(|x| x.name == m.name).and_then(|x| x.same_answers);
        let name = format!("{}: {} keeps --min-same of the answers (on {})", t.name, m.name, r.scored_on);
        let value = same.map_or("-".to_owned(), |v| format!("{v:.2} %"));
        out.push(Target::new(name, format!(">= {share} %"), value, same.is_some_and(|v| v >= share)));
        let slowest = timing.map(|x| x.shapes.iter().filter_map(|s| s.speedup.get(&m.name)).map(|v| v.median));
        let slowest = slowest.and_then(|v| v.reduce(f64::min));
        let name = format!("{}: {} against FP32 at {default}, slowest shape (median of rounds)", t.name, m.name);
        let value = slowest.map_or("-".to_owned(), |v| format!("{v:.2}x"));
        out.push(Target::new(name, "> 1.00x".to_owned(), value, slowest.is_some_and(|v| v > 1.0)));
    }
}

fn render(r: &OpenVinoReport) -> String {
    let mut md = String::from("# OpenVINO: qdq's INT8 against NNCF's and FP32\n\n");
    let _ = writeln!(
        md,
        "{} (OpenVINO {}, capabilities {}; its default precision for float parts here: {}{}), {} threads; timed with {} \
         ({} rounds x {} runs per model and shape, the models in turn in blocks, each round starting one model \
         later; speed-up = FP32 / model per round at the same precision, median [min, max]); scored on {}. Commit {}. \
         Command: `{}`.\n",
        r.devices.cpu,
        r.devices.openvino,
        r.devices.capabilities.join(", "),
        r.devices.default_precision,
        if r.amx { ", AMX" } else { "" },
        r.threads,
        if r.timed_with == "plugin" { "ONNX Runtime's OpenVINO plugin EP" } else { "the openvino package's runtime" },
        r.rounds,
        r.runs,
        if r.scored_on == "openvino" { "OpenVINO (plugin EP, f32)" } else { "ONNX Runtime's CPU EP" },
        r.git.as_deref().unwrap_or("?"),
        r.command
    );
    for t in &r.tasks {
        let _ = writeln!(md, "## {}\n", t.name);
        for timing in &t.timing {
            render_timing(&mut md, &t.models, timing);
        }
        if let Some(qa) = &t.qa {
            render_qa(&mut md, qa);
        }
        if !t.embeddings.is_empty() {
            render_embeddings(&mut md, &t.embeddings);
        }
    }
    targets_table(&mut md, "Targets", &r.targets);
    for n in &r.not_measured {
        let _ = writeln!(md, "\nNot measured: {n}.");
    }
    md
}

/// One precision's table: each model's speed-up over FP32 per shape (FP32's own median ms), then qdq against NNCF.
fn render_timing(md: &mut String, models: &[ModelFile], timing: &Timing) {
    let _ = write!(md, "| model ({}) | MB |", timing.precision);
    for s in &timing.shapes {
        let _ = write!(md, " {} vs FP32 |", s.shape);
    }
    let _ = writeln!(md, "\n|---|---:|{}", "---:|".repeat(timing.shapes.len()));
    for m in models {
        let _ = write!(md, "| {} | {:.1} |", m.what, m.bytes as f64 / 1e6);
        for s in &timing.shapes {
            let fp32_ms = s.rounds_ms.get("fp32").map(|v| median(v)).unwrap_or(f64::NAN);
            let cell = match s.speedup.get(&m.name) {
                Some(x) => format!("{:.2}x [{:.2}, {:.2}]", x.median, x.min, x.max),
                None => format!("{fp32_ms:.2} ms"),
            };
            let _ = write!(md, " {cell} |");
        }
        md.push('\n');
    }
    let vs: Vec<String> =
        timing.vs_nncf.iter().map(|(s, v)| format!("{s} {:.3}x [{:.3}, {:.3}]", v.median, v.min, v.max)).collect();
    let _ = writeln!(md, "\nqdq against NNCF ({}): {}.\n", timing.precision, vs.join(", "));
}

fn render_qa(md: &mut String, qa: &QaScores) {
    let _ = writeln!(md, "| model | EM | F1 | dF1 vs FP32 [95 %] | answers = FP32's |\n|---|---:|---:|---:|---:|");
    for m in &qa.models {
        let df1 = m.df1.map_or(String::new(), |d| d.describe());
        let same = m.same_answers.map_or(String::new(), |s| format!("{s:.2} %"));
        let _ = writeln!(md, "| {} | {:.2} | {:.2} | {df1} | {same} |", m.name, m.em, m.f1);
    }
    let _ = writeln!(
        md,
        "\n{} questions. qdq minus NNCF (paired): F1 {}, answers = FP32's {} points.\n",
        qa.questions,
        qa.qdq_vs_nncf_f1.describe(),
        qa.qdq_vs_nncf_same.describe()
    );
}

fn render_embeddings(md: &mut String, embeddings: &BTreeMap<String, Embedding>) {
    md.push_str(
        "| model | nDCG@10 kept | dnDCG@10 [95 %] | cosine mean / p1 | top-1 kept |\n|---|---:|---:|---:|---:|\n",
    );
    for (name, e) in embeddings {
        let (kept, d) = e.retrieval.as_ref().map_or((String::new(), String::new()), |r| {
            let d = r.difference.ndcg_at_10;
            (
                format!("{:.2} %", 100.0 * r.difference.ndcg_at_10_retained),
                format!("{:+.2} [{:+.2}, {:+.2}]", d.delta, d.low, d.high),
            )
        });
        let f = &e.fidelity;
        let (mean, p1, top1) = (f.mean_cosine, f.p1_cosine, 100.0 * f.neighbours.top1_same);
        let _ = writeln!(md, "| {name} | {kept} | {d} | {mean:.5} / {p1:.5} | {top1:.2} % |");
    }
    // FP32 and qdq's model at OpenVINO's own default precision, each against FP32 at f32 (from qdq's evaluation).
    if let Some(d) = embeddings.get("qdq").and_then(|e| e.default_float.as_ref()) {
        for (name, at) in [("fp32", &d.fp32), ("qdq", &d.int8)] {
            let Some(at) = at else { continue };
            let (f, r) = (&at.fidelity, at.retrieval.as_ref());
            let kept = r.map_or(String::new(), |r| format!("{:.2} %", 100.0 * r.difference.ndcg_at_10_retained));
            let d_ndcg = r.map_or(String::new(), |r| {
                let d = r.difference.ndcg_at_10;
                format!("{:+.2} [{:+.2}, {:+.2}]", d.delta, d.low, d.high)
            });
            let (mean, p1, top1) = (f.mean_cosine, f.p1_cosine, 100.0 * f.neighbours.top1_same);
            let label = format!("{name} at {}", d.precision);
            let _ = writeln!(md, "| {label} | {kept} | {d_ndcg} | {mean:.5} / {p1:.5} | {top1:.2} % |");
        }
    }
    md.push('\n');
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratio(m: f64) -> Ratio {
        Ratio { median: m, min: m, max: m }
    }

    fn report(vs_nncf: f64, bf16: f64, same_lead: f64, df1: f64, amx: bool) -> OpenVinoReport {
        let shape = |speedup: f64| ShapeRow {
            shape: "8x128".into(),
            rounds_ms: Default::default(),
            speedup: [("qdq".to_owned(), ratio(speedup))].into_iter().collect(),
        };
        let timing = |p: &str, s: f64| Timing {
            precision: p.into(),
            shapes: vec![shape(s)],
            vs_nncf: [("8x128".to_owned(), ratio(vs_nncf))].into_iter().collect(),
        };
        let paired = |d: f64| Paired { delta: d, low: d - 0.3, high: d + 0.3 };
        let qa = QaScores {
            questions: 10570,
            models: vec![QaScore {
                name: "qdq".into(),
                em: 61.0,
                f1: 73.0,
                df1: Some(paired(df1)),
                same_answers: Some(93.0),
            }],
            qdq_vs_nncf_f1: paired(0.1),
            qdq_vs_nncf_same: paired(same_lead),
        };
        OpenVinoReport {
            command: String::new(),
            git: None,
            devices: Devices {
                plugin_cpu: false,
                cpu: "cpu".into(),
                capabilities: vec![],
                default_precision: "bf16".into(),
                openvino: "2026.4.1".into(),
            },
            timed_with: "runtime".into(),
            scored_on: "cpu".into(),
            amx,
            rounds: 1,
            runs: 1,
            threads: 2,
            tasks: vec![TaskReport {
                name: "squad".into(),
                base: false,
                models: vec![],
                timing: vec![timing("f32", 2.5), timing("bf16", bf16)],
                qa: Some(qa),
                embeddings: BTreeMap::new(),
            }],
            targets: vec![],
            not_measured: vec![],
        }
    }

    /// Speed against NNCF at OpenVINO's own default precision, the identical answers' lead and dF1 are judged
    /// everywhere; the bf16 bar only on a CPU with AMX, and otherwise said to be unmeasured, as is a timing without
    /// the plugin.
    #[test]
    fn targets_judge_nncf_fidelity_and_bf16_only_on_amx() {
        let verdicts = |r: &OpenVinoReport| targets(r).0.iter().map(|t| t.pass).collect::<Vec<_>>();
        assert_eq!(verdicts(&report(1.06, 1.5, 1.2, -0.2, false)), [true, true, true]);
        assert_eq!(verdicts(&report(1.04, 1.5, 0.8, -0.4, false)), [false, false, false]);
        let (t, not) = targets(&report(1.06, 1.1, 1.2, -0.2, true));
        assert_eq!(t.iter().map(|t| t.pass).collect::<Vec<_>>(), [true, false, true, true]);
        assert!(t[0].name.contains("(bf16, median of rounds)"), "{:?}", t[0]);
        assert!(not.iter().any(|n| n.contains("plugin EP")), "{not:?}");
        let (_, not) = targets(&report(1.06, 1.5, 1.2, -0.2, false));
        assert!(not.iter().any(|n| n.contains("no AMX")), "{not:?}");
        // A tuned model: the share it was asked for kept, and faster than FP32 at the default precision.
        let mut r = report(1.06, 1.5, 1.2, -0.2, false);
        let t = &mut r.tasks[0];
        let path = PathBuf::from("tune_97/model_qdq.onnx");
        t.models.push(ModelFile { name: "tuned97".into(), what: String::new(), path, bytes: 0 });
        let qa = t.qa.as_mut().unwrap();
        qa.models.push(QaScore { name: "tuned97".into(), em: 0.0, f1: 0.0, df1: None, same_answers: Some(96.5) });
        t.timing[1].shapes[0].speedup.insert("tuned97".into(), ratio(1.2));
        let tuned: Vec<(String, bool)> =
            targets(&r).0.into_iter().filter(|t| t.name.contains("tuned97")).map(|t| (t.value, t.pass)).collect();
        assert_eq!(tuned, [("96.50 %".to_owned(), false), ("1.20x".to_owned(), true)]);
        let r = report(1.06, 1.5, 1.2, -0.2, false);
        let (targets, not_measured) = targets(&r);
        let md = render(&OpenVinoReport { targets, not_measured, ..r });
        assert!(md.contains("| pass |") && md.contains("Not measured") && md.contains("1.060x"), "{md}");
    }
}
