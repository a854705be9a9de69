//! Teacher-forced logits of one model file on the first window of a clip.
//!
//! `quant-probe MODEL WAV LANG PRECISION "TEXT" OUT_PREFIX` (PRECISION: auto, int8, int16,
//! bf16 or f32) writes OUT_PREFIX.tokens (u32 LE: the whole sequence: prompt, text, end) and
//! OUT_PREFIX.sotto.f32 (f32 LE logits of every row from the last prompt token on:
//! [n_text + 1, n_vocab]).
use std::io::Write;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 7 {
        return Err("usage: quant-probe MODEL WAV LANG PRECISION TEXT OUT_PREFIX".into());
    }
    let (model, wav, lang, prec, text, out) = (&a[1], &a[2], &a[3], &a[4], &a[5], &a[6]);
    use sotto::EncoderPrecision as P;
    let encoder = match prec.as_str() {
        "f32" => P::F32,
        "bf16" => P::Bf16,
        "int8" => P::Int8,
        "int16" => P::Int16,
        _ => P::Auto,
    };
    // The reference distributions come from the f16 rows themselves (no screened
    // vocabulary; quantized files are not screened anyway).
    let opts = sotto::LoadOptions {
        encoder,
        exact_logits: true,
    };
    let m = sotto::Model::load_with(Path::new(model), sotto::Device::Cpu, opts)?;
    let hp = *m.hparams();
    let tok = m.tokenizer();
    let mut prompt = tok.sot_sequence(lang, sotto::Task::Transcribe)?;
    prompt.push(tok.no_timestamps());
    let text_tokens = tok.encode(&format!(" {}", text.trim()));
    let mut tokens = prompt.clone();
    tokens.extend(&text_tokens);
    tokens.push(tok.eot());
    let samples = sotto::audio::load_16k_mono(wav)?;
    let mel = sotto::audio::log_mel_spectrogram(&samples, hp.n_mels, sotto::audio::HOP_LENGTH);
    let view = sotto_decode::MelView {
        data: &mel.data,
        n_mels: mel.n_mels,
        n_frames: mel.n_frames,
    };
    let window = view.window(0, view.content_frames().min(3000));
    let mut s = m.session(2)?;
    let f = s.forward();
    f.encode(&window).map_err(|e| e.to_string())?;
    // Rows from the last prompt token to the one before the end: they predict text and end.
    let rows: Vec<usize> = (prompt.len() - 1..tokens.len() - 1).collect();
    let mut logits = vec![0f32; rows.len() * tok.n_vocab()];
    f.decode(&tokens[..tokens.len() - 1], &rows, &mut logits)
        .map_err(|e| e.to_string())?;
    let mut t = std::fs::File::create(format!("{out}.tokens"))?;
    for x in &tokens {
        t.write_all(&x.to_le_bytes())?;
    }
    let mut l = std::io::BufWriter::new(std::fs::File::create(format!("{out}.sotto.f32"))?);
    for x in &logits {
        l.write_all(&x.to_le_bytes())?;
    }
    Ok(())
}
