//! Progress reporting, so long stages can drive a progress bar without the pipeline knowing about terminals.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Receives progress of long stages. The CLI implements it with indicatif on a terminal and [`LogProgress`]
/// elsewhere; tests use [`NoProgress`].
pub trait Progress: Sync {
    /// A stage starts; `total` is the number of `unit`s (e.g. "questions") when known.
    fn start(&self, stage: &str, total: Option<u64>, unit: &str);
    /// `n` more units are done.
    fn advance(&self, n: u64);
    /// The stage is over.
    fn finish(&self);
    /// A message for the user about the run.
    fn note(&self, message: &str) {
        tracing::warn!("{message}");
    }
    /// A warning: something the user asked for is not what runs (e.g. "falling back to CPU: ...").
    fn warn(&self, message: &str) {
        tracing::warn!("{message}");
    }
}

/// Ignores progress.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: &str, _: Option<u64>, _: &str) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}

/// Progress as log lines (through `tracing`, at info level): the stage when it starts, `done/total units (pct),
/// rate, time left` at most every `every`, and the total when it ends. For pipes, CI logs and library callers.
pub struct LogProgress {
    every: Duration,
    stage: Mutex<Option<Stage>>,
}

#[derive(Clone)]
struct Stage {
    name: String,
    unit: String,
    total: Option<u64>,
    done: u64,
    started: Instant,
    logged: Instant,
}

impl Stage {
    fn line(&self) -> String {
        let rate = self.done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        match self.total {
            Some(t) if t > 0 => {
                let pct = 100.0 * self.done as f64 / t as f64;
                // Nothing done yet (one long question, a slow first batch): no rate to tell the time left from.
                let left = match self.done {
                    0 => format!("{:.0} s so far", self.started.elapsed().as_secs_f64()),
                    _ => format!("about {:.0} s left", t.saturating_sub(self.done) as f64 / rate),
                };
                format!("{}: {}/{t} {} ({pct:.0}%), {rate:.1}/s, {left}", self.name, self.done, self.unit)
            }
            _ => format!("{}: {} {}, {rate:.1}/s", self.name, self.done, self.unit),
        }
    }
}

impl LogProgress {
    /// A line at most every `every` while a stage runs.
    pub fn new(every: Duration) -> LogProgress {
        LogProgress { every, stage: Mutex::new(None) }
    }
}

impl Progress for LogProgress {
    fn start(&self, stage: &str, total: Option<u64>, unit: &str) {
        tracing::info!("{stage}...");
        let now = Instant::now();
        if let Ok(mut s) = self.stage.lock() {
            *s = Some(Stage {
                name: stage.to_owned(),
                unit: unit.to_owned(),
                total,
                done: 0,
                started: now,
                logged: now,
            });
        }
    }

    fn advance(&self, n: u64) {
        if let Ok(mut guard) = self.stage.lock()
            && let Some(s) = guard.as_mut()
        {
            s.done += n;
            if s.logged.elapsed() >= self.every {
                s.logged = Instant::now();
                tracing::info!("{}", s.line());
            }
        }
    }

    fn finish(&self) {
        if let Ok(mut guard) = self.stage.lock()
            && let Some(s) = guard.take()
        {
            tracing::info!("{}: {} {} in {:.1} s", s.name, s.done, s.unit, s.started.elapsed().as_secs_f64());
        }
    }

    fn note(&self, message: &str) {
        tracing::info!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_line_says_done_total_rate_and_time_left() {
        let started = Instant::now() - Duration::from_secs(10);
        let s = Stage {
            name: "calibrating".into(),
            unit: "questions".into(),
            total: Some(400),
            done: 100,
            started,
            logged: started,
        };
        let line = s.line();
        assert!(line.starts_with("calibrating: 100/400 questions (25%), 10.0/s, about 30 s left"), "{line}");
        let waiting = Stage { done: 0, ..s.clone() };
        assert!(
            waiting.line().starts_with("calibrating: 0/400 questions (0%), 0.0/s, 10 s so far"),
            "{}",
            waiting.line()
        );
        let open = Stage { total: None, ..s };
        assert!(open.line().starts_with("calibrating: 100 questions, 10.0/s"), "{}", open.line());
    }
}
