//! The skeleton every bench report fills in: its targets with their verdicts ([`Target`]), the table of them in
//! its Markdown, and the report written as `<name>.json` and `<name>.md` ([`write`]).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::workspace::write_atomic;

/// A bench target and its verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) target: String,
    pub(crate) value: String,
    pub(crate) pass: bool,
}

impl Target {
    /// `name`: `value` against `target` (the goal, in words), passing or not.
    pub(crate) fn new(
        name: impl Into<String>,
        target: impl Into<String>,
        value: impl Into<String>,
        pass: bool,
    ) -> Target {
        Target { name: name.into(), target: target.into(), value: value.into(), pass }
    }
}

/// The Markdown table of `targets` under the heading `title` (`## Targets`), one row each with its verdict.
pub(crate) fn targets_table(md: &mut String, title: &str, targets: &[Target]) {
    let _ = writeln!(md, "\n## {title}\n\n| target | goal | value | verdict |\n|---|---|---|---|");
    for t in targets {
        let _ = writeln!(md, "| {} | {} | {} | {} |", t.name, t.target, t.value, if t.pass { "pass" } else { "FAIL" });
    }
}

/// Writes `report` as `<name>.json` and its Markdown `md` as `<name>.md` into `out`, and prints the Markdown.
pub(crate) fn write<R: Serialize>(report: &R, md: &str, out: &Path, name: &str) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    write_atomic(&out.join(format!("{name}.json")), &serde_json::to_vec_pretty(report)?)?;
    write_atomic(&out.join(format!("{name}.md")), md.as_bytes())?;
    print!("{md}");
    eprintln!("xtask: written {}", out.join(format!("{name}.{{json,md}}")).display());
    Ok(())
}
