//! `cargo xtask e2e`: set-up, assets, a release build of `qdq`, then `qdq e2e` on the assets.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::download::{DownloadArgs, download};
use crate::flags::E2eArgs;
use crate::qdq_json::{self, Metrics, ReferenceMetrics};
use crate::setup::{LIBRARY_ENV, SetupArgs, install_dir, library_path, setup};
use crate::workspace::{cargo, root, run_cmd};

fn has_flag(args: &[String], names: &[&str]) -> bool {
    args.iter().any(|a| names.iter().any(|n| a == n || a.starts_with(&format!("{n}="))))
}

/// The value of `--flag V` / `--flag=V` in `args`, under any of `names`.
fn flag_value(args: &[String], names: &[&str]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        names.iter().find_map(|n| {
            if a == n { args.get(i + 1).cloned() } else { a.strip_prefix(&format!("{n}=")).map(str::to_owned) }
        })
    })
}

/// `cargo xtask e2e`: `args.qdq` goes to `qdq e2e` unchanged, after defaults for what it does not set.
pub fn e2e(args: E2eArgs) -> Result<()> {
    let args = E2eArgs { download: args.download.resolved(), ..args };

    let lib = ort_library()?;
    let assets = Assets::download(&args.download)?;
    if args.check
        && let Some(predictions) = &assets.reference_predictions
    {
        check_scorer(&assets.dataset, predictions, &assets.reference_metrics)?;
    }
    let exe = build_qdq()?;

    let mut cmd = Command::new(&exe);
    cmd.arg("e2e").env(LIBRARY_ENV, &lib);
    let defaults: [(&[&str], PathBuf); 5] = [
        (&["--model"], assets.model.clone()),
        (&["--vocab"], assets.vocab.clone()),
        (&["--dataset"], assets.dataset.clone()),
        (&["--calibration-data", "--calibration_data"], assets.calibration.clone()),
        (&["--out"], root().join("out/e2e")),
    ];
    for (names, value) in &defaults {
        if !has_flag(&args.qdq, names) {
            cmd.arg(names[0]).arg(value);
        }
    }
    if !has_flag(&args.qdq, &["--samples"]) {
        cmd.args(["--samples", "1000"]);
    }
    cmd.args(&args.qdq);
    run_cmd(&mut cmd)?;

    if args.check {
        let out = flag_value(&args.qdq, &["--out"]).map(PathBuf::from).unwrap_or_else(|| root().join("out/e2e"));
        let samples = flag_value(&args.qdq, &["--samples"]).unwrap_or_else(|| "1000".into());
        check_results(&out.join("results.json"), &assets.reference_metrics, &samples, args.int8_tolerance)?;
        // The default run (CPU EP, the preset for it) must also pay off: faster and smaller than FP32.
        let default_cpu = flag_value(&args.qdq, &["--ep"]).is_none_or(|ep| ep == "cpu")
            && !has_flag(&args.qdq, &["--policy", "--ort-quant", "--ort_quant", "--mode"]);
        if default_cpu {
            println!("check: {}", pays_off(&qdq_json::read(&out.join("results.json"))?)?);
        }
    }
    for model in &assets.embedding_models {
        embedding_e2e(&args, &assets, model, (&exe, &lib))?;
    }
    Ok(())
}

/// A retrieval reference: MRR@10, nDCG@10, Recall@1, @5, @10 (%).
type Reference = [(&'static str, f64); 5];

/// FP32 retrieval of each sentence-embedding model of the assets on SQuAD v1.1 dev (every question retrieving its own
/// paragraph among the 2,067, cosine), as ../shared/assets/README.md gives it from an independent Python script on
/// onnxruntime 1.31.1, by the model's folder name: paraphrase-MiniLM-L3 at 128 tokens, all-MiniLM-L6-v2 at 256.
const EMBEDDING_REFERENCES: [(&str, Reference); 2] = [
    (
        "paraphrase-minilm-l3",
        [("MRR@10", 61.271), ("nDCG@10", 66.450), ("R@1", 50.956), ("R@5", 75.033), ("R@10", 82.772)],
    ),
    ("all-minilm-l6-v2", [("MRR@10", 72.697), ("nDCG@10", 77.336), ("R@1", 62.507), ("R@5", 86.395), ("R@10", 91.722)]),
];

/// The same run for each sentence-embedding model of the asset set: `qdq e2e` on its folder with the SQuAD files as
/// retrieval data (the same `--samples`), into out/e2e-embedding (paraphrase-MiniLM-L3, as before) or
/// out/e2e-<folder>. With `--check` on the whole dev set, FP32 must match the model's reference within 0.05 on every
/// measure and INT8's nDCG@10 and MRR@10 be within `--int8-tolerance` of FP32's.
fn embedding_e2e(args: &E2eArgs, assets: &Assets, model: &Path, (exe, lib): (&Path, &Path)) -> Result<()> {
    let name = model.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let out = root().join(if name == "paraphrase-minilm-l3" {
        "out/e2e-embedding".into()
    } else {
        format!("out/e2e-{name}")
    });
    let samples = flag_value(&args.qdq, &["--samples"]).unwrap_or_else(|| "1000".into());
    let mut cmd = Command::new(exe);
    cmd.arg("e2e").env(LIBRARY_ENV, lib).arg("--model").arg(model).arg("--dataset").arg(&assets.dataset);
    cmd.arg("--calibration-data").arg(&assets.calibration).args(["--samples", &samples]).arg("--out").arg(&out);
    run_cmd(&mut cmd)?;
    let reference = EMBEDDING_REFERENCES.iter().find(|(n, _)| *n == name).map(|(_, r)| r);
    match (args.check && samples == "0", reference) {
        (true, Some(reference)) => {
            let r: qdq_json::EmbeddingResults = qdq_json::read(&out.join("results.json"))?;
            println!("check: {name}: {}", check_embedding(&r.embedding, reference, args.int8_tolerance)?);
        }
        (true, None) => println!("check: {name}: no reference to check against (not one of the assets' models)"),
        (false, _) => {}
    }
    Ok(())
}

/// The embedding run's FP32 scores against `reference` (0.05), INT8's nDCG@10 and MRR@10 against FP32's (`tolerance`
/// points); the line says what was measured.
fn check_embedding(e: &qdq_json::Embedding, reference: &Reference, tolerance: f64) -> Result<String> {
    let (Some(fp32), Some(r)) = (e.fp32.retrieval, e.retrieval.as_ref()) else {
        bail!("the embedding run's results.json has no retrieval scores")
    };
    let ours = [fp32.mrr_at_10, fp32.ndcg_at_10, fp32.recall_at_1, fp32.recall_at_5, fp32.recall_at_10];
    for ((name, reference), got) in reference.iter().zip(ours) {
        if (got - reference).abs() > 0.05 {
            bail!("embedding FP32 {name} {got:.3} differs from the reference {reference:.3} by more than 0.05");
        }
    }
    let d = &r.difference;
    let line = format!(
        "embedding FP32 MRR@10 {:.3}, nDCG@10 {:.3} (reference {:.3}, {:.3}; tolerance 0.05); INT8 dnDCG@10 {:+.3} \
         [{:+.3}, {:+.3}], dMRR@10 {:+.3} (tolerance {tolerance}); cosine mean {:.5}, 1st percentile {:.5}",
        fp32.mrr_at_10,
        fp32.ndcg_at_10,
        reference[0].1,
        reference[1].1,
        d.ndcg_at_10.delta,
        d.ndcg_at_10.low,
        d.ndcg_at_10.high,
        d.mrr_at_10.delta,
        e.fidelity.mean_cosine,
        e.fidelity.p1_cosine
    );
    if -d.ndcg_at_10.delta > tolerance || -d.mrr_at_10.delta > tolerance {
        bail!("INT8 retrieves worse than FP32 by more than {tolerance}: {line}");
    }
    Ok(line)
}

/// The files of the downloaded asset set.
pub struct Assets {
    pub model: PathBuf,
    pub vocab: PathBuf,
    /// SQuAD dev set (evaluation).
    pub dataset: PathBuf,
    /// SQuAD train questions (calibration).
    pub calibration: PathBuf,
    pub reference_metrics: PathBuf,
    /// The reference pipeline's predictions on the whole dev set, when the set has them (minilm).
    pub reference_predictions: Option<PathBuf>,
    /// Every sentence-embedding model's folder the set has (minilm: paraphrase-MiniLM-L3, all-MiniLM-L6-v2).
    pub embedding_models: Vec<PathBuf>,
}

impl Assets {
    /// Fetches the chosen set (see [`download`]) and names its files.
    pub fn download(args: &DownloadArgs) -> Result<Assets> {
        let root = download(args)?;
        let (model_dir, calib_file) = match args.set() {
            "minilm" => ("models/minilm-l6-squad", "squad/train-v1.1-calib.json"),
            _ => ("models/distilbert-squad", "squad/train-v1.1.json"),
        };
        let model_dir = root.join(model_dir);
        Ok(Assets {
            model: model_dir.join("model.onnx"),
            vocab: model_dir.join("vocab.txt"),
            dataset: root.join("squad/dev-v1.1.json"),
            calibration: root.join(calib_file),
            reference_metrics: model_dir.join("reference_metrics.json"),
            reference_predictions: Some(model_dir.join("predictions_dev.json")).filter(|p| p.is_file()),
            embedding_models: ["models/paraphrase-minilm-l3", "models/all-minilm-l6-v2"]
                .iter()
                .map(|d| root.join(d))
                .filter(|p| p.join("model.onnx").is_file() || p.join("onnx/model.onnx").is_file())
                .collect(),
        })
    }
}

/// The ONNX Runtime library `qdq` should load: a GPU build installed with `cargo xtask setup --gpu` wins; otherwise
/// the CPU build is provisioned.
pub fn ort_library() -> Result<PathBuf> {
    let gpu_lib = library_path(&install_dir(true));
    if gpu_lib.is_file() { Ok(gpu_lib) } else { setup(&SetupArgs::default()) }
}

/// Builds `qdq` in release and returns the path of the binary.
pub fn build_qdq() -> Result<PathBuf> {
    eprintln!("xtask: building qdq (release)");
    run_cmd(cargo().args(["build", "--release", "--locked", "-p", "qdq-cli"]))?;
    Ok(target_dir().join("release").join(format!("qdq{}", std::env::consts::EXE_SUFFIX)))
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// Scorer parity: the reference pipeline's predictions, scored by `squad-metrics`, must give the reference EM and F1
/// (measured with the official evaluate-v1.1 script) to 1e-9, on the whole dev set and on its first 1,000 and 300
/// questions.
fn check_scorer(dataset: &Path, predictions: &Path, reference: &Path) -> Result<()> {
    let data = squad_metrics::load_dataset(dataset)?;
    let preds = squad_metrics::load_predictions(predictions)?;
    let refs: ReferenceMetrics = qdq_json::read(reference)?;
    for (key, first) in [("all_10570", None), ("first_1000", Some(1000)), ("first_300", Some(300))] {
        let subset = first.map(|n| data.first_n(n));
        let m = squad_metrics::evaluate_v1(subset.as_ref().unwrap_or(&data), &preds);
        let Metrics { exact_match: em, f1 } =
            *refs.get(key).with_context(|| format!("{}: no `{key}` metrics", reference.display()))?;
        println!(
            "check: squad-metrics on the reference predictions, {key}: EM {} F1 {} (reference EM {em} F1 {f1}, tolerance 1e-9)",
            m.exact_match, m.f1
        );
        if m.missing > 0 || (m.exact_match - em).abs() > 1e-9 || (m.f1 - f1).abs() > 1e-9 {
            bail!(
                "{key}: squad-metrics scores {} as EM {} F1 {} ({} questions without a prediction), the reference says EM {em} F1 {f1}",
                predictions.display(),
                m.exact_match,
                m.f1,
                m.missing
            );
        }
    }
    Ok(())
}

/// The INT8 model of the default CPU run is faster (median of the alternating rounds above 1) and smaller than FP32;
/// the line says by how much.
fn pays_off(r: &qdq_json::E2e) -> Result<String> {
    let r = &r.result;
    let s =
        r.speedup.context("results.json has no `speedup` (INT8 timed against FP32): a qdq older than this check")?;
    let (fp32, int8) = match (r.fp32.model_bytes, r.int8.model_bytes) {
        (Some(f), Some(i)) => (f as f64 / 1e6, i as f64 / 1e6),
        _ => bail!("results.json lacks `model_bytes` for FP32 or INT8"),
    };
    let line = format!(
        "INT8 at {:.2}x FP32's speed ({:.2}-{:.2}, alternating rounds), {int8:.1} MB against {fp32:.1} MB",
        s.median, s.min, s.max
    );
    if s.median <= 1.0 {
        bail!("the INT8 model is not faster than FP32: {line}");
    }
    if int8 >= fp32 {
        bail!("the INT8 model is not smaller than FP32: {line}");
    }
    Ok(line)
}

/// FP32 F1 must match the reference within 0.1; INT8 F1 must be within `int8_tolerance` (the product goal: 1.0)
/// of FP32.
fn check_results(results: &Path, reference: &Path, samples: &str, int8_tolerance: f64) -> Result<()> {
    let r: qdq_json::E2e = qdq_json::read(results)?;
    let (fp32, int8) = (r.result.fp32.f1, r.result.int8.f1);
    let key = match samples {
        "0" => "all_10570",
        "1000" => "first_1000",
        "300" => "first_300",
        other => bail!("--check needs --samples 0, 1000 or 300 (the reference has no numbers for {other})"),
    };
    let refs: ReferenceMetrics = qdq_json::read(reference)?;
    let reference_f1 = refs.get(key).with_context(|| format!("{}: no `{key}` metrics", reference.display()))?.f1;
    println!(
        "check: FP32 F1 {fp32:.3} vs reference {reference_f1:.3} (tolerance 0.1); INT8 F1 {int8:.3}, dF1 {:.3} (tolerance {int8_tolerance})",
        int8 - fp32
    );
    if (fp32 - reference_f1).abs() > 0.1 {
        bail!("FP32 F1 {fp32:.3} differs from the reference {reference_f1:.3} by more than 0.1");
    }
    if fp32 - int8 > int8_tolerance {
        bail!("INT8 F1 {int8:.3} is more than {int8_tolerance} below FP32 {fp32:.3}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(median: f64, fp32_bytes: u64, int8_bytes: u64) -> qdq_json::E2e {
        qdq_json::parse(&format!(
            r#"{{"result": {{"fp32": {{"exact_match": 60, "f1": 73.4, "model_bytes": {fp32_bytes}}},
                "int8": {{"exact_match": 60, "f1": 73.3, "model_bytes": {int8_bytes}}},
                "speedup": {{"median": {median}, "min": 0.9, "max": 2.0, "rounds": 5, "features": 16}}}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_default_run_must_be_faster_and_smaller() {
        let line = pays_off(&results(1.39, 90_300_000, 22_900_000)).unwrap();
        assert!(line.contains("1.39x") && line.contains("22.9 MB against 90.3 MB"), "{line}");
        let slow = pays_off(&results(0.98, 90_300_000, 22_900_000)).unwrap_err().to_string();
        assert!(slow.contains("not faster"), "{slow}");
        let big = pays_off(&results(1.2, 90_300_000, 90_600_000)).unwrap_err().to_string();
        assert!(big.contains("not smaller"), "{big}");
        let old: qdq_json::E2e = qdq_json::parse(
            r#"{"result": {"fp32": {"exact_match": 1, "f1": 1}, "int8": {"exact_match": 1, "f1": 1}}}"#,
        )
        .unwrap();
        assert!(pays_off(&old).unwrap_err().to_string().contains("no `speedup`"));
    }
}
