//! Compiled kernels (machine code for one architecture) kept on disk between runs, so a
//! process that opens a GPU skips NVRTC (seconds for sotto's kernels) when the same source,
//! options, architecture and NVRTC version were compiled before.
//!
//! The folder is `SOTTO_KERNEL_CACHE` when set (empty or `0`: no disk cache), else `kernels`
//! in the model cache (`$SOTTO_CACHE_DIR`, else `$XDG_CACHE_HOME/sotto`, else
//! `~/.cache/sotto`, as `sotto-hub` resolves it). A file is named by a hash of everything
//! that went into it, written under a temporary name and renamed, and checked before use:
//! a truncated or foreign file is compiled again and replaced. The cache is best effort: a
//! folder that cannot be written costs the compile, never an error.

use std::path::{Path, PathBuf};

/// The kernel cache folder, or None for no disk cache (see the module docs).
pub(crate) fn dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(v) = std::env::var_os("SOTTO_KERNEL_CACHE") {
        return (!v.is_empty() && v != "0").then(|| PathBuf::from(v));
    }
    // The model cache's rules (sotto-hub's `default_cache_dir`): Windows' home is USERPROFILE.
    let home = if cfg!(windows) {
        var("USERPROFILE").or_else(|| var("HOME"))
    } else {
        var("HOME")
    };
    let models = match (var("SOTTO_CACHE_DIR"), var("XDG_CACHE_HOME"), home) {
        (Some(d), _, _) => PathBuf::from(d),
        (None, Some(x), _) => PathBuf::from(x).join("sotto"),
        (None, None, Some(h)) => PathBuf::from(h).join(".cache").join("sotto"),
        (None, None, None) => return None,
    };
    Some(models.join("kernels"))
}

/// FNV-1a over `parts` (each followed by a 0 byte): a file name that changes with any of
/// them and stays the same across builds and toolchains.
pub(crate) fn key(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0u8]) {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The compiled kernels for `key` from `dir` (the file `sotto-<key>.<ext>`), when that file
/// holds them whole (`valid`); else `compile`'s, saved there for the next process.
pub(crate) fn get_or_compile<E>(
    dir: Option<&Path>,
    key: u64,
    ext: &str,
    valid: impl Fn(&[u8]) -> bool,
    compile: impl FnOnce() -> Result<Vec<u8>, E>,
) -> Result<Vec<u8>, E> {
    let Some(dir) = dir else {
        return compile();
    };
    let path = dir.join(format!("sotto-{key:016x}.{ext}"));
    if let Ok(bytes) = std::fs::read(&path) {
        if valid(&bytes) {
            return Ok(bytes);
        }
    }
    let bytes = compile()?;
    let _ = save(&path, &bytes);
    Ok(bytes)
}

/// Writes `bytes` to `path` under a temporary name first, so a reader never sees half a file.
fn save(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sotto-kc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn compiles_once_then_reads_the_file() {
        let dir = temp_dir("once");
        let calls = Cell::new(0);
        let compile = || -> Result<Vec<u8>, ()> {
            calls.set(calls.get() + 1);
            Ok(b"\x7fELF a".to_vec())
        };
        let valid = |b: &[u8]| b.ends_with(b" a");
        for _ in 0..3 {
            let bytes = get_or_compile(Some(&dir), 7, "cubin", valid, compile).unwrap();
            assert_eq!(bytes, b"\x7fELF a");
        }
        assert_eq!(calls.get(), 1, "later calls read the file");
        // Another key is another file.
        get_or_compile(Some(&dir), 8, "cubin", valid, compile).unwrap();
        assert_eq!(calls.get(), 2);
        let files = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(files, 2, "no temporary files left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_file_is_compiled_again_and_replaced() {
        let dir = temp_dir("damaged");
        let good = b"\x7fELF a b".to_vec();
        let valid = |b: &[u8]| b.ends_with(b" b");
        get_or_compile(Some(&dir), 1, "cubin", valid, || Ok::<_, ()>(good.clone())).unwrap();
        let file = dir.join(format!("sotto-{:016x}.cubin", 1));
        std::fs::write(&file, &good[..6]).unwrap(); // truncated
        let calls = Cell::new(0);
        let bytes = get_or_compile(Some(&dir), 1, "cubin", valid, || {
            calls.set(1);
            Ok::<_, ()>(good.clone())
        })
        .unwrap();
        assert_eq!((bytes.as_slice(), calls.get()), (good.as_slice(), 1));
        assert_eq!(std::fs::read(&file).unwrap(), good);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_folder_only_costs_the_compile() {
        // A file where the folder should be: create_dir_all fails.
        let blocker = temp_dir("blocker");
        std::fs::write(&blocker, b"x").unwrap();
        let dir = blocker.join("kernels");
        let bytes = get_or_compile(
            Some(&dir),
            1,
            "cubin",
            |_| true,
            || Ok::<_, ()>(b"elf".to_vec()),
        );
        assert_eq!(bytes.unwrap(), b"elf");
        let failed = get_or_compile(
            Some(&dir),
            1,
            "cubin",
            |_| true,
            || Err::<Vec<u8>, _>("nvrtc"),
        );
        assert_eq!(
            failed.unwrap_err(),
            "nvrtc",
            "a compile error is still reported"
        );
        std::fs::remove_file(&blocker).unwrap();
    }

    #[test]
    fn keys_change_with_any_part() {
        let k = key(&[b"src", b"opts", b"9.0"]);
        assert_eq!(k, key(&[b"src", b"opts", b"9.0"]));
        assert_ne!(k, key(&[b"src", b"opts", b"8.9"]));
        assert_ne!(k, key(&[b"srcopts", b"", b"9.0"]), "parts are delimited");
    }
}
