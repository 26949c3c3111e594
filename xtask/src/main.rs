//! `cargo xtask`: the project's automation, in Rust, with no dependencies beyond `anyhow` so it builds in seconds.
//!
//! Commands: `setup`, `test`, `download`, `e2e`, `bench`. Run `cargo xtask help` for details.
//! (`bench --vs-python` also uses the `squad` crate, to featurize exactly as `qdq` does, and `libc` for `wait4`;
//! `e2e --check` uses `squad-metrics` to score the reference predictions.)

mod bench;
mod download;
mod e2e;
mod npy;
mod setup;
mod tidy;
mod vs_python;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const HELP_TEMPLATE: &str = "\
cargo xtask <command> [options]

Commands:
  setup [--gpu] [--force]   Install ONNX Runtime (PyPI wheel onnxruntime==1.31.1, or onnxruntime-gpu with --gpu)
                            into .ort/ in the workspace, with pip. Idempotent.
  test [-- <cargo test args>]
                            setup, then run every test of the workspace.
  download [--mirror DIR] [--dest DIR] [--assets minilm|distilbert]
                            Fetch SQuAD files, vocab and model into .assets/, checking sizes and SHA-256. With
                            --mirror DIR (or QDQ_ASSETS_MIRROR, else ../shared/assets if it exists) files are
                            taken from a local copy instead; the `minilm` set (default with a mirror) exists only
                            there, `distilbert` needs internet.
  e2e [--mirror DIR] [--check [--int8-tolerance F1]] [qdq e2e flags...]
                            setup + download, build qdq in release, run `qdq e2e` on the assets (default
                            --samples 1000, --out out/e2e). --check fails unless FP32 F1 matches the reference
                            within 0.1 and INT8 F1 is within 1.0 (--int8-tolerance) of FP32, and (minilm set)
                            unless squad-metrics scores the reference predictions exactly as the official script
                            did (1e-9). Other flags go to `qdq e2e`.
  bench [--no-e2e] [e2e options...]
                            criterion benchmarks of calib, then an e2e run for timing; writes out/bench/summary.md.
{VS_PYTHON}  help                      This text.
";

fn help() -> String {
    HELP_TEMPLATE.replace("{VS_PYTHON}", vs_python::USAGE)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_else(|| "help".to_owned());
    let rest: Vec<String> = args.collect();
    match cmd.as_str() {
        "setup" => setup::setup(&setup::SetupArgs::parse(&rest)?).map(|_| ()),
        "test" => test(&rest),
        "download" => {
            let mut rest = rest;
            let args = download::DownloadArgs::extract(&mut rest)?;
            if let Some(extra) = rest.first() {
                bail!(
                    "download: unknown option `{extra}` (valid: --mirror DIR, --dest DIR, --assets minilm|distilbert)"
                );
            }
            let dest = download::download(&args)?;
            eprintln!("xtask: assets ready in {}", dest.display());
            Ok(())
        }
        "e2e" => e2e::e2e(&rest),
        "bench" => bench::bench(&rest),
        "help" | "--help" | "-h" => {
            print!("{}", help());
            Ok(())
        }
        other => bail!("unknown command `{other}`\n\n{}", help()),
    }
}

/// The workspace root (the parent of xtask/).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

/// Runs a command in the workspace root, failing with the command line when it fails.
pub fn run_cmd(cmd: &mut Command) -> Result<()> {
    let line = format!("{cmd:?}");
    let status = cmd.current_dir(root()).status().with_context(|| format!("cannot start {line}"))?;
    if !status.success() {
        bail!("{line} failed with {status}");
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically (unnamed temporary file, synced, linked into place; umask mode).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut file = atomic_write_file::AtomicWriteFile::options()
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(bytes).and_then(|()| file.commit()).with_context(|| format!("cannot write {}", path.display()))
}

/// Removes `--flag V` / `--flag=V` from `args` and returns `V`; a flag without a value is an error.
pub fn take_flag_value(args: &mut Vec<String>, name: &str) -> Result<Option<String>> {
    let Some(i) = args.iter().position(|a| a == name || a.starts_with(&format!("{name}="))) else {
        return Ok(None);
    };
    let flag = args.remove(i);
    match flag.split_once('=') {
        Some((_, v)) => Ok(Some(v.to_owned())),
        None if i < args.len() => Ok(Some(args.remove(i))),
        None => bail!("{name} needs a value"),
    }
}

pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `cargo xtask test`: provision ONNX Runtime, check formatting and lints, then every test of the workspace in
/// debug (the tidy tests in xtask/src/tidy.rs among them).
fn test(rest: &[String]) -> Result<()> {
    let lib = setup::setup(&setup::SetupArgs::default())?;
    eprintln!("xtask: cargo fmt --check");
    run_cmd(cargo().args(["fmt", "--all", "--check"]))
        .context("formatting differs from rustfmt.toml: run `cargo fmt --all`")?;
    eprintln!("xtask: cargo clippy -D warnings");
    run_cmd(cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]))?;
    let mut cmd = cargo();
    cmd.args(["test", "--workspace", "--locked"]).args(rest).env(setup::LIBRARY_ENV, &lib);
    run_cmd(&mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flag_values_are_taken_out_in_both_spellings() {
        let mut args = strings(&["--samples", "10", "--int8-tolerance", "2", "--ep", "cpu"]);
        assert_eq!(take_flag_value(&mut args, "--int8-tolerance").unwrap().as_deref(), Some("2"));
        assert_eq!(args, strings(&["--samples", "10", "--ep", "cpu"]));
        let mut args = strings(&["--int8-tolerance=1.5", "--check"]);
        assert_eq!(take_flag_value(&mut args, "--int8-tolerance").unwrap().as_deref(), Some("1.5"));
        assert_eq!(args, strings(&["--check"]));
        assert_eq!(take_flag_value(&mut args, "--int8-tolerance").unwrap(), None);
        let e = take_flag_value(&mut strings(&["--check", "--int8-tolerance"]), "--int8-tolerance").unwrap_err();
        assert!(e.to_string().contains("needs a value"), "{e}");
    }
}
