//! Progress of the pipeline's long stages: indicatif bars on a terminal; in a pipe or a CI log, pipeline's
//! [`pipeline::LogProgress`] (a plain log line every few seconds: done / total, rate, time left). Notes go through
//! the same log as everything else.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use pipeline::{LogProgress, Progress};

/// How often a stage logs its progress when no bar is drawn (`QDQ_PROGRESS_SECS` overrides it).
const LINE_EVERY: Duration = Duration::from_secs(10);

pub enum Bars {
    Terminal(Mutex<Option<ProgressBar>>),
    Log(LogProgress),
}

impl Bars {
    pub fn new() -> Bars {
        if std::io::stderr().is_terminal() {
            return Bars::Terminal(Mutex::new(None));
        }
        let every = std::env::var("QDQ_PROGRESS_SECS").ok().and_then(|s| s.parse().ok());
        Bars::Log(LogProgress::new(every.map_or(LINE_EVERY, Duration::from_secs_f64)))
    }

    /// The bar of the running stage, on a terminal.
    fn with_bar(&self, f: impl FnOnce(&ProgressBar)) -> bool {
        if let Bars::Terminal(bar) = self
            && let Ok(guard) = bar.lock()
            && let Some(b) = guard.as_ref()
        {
            f(b);
            return true;
        }
        false
    }
}

impl Progress for Bars {
    fn start(&self, stage: &str, total: Option<u64>, unit: &str) {
        let slot = match self {
            Bars::Log(log) => return log.start(stage, total, unit),
            Bars::Terminal(slot) => slot,
        };
        let bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(&format!(
                    "{{prefix:>12.bold}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})"
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner(),
        };
        bar.set_prefix(stage.to_owned());
        if let Ok(mut guard) = slot.lock() {
            *guard = Some(bar);
        }
    }

    fn advance(&self, n: u64) {
        match self {
            Bars::Log(log) => log.advance(n),
            Bars::Terminal(_) => _ = self.with_bar(|b| b.inc(n)),
        }
    }

    fn finish(&self) {
        match self {
            Bars::Log(log) => log.finish(),
            Bars::Terminal(slot) => {
                if let Some(b) = slot.lock().ok().and_then(|mut guard| guard.take()) {
                    b.finish_and_clear();
                }
            }
        }
    }

    fn note(&self, message: &str) {
        if !self.with_bar(|b| b.suspend(|| tracing::info!("{message}"))) {
            tracing::info!("{message}");
        }
    }

    fn warn(&self, message: &str) {
        if !self.with_bar(|b| b.suspend(|| tracing::warn!("{message}"))) {
            tracing::warn!("{message}");
        }
    }
}
