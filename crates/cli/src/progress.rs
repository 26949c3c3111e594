//! indicatif progress bars for the pipeline's long stages; hidden when stderr is not a terminal.

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Bars {
    bar: Mutex<Option<ProgressBar>>,
    visible: bool,
}

impl Bars {
    pub fn new() -> Bars {
        Bars { bar: Mutex::new(None), visible: std::io::stderr().is_terminal() }
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
        if !self.visible {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        if let Ok(mut guard) = self.bar.lock() {
            *guard = Some(bar);
        }
        if !self.visible {
            tracing::info!("{stage}...");
        }
    }

    fn advance(&self, n: u64) {
        self.with_bar(|b| b.inc(n));
    }

    fn finish(&self) {
        if let Ok(mut guard) = self.bar.lock()
            && let Some(b) = guard.take()
        {
            b.finish_and_clear();
        }
    }

    fn note(&self, message: &str) {
        let mut printed = false;
        self.with_bar(|b| {
            b.suspend(|| eprintln!("qdq: {message}"));
            printed = true;
        });
        if !printed {
            eprintln!("qdq: {message}");
        }
    }
}
