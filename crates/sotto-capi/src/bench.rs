//! Timing the model on this machine (whisper.rn's `bench`), and what the CPU has.

use super::*;

/// `sotto_bench` of `sotto.h`, field for field.
#[repr(C)]
pub struct SottoBench {
    pub struct_size: usize,
    pub n_threads: c_int,
    pub encode_ms: f64,
    pub decode_ms: f64,
    pub batch_ms: f64,
    pub prompt_ms: f64,
}

/// The median of `runs` timings of `f` after one untimed call.
pub(crate) fn median_ms(
    runs: usize,
    mut f: impl FnMut() -> Result<std::time::Duration, String>,
) -> Result<f64, String> {
    f()?;
    let mut t = (0..runs).map(|_| f()).collect::<Result<Vec<_>, _>>()?;
    t.sort();
    Ok(t[t.len() / 2].as_secs_f64() * 1e3)
}

/// Times the session's encoder and decoder as whisper.cpp's bench reports them (whisper.rn's
/// `bench()`): an encoder window; a decoder step of one sequence; a step of five beams; a
/// 256-token prompt. Each figure is the median of `runs` (>= 1) after a warm-up.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread; `out` is NULL or points to
/// a `sotto_bench` whose `struct_size` is set.
#[no_mangle]
pub unsafe extern "C" fn sotto_bench(
    session: *mut SottoSession,
    runs: c_int,
    out: *mut SottoBench,
) -> c_int {
    guard(-1, || {
        // SAFETY: as this function's contract says.
        let s = unsafe { handle_mut(session, "session") }?;
        // SAFETY: as above.
        let out = unsafe { out.as_mut() }.ok_or("out is NULL")?;
        if out.struct_size != std::mem::size_of::<SottoBench>() {
            return Err(format!(
                "out.struct_size is {}, not {}",
                out.struct_size,
                std::mem::size_of::<SottoBench>()
            ));
        }
        let runs = usize::try_from(runs)
            .ok()
            .filter(|&r| r >= 1)
            .ok_or_else(|| format!("runs is {runs}; it must be at least 1"))?;
        let model = s.0.model().clone();
        let hp = *model.hparams();
        let tok = model.tokenizer();
        let (sot, eot) = (tok.sot(), tok.eot());
        // What greedy and beam search ask for (the best 1, or 2 per beam) and read: each
        // row as a shortlist record.
        let need = |top: usize| sotto::LogitNeed::Top {
            top,
            text_end: eot,
            never: Vec::new(),
            watch: Vec::new(),
        };
        let lists = |top: usize| {
            let spec = sotto::ShortlistSpec::from_need(hp.n_vocab, eot as usize, &need(top));
            sotto::Shortlists::new(spec)
        };
        let fwd = s.0.forward();
        let e = |e: Box<dyn std::error::Error + Send + Sync>| e.to_string();
        // The encoder's cost does not depend on the values it is given.
        let window = vec![0f32; hp.n_mels * sotto::audio::N_FRAMES];
        let encode_ms = median_ms(runs, || {
            let t = std::time::Instant::now();
            fwd.encode(&window).map_err(e)?;
            Ok(t.elapsed())
        })?;
        // Ordinary text tokens; their values do not change the cost.
        let text = |i: usize| 400 + i as u32;
        let mut logits = vec![0f32; hp.n_vocab];
        let steps = 32.min(hp.n_text_ctx / 4);
        fwd.set_logit_need(&need(1));
        let mut greedy = lists(1);
        let decode_ms = median_ms(runs, || {
            fwd.reset_text();
            fwd.decode_shortlists(&[sot], &[0], &mut greedy)
                .map_err(e)?;
            let t = std::time::Instant::now();
            for i in 0..steps {
                fwd.decode_shortlists(&[text(i)], &[0], &mut greedy)
                    .map_err(e)?;
            }
            Ok(t.elapsed() / steps as u32)
        })?;
        fwd.set_logit_need(&need(10));
        let mut beam = lists(10);
        let beams: Vec<u32> = (0..5).map(text).collect();
        let batch_ms = median_ms(runs, || {
            fwd.reset_text();
            fwd.decode_shortlists(&[sot], &[0], &mut beam).map_err(e)?;
            fwd.reorder(&[0; 5]).map_err(e)?;
            let t = std::time::Instant::now();
            for _ in 0..steps {
                fwd.decode_batch_shortlists(&beams, 5, &mut beam)
                    .map_err(e)?;
            }
            Ok(t.elapsed() / steps as u32)
        })?;
        let prompt: Vec<u32> = std::iter::once(sot)
            .chain((1..256.min(hp.n_text_ctx / 2)).map(text))
            .collect();
        fwd.set_logit_need(&need(1));
        let prompt_ms = median_ms(runs, || {
            fwd.reset_text();
            let t = std::time::Instant::now();
            fwd.decode(&prompt, &[prompt.len() - 1], &mut logits[..hp.n_vocab])
                .map_err(e)?;
            Ok(t.elapsed())
        })?;
        fwd.reset_text();
        *out = SottoBench {
            struct_size: out.struct_size,
            n_threads: c_int::try_from(s.1).unwrap_or(c_int::MAX),
            encode_ms,
            decode_ms,
            batch_ms,
            prompt_ms,
        };
        Ok(0)
    })
}

/// What the library runs on, in one line: its version, the model's device kinds it was
/// built for and the CPU's SIMD path, e.g. `sotto 0.1.0 | CPU avx2 | CUDA: no`.
#[no_mangle]
pub extern "C" fn sotto_system_info() -> *const c_char {
    static INFO: std::sync::OnceLock<CString> = std::sync::OnceLock::new();
    INFO.get_or_init(|| c_string(&sotto::system_info()))
        .as_ptr()
}
