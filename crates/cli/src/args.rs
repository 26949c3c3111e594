//! The command line: one subcommand per pipeline job, each flattened the same way ([`JobArgs`]: the job's own flags,
//! then `--json` and `--config`). Long options are kebab-case; every one also takes the seed scripts' snake_case
//! spelling (`--seq_len`), added here ([`command`]) and explained once in each command's `--help`. Spellings renamed
//! in this release keep working as hidden aliases and say so ([`DEPRECATED`]).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand};

const ABOUT: &str = "Post-training INT8 quantization of BERT ONNX models in QDQ form, proved on SQuAD.";

const LONG_ABOUT: &str = "\
Post-training INT8 quantization of BERT ONNX models in QDQ form, proved on SQuAD.

qdq calibrates a model on SQuAD features (streaming histograms: memory stays flat in the number of samples), \
inserts QuantizeLinear/DequantizeLinear pairs placed by a policy, and evaluates the FP32 and INT8 models on an ONNX \
Runtime execution provider, reporting EM/F1 and latency side by side.

ONNX Runtime is loaded from --ort-lib or ORT_DYLIB_PATH when given, else from where qdq was installed: the Python \
environment its wheel was pip-installed into, the release archive's lib/, or a source checkout's `cargo xtask setup` copy \
(`qdq providers` says which).";

/// The widest help: `-h` is one line per flag within it, `--help` wraps to the terminal up to it.
const HELP_WIDTH: usize = 100;

#[derive(Debug, Parser)]
#[command(
    name = "qdq",
    version = env!("QDQ_VERSION"),
    about = ABOUT,
    long_about = LONG_ABOUT,
    args_override_self = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More log output (debug level; QDQ_LOG=<filter> sets any tracing filter)
    #[arg(long, short, global = true)]
    pub verbose: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Calibrate, quantize, then evaluate FP32 and INT8 side by side; writes everything to --out
    #[command(long_about = E2E_ABOUT)]
    E2e(Box<JobArgs<pipeline::E2eJob>>),
    /// Run calibration data through a model and write its ranges (calibration.json, TensorRT/MIGraphX tables)
    Calibrate(Box<JobArgs<pipeline::CalibrateJob>>),
    /// Insert Q/DQ pairs into a model, with ranges from a calibration file (or a recipe of `qdq tune`)
    Quantize(Box<JobArgs<pipeline::QuantizeJob>>),
    /// Evaluate a model (FP32 or QDQ): SQuAD EM / F1, retrieval, agreement with a baseline; latency
    Eval(Box<JobArgs<pipeline::EvalJob>>),
    /// Where a QDQ model loses accuracy: each quantized tensor and the outputs against the float model
    #[command(long_about = DEBUG_ABOUT)]
    Debug(Box<JobArgs<pipeline::DebugJob>>),
    /// The most-integer QDQ model within a budget (F1, nDCG), its recipe and the trade-off curve
    #[command(long_about = TUNE_ABOUT)]
    Tune(Box<JobArgs<pipeline::TuneJob>>),
    /// Summarise a model: operators, Q/DQ coverage, and the ranges Q/DQ pairs encode
    Inspect(Box<JobArgs<pipeline::InspectJob>>),
    /// List the execution providers of the loaded ONNX Runtime
    Providers(Box<JobArgs<pipeline::ProvidersJob>>),
    /// Print the help of qdq or of one of its commands (as `qdq <COMMAND> --help`)
    Help(HelpArgs),
}

const E2E_ABOUT: &str = "\
Calibrate, quantize, then evaluate FP32 and INT8 side by side.

Steps: (1) calibration features from --calibration-data (default: --dataset) run through the model, every tensor the
policy quantizes read as it is computed; statistics for every --calibrate-method are collected in one pass; (2) Q/DQ
pairs are inserted by --policy with ranges from the first method; (3) both models are evaluated on --dataset and
timed against each other.

A model without start / end logits (a classifier) is calibrated and evaluated on .npz / .npy / text / TSV / JSONL
inputs (see --dataset); INT8 is compared with FP32 (top-1 agreement, KL, largest logit difference) and both are
scored against the labels if any. Without --policy the preset is the one made for --ep; --mode dynamic skips
calibration (CPU: weights int8, inputs quantized at run time).";

const DEBUG_ABOUT: &str = "\
Where a QDQ model loses accuracy, on held-out questions (the last --held-out of --dataset): every activation pair's
dequantized tensor against its float value in the QDQ model's float reference (the model without its activation
pairs, so shifted or smoothed tensors meet what they stand for): SQNR dB, relative error, clipped share, the pair's
own rounding; and the outputs of the QDQ model and of that reference against FP32: a SQuAD model's logits (KL, argmax
agreement), an embedding model's sentence embedding (cosine; texts: the questions with their paragraphs), a
classifier's class logits (KL of the class probabilities, class = FP32's; the last rows of a TSV / JSONL / text).";

const TUNE_ABOUT: &str = "\
The most-integer QDQ model within a budget. Calibrates once (or takes --ranges); quantizes with the policy; if the
INT8 model loses more than --budget, tries other calibrators' ranges for the worst pairs, then keeps the most
sensitive 1, 2, 4, ... nodes in float (ranked by `qdq debug --sensitivity` on held-out questions) until a candidate
is within budget. Each candidate is screened on the questions nearest to flipping first and timed against FP32.
Writes the chosen model, a recipe `qdq quantize --recipe` replays byte for byte, and the trade-off curve.

The budget is in the task's points: SQuAD F1; for an embedding model nDCG@10 on retrieval data (a SQuAD file's
questions against its paragraphs, or JSONL queries with --corpus), else the cosine to FP32's embedding x100 per
text; for a classifier accuracy on labelled inputs, else agreement with FP32's class (no screen).";

/// Every command's flags: the job's own, then the two every command shares.
#[derive(Debug, Args)]
pub struct JobArgs<T: Args> {
    #[command(flatten)]
    pub job: T,
    #[command(flatten)]
    pub common: Common,
}

/// The flags every command shares.
#[derive(Debug, Args)]
pub struct Common {
    /// Print one JSON document on stdout instead of text
    ///
    /// Schemas in docs/JSON.md; logs stay on stderr.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Settings from a TOML file; command-line options win
    ///
    /// Keys are the long option names (`seq-len = 128`, `calibrate-method = "entropy"`, lists as arrays); read
    /// before the command line, so an option given there wins.
    #[arg(long, value_name = "FILE", help_heading = None::<&str>)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct HelpArgs {
    /// The command to explain (default: qdq itself)
    pub command: Option<String>,
}

/// Spellings renamed in this release: (command, old, new). They still work for one release, each saying once that
/// it is deprecated ([`deprecated`]).
pub const DEPRECATED: &[(&str, &str, &str)] = &[
    ("quantize", "--output", "--out"),
    ("eval", "--predictions", "--out"),
    ("debug", "--questions", "--held-out"),
    ("debug", "--confirm-samples", "--samples"),
    ("inspect", "--ranges", "--pairs"),
];

/// The command line: [`Cli`] with every long option also taking its seed-scripts spelling (`_` for `-`), said once
/// in each command's `--help`, and help within [`HELP_WIDTH`] columns.
pub fn command() -> clap::Command {
    Cli::command().max_term_width(HELP_WIDTH).mut_subcommands(|sub| {
        let spellings: Vec<(clap::Id, String)> = sub
            .get_arguments()
            .filter_map(|a| Some((a.get_id().clone(), a.get_long().filter(|l| l.contains('-'))?.replace('-', "_"))))
            .collect();
        if spellings.is_empty() {
            return sub;
        }
        let listed: Vec<String> = spellings.iter().map(|(_, s)| format!("--{s}")).collect();
        let note = format!(
            "Seed scripts: every option also takes the seed scripts' spelling with underscores ({}), and `--version \
             1.1|2.0` is --squad-version (`--version` without a value is qdq's own version).",
            listed.join(", ")
        );
        spellings.into_iter().fold(sub, |sub, (id, s)| sub.mut_arg(id, |a| a.alias(s))).after_long_help(note)
    })
}

/// True when `argv` asks for qdq's version after a command (`qdq e2e --version`): a `--version` with no value after
/// it. `--version 2.0` (a value) is the seed scripts' spelling of `--squad-version`; `--` ends the options.
pub fn asks_version(argv: &[OsString]) -> bool {
    let options: Vec<&str> = argv.iter().skip(2).map_while(|a| a.to_str()).take_while(|a| *a != "--").collect();
    argv.len() > 2
        && options
            .iter()
            .enumerate()
            .any(|(i, a)| *a == "--version" && options.get(i + 1).is_none_or(|v| v.starts_with('-')))
}

/// The deprecation lines for the renamed spellings `argv` uses (the command is its first argument after the program);
/// `--` ends the options.
pub fn deprecated(argv: &[OsString]) -> Vec<String> {
    let Some(command) = argv.get(1).and_then(|c| c.to_str()) else { return Vec::new() };
    let options = argv.iter().skip(2).filter_map(|a| a.to_str()).take_while(|a| *a != "--");
    let mut lines = Vec::new();
    for a in options {
        let name = a.split_once('=').map_or(a, |(n, _)| n);
        for (_, old, new) in DEPRECATED.iter().filter(|(c, old, _)| *c == command && *old == name) {
            let line = format!("{old} is deprecated and goes in the next release: use {new}");
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("qdq").chain(args.iter().copied()).map(OsString::from).collect()
    }

    #[test]
    fn a_version_without_a_value_is_qdqs_own() {
        assert!(asks_version(&argv(&["e2e", "--version"])));
        assert!(asks_version(&argv(&["eval", "--version", "--model", "m.onnx"])));
        assert!(!asks_version(&argv(&["e2e", "--version", "2.0"])));
        assert!(!asks_version(&argv(&["e2e", "--version=1.1", "--model", "m.onnx"])));
        assert!(!asks_version(&argv(&["e2e", "--", "--version"])));
        assert!(!asks_version(&argv(&["--version"])));
    }

    #[test]
    fn renamed_spellings_are_named_once_for_their_command_only() {
        let lines = deprecated(&argv(&["quantize", "--output", "a", "--output=b", "--", "--predictions"]));
        assert_eq!(lines, ["--output is deprecated and goes in the next release: use --out"]);
        assert!(deprecated(&argv(&["eval", "--output", "a"])).is_empty());
        assert_eq!(deprecated(&argv(&["debug", "--questions", "3", "--confirm-samples=9"])).len(), 2);
    }

    /// Every deprecated spelling is still accepted where it was, as a hidden alias of its new name.
    #[test]
    fn every_deprecated_spelling_is_a_hidden_alias_of_its_new_name() {
        let cmd = command();
        for (sub, old, new) in DEPRECATED {
            let sub = cmd.find_subcommand(sub).unwrap();
            let arg = sub.get_arguments().find(|a| a.get_long() == new.strip_prefix("--")).unwrap();
            let aliases = arg.get_all_aliases().unwrap_or_default();
            assert!(aliases.contains(&old.strip_prefix("--").unwrap()), "{old} is not an alias of {new}");
            assert!(!arg.get_visible_aliases().unwrap_or_default().contains(&old.strip_prefix("--").unwrap()));
        }
    }
}
