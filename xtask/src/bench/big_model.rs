//! `cargo xtask bench big-model`: a model over protobuf's 2 GiB through qdq, with each command's peak memory.
//!
//! The model is onnx-ir's tiny BERT whose word-embedding table is grown to `--size-gib` with external data in a sparse
//! file (the real rows first, zeros after: the tokens of the fixtures never reach them, so the big model answers
//! exactly as the small one). Ranges come from `qdq calibrate` on the small model (the same graph). Then `qdq inspect`,
//! `qdq quantize` (the `tensorrt` preset keeps the table in float, so its output passes 2 GiB too and must be written
//! with external data; the `cpu` preset stores the table as int8), `qdq eval` of the big model and of both quantized
//! ones, `qdq calibrate` of the big model and the whole `qdq e2e`, each reaped with `wait4` for its peak RSS.
//! Targets: every command's peak under 1.5x the model's size; the big model's predictions equal to the small one's.
//! Writes out/bench/big_model.{json,md}.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use onnx_ir::proto::tensor_proto::DataLocation;
use onnx_ir::proto::{StringStringEntryProto, TensorProto};
use onnx_ir::tiny_bert::{TinyBertConfig, build};
use serde::{Deserialize, Serialize};

use crate::bench::measure::measure;
use crate::bench::report::{Target, targets_table, write};
use crate::e2e::{build_qdq, ort_library};
use crate::flags::BigModelArgs;
use crate::setup::LIBRARY_ENV;
use crate::workspace::root;

/// Peak RSS limit of `quantize` and `eval`, as a multiple of the model's size.
const MAX_RSS_RATIO: f64 = 1.5;
const WORD_EMBEDDING: &str = "bert.embeddings.word_embeddings.weight";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    name: String,
    command: String,
    exit_code: Option<i32>,
    wall_s: f64,
    peak_rss_mb: f64,
    /// Peak RSS / the big model's size.
    rss_ratio: f64,
    /// F1 of an `eval` step.
    f1: Option<f64>,
    /// The last lines of its output (what it said).
    said: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct BigModelReport {
    command: String,
    model_bytes: u64,
    rows: u64,
    small_f1: Option<f64>,
    steps: Vec<Step>,
    targets: Vec<Target>,
}

/// Command-line arguments from pieces of any kind.
fn os(parts: &[&dyn AsRef<OsStr>]) -> Vec<OsString> {
    parts.iter().map(|p| p.as_ref().to_owned()).collect()
}

/// Runs the bench (see the module docs).
pub fn big_model(args: BigModelArgs, out: &Path) -> Result<()> {
    let work = out.join("big_model");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("cannot clear {}", work.display()))?;
    }
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let cfg = TinyBertConfig { max_positions: 64, vocab_size: 1000, ..TinyBertConfig::default() };
    let small = work.join("small.onnx");
    build(&cfg).save(&small)?;
    let (big, bytes, rows) = grow(&small, &work, args.size_gib)?;
    eprintln!("xtask: {} is {:.2} GiB ({rows} word-embedding rows, sparse)", big.display(), gib(bytes));
    let mut runner =
        Runner { qdq: build_qdq()?, lib: ort_library()?, data: root().join("testdata/squad"), work, bytes };
    let (steps, small_f1, same_predictions) = runner.all_steps(&small, &big)?;
    let targets = targets(&steps, same_predictions);
    let report = BigModelReport {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        model_bytes: bytes,
        rows,
        small_f1,
        steps,
        targets,
    };
    write(&report, &render(&report), out, "big_model")?;
    // The model files are large: keep only the logs and the report.
    let work = &runner.work;
    for f in ["big.onnx", "big.onnx.data", "q_tensorrt.onnx", "q_tensorrt.onnx.data", "q_cpu.onnx"] {
        let _ = std::fs::remove_file(work.join(f));
    }
    for f in ["model_qdq.onnx", "model_qdq.onnx.data", "model_smoothed.onnx", "model_smoothed.onnx.data"] {
        let _ = std::fs::remove_file(work.join("e2e").join(f));
    }
    Ok(())
}

/// Runs and measures the bench's `qdq` commands: the built binary on `lib`, the tiny SQuAD fixtures in `data`,
/// logs in `work`; `bytes` is the big model's size (each step's peak memory is set against it).
struct Runner {
    qdq: PathBuf,
    lib: PathBuf,
    data: PathBuf,
    work: PathBuf,
    bytes: u64,
}

impl Runner {
    /// Every step on the small model and on `big` (grown from `small`): the steps measured on the big model, the
    /// small model's F1, and whether both models gave the same predictions.
    fn all_steps(&mut self, small: &Path, big: &Path) -> Result<(Vec<Step>, Option<f64>, bool)> {
        let dataset = self.data.join("tiny-v1.1.json");
        let work = self.work.clone();
        let (cal, cal_big) = (work.join("cal"), work.join("cal_big"));
        let calibrate = |model: &Path, out: &Path| {
            os(&[&"calibrate", &"--model", &model, &"--calibration-data", &dataset, &"--policy", &"tensorrt"])
                .into_iter()
                .chain(os(&[&"--policy-option", &"smooth=off", &"--out", &out]))
                .collect::<Vec<_>>()
        };
        let predictions = |model: &Path| model.with_extension("predictions.json");
        let eval = |model: &Path| {
            let p = predictions(model);
            os(&[&"eval", &"--model", &model, &"--dataset", &dataset, &"--out", &p, &"--json"])
        };
        let small_cal = self.step("calibrate_small", calibrate(small, &cal), true)?;
        if small_cal.exit_code != Some(0) {
            bail!("calibrating the small model failed:\n{}", small_cal.said);
        }
        let small_eval = self.step("eval_small", eval(small), true)?;
        let ranges = cal.join("calibration.json");
        let (q_trt, q_cpu) = (work.join("q_tensorrt.onnx"), work.join("q_cpu.onnx"));
        let mut steps = vec![self.step("inspect", os(&[&"inspect", &big, &"--json"]), false)?];
        for (preset, q) in [("tensorrt", &q_trt), ("cpu", &q_cpu)] {
            let a = os(&[&"quantize", &"--model", &big, &"--ranges", &ranges, &"--policy", &preset]);
            let b = os(&[&"--policy-option", &"smooth=off", &"-o", q]);
            steps.push(self.step(&format!("quantize_{preset}"), a.into_iter().chain(b).collect(), false)?);
        }
        for (name, m) in [("eval_big", big), ("eval_q_tensorrt", &q_trt), ("eval_q_cpu", &q_cpu)] {
            steps.push(self.step(name, eval(m), true)?);
        }
        steps.push(self.step("calibrate_big", calibrate(big, &cal_big), true)?);
        // The whole job with the preset's defaults (smoothing on).
        let e2e_out = work.join("e2e");
        let a = os(&[&"e2e", &"--model", &big, &"--dataset", &dataset, &"--policy", &"tensorrt", &"--out", &e2e_out]);
        steps.push(self.step("e2e_big", a, true)?);
        let read =
            |p: PathBuf| std::fs::read(&p).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        let same_predictions = read(predictions(small)).is_some_and(|a| Some(a) == read(predictions(big)));
        Ok((steps, small_eval.f1, same_predictions))
    }

    /// `qdq <args>` (with the tiny SQuAD vocabulary and lengths when `with_data`), measured, as step `name`.
    fn step(&mut self, name: &str, args: Vec<OsString>, with_data: bool) -> Result<Step> {
        let mut cmd = Command::new(&self.qdq);
        cmd.args(args);
        if with_data {
            cmd.env(LIBRARY_ENV, &self.lib).arg("--vocab").arg(self.data.join("vocab.txt"));
            cmd.args(["--seq-len", "64", "--query-len", "16", "--doc-stride", "24"]);
        }
        eprintln!("xtask: qdq {name}");
        let run = measure(&mut cmd, &self.work.join(format!("{name}.log")), &mut Vec::new())?;
        let log = run.log_text();
        let said: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
        let s = Step {
            name: name.to_owned(),
            command: format!("{cmd:?}"),
            exit_code: run.code,
            wall_s: run.wall_s,
            peak_rss_mb: run.peak_rss_mb,
            rss_ratio: run.peak_rss_mb * 1e6 / self.bytes as f64,
            f1: run.stdout_json::<crate::qdq_json::Eval>().map(|e| e.f1),
            said: said[said.len().saturating_sub(3)..].join("\n"),
        };
        eprintln!(
            "xtask:   exit {:?}, {:.1} s, peak {:.0} MB ({:.2}x)",
            s.exit_code, s.wall_s, s.peak_rss_mb, s.rss_ratio
        );
        Ok(s)
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Writes big.onnx: `small` with its word-embedding table grown to about `size_gib` GiB, stored as external data in
/// big.onnx.data (the table's real rows, then a sparse run of zeros). Returns its path, its size (model file plus
/// data) and the table's rows.
fn grow(small: &Path, dir: &Path, size_gib: f64) -> Result<(PathBuf, u64, u64)> {
    let mut model = onnx_ir::Model::load(small)?;
    let g = model.graph_mut();
    let t = g
        .initializer
        .iter_mut()
        .find(|t| t.name() == WORD_EMBEDDING)
        .with_context(|| format!("the tiny model has no {WORD_EMBEDDING}"))?;
    let hidden = *t.dims.get(1).context("word embedding is not 2-D")? as u64;
    let real = t.raw_data.take().context("word embedding has no raw data")?;
    let rows = ((size_gib * (1u64 << 30) as f64) / (hidden * 4) as f64).ceil() as u64;
    let len = rows * hidden * 4;
    let data = dir.join("big.onnx.data");
    {
        use std::io::Write as _;
        let mut f = File::create(&data).with_context(|| format!("cannot create {}", data.display()))?;
        f.write_all(&real)?;
        f.set_len(len)?;
    }
    let entry = |k: &str, v: String| StringStringEntryProto { key: Some(k.to_owned()), value: Some(v) };
    *t = TensorProto {
        dims: vec![rows as i64, hidden as i64],
        data_location: Some(DataLocation::External as i32),
        external_data: vec![
            entry("location", "big.onnx.data".into()),
            entry("offset", "0".into()),
            entry("length", len.to_string()),
        ],
        raw_data: None,
        ..std::mem::take(t)
    };
    let path = dir.join("big.onnx");
    let bytes = model.to_bytes()?;
    std::fs::write(&path, &bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok((path, bytes.len() as u64 + len, rows))
}

fn targets(steps: &[Step], same_predictions: bool) -> Vec<Target> {
    let mut t = Vec::new();
    for s in steps {
        let ok = s.exit_code == Some(0);
        t.push(Target {
            name: format!("qdq {} peak RSS / model size", s.name.replace('_', " ")),
            target: format!("exit 0, <= {MAX_RSS_RATIO}x"),
            value: if ok {
                format!("{:.2}x ({:.0} MB)", s.rss_ratio, s.peak_rss_mb)
            } else {
                format!("exit {:?}", s.exit_code)
            },
            pass: ok && s.rss_ratio <= MAX_RSS_RATIO,
        });
    }
    t.push(Target {
        name: "the big model's predictions = the small one's (the grown rows are never read)".into(),
        target: "identical".into(),
        value: if same_predictions { "identical" } else { "different or missing" }.into(),
        pass: same_predictions,
    });
    t
}

fn render(r: &BigModelReport) -> String {
    let mut md = String::from("# A model over 2 GiB through qdq\n\n");
    let _ = writeln!(
        md,
        "Command: `{}`\n\nonnx-ir's tiny BERT with its word-embedding table grown to {} rows: {:.2} GiB ({} bytes), the \
         table as external data in a sparse file. Peak RSS from `wait4`.\n",
        r.command,
        r.rows,
        gib(r.model_bytes),
        r.model_bytes
    );
    targets_table(&mut md, "Targets", &r.targets);
    md.push_str("\n## Steps\n\n| step | exit | wall s | peak RSS MB | / model size | F1 | last words |\n|---|---:|---:|---:|---:|---:|---|\n");
    for s in &r.steps {
        let f1 = s.f1.map_or("—".to_owned(), |f| format!("{f:.2}"));
        let said = s.said.replace('\n', " / ").replace('|', "\\|");
        let _ = writeln!(
            md,
            "| {} | {:?} | {:.1} | {:.0} | {:.2}x | {f1} | {said} |",
            s.name, s.exit_code, s.wall_s, s.peak_rss_mb, s.rss_ratio
        );
    }
    md
}
