//! Progress bars on stderr, drawn only when stderr is a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Download progress for the model hub.
pub struct Download {
    bar: Option<ProgressBar>,
}

impl Download {
    pub fn new() -> Self {
        Download { bar: None }
    }
}

impl sotto::hub::Progress for Download {
    fn start(&mut self, what: &str, total_bytes: Option<u64>) {
        let bar = match total_bytes {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        self.bar = Some(bar);
    }

    fn advance(&mut self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn note(&mut self, msg: &str) {
        match &self.bar {
            Some(bar) => bar.println(msg),
            None => eprintln!("{msg}"),
        }
    }
}

/// Transcription progress in seconds of audio.
pub fn audio_bar(duration_s: f64, label: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some((duration_s * 100.0) as u64),
        ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {percent}% eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    bar
}
