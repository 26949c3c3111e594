//! The screen of `qdq tune --screen`: the evaluation questions split into those whose FP32 answers are nearest to
//! flipping, which every candidate is scored on first, and the rest.

use std::collections::{HashMap, HashSet};

/// The evaluation questions split for screening: `fragile`, the share whose FP32 answers have the smallest margins
/// (questions FP32 did not answer first; ties in file order), and `rest`.
#[derive(Debug)]
pub struct ScreenSplit {
    pub fragile: HashSet<String>,
    pub rest: HashSet<String>,
}

impl ScreenSplit {
    /// The split of `gold`'s questions by FP32's `margins` ([`squad::Prediction::margin`]); `None` when the share
    /// covers every question.
    pub fn new(gold: &squad_metrics::Dataset, margins: &HashMap<String, f32>, share: f64) -> Option<ScreenSplit> {
        let mut ids: Vec<(&str, f32)> = gold
            .questions()
            .map(|q| (q.id.as_str(), margins.get(&q.id).copied().unwrap_or(f32::NEG_INFINITY)))
            .collect();
        let n = (share * ids.len() as f64).ceil() as usize;
        if n >= ids.len() {
            return None;
        }
        ids.sort_by(|a, b| a.1.total_cmp(&b.1));
        let fragile: HashSet<String> = ids[..n].iter().map(|(id, _)| id.to_string()).collect();
        // An id that occurs twice is screened wherever its first copy falls.
        let rest = ids[n..].iter().filter(|(id, _)| !fragile.contains(*id)).map(|(id, _)| id.to_string()).collect();
        Some(ScreenSplit { fragile, rest })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten questions with margins 9, 8, ..., 0 (question "q9" nearest to flipping), "q3" unanswered.
    fn margins() -> (squad_metrics::Dataset, HashMap<String, f32>) {
        let qas: Vec<String> = (0..10)
            .map(|i| format!(r#"{{"id": "q{i}", "question": "?", "answers": [{{"text": "a", "answer_start": 0}}]}}"#))
            .collect();
        let json = format!(
            r#"{{"version": "1.1", "data": [{{"title": "t", "paragraphs": [{{"context": "a", "qas": [{}]}}]}}]}}"#,
            qas.join(",")
        );
        let gold: squad_metrics::Dataset = serde_json::from_str(&json).unwrap();
        let margins = (0..10).filter(|&i| i != 3).map(|i| (format!("q{i}"), (9 - i) as f32)).collect();
        (gold, margins)
    }

    #[test]
    fn the_screen_takes_the_answers_nearest_to_flipping() {
        let (gold, margins) = margins();
        let s = ScreenSplit::new(&gold, &margins, 0.3).unwrap();
        // ceil(0.3 * 10) = 3: the unanswered question first, then the two smallest margins.
        fn ids(set: &HashSet<String>) -> Vec<&str> {
            let mut v: Vec<&str> = set.iter().map(String::as_str).collect();
            v.sort();
            v
        }
        assert_eq!(ids(&s.fragile), ["q3", "q8", "q9"]);
        assert_eq!(s.rest.len(), 7);
        assert!(s.rest.is_disjoint(&s.fragile));
        assert_eq!(ScreenSplit::new(&gold, &margins, 0.01).unwrap().fragile.len(), 1);
        // A share that covers every question is no screen.
        assert!(ScreenSplit::new(&gold, &margins, 1.0).is_none());
        assert!(ScreenSplit::new(&gold, &margins, 0.95).is_none());
    }
}
