//! `qdq debug --confirm`: the sensitivity's KL beside the F1 it stands for.

use std::collections::HashSet;
use std::path::Path;

use onnx_ir::Model;
use runtime::{ModelSource, SessionConfig};

use crate::disk::parent_dir;
use crate::error::Result;
use crate::held_out::pairs::NodeSensitivity;
use crate::progress::Progress;
use crate::report::debug::Confirmation;
use crate::settings::data::DataSettings;
use crate::settings::runtime::RuntimeSettings;
use crate::steps::run::EvalOptions;
use crate::tasks::squad::data::Corpus;
use crate::tasks::squad::evaluate::{Evaluation, evaluate, scored_questions};

/// What `--confirm` scores: the first `samples` questions of `dataset`, the first `nodes` nodes of the sensitivity.
pub(super) struct ConfirmOn<'a> {
    pub dataset: &'a Path,
    pub samples: usize,
    pub nodes: usize,
    pub runtime: &'a RuntimeSettings,
    pub data: &'a DataSettings,
}

/// F1 on the first `on.samples` questions of FP32, `int8` and `int8` with each of the first `on.nodes` nodes of
/// `sensitivity` in float (filled in as their `f1_recovered`).
pub(super) fn confirm(
    on: &ConfirmOn<'_>,
    fp32_path: &Path,
    int8: &Model,
    sensitivity: &mut [NodeSensitivity],
    progress: &dyn Progress,
) -> Result<Confirmation> {
    let data_cfg = on.data.config(fp32_path)?;
    let tokenizer = data_cfg.tokenizer()?;
    let mut data = Corpus::load(on.dataset, &data_cfg, &tokenizer, on.samples)?;
    data.fit_model(&Model::load_graph_only(fp32_path)?, fp32_path)?;
    let fp32_session = on.runtime.fp32_session(Some(parent_dir(fp32_path)), "confirm");
    let scorer = F1 { data: &data, int8_session: on.runtime.evaluation_session(&fp32_session), progress };
    // Per-question F1 of the scored questions (the first --samples of the dataset, 0 = all).
    let (gold, v2) = scored_questions(on.dataset, on.samples, on.data.version)?;
    let per_question = |e: &Evaluation| squad_metrics::question_f1(&gold, &e.predictions, v2);
    let fp32_f1 = scorer.f1(ModelSource::File(fp32_path), "FP32", &fp32_session)?.score.f1;
    let qdq = scorer.f1(ModelSource::Bytes(&int8.to_bytes()?), "QDQ model", &scorer.int8_session)?;
    let (qdq_f1, qdq_questions) = (qdq.score.f1, per_question(&qdq));
    let n = on.nodes.min(sensitivity.len());
    for s in sensitivity.iter_mut().take(n) {
        let model = qdq::with_float_inputs(int8, &HashSet::from([s.node.as_str()]));
        let name = format!("{} in float", s.node);
        let e = scorer.f1(ModelSource::Bytes(&model.to_bytes()?), &name, &scorer.int8_session)?;
        let difference = squad_metrics::paired_difference(&per_question(&e), &qdq_questions);
        let f1 = e.score.f1;
        progress.note(&format!(
            "{name}: F1 {f1:.2} ({} against the QDQ model's {qdq_f1:.2}, 95 % interval)",
            difference.describe()
        ));
        s.f1_recovered = Some(f1 - qdq_f1);
        s.f1_two_se = Some(2.0 * difference.se);
        s.f1_difference = Some(difference);
    }
    let confirmed = &sensitivity[..n];
    let kl: Vec<f64> = confirmed.iter().map(|s| s.recovered).collect();
    let f1: Vec<f64> = confirmed.iter().filter_map(|s| s.f1_recovered).collect();
    let outside_noise = confirmed.iter().filter(|s| s.f1_difference.is_some_and(|d| d.excludes(0.0))).count();
    Ok(Confirmation {
        questions: data.questions(),
        fp32_f1,
        qdq_f1,
        rank_correlation: spearman(&kl, &f1),
        outside_noise,
    })
}

/// Scores models on the confirmation's questions, as a throughput pass.
struct F1<'a> {
    data: &'a Corpus,
    int8_session: SessionConfig,
    progress: &'a dyn Progress,
}

impl F1<'_> {
    fn f1(&self, source: ModelSource<'_>, name: &str, session: &SessionConfig) -> Result<Evaluation> {
        let opts = EvalOptions::throughput(1, session.clone());
        evaluate(source, name, self.data, &opts, &format!("confirming: {name}"), self.progress)
    }
}

/// Spearman's rank correlation of two equally long lists (ties get their mean rank); `None` under 3 values or when
/// one list is constant.
fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    fn ranks(x: &[f64]) -> Vec<f64> {
        let mut order: Vec<usize> = (0..x.len()).collect();
        order.sort_by(|&i, &j| x[i].total_cmp(&x[j]));
        let mut r = vec![0.0; x.len()];
        let mut i = 0;
        while i < order.len() {
            let mut j = i;
            while j + 1 < order.len() && x[order[j + 1]] == x[order[i]] {
                j += 1;
            }
            for &k in &order[i..=j] {
                r[k] = (i + j) as f64 / 2.0;
            }
            i = j + 1;
        }
        r
    }
    if a.len() != b.len() || a.len() < 3 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let mean = (a.len() - 1) as f64 / 2.0;
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - mean) * (y - mean)).sum();
    let var = |r: &[f64]| r.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
    let denom = (var(&ra) * var(&rb)).sqrt();
    (denom > 0.0).then(|| cov / denom)
}

#[cfg(test)]
mod tests {
    use super::spearman;

    #[test]
    fn spearman_orders_ties_and_refuses_what_it_cannot_rank() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0, 4.0], &[10.0, 20.0, 30.0, 40.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        // Ranks, not values: a monotone transform changes nothing.
        assert_eq!(spearman(&[0.1, 0.5, 0.2], &[1.0, 1e6, 2.0]), Some(1.0));
        // Hand-computed with a tie: ranks a = [0, 1, 2, 3], b = [0, 1.5, 1.5, 3].
        let r = spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 5.0, 5.0, 9.0]).unwrap();
        assert!((r - 4.5 / (5.0f64 * 4.5).sqrt()).abs() < 1e-12, "{r}");
        assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[7.0, 7.0, 7.0]), None);
    }
}
