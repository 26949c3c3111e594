//! The workspace every xtask command works in: its root, commands run there, files written whole.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

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

/// Writes `bytes` to `path` atomically ([`files::write_atomic`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    files::write_atomic(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// `cargo`, as the one running xtask.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}
