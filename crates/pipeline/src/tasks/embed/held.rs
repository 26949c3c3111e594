//! An embedding model's held-out measure ([`HeldReader`]): each held-out text's sentence embedding against FP32's
//! (mean and lowest cosine, and how far the cosines between the texts move against their spread).

use std::path::Path;

use onnx_ir::Model;
use runtime::SessionConfig;

use crate::error::Result;
use crate::held_out::agreement::{HeldAgreement, OutputAgreement};
use crate::held_out::{AgreementSums, HeldBatch, HeldOut, HeldReader, Runs, Values};
use crate::inputs::config::DataConfig;
use crate::inputs::files::{InputSet, TextInputs};
use crate::tasks::embed::EmbedTask;
use crate::tasks::embed::data::EmbedData;
use crate::tasks::embed::head::EmbeddingHead;
use serde::Serialize;

/// Reads the sentence embedding as its head says: one embedding per row.
struct EmbeddingReader(EmbeddingHead);

impl HeldReader for EmbeddingReader {
    fn output_names(&self) -> Vec<&str> {
        vec![self.0.output.name()]
    }

    fn read(&self, o: &[runtime::OutputRef<'_>], batch: &HeldBatch, model: &str) -> Result<Values> {
        let mut rows = self.0.embeddings(model, &o[0].shape, &o[0].data, batch.mask())?;
        rows.truncate(batch.used);
        Ok(rows)
    }

    fn sums(&self) -> Box<dyn AgreementSums> {
        Box::new(EmbeddingSums::default())
    }
}

/// Each text's two embeddings, unit length (FP32's, the other model's).
#[derive(Default)]
struct EmbeddingSums {
    pairs: Vec<(Vec<f64>, Vec<f64>)>,
}

impl AgreementSums for EmbeddingSums {
    fn add(&mut self, a: &Values, b: &Values, _batch: &HeldBatch) {
        self.pairs.extend(a.iter().zip(b).map(|(x, y)| (unit(x), unit(y))));
    }

    fn agreement(&self) -> OutputAgreement {
        OutputAgreement::new(embedding_agreement(&self.pairs))
    }
}

/// The held-out texts [`EmbeddingAgreement::similarity_distortion`] reads at most: a million pairs.
pub const DISTORTION_TEXTS: usize = 1000;

/// Cosines and [`EmbeddingAgreement::similarity_distortion`] of unit-length embedding pairs (FP32's, the other's).
fn embedding_agreement(pairs: &[(Vec<f64>, Vec<f64>)]) -> EmbeddingAgreement {
    if pairs.is_empty() {
        return EmbeddingAgreement { mean_cosine: 1.0, min_cosine: 1.0, similarity_distortion: 0.0 };
    }
    let cosines: Vec<f64> = pairs.iter().map(|(a, b)| cosine_of(a, b)).collect();
    let (mut distortion, mut anchors) = (0.0, 0usize);
    let ranked = &pairs[..pairs.len().min(DISTORTION_TEXTS)];
    let n = ranked.len();
    if n >= 3 {
        for (i, (a, b)) in ranked.iter().enumerate() {
            let (mut s, mut d) = (Vec::with_capacity(n - 1), Vec::with_capacity(n - 1));
            for (x, y) in ranked.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, p)| p) {
                let fp32 = dot(a, x);
                s.push(fp32);
                d.push(dot(b, y) - fp32);
            }
            let spread = std_dev(&s);
            if spread > 0.0 {
                distortion += std_dev(&d) / spread;
                anchors += 1;
            }
        }
    }
    EmbeddingAgreement {
        mean_cosine: cosines.iter().sum::<f64>() / pairs.len() as f64,
        min_cosine: cosines.iter().copied().fold(f64::INFINITY, f64::min),
        similarity_distortion: if anchors == 0 { 0.0 } else { distortion / anchors as f64 },
    }
}

/// `v` scaled to unit length, in f64 (a zero vector stays zero).
fn unit(v: &[f32]) -> Vec<f64> {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    v.iter().map(|&x| if norm > 0.0 { f64::from(x) / norm } else { 0.0 }).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The population standard deviation (root-mean-square about the mean).
fn std_dev(v: &[f64]) -> f64 {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

/// The cosine of two unit-length (or zero) vectors (1 for two zero vectors: the same output).
fn cosine_of(a: &[f64], b: &[f64]) -> f64 {
    let (aa, bb) = (dot(a, a), dot(b, b));
    if aa == 0.0 && bb == 0.0 { 1.0 } else { dot(a, b).clamp(-1.0, 1.0) }
}

/// The last `n` texts of `dataset` (the last `n` questions of a SQuAD file with their paragraphs), one per batch,
/// embedded as `task` says, and FP32's embeddings of them, run on `session`.
pub(crate) fn held_out(
    task: &EmbedTask,
    (fp32, fp32_path): (&Model, &Path),
    dataset: &Path,
    n: usize,
    session: SessionConfig,
    cfg: &DataConfig,
) -> Result<HeldOut> {
    let texts = EmbedData::held_out_texts(dataset, n)?;
    let set = InputSet::from_texts(dataset, &texts, &TextInputs::for_model(fp32, fp32_path, cfg))?;
    let batches = (0..set.len()).map(|i| HeldBatch::new(set.batch_of(&[i], 0), 1, 1, set.mask())).collect();
    let runs = Runs::new(session, Box::new(EmbeddingReader(task.head.clone())), vec![], batches);
    let held = HeldOut::with_fp32(runs, fp32, set.len(), "texts")?;
    let what = if dataset.extension().is_some_and(|x| x.eq_ignore_ascii_case("json")) {
        format!("the last {n} questions of {} and their paragraphs ({} texts)", dataset.display(), set.len())
    } else {
        format!("the last {} texts of {}", set.len(), dataset.display())
    };
    Ok(held.described(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts() -> Vec<Vec<f32>> {
        vec![vec![1.0, 0.2, 0.0], vec![0.3, 1.0, 0.1], vec![0.0, 0.4, 1.0], vec![0.5, 0.5, 0.5], vec![0.9, 0.0, 0.4]]
    }

    fn agreement(a: &[Vec<f32>], b: &[Vec<f32>]) -> EmbeddingAgreement {
        let pairs: Vec<_> = a.iter().zip(b).map(|(x, y)| (unit(x), unit(y))).collect();
        embedding_agreement(&pairs)
    }

    #[test]
    fn a_rotation_moves_every_embedding_and_reorders_no_neighbour() {
        let a = texts();
        // A rotation about the third axis: every text's cosine to its FP32 self drops, no cosine between texts moves.
        let (c, s) = (0.2f32.cos(), 0.2f32.sin());
        let b: Vec<Vec<f32>> = a.iter().map(|v| vec![c * v[0] - s * v[1], s * v[0] + c * v[1], v[2]]).collect();
        let r = agreement(&a, &b);
        assert!(r.mean_cosine < 0.99, "{r:?}");
        assert!(r.similarity_distortion < 1e-6, "{r:?}");
        let same = agreement(&a, &a);
        assert!((same.mean_cosine - 1.0).abs() < 1e-12 && same.similarity_distortion < 1e-12, "{same:?}");
    }

    #[test]
    fn noise_that_reorders_neighbours_is_measured_against_the_spread() {
        let a = texts();
        let mut b = a.clone();
        b[0][1] += 0.3;
        b[2][0] -= 0.2;
        let small = agreement(&a, &b);
        b[0][1] += 0.3;
        let large = agreement(&a, &b);
        assert!(small.similarity_distortion > 0.01, "{small:?}");
        assert!(large.similarity_distortion > small.similarity_distortion, "{small:?} {large:?}");
        assert!(large.min_cosine < small.min_cosine && large.min_cosine <= large.mean_cosine);
        // Fewer than three texts: no neighbours to order.
        assert_eq!(agreement(&a[..2], &b[..2]).similarity_distortion, 0.0);
    }

    #[test]
    fn the_distortion_reads_the_first_thousand_texts_and_the_cosine_all() {
        let fp32: Vec<Vec<f32>> =
            (0..DISTORTION_TEXTS + 2).map(|i| vec![1.0, (i % 7) as f32 * 0.1, (i % 11) as f32 * 0.1]).collect();
        let mut other = fp32.clone();
        other[3][1] += 0.2;
        let first = agreement(&fp32[..DISTORTION_TEXTS], &other[..DISTORTION_TEXTS]);
        // The texts after the first thousand moved far: the cosine sees them, the distortion does not.
        for v in &mut other[DISTORTION_TEXTS..] {
            v[0] = -v[0];
        }
        let all = agreement(&fp32, &other);
        assert_eq!(all.similarity_distortion, first.similarity_distortion);
        assert!(all.min_cosine < 0.0 && all.mean_cosine < first.mean_cosine, "{all:?} {first:?}");
    }
}

/// How two models' sentence embeddings of the same texts agree.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct EmbeddingAgreement {
    /// Mean cosine between the two models' embeddings of a text.
    pub mean_cosine: f64,
    /// The lowest of those cosines.
    pub min_cosine: f64,
    /// How much the model moves the similarities that order each text's neighbours, relative to how far apart those
    /// similarities are: for every held-out text, the change of its cosine to each other text, less that change's
    /// mean over the others (a shift common to them all reorders nothing), root-mean-square, over the spread
    /// (standard deviation) of FP32's cosines; the mean over texts. 0: every text ranks the others as FP32 does by
    /// the same margins. Retrieval loses what reorders neighbours, which a mean cosine does not tell apart from error
    /// in directions no ranking reads. Over the first 1,000 texts (the pairs grow with their square).
    pub similarity_distortion: f64,
}

impl HeldAgreement for EmbeddingAgreement {
    fn loss(&self) -> f64 {
        1.0 - self.mean_cosine
    }

    fn loss_name(&self) -> &'static str {
        "1 - cos"
    }

    /// A cosine distance (often 1e-5) in scientific notation.
    fn loss_text(&self) -> String {
        format!("{:.3e}", self.loss())
    }

    fn explained(&self) -> &'static str {
        "1 - cos: mean cosine distance to FP32's embedding"
    }

    fn measured(&self) -> &'static str {
        "embeddings"
    }

    fn key(&self) -> &'static str {
        "embeddings"
    }

    fn second(&self) -> (&'static str, String) {
        ("min cos", format!("{:.5}", self.min_cosine))
    }

    fn describe(&self) -> String {
        format!(
            "cosine mean {:.5} (distance {:.2e}), min {:.5}, similarity distortion {:.4}",
            self.mean_cosine,
            1.0 - self.mean_cosine,
            self.min_cosine,
            self.similarity_distortion
        )
    }
}
