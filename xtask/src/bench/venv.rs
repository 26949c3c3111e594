//! What every bench shares to run its peers: the bench venv (`.venv-bench/`: ONNX Runtime's Python tools, NNCF),
//! the shipped assets' paths, the features the Python peers read as qdq builds them, and the commit a report is of.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::download::DownloadArgs;
use crate::e2e::Assets;
use crate::npy;
use crate::setup::{ORT_VERSION, python};
use crate::workspace::{root, run_cmd};

/// Python packages of the benchmark venv (ORT's quantization tools need onnx and numpy).
/// sympy: ONNX Runtime's transformers optimizer needs it (its symbolic shape inference), for `bench cpu-int8
/// --ort-optimized`.
const PY_PACKAGES: [&str; 4] = ["onnxruntime==1.31.1", "onnx==1.23.2", "numpy==2.4.6", "sympy==1.14.0"];
const VENV: &str = ".venv-bench";
/// Writes the features of the first `questions` questions as `qdq calibrate` builds them (WordPiece, lower case,
/// query 64 tokens, padded to `seq_len`): input_ids, attention_mask, token_type_ids `[features, seq_len]` and
/// example_index `[features]`, all int64. Returns each feature's question index.
pub(crate) fn export_features(
    calibration: &Path,
    vocab: &Path,
    questions: usize,
    seq_len: usize,
    doc_stride: usize,
    dir: &Path,
) -> Result<Vec<i64>> {
    let mut data = squad::load_squad(calibration)?;
    data.limit(questions);
    let tok = tokenizer::Tokenizer::from_vocab(vocab, true)?;
    let config = squad::FeatureConfig { max_seq_len: seq_len, doc_stride, ..Default::default() };
    let (mut ids, mut mask, mut types, mut example) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for batch in squad::FeatureStream::new(&data.examples, &tok, config, 64, squad::Padding::Fixed(seq_len))? {
        let b = batch?;
        ids.extend(b.input_ids.iter().copied());
        mask.extend(b.attention_mask.iter().copied());
        types.extend(b.token_type_ids.iter().copied());
        example.extend(b.features.iter().map(|f| f.example_index as i64));
    }
    let n = example.len();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, values) in [("input_ids", &ids), ("attention_mask", &mask), ("token_type_ids", &types)] {
        npy::write(&dir.join(format!("{name}.npy")), &[n, seq_len], values)?;
    }
    npy::write(&dir.join("example_index.npy"), &[n], &example)?;
    Ok(example)
}

/// Creates (once) the venv with [`PY_PACKAGES`] and returns its interpreter.
pub(crate) fn ensure_venv() -> Result<PathBuf> {
    let dir = root().join(VENV);
    let py = dir.join("bin/python");
    let check = format!(
        "import onnxruntime, onnx, numpy; import sys; sys.exit(0 if (onnxruntime.__version__, onnx.__version__, \
         numpy.__version__) == ('{ORT_VERSION}', '{}', '{}') else 1)",
        PY_PACKAGES[1].trim_start_matches("onnx=="),
        PY_PACKAGES[2].trim_start_matches("numpy==")
    );
    let ready = || Command::new(&py).args(["-c", &check]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if py.is_file() && ready() {
        eprintln!("xtask: {VENV}/ ready ({})", PY_PACKAGES.join(", "));
        return Ok(py);
    }
    if !py.is_file() {
        eprintln!("xtask: creating {VENV}/");
        run_cmd(Command::new(python()?).args(["-m", "venv"]).arg(&dir))
            .context("cannot create the benchmark venv (on Debian/Ubuntu: apt-get install python3-venv)")?;
    }
    eprintln!("xtask: installing {} into {VENV}/ from PyPI", PY_PACKAGES.join(" "));
    run_cmd(
        Command::new(&py).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(PY_PACKAGES),
    )?;
    if !ready() {
        bail!("{VENV}/ still lacks {} after pip install", PY_PACKAGES.join(", "));
    }
    Ok(py)
}

/// NNCF as issue 68 measured it (its ONNX backend needs no OpenVINO): the peer of the OpenVINO and embedding benches.
pub(crate) const NNCF: &str = "nncf==3.4.0";

/// Installs a package into the bench venv when `import module` fails.
pub(crate) fn ensure_package(py: &Path, module: &str, spec: &str) -> Result<()> {
    let have = Command::new(py)
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!("xtask: installing {spec} into the bench venv from PyPI");
        run_cmd(Command::new(py).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", spec]))?;
    }
    Ok(())
}

/// Installs NNCF into the bench venv (once).
pub(crate) fn ensure_nncf(py: &Path) -> Result<()> {
    ensure_package(py, "nncf", NNCF)
}

/// The model, vocabulary, evaluation and calibration files a bench runs on.
pub(crate) struct Paths {
    pub model: PathBuf,
    pub vocab: PathBuf,
    pub dataset: PathBuf,
    pub calibration: PathBuf,
}

/// The files `o` names, the shipped assets' for those it leaves out (downloaded when missing).
pub(crate) fn resolve_paths(o: &crate::flags::BenchData, download: &DownloadArgs) -> Result<Paths> {
    let given = [&o.model, &o.vocab, &o.dataset, &o.calibration_data];
    let assets = if given.iter().all(|p| p.is_some()) { None } else { Some(Assets::download(download)?) };
    let pick = |given: &Option<PathBuf>, default: fn(&Assets) -> &PathBuf| -> PathBuf {
        given.clone().or_else(|| assets.as_ref().map(|a| default(a).clone())).unwrap_or_default()
    };
    let p = Paths {
        model: pick(&o.model, |a| &a.model),
        vocab: pick(&o.vocab, |a| &a.vocab),
        dataset: pick(&o.dataset, |a| &a.dataset),
        calibration: pick(&o.calibration_data, |a| &a.calibration),
    };
    for f in [&p.model, &p.vocab, &p.dataset, &p.calibration] {
        if !f.is_file() {
            bail!("{} does not exist", f.display());
        }
    }
    Ok(p)
}

/// The commit the checkout is at (short), saying so when it has uncommitted changes.
pub(crate) fn git_head() -> Option<String> {
    let out = Command::new("git").args(["rev-parse", "--short", "HEAD"]).current_dir(root()).output().ok()?;
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(root())
        .output()
        .ok()?;
    let head = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Some(if dirty.stdout.is_empty() { head } else { format!("{head} (with uncommitted changes)") })
}
