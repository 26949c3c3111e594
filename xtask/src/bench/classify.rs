//! `cargo xtask bench classify`: a fine-tuned sentence-pair classifier (GLUE's TSV layout beside it), qdq's INT8 from
//! `qdq e2e` with no flag beyond the files against ONNX Runtime's dynamic INT8 and NNCF's INT8, each scored by `qdq
//! eval --baseline` on the dev pairs (accuracy, the paired difference with its interval, class = FP32's, KL) and timed
//! at 1 and 32 pairs on the CPU EP. xtask/python/make_qnli_classifier.py makes such a classifier (QNLI rebuilt from
//! SQuAD, all-MiniLM-L6-v2's weights fine-tuned); the assets hold none, so CI does not run it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::bench::measure::wait_quiet;
use crate::bench::report::{Target, targets_table, write};
use crate::bench::rows::{ShapeRow, Times, shape_rows};
use crate::bench::venv::{ensure_nncf, ensure_venv, git_head};
use crate::e2e::{build_qdq, ort_library};
use crate::flags::{ClassifyBench, ClassifyBenchArgs, TimingArgs};
use crate::qdq_json::ClassifierEval;
use crate::setup::LIBRARY_ENV;
use crate::workspace::{root, run_cmd, write_atomic};

/// The targets (77): INT8 within half a point of FP32's accuracy, class = FP32's for 99 % of the pairs.
const MAX_LOSS_POINTS: f64 = 0.5;
const MIN_SAME_CLASS: f64 = 0.99;

/// The text and pair columns of GLUE's sentence-pair tasks, as their TSV headers name them.
const PAIR_COLUMNS: [(&str, &str); 4] =
    [("question", "sentence"), ("sentence1", "sentence2"), ("question1", "question2"), ("#1 String", "#2 String")];

/// One quantized model against FP32.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ModelRow {
    name: String,
    what: String,
    path: PathBuf,
    eval: ClassifierEval,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ClassifyReport {
    command: String,
    git: Option<String>,
    machine: crate::qdq_json::Machine,
    classifier: PathBuf,
    /// Calibration pairs (`None`: each tool's own default, qdq 100 and NNCF 300).
    cal_num: Option<usize>,
    samples: usize,
    seq_len: usize,
    rounds: usize,
    runs: usize,
    threads: usize,
    models: Vec<ModelRow>,
    /// qdq's accuracy against each peer's, input by input (`qdq eval --model qdq --baseline peer`).
    #[serde(default)]
    vs_peers: Vec<PeerDifference>,
    speed: Vec<ShapeRow>,
    targets: Vec<Target>,
}

/// qdq's INT8 minus a peer's, paired over the same dev pairs: accuracy in points with its 95 % interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PeerDifference {
    peer: String,
    accuracy_difference: Option<crate::qdq_json::Paired>,
}

/// The models compared: name, what it is, file.
type Models = Vec<(&'static str, String, PathBuf)>;

/// What the bench's steps share: the tools and the classifier's files.
struct Run {
    lib: PathBuf,
    py: PathBuf,
    qdq: PathBuf,
    model: PathBuf,
    dev: PathBuf,
    train: PathBuf,
    work: PathBuf,
}

impl Run {
    fn qdq(&self, sub: &str) -> Command {
        let mut c = Command::new(&self.qdq);
        c.arg(sub).env(LIBRARY_ENV, &self.lib);
        c
    }
}

pub fn classify(bench: ClassifyBench) -> Result<()> {
    let ClassifyBench { args, timing, out, wait } = bench;
    let dir = &args.classifier;
    let (model, dev, train) = (dir.join("model"), dir.join("dev.tsv"), dir.join("train.tsv"));
    for p in [&model, &dev, &train] {
        if !p.exists() {
            bail!(
                "{} is not a classifier folder: no {} (xtask/python/make_qnli_classifier.py writes model/, dev.tsv, \
                 train.tsv)",
                dir.display(),
                p.display()
            );
        }
    }
    let (lib, py, qdq) = (ort_library()?, ensure_venv()?, build_qdq()?);
    ensure_nncf(&py)?;
    let work = out.join("classify");
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let run = Run { lib, py, qdq, model, dev, train, work };
    let models = make_models(&run, &args)?;
    let rows = score(&run, &models, args.classify_samples)?;
    let vs_peers = head_to_head(&run, &models, args.classify_samples)?;
    wait_quiet(wait);
    let speed = time(&run, &models, &timing, args.classify_seq_len)?;
    let made: crate::qdq_json::Results = crate::qdq_json::read(&run.work.join("qdq/results.json"))?;
    let report = ClassifyReport {
        command: format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        git: git_head(),
        machine: made.provenance.machine,
        classifier: dir.clone(),
        cal_num: args.classify_cal_num,
        samples: args.classify_samples,
        seq_len: args.classify_seq_len,
        rounds: timing.rounds,
        runs: timing.runs,
        threads: timing.threads,
        models: rows,
        vs_peers,
        speed,
        targets: vec![],
    };
    let report = ClassifyReport { targets: targets(&report), ..report };
    write(&report, &render(&report), &out, "classify")
}

/// qdq's INT8 (`qdq e2e` with the files alone, and `--cal-num` when given), ONNX Runtime's dynamic INT8 and NNCF's of
/// the first training pairs.
fn make_models(run: &Run, args: &ClassifyBenchArgs) -> Result<Models> {
    eprintln!("xtask: qdq's INT8 (qdq e2e with the files alone)");
    let qdq_dir = run.work.join("qdq");
    let mut e2e = run.qdq("e2e");
    e2e.arg("--model").arg(&run.model).arg("--dataset").arg(&run.dev).arg("--calibration-data").arg(&run.train);
    if let Some(n) = args.classify_cal_num {
        e2e.args(["--cal-num", &n.to_string()]);
    }
    run_cmd(e2e.args(["--no-eval", "--out"]).arg(&qdq_dir))?;
    let fp32 = crate::bench::embeddings::onnx_in(&run.model);
    let script = root().join("xtask/python/embed_bench.py");
    eprintln!("xtask: ONNX Runtime's dynamic INT8 (optimum's avx512_vnni configuration)");
    let dynamic = run.work.join("ort_dynamic.onnx");
    run_cmd(Command::new(&run.py).arg(&script).args(["dynamic", "--model"]).arg(&fp32).arg("--out").arg(&dynamic))?;
    eprintln!("xtask: NNCF's INT8 from the first training pairs");
    let pairs = run.work.join("calibration_pairs.json");
    let ids = pair_ids(&run.train, &run.model, args.classify_cal_num.unwrap_or(300), args.classify_seq_len)?;
    write_atomic(&pairs, &serde_json::to_vec(&ids)?)?;
    let nncf = run.work.join("nncf_int8.onnx");
    let mut c = Command::new(&run.py);
    run_cmd(c.arg(&script).args(["nncf", "--model"]).arg(&fp32).arg("--texts").arg(&pairs).arg("--out").arg(&nncf))?;
    Ok(vec![
        ("qdq", "qdq INT8 (`qdq e2e` defaults)".into(), qdq_dir.join("model_qdq.onnx")),
        ("ort-dynamic", "ONNX Runtime dynamic INT8".into(), dynamic),
        ("nncf", format!("NNCF INT8 ({}, ModelType.TRANSFORMER)", crate::bench::venv::NNCF), nncf),
    ])
}

/// Each model against FP32 by `qdq eval --baseline` on the first `samples` dev pairs (0: all).
fn score(run: &Run, models: &Models, samples: usize) -> Result<Vec<ModelRow>> {
    let mut rows = vec![];
    for (name, what, path) in models {
        eprintln!("xtask: qdq eval {name} against FP32 ({samples} dev pairs; 0 = all)");
        let eval = eval_against(run, path, &run.model, samples)?;
        rows.push(ModelRow { name: (*name).into(), what: what.clone(), path: path.clone(), eval });
    }
    Ok(rows)
}

/// qdq's INT8 against each peer's by `qdq eval --model qdq --baseline peer` on the same dev pairs: whether the
/// difference of their accuracies is one these pairs resolve.
fn head_to_head(run: &Run, models: &Models, samples: usize) -> Result<Vec<PeerDifference>> {
    let Some((_, _, ours)) = models.iter().find(|(n, _, _)| *n == "qdq") else { return Ok(vec![]) };
    let mut out = vec![];
    for (peer, _, path) in models.iter().filter(|(n, _, _)| *n != "qdq") {
        eprintln!("xtask: qdq eval qdq against {peer} ({samples} dev pairs; 0 = all)");
        let eval = eval_against(run, ours, path, samples)?;
        out.push(PeerDifference { peer: (*peer).into(), accuracy_difference: eval.accuracy_difference });
    }
    Ok(out)
}

/// `qdq eval --model model --baseline baseline --json` on the first `samples` dev pairs (0: all).
fn eval_against(run: &Run, model: &Path, baseline: &Path, samples: usize) -> Result<ClassifierEval> {
    let mut eval = run.qdq("eval");
    eval.arg("--model").arg(model).arg("--baseline").arg(baseline).arg("--dataset").arg(&run.dev);
    eval.args(["--samples", &samples.to_string(), "--json"]);
    let out = eval.current_dir(root()).output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("qdq eval of {} against {} failed:\n{err}", model.display(), baseline.display());
    }
    let doc: crate::qdq_json::ClassifierEvalDoc =
        crate::qdq_json::parse(&String::from_utf8_lossy(&out.stdout)).context("qdq eval --json")?;
    Ok(doc.vs_baseline)
}

/// FP32 and every model timed at 1 and 32 pairs of `seq_len` tokens on the CPU EP (cpu_int8.py), in rounds.
fn time(run: &Run, models: &Models, timing: &TimingArgs, seq_len: usize) -> Result<Vec<ShapeRow>> {
    let shapes = format!("1x{seq_len},32x{seq_len}");
    eprintln!(
        "xtask: timing {} models on cpu at {shapes} ({} rounds x {} runs)",
        models.len() + 1,
        timing.rounds,
        timing.runs
    );
    let mut list = vec![format!("fp32={}", crate::bench::embeddings::onnx_in(&run.model).display())];
    list.extend(models.iter().map(|(n, _, p)| format!("{n}={}", p.display())));
    let times_path = run.work.join("times_cpu.json");
    let mut c = Command::new(&run.py);
    c.arg(root().join("xtask/python/cpu_int8.py")).arg("time");
    c.args(["--models", &list.join(","), "--shapes", &shapes, "--rounds", &timing.rounds.to_string()]);
    c.args(["--runs", &timing.runs.to_string(), "--threads", &timing.threads.to_string(), "--out"]).arg(&times_path);
    run_cmd(&mut c)?;
    let times: Times =
        serde_json::from_slice(&std::fs::read(&times_path)?).context("the timing harness wrote bad JSON")?;
    Ok(shape_rows(&times))
}

/// The first `n` pairs of the GLUE-layout `tsv` as token ids and segment ids, framed as the model's tokenizer (in
/// `model`) frames a pair (`[CLS] a [SEP] b [SEP]`, `<s> a </s></s> b </s>`), the longer text cut first to fit
/// `seq_len` tokens.
fn pair_ids(tsv: &Path, model: &Path, n: usize, seq_len: usize) -> Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(tsv).with_context(|| format!("cannot read {}", tsv.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let Some((a, b)) = PAIR_COLUMNS.iter().find_map(|(a, b)| Some((col(a)?, col(b)?))) else {
        bail!("{}: no pair of text columns GLUE names ({PAIR_COLUMNS:?}) in its header {header:?}", tsv.display());
    };
    let tok = crate::bench::embeddings::load_folder_tokenizer(model)?;
    let f = tok.framing();
    let specials = 2 + f.pair_seps;
    lines
        .take(n)
        .enumerate()
        .map(|(i, line)| {
            let cells: Vec<&str> = line.split('\t').collect();
            let cell = |c: usize| {
                cells.get(c).copied().with_context(|| format!("{} line {}: no column {c}", tsv.display(), i + 2))
            };
            let mut x = tok.tokenize(cell(a)?, "text")?.ids;
            let mut y = tok.tokenize(cell(b)?, "text")?.ids;
            while x.len() + y.len() + specials > seq_len {
                if x.len() >= y.len() {
                    x.pop()
                } else {
                    y.pop()
                };
            }
            let mut ids = vec![f.cls];
            ids.extend(&x);
            ids.extend(std::iter::repeat_n(f.sep, f.pair_seps));
            let first = ids.len();
            ids.extend(&y);
            ids.push(f.sep);
            let types: Vec<i64> = (0..ids.len()).map(|k| if k < first { 0 } else { f.pair_type }).collect();
            Ok(serde_json::json!({ "ids": ids, "types": types }))
        })
        .collect()
}

fn row<'a>(r: &'a ClassifyReport, name: &str) -> Option<&'a ClassifierEval> {
    r.models.iter().find(|m| m.name == name).map(|m| &m.eval)
}

/// qdq's INT8 against FP32 (within [`MAX_LOSS_POINTS`], class = FP32's for [`MIN_SAME_CLASS`]) and against each peer
/// (accuracy, agreement, KL, speed at every shape).
fn targets(r: &ClassifyReport) -> Vec<Target> {
    let mut out = vec![];
    let Some(q) = row(r, "qdq") else { return out };
    if let Some(d) = q.accuracy_difference {
        let value = format!("{:+.2} [{:+.2}, {:+.2}]", d.delta, d.low, d.high);
        let name = "accuracy minus FP32's, points (paired)";
        out.push(Target::new(name, format!(">= -{MAX_LOSS_POINTS}"), value, d.delta >= -MAX_LOSS_POINTS));
    }
    let same = q.agreement.top1;
    out.push(Target::new(
        "class = FP32's",
        format!(">= {MIN_SAME_CLASS}"),
        format!("{same:.5}"),
        same >= MIN_SAME_CLASS,
    ));
    for peer in ["ort-dynamic", "nncf"] {
        let Some(p) = row(r, peer) else { continue };
        if let (Some(a), Some(b)) = (q.int8.accuracy, p.int8.accuracy) {
            // With the paired difference, so a verdict the pairs cannot resolve reads as one.
            let paired = r.vs_peers.iter().find(|v| v.peer == peer).and_then(|v| v.accuracy_difference);
            let value = paired.map_or_else(
                || format!("{a:.5}"),
                |d| format!("{a:.5} (minus {peer}'s, paired: {:+.2} [{:+.2}, {:+.2}] points)", d.delta, d.low, d.high),
            );
            out.push(Target::new(format!("accuracy against {peer}"), format!(">= {b:.5}"), value, a >= b));
        }
        let (a, b) = (q.agreement.top1, p.agreement.top1);
        out.push(Target::new(
            format!("class = FP32's against {peer}"),
            format!(">= {b:.5}"),
            format!("{a:.5}"),
            a >= b,
        ));
        let (a, b) = (q.agreement.mean_kl, p.agreement.mean_kl);
        out.push(Target::new(format!("mean KL against {peer}"), format!("<= {b:.2e}"), format!("{a:.2e}"), a <= b));
        for s in &r.speed {
            let (Some(a), Some(b)) = (s.speedup.get("qdq"), s.speedup.get(peer)) else { continue };
            let name = format!("speed-up over FP32 at {} against {peer}", s.shape);
            out.push(Target::new(
                name,
                format!(">= {:.2}x", b.median),
                format!("{:.2}x", a.median),
                a.median >= b.median,
            ));
        }
    }
    out
}

fn render(r: &ClassifyReport) -> String {
    let mut md = String::from("# A sentence-pair classifier: qdq against ONNX Runtime's dynamic INT8 and NNCF\n\n");
    let cal = r.cal_num.map_or_else(|| "each tool's default (qdq 100, NNCF 300)".to_owned(), |n| n.to_string());
    let _ = writeln!(
        md,
        "`{}` ({}) on {}; {} ({} dev pairs; 0 = all); calibration pairs: {cal}.\n",
        r.command,
        r.git.as_deref().unwrap_or("?"),
        r.machine.cpu,
        r.classifier.display(),
        r.samples
    );
    md.push_str("| model | accuracy | FP32 | difference, points [95 %] | class = FP32 [95 %] | mean KL |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|\n");
    let pct = |a: Option<f64>| a.map_or_else(|| "-".to_owned(), |a| format!("{:.2} %", 100.0 * a));
    for m in &r.models {
        let e = &m.eval;
        let d = e
            .accuracy_difference
            .map_or_else(String::new, |d| format!("{:+.2} [{:+.2}, {:+.2}]", d.delta, d.low, d.high));
        let [lo, hi] = e.agreement.top1_interval;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {d} | {:.2} % [{:.2}, {:.2}] | {:.2e} |",
            m.what,
            pct(e.int8.accuracy),
            pct(e.fp32.accuracy),
            100.0 * e.agreement.top1,
            100.0 * lo,
            100.0 * hi,
            e.agreement.mean_kl
        );
    }
    md.push_str("\nSpeed-up over FP32 on the CPU EP (median of rounds, slowest-fastest round):\n\n");
    md.push_str("| shape | model | speed-up |\n|---|---|---:|\n");
    for s in &r.speed {
        for (model, q) in &s.speedup {
            let _ = writeln!(md, "| {} | {model} | {:.2}x ({:.2}-{:.2}) |", s.shape, q.median, q.min, q.max);
        }
    }
    targets_table(&mut md, "Targets", &r.targets);
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(accuracy: f64, top1: f64, kl: f64) -> serde_json::Value {
        serde_json::json!({"fp32": {"accuracy": 0.8359}, "int8": {"accuracy": accuracy},
            "agreement": {"inputs": 20640, "top1": top1, "top1_interval": [top1 - 0.001, top1 + 0.001], "mean_kl": kl}})
    }

    /// Against a peer, the accuracy verdict is taken on the point values and shows the paired difference beside them,
    /// so a gap of a pair or two reads as what the pairs resolve.
    #[test]
    fn accuracy_against_a_peer_carries_its_paired_interval() {
        let model =
            |name: &str, e: serde_json::Value| serde_json::json!({"name": name, "what": name, "path": name, "eval": e});
        let report: ClassifyReport = serde_json::from_value(serde_json::json!({
            "command": "x", "git": null, "machine": {"cpu": "x"}, "classifier": "c", "cal_num": null, "samples": 0,
            "seq_len": 128, "rounds": 1, "runs": 1, "threads": 2, "speed": [], "targets": [],
            "models": [model("qdq", eval(0.83493, 0.9917, 6.3e-4)), model("nncf", eval(0.83503, 0.9897, 8.1e-4))],
            "vs_peers": [{"peer": "nncf", "accuracy_difference": {"delta": -0.01, "low": -0.15, "high": 0.13}}],
        }))
        .unwrap();
        let t = targets(&report);
        let acc = t.iter().find(|t| t.name == "accuracy against nncf").unwrap();
        assert!(!acc.pass && acc.value == "0.83493 (minus nncf's, paired: -0.01 [-0.15, +0.13] points)", "{acc:?}");
        let same = t.iter().find(|t| t.name == "class = FP32's against nncf").unwrap();
        assert!(same.pass, "{same:?}");
        // A report written before the head-to-head: the point values alone.
        let mut old = serde_json::to_value(&report).unwrap();
        old.as_object_mut().unwrap().remove("vs_peers");
        let old: ClassifyReport = serde_json::from_value(old).unwrap();
        let acc = targets(&old).into_iter().find(|t| t.name == "accuracy against nncf").unwrap();
        assert_eq!(acc.value, "0.83493");
    }
}
