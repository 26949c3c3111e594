//! `--config FILE`: a TOML file whose keys are long option names. Its settings are turned into command-line
//! arguments placed *before* the user's, and the parser lets a later occurrence win, so the command line overrides
//! the file.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Expands `--config FILE` (for the subcommand given) into arguments; other arguments are returned unchanged.
pub fn expand(args: Vec<OsString>, cmd: &clap::Command) -> Result<Vec<OsString>> {
    let Some(pos) = args.iter().position(|a| a == "--config" || a.to_string_lossy().starts_with("--config=")) else {
        return Ok(args);
    };
    let (path, consumed) = match args[pos].to_string_lossy().strip_prefix("--config=") {
        Some(p) => (p.to_owned(), 1),
        None => match args.get(pos + 1) {
            Some(p) => (p.to_string_lossy().into_owned(), 2),
            None => bail!("--config needs a file"),
        },
    };
    // The subcommand is the first argument after the program name.
    let sub_name = args.get(1).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let sub = cmd
        .find_subcommand(&sub_name)
        .with_context(|| format!("--config goes after a subcommand (e.g. `qdq e2e --config {path}`)"))?;
    let from_file = to_args(Path::new(&path), sub)?;
    let mut out = Vec::with_capacity(args.len() + from_file.len());
    out.extend(args[..2].iter().cloned());
    out.extend(from_file);
    out.extend(args[2..pos].iter().cloned());
    out.extend(args[pos + consumed..].iter().cloned());
    Ok(out)
}

/// Reads the TOML file and turns each key into `--key value` (booleans into `--key` when true).
fn to_args(path: &Path, sub: &clap::Command) -> Result<Vec<OsString>> {
    let text = pipeline::read_text(path, "a TOML config file")?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("config file {} is not valid TOML", path.display()))?;
    // Long names and their aliases (the seeds' spellings, e.g. `version` for `squad-version`).
    let longs: Vec<(String, bool)> = sub
        .get_arguments()
        .flat_map(|a| {
            let takes_value = a.get_action().takes_values();
            let aliases = a.get_all_aliases().unwrap_or_default();
            a.get_long().into_iter().chain(aliases).map(move |l| (l.to_owned(), takes_value))
        })
        .filter(|(l, _)| l != "config")
        .collect();
    if table.get("policy").is_some_and(toml::Value::is_table) {
        bail!(
            "{} is a recipe of qdq tune, not a settings file: replay it with `qdq quantize --recipe {}`",
            path.display(),
            path.display()
        );
    }
    let mut out = Vec::new();
    for (key, value) in &table {
        let flag = key.replace('_', "-");
        let Some((_, takes_value)) = longs.iter().find(|(l, _)| *l == flag) else {
            let valid: Vec<&str> = longs.iter().map(|(l, _)| l.as_str()).collect();
            bail!("config file {}: unknown key `{key}`; valid keys: {}", path.display(), valid.join(", "));
        };
        let values: Vec<String> = match value {
            toml::Value::Boolean(b) if !takes_value => {
                if *b {
                    out.push(OsString::from(format!("--{flag}")));
                }
                continue;
            }
            toml::Value::Array(items) => items.iter().map(scalar).collect::<Option<_>>().with_context(|| {
                format!("config file {}: `{key}` must be a list of strings or numbers", path.display())
            })?,
            v => vec![scalar(v).with_context(|| {
                format!("config file {}: `{key}` must be a string, number or boolean", path.display())
            })?],
        };
        if !takes_value {
            bail!("config file {}: `{key}` is a switch; write `{key} = true`", path.display());
        }
        for v in values {
            out.push(OsString::from(format!("--{flag}")));
            out.push(OsString::from(v));
        }
    }
    Ok(out)
}

fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}
