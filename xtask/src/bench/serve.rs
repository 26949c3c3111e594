//! `cargo xtask bench serve`: do qdq's output folders load where their sources load? For every embedding model of
//! the assets, `qdq e2e` on the first dev questions, then sentence-transformers in a git-ignored venv (`.venv-serve`)
//! loads the output folder as its users load one (nothing copied by hand) and the source folder, embeds the texts qdq
//! embedded, and the two embeddings' cosine is set against the fidelity qdq measured: the same model, read the same
//! way. For the SQuAD model, a folder with a config.json (the asset's model and vocabulary, and the base model's config
//! as a BertForQuestionAnswering) goes through `qdq e2e`, and optimum's ORTModelForQuestionAnswering loads the output
//! and gives onnxruntime's logits. Writes out/bench/serve.{json,md} with targets and verdicts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::bench::report::{Target, targets_table, write};
use crate::bench::venv::{export_features, git_head};
use crate::download::DownloadArgs;
use crate::e2e::{Assets, build_qdq, ort_library};
use crate::flags::BenchData;
use crate::setup::LIBRARY_ENV;
use crate::workspace::{root, run_cmd, write_atomic};

/// The Python packages users serve such folders with, pinned to versions that resolve together on PyPI
/// (sentence-transformers 6 needs transformers 5, which optimum-onnx does not take yet).
const PACKAGES: [&str; 4] =
    ["sentence-transformers[onnx]==5.7.0", "transformers==4.57.6", "optimum-onnx==0.1.0", "onnxruntime==1.31.1"];
const VENV: &str = ".venv-serve";
/// Dev questions each embedding model is run on (with every paragraph).
const SAMPLES: usize = 300;
/// sentence-transformers' cosine to FP32 within this of qdq's (the same model and texts).
const MAX_COSINE_GAP: f64 = 1e-4;
/// optimum's logits within this of onnxruntime's on the same file.
const MAX_LOGIT_DIFF: f64 = 1e-4;

/// One embedding folder: what qdq measured, and what sentence-transformers measured of the output folder.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Served {
    model: String,
    out: PathBuf,
    /// qdq's mean cosine to FP32 and its text count (results.json).
    qdq_mean_cosine: f64,
    qdq_texts: usize,
    /// sentence-transformers' (`serve_check.py embedding`), or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    loaded: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ServeReport {
    command: String,
    git: Option<String>,
    packages: Vec<String>,
    embeddings: Vec<Served>,
    /// optimum on the QA folder (`serve_check.py qa`), or why it failed.
    qa: Result<serde_json::Value, String>,
    targets: Vec<Target>,
}

/// The serving venv's interpreter (made once, with [`PACKAGES`]).
fn venv() -> Result<PathBuf> {
    let dir = root().join(VENV);
    let py = dir.join("bin/python");
    let ready = || {
        let check = "import sentence_transformers, optimum.onnxruntime";
        Command::new(&py).args(["-c", check]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if py.is_file() && ready() {
        return Ok(py);
    }
    eprintln!("xtask: making {VENV} with {} (PyPI; torch comes with them)", PACKAGES.join(" "));
    run_cmd(Command::new(crate::setup::python()?).args(["-m", "venv"]).arg(&dir))?;
    run_cmd(Command::new(&py).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(PACKAGES))?;
    if !ready() {
        bail!("{VENV}: sentence-transformers or optimum.onnxruntime does not import after installing {PACKAGES:?}");
    }
    Ok(py)
}

/// `python serve_check.py ARGS`: its JSON line, or its error's last lines.
fn check(py: &Path, args: &[&std::ffi::OsStr]) -> std::result::Result<serde_json::Value, String> {
    let out = Command::new(py).arg(root().join("xtask/python/serve_check.py")).args(args).output();
    let out = out.map_err(|e| format!("cannot start serve_check.py: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        return Err(tail.into_iter().rev().collect::<Vec<_>>().join(" / "));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).map_err(|e| format!("serve_check.py: {e}"))
}

pub fn serve(vs: BenchData, download: DownloadArgs) -> Result<()> {
    let mut download = download.resolved();
    download.set.get_or_insert_with(|| "minilm".to_owned());
    let assets = Assets::download(&download)?;
    let (lib, qdq, py) = (ort_library()?, build_qdq()?, venv()?);
    let work = vs.out.join("serve");
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let e2e = |model: &Path, out: &Path, samples: usize| -> Result<()> {
        let mut c = Command::new(&qdq);
        c.env(LIBRARY_ENV, &lib).arg("e2e").arg("--model").arg(model).arg("--dataset").arg(&assets.dataset);
        c.arg("--calibration-data").arg(&assets.calibration).args(["--samples", &samples.to_string(), "--out"]);
        run_cmd(c.arg(out))
    };
    let mut embeddings = vec![];
    for folder in &assets.embedding_models {
        let name = folder.file_name().map_or("embedding".into(), |n| n.to_string_lossy().into_owned());
        let out = work.join(&name);
        eprintln!(
            "xtask: {name}: qdq e2e on the first {SAMPLES} dev questions, then sentence-transformers on its output"
        );
        e2e(folder, &out, SAMPLES)?;
        embeddings.push(served(&py, folder, name, out, &assets.dataset)?);
    }
    let (qa_out, features) = qa_folder(&work, &assets, &e2e)?;
    let args: Vec<&std::ffi::OsStr> =
        vec!["qa".as_ref(), "--out".as_ref(), qa_out.as_os_str(), "--features".as_ref(), features.as_os_str()];
    let qa = check(&py, &args);
    let report = ServeReport {
        command: format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        git: git_head(),
        packages: PACKAGES.iter().map(|p| p.to_string()).collect(),
        embeddings,
        qa,
        targets: vec![],
    };
    let report = ServeReport { targets: targets(&report), ..report };
    write(&report, &render(&report), &vs.out, "serve")
}

/// qdq's output `out` of the embedding `folder` (named `name`) loaded by sentence-transformers and compared with
/// qdq's own embeddings on the first dev questions of `dataset`.
fn served(py: &Path, folder: &Path, name: String, out: PathBuf, dataset: &Path) -> Result<Served> {
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json"))?)?;
    let fidelity = &results["result"]["fidelity"];
    let samples = SAMPLES.to_string();
    let args: Vec<&std::ffi::OsStr> = vec![
        "embedding".as_ref(),
        "--source".as_ref(),
        folder.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--dataset".as_ref(),
        dataset.as_os_str(),
        "--samples".as_ref(),
        samples.as_ref(),
    ];
    // A source folder without config.json does not load in sentence-transformers itself: nothing to serve alike.
    let (loaded, error) = match (folder.join("config.json").is_file(), check(py, &args)) {
        (false, _) => {
            (None, Some("not applicable: the source folder has no config.json, so it does not load either".into()))
        }
        (true, Ok(v)) => (Some(v), None),
        (true, Err(e)) => (None, Some(e)),
    };
    Ok(Served {
        model: name,
        out,
        qdq_mean_cosine: fidelity["mean_cosine"].as_f64().unwrap_or(f64::NAN),
        qdq_texts: fidelity["texts"].as_u64().unwrap_or(0) as usize,
        loaded,
        error,
    })
}

/// A QA folder as the hub holds one (the asset's model and vocabulary, the base model's config.json as a
/// BertForQuestionAnswering) through `qdq e2e` on 100 dev questions, and 8 features to run the output on.
fn qa_folder(
    work: &Path,
    assets: &Assets,
    e2e: &dyn Fn(&Path, &Path, usize) -> Result<()>,
) -> Result<(PathBuf, PathBuf)> {
    let base = assets.embedding_models.iter().find(|f| f.join("config.json").is_file());
    let Some(base) = base else { bail!("no embedding model of the assets has a config.json to make the QA folder's") };
    let src = work.join("qa-source");
    std::fs::create_dir_all(&src)?;
    std::fs::copy(&assets.model, src.join("model.onnx"))?;
    std::fs::copy(&assets.vocab, src.join("vocab.txt"))?;
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(base.join("config.json"))?)?;
    config["architectures"] = serde_json::json!(["BertForQuestionAnswering"]);
    write_atomic(&src.join("config.json"), &serde_json::to_vec_pretty(&config)?)?;
    let out = work.join("qa");
    eprintln!("xtask: the QA folder with a config.json: qdq e2e on 100 dev questions, then optimum on its output");
    e2e(&src, &out, 100)?;
    let features = work.join("qa-features");
    export_features(&assets.dataset, &assets.vocab, 8, 384, 128, &features)?;
    Ok((out, features))
}

fn targets(r: &ServeReport) -> Vec<Target> {
    let mut out = vec![];
    for s in r.embeddings.iter().filter(|s| !s.error.as_deref().is_some_and(|e| e.starts_with("not applicable"))) {
        let name = format!("{}: sentence-transformers loads the output folder as it is", s.model);
        let value = s.error.clone().unwrap_or_else(|| "loaded and encoded".into());
        out.push(Target { name, target: "loads".into(), value, pass: s.loaded.is_some() });
        if let Some(l) = &s.loaded {
            let cos = l["mean_cosine"].as_f64().unwrap_or(f64::NAN);
            let same_texts = l["texts"].as_u64() == Some(s.qdq_texts as u64);
            out.push(Target {
                name: format!("{}: its mean cosine to FP32 against qdq's ({} texts)", s.model, s.qdq_texts),
                target: format!("within {MAX_COSINE_GAP:e} of {:.6}", s.qdq_mean_cosine),
                value: format!("{cos:.6}"),
                pass: same_texts && (cos - s.qdq_mean_cosine).abs() <= MAX_COSINE_GAP,
            });
        }
    }
    let name = "QA folder: optimum's ORTModelForQuestionAnswering loads it and gives onnxruntime's logits".to_owned();
    match &r.qa {
        Ok(v) => {
            let d =
                v["start_max_diff"].as_f64().unwrap_or(f64::NAN).max(v["end_max_diff"].as_f64().unwrap_or(f64::NAN));
            out.push(Target {
                name,
                target: format!("<= {MAX_LOGIT_DIFF:e}"),
                value: format!("{d:.2e}"),
                pass: d <= MAX_LOGIT_DIFF,
            });
        }
        Err(e) => out.push(Target { name, target: "loads".into(), value: e.clone(), pass: false }),
    }
    out
}

fn render(r: &ServeReport) -> String {
    let mut md = String::from("# Serving qdq's output folders\n\n");
    let _ = writeln!(md, "`{}` ({}), with {}.\n", r.command, r.git.as_deref().unwrap_or("?"), r.packages.join(", "));
    targets_table(&mut md, "Targets", &r.targets);
    for s in r.embeddings.iter().filter(|s| s.error.as_deref().is_some_and(|e| e.starts_with("not applicable"))) {
        let _ = writeln!(md, "\n{}: {}.", s.model, s.error.as_deref().unwrap_or_default());
    }
    md
}
