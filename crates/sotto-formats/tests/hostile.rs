//! Hostile input: truncated, corrupted and lying files must give `Err`, never a panic,
//! and must never make the loaders allocate in proportion to a claimed count.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use sotto_formats::{ct2, ggml, hf, load, DType, FormatError, Result, Storage, WhisperFile};

/// Records the largest single allocation made on this thread while armed.
struct Tracking;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only records sizes in thread-local cells.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn note(size: usize) {
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// Runs a parser over `bytes` and checks that no single allocation exceeded a small
/// multiple of the input (a vocabulary of N tokens costs N `Vec`s for ≥ 4N bytes).
fn parse<T>(bytes: &[u8], f: impl Fn(&Storage) -> Result<T>) -> Result<T> {
    let storage = Storage::from_vec(bytes.to_vec());
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let out = f(&storage);
    ARMED.with(|a| a.set(false));
    let largest = LARGEST.with(Cell::get);
    assert!(
        largest <= 8 * bytes.len() + 16384,
        "allocated {largest} bytes for a {}-byte input",
        bytes.len()
    );
    out
}

fn parse_ggml(bytes: &[u8]) -> Result<WhisperFile> {
    parse(bytes, |s| ggml::from_storage(s, Path::new("hostile.bin")))
}

fn parse_ct2(bytes: &[u8]) -> Result<WhisperFile> {
    parse(bytes, |s| {
        ct2::from_parts(
            s,
            common::VOCAB_TXT,
            Some("{}"),
            Path::new("hostile/model.bin"),
        )
    })
}

/// A safetensors file of a small random model (the tensors of a 1-layer Whisper).
fn safetensors_good() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let file = common::whisper_file();
        let dir = common::scratch("hostile-safetensors");
        hf::write(&file, &dir).unwrap();
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        bytes
    })
}

/// Parses safetensors bytes: the number of tensors.
fn parse_safetensors(bytes: &[u8]) -> Result<usize> {
    parse(bytes, |s| {
        hf::read_safetensors(s, Path::new("hostile.safetensors")).map(|t| t.len())
    })
}

/// A ggml Silero VAD file: small made-up tensors in the converter's layout.
fn ggml_vad_good() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let w: Vec<f32> = (0..64 * 3).map(|i| i as f32 / 64.0).collect();
        let b: Vec<f32> = (0..64).map(|i| -(i as f32)).collect();
        sotto_formats::ggml_vad::write(
            (6, 2, 0),
            &[
                ("_model.encoder.1.reparam_conv.weight", &[8, 8, 3], &w),
                ("_model.encoder.1.reparam_conv.bias", &[64], &b),
                ("_model.decoder.decoder.2.bias", &[1], &[0.5]),
            ],
        )
    })
}

/// Parses ggml VAD bytes: the number of tensors.
fn parse_ggml_vad(bytes: &[u8]) -> Result<usize> {
    parse(bytes, |s| {
        sotto_formats::ggml_vad::read(s.as_bytes(), Path::new("hostile-vad.bin"))
            .map(|v| v.tensors.len())
    })
}

fn ggml_good() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(common::ggml_bytes)
}

fn ct2_good() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| common::ct2_model().bytes())
}

fn with_i32(bytes: &[u8], at: usize, v: i32) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    b
}

#[test]
fn synthetic_files_are_valid() {
    assert!(parse_ggml(ggml_good()).is_ok());
    assert!(parse_ct2(ct2_good()).is_ok());
    // The field table points at the fields it names.
    let good = ggml_good();
    let at = |k: usize| i32::from_le_bytes(good[k..k + 4].try_into().unwrap());
    let values: Vec<i32> = ggml_header_fields().iter().map(|&(k, _)| at(k)).collect();
    assert_eq!(
        values,
        [8, 3, 4, 2, 1, 2, 4, 2, 1, 2, 2, 201, 4, 1, 3, 20, 1, 3]
    );
}

#[test]
fn lying_token_count_does_not_allocate() {
    // A vocabulary as large as allowed, claimed by a tiny file.
    let bad = with_i32(
        &with_i32(ggml_good(), 4, 1 << 20),
        48 + 8 + 4 * 2 * 201,
        1 << 20,
    );
    assert!(parse_ggml(&bad).is_err());
}

#[test]
fn every_truncation_of_synthetic_ggml_fails() {
    let good = ggml_good();
    for len in 0..good.len() {
        assert!(
            parse_ggml(&good[..len]).is_err(),
            "truncated to {len} bytes parsed"
        );
    }
}

#[test]
fn every_truncation_of_synthetic_ct2_fails() {
    let good = ct2_good();
    for len in 0..good.len() {
        assert!(
            parse_ct2(&good[..len]).is_err(),
            "truncated to {len} bytes parsed"
        );
    }
}

/// Offsets of the i32 fields of the synthetic ggml header: magic, 11 hparams, mel
/// counts, token count, and the first tensor's header.
fn ggml_header_fields() -> Vec<(usize, &'static str)> {
    let hp = common::HP;
    let mut f: Vec<(usize, &str)> = (1..=10).map(|i| (4 * i, "hparam")).collect();
    let mel = 48;
    f.extend([(mel, "n_mel"), (mel + 4, "n_fft")]);
    let vocab = mel + 8 + 4 * hp.n_mels * 201;
    f.push((vocab, "n_tokens"));
    f.push((vocab + 4, "token 0 length"));
    let tokens = 4 * 4 + 1 + 2 + 1; // synthetic vocab: "!", " a", [0], []
    let tensor = vocab + 4 + tokens;
    f.extend([
        (tensor, "n_dims"),
        (tensor + 4, "name_len"),
        (tensor + 8, "ttype"),
        (tensor + 12, "ne[0]"),
    ]);
    f
}

#[test]
fn huge_and_negative_counts_in_ggml_fail() {
    let good = ggml_good();
    for (at, what) in ggml_header_fields() {
        for v in [-1, i32::MIN, i32::MAX, 0x4000_0000, 0x7fff_fff0] {
            let bad = with_i32(good, at, v);
            assert!(parse_ggml(&bad).is_err(), "{what} at {at} = {v} parsed");
        }
    }
    // ftype: unknown and negative types are refused; quantization versions are accepted.
    for v in [-1, 5, 999, i32::MAX] {
        assert!(parse_ggml(&with_i32(good, 44, v)).is_err(), "ftype {v}");
    }
    assert!(
        parse_ggml(&with_i32(good, 44, 2001)).is_ok(),
        "ftype 1 + 2 × 1000 is f16 with qnt version 2"
    );
}

#[test]
fn wrong_magic_and_empty_files_fail() {
    let good = ggml_good();
    let err = parse_ggml(&with_i32(good, 0, 0x12345678))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown magic 0x12345678"), "{err}");
    assert!(parse_ggml(&[]).is_err());
    assert!(parse_ct2(&[]).is_err());

    let dir = common::scratch("hostile-files");
    let junk = dir.join("junk.bin");
    std::fs::write(&junk, b"GGUF\x03\0\0\0 not a legacy ggml file").unwrap();
    let err = load(&junk).unwrap_err();
    assert!(matches!(err, FormatError::Invalid { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("junk.bin") && msg.contains("unknown magic 0x46554747"),
        "{msg}"
    );
    let empty = dir.join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    assert!(load(&empty).unwrap_err().to_string().contains("empty.bin"));
    // A folder without model.bin.
    let folder = dir.join("not-a-model");
    std::fs::create_dir(&folder).unwrap();
    let msg = load(&folder).unwrap_err().to_string();
    assert!(msg.contains("no model.bin"), "{msg}");
    assert!(load(&dir.join("missing")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ct2_overflowing_dims_and_bad_variables_fail() {
    let huge = u32::MAX as usize;
    let mut b = common::ct2_model();
    b.var("encoder/extra", &[huge, huge, huge, huge], 4, vec![]);
    assert!(parse_ct2(&b.bytes()).is_err(), "overflowing dims");
    let mut b = common::ct2_model();
    b.var("encoder/extra", &[3], 9, vec![0; 3]);
    assert!(parse_ct2(&b.bytes()).is_err(), "unknown dtype");
    let mut b = common::ct2_model();
    b.var("encoder/extra", &[4], 4, vec![0; 6]);
    assert!(
        parse_ct2(&b.bytes()).is_err(),
        "byte count disagrees with shape"
    );
    let mut b = common::ct2_model();
    b.alias("decoder/other", "decoder/nowhere");
    assert!(parse_ct2(&b.bytes()).is_err(), "dangling alias");
    // Quantized variables: int8 with a scale per row reads as q / scale; scales that do
    // not fit their variable, zero points (AWQ) and codes without scales are errors.
    let (rows, d) = (common::HP.n_vocab, common::HP.n_text_state);
    let emb = "decoder/embeddings/weight";
    let codes: Vec<u8> = (0..rows * d).map(|i| (i as i8 - 16) as u8).collect();
    let scales = |n: usize, s: f32| -> Vec<u8> { (0..n).flat_map(|_| s.to_le_bytes()).collect() };
    let mut b = common::ct2_model();
    b.set(emb, &[rows, d], 1, codes.clone()).var(
        &format!("{emb}_scale"),
        &[rows],
        0,
        scales(rows, 4.0),
    );
    let file = parse_ct2(&b.bytes()).unwrap();
    let t = &file.tensors["decoder.token_embedding.weight"];
    let want: Vec<f32> = codes.iter().map(|&q| f32::from(q as i8) / 4.0).collect();
    assert_eq!((t.dtype, t.to_f32().unwrap()), (DType::F32, want));
    let scale_name = format!("{emb}_scale");
    let int8 = |b: &mut common::Ct2Builder| {
        b.set(emb, &[rows, d], 1, codes.clone());
    };
    // (what the error says, the variables added to an f16 model: name, shape, f32 scale).
    let cases: [(&str, bool, &str, usize, f32); 6] = [
        ("a F16 tensor", false, &scale_name, rows, 1.0),
        ("with 3 scales", true, &scale_name, 3, 1.0),
        ("holds 0", true, &scale_name, rows, 0.0),
        ("without a", true, "", 0, 0.0),
        (
            "scales a missing variable",
            false,
            "encoder/nothing/weight_scale",
            1,
            1.0,
        ),
        ("AWQ", false, "decoder/embeddings/weight_zero", rows, 1.0),
    ];
    for (want, codes_int8, name, n, value) in cases {
        let mut b = common::ct2_model();
        if codes_int8 {
            int8(&mut b);
        }
        if !name.is_empty() {
            b.var(name, &[n], 0, scales(n, value));
        }
        let err = parse_ct2(&b.bytes()).unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
    // A version we do not know.
    let mut bad = ct2_good().to_vec();
    bad[..4].copy_from_slice(&7u32.to_le_bytes());
    assert!(matches!(
        parse_ct2(&bad),
        Err(FormatError::Unsupported { .. })
    ));
    // Trailing garbage.
    let mut bad = ct2_good().to_vec();
    bad.push(0);
    assert!(parse_ct2(&bad).is_err());
}

#[test]
fn truncations_of_real_headers_fail() {
    // First 2 KiB of tiny.en's model.bin: spec, scalars and the start of the embedding.
    let model = Storage::map_file(&sotto_testdata::model_dir("tiny.en").join("model.bin")).unwrap();
    let head = &model.as_bytes()[..2048];
    let vocab =
        std::fs::read_to_string(sotto_testdata::model_dir("tiny.en").join("vocabulary.txt"))
            .unwrap();
    for len in 0..head.len() {
        let r = parse(&head[..len], |s| {
            ct2::from_parts(s, &vocab, None, Path::new("tiny.en/model.bin"))
        });
        assert!(r.is_err(), "{len}");
    }
    // A real ggml header: hparams, 80×201 mel filters, 50256 tokens, first tensor.
    let src = sotto_formats::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let dir = common::scratch("real-ggml-header");
    let out = dir.join("tiny.bin");
    ggml::write(&src, &common::mel_filters(80), &out).unwrap();
    let full = Storage::map_file(&out).unwrap();
    let mel_end = 56 + 80 * 201 * 4;
    let vocab_end = mel_end + 4 + src.vocab.iter().map(|t| 4 + t.len()).sum::<usize>();
    let cuts = (0..64)
        .chain(mel_end - 8..mel_end + 64)
        .chain((mel_end..vocab_end).step_by(4099))
        .chain(vocab_end..vocab_end + 256);
    for len in cuts {
        assert!(parse_ggml(&full.as_bytes()[..len]).is_err(), "{len}");
    }
    // Windows refuses to delete a file that is still mapped.
    drop(full);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn flips() -> impl Strategy<Value = Vec<(prop::sample::Index, u8)>> {
    prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)
}

fn corrupt(good: &[u8], flips: &[(prop::sample::Index, u8)]) -> Vec<u8> {
    let mut b = good.to_vec();
    for (i, v) in flips {
        let at = i.index(b.len());
        b[at] ^= v | 1;
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sotto_testdata::fuzz_cases(512), ..ProptestConfig::default() })]

    #[test]
    fn corrupted_ggml_never_panics(f in flips()) {
        let _ = parse_ggml(&corrupt(ggml_good(), &f));
    }

    #[test]
    fn corrupted_ct2_never_panics(f in flips()) {
        let _ = parse_ct2(&corrupt(ct2_good(), &f));
    }

    /// A field of the header set to an arbitrary value, then the file cut anywhere.
    #[test]
    fn ggml_field_and_cut(k in 0usize..18, v in any::<i32>(), cut in any::<prop::sample::Index>()) {
        let (at, _) = ggml_header_fields()[k];
        let bad = with_i32(ggml_good(), at, v);
        let len = cut.index(bad.len());
        prop_assert!(parse_ggml(&bad[..len]).is_err());
    }

    #[test]
    fn random_bytes_never_parse(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        prop_assert!(parse_ggml(&bytes).is_err());
        prop_assert!(parse_ct2(&bytes).is_err());
        prop_assert!(parse_safetensors(&bytes).is_err());
        prop_assert!(parse_ggml_vad(&bytes).is_err());
    }

    #[test]
    fn corrupted_ggml_vad_never_panics(f in flips()) {
        let _ = parse_ggml_vad(&corrupt(ggml_vad_good(), &f));
    }

    /// A VAD file cut inside a tensor or the header is an error.
    #[test]
    fn cut_ggml_vad_fails_or_loses_tensors(cut in any::<prop::sample::Index>()) {
        let good = ggml_vad_good();
        if let Ok(n) = parse_ggml_vad(&good[..cut.index(good.len())]) {
            prop_assert!(n < 3);
        }
    }

    #[test]
    fn corrupted_safetensors_never_panic(f in flips()) {
        let _ = parse_safetensors(&corrupt(safetensors_good(), &f));
    }

    /// A valid file cut anywhere is an error.
    #[test]
    fn cut_safetensors_fail(cut in any::<prop::sample::Index>()) {
        let good = safetensors_good();
        prop_assert!(parse_safetensors(&good[..cut.index(good.len())]).is_err());
    }
}
