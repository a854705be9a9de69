//! Fetches (or finds) a model and prints where it is.
//! `cargo run --release -p sotto-hub --example fetch -- tiny.en [cache-dir]`

use std::io::Write;

use sotto_hub::{Hub, Progress};

/// Prints notes and a percentage per download on stderr.
struct Stderr {
    total: Option<u64>,
    done: u64,
    shown: u64,
}

impl Progress for Stderr {
    fn start(&mut self, what: &str, total: Option<u64>) {
        (self.total, self.done, self.shown) = (total, 0, 0);
        eprintln!(
            "downloading {what} ({} bytes)",
            total.map_or("?".into(), |t| t.to_string())
        );
    }
    fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        if let Some(total) = self.total.filter(|&t| t > 0) {
            let pct = self.done * 100 / total;
            if pct >= self.shown + 10 {
                self.shown = pct;
                eprint!(" {pct}%");
                let _ = std::io::stderr().flush();
            }
        }
    }
    fn finish(&mut self) {
        eprintln!();
    }
    fn note(&mut self, msg: &str) {
        eprintln!("{msg}");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "tiny.en".to_string());
    let mut hub = Hub::from_env();
    if let Some(dir) = args.next() {
        hub = hub.with_cache_dir(dir.into());
    }
    let started = std::time::Instant::now();
    let mut progress = Stderr {
        total: None,
        done: 0,
        shown: 0,
    };
    match hub.resolve(&name, &mut progress) {
        Ok(path) => println!("{} ({:.1?})", path.display(), started.elapsed()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
