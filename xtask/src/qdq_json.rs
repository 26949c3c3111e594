//! What xtask reads from the JSON documents `qdq` writes (docs/JSON.md) and from the reference metrics in the
//! assets, as types: only the fields xtask uses, so that qdq can add fields freely, and a missing or mistyped one is
//! an error naming the file and the field.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// `qdq eval --json`, and each model's part of `qdq e2e`'s results.json.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Eval {
    pub exact_match: f64,
    pub f1: f64,
    /// The pass's wall time (qdq versions before it have none).
    #[serde(default)]
    pub wall_seconds: Option<f64>,
    #[serde(default)]
    pub latency: Latency,
    /// results.json only: the model's size on disk.
    #[serde(default)]
    pub model_bytes: Option<u64>,
}

/// results.json's `speedup`: INT8 against FP32 timed in alternation.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct Speedup {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Latency {
    pub ms_per_feature: Option<f64>,
    pub features_per_second: Option<f64>,
    /// The inference time of the whole pass (warm-up left out).
    #[serde(default)]
    pub total_seconds: Option<f64>,
}

/// `qdq calibrate --json`, and the calibration part of results.json.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Calibrate {
    pub seconds: Option<f64>,
    /// The pass alone and where it went (qdq versions before it have none).
    pub pass: Option<PassTimes>,
}

/// `qdq calibrate --json`'s `pass`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, serde::Serialize)]
pub(crate) struct PassTimes {
    pub pass_seconds: f64,
    pub inference_seconds: f64,
    pub statistics_seconds: f64,
    /// Augmented-model sessions side by side (qdq versions before it have none).
    #[serde(default)]
    pub sessions: Option<usize>,
}

/// `qdq e2e`'s results.json of a SQuAD model.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct E2e {
    /// None when the run used a given range table instead of calibrating.
    #[serde(default)]
    pub calibration: Option<Calibrate>,
    pub result: SquadResult,
}

/// results.json's `result` of task `squad`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SquadResult {
    pub fp32: Eval,
    pub int8: Eval,
    /// Absent where the EP is not timed.
    #[serde(default)]
    pub speedup: Option<Speedup>,
}

/// The part of any results.json (e2e, with or without `--no-eval`) that says where it was made.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Results {
    pub provenance: Provenance,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Provenance {
    pub machine: Machine,
}

/// results.json's `provenance.machine`.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
pub(crate) struct Machine {
    pub cpu: String,
    /// Absent before qdq recorded it.
    #[serde(default)]
    pub int8_dot_product: Option<String>,
}

/// The reference metrics of the assets (reference_metrics.json): one `{exact_match, f1}` per subset of the dev set,
/// beside text fields (`scorer`, `dataset`, `note`) that are not read.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ReferenceMetrics {
    pub all_10570: Metrics,
    pub first_1000: Metrics,
    pub first_300: Metrics,
}

impl ReferenceMetrics {
    /// The metrics of subset `key` (`all_10570`, `first_1000`, `first_300`).
    pub fn get(&self, key: &str) -> Option<&Metrics> {
        match key {
            "all_10570" => Some(&self.all_10570),
            "first_1000" => Some(&self.first_1000),
            "first_300" => Some(&self.first_300),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct Metrics {
    pub exact_match: f64,
    pub f1: f64,
}

/// Reads a JSON file as `T`; errors name the file and, through serde, the field.
pub(crate) fn read<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text).with_context(|| format!("{} is not the JSON xtask expects", path.display()))
}

pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Result<T> {
    Ok(serde_json::from_str(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_read_with_extra_fields_and_name_a_missing_one() {
        let r: E2e = parse(
            r#"{"calibration": {"seconds": 3.5, "method": "entropy"}, "result": {"task": "squad", "fp32": {"exact_match":
                60, "f1": 73.4, "latency": {"ms_per_feature": 20.0}}, "int8": {"exact_match": 59, "f1": 73.1}},
                "quantization": {}}"#,
        )
        .unwrap();
        let s = &r.result;
        assert_eq!((s.fp32.f1, s.int8.f1, r.calibration.unwrap().seconds), (73.4, 73.1, Some(3.5)));
        assert_eq!(s.fp32.latency.ms_per_feature, Some(20.0));
        assert_eq!(s.int8.latency.ms_per_feature, None);
        let e = parse::<E2e>(r#"{"result": {"fp32": {"exact_match": 60, "f1": 73.4}, "int8": {"exact_match": 59}}}"#)
            .unwrap_err();
        assert!(e.to_string().contains("missing field `f1`"), "{e}");
    }

    #[test]
    fn reference_metrics_read_beside_their_text_fields() {
        // The shape of the assets' reference_metrics.json.
        let r: ReferenceMetrics = parse(
            r#"{"scorer": "official SQuAD v1.1 evaluation semantics", "dataset": "squad/dev-v1.1.json",
                "all_10570": {"exact_match": 61.89, "f1": 73.46}, "first_1000": {"exact_match": 64.7, "f1": 73.45},
                "first_300": {"exact_match": 66.67, "f1": 73.14}, "note": "first N = the first N questions"}"#,
        )
        .unwrap();
        assert_eq!(r.get("first_1000").map(|m| m.f1), Some(73.45));
        assert_eq!(r.get("all_10570").map(|m| m.exact_match), Some(61.89));
        assert!(r.get("first_7").is_none());
    }
}

/// An embedding model's results.json (`task: embedding`), and `qdq eval --json`'s `vs_baseline` for one: the
/// comparison of a quantized model's embeddings with FP32's.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EmbeddingResults {
    #[serde(rename = "result")]
    pub embedding: Embedding,
}

/// results.json's `result` of task `embedding`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct Embedding {
    pub fp32: EmbeddingModel,
    pub int8: EmbeddingModel,
    pub fidelity: Fidelity,
    #[serde(default)]
    pub retrieval: Option<RetrievalEval>,
    #[serde(default)]
    pub speed: Vec<SpeedAt>,
    /// Both models at the EP's own default float precision, against FP32 at the run's (`default_float`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_float: Option<EmbeddingDefaultFloat>,
}

/// An embedding result's `default_float`: FP32 and the quantized model at the EP's own default float precision.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct EmbeddingDefaultFloat {
    pub precision: String,
    #[serde(default)]
    pub fp32: Option<EmbeddingAt>,
    #[serde(default)]
    pub int8: Option<EmbeddingAt>,
}

/// One model at that precision: its fidelity and retrieval against FP32 at the run's.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct EmbeddingAt {
    pub fidelity: Fidelity,
    #[serde(default)]
    pub retrieval: Option<RetrievalEval>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct EmbeddingModel {
    pub model_bytes: u64,
    #[serde(default)]
    pub retrieval: Option<Retrieval>,
}

/// One model's retrieval scores, in %.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize)]
pub(crate) struct Retrieval {
    pub mrr_at_10: f64,
    pub ndcg_at_10: f64,
    pub recall_at_1: f64,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct Fidelity {
    pub texts: usize,
    pub mean_cosine: f64,
    pub p1_cosine: f64,
    pub min_cosine: f64,
    pub neighbours: Neighbours,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct Neighbours {
    pub compared: usize,
    pub top1_same: f64,
    pub top10_overlap: f64,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct RetrievalEval {
    pub queries: usize,
    pub documents: usize,
    pub difference: RetrievalDifference,
}

/// The quantized model minus FP32, paired over the queries (points), and the share kept.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct RetrievalDifference {
    pub mrr_at_10: Paired,
    pub ndcg_at_10: Paired,
    pub ndcg_at_10_retained: f64,
    pub mrr_at_10_retained: f64,
}

/// `qdq eval --json` of a classifier against its baseline.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ClassifierEvalDoc {
    pub vs_baseline: ClassifierEval,
}

/// A classifier's comparison with FP32 (the baseline): each model's accuracy, the paired difference, the agreement.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct ClassifierEval {
    pub fp32: ClassifierModel,
    pub int8: ClassifierModel,
    pub agreement: ClassAgreement,
    #[serde(default)]
    pub accuracy_difference: Option<Paired>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct ClassifierModel {
    pub accuracy: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct ClassAgreement {
    pub inputs: usize,
    pub top1: f64,
    pub top1_interval: [f64; 2],
    pub mean_kl: f64,
}

/// A paired difference with its 95 % interval.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize)]
pub(crate) struct Paired {
    pub delta: f64,
    pub low: f64,
    pub high: f64,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub(crate) struct SpeedAt {
    pub batch: usize,
    pub seq_len: usize,
    pub speedup: SpeedupMs,
}

/// A speed-up with each model's median time per text (ms).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize)]
pub(crate) struct SpeedupMs {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    #[serde(default)]
    pub reference_ms_per_feature: f64,
    #[serde(default)]
    pub ms_per_feature: f64,
}

/// `qdq eval --json` of an embedding model against a `--baseline`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EmbeddingEval {
    pub vs_baseline: Embedding,
}
