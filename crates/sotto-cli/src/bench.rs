//! `sotto bench`: the figures that matter for speed, measured the same way everywhere.
//!
//! Mel per 30 s, encoder per 30 s window, decoder per token (one sequence, and a batch
//! of beams where the model supports it), a file's decoding to 16 kHz and its end-to-end
//! real-time factor, the process's peak RSS, and (CPU) the machine's measured peaks with
//! the encoder and a decoder step set against them. Each figure is the median of `--runs` repetitions after
//! one warm-up.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Ordinary tokens of previous text in the long-prompt beam figure: about what a 30 s
/// window of speech leaves for the next one.
const PREVIOUS_TEXT: usize = 100;

use sotto::{Model, TranscribeOptions};

#[derive(clap::Args)]
pub struct Args {
    /// Model name or path.
    #[arg(short, long, default_value = "tiny.en", value_name = "NAME|PATH")]
    model: String,

    /// Time a model of this published size with random weights instead of `--model`
    /// (tiny … large-v3, large-v3-turbo; `.en` sizes too): for sizes whose weights are not
    /// at hand. Encoder windows cost what the real model's do. So do decoder steps on a GPU;
    /// on the CPU the screened vocabulary projection depends on the logits, so add
    /// `--exact-logits` there for a step whose cost does not depend on the values.
    #[arg(long, value_name = "SIZE", value_parser = sotto::formats::random::SIZES, conflicts_with = "file")]
    random_weights: Option<String>,

    #[command(flatten)]
    engine: crate::engine::EngineArgs,

    /// Repetitions per figure (the median is reported, and the encoder's best run).
    #[arg(long, default_value_t = 5)]
    runs: usize,

    /// Decoder steps timed per repetition.
    #[arg(long, default_value_t = 64)]
    tokens: usize,

    /// Also transcribe this file end to end (default options) for the real-time factor.
    #[arg(long, value_name = "AUDIO")]
    file: Option<PathBuf>,

    /// Skip measuring this CPU's peak rates, and the encoder's limit and the decoder's
    /// floor at them (about a second, after every other figure).
    #[arg(long)]
    no_limits: bool,

    /// Time encoder windows (and decoder steps' cross-attention) over this many encoder
    /// positions, as `transcribe --audio-ctx` runs them (no limits then: they
    /// model the whole window) [default: all, 30 s]
    #[arg(long, value_name = "N")]
    audio_ctx: Option<usize>,

    /// Also print where an encoder window's time goes, by op group (the medians over the
    /// runs; on a GPU, its own time between CUDA events), and on a GPU a decoder step's.
    #[arg(long)]
    encoder_ops: bool,

    /// Then time PAIRS pairs of encoder windows with the experiment switch
    /// (`sotto_compute::ab`) off and set to BITS in turn, and print each side's mean, best
    /// and op groups: two variants of the code compared in the same minutes. With nothing
    /// gated on the switch, an A/A run: this machine's noise floor [default PAIRS: 20]
    #[arg(long, value_name = "BITS[,PAIRS]", value_parser = parse_ab)]
    ab: Option<(u32, usize)>,
}

/// `--ab`'s value: experiment bits, and optionally the number of window pairs.
fn parse_ab(s: &str) -> Result<(u32, usize), String> {
    let (bits, pairs) = s.split_once(',').unwrap_or((s, "20"));
    let bits = bits
        .trim()
        .parse()
        .map_err(|e| format!("bits {bits:?}: {e}"))?;
    match pairs.trim().parse() {
        Ok(p) if p > 0 => Ok((bits, p)),
        Ok(_) => Err("at least one pair of windows".into()),
        Err(e) => Err(format!("pairs {pairs:?}: {e}")),
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// The lowest median of three consecutive runs (`None` below three runs): the issue's
/// "median of 3 runs on a quiet machine" on a shared one, where others' load comes and goes
/// and only ever slows a run. Unlike the best run, one lucky run does not make it.
fn quietest_three(runs: &[Duration]) -> Option<Duration> {
    runs.windows(3).map(|w| median(w.to_vec())).min()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A device error as an `anyhow` one.
fn dev<T>(r: Result<T, Box<dyn std::error::Error + Send + Sync>>) -> anyhow::Result<T> {
    r.map_err(|e| anyhow::anyhow!(e))
}

/// Runs `f` once to warm up, then `runs` times; the median duration.
fn measure(runs: usize, f: impl FnMut() -> anyhow::Result<Duration>) -> anyhow::Result<Duration> {
    Ok(median(measure_all(runs, f)?))
}

/// Every timed run of `f` (at least one), after one untimed run.
fn measure_all(
    runs: usize,
    mut f: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Vec<Duration>> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        times.push(f()?);
    }
    Ok(times)
}

/// The median of each op group over the timed runs (`laps`: one list per run).
fn print_encoder_ops(laps: &[Vec<(&'static str, Duration)>]) {
    let Some(first) = laps.first() else {
        println!("  (this device keeps no per-op encoder laps)");
        return;
    };
    for (i, (name, _)) in first.iter().enumerate() {
        let times = laps
            .iter()
            .filter_map(|run| run.get(i).map(|l| l.1))
            .collect();
        println!("  {name:<16}{:9.1} ms", ms(median(times)));
    }
}

/// Where a greedy step's time goes, on devices that time a step's op groups (the GPU's
/// events, a step then running without its graph): each group's mean per step over
/// `steps` steps after `prompt` (each row as the greedy search reads it, a shortlist of
/// `lists`), in the order of first appearance.
fn print_step_ops(
    raw: &mut dyn sotto::Forward,
    lists: &mut sotto::Shortlists,
    prompt: &[u32],
    steps: usize,
) -> anyhow::Result<()> {
    raw.keep_step_laps(true);
    let mut sums: Vec<(&'static str, Duration)> = Vec::new();
    let run = (|| {
        raw.reset_text();
        dev(raw.decode_shortlists(prompt, &[0], lists))?;
        for i in 0..steps {
            dev(raw.decode_shortlists(&[400 + i as u32], &[0], lists))?;
            for (name, t) in raw.step_laps().unwrap_or_default() {
                match sums.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, sum)) => *sum += t,
                    None => sums.push((name, t)),
                }
            }
        }
        anyhow::Ok(())
    })();
    raw.keep_step_laps(false);
    run?;
    if sums.is_empty() {
        return Ok(());
    }
    let total: Duration = sums.iter().map(|s| s.1).sum();
    println!(
        "  a step's op groups, mean of {steps} steps timed apart (no graph: {:.3} ms):",
        ms(total / steps.max(1) as u32)
    );
    for (name, t) in sums {
        println!("  {name:<16}{:9.3} ms", ms(t / steps.max(1) as u32));
    }
    Ok(())
}

/// `--ab`: `pairs` pairs of `window` runs (each its time and op-group laps), the experiment
/// switch off for the first of each pair and set to `bits` for the second; prints each
/// side's mean, best and op groups, and on/off ratios.
fn alternate(
    bits: u32,
    pairs: usize,
    mut window: impl FnMut() -> anyhow::Result<(Duration, Vec<(&'static str, Duration)>)>,
) -> anyhow::Result<()> {
    let mut total = [Duration::ZERO; 2];
    let mut best = [Duration::MAX; 2];
    let mut ops: Vec<(&'static str, [Duration; 2])> = Vec::new();
    for i in 0..2 * pairs {
        let side = i % 2;
        sotto::model::ab::set(if side == 1 { bits } else { 0 });
        let (took, laps) = window()?;
        total[side] += took;
        best[side] = best[side].min(took);
        for (j, (name, d)) in laps.into_iter().enumerate() {
            if ops.len() <= j {
                ops.push((name, [Duration::ZERO; 2]));
            }
            ops[j].1[side] += d;
        }
    }
    let mean = |d: Duration| ms(d) / pairs as f64;
    let ratio = |on: Duration, off: Duration| on.as_secs_f64() / off.as_secs_f64();
    println!(
        "A/B bits {bits}, {pairs} window pairs: off {:.1} ms (best {:.1}), on {:.1} ms (best {:.1}), on/off {:.3} (best {:.3})",
        mean(total[0]),
        ms(best[0]),
        mean(total[1]),
        ms(best[1]),
        ratio(total[1], total[0]),
        ratio(best[1], best[0])
    );
    for (name, [off, on]) in ops {
        println!(
            "  {name:<16}off {:8.2}  on {:8.2}  on/off {:.3}",
            mean(off),
            mean(on),
            ratio(on, off)
        );
    }
    Ok(())
}

/// Peak resident set size of this process, from /proc (Linux); `None` elsewhere.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// This CPU's measured peaks on `threads` threads (each the better of this measurement
/// and `early`'s, when given); the encoder's time (`encode`, per
/// window; its best run and quietest three in a row too) against the least its `work` can
/// take at them, and a one-row decoder step's (`token`) against the time to read its
/// `step_bytes` at the measured read rate.
fn print_limits(
    threads: usize,
    early: Option<sotto::Peaks>,
    work: &sotto::EncoderWork,
    (encode, best, quiet): (Duration, Duration, Option<Duration>),
    step_bytes: usize,
    token: Duration,
) {
    let p = sotto::measure_peaks(sotto::isa(), threads);
    let p = early.map_or(p, |e| p.best_of(e));
    let rate = |name: &str, r: Option<f64>, unit: &str| {
        r.map(|r| format!(", {name} {r:.0} {unit}"))
            .unwrap_or_default()
    };
    println!(
        "peaks             f32 FMA {:.0} GFLOP/s{}{}{}, memory read {:.1} GB/s ({threads} threads{})",
        p.f32_gflops,
        rate("bf16 dot", p.bf16_gflops, "GFLOP/s"),
        rate("AMX bf16", p.amx_bf16_gflops, "GFLOP/s"),
        rate("int8 dot", p.int8_gops, "GOP/s"),
        p.read_gbs,
        if early.is_some() {
            "; compute the better of before and after the runs"
        } else {
            ""
        }
    );
    match work.limit(&p) {
        Some(limit) => {
            let times = |d: Duration| d.as_secs_f64() / limit.as_secs_f64();
            println!(
                "encoder limit     {:9.1} ms  ({:.1} G operations at the peaks: this encoder takes {:.2}× it, {}its best run {:.2}×)",
                ms(limit),
                work.total() / 1e9,
                times(encode),
                quiet.map_or(String::new(), |q| format!(
                    "its quietest three in a row {:.2}×, ",
                    times(q)
                )),
                times(best)
            )
        }
        None => println!("encoder limit     (its precision needs an instruction this CPU lacks)"),
    }
    let floor = step_bytes as f64 / (p.read_gbs * 1e9);
    println!(
        "decoder floor     {:9.2} ms  ({:.1} MB of weights and cross K/V per step at the read rate: a token takes {:.2}× it)",
        floor * 1e3,
        step_bytes as f64 / 1e6,
        token.as_secs_f64() / floor
    );
}

/// A deterministic 30 s test signal: a chirp with a little noise, so the mel is not flat.
fn test_signal() -> Vec<f32> {
    let n = sotto::audio::N_SAMPLES;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            let t = i as f32 / sotto::audio::SAMPLE_RATE as f32;
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            0.3 * (2.0 * std::f32::consts::PI * (200.0 + 40.0 * t) * t).sin() + 0.01 * noise
        })
        .collect()
}

pub fn run(hub: &sotto::hub::Hub, args: Args) -> anyhow::Result<ExitCode> {
    let device = args.engine.device()?;
    let threads = args.engine.threads()?;
    let t = Instant::now();
    let opts = args.engine.load_options()?;
    let (model, name) = match &args.random_weights {
        Some(size) => (
            Model::random(size, device, opts)?,
            format!("{size} (random weights)"),
        ),
        None => {
            let progress = &mut crate::progress::Download::new();
            let model = Model::load_named_with(&args.model, hub, progress, device, opts)?;
            (model, args.model.clone())
        }
    };
    let load = t.elapsed();
    crate::engine::device_note(&args.engine, &model);
    let mut session = model.session(threads)?;
    let hp = *model.hparams();
    println!(
        "model {} ({} layers, d {}), device {}, {threads} threads, ISA {}, encoder {}, median of {} runs",
        name,
        hp.n_audio_layer,
        hp.n_audio_state,
        model.device(),
        sotto::isa().name().to_string() + if sotto::amx_bf16() { "+amx" } else { "" },
        model
            .encoder_precision()
            .map_or("on device".to_string(), |p| format!("{p:?}").to_lowercase()),
        args.runs
    );
    println!("load              {:9.1} ms", ms(load));

    let signal = test_signal();
    let mut mel = sotto::audio::log_mel_spectrogram(&signal, hp.n_mels, 0);
    let mel_time = measure(args.runs, || {
        let t = Instant::now();
        mel = sotto::audio::log_mel_spectrogram(&signal, hp.n_mels, 0);
        Ok(t.elapsed())
    })?;
    println!("mel / 30 s        {:9.1} ms", ms(mel_time));

    let frames = sotto::audio::N_FRAMES;
    let window: Vec<f32> = (0..hp.n_mels)
        .flat_map(|m| {
            let row = &mel.data[m * mel.n_frames..(m + 1) * mel.n_frames];
            (0..frames).map(move |f| row.get(f).copied().unwrap_or(0.0))
        })
        .collect();
    // The compute peaks now and again at the end, the better of each counting: a busy
    // stretch at the end alone would lower them, and flatter the ratios to the limit.
    let audio_ctx = args.audio_ctx.filter(|&n| n > 0 && n != hp.n_audio_ctx);
    let limits = !args.no_limits && audio_ctx.is_none();
    let early_peaks = (limits && model.encoder_work().is_some())
        .then(|| sotto::measure_compute_peaks(sotto::isa(), threads));
    let raw = session.forward();
    dev(raw.set_audio_ctx(audio_ctx))?;
    if let Some(n) = audio_ctx {
        println!("audio_ctx {n}: windows of {:.2} s", n as f64 * 0.02);
    }
    // Timed as transcription runs it: where keeping the op groups' laps costs something
    // (the GPU's events, which also keep its encoder out of a CUDA graph), they are taken
    // in runs of their own below.
    raw.keep_encoder_laps(false);
    let mut laps = Vec::new();
    let encodes = measure_all(args.runs, || {
        let t = Instant::now();
        dev(raw.encode(&window))?;
        let took = t.elapsed();
        laps.extend(raw.encoder_laps());
        Ok(took)
    })?;
    let note = raw.encoder_note();
    // The best run too: on a shared machine, others' load only ever slows a run, so the
    // best is the nearest to what a quiet machine gives.
    let best = encodes.iter().copied().min().unwrap_or_default();
    let quiet = quietest_three(&encodes);
    let encode = median(encodes);
    println!(
        "encoder / window  {:9.1} ms  (best run {:.1} ms{})",
        ms(encode),
        ms(best),
        quiet.map_or(String::new(), |q| format!(
            ", quietest three in a row {:.1} ms",
            ms(q)
        ))
    );
    if let Some(note) = note {
        println!("  encoder: {note}");
    }
    if args.encoder_ops && laps.is_empty() {
        raw.keep_encoder_laps(true);
        measure_all(args.runs, || {
            let t = Instant::now();
            dev(raw.encode(&window))?;
            laps.extend(raw.encoder_laps());
            Ok(t.elapsed())
        })?;
        println!("  op groups from {} timed runs of their own:", args.runs);
    }
    if args.encoder_ops {
        print_encoder_ops(laps.get(1..).unwrap_or_default());
    }
    raw.keep_encoder_laps(args.ab.is_some());
    if let Some((bits, pairs)) = args.ab {
        let result = alternate(bits, pairs, || {
            let t = Instant::now();
            dev(raw.encode(&window))?;
            Ok((t.elapsed(), raw.encoder_laps().unwrap_or_default()))
        });
        sotto::model::ab::set(0);
        result?;
    }

    // Decoder: a prompt, then one token per step; only the last row's logits.
    let tok = model.tokenizer();
    let prompt = [tok.sot()];
    let steps = args.tokens.min(hp.n_text_ctx / 2);
    let mut logits = vec![0f32; hp.n_vocab];
    // What transcription's searches ask for: the best token (greedy) or 2 per beam, the
    // tokens a blank start masks, and faster-whisper's default suppressed tokens; they
    // read each row as a shortlist record of those (see sotto_decode::shortlist).
    let suppressed = sotto::suppressed_tokens(tok, &[-1]);
    let need = |best: usize| sotto::LogitNeed::Top {
        top: best,
        text_end: tok.eot(),
        never: suppressed.clone(),
        watch: tok.encode(" "),
    };
    let lists = |need: &sotto::LogitNeed| {
        let spec = sotto::ShortlistSpec::from_need(hp.n_vocab, tok.eot() as usize, need);
        sotto::Shortlists::new(spec)
    };
    raw.set_logit_need(&need(1));
    let mut greedy_lists = lists(&need(1));
    let per_token = measure(args.runs, || {
        raw.reset_text();
        dev(raw.decode_shortlists(&prompt, &[0], &mut greedy_lists))?;
        let t = Instant::now();
        for i in 0..steps {
            // Ordinary text tokens; their values do not change the cost.
            let token = 400 + i as u32;
            dev(raw.decode_shortlists(&[token], &[0], &mut greedy_lists))?;
        }
        Ok(t.elapsed() / steps as u32)
    })?;
    println!("decoder / token   {:9.2} ms  (batch 1)", ms(per_token));
    if let Some(note) = raw.step_note() {
        println!("  decoder: {note}");
    }
    if args.encoder_ops {
        print_step_ops(raw, &mut greedy_lists, &prompt, steps)?;
    }

    // Five beams: the prompt once, broadcast, then one token per beam per step. `prompt`'s
    // last row gives the first logits; each figure is the time per step.
    let beams = 5;
    let tokens: Vec<u32> = (0..beams as u32).map(|b| 400 + b).collect();
    let mut batch_logits = vec![0f32; beams * hp.n_vocab];
    // With `origins`, the cache is reordered so before each step, as beam search does.
    // Every logit (sampling) comes whole, else as shortlist records.
    let mut batch_steps = |prompt: &[u32], need: &sotto::LogitNeed, origins: Option<&[usize]>| {
        raw.set_logit_need(need);
        let mut records = (*need != sotto::LogitNeed::All).then(|| lists(need));
        let steps = steps.min(hp.n_text_ctx.saturating_sub(prompt.len())).max(1);
        measure(args.runs, || {
            raw.reset_text();
            dev(raw.decode(prompt, &[prompt.len() - 1], &mut logits))?;
            dev(raw.reorder(&[0; 5]))?;
            let t = Instant::now();
            for _ in 0..steps {
                if let Some(origins) = origins {
                    dev(raw.reorder(origins))?;
                }
                match records.as_mut() {
                    Some(r) => dev(raw.decode_batch_shortlists(&tokens, beams, r))?,
                    None => dev(raw.decode_batch(&tokens, beams, &mut batch_logits))?,
                }
            }
            Ok(t.elapsed() / steps as u32)
        })
    };
    let per_step = batch_steps(&prompt, &need(2 * beams), None)?;
    println!(
        "decoder / step    {:9.2} ms  (batch {beams}: {:.2} ms per beam-token)",
        ms(per_step),
        ms(per_step) / beams as f64
    );

    // The same after a long-form window's prompt: the previous window's text (here 100
    // ordinary tokens) before the start token, which the beams share.
    let long_prompt: Vec<u32> = std::iter::once(tok.sot_prev())
        .chain((0..PREVIOUS_TEXT).map(|i| 400 + i as u32))
        .chain(std::iter::once(tok.sot()))
        .collect();
    let per_step_long = batch_steps(&long_prompt, &need(2 * beams), None)?;
    println!(
        "decoder / step    {:9.2} ms  (batch {beams} after a {}-token prompt)",
        ms(per_step_long),
        long_prompt.len()
    );

    // Best-of-5 sampling (the temperature fallback) reads every logit.
    let per_sample_step = batch_steps(&prompt, &sotto::LogitNeed::All, None)?;
    println!(
        "decoder / step    {:9.2} ms  (batch {beams}, every logit: best-of-{beams} sampling)",
        ms(per_sample_step)
    );

    // A beam search reorders the cache before every step; here the way beams often go,
    // three from the best and one each from the next two.
    let origins = [0, 0, 0, 1, 2];
    let per_reordered_step = batch_steps(&prompt, &need(2 * beams), Some(&origins))?;
    println!(
        "decoder / step    {:9.2} ms  (batch {beams}, the cache reordered {origins:?} first)",
        ms(per_reordered_step)
    );

    if let Some(file) = &args.file {
        let name = file.to_string_lossy();
        let mut audio = Vec::new();
        let front = measure(args.runs, || {
            let t = Instant::now();
            audio = sotto::audio::load_16k_mono(&name)?;
            Ok(t.elapsed())
        })?;
        let duration = audio.len() as f64 / sotto::audio::SAMPLE_RATE as f64;
        println!(
            "audio to 16 kHz   {:9.1} ms  for {duration:.1} s of audio (decoding and resampling the file)",
            ms(front)
        );
        let opts = TranscribeOptions {
            audio_ctx,
            ..TranscribeOptions::default()
        };
        let t = Instant::now();
        let (transcript, timings) = session.transcribe_timed(&audio, &opts, &mut |_| true)?;
        let wall = t.elapsed();
        println!(
            "end to end        {:9.1} ms  for {:.1} s of audio: RTF {:.3} ({} segments, encode {:.0} ms in {} windows, decode {:.0} ms)",
            ms(wall),
            duration,
            wall.as_secs_f64() / duration,
            transcript.segments.len(),
            ms(timings.encode),
            timings.windows,
            ms(timings.decode)
        );
    }
    if let Some(rss) = peak_rss_mib() {
        println!("peak RSS          {rss:9.1} MiB");
    }
    if let (true, Some(work), Some(bytes)) =
        (limits, model.encoder_work(), model.decoder_step_bytes())
    {
        // The session's workers must not share the cores with the measurement.
        drop(session);
        let times = (encode, best, quiet);
        print_limits(threads, early_peaks, &work, times, bytes, per_token);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quietest_three_is_the_lowest_median_of_consecutive_runs() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        assert_eq!(quietest_three(&ms(&[5, 1])), None);
        assert_eq!(
            quietest_three(&ms(&[7, 3, 5])),
            Some(Duration::from_millis(5))
        );
        // The lucky run (1) is not the answer: windows 5·1·9 → 5, 1·9·2 → 2, 9·2·3 → 3,
        // 2·3·4 → 3.
        assert_eq!(
            quietest_three(&ms(&[5, 1, 9, 2, 3, 4])),
            Some(Duration::from_millis(2))
        );
    }
}
