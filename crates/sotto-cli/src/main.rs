//! The `sotto` command line: transcribe audio, fetch and convert models.
//!
//! This crate only parses flags, draws progress and writes files; everything else is
//! the `sotto` library.

mod progress;
mod transcribe;
mod writers;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Whisper speech-to-text, fast on a laptop, a server or a GPU.
#[derive(Parser)]
#[command(name = "sotto", version, about, long_about = None)]
struct Cli {
    /// Model cache folder [env: SOTTO_CACHE_DIR; default: $XDG_CACHE_HOME/sotto or ~/.cache/sotto].
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Transcribe audio files (wav, flac, mp3, ogg; `-` reads stdin).
    Transcribe(transcribe::Args),
    /// List, fetch and locate models.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Convert a model (CTranslate2 folder or ggml .bin) to a whisper.cpp ggml .bin (f16).
    Convert {
        /// Model name or path to convert.
        input: String,
        /// Output .bin file.
        output: PathBuf,
    },
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Download a model into the cache (no-op when it is already there).
    Fetch {
        /// Model names, e.g. tiny.en, base.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// List known model names and whether each is cached.
    List,
    /// Print the local path of a model, fetching it first if needed.
    Path { name: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // One line: the chain of causes, outermost first.
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", dedup_chain(&msg));
            ExitCode::FAILURE
        }
    }
}

/// Joins an error chain, dropping causes already quoted by the message above them.
fn dedup_chain(msgs: &[String]) -> String {
    let mut out = String::new();
    for m in msgs {
        if !out.contains(m.as_str()) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(m);
        }
    }
    out
}

fn hub(cli_cache: &Option<PathBuf>) -> sotto::hub::Hub {
    let hub = sotto::hub::Hub::from_env();
    match cli_cache {
        Some(dir) => hub.with_cache_dir(dir.clone()),
        None => hub,
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let hub = hub(&cli.cache_dir);
    match cli.command {
        Command::Transcribe(args) => transcribe::run(&hub, args),
        Command::Models(ModelsCommand::Fetch { names }) => {
            for name in names {
                let path = hub.fetch(&name, &mut progress::Download::new())?;
                println!("{name}\t{}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Models(ModelsCommand::List) => {
            for name in sotto::hub::known_models() {
                match hub.cached(name) {
                    Some(p) => println!("{name}\t{}", p.display()),
                    None => println!("{name}\t(not downloaded)"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Models(ModelsCommand::Path { name }) => {
            let path = hub.resolve(&name, &mut progress::Download::new())?;
            println!("{}", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Convert { input, output } => {
            let path = hub.resolve(&input, &mut progress::Download::new())?;
            let file = sotto::formats::load(&path)?;
            let filters = sotto::audio::mel_filters(file.hparams.n_mels);
            sotto::formats::ggml::write(&file, &filters, &output)?;
            eprintln!("wrote {}", output.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
