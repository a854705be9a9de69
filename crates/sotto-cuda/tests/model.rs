//! The Whisper forward on CUDA against the CPU's (`sotto_model::Session`): encoder output,
//! prompt logits, greedy steps, a beam-like batch with reorders, and a reset, in both
//! precisions, on synthetic models (always available) and on tiny.en where it is cached.
//!
//! Without libcuda each GPU test prints "skipped: …" after its CPU half; with
//! `SOTTO_REQUIRE_CUDA=1` (scripts/gpu-check.sh) a skip is a failure.

mod common;

use std::sync::Arc;

use sotto_cuda::{AttentionPath, CudaError, CudaSession, CudaWhisper, Precision, QuantType};
use sotto_formats::{DType, Hparams, Storage, WhisperFile};
use sotto_model::{EncoderPrecision, LoadOptions, Session, Whisper};

use common::emu::Schedule;
use common::{nmse, values};

fn require_cuda() -> bool {
    std::env::var_os("SOTTO_REQUIRE_CUDA").is_some_and(|v| v != "0")
}

/// The model on GPU 0, or None (after saying why) where there is no GPU.
fn upload(f: &WhisperFile, p: Precision) -> Option<Arc<CudaWhisper>> {
    let skip = |why: String| {
        assert!(!require_cuda(), "SOTTO_REQUIRE_CUDA is set, but {why}");
        println!("skipped: {why}");
        None
    };
    match CudaWhisper::new(f, 0, p) {
        Ok(m) => Some(Arc::new(m)),
        Err(e @ (CudaError::NoDriver | CudaError::NoDevice)) => skip(e.to_string()),
        Err(e) => panic!("libcuda is present but loading the model failed: {e}"),
    }
}

/// A random Whisper with hparams `h`: matrices f16 with unit-variance outputs, vectors f32.
fn synthetic(h: Hparams) -> WhisperFile {
    sotto_formats::random::whisper(h, 1)
}

/// `f` with every f16 matrix of whole 32-value rows quantized to `t`, as whisper.cpp
/// quantizes 2-D tensors (the 3-D conv weights stay f16).
fn quantized(mut f: WhisperFile, t: QuantType) -> WhisperFile {
    let dtype = sotto_formats::ggml::dtype_from_ggml(t.ggml_type_id()).expect("a weight type");
    for td in f.tensors.values_mut() {
        if td.dtype != DType::F16 || td.shape.len() != 2 || td.shape[1] % QuantType::BLOCK != 0 {
            continue;
        }
        let x = td.to_f32().unwrap();
        let mut q = vec![0u8; t.row_bytes(x.len())];
        sotto_quant::quantize_row(t, &x, &mut q);
        td.dtype = dtype;
        td.data = Storage::from_vec(q);
    }
    f
}

const SMALL: Hparams = Hparams {
    n_vocab: 600,
    n_audio_ctx: 64,
    n_audio_state: 128,
    n_audio_head: 2,
    n_audio_layer: 2,
    n_text_ctx: 24,
    n_text_state: 128,
    n_text_head: 2,
    n_text_layer: 2,
    n_mels: 80,
};

/// tiny.en's shapes, random weights: the real block sizes, 1500 audio positions and the
/// full vocabulary, with no model file to carry.
const TINY_SHAPES: Hparams = Hparams {
    n_vocab: 51864,
    n_audio_ctx: 1500,
    n_audio_state: 384,
    n_audio_head: 6,
    n_audio_layer: 4,
    n_text_ctx: 448,
    n_text_state: 384,
    n_text_head: 6,
    n_text_layer: 4,
    n_mels: 80,
};

/// How close the GPU must be. f32 products differ from the CPU's only in summation order;
/// f16 rounds every product input to 11 bits.
struct Tolerance {
    enc_nmse: f64,
    logits_nmse: f64,
    logits_max_abs: f32,
    /// Of the logits compared so far: (how many equal the CPU's bit for bit, how many).
    same: std::cell::Cell<(usize, usize)>,
}

fn tolerance(p: Precision) -> Tolerance {
    match p {
        // The CPU session keeps the cross-attention K/V in f16 (half the bytes a decoder
        // step reads); the GPU keeps them f32. That rounding, not summation order, sets
        // the logits' bound (observed: nmse ~1e-9, max abs ~1e-4 on the small model).
        Precision::F32 => Tolerance {
            enc_nmse: 1e-9,
            logits_nmse: 1e-7,
            logits_max_abs: 2e-3,
            same: Default::default(),
        },
        Precision::F16 => Tolerance {
            enc_nmse: 1e-4,
            logits_nmse: 1e-4,
            logits_max_abs: 5e-2,
            same: Default::default(),
        },
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |best, i| if x[i] > x[best] { i } else { best })
}

/// Compares logits row by row: nmse, max abs diff, and the same argmax wherever the CPU's
/// best two are further apart than the difference seen.
fn compare_logits(what: &str, gpu: &[f32], cpu: &[f32], n_vocab: usize, tol: &Tolerance) {
    let (e, m) = (nmse(gpu, cpu), max_abs_diff(gpu, cpu));
    println!("{what}: logits nmse {e:.3e}, max abs diff {m:.3e}");
    let (same, all) = tol.same.get();
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    tol.same
        .set((same + usize::from(bits(gpu) == bits(cpu)), all + 1));
    assert!(
        gpu.iter().all(|v| v.is_finite()),
        "{what}: non-finite logits"
    );
    assert!(e <= tol.logits_nmse, "{what}: logits nmse {e:.3e}");
    assert!(m <= tol.logits_max_abs, "{what}: max abs diff {m:.3e}");
    for (r, (g, c)) in gpu
        .chunks_exact(n_vocab)
        .zip(cpu.chunks_exact(n_vocab))
        .enumerate()
    {
        let best = argmax(c);
        let second = (0..n_vocab)
            .filter(|&i| i != best)
            .map(|i| c[i])
            .fold(f32::NEG_INFINITY, f32::max);
        if c[best] - second > 2.0 * m {
            assert_eq!(argmax(g), best, "{what}: row {r} argmax");
        }
    }
}

/// The model in host emulation of the CUDA path (every launch, copy and product of a
/// session, on host memory, kernels in the order `s`), or None (after saying why) without a
/// C++ compiler.
fn emulated(f: &WhisperFile, p: Precision, s: Schedule) -> Option<Arc<CudaWhisper>> {
    let e = common::emu::get()?;
    let dev = Arc::new(common::emu::EmuDevice::new(e, s));
    Some(Arc::new(
        CudaWhisper::on_host(f, p, dev).expect("model on the host device"),
    ))
}

/// The CPU model the GPU is compared with: f32 encoder products and exact logits, whatever
/// this CPU's default (`Auto` picks int16 on AVX2 and bf16 with AVX-512 BF16, both further
/// from the GPU's f32 path than its tolerance).
fn cpu_reference(f: &WhisperFile) -> Arc<Whisper> {
    let opts = LoadOptions {
        encoder: EncoderPrecision::F32,
        exact_logits: true,
        quantize_decoder: false,
    };
    Arc::new(Whisper::from_file_with(f, opts).expect("CPU model"))
}

/// The whole comparison for one model and precision, on the GPU.
fn check_model(f: &WhisperFile, p: Precision) {
    check_model_with(f, p, None);
}

fn check_model_with(f: &WhisperFile, p: Precision, attention: Option<AttentionPath>) {
    let cpu_model = cpu_reference(f);
    let Some(gpu_model) = upload(f, p) else {
        return;
    };
    check_against(f, p, cpu_model, gpu_model, attention);
}

/// The whole comparison for one model and precision, in host emulation.
/// Returns how many of the logits compared were the CPU's bit for bit, of how many.
fn check_emulated(f: &WhisperFile, p: Precision, s: Schedule) -> (usize, usize) {
    check_emulated_with(f, p, s, None)
}

fn check_emulated_with(
    f: &WhisperFile,
    p: Precision,
    s: Schedule,
    a: Option<AttentionPath>,
) -> (usize, usize) {
    let cpu_model = cpu_reference(f);
    let Some(model) = emulated(f, p, s) else {
        return (0, 0);
    };
    check_against(f, p, cpu_model, model, a)
}

/// Op-group laps (`what`'s): exactly `groups`, in order, adding up to no more than the
/// `wall` time of the call they split.
fn check_laps(
    what: &str,
    laps: &[(&str, std::time::Duration)],
    groups: &[&str],
    wall: std::time::Duration,
) {
    println!("{what} laps {laps:?} in {wall:?}");
    let names: Vec<_> = laps.iter().map(|l| l.0).collect();
    assert_eq!(names, groups, "{what}");
    assert!(
        laps.iter().map(|l| l.1).sum::<std::time::Duration>() <= wall,
        "{what}"
    );
}

/// The GPU session against the CPU's; `attention` overrides the session's path.
fn check_against(
    f: &WhisperFile,
    p: Precision,
    cpu_model: Arc<Whisper>,
    gpu_model: Arc<CudaWhisper>,
    attention: Option<AttentionPath>,
) -> (usize, usize) {
    let h = f.hparams;
    println!("{} {p:?} on {}", f.path.display(), gpu_model.device());
    let mut tol = tolerance(p);
    let q8 = std::env::var_os("SOTTO_CUDA_Q8").is_none_or(|v| v != "0");
    if f.tensors.values().any(|t| t.dtype.is_quantized()) {
        // The CPU decodes quantized weights against 8-bit quantized activations (ggml's
        // vec_dot); at f16 the GPU's prompt passes multiply the dequantized weights by f16
        // inputs. The encoder (a gemm of the dequantized weights on both sides) keeps its
        // tolerance. At f32 every decoder product is the CPU's own (`MMV_Q8`), bit for bit
        // on the same inputs; but an input an ulp apart (layer norm and attention sum in
        // another order) can round to the next 8-bit code, which moves logits by ~0.03.
        (tol.logits_nmse, tol.logits_max_abs) = match p == Precision::F32 && q8 {
            true => (1e-3, 0.25),
            false => (1e-2, 1.0),
        };
    }
    let nv = h.n_vocab;
    let mut cpu = Session::new(cpu_model, 0).unwrap();
    let mut gpu = CudaSession::new(gpu_model).unwrap();
    if let Some(a) = attention {
        gpu.set_attention(a).unwrap();
    }
    gpu.keep_encoder_laps(true);
    let mel = values(h.n_mels * 2 * h.n_audio_ctx, 99, 1.2);
    cpu.encode(&mel).unwrap();
    let t = std::time::Instant::now();
    gpu.encode(&mel).unwrap();
    let wall = t.elapsed();
    // Every op group timed, in order, within the encode's own time.
    let laps = gpu.encoder_laps();
    let groups = [
        "conv",
        "q/k/v",
        "attention",
        "out-projection",
        "mlp",
        "cross K/V",
    ];
    check_laps("encoder", laps, &groups, wall);
    assert!(laps.iter().all(|l| !l.1.is_zero()), "{laps:?}");
    let enc = gpu.encoder_output().unwrap();
    let e = nmse(&enc, cpu.encoder_output());
    println!(
        "encoder output: nmse {e:.3e}, max abs diff {:.3e}",
        max_abs_diff(&enc, cpu.encoder_output())
    );
    assert!(e <= tol.enc_nmse, "encoder nmse {e:.3e}");

    // A prompt of three tokens, logits of rows 0 and 2.
    let prompt = [(nv - 3) as u32, 7, (nv / 2) as u32];

    // The fused encoder (the default) and the one launch per step agree bit for bit in
    // emulation: the fusions move adds and f16 narrowing between launches, not the
    // arithmetic. On a GPU cuBLAS may sum a stacked product (q, k and v as one) in another
    // order than its parts, so there they agree within a hundredth of the CPU tolerance.
    // The prompt's logits cover the cross K/V, whose input the fused ln_post narrows.
    let emulated = gpu.model().device().compute_capability == (0, 0);
    let same = |got: &[f32], want: &[f32], bound: f64, what: &str| {
        let e = nmse(got, want);
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        match emulated {
            true => assert!(
                bits(got) == bits(want),
                "{what}: nmse {e:.3e}, not bit for bit"
            ),
            false => assert!(e <= bound / 100.0, "{what}: nmse {e:.3e}"),
        }
    };
    let (mut fused, mut apart) = (vec![0f32; 2 * nv], vec![0f32; 2 * nv]);
    gpu.decode(&prompt, &[0, 2], &mut fused).unwrap();
    gpu.fuse_launches(false);
    gpu.encode(&mel).unwrap();
    let unfused = gpu.encoder_output().unwrap();
    same(
        &unfused,
        &enc,
        tol.enc_nmse,
        "fused and unfused encoder outputs",
    );
    gpu.decode(&prompt, &[0, 2], &mut apart).unwrap();
    same(
        &apart,
        &fused,
        tol.logits_nmse,
        "logits after the two encoders",
    );
    gpu.fuse_launches(true);
    // Encodes after the first, untimed, replay one captured graph: the same output as the
    // direct encodes of the same mels, taken in turn (so no launch can be left out of the
    // graph unseen), cross K/V included.
    let graphs = std::env::var_os("SOTTO_CUDA_GRAPHS").is_none_or(|v| v != "0");
    let mel2 = values(mel.len(), 98, 1.2);
    gpu.encode(&mel2).unwrap();
    let enc2 = gpu.encoder_output().unwrap();
    gpu.keep_encoder_laps(false);
    for (m, want) in [(&mel, &enc), (&mel2, &enc2), (&mel, &enc)] {
        gpu.encode(m).unwrap();
        assert_eq!(
            gpu.encoder_graphed(),
            graphs,
            "{:?}",
            gpu.encoder_graph_error()
        );
        let got = gpu.encoder_output().unwrap();
        same(&got, want, tol.enc_nmse, "the encoder graph's output");
    }
    gpu.decode(&prompt, &[0, 2], &mut apart).unwrap();
    same(
        &apart,
        &fused,
        tol.logits_nmse,
        "logits after the encoder graph",
    );
    gpu.keep_encoder_laps(true);
    gpu.encode(&mel).unwrap();
    assert!(!gpu.encoder_graphed(), "timed encodes run directly");
    let (mut lc, mut lg) = (vec![0f32; 2 * nv], vec![0f32; 2 * nv]);
    cpu.decode(&prompt, &[0, 2], &mut lc).unwrap();
    gpu.decode(&prompt, &[0, 2], &mut lg).unwrap();
    compare_logits("prompt", &lg, &lc, nv, &tol);

    // Greedy steps, both fed the CPU's choice so they stay on one path.
    let (mut lc, mut lg) = (lc[nv..].to_vec(), vec![0f32; nv]);
    for step in 0..3 {
        let tok = [argmax(&lc) as u32];
        cpu.decode(&tok, &[0], &mut lc).unwrap();
        gpu.decode(&tok, &[0], &mut lg).unwrap();
        compare_logits(&format!("greedy step {step}"), &lg, &lc, nv, &tol);
    }
    // A step timing its op groups runs them directly (no graph) and computes the same.
    assert!(
        gpu.step_laps().is_empty(),
        "steps time nothing unless asked"
    );
    gpu.keep_step_laps(true);
    let tok = [argmax(&lc) as u32];
    cpu.decode(&tok, &[0], &mut lc).unwrap();
    let t = std::time::Instant::now();
    gpu.decode(&tok, &[0], &mut lg).unwrap();
    let wall = t.elapsed();
    gpu.keep_step_laps(false);
    compare_logits("timed greedy step", &lg, &lc, nv, &tol);
    let groups = [
        "embed",
        "self q/k/v",
        "self attention",
        "self out",
        "cross q",
        "cross attention",
        "cross out",
        "mlp",
        "logits",
        "download",
    ];
    check_laps("step", gpu.step_laps(), &groups, wall);
    assert_eq!(gpu.text_len(), cpu.text_len());
    // One-token steps at F16 replay one captured graph at each new position.
    let want = usize::from(p == Precision::F16 && graphs);
    assert_eq!(gpu.step_graphs(), want, "step graphs after greedy steps");

    // Beams: broadcast, one token each, then a permutation with a repeat and two tokens each.
    cpu.reorder(&[0, 0, 0]).unwrap();
    gpu.reorder(&[0, 0, 0]).unwrap();
    let (mut bc, mut bg) = (vec![0f32; 3 * nv], vec![0f32; 3 * nv]);
    let toks = [11u32, 12, 13];
    cpu.decode_batch(&toks, 3, &mut bc).unwrap();
    gpu.decode_batch(&toks, 3, &mut bg).unwrap();
    compare_logits("batch of 3", &bg, &bc, nv, &tol);
    assert_eq!(gpu.step_graphs(), 2 * want, "a graph per batch size");
    cpu.reorder(&[2, 2, 0]).unwrap();
    gpu.reorder(&[2, 2, 0]).unwrap();
    let toks = [21u32, 22, 23, 24, 25, 26];
    cpu.decode_batch(&toks, 3, &mut bc).unwrap();
    gpu.decode_batch(&toks, 3, &mut bg).unwrap();
    compare_logits("reordered batch, 2 tokens each", &bg, &bc, nv, &tol);
    cpu.reorder(&[1]).unwrap();
    gpu.reorder(&[1]).unwrap();
    let (mut lc, mut lg) = (vec![0f32; nv], vec![0f32; nv]);
    cpu.decode(&[31], &[0], &mut lc).unwrap();
    gpu.decode(&[31], &[0], &mut lg).unwrap();
    compare_logits("back to one sequence", &lg, &lc, nv, &tol);
    // That sequence reads rows another slot wrote: growing past the cache's three slots
    // keeps every slot's rows, not only the batch's.
    cpu.reorder(&[0, 0, 0, 0, 0]).unwrap();
    gpu.reorder(&[0, 0, 0, 0, 0]).unwrap();
    let (mut gc, mut gg) = (vec![0f32; 5 * nv], vec![0f32; 5 * nv]);
    cpu.decode_batch(&[41, 42, 43, 44, 45], 5, &mut gc).unwrap();
    gpu.decode_batch(&[41, 42, 43, 44, 45], 5, &mut gg).unwrap();
    compare_logits("grown to 5 from one", &gg, &gc, nv, &tol);
    cpu.reorder(&[3]).unwrap();
    gpu.reorder(&[3]).unwrap();

    // Word alignment: a whole sequence from position 0, the cache left alone.
    let seq: Vec<u32> = [prompt.as_slice(), &[40, 41, 42, 43, 44]].concat();
    let heads = [(0, 1), (h.n_text_layer - 1, 0), (0, 0)];
    let (mut ac, mut ag) = (vec![0f32; 2 * nv], vec![0f32; 2 * nv]);
    let sc = cpu
        .align(&seq, &heads, &[0, seq.len() - 1], &mut ac)
        .unwrap();
    let sg = gpu
        .align(&seq, &heads, &[0, seq.len() - 1], &mut ag)
        .unwrap();
    assert_eq!(sg.len(), heads.len() * seq.len() * h.n_audio_ctx);
    let e = nmse(&sg, &sc);
    println!(
        "align scores: nmse {e:.3e}, max abs diff {:.3e}",
        max_abs_diff(&sg, &sc)
    );
    // The CPU's keys are f16 (relative error up to 2^-11 each: nmse ~1e-7), the GPU's f32.
    assert!(e <= tol.logits_nmse.max(5e-7), "align scores nmse {e:.3e}");
    compare_logits("align", &ag, &ac, nv, &tol);
    assert!(gpu
        .align(&seq, &[(h.n_text_layer, 0)], &[0], &mut ag[..nv])
        .is_err());
    // The batch and its cache are as they were.
    assert_eq!((gpu.batch(), gpu.text_len()), (cpu.batch(), cpu.text_len()));
    cpu.decode(&[32], &[0], &mut lc).unwrap();
    gpu.decode(&[32], &[0], &mut lg).unwrap();
    compare_logits("a step after align", &lg, &lc, nv, &tol);

    // A new text over the same audio.
    cpu.reset_text();
    gpu.reset_text();
    cpu.decode(&prompt[..2], &[1], &mut lc).unwrap();
    gpu.decode(&prompt[..2], &[1], &mut lg).unwrap();
    compare_logits("after reset_text", &lg, &lc, nv, &tol);
    assert_eq!((gpu.batch(), gpu.text_len()), (cpu.batch(), cpu.text_len()));
    // The reduction reads logits, whatever made them: once per model, at f16.
    if p == Precision::F16 && !f.tensors.values().any(|t| t.dtype.is_quantized()) {
        check_shortlists(&mut gpu, &prompt, nv, graphs);
    }
    tol.same.get()
}

/// `set_audio_ctx` on the GPU against the CPU's, at each length in `lengths` in turn: the
/// encoder output (the first `ctx` positions), a prompt's logits, greedy steps (graphed at
/// f16) and the alignment scores, from two encodes each, the second replaying the encoder
/// graph captured for that length (a new length's first encode runs directly). A change of length drops the audio encoded before; the
/// same length again keeps it; lengths outside 1..=n_audio_ctx are refused.
fn check_audio_ctx(
    f: &WhisperFile,
    p: Precision,
    gpu_model: Arc<CudaWhisper>,
    attention: Option<AttentionPath>,
    lengths: &[Option<usize>],
) {
    let h = f.hparams;
    let nv = h.n_vocab;
    println!(
        "{} {p:?} audio_ctx on {}",
        f.path.display(),
        gpu_model.device()
    );
    let tol = tolerance(p);
    let graphs = std::env::var_os("SOTTO_CUDA_GRAPHS").is_none_or(|v| v != "0");
    let mut cpu = Session::new(cpu_reference(f), 0).unwrap();
    let mut gpu = CudaSession::new(gpu_model).unwrap();
    if let Some(a) = attention {
        gpu.set_attention(a).unwrap();
    }
    for bad in [0, h.n_audio_ctx + 1] {
        let err = gpu.set_audio_ctx(Some(bad)).unwrap_err();
        assert!(err.to_string().contains("n_audio_ctx"), "{err}");
    }
    assert_eq!(gpu.audio_ctx(), h.n_audio_ctx);
    let window = h.n_mels * 2 * h.n_audio_ctx;
    let mels = [values(window, 97, 1.2), values(window, 96, 1.2)];
    let prompt = [(nv - 3) as u32, 7, (nv / 2) as u32];
    let heads = [(0, 1), (h.n_text_layer - 1, 0)];
    let (mut lc, mut lg) = (vec![0f32; nv], vec![0f32; nv]);
    let mut encodes = 0;
    for &ctx in lengths {
        let n = ctx.unwrap_or(h.n_audio_ctx);
        let changed = n != gpu.audio_ctx();
        cpu.set_audio_ctx(ctx).unwrap();
        gpu.set_audio_ctx(ctx).unwrap();
        assert_eq!(gpu.audio_ctx(), n);
        if encodes > 0 {
            // The audio of the last length is gone when the length changed, else kept.
            let got = gpu.decode(&prompt, &[2], &mut lg);
            assert_eq!(got.is_ok(), !changed, "audio_ctx {n}: {got:?}");
            assert_eq!(cpu.decode(&prompt, &[2], &mut lc).is_ok(), !changed);
        }
        if changed {
            encodes = 0;
        }
        for mel in &mels {
            cpu.encode(mel).unwrap();
            gpu.encode(mel).unwrap();
            // A new length's first encode runs directly, as a session's first does.
            assert_eq!(
                gpu.encoder_graphed(),
                graphs && encodes > 0,
                "audio_ctx {n}: {:?}",
                gpu.encoder_graph_error()
            );
            encodes += 1;
            let enc = gpu.encoder_output().unwrap();
            assert_eq!(enc.len(), n * h.n_audio_state);
            let e = nmse(&enc, cpu.encoder_output());
            println!("audio_ctx {n}: encoder output nmse {e:.3e}");
            assert!(e <= tol.enc_nmse, "audio_ctx {n}: encoder nmse {e:.3e}");
            cpu.decode(&prompt, &[2], &mut lc).unwrap();
            gpu.decode(&prompt, &[2], &mut lg).unwrap();
            compare_logits(&format!("audio_ctx {n}: prompt"), &lg, &lc, nv, &tol);
            for step in 0..3 {
                let tok = [argmax(&lc) as u32];
                cpu.decode(&tok, &[0], &mut lc).unwrap();
                gpu.decode(&tok, &[0], &mut lg).unwrap();
                let what = format!("audio_ctx {n}: greedy step {step}");
                compare_logits(&what, &lg, &lc, nv, &tol);
            }
        }
        let seq: Vec<u32> = [prompt.as_slice(), &[40, 41, 42]].concat();
        let (mut ac, mut ag) = (vec![0f32; nv], vec![0f32; nv]);
        let sc = cpu.align(&seq, &heads, &[seq.len() - 1], &mut ac).unwrap();
        let sg = gpu.align(&seq, &heads, &[seq.len() - 1], &mut ag).unwrap();
        assert_eq!(sg.len(), heads.len() * seq.len() * n);
        assert_eq!(sg.len(), sc.len());
        let e = nmse(&sg, &sc);
        assert!(e <= tol.logits_nmse.max(5e-7), "align scores nmse {e:.3e}");
        compare_logits(&format!("audio_ctx {n}: align"), &ag, &ac, nv, &tol);
    }
}

/// Steps whose rows the GPU reduces to shortlist records equal the host's reduction of the
/// same steps' whole rows (`sotto_decode::Shortlists::reduce`): the prompt's rows, a greedy
/// step, and a batch after a reorder, each run twice from a reset.
fn check_shortlists(gpu: &mut CudaSession, prompt: &[u32], nv: usize, graphs: bool) {
    use sotto_cuda::ShortlistOf;
    use sotto_decode::{ShortlistSpec, Shortlists};
    let text_end = nv - 20;
    let pinned = [1u32, 5, 7, (nv / 3) as u32, (text_end - 1) as u32];
    let specs = [(3, &pinned[..]), (1, &[][..]), (10, &pinned[..2])];
    // Step graphs with their copies inside, then with the copies queued around them.
    let cases = (specs.iter().map(|&s| (s, true))).chain(specs.iter().map(|&s| (s, false)));
    for ((top, pinned), copies) in cases {
        if gpu.step_graph_copies() != copies {
            gpu.set_step_graph_copies(copies);
        }
        // Each records step of one token per sequence replays a graph of its own, beside
        // the graphs of whole rows.
        let new_graph = usize::from(graphs);
        let spec = ShortlistSpec::new(nv, text_end, top, pinned);
        let list = ShortlistOf {
            text_end,
            top,
            pinned,
        };
        let mut host = Shortlists::new(spec.clone());
        let mut records = vec![0f32; 3 * spec.record_len()];
        let compare = |what: &str, host: &Shortlists, got: &[f32]| {
            let want = host.records();
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let same = g.to_bits() == w.to_bits()
                    || (i % spec.record_len() == 1 && (g - w).abs() <= 1e-5 * w.abs());
                assert!(same, "{what}, top {top}: word {i}: {g} vs {w}");
            }
        };
        // The prompt's rows 0 and 2.
        gpu.reset_text();
        gpu.decode(prompt, &[0, 2], host.full_rows(2)).unwrap();
        host.reduce();
        gpu.reset_text();
        let r = &mut records[..2 * spec.record_len()];
        gpu.decode_shortlists(prompt, &[0, 2], list, r).unwrap();
        compare("prompt", &host, r);
        // A greedy step after it.
        gpu.decode(&[9], &[0], host.full_rows(1)).unwrap();
        host.reduce();
        gpu.reset_text();
        gpu.decode(prompt, &[2], &mut vec![0f32; nv]).unwrap();
        let r = &mut records[..spec.record_len()];
        let before = gpu.step_graphs();
        gpu.decode_shortlists(&[9], &[0], list, r).unwrap();
        compare("greedy step", &host, r);
        let want = before + new_graph;
        assert_eq!(gpu.step_graphs(), want, "a greedy records graph, top {top}");
        // A batch of 3 after a reorder.
        gpu.reorder(&[0, 0, 0]).unwrap();
        gpu.decode_batch(&[4, 5, 6], 3, host.full_rows(3)).unwrap();
        host.reduce();
        gpu.reset_text();
        gpu.decode(prompt, &[2], &mut vec![0f32; nv]).unwrap();
        gpu.decode(&[9], &[0], &mut vec![0f32; nv]).unwrap();
        gpu.reorder(&[0, 0, 0]).unwrap();
        let before = gpu.step_graphs();
        gpu.decode_batch_shortlists(&[4, 5, 6], 3, list, &mut records)
            .unwrap();
        compare("batch of 3", &host, &records);
        let want = before + new_graph;
        assert_eq!(gpu.step_graphs(), want, "a batch records graph, top {top}");
        assert_eq!(gpu.step_graph_error(), None);
    }
    gpu.set_step_graph_copies(true);
    // Bad requests fail before anything runs: the session is unchanged.
    let len = gpu.text_len();
    let list = |top, pinned| ShortlistOf {
        text_end: nv - 20,
        top,
        pinned,
    };
    let rec = |top: usize, p: usize| vec![0f32; 3 * (2 + 2 * top + p + 20)];
    let past_text = [(nv - 20) as u32];
    let bad = [
        (list(3, &[]), rec(3, 0)[1..].to_vec()),
        (list(65, &[]), rec(65, 0)),
        (list(3, &[5, 2]), rec(3, 2)),
        (list(3, &past_text), rec(3, 1)),
    ];
    for (l, mut r) in bad {
        assert!(gpu
            .decode_batch_shortlists(&[1, 2, 3], 3, l, &mut r)
            .is_err());
    }
    assert_eq!(gpu.text_len(), len);
}

#[test]
fn small_synthetic_f32() {
    check_model(&synthetic(SMALL), Precision::F32);
}

#[test]
fn small_synthetic_f16() {
    check_model(&synthetic(SMALL), Precision::F16);
}

#[test]
fn tiny_shaped_synthetic_f32() {
    check_model(&synthetic(TINY_SHAPES), Precision::F32);
}

#[test]
fn tiny_shaped_synthetic_f16() {
    check_model(&synthetic(TINY_SHAPES), Precision::F16);
}

/// The tensor-core attention at the encoder's real size (1500 keys, 6 heads).
#[test]
fn tiny_shaped_synthetic_f16_mma_attention() {
    check_model_with(
        &synthetic(TINY_SHAPES),
        Precision::F16,
        Some(AttentionPath::Mma),
    );
}

/// Weights kept in ggml blocks on the device: decoder steps through the quantized
/// matrix-vector kernels, the encoder and prompt passes through dequantization and cuBLAS.
#[test]
fn small_synthetic_quantized() {
    for t in [QuantType::Q8_0, QuantType::Q5_1, QuantType::Q4_0] {
        check_model(&quantized(synthetic(SMALL), t), Precision::F16);
    }
}

/// As above at f32: the decoder's products in blocks for every row count (`MMV_Q8`).
#[test]
fn small_synthetic_quantized_f32() {
    for t in [QuantType::Q8_0, QuantType::Q4_1, QuantType::Q4_0] {
        check_model(&quantized(synthetic(SMALL), t), Precision::F32);
    }
}

/// The CUDA session's host logic (buffers, offsets, launch arguments, the cache reorder)
/// with every kernel in host emulation, against the CPU session: runs without a GPU.
#[test]
fn small_synthetic_emulated() {
    let f = synthetic(SMALL);
    check_emulated(&f, Precision::F32, Schedule::Forward);
    check_emulated(&f, Precision::F16, Schedule::Forward);
}

#[test]
fn small_synthetic_quantized_emulated() {
    for t in [QuantType::Q8_0, QuantType::Q5_1, QuantType::Q4_0] {
        check_emulated(
            &quantized(synthetic(SMALL), t),
            Precision::F16,
            Schedule::Forward,
        );
    }
}

/// At f32 the decoder keeps its blocks and every product with them quantizes its input
/// rows as the CPU does (`MMV_Q8`), so most logits are the CPU's bit for bit: measured, 28
/// of these 44 comparisons (each type's prompt, steps, batches and alignment), and none
/// with `SOTTO_CUDA_Q8=0`. The rest differ where an input an ulp off the CPU's (layer
/// norm and attention sum in their own order) rounded to the next 8-bit code.
#[test]
fn small_synthetic_quantized_emulated_f32() {
    let (mut same, mut all) = (0, 0);
    for t in [
        QuantType::Q4_0,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q4_1,
    ] {
        let (s, a) = check_emulated(
            &quantized(synthetic(SMALL), t),
            Precision::F32,
            Schedule::Forward,
        );
        (same, all) = (same + s, all + a);
    }
    println!("{same} of {all} logits bit for bit the CPU's");
    let q8 = std::env::var_os("SOTTO_CUDA_Q8").is_none_or(|v| v != "0");
    if q8 && all > 0 {
        assert!(
            2 * same >= all,
            "only {same} of {all} logits bit for bit the CPU's"
        );
    }
}

/// As above with every launch's blocks, and each barrier phase's threads, in reverse: a
/// race between them changes the session's outputs in one of the two orders.
#[test]
fn small_synthetic_emulated_in_reverse() {
    check_emulated(&synthetic(SMALL), Precision::F16, Schedule::Reverse);
    check_emulated(
        &quantized(synthetic(SMALL), QuantType::Q5_1),
        Precision::F16,
        Schedule::Reverse,
    );
}

/// The tensor-core flash attention (`SOTTO_CUDA_ATTENTION=mma`) in a whole session, in
/// both orders: the encoder's self-attention and the prompt's cross-attention take it.
#[test]
fn small_synthetic_emulated_mma_attention() {
    for s in [Schedule::Forward, Schedule::Reverse] {
        check_emulated_with(
            &synthetic(SMALL),
            Precision::F16,
            s,
            Some(AttentionPath::Mma),
        );
    }
}

/// Several windows in one session, as `sotto transcribe --batch-size` decodes them: each
/// sequence attends to its own window's cross K/V, through the prompts, batched steps
/// (graphs at f16), reorders that mix and then regroup the windows, `select_window` and
/// word alignment, against the CPU session doing the same.
#[test]
fn windows_decode_together_emulated() {
    let f = synthetic(SMALL);
    let (h, nv) = (f.hparams, f.hparams.n_vocab);
    for p in [Precision::F32, Precision::F16] {
        let Some(gpu_model) = emulated(&f, p, Schedule::Forward) else {
            return;
        };
        let tol = tolerance(p);
        let mut cpu = Session::new(cpu_reference(&f), 0).unwrap();
        let mut gpu = CudaSession::new(gpu_model).unwrap();
        let mels: Vec<Vec<f32>> = (0..3)
            .map(|i| values(h.n_mels * 2 * h.n_audio_ctx, 90 + i, 1.2))
            .collect();
        let refs: Vec<&[f32]> = mels.iter().map(|m| m.as_slice()).collect();
        cpu.encode_windows(&refs).unwrap();
        gpu.encode_windows(&refs).unwrap();
        assert_eq!((gpu.batch(), gpu.windows(), gpu.text_len()), (3, 3, 0));

        // Each window's two-token prompt in one pass.
        let prompt = [nv as u32 - 3, 7, nv as u32 - 3, 9, nv as u32 - 3, 11];
        let (mut lc, mut lg) = (vec![0f32; 3 * nv], vec![0f32; 3 * nv]);
        cpu.decode_batch(&prompt, 3, &mut lc).unwrap();
        gpu.decode_batch(&prompt, 3, &mut lg).unwrap();
        compare_logits("three windows' prompts", &lg, &lc, nv, &tol);
        assert!(
            max_abs_diff(&lg[..nv], &lg[nv..2 * nv]) > 1e-3,
            "the windows' sequences read different audio"
        );

        // Beams out of window order, then regrouped: the same batch size with other
        // windows, so a captured step must not replay the old ones; then more sequences
        // than a step graph takes.
        let rounds: [&[usize]; 3] = [
            &[2, 2, 0, 1, 1],
            &[4, 3, 2, 1, 0],
            &[0, 0, 0, 1, 1, 2, 2, 3, 4],
        ];
        for (round, src) in rounds.iter().enumerate() {
            cpu.reorder(src).unwrap();
            gpu.reorder(src).unwrap();
            let b = src.len();
            let (mut lc, mut lg) = (vec![0f32; b * nv], vec![0f32; b * nv]);
            for step in 0..2 {
                let toks: Vec<u32> = (0..b).map(|i| (20 + 7 * i + step + round) as u32).collect();
                cpu.decode_batch(&toks, b, &mut lc).unwrap();
                gpu.decode_batch(&toks, b, &mut lg).unwrap();
                compare_logits(
                    &format!("{p:?} round {round} step {step}"),
                    &lg,
                    &lc,
                    nv,
                    &tol,
                );
            }
        }

        // One window alone: a prompt, then its alignment scores.
        cpu.select_window(1).unwrap();
        gpu.select_window(1).unwrap();
        let (mut lc, mut lg) = (vec![0f32; nv], vec![0f32; nv]);
        cpu.decode(&prompt[2..4], &[1], &mut lc).unwrap();
        gpu.decode(&prompt[2..4], &[1], &mut lg).unwrap();
        compare_logits("window 1 alone", &lg, &lc, nv, &tol);
        let (tokens, heads) = ([nv as u32 - 3, 5, 6, 7], [(0, 1), (1, 0)]);
        let (mut ac, mut ag) = (vec![0f32; nv], vec![0f32; nv]);
        let sc = cpu.align(&tokens, &heads, &[3], &mut ac).unwrap();
        let sg = gpu.align(&tokens, &heads, &[3], &mut ag).unwrap();
        compare_logits("window 1 aligned", &ag, &ac, nv, &tol);
        assert!(nmse(&sg, &sc) <= tol.enc_nmse * 1e3, "align scores");
        assert!(gpu.select_window(3).is_err(), "three windows encoded");
        // One window again, after three.
        gpu.encode(&mels[2]).unwrap();
        assert_eq!((gpu.batch(), gpu.windows()), (1, 1));
    }
}

/// Decoder steps' cross-attention over more keys than one block scores takes the split
/// kernel (a block per (row, head, chunk of keys), the last of each merging), in graphs
/// and out.
#[test]
fn split_cross_attention_emulated() {
    let Some(e) = common::emu::get() else {
        return;
    };
    let h = Hparams {
        n_audio_ctx: 300,
        ..SMALL
    };
    let f = synthetic(h);
    let dev = Arc::new(common::emu::EmuDevice::new(e, Schedule::Forward));
    let model = CudaWhisper::on_host(&f, Precision::F16, dev.clone()).unwrap();
    check_against(&f, Precision::F16, cpu_reference(&f), Arc::new(model), None);
    let launches = dev.take_launches();
    let split = launches.get("sotto_attention_split").copied().unwrap_or(0);
    assert!(split > 0, "{launches:?}");
    // Fused (the default), each split launch merges its chunks itself; check_against
    // turns fusion off for a while, whose split launches are followed by a merge.
    let merges = launches.get("sotto_attention_merge").copied().unwrap_or(0);
    assert!(merges < split, "{launches:?}");
}

/// Shorter windows (whisper.cpp's `audio_ctx`) in host emulation: lengths that split the
/// cross-attention over chunks and lengths that do not, one position, and back to the whole
/// window, at both precisions and on the tensor-core attention.
#[test]
fn audio_ctx_emulated() {
    let f = synthetic(Hparams {
        n_audio_ctx: 300,
        ..SMALL
    });
    let lengths = [Some(149), Some(1), Some(64), None, Some(300), Some(75)];
    for (p, a) in [
        (Precision::F32, None),
        (Precision::F16, None),
        (Precision::F16, Some(AttentionPath::Mma)),
    ] {
        let Some(model) = emulated(&f, p, Schedule::Forward) else {
            return;
        };
        check_audio_ctx(&f, p, model, a, &lengths);
    }
}

/// As above on the GPU, at tiny's shapes (1500 positions): whisper-stream's 500 (10 s), an
/// odd length and the whole window on the default attention, 500 on the others and at f32.
#[test]
fn audio_ctx_tiny_shaped_on_gpu() {
    let f = synthetic(TINY_SHAPES);
    let runs = [
        (Precision::F16, None, &[Some(500), Some(749), None][..]),
        (Precision::F16, Some(AttentionPath::Blas), &[Some(500)][..]),
        (Precision::F16, Some(AttentionPath::Rows), &[Some(500)][..]),
        (Precision::F32, None, &[Some(500)][..]),
    ];
    for (p, a, lengths) in runs {
        let Some(model) = upload(&f, p) else {
            return;
        };
        check_audio_ctx(&f, p, model, a, lengths);
    }
}

/// The fused encoder's launches (kernels and cuBLAS products), counted in emulation
/// against the one launch per step: per block, q, k and v are one product split in one
/// launch that adds their biases (2 products and 1 launch fewer), the two layer norms
/// narrow their outputs (2), the GELU launch narrows its (1) and the out-projection's and
/// MLP's biases go into the next norm (2); im2col narrows its columns (2) and the positions
/// go into the first norm (1); ln_post narrows the cross K/V's input (1); and each group of
/// CROSS_GROUP decoder layers' cross K and V is one product and one split (2·G - 1
/// products and G - 1 bias launches fewer). Only the attention output is narrowed alone.
#[test]
fn fused_encoder_saves_launches() {
    let Some(e) = common::emu::get() else {
        return;
    };
    let f = synthetic(SMALL);
    let dev = Arc::new(common::emu::EmuDevice::new(e, Schedule::Forward));
    let model = CudaWhisper::on_host(&f, Precision::F16, dev.clone()).unwrap();
    let mut s = CudaSession::new(Arc::new(model)).unwrap();
    let mel = values(SMALL.n_mels * 2 * SMALL.n_audio_ctx, 5, 1.0);
    let mut counts = Vec::new();
    for fuse in [false, true] {
        s.fuse_launches(fuse);
        dev.take_launches();
        s.encode(&mel).unwrap();
        counts.push(dev.take_launches());
    }
    let [apart, fused] = &counts[..] else {
        unreachable!()
    };
    println!("one launch per step: {apart:?}\nfused: {fused:?}");
    let total = |c: &std::collections::BTreeMap<String, usize>| c.values().sum::<usize>();
    let (blocks, group) = (SMALL.n_audio_layer, 2);
    let groups = SMALL.n_text_layer.div_ceil(group);
    assert_eq!(SMALL.n_text_layer % group, 0, "whole groups below");
    let saved = 4 + 8 * blocks + groups * (3 * group - 2);
    assert_eq!(total(apart) - total(fused), saved);
    assert_eq!(fused.get("sotto_f32_to_f16"), Some(&blocks));
    assert_eq!(fused.get("sotto_add_f32"), None);
    assert_eq!(fused.get("sotto_split_bias"), Some(&(blocks + groups)));
    // conv1 and conv2; per block q/k/v, the out-projection and the MLP's two; the groups.
    let products = 2 + 4 * blocks + groups;
    assert_eq!(fused.get("cublasGemmEx"), Some(&products));
    // The tensor-core attention writes its output narrowed too: nothing is narrowed alone.
    s.set_attention(AttentionPath::Mma).unwrap();
    s.encode(&mel).unwrap();
    let mma = dev.take_launches();
    assert_eq!(mma.get("sotto_flash_attention_mma"), Some(&blocks));
    assert_eq!(mma.get("sotto_f32_to_f16"), None, "{mma:?}");
}

/// A decoder step's fused launches, counted in emulation against the one launch per step:
/// each block's three layer norms go into the products that read them (q/k/v, cross q,
/// MLP in) and each split attention (self and cross) merges in its own launch: 5 launches
/// a block fewer, with the same logits bit for bit. At f16 (a captured graph) and on
/// a quantized model at f32 (the products quantize the normalised rows to q8).
#[test]
fn fused_decoder_step_saves_launches() {
    let Some(e) = common::emu::get() else {
        return;
    };
    // Keys past one chunk of split attention, both over the audio and over the cache.
    let h = Hparams {
        n_audio_ctx: 300,
        n_text_ctx: 100,
        ..SMALL
    };
    for (f, p) in [
        (synthetic(h), Precision::F16),
        (quantized(synthetic(h), QuantType::Q4_1), Precision::F32),
    ] {
        let dev = Arc::new(common::emu::EmuDevice::new(e, Schedule::Forward));
        let model = CudaWhisper::on_host(&f, p, dev.clone()).unwrap();
        let mut s = CudaSession::new(Arc::new(model)).unwrap();
        s.encode(&values(h.n_mels * 2 * h.n_audio_ctx, 5, 1.0))
            .unwrap();
        let nv = h.n_vocab;
        let mut runs = Vec::new();
        for fuse in [true, false] {
            s.fuse_launches(fuse);
            s.reset_text();
            let mut prompt = vec![0f32; nv];
            s.decode(&[7, 3, 11], &[2], &mut prompt).unwrap();
            // Two greedy steps: at f16 the first captures the step's graph, the second
            // replays it, and that one is counted.
            let mut step = vec![0f32; nv];
            s.decode_batch(&[5], 1, &mut step).unwrap();
            dev.take_launches();
            s.decode_batch(&[9], 1, &mut step).unwrap();
            runs.push((prompt, step, dev.take_launches()));
        }
        let [(p_fused, s_fused, fused), (p_apart, s_apart, apart)] = &runs[..] else {
            unreachable!()
        };
        println!("{p:?} step, fused: {fused:?}\napart: {apart:?}");
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(
            bits(p_fused) == bits(p_apart),
            "{p:?}: prompt logits differ"
        );
        assert!(bits(s_fused) == bits(s_apart), "{p:?}: step logits differ");
        let total = |c: &std::collections::BTreeMap<String, usize>| c.values().sum::<usize>();
        assert_eq!(total(apart) - total(fused), 5 * h.n_text_layer, "{p:?}");
        // The norm before the vocabulary is the step's only one; no merge launch is left.
        assert_eq!(fused.get("sotto_layer_norm"), Some(&1), "{p:?}");
        assert_eq!(fused.get("sotto_attention_merge"), None, "{p:?}");
        assert_eq!(
            fused.get("sotto_attention_split"),
            Some(&(2 * h.n_text_layer))
        );
    }
}

/// tiny.en itself where it is in the sotto cache (`SOTTO_CACHE_DIR`; scripts/gpu-check.sh
/// carries it as a q4_0 ggml file); never fetched here, since the GPU machine has no network.
#[test]
fn tiny_en_matches_cpu() {
    let Some(dir) = sotto_hub::Hub::from_env().cached("tiny.en") else {
        println!("skipped: tiny.en is not in the sotto cache");
        return;
    };
    if !sotto_cuda::driver_present() {
        assert!(
            !require_cuda(),
            "SOTTO_REQUIRE_CUDA is set, but there is no libcuda"
        );
        println!("skipped: no CUDA driver (libcuda) found");
        return;
    }
    let f = sotto_formats::load(&dir).expect("tiny.en loads");
    check_model(&f, Precision::F32);
    check_model(&f, Precision::F16);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let f = synthetic(SMALL);
    let Some(model) = upload(&f, Precision::F16) else {
        return;
    };
    let h = f.hparams;
    let mut s = CudaSession::new(model).unwrap();
    let mut logits = vec![0f32; h.n_vocab];
    let input = |r: Result<(), CudaError>| matches!(r, Err(CudaError::Input { .. }));
    assert!(
        input(s.decode(&[1], &[0], &mut logits)),
        "decode before encode"
    );
    assert!(input(s.encode(&[0.0; 7])), "short mel");
    s.encode(&values(h.n_mels * 2 * h.n_audio_ctx, 5, 1.0))
        .unwrap();
    assert!(
        input(s.decode(&[h.n_vocab as u32], &[0], &mut logits)),
        "token"
    );
    assert!(input(s.decode(&[1], &[1], &mut logits)), "row");
    assert!(
        input(s.decode(&[1, 2], &[0, 1], &mut logits)),
        "logits length"
    );
    assert!(input(s.decode(&[], &[], &mut [])), "no tokens");
    let long = vec![1u32; h.n_text_ctx + 1];
    assert!(input(s.decode(&long, &[0], &mut logits)), "past n_text_ctx");
    assert!(
        input(s.decode_batch(&[1, 2], 2, &mut logits)),
        "batch beyond cache"
    );
    assert!(input(s.reorder(&[1])), "reorder source");
    assert!(input(s.reorder(&[])), "empty reorder");
    assert_eq!(s.text_len(), 0, "failed calls change nothing");
    s.decode(&[1], &[0], &mut logits).unwrap();
    assert_eq!(s.text_len(), 1);
}

#[test]
fn without_a_driver_loading_is_an_error() {
    let mut f = synthetic(SMALL);
    if !sotto_cuda::driver_present() {
        assert!(matches!(
            CudaWhisper::new(&f, 0, Precision::F16),
            Err(CudaError::NoDriver)
        ));
    }
    // Shapes the kernels cannot take are refused before the GPU is touched.
    f.hparams.n_audio_head = 3;
    let e = CudaWhisper::new(&f, 0, Precision::F16).unwrap_err();
    assert!(e.to_string().contains("multiple of the head count"), "{e}");
    f.hparams.n_audio_head = 2;
    f.hparams.n_audio_ctx = 20_000;
    let e = CudaWhisper::new(&f, 0, Precision::F16).unwrap_err();
    assert!(e.to_string().contains("shared memory"), "{e}");
}

#[test]
fn synthetic_models_build_on_the_cpu() {
    for h in [SMALL, TINY_SHAPES] {
        let f = synthetic(h);
        let m = Whisper::from_file(&f).expect("synthetic model is well-formed");
        assert_eq!(m.n_frames(), 2 * h.n_audio_ctx);
    }
    assert_eq!(argmax(&[0.0, 3.0, -1.0, 3.0]), 1);
    assert!(nmse(&[1.0, 2.0], &[1.0, 2.5]) > 0.0);
}

/// A driver that refuses a step graph's copies leaves the session's steps on graphs of the
/// kernels alone, the copies queued around them; one that refuses every capture, on direct
/// launches (and the encoder off its graph too). Each says why, and gives the same logits
/// and records, bit for bit, as a session whose captures all succeed.
#[test]
fn step_graphs_fall_back_emulated() {
    use sotto_cuda::{Captured, ShortlistOf};
    let Some(e) = common::emu::get() else {
        return;
    };
    if std::env::var_os("SOTTO_CUDA_GRAPHS").is_some_and(|v| v == "0") {
        println!("skipped: SOTTO_CUDA_GRAPHS=0");
        return;
    }
    let f = synthetic(SMALL);
    let nv = SMALL.n_vocab;
    let mel = values(SMALL.n_mels * 2 * SMALL.n_audio_ctx, 5, 1.0);
    let list = ShortlistOf {
        text_end: nv - 20,
        top: 3,
        pinned: &[2, 9],
    };
    let record = 2 + 2 * 3 + 2 + 20;
    let mut first: Option<Vec<f32>> = None;
    let refusals: [&[Captured]; 3] = [&[], &[Captured::HostCopy], &[Captured::Launch]];
    for refused in refusals {
        let dev = common::emu::EmuDevice::new(e, Schedule::Forward).refusing(refused);
        let model = CudaWhisper::on_host(&f, Precision::F16, Arc::new(dev)).unwrap();
        let mut s = CudaSession::new(Arc::new(model)).unwrap();
        // Twice: the second encode is the one a graph would run.
        s.encode(&mel).unwrap();
        s.encode(&mel).unwrap();
        let (mut got, mut out, mut rec) = (Vec::new(), vec![0f32; nv], vec![0f32; record]);
        s.decode(&[1, 2, 3], &[2], &mut out).unwrap();
        got.extend(&out);
        for t in [4u32, 5, 6] {
            s.decode(&[t], &[0], &mut out).unwrap();
            s.decode_shortlists(&[t + 10], &[0], list, &mut rec)
                .unwrap();
            got.extend(out.iter().chain(&rec));
        }
        s.reorder(&[0, 0]).unwrap();
        let mut two = vec![0f32; 2 * nv];
        s.decode_batch(&[7, 8], 2, &mut two).unwrap();
        got.extend(&two);
        let why = s.step_graph_error().map(str::to_owned);
        match refused {
            [] => {
                assert!(s.step_graph_copies() && why.is_none(), "{why:?}");
                assert_eq!(s.step_graphs(), 3, "whole rows, records, a batch of 2");
                assert!(s.encoder_graphed());
            }
            [Captured::HostCopy] => {
                assert!(!s.step_graph_copies());
                let why = why.expect("a reason");
                assert!(
                    why.contains("with the copies") && why.contains("HostCopy"),
                    "{why}"
                );
                assert_eq!(s.step_graphs(), 3);
                assert!(
                    s.encoder_graphed(),
                    "the encoder's graph holds no host copy"
                );
            }
            _ => {
                let why = why.expect("a reason");
                assert!(why.contains("Launch"), "{why}");
                assert_eq!(s.step_graphs(), 0);
                assert!(!s.encoder_graphed() && s.encoder_graph_error().is_some());
            }
        }
        match &first {
            None => first = Some(got),
            Some(want) => {
                let same = want
                    .iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same && want.len() == got.len(), "{refused:?}: other values");
            }
        }
    }
}
