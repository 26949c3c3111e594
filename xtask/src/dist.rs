//! `cargo xtask dist`: what users install, into out/dist/.
//!
//! - The Python wheel: maturin (`bindings = "bin"`, pyproject.toml) from a git-ignored venv, `.venv-dist/`; `pip
//!   install` of it puts `qdq` on the PATH and brings onnxruntime, whose library qdq finds in that environment by
//!   itself (runtime's `Install::Python`).
//! - The release archive, for machines without Python: `bin/qdq` beside `lib/` holding ONNX Runtime (from the copy
//!   `cargo xtask setup` installed), found there by itself (`Install::Archive`).
//!
//! `--check` (which `cargo xtask test` runs) installs each into a fresh place and runs `qdq providers` and `qdq e2e` on
//! the tiny BERT there, with ORT_DYLIB_PATH removed from the environment and no other step.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::flags::DistArgs;
use crate::setup::{self, LIBRARY_ENV};
use crate::workspace::{cargo, root, run_cmd};

/// The maturin release the wheel is built with.
const MATURIN: &str = "maturin==1.16.0";

/// What `dist` made.
pub struct Built {
    pub wheel: PathBuf,
    pub archive: PathBuf,
}

pub fn dist(args: &DistArgs) -> Result<Built> {
    let out = root().join("out/dist");
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let built = Built { wheel: wheel(&out)?, archive: archive(&out)? };
    eprintln!("xtask: {} and {}", built.wheel.display(), built.archive.display());
    if args.check {
        check(&built)?;
    }
    Ok(built)
}

/// A Python venv at `dir` (made once) with `packages` installed; its bin/ folder.
fn venv(dir: &Path, packages: &[&str]) -> Result<PathBuf> {
    let bin = dir.join("bin");
    if !bin.join("python").is_file() {
        run_cmd(Command::new(setup::python()?).args(["-m", "venv"]).arg(dir))?;
    }
    if !packages.is_empty() {
        let pip = [bin.join("python").into_os_string(), "-m".into(), "pip".into(), "install".into()];
        run_cmd(Command::new(&pip[0]).args(&pip[1..]).args(["--quiet", "--disable-pip-version-check"]).args(packages))?;
    }
    Ok(bin)
}

/// The wheel, built by maturin into `out` (its release build is the one `cargo build --release -p qdq-cli` makes:
/// the same artifacts).
fn wheel(out: &Path) -> Result<PathBuf> {
    let bin = venv(&root().join(".venv-dist"), &[MATURIN])?;
    let version = env!("CARGO_PKG_VERSION");
    for old in std::fs::read_dir(out)?.filter_map(|e| e.ok()).map(|e| e.path()) {
        if old.extension().is_some_and(|x| x == "whl") {
            std::fs::remove_file(&old).with_context(|| format!("cannot remove {}", old.display()))?;
        }
    }
    eprintln!("xtask: maturin build --release (the wheel of qdq {version})");
    run_cmd(Command::new(bin.join("maturin")).args(["build", "--release", "--locked", "--out"]).arg(out))?;
    let wheel = std::fs::read_dir(out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("maturin wrote no wheel")?;
    Ok(wheel)
}

/// The release archive: `qdq-<version>-<arch>-linux/` holding bin/qdq, lib/ (ONNX Runtime's libraries) and the
/// README, as a .tar.gz in `out`.
fn archive(out: &Path) -> Result<PathBuf> {
    let lib = setup::setup(&setup::SetupArgs::default())?;
    run_cmd(cargo().args(["build", "--release", "--locked", "-p", "qdq-cli"]))?;
    let name = format!("qdq-{}-{}-linux", env!("CARGO_PKG_VERSION"), std::env::consts::ARCH);
    let staging = tempfile::tempdir()?;
    let top = staging.path().join(&name);
    for dir in ["bin", "lib"] {
        std::fs::create_dir_all(top.join(dir))?;
    }
    let copy = |from: &Path, to: &Path| -> Result<()> {
        std::fs::copy(from, to)
            .map(|_| ())
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
    };
    copy(&root().join("target/release/qdq"), &top.join("bin/qdq"))?;
    let capi = lib.parent().context("the library has no folder")?;
    for entry in std::fs::read_dir(capi)?.filter_map(|e| e.ok()) {
        let file = entry.file_name();
        if file.to_string_lossy().starts_with("libonnxruntime") {
            copy(&entry.path(), &top.join("lib").join(&file))?;
        }
    }
    copy(&root().join("README.md"), &top.join("README.md"))?;
    let archive = out.join(format!("{name}.tar.gz"));
    run_cmd(Command::new("tar").arg("-C").arg(staging.path()).arg("-czf").arg(&archive).arg(&name))?;
    Ok(archive)
}

/// Each installed as a user would (the wheel by pip into a fresh venv, the archive unpacked), then `qdq providers`
/// and `qdq e2e` on the tiny BERT from there, with no ORT_DYLIB_PATH.
fn check(built: &Built) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let venv_bin = venv(&scratch.path().join("venv"), &[built.wheel.to_str().context("wheel path")?])?;
    let from_pip = venv_bin.join("qdq");
    run_cmd(Command::new("tar").arg("-C").arg(scratch.path()).arg("-xzf").arg(&built.archive))?;
    let name = built.archive.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".tar.gz"));
    let from_archive = scratch.path().join(name.context("archive name")?).join("bin/qdq");
    let model = scratch.path().join("tiny_bert.onnx");
    let cfg = onnx_ir::tiny_bert::TinyBertConfig { max_positions: 64, ..Default::default() };
    onnx_ir::tiny_bert::build(&cfg).save(&model)?;
    for (how, exe, expect) in
        [("pip", &from_pip, "site-packages/onnxruntime/capi"), ("archive", &from_archive, "/lib/")]
    {
        let providers = installed(exe, &["providers"], scratch.path())?;
        if !providers.contains("CPUExecutionProvider") || !providers.contains(expect) {
            bail!("{how}: `qdq providers` did not load the ONNX Runtime it was installed with:\n{providers}");
        }
        let out = scratch.path().join(format!("e2e-{how}"));
        let (vocab, dataset) = (root().join("testdata/squad/vocab.txt"), root().join("testdata/squad/tiny-v1.1.json"));
        let e2e = [
            "e2e",
            "--model",
            path(&model)?,
            "--vocab",
            path(&vocab)?,
            "--dataset",
            path(&dataset)?,
            "--seq-len",
            "64",
            "--query-len",
            "16",
            "--doc-stride",
            "24",
            "--cal-num",
            "4",
            "--out",
            path(&out)?,
            "--json",
        ];
        let report: serde_json::Value = serde_json::from_str(&installed(exe, &e2e, scratch.path())?)
            .with_context(|| format!("{how}: `qdq e2e --json` printed no JSON document"))?;
        if report["result"]["int8"]["f1"].as_f64().is_none() || !out.join("model_qdq.onnx").is_file() {
            bail!("{how}: `qdq e2e` did not evaluate both models:\n{report:#}");
        }
        eprintln!("xtask: installed by {how}: qdq providers and qdq e2e on the tiny BERT ran with no set-up");
    }
    Ok(())
}

fn path(p: &Path) -> Result<&str> {
    p.to_str().with_context(|| format!("{} is not UTF-8", p.display()))
}

/// `exe args` run in `dir` as a user's shell would run it: no ORT_DYLIB_PATH; its stdout, or an error with its
/// stderr.
fn installed(exe: &Path, args: &[&str], dir: &Path) -> Result<String> {
    let o = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env_remove(LIBRARY_ENV)
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    if !o.status.success() {
        bail!("{} {} failed: {}", exe.display(), args.join(" "), String::from_utf8_lossy(&o.stderr));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}
