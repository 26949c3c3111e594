//! `cargo xtask`: the project's automation, in Rust: anyhow and clap (its command line, declared in `flags`).
//!
//! Commands: `setup`, `test`, `download`, `e2e`, `bench`, `fuzz`, `dist`. Run `cargo xtask help` or `cargo xtask <command> --help`.
//! (`bench vs-python` also uses the `squad` crate, to featurize exactly as `qdq` does, and `libc` for `wait4`;
//! `e2e --check` uses `squad-metrics` to score the reference predictions.)

mod bench;
mod dist;
mod download;
mod e2e;
mod flags;
mod fuzz;
mod npy;
mod qdq_json;
mod setup;
mod tidy;
mod workspace;

use anyhow::{Context, Result};
use clap::Parser as _;

use flags::{Cmd, Xtask};
use workspace::{cargo, run_cmd};

fn main() {
    let cmd = Xtask::parse().command;
    if let Err(e) = run(cmd) {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Setup(a) => setup::setup(&a).map(|_| ()),
        Cmd::Test(a) => test(&a.cargo_test),
        Cmd::Download(a) => {
            let dest = download::download(&a.resolved())?;
            eprintln!("xtask: assets ready in {}", dest.display());
            Ok(())
        }
        Cmd::E2e(a) => e2e::e2e(a),
        Cmd::Bench(a) => bench::bench(*a),
        Cmd::Fuzz(a) => fuzz::fuzz(a.cases, a.first),
        Cmd::Dist(a) => dist::dist(&a).map(|_| ()),
    }
}

/// `cargo xtask test`: provision ONNX Runtime and OpenVINO's plugin EP, check formatting and lints, then every test of the workspace in
/// debug (the tidy tests in xtask/src/tidy.rs among them), then what users install, installed as they would
/// (`dist --check`: the wheel into a fresh venv, the archive unpacked; the release build it makes is the one `cargo
/// xtask e2e` runs).
fn test(rest: &[String]) -> Result<()> {
    // The OpenVINO and QNN plugins too: their tests run models through them.
    let lib = setup::setup(&setup::SetupArgs { openvino: true, qnn: true, ..Default::default() })?;
    eprintln!("xtask: cargo fmt --check");
    run_cmd(cargo().args(["fmt", "--all", "--check"]))
        .context("formatting differs from rustfmt.toml: run `cargo fmt --all`")?;
    eprintln!("xtask: cargo clippy -D warnings");
    run_cmd(cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]))?;
    let mut cmd = cargo();
    cmd.args(["test", "--workspace", "--locked"]).args(rest).env(setup::LIBRARY_ENV, &lib);
    run_cmd(&mut cmd)?;
    if rest.is_empty() {
        eprintln!("xtask: dist --check (the wheel and the archive, installed and run)");
        dist::dist(&flags::DistArgs { check: true })?;
    }
    Ok(())
}
