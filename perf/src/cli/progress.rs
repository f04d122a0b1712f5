//! The progress bar on stderr, drawn only when stderr is a terminal (indicatif); rows printed to
//! the same terminal go around it.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar, or nothing when disabled.
#[derive(Debug)]
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `total` steps (`unit`: what a step is) on stderr if `enabled`.
    pub(crate) fn new(enabled: bool, total: u64, unit: &str) -> Self {
        let bar = if enabled {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let template = format!(
                "{{spinner}} [{{elapsed_precise}}] {{wide_bar}} {{human_pos}}/{{human_len}} {unit} ({{per_sec}}, {{eta}} left) {{msg}}"
            );
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style);
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        Self { bar }
    }

    /// Say what is being done now.
    pub(crate) fn message(&self, message: String) {
        self.bar.set_message(message);
    }

    /// Advance by `steps`.
    pub(crate) fn advance(&self, steps: u64) {
        self.bar.inc(steps);
    }

    /// Run `print` with the bar out of the way.
    pub(crate) fn around<T>(&self, print: impl FnOnce() -> T) -> T {
        self.bar.suspend(print)
    }

    /// Remove the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
