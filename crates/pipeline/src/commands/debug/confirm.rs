//! `qdq debug --confirm`: the sensitivity's KL beside the score it stands for (SQuAD's F1), in the task's scoring
//! (`tasks::score`).

use std::collections::HashSet;
use std::path::Path;

use onnx_ir::Model;

use crate::disk::parent_dir;
use crate::error::{Error, Result};
use crate::held_out::pairs::NodeSensitivity;
use crate::model::save_model;
use crate::progress::Progress;
use crate::report::debug::Confirmation;
use crate::settings::data::DataSettings;
use crate::settings::runtime::RuntimeSettings;
use crate::tasks::score::{Questions, ScoringRequest, UnitScores};
use crate::tasks::{Side, Task};

/// What `--confirm` scores: the first `samples` units of `dataset` in the model's task's score, the first `nodes` nodes of the
/// sensitivity.
pub(super) struct ConfirmOn<'a> {
    /// The model's task, when already told (else confirm tells it).
    pub task: Option<&'a Task>,
    pub dataset: &'a Path,
    pub samples: usize,
    pub nodes: usize,
    pub runtime: &'a RuntimeSettings,
    pub data: &'a DataSettings,
}

/// The task's score (SQuAD's F1) on the first `on.samples` units of FP32, `int8` and `int8` with each of the first
/// `on.nodes` nodes of `sensitivity` in float (filled in as their `f1_recovered`).
pub(super) fn confirm(
    on: &ConfirmOn<'_>,
    fp32_path: &Path,
    int8: &Model,
    sensitivity: &mut [NodeSensitivity],
    progress: &dyn Progress,
) -> Result<Confirmation> {
    let data = on.data.config(fp32_path)?;
    let graph = Model::load_graph_only(fp32_path)?;
    let fp32_session = on.runtime.fp32_session(Some(parent_dir(fp32_path)), "confirm");
    let req = ScoringRequest {
        fp32: fp32_path,
        graph: &graph,
        data: &data,
        dataset: on.dataset,
        samples: on.samples,
        session: fp32_session.clone(),
        warmup: 0,
        version_2: on.data.version_2(),
        // No screen: every unit.
        screen: 1.0,
    };
    let detected;
    let task = match on.task {
        Some(t) => t,
        None => {
            detected = Task::detect(&graph, fp32_path, &data)?;
            &detected
        }
    };
    let mut scoring = task.scoring(&req, progress)?;
    drop(graph);
    let int8_session = on.runtime.evaluation_session(&fp32_session);
    // Each model scored is written here first (ONNX Runtime reads a model over 2 GiB from its file).
    let scratch = Scratch::new()?;
    let mut score = |model: &Model| -> Result<UnitScores> {
        let path = scratch.save(model)?;
        scoring.score(Side { path: &path, session: &int8_session }, Questions::All, progress)
    };
    let qdq = score(int8)?;
    let n = on.nodes.min(sensitivity.len());
    for s in sensitivity.iter_mut().take(n) {
        let e = score(&qdq::with_float_inputs(int8, &HashSet::from([s.node.as_str()])))?;
        recovered(s, &e, &qdq, progress);
    }
    let confirmed = &sensitivity[..n];
    let kl: Vec<f64> = confirmed.iter().map(|s| s.recovered).collect();
    let f1: Vec<f64> = confirmed.iter().filter_map(|s| s.f1_recovered).collect();
    let outside_noise = confirmed.iter().filter(|s| s.f1_difference.is_some_and(|d| d.excludes(0.0))).count();
    let fp32 = scoring.fp32();
    Ok(Confirmation {
        questions: fp32.scored,
        fp32_f1: fp32.points,
        qdq_f1: qdq.points,
        rank_correlation: spearman(&kl, &f1),
        outside_noise,
    })
}

/// `s`'s node in float (scores `e`) against the QDQ model (`qdq`): the score it recovers, with its paired
/// interval, said and kept in `s`.
fn recovered(s: &mut NodeSensitivity, e: &UnitScores, qdq: &UnitScores, progress: &dyn Progress) {
    let difference = squad_metrics::paired_difference(&e.per_unit, &qdq.per_unit);
    progress.note(&format!(
        "{} in float: F1 {:.2} ({} against the QDQ model's {:.2}, 95 % interval)",
        s.node,
        e.points,
        difference.describe(),
        qdq.points
    ));
    s.f1_recovered = Some(e.points - qdq.points);
    s.f1_two_se = Some(2.0 * difference.se);
    s.f1_difference = Some(difference);
}

/// A temporary directory the models `--confirm` scores are written to in turn, removed when dropped and on Ctrl-C /
/// SIGTERM.
struct Scratch {
    dir: tempfile::TempDir,
    _removed: Vec<files::signals::Registered>,
}

impl Scratch {
    fn new() -> Result<Scratch> {
        let dir = tempfile::Builder::new().prefix("qdq-confirm-").tempdir().map_err(|e| Error::Output {
            path: std::env::temp_dir(),
            reason: format!("--confirm: a temporary directory: {e}"),
        })?;
        let files = [dir.path().to_path_buf(), dir.path().join("model.onnx"), dir.path().join("model.onnx.data")];
        let _removed = files.iter().map(|p| files::signals::remove_on_signal(p)).collect();
        Ok(Scratch { dir, _removed })
    }

    /// `model` written as the scratch model (over the last one).
    fn save(&self, model: &Model) -> Result<std::path::PathBuf> {
        let path = self.dir.path().join("model.onnx");
        save_model(model, &path)?;
        Ok(path)
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
