//! Quantized whisper.cpp files: byte-for-byte agreement with whisper.cpp's own
//! `whisper-quantize`, and quantized models that load back close to their originals.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{element_bound, scratch, write_quantized};
use sotto_formats::{ggml, load, names, SourceFormat};
use sotto_quant::QuantType;
use sotto_testdata::md5;

/// (model, f16 md5, [(type, bytes, md5)]).
type Reference = (
    &'static str,
    &'static str,
    [(&'static str, u64, &'static str); 5],
);

/// whisper.cpp 1.9.3's `whisper-quantize` output from the f16 files of
/// `shared/tools/ct2_to_ggml.py` with openai-whisper's mel filters
/// (`shared/notes/model-formats.md`).
const REFERENCE: [Reference; 2] = [
    (
        "tiny.en",
        "ca560bc86226e05111bdc20e9e9a8ce4",
        [
            ("q8_0", 43_550_778, "79071f2d4ae8fc79c86b3719d234d223"),
            ("q5_1", 32_166_138, "7cc772e50a7f859910e85c01dc47bbaf"),
            ("q5_0", 29_889_210, "a89262b71258c566c79ba698a49f2934"),
            ("q4_1", 27_612_282, "55faf0d37fd83cb796396df1f48aad95"),
            ("q4_0", 25_335_354, "a2ffe3e2aa214117f26f51d5d0e35c84"),
        ],
    ),
    (
        "base",
        "9c2854244c087d6e25d43668fcfcf759",
        [
            ("q8_0", 81_768_585, "d487da1116d1b54c9d1f8c0a59c46106"),
            ("q5_1", 59_707_625, "28d7a5368afc4f40dac98fecda651990"),
            ("q5_0", 55_295_433, "b15daed26a29759c0f93866aaf039573"),
            ("q4_1", 50_883_241, "af4839c571746a1e824b82c9298a3252"),
            ("q4_0", 46_471_049, "4269b2fcf176254dff15e8f9edc97693"),
        ],
    ),
];

/// Mel filters from openai-whisper's `mel_filters.npz` (via `scripts/formats/mel_npz.py`).
fn openai_filters(npz: &std::path::Path, dir: &std::path::Path) -> Vec<f32> {
    let script = sotto_testdata::workspace_root().join("scripts/formats/mel_npz.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--dump")
        .arg(npz)
        .arg("80")
        .arg(dir.join("mel.f32"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sotto_testdata::read_f32(&dir.join("mel.f32"))
}

/// `SOTTO_MEL_FILTERS_NPZ=…/whisper/assets/mel_filters.npz` (openai-whisper's; see
/// `scripts/formats/check_quant_md5.sh`): the f16 files we write must carry the reference
/// md5s, and quantizing them must give whisper.cpp's quantized files exactly, for tiny.en
/// and base at all five types. tiny.en is also quantized straight from its CTranslate2
/// folder, which must give the same bytes. Without the variable the test says so and returns.
#[test]
fn matches_whisper_cpp_quantizer_md5() {
    let Some(npz) = std::env::var_os("SOTTO_MEL_FILTERS_NPZ").map(PathBuf::from) else {
        eprintln!("skipped: SOTTO_MEL_FILTERS_NPZ is not set");
        return;
    };
    let dir = scratch("md5");
    let mel = openai_filters(&npz, &dir);
    let mut failures = Vec::new();
    for (model, f16_md5, quantized) in REFERENCE {
        let ct2 = load(&sotto_testdata::model_dir(model)).unwrap();
        let f16_path = dir.join(format!("{model}-f16.bin"));
        ggml::write(&ct2, &mel, &f16_path).unwrap();
        assert_eq!(md5(&f16_path), f16_md5, "{model} f16 (our writer)");
        let f16 = load(&f16_path).unwrap();
        let filters = f16.mel_filters.clone().unwrap();
        for (name, size, want) in quantized {
            let t = QuantType::parse(name).unwrap();
            let out = dir.join(format!("{model}-{name}.bin"));
            write_quantized(&f16, &filters, &out, t).unwrap();
            let got = md5(&out);
            let len = std::fs::metadata(&out).unwrap().len();
            eprintln!("{model} {name}: {len} bytes, md5 {got} (want {want})");
            if got != want || len != size {
                failures.push(format!(
                    "{model} {name}: {len} B {got}, want {size} B {want}"
                ));
            }
            if model == "tiny.en" {
                let direct = dir.join(format!("{model}-{name}-ct2.bin"));
                write_quantized(&ct2, &mel, &direct, t).unwrap();
                if md5(&direct) != want {
                    failures.push(format!("{model} {name} from CTranslate2 differs"));
                }
                std::fs::remove_file(&direct).unwrap();
            }
            std::fs::remove_file(&out).unwrap();
        }
        std::fs::remove_file(&f16_path).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// tiny.en quantized to every type loads back through `sotto_formats::load` with the
/// type on exactly the 2-D weights, and every dequantized weight lies within the
/// format's per-element bound of the f16 original.
#[test]
fn quantized_tiny_en_loads_back_close_to_the_original() {
    let src = load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let mel = vec![0.5f32; 80 * 201];
    let dir = scratch("load-back");
    for t in QuantType::WEIGHTS {
        let out = dir.join(format!("tiny.en-{t}.bin"));
        write_quantized(&src, &mel, &out, t).unwrap();
        let back = load(&out).unwrap();
        assert_eq!(back.format, SourceFormat::Ggml);
        assert_eq!((back.hparams, &back.vocab), (src.hparams, &src.vocab));
        assert_eq!(back.mel_filters.as_deref(), Some(&mel[..]));
        for spec in names::expected(&src.hparams) {
            let (a, b) = (&src.tensors[&spec.name], &back.tensors[&spec.name]);
            assert_eq!(a.shape, b.shape, "{}", spec.name);
            if spec.role != names::Role::Matrix {
                assert!(!b.dtype.is_quantized(), "{} is {:?}", spec.name, b.dtype);
                continue;
            }
            assert_eq!(b.dtype, common::dtype(t), "{}", spec.name);
            let x = a.to_f32().unwrap();
            let mut y = vec![0f32; x.len()];
            sotto_quant::dequantize_row(t, b.data.as_bytes(), &mut y);
            for (i, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                let bound = element_bound(t, xb);
                let worst = xb
                    .iter()
                    .zip(yb)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0.0, f32::max);
                assert!(
                    worst <= bound,
                    "{t} {} block {i}: error {worst} > {bound}",
                    spec.name
                );
            }
        }
        let ftype = i32::from_le_bytes(std::fs::read(&out).unwrap()[44..48].try_into().unwrap());
        let want = 2000 + [2, 3, 8, 9, 7][QuantType::WEIGHTS.iter().position(|&u| u == t).unwrap()];
        assert_eq!(ftype, want, "{t} ftype");
        std::fs::remove_file(&out).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn quantizing_rejects_bad_inputs_and_leaves_no_file() {
    let src = load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let dir = scratch("reject");
    let out = dir.join("q.bin");
    let mel = vec![0.0f32; 80 * 201];
    let q = |x: &[f32], o: &mut [u8]| sotto_quant::quantize_row(QuantType::Q8_0, x, o);
    let err = ggml::write_quantized(&src, &mel, &out, sotto_formats::DType::F16, &q);
    assert!(err
        .unwrap_err()
        .to_string()
        .contains("cannot quantize to F16"));
    // An already quantized model is refused, as whisper-quantize refuses it.
    write_quantized(&src, &mel, &out, QuantType::Q8_0).unwrap();
    let quantized = load(&out).unwrap();
    let again = dir.join("again.bin");
    let err = write_quantized(&quantized, &mel, &again, QuantType::Q4_0).unwrap_err();
    assert!(err.to_string().contains("only float models"), "{err}");
    drop(quantized); // Windows deletes a mapped file only once it is unmapped.
    std::fs::remove_file(&out).unwrap();
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no temp files left"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
