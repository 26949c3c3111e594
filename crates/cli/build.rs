//! Stamps the git commit qdq is built from (`QDQ_GIT_COMMIT`, "unknown" outside a git checkout) into the binary, for
//! results.json. Stamped here, in the small binary crate, a commit rebuilds this crate alone. Only files that exist
//! are watched (cargo counts a missing one as changed, and would run this script and rebuild on every build).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=QDQ_GIT_COMMIT={commit}");
    // `qdq --version`: the package version and the commit's first 12 digits.
    let short = if commit == "unknown" { "an unknown commit".to_owned() } else { format!("commit {}", &commit[..12]) };
    println!("cargo:rustc-env=QDQ_VERSION={} ({short})", std::env::var("CARGO_PKG_VERSION").unwrap_or_default());
    println!("cargo:rerun-if-changed=build.rs");
    // HEAD moves when HEAD itself changes (a checkout, a detached commit), or the branch it names: its loose ref, or
    // its line in packed-refs, or a loose ref made when the branch is first committed to (its folder changes then).
    let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) else { return };
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).unwrap_or_else(|| dir.clone());
    let (dir, common) = (Path::new(&dir), Path::new(&common));
    watch(&dir.join("HEAD"));
    watch(&common.join("packed-refs"));
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let loose = common.join(&r);
        watch(&loose);
        if let Some(folder) = loose.parent() {
            watch(folder);
        }
    }
}
