//! Which SIMD instruction set the CPU kernels use.
//!
//! [`isa`] detects the best path once and caches it. `SOTTO_FORCE_ISA=scalar|avx2|avx512|neon`
//! forces a path (one the CPU lacks falls back to the best available one below it, so a
//! forced run can never execute an illegal instruction). Kernels take an explicit [`Isa`] so
//! tests can run every path in [`available`] against the scalar reference on one machine.

use std::sync::OnceLock;

/// A kernel path, ordered from the most portable to the widest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust; the reference every other path is tested against.
    Scalar,
    /// AArch64 Advanced SIMD (always present on aarch64).
    Neon,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL (plus AVX2, FMA, F16C).
    Avx512,
}

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    pub fn parse(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "neon" => Some(Isa::Neon),
            "avx2" => Some(Isa::Avx2),
            "avx512" | "avx512f" => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Neon => cfg!(target_arch = "aarch64"),
            Isa::Avx2 => has_avx2(),
            Isa::Avx512 => has_avx512(),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx2() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx512() -> bool {
    false
}

/// Whether this CPU and OS run Intel AMX bf16 tile products (Sapphire Rapids and later):
/// CPUID reports AMX-TILE and AMX-BF16 and Linux granted this process the tile state (it
/// must ask, once, before the first tile instruction). The bf16 GEMM and the encoder's
/// attention then use tiles on the [`Isa::Avx512`] path. Detected once; `SOTTO_AMX=0`
/// turns it off (`SOTTO_FORCE_ISA` below avx512 does too: the kernels around the tiles
/// are AVX-512).
pub fn amx_bf16() -> bool {
    static AMX: OnceLock<bool> = OnceLock::new();
    *AMX.get_or_init(|| {
        let off = std::env::var("SOTTO_AMX").is_ok_and(|v| v.trim() == "0");
        !off && isa() == Isa::Avx512 && amx_bf16_detected()
    })
}

/// Whether AMX int8 tile products run too ([`amx_bf16`] and CPUID's AMX-INT8): the int8
/// GEMM then uses them on the [`Isa::Avx512`] path.
pub fn amx_int8() -> bool {
    static AMX: OnceLock<bool> = OnceLock::new();
    *AMX.get_or_init(|| amx_bf16() && amx_int8_detected())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_int8_detected() -> bool {
    // CPUID.(EAX=7, ECX=0):EDX bit 25 AMX-INT8.
    std::arch::x86_64::__cpuid_count(7, 0).edx & (1 << 25) != 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn amx_int8_detected() -> bool {
    false
}

/// What the hardware and OS allow, whatever the environment says.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_bf16_detected() -> bool {
    // CPUID.(EAX=7, ECX=0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
    // Leaf 7 exists on every CPU with AVX-512 (checked by the caller).
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    if edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
        return false;
    }
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these arguments only asks for permission (no pointers).
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn amx_bf16_detected() -> bool {
    false
}

/// Every path this CPU can run, narrowest first (always starts with [`Isa::Scalar`]).
pub fn available() -> Vec<Isa> {
    [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect()
}

/// The best supported path at or below `wanted`.
pub fn best_at_most(wanted: Isa) -> Isa {
    available()
        .into_iter()
        .filter(|i| *i <= wanted)
        .max()
        .unwrap_or(Isa::Scalar)
}

/// The path kernels use: detected once, or `SOTTO_FORCE_ISA` when set.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| match std::env::var("SOTTO_FORCE_ISA") {
        Ok(v) => best_at_most(Isa::parse(&v).unwrap_or(Isa::Avx512)),
        Err(_) => best_at_most(Isa::Avx512),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_is_always_available_and_first() {
        assert_eq!(available()[0], Isa::Scalar);
        assert!(isa().is_supported());
    }

    #[test]
    fn amx_only_on_avx512() {
        assert!(!amx_bf16() || isa() == Isa::Avx512);
        assert!(!amx_int8() || amx_bf16());
    }

    #[test]
    fn names_round_trip() {
        for i in [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512] {
            assert_eq!(Isa::parse(i.name()), Some(i));
        }
        assert_eq!(Isa::parse("sse9"), None);
    }

    #[test]
    fn forcing_never_exceeds_the_cpu() {
        for wanted in [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512] {
            let got = best_at_most(wanted);
            assert!(got <= wanted.max(Isa::Scalar) && got.is_supported());
        }
        assert_eq!(best_at_most(Isa::Scalar), Isa::Scalar);
    }
}
