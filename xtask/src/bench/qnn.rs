//! `cargo xtask bench qnn`: qdq's model for `--ep qnn` (the `qnn` preset, A16W8) against ONNX Runtime's own QNN
//! recipe (`qnn_preprocess_model`, then `quantize` with `get_qnn_qdq_config`: uint16 activations, uint8 weights),
//! both calibrated on the same questions' features, each scored with `qdq eval` on the CPU EP and on QNN's HTP
//! (`cargo xtask setup --qnn`'s plugin; emulated on x86-64, so no speed is measured) beside FP32 on the CPU EP. Every
//! F1 is paired by question with FP32's, and each model on QNN with itself on the CPU EP (answers identical). Each
//! leg's predictions are kept with the SHA-256 of its model: a rerun (a QNN leg takes an hour at 200 questions)
//! scores again only what changed. Writes out/bench/qnn.{json,md} with targets and verdicts.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::bench::report::{Target, targets_table, write};
use crate::bench::venv::{ensure_venv, export_features, git_head, resolve_paths};
use crate::download::DownloadArgs;
use crate::e2e::{build_qdq, ort_library};
use crate::flags::{BenchData, QnnBenchArgs};
use crate::setup::LIBRARY_ENV;
use crate::workspace::{root, run_cmd, write_atomic};

/// qdq's model on QNN within this many F1 points of FP32 (the goal, on the point estimate).
const MAX_DF1: f64 = 1.0;

/// One model on one EP: `qdq eval`'s scores and the paired comparisons.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Leg {
    model: String,
    what: String,
    ep: String,
    em: f64,
    f1: f64,
    /// F1 minus FP32's (CPU EP), paired by question; absent for FP32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vs_fp32: Option<squad_metrics::PairedDifference>,
    /// Answers identical to FP32's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    same_as_fp32: Option<squad_metrics::Proportion>,
    /// On QNN: answers identical to the same model's on the CPU EP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    same_as_cpu: Option<squad_metrics::Proportion>,
    predictions: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct QnnReport {
    command: String,
    git: Option<String>,
    cpu: String,
    plugin: String,
    samples: usize,
    seq_len: usize,
    calibration_questions: usize,
    /// The recipe script's line: onnxruntime version, features, opset.
    recipe: serde_json::Value,
    legs: Vec<Leg>,
    /// qdq's model against the recipe's on QNN, paired by question (qdq minus the recipe).
    qdq_vs_recipe: Option<squad_metrics::PairedDifference>,
    targets: Vec<Target>,
}

/// The models the bench compares: name, description, file.
fn models(paths: &crate::bench::venv::Paths, qdq_dir: &Path, recipe: &Path) -> [(&'static str, String, PathBuf); 3] {
    [
        ("fp32", "FP32".to_owned(), paths.model.clone()),
        ("qdq", "qdq, `qnn` preset (A16W8, per-channel weights)".to_owned(), qdq_dir.join("model_qdq.onnx")),
        ("ort-recipe", "ONNX Runtime's QNN recipe (A16W8, get_qnn_qdq_config)".to_owned(), recipe.to_owned()),
    ]
}

pub fn qnn(args: QnnBenchArgs, paths_from: BenchData, download: DownloadArgs) -> Result<()> {
    let mut download = download.resolved();
    download.set.get_or_insert_with(|| "minilm".to_owned());
    let paths = resolve_paths(&paths_from, &download)?;
    let (lib, py, qdq) = (ort_library()?, ensure_venv()?, build_qdq()?);
    crate::setup::qnn(false)?;
    let work = paths_from.out.join("qnn");
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let seq_len = args.qnn_seq_len.to_string();
    let qdq_cmd = |sub: &str| {
        let mut c = Command::new(&qdq);
        c.arg(sub).env(LIBRARY_ENV, &lib).current_dir(root());
        c
    };

    let qdq_dir = work.join("qdq");
    let recipe_path = work.join("ort_recipe.onnx");
    let make = Make {
        paths: &paths,
        cal_num: paths_from.cal_num,
        doc_stride: paths_from.doc_stride,
        seq_len: args.qnn_seq_len,
    };
    make.qdq(qdq_cmd("e2e"), &qdq_dir)?;
    let recipe = make.recipe(&py, &work.join("features"), &recipe_path)?;

    let models = models(&paths, &qdq_dir, &recipe_path);
    let legs = [("fp32", "cpu"), ("qdq", "cpu"), ("ort-recipe", "cpu"), ("ort-recipe", "qnn"), ("qdq", "qnn")];
    let mut predictions = HashMap::new();
    for (name, ep) in legs {
        let model = &models.iter().find(|m| m.0 == name).expect("every leg's model is listed").2;
        let eval = Eval { model, ep, samples: args.qnn_samples, seq_len: &seq_len, paths: &paths };
        let file = eval.run(qdq_cmd("eval"), &work.join(format!("{name}_{ep}")))?;
        predictions.insert((name, ep), file);
    }
    let made: crate::qdq_json::Results = crate::qdq_json::read(&qdq_dir.join("results.json"))?;
    let report = QnnReport {
        command: format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        git: git_head(),
        cpu: made.provenance.machine.cpu,
        plugin: format!("{} {}", crate::setup::QNN_PLUGIN, crate::setup::QNN_PLUGIN_VERSION),
        samples: args.qnn_samples,
        seq_len: args.qnn_seq_len,
        calibration_questions: paths_from.cal_num,
        recipe,
        legs: vec![],
        qdq_vs_recipe: None,
        targets: vec![],
    };
    let report = compare(report, &paths.dataset, &models, &legs, &predictions)?;
    let report = QnnReport { targets: targets(&report), ..report };
    write(&report, &render(&report), &paths_from.out, "qnn")
}

/// How both quantized models are made.
struct Make<'a> {
    paths: &'a crate::bench::venv::Paths,
    cal_num: usize,
    doc_stride: usize,
    seq_len: usize,
}

impl Make<'_> {
    /// qdq's model for `--ep qnn` in `dir` (`qdq e2e --ep qnn --no-eval`: calibrated on the CPU EP).
    fn qdq(&self, mut e2e: Command, dir: &Path) -> Result<()> {
        eprintln!("xtask: qdq's model for --ep qnn (qdq e2e --ep qnn --no-eval)");
        let (p, cal_num, seq_len) = (self.paths, self.cal_num.to_string(), self.seq_len.to_string());
        e2e.args(["--ep", "qnn", "--no-eval", "--model"]).arg(&p.model).arg("--vocab").arg(&p.vocab);
        e2e.arg("--calibration-data").arg(&p.calibration).args(["--cal-num", &cal_num, "--seq-len", &seq_len]);
        run_cmd(e2e.arg("--out").arg(dir))
    }

    /// ONNX Runtime's recipe model at `out`, from the features of the same calibration questions (written to
    /// `features`); returns the recipe script's JSON line.
    fn recipe(&self, py: &Path, features: &Path, out: &Path) -> Result<serde_json::Value> {
        eprintln!("xtask: ONNX Runtime's QNN recipe from the same {} calibration questions' features", self.cal_num);
        let p = self.paths;
        export_features(&p.calibration, &p.vocab, self.cal_num, self.seq_len, self.doc_stride, features)?;
        let run = Command::new(py)
            .arg(root().join("xtask/python/qnn_bench.py"))
            .arg("recipe")
            .arg("--model")
            .arg(&p.model)
            .arg("--features")
            .arg(features)
            .arg("--out")
            .arg(out)
            .stderr(Stdio::inherit())
            .output()?;
        if !run.status.success() {
            bail!("ONNX Runtime's QNN recipe failed (xtask/python/qnn_bench.py recipe, {})", run.status);
        }
        serde_json::from_slice(&run.stdout).context("xtask/python/qnn_bench.py printed no JSON line")
    }
}

/// One `qdq eval` leg.
struct Eval<'a> {
    model: &'a Path,
    ep: &'a str,
    samples: usize,
    seq_len: &'a str,
    paths: &'a crate::bench::venv::Paths,
}

impl Eval<'_> {
    /// Scores the model (progress on stderr) unless `<stem>.predictions.json` was written by this very leg before:
    /// the model's SHA-256, the EP, the questions and the length in `<stem>.key`. Returns the predictions' path.
    fn run(&self, mut eval: Command, stem: &Path) -> Result<PathBuf> {
        let (predictions, key_file) = (stem.with_extension("predictions.json"), stem.with_extension("key"));
        let key = format!("{} {} {} {}", sha256(self.model)?, self.ep, self.samples, self.seq_len);
        let name = stem.file_name().unwrap_or_default().to_string_lossy();
        if predictions.is_file() && std::fs::read_to_string(&key_file).is_ok_and(|k| k == key) {
            eprintln!("xtask: {name}: kept from the last run (same model, EP, questions and length)");
            return Ok(predictions);
        }
        let _ = std::fs::remove_file(&key_file);
        eprintln!("xtask: {name}: qdq eval --ep {} on {} dev questions", self.ep, self.samples);
        eval.args(["--ep", self.ep, "--model"]).arg(self.model);
        eval.arg("--vocab").arg(&self.paths.vocab).arg("--dataset").arg(&self.paths.dataset);
        eval.args(["--samples", &self.samples.to_string(), "--seq-len", self.seq_len, "--out"]).arg(&predictions);
        let status = eval.status()?;
        if !status.success() {
            bail!("qdq eval --ep {} of {} failed ({status})", self.ep, self.model.display());
        }
        write_atomic(&key_file, key.as_bytes())?;
        Ok(predictions)
    }
}

fn sha256(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hash = Sha256::new();
    std::io::copy(&mut file, &mut hash).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(format!("{:x}", hash.finalize()))
}

/// Scores every leg on the first `samples` questions of `dataset` and pairs them: each with FP32 (CPU EP), each QNN
/// leg with its model on the CPU EP, qdq's QNN leg with the recipe's.
fn compare(
    mut r: QnnReport,
    dataset: &Path,
    models: &[(&'static str, String, PathBuf)],
    legs: &[(&'static str, &'static str)],
    predictions: &HashMap<(&str, &str), PathBuf>,
) -> Result<QnnReport> {
    let data = squad_metrics::load_dataset(dataset)?.first_n(r.samples);
    let mut answers = HashMap::new();
    for (key, path) in predictions {
        let p = squad_metrics::load_predictions(path).with_context(|| format!("{}", path.display()))?;
        answers.insert(*key, p);
    }
    let f1 = |k: &(&str, &str)| squad_metrics::question_f1(&data, &answers[k], false);
    let ids: Vec<&str> = data.questions().map(|q| q.id.as_str()).collect();
    let same = |a: &(&str, &str), b: &(&str, &str)| {
        let k = ids.iter().filter(|id| answers[a].get(**id).is_some_and(|x| answers[b].get(**id) == Some(x))).count();
        squad_metrics::Proportion::of(k, ids.len())
    };
    let fp32 = ("fp32", "cpu");
    for key in legs {
        let m = squad_metrics::evaluate_v1(&data, &answers[key]);
        let what = models.iter().find(|m| m.0 == key.0).map(|m| m.1.clone()).unwrap_or_default();
        let vs = (*key != fp32).then(|| squad_metrics::paired_difference(&f1(key), &f1(&fp32)));
        r.legs.push(Leg {
            model: key.0.to_owned(),
            what,
            ep: key.1.to_owned(),
            em: m.exact_match,
            f1: m.f1,
            vs_fp32: vs,
            same_as_fp32: (*key != fp32).then(|| same(key, &fp32)),
            same_as_cpu: (key.1 != "cpu").then(|| same(key, &(key.0, "cpu"))),
            predictions: predictions[key].clone(),
        });
    }
    r.qdq_vs_recipe = Some(squad_metrics::paired_difference(&f1(&("qdq", "qnn")), &f1(&("ort-recipe", "qnn"))));
    Ok(r)
}

/// The goals: qdq's model on QNN within [`MAX_DF1`] of FP32, and at least the recipe's F1 there.
fn targets(r: &QnnReport) -> Vec<Target> {
    let ours = r.legs.iter().find(|l| l.model == "qdq" && l.ep == "qnn").and_then(|l| l.vs_fp32);
    let mut out = vec![];
    if let Some(d) = ours {
        out.push(Target {
            name: format!("qdq's dF1 on QNN against FP32 on the first {} dev questions (paired)", r.samples),
            target: format!(">= -{MAX_DF1:.1}"),
            value: d.describe(),
            pass: d.delta >= -MAX_DF1,
        });
    }
    if let Some(d) = r.qdq_vs_recipe {
        out.push(Target {
            name: "qdq's F1 on QNN against ONNX Runtime's QNN recipe's (paired)".to_owned(),
            target: ">= +0.00".to_owned(),
            value: d.describe(),
            pass: d.delta >= 0.0,
        });
    }
    out
}

fn render(r: &QnnReport) -> String {
    let mut md = String::from("# Qualcomm QNN (HTP emulated): qdq's model against ONNX Runtime's QNN recipe\n\n");
    let _ = writeln!(
        md,
        "ONNX Runtime {} with {} (HTP backend emulated on x86-64: no speed measured), {}. Both models calibrated on the \
         same {} questions' features at 1x{}; scored with `qdq eval` on the first {} dev questions at 1x{}, FP32 on the \
         CPU EP. dF1: paired by question against FP32, 95 % interval. Commit {}. Command: `{}`.\n",
        r.recipe["onnxruntime"].as_str().unwrap_or("?"),
        r.plugin,
        r.cpu,
        r.calibration_questions,
        r.seq_len,
        r.samples,
        r.seq_len,
        r.git.as_deref().unwrap_or("?"),
        r.command
    );
    let _ = writeln!(md, "| model | EP | EM | F1 | dF1 [95 %] | answers = FP32 | answers = its CPU EP's |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|");
    let show = |p: &Option<squad_metrics::Proportion>| p.map_or("-".to_owned(), |p| p.describe());
    for l in &r.legs {
        let d = l.vs_fp32.map_or("-".to_owned(), |d| d.describe());
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} | {:.2} | {d} | {} | {} |",
            l.what,
            l.ep,
            l.em,
            l.f1,
            show(&l.same_as_fp32),
            show(&l.same_as_cpu)
        );
    }
    if let Some(d) = r.qdq_vs_recipe {
        let _ = writeln!(md, "\nqdq's model against the recipe's on QNN (paired): dF1 {}.", d.describe());
    }
    targets_table(&mut md, "Targets (qdq's model on QNN)", &r.targets);
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEGS: [(&str, &str); 5] =
        [("fp32", "cpu"), ("qdq", "cpu"), ("ort-recipe", "cpu"), ("ort-recipe", "qnn"), ("qdq", "qnn")];

    /// Four questions whose gold answers are a, b, c, d.
    fn dataset(dir: &Path) -> PathBuf {
        let qa = |id: &str, answer: &str| serde_json::json!({"id": id, "question": "?", "answers": [{"text": answer, "answer_start": 0}]});
        let qas: Vec<_> = [("q1", "alpha"), ("q2", "beta"), ("q3", "gamma"), ("q4", "delta")]
            .iter()
            .map(|(id, a)| qa(id, a))
            .collect();
        let doc = serde_json::json!({"version": "1.1", "data": [{"title": "t", "paragraphs": [
            {"context": "alpha beta gamma delta", "qas": qas}]}]});
        let path = dir.join("dev.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        path
    }

    fn report(samples: usize) -> QnnReport {
        QnnReport {
            command: String::new(),
            git: None,
            cpu: "cpu".into(),
            plugin: "onnxruntime-qnn 2.7.0".into(),
            samples,
            seq_len: 256,
            calibration_questions: 100,
            recipe: serde_json::json!({"onnxruntime": "1.31.1"}),
            legs: vec![],
            qdq_vs_recipe: None,
            targets: vec![],
        }
    }

    #[test]
    fn legs_are_paired_with_fp32_with_their_cpu_ep_and_qdq_with_the_recipe() {
        let scratch = tempfile::tempdir().unwrap();
        let data = dataset(scratch.path());
        // Answers per leg for q1..q4: FP32 right on three; qdq on the CPU EP as FP32; the recipe wrong everywhere;
        // qdq on QNN differing from its CPU EP run on q4 only (and right there).
        let answers: [(&str, &str, [&str; 4]); 5] = [
            ("fp32", "cpu", ["alpha", "beta", "gamma", "x"]),
            ("qdq", "cpu", ["alpha", "beta", "gamma", "x"]),
            ("ort-recipe", "cpu", ["x", "x", "x", "x"]),
            ("ort-recipe", "qnn", ["x", "y", "x", "x"]),
            ("qdq", "qnn", ["alpha", "beta", "gamma", "delta"]),
        ];
        let mut predictions = HashMap::new();
        for (model, ep, a) in answers {
            let path = scratch.path().join(format!("{model}_{ep}.json"));
            let doc: serde_json::Map<_, _> =
                ["q1", "q2", "q3", "q4"].iter().zip(a).map(|(q, a)| (q.to_string(), a.into())).collect();
            std::fs::write(&path, serde_json::Value::Object(doc).to_string()).unwrap();
            predictions.insert((model, ep), path);
        }
        let models = [("fp32", "FP32".to_owned(), PathBuf::new()), ("qdq", "qdq".to_owned(), PathBuf::new())];
        let r = compare(report(4), &data, &models, &LEGS, &predictions).unwrap();
        assert_eq!(r.legs.len(), 5);
        let leg = |m: &str, ep: &str| r.legs.iter().find(|l| l.model == m && l.ep == ep).unwrap();
        assert_eq!((leg("fp32", "cpu").f1, leg("fp32", "cpu").what.as_str()), (75.0, "FP32"));
        assert!(leg("fp32", "cpu").vs_fp32.is_none() && leg("fp32", "cpu").same_as_cpu.is_none());
        assert_eq!(leg("qdq", "cpu").vs_fp32.unwrap().delta, 0.0);
        assert_eq!(leg("qdq", "cpu").same_as_fp32.unwrap().share, 1.0);
        assert_eq!(leg("ort-recipe", "cpu").vs_fp32.unwrap().delta, -75.0);
        assert_eq!(leg("ort-recipe", "qnn").same_as_cpu.unwrap().share, 0.75);
        let qnn = leg("qdq", "qnn");
        assert_eq!((qnn.f1, qnn.vs_fp32.unwrap().delta, qnn.same_as_cpu.unwrap().share), (100.0, 25.0, 0.75));
        assert_eq!(r.qdq_vs_recipe.unwrap().delta, 100.0);
        // Fewer questions than the file holds: only the first are scored.
        let two = compare(report(2), &data, &models, &LEGS, &predictions).unwrap();
        assert_eq!(two.legs[4].vs_fp32.unwrap().questions, 2);
    }

    #[test]
    fn targets_hold_qdq_on_qnn_to_fp32_within_a_point_and_to_the_recipe() {
        let diff = |delta: f64| squad_metrics::paired_difference(&[0.5 + delta / 100.0, 0.5], &[0.5, 0.5]);
        let with = |vs_fp32: f64, vs_recipe: f64| {
            let leg = Leg {
                model: "qdq".into(),
                what: "qdq".into(),
                ep: "qnn".into(),
                em: 0.0,
                f1: 0.0,
                vs_fp32: Some(diff(vs_fp32 * 2.0)),
                same_as_fp32: None,
                same_as_cpu: None,
                predictions: PathBuf::new(),
            };
            QnnReport { legs: vec![leg], qdq_vs_recipe: Some(diff(vs_recipe * 2.0)), ..report(2) }
        };
        let verdicts = |r: &QnnReport| targets(r).iter().map(|t| t.pass).collect::<Vec<_>>();
        assert_eq!(verdicts(&with(-0.5, 3.0)), [true, true]);
        assert_eq!(verdicts(&with(-1.5, 3.0)), [false, true]);
        assert_eq!(verdicts(&with(0.5, -0.5)), [true, false]);
        let r = with(-1.5, 3.0);
        let md = render(&QnnReport { targets: targets(&r), ..r });
        assert!(md.contains("| qnn |") && md.contains("| FAIL |") && md.contains("no speed measured"), "{md}");
    }

    #[test]
    fn a_leg_is_scored_again_only_when_its_model_ep_questions_or_length_changed() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let model = dir.join("m.onnx");
        std::fs::write(&model, b"model one").unwrap();
        let (dataset, vocab) = (dir.join("dev.json"), dir.join("vocab.txt"));
        let paths = crate::bench::venv::Paths { model: model.clone(), vocab, dataset, calibration: PathBuf::new() };
        let eval = Eval { model: &model, ep: "qnn", samples: 200, seq_len: "256", paths: &paths };
        let stem = dir.join("m_qnn");
        // `false` stands for qdq eval: a leg that has to be scored fails here.
        assert!(eval.run(Command::new("false"), &stem).is_err(), "nothing kept yet");
        std::fs::write(stem.with_extension("predictions.json"), "{}").unwrap();
        assert!(eval.run(Command::new("false"), &stem).is_err(), "predictions without their key");
        assert!(eval.run(Command::new("true"), &stem).is_ok());
        assert_eq!(eval.run(Command::new("false"), &stem).unwrap(), stem.with_extension("predictions.json"));
        let other = Eval { samples: 100, ..eval };
        assert!(other.run(Command::new("false"), &stem).is_err(), "other questions");
        assert!(eval.run(Command::new("false"), &stem).is_err(), "the failed leg dropped the key");
        assert!(eval.run(Command::new("true"), &stem).is_ok());
        std::fs::write(&model, b"model two").unwrap();
        assert!(eval.run(Command::new("false"), &stem).is_err(), "another model");
    }
}
