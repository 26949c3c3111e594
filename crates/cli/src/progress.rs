//! Progress of the pipeline's long stages: indicatif bars on a terminal; in a pipe or a CI log, a plain log line
//! every few seconds (done / total, rate, time left). Notes go through the same log as everything else.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often a stage logs its progress when no bar is drawn (`QDQ_PROGRESS_SECS` overrides it).
const LINE_EVERY: Duration = Duration::from_secs(10);

fn line_every() -> Duration {
    std::env::var("QDQ_PROGRESS_SECS").ok().and_then(|s| s.parse().ok()).map_or(LINE_EVERY, Duration::from_secs_f64)
}

pub struct Bars {
    bar: Mutex<Option<ProgressBar>>,
    visible: bool,
    /// Off a terminal: the stage, its total, what is done, when it started and when it last logged.
    plain: Mutex<Option<Plain>>,
    every: Duration,
}

struct Plain {
    stage: String,
    total: Option<u64>,
    done: u64,
    started: Instant,
    logged: Instant,
}

impl Plain {
    fn line(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let rate = self.done as f64 / secs.max(1e-9);
        match self.total {
            Some(t) if t > 0 => {
                let left = (t.saturating_sub(self.done)) as f64 / rate.max(1e-9);
                let pct = 100.0 * self.done as f64 / t as f64;
                format!("{}: {}/{t} features ({pct:.0}%), {rate:.1}/s, about {left:.0} s left", self.stage, self.done)
            }
            _ => format!("{}: {} features, {rate:.1}/s", self.stage, self.done),
        }
    }
}

impl Bars {
    pub fn new() -> Bars {
        Bars {
            bar: Mutex::new(None),
            visible: std::io::stderr().is_terminal(),
            plain: Mutex::new(None),
            every: line_every(),
        }
    }

    fn with_bar(&self, f: impl FnOnce(&ProgressBar)) {
        if let Ok(guard) = self.bar.lock()
            && let Some(b) = guard.as_ref()
        {
            f(b);
        }
    }
}

impl pipeline::Progress for Bars {
    fn start(&self, stage: &str, total: Option<u64>) {
        if !self.visible {
            tracing::info!("{stage}...");
            let now = Instant::now();
            if let Ok(mut p) = self.plain.lock() {
                *p = Some(Plain { stage: stage.to_owned(), total, done: 0, started: now, logged: now });
            }
            return;
        }
        let bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(
                    "{prefix:>12.bold} [{bar:30}] {pos}/{len} features ({per_sec}, eta {eta})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner(),
        };
        bar.set_prefix(stage.to_owned());
        if let Ok(mut guard) = self.bar.lock() {
            *guard = Some(bar);
        }
    }

    fn advance(&self, n: u64) {
        if self.visible {
            self.with_bar(|b| b.inc(n));
            return;
        }
        if let Ok(mut guard) = self.plain.lock()
            && let Some(p) = guard.as_mut()
        {
            p.done += n;
            if p.logged.elapsed() >= self.every {
                p.logged = Instant::now();
                tracing::info!("{}", p.line());
            }
        }
    }

    fn finish(&self) {
        if let Ok(mut guard) = self.plain.lock()
            && let Some(p) = guard.take()
        {
            let secs = p.started.elapsed().as_secs_f64();
            tracing::info!("{}: {} features in {secs:.1} s", p.stage, p.done);
        }
        if let Ok(mut guard) = self.bar.lock()
            && let Some(b) = guard.take()
        {
            b.finish_and_clear();
        }
    }

    fn note(&self, message: &str) {
        let mut printed = false;
        self.with_bar(|b| {
            b.suspend(|| tracing::info!("{message}"));
            printed = true;
        });
        if !printed {
            tracing::info!("{message}");
        }
    }
}
