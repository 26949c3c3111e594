//! What users of embeddings care about, measured on FP32's and a quantized model's embeddings of the same texts: how
//! close each embedding stays (cosine), whether the nearest neighbours stay the same, and on labelled data the
//! retrieval scores (MRR@10, nDCG@10, Recall@k, as MTEB and BEIR compute them), each difference as a paired 95 %
//! interval over the queries.

use ndarray::{Array2, ArrayView2, Axis, s};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use squad_metrics::{PairedDifference, paired_difference};

use crate::inputs::pooling::normalise;
use crate::tasks::embed::data::Retrieval;

/// Neighbours compared per text (the top-k of each ranking).
pub const TOP_K: usize = 10;
/// Texts of a plain-text file whose neighbours among each other are compared (the first ones): n² scores.
pub const NEIGHBOUR_TEXTS: usize = 10_000;
/// Worst texts listed.
const WORST: usize = 5;

/// Rows of `v` as unit vectors, in one matrix.
pub fn unit_rows(v: &[Vec<f32>]) -> Array2<f32> {
    let dim = v.first().map_or(0, Vec::len);
    let mut m = Array2::zeros((v.len(), dim));
    for (mut row, x) in m.rows_mut().into_iter().zip(v) {
        let mut x = x.clone();
        normalise(&mut x);
        row.iter_mut().zip(&x).for_each(|(r, v)| *r = *v);
    }
    m
}

/// How close the quantized model's embeddings stay to FP32's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fidelity {
    /// Texts compared.
    pub texts: usize,
    /// Cosine between the two embeddings of each text: mean, 1st percentile, smallest.
    pub mean_cosine: f64,
    pub p1_cosine: f64,
    pub min_cosine: f64,
    /// The texts of the smallest cosines, smallest first.
    pub worst: Vec<WorstText>,
    /// The same cosines per kind of text (queries, documents) and per length in tokens (issue 76: where the distance
    /// is).
    #[serde(default)]
    pub groups: Vec<CosineGroup>,
    pub neighbours: Neighbours,
}

/// The cosines of one group of texts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CosineGroup {
    /// `queries`, `documents`, or a length: `1-32 tokens`, `33-128 tokens`, ...
    pub name: String,
    pub texts: usize,
    pub mean_cosine: f64,
    pub p1_cosine: f64,
    pub min_cosine: f64,
}

/// Token lengths the groups of [`Fidelity::groups`] split texts at (the upper end of each, the last open).
const LENGTHS: [usize; 3] = [32, 128, 256];

/// Named groups of text indices for [`fidelity`]: the queries and documents when the first `queries` texts are
/// queries, and the texts of each length range of [`LENGTHS`] (`lens`: each text's tokens); empty groups left out.
pub fn text_groups(queries: Option<usize>, lens: &[usize]) -> Vec<(String, Vec<usize>)> {
    let n = lens.len();
    let mut groups = Vec::new();
    if let Some(q) = queries.filter(|&q| q > 0 && q < n) {
        groups.push(("queries".to_owned(), (0..q).collect()));
        groups.push(("documents".to_owned(), (q..n).collect()));
    }
    let mut low = 1;
    for high in LENGTHS.iter().copied().map(Some).chain([None]) {
        let name = match high {
            Some(h) => format!("{low}-{h} tokens"),
            None => format!("{low}+ tokens"),
        };
        let picked: Vec<usize> = (0..n).filter(|&i| lens[i] >= low && high.is_none_or(|h| lens[i] <= h)).collect();
        if !picked.is_empty() {
            groups.push((name, picked));
        }
        low = high.map_or(low, |h| h + 1);
    }
    groups
}

/// Mean, 1st percentile and smallest of `cos` at `picked` (all of them for `None`).
fn summary(cos: &[f64], picked: Option<&[usize]>) -> (f64, f64, f64, Vec<usize>) {
    let mut order: Vec<usize> = picked.map_or_else(|| (0..cos.len()).collect(), <[usize]>::to_vec);
    order.sort_by(|&i, &j| cos[i].total_cmp(&cos[j]));
    let at = |q: f64| order.get(((order.len().saturating_sub(1)) as f64 * q).floor() as usize).map_or(1.0, |&i| cos[i]);
    let mean = order.iter().map(|&i| cos[i]).sum::<f64>() / order.len().max(1) as f64;
    (mean, at(0.01), at(0.0), order)
}

/// One text whose embedding moved most.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorstText {
    /// Its place among the evaluated texts.
    pub index: usize,
    pub cosine: f64,
    /// Its first 80 characters.
    pub text: String,
}

/// Whether the nearest neighbours stay the same: each query's top documents (retrieval), or each text's nearest
/// other texts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Neighbours {
    /// What was ranked: `documents` (each query's, among the corpus) or `texts` (each text's, among the others).
    pub among: String,
    /// Rankings compared.
    pub compared: usize,
    /// Share of them whose first neighbour is the same (0-1).
    pub top1_same: f64,
    /// Mean share of the top [`TOP_K`] both share (0-1).
    pub top10_overlap: f64,
}

/// The cosine of each text's two embeddings (unit rows of `a` and `b`).
pub fn cosines(a: ArrayView2<f32>, b: ArrayView2<f32>) -> Vec<f64> {
    a.outer_iter()
        .zip(b.outer_iter())
        .map(|(x, y)| x.iter().zip(y.iter()).map(|(p, q)| f64::from(*p) * f64::from(*q)).sum::<f64>().clamp(-1.0, 1.0))
        .collect()
}

/// The fidelity of `int8` to `fp32` (unit rows) over `texts`, with the neighbour agreement `neighbours`, and per group
/// of `groups` ([`text_groups`]).
pub fn fidelity(
    fp32: ArrayView2<f32>,
    int8: ArrayView2<f32>,
    texts: &[String],
    groups: &[(String, Vec<usize>)],
    neighbours: Neighbours,
) -> Fidelity {
    let cos = cosines(fp32, int8);
    let (mean_cosine, p1_cosine, min_cosine, order) = summary(&cos, None);
    let groups = groups
        .iter()
        .map(|(name, picked)| {
            let (mean_cosine, p1_cosine, min_cosine, _) = summary(&cos, Some(picked));
            CosineGroup { name: name.clone(), texts: picked.len(), mean_cosine, p1_cosine, min_cosine }
        })
        .collect();
    Fidelity {
        texts: cos.len(),
        mean_cosine,
        p1_cosine,
        min_cosine,
        groups,
        worst: order
            .iter()
            .take(WORST)
            .map(|&i| WorstText { index: i, cosine: cos[i], text: texts[i].chars().take(80).collect() })
            .collect(),
        neighbours,
    }
}

/// The indices of the `k` largest of `scores` (ties: the lower index first), largest first; `skip` left out.
fn top_k(scores: &[f32], k: usize, skip: Option<usize>) -> Vec<usize> {
    let mut top: Vec<usize> = Vec::with_capacity(k + 1);
    for (i, &s) in scores.iter().enumerate() {
        if Some(i) == skip || (top.len() == k && s <= scores[top[k - 1]]) {
            continue;
        }
        let at = top.partition_point(|&j| scores[j] >= s);
        top.insert(at, i);
        top.truncate(k);
    }
    top
}

/// Each row of `queries`' top `k` rows of `docs` by dot product (unit rows: cosine), `skip_self` leaving out row `i`
/// of `docs` for query `i` (the texts ranked among each other).
pub fn rankings(queries: ArrayView2<f32>, docs: ArrayView2<f32>, k: usize, skip_self: bool) -> Vec<Vec<usize>> {
    const CHUNK: usize = 256;
    let starts: Vec<usize> = (0..queries.nrows()).step_by(CHUNK).collect();
    let dt = docs.t();
    let chunks: Vec<Vec<Vec<usize>>> = starts
        .par_iter()
        .map(|&start| {
            let end = (start + CHUNK).min(queries.nrows());
            let scores = queries.slice(s![start..end, ..]).dot(&dt);
            scores
                .axis_iter(Axis(0))
                .enumerate()
                .map(|(r, row)| {
                    let row: Vec<f32> = row.to_vec();
                    top_k(&row, k, skip_self.then_some(start + r))
                })
                .collect()
        })
        .collect();
    chunks.into_iter().flatten().collect()
}

/// How far two rankings of the same queries agree.
pub fn neighbour_agreement(a: &[Vec<usize>], b: &[Vec<usize>], among: &str) -> Neighbours {
    let n = a.len().min(b.len());
    let (mut same, mut overlap) = (0usize, 0f64);
    for (x, y) in a.iter().zip(b) {
        same += usize::from(!x.is_empty() && x.first() == y.first());
        let k = x.len().max(1);
        overlap += x.iter().filter(|d| y.contains(d)).count() as f64 / k as f64;
    }
    let n_f = n.max(1) as f64;
    Neighbours { among: among.to_owned(), compared: n, top1_same: same as f64 / n_f, top10_overlap: overlap / n_f }
}

/// Retrieval scores of one model, in % (MTEB's and BEIR's cut-offs).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct RetrievalScores {
    pub mrr_at_10: f64,
    pub ndcg_at_10: f64,
    pub recall_at_1: f64,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
}

/// Per query, each measure (0-1), from its top-10 documents and its relevant ones.
#[derive(Debug, Clone, Default)]
pub struct PerQuery {
    pub mrr10: Vec<f64>,
    pub ndcg10: Vec<f64>,
    pub recall: [Vec<f64>; 3],
}

/// The recall cut-offs of [`PerQuery::recall`].
const RECALL_AT: [usize; 3] = [1, 5, 10];

impl PerQuery {
    /// The measures of each query's ranking `top` (top [`TOP_K`] documents) against `retrieval`'s relevant ones.
    pub fn of(top: &[Vec<usize>], retrieval: &Retrieval) -> PerQuery {
        let mut m = PerQuery::default();
        for (ranked, relevant) in top.iter().zip(&retrieval.relevant) {
            let grade = |d: usize| relevant.iter().find(|(r, _)| *r == d).map_or(0.0, |(_, g)| *g);
            let first = ranked.iter().position(|&d| grade(d) > 0.0);
            m.mrr10.push(first.map_or(0.0, |p| 1.0 / (p + 1) as f64));
            let dcg: f64 = ranked.iter().enumerate().map(|(i, &d)| grade(d) / ((i + 2) as f64).log2()).sum();
            let mut ideal: Vec<f64> = relevant.iter().map(|(_, g)| *g).collect();
            ideal.sort_by(|a, b| b.total_cmp(a));
            let idcg: f64 = ideal.iter().take(TOP_K).enumerate().map(|(i, g)| g / ((i + 2) as f64).log2()).sum();
            m.ndcg10.push(if idcg > 0.0 { dcg / idcg } else { 0.0 });
            for (r, k) in m.recall.iter_mut().zip(RECALL_AT) {
                let hit = ranked.iter().take(k).filter(|&&d| grade(d) > 0.0).count();
                r.push(hit as f64 / relevant.len().max(1) as f64);
            }
        }
        m
    }

    /// The means, in %.
    pub fn scores(&self) -> RetrievalScores {
        let mean = |v: &[f64]| 100.0 * v.iter().sum::<f64>() / v.len().max(1) as f64;
        RetrievalScores {
            mrr_at_10: mean(&self.mrr10),
            ndcg_at_10: mean(&self.ndcg10),
            recall_at_1: mean(&self.recall[0]),
            recall_at_5: mean(&self.recall[1]),
            recall_at_10: mean(&self.recall[2]),
        }
    }
}

/// One model's retrieval against another's on the same queries: each measure's paired difference (points), and the
/// share of the other's nDCG@10 and MRR@10 kept.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct RetrievalDifference {
    pub mrr_at_10: PairedDifference,
    pub ndcg_at_10: PairedDifference,
    pub recall_at_1: PairedDifference,
    pub recall_at_5: PairedDifference,
    pub recall_at_10: PairedDifference,
    /// `ours / theirs` of nDCG@10 and MRR@10 (1 = all kept).
    pub ndcg_at_10_retained: f64,
    pub mrr_at_10_retained: f64,
}

impl RetrievalDifference {
    /// `ours` against `theirs`, query by query.
    pub fn of(ours: &PerQuery, theirs: &PerQuery) -> RetrievalDifference {
        let (a, b) = (ours.scores(), theirs.scores());
        let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { 1.0 };
        RetrievalDifference {
            mrr_at_10: paired_difference(&ours.mrr10, &theirs.mrr10),
            ndcg_at_10: paired_difference(&ours.ndcg10, &theirs.ndcg10),
            recall_at_1: paired_difference(&ours.recall[0], &theirs.recall[0]),
            recall_at_5: paired_difference(&ours.recall[1], &theirs.recall[1]),
            recall_at_10: paired_difference(&ours.recall[2], &theirs.recall[2]),
            ndcg_at_10_retained: ratio(a.ndcg_at_10, b.ndcg_at_10),
            mrr_at_10_retained: ratio(a.mrr_at_10, b.mrr_at_10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn top_k_keeps_the_largest_in_order_ties_to_the_lower_index() {
        let scores = [0.1, 0.9, 0.5, 0.9, -1.0, 0.7];
        assert_eq!(top_k(&scores, 3, None), [1, 3, 5]);
        assert_eq!(top_k(&scores, 3, Some(1)), [3, 5, 2]);
        assert_eq!(top_k(&scores, 10, None), [1, 3, 5, 2, 0, 4]);
    }

    #[test]
    fn retrieval_measures_follow_their_definitions() {
        // Query 0 finds its one document first; query 1 third; query 2 not in the top 10; query 3 has two graded
        // documents, found second (grade 2) and fifth (grade 1).
        let relevant = vec![vec![(7, 1.0)], vec![(4, 1.0)], vec![(99, 1.0)], vec![(1, 2.0), (2, 1.0)]];
        let r = Retrieval { queries: 4, relevant, corpus: None };
        let ranked = vec![vec![7, 0, 1], vec![0, 1, 4, 5], (10..20).collect(), vec![9, 1, 8, 7, 2]];
        let m = PerQuery::of(&ranked, &r);
        assert_eq!(m.mrr10, [1.0, 1.0 / 3.0, 0.0, 0.5]);
        assert_eq!(m.recall[0], [1.0, 0.0, 0.0, 0.0]);
        assert_eq!(m.recall[1], [1.0, 1.0, 0.0, 1.0]);
        let ideal = 2.0 + 1.0 / 3f64.log2();
        let dcg = 2.0 / 3f64.log2() + 1.0 / 6f64.log2();
        assert!((m.ndcg10[1] - 0.5).abs() < 1e-12 && (m.ndcg10[3] - dcg / ideal).abs() < 1e-12, "{:?}", m.ndcg10);
        let s = m.scores();
        assert!((s.mrr_at_10 - 100.0 * (1.0 + 1.0 / 3.0 + 0.5) / 4.0).abs() < 1e-9, "{s:?}");
        // Against itself: no difference, everything kept.
        let d = RetrievalDifference::of(&m, &m);
        assert_eq!((d.ndcg_at_10.delta, d.ndcg_at_10_retained), (0.0, 1.0));
    }

    #[test]
    fn rankings_and_agreement_between_two_sets_of_embeddings() {
        let docs = unit_rows(&[vec![1.0, 0.0], vec![0.0, 1.0], vec![1.0, 1.0]]);
        let queries = unit_rows(&[vec![1.0, 0.1], vec![0.1, 1.0]]);
        let a = rankings(queries.view(), docs.view(), 2, false);
        assert_eq!(a, [vec![0, 2], vec![1, 2]]);
        let moved = unit_rows(&[vec![1.0, 0.9], vec![0.1, 1.0]]);
        let b = rankings(moved.view(), docs.view(), 2, false);
        assert_eq!(b, [vec![2, 0], vec![1, 2]]);
        let n = neighbour_agreement(&a, &b, "documents");
        assert_eq!((n.compared, n.top1_same, n.top10_overlap), (2, 0.5, 1.0));
        // Among each other, a text is not its own neighbour.
        assert_eq!(rankings(docs.view(), docs.view(), 1, true), [vec![2], vec![2], vec![0]]);
    }

    #[test]
    fn fidelity_reports_the_smallest_cosines_and_their_texts() {
        let fp32 = unit_rows(&[vec![1.0, 0.0], vec![0.0, 1.0], vec![1.0, 1.0]]);
        let int8 = unit_rows(&[vec![1.0, 0.0], vec![0.1, 1.0], vec![1.0, -1.0]]);
        let texts: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let n = Neighbours { among: "texts".into(), compared: 3, top1_same: 1.0, top10_overlap: 1.0 };
        let groups = text_groups(Some(1), &[4, 40, 300]);
        let names: Vec<&str> = groups.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(names, ["queries", "documents", "1-32 tokens", "33-128 tokens", "257+ tokens"]);
        let f = fidelity(fp32.view(), int8.view(), &texts, &groups, n);
        // Per group: the query alone is exact; the documents hold b and c.
        assert_eq!((f.groups[0].texts, f.groups[0].mean_cosine, f.groups[0].min_cosine), (1, 1.0, 1.0));
        assert_eq!((f.groups[1].texts, f.groups[1].min_cosine), (2, f.min_cosine));
        assert_eq!(f.groups[4].texts, 1);
        assert!(text_groups(None, &[]).is_empty());
        assert_eq!(f.texts, 3);
        assert!(f.min_cosine.abs() < 1e-6 && f.p1_cosine == f.min_cosine, "{f:?}");
        assert_eq!(f.worst.iter().map(|w| w.text.as_str()).collect::<Vec<_>>(), ["c", "b", "a"]);
        let cos_b = 1.0 / 1.01f64.sqrt();
        assert!((f.mean_cosine - (1.0 + cos_b) / 3.0).abs() < 1e-6, "{f:?}");
        assert_eq!(cosines(array![[1.0f32, 0.0]].view(), array![[-1.0f32, 0.0]].view()), [-1.0]);
    }
}
