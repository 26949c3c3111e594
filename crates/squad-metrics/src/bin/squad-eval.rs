//! `squad-eval DATASET PREDICTIONS [--na-prob FILE] [--na-prob-thresh T] [--first N]`: the official SQuAD scorer.
//!
//! Prints `{"exact_match": .., "f1": ..}` for v1.1 datasets and the official v2.0 JSON for v2.0 datasets (or when a
//! na-prob file is given). Missing predictions are scored 0 and reported on stderr.

use std::process::ExitCode;

const USAGE: &str = "usage: squad-eval DATASET PREDICTIONS [--na-prob FILE] [--na-prob-thresh T] [--first N]";

struct Args {
    dataset: String,
    predictions: String,
    na_prob: Option<String>,
    thresh: f64,
    first: Option<usize>,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut positional = Vec::new();
    let (mut na_prob, mut thresh, mut first) = (None, 1.0, None);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--na-prob" => na_prob = Some(value("--na-prob")?),
            "--na-prob-thresh" => {
                let v = value("--na-prob-thresh")?;
                thresh = v.parse().map_err(|_| format!("--na-prob-thresh expects a number, got {v:?}"))?;
            }
            "--first" => {
                let v = value("--first")?;
                first = Some(v.parse().map_err(|_| format!("--first expects a question count, got {v:?}"))?);
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            _ => positional.push(arg),
        }
    }
    let [dataset, predictions] = <[String; 2]>::try_from(positional)
        .map_err(|p| format!("expected DATASET and PREDICTIONS, got {} positional arguments", p.len()))?;
    Ok(Args { dataset, predictions, na_prob, thresh, first })
}

fn run(args: Args) -> Result<String, qdq_squad_metrics::Error> {
    let mut dataset = qdq_squad_metrics::load_dataset(&args.dataset)?;
    if let Some(n) = args.first {
        dataset = dataset.first_n(n);
    }
    let dup = dataset.duplicate_ids();
    if !dup.is_empty() {
        eprintln!(
            "warning: {} question ids occur more than once in {} (first: {}); each copy is scored against the one answer \
             the predictions hold for it",
            dup.len(),
            args.dataset,
            dup[0]
        );
    }
    let preds = qdq_squad_metrics::load_predictions(&args.predictions)?;
    let na_probs = args.na_prob.as_ref().map(qdq_squad_metrics::load_na_probs).transpose()?;
    let warn = |missing: usize, total: usize| {
        if missing > 0 {
            eprintln!("warning: {missing} of {total} questions have no prediction; they score 0");
        }
    };
    if dataset.is_v2() || na_probs.is_some() {
        let m = qdq_squad_metrics::evaluate_v2(&dataset, &preds, na_probs.as_ref(), args.thresh);
        warn(m.missing, m.total);
        Ok(serde_json::to_string_pretty(&m).unwrap_or_default())
    } else {
        let m = qdq_squad_metrics::evaluate_v1(&dataset, &preds);
        warn(m.missing, m.total);
        Ok(serde_json::to_string(&m).unwrap_or_default())
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
