//! CPU feature detection for the GEMM kernels: detected once, with environment overrides that
//! force a lower instruction set so every path can be tested on one machine.

use std::sync::OnceLock;

/// The instruction-set families the GEMM kernels are written for, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust (the reference kernels; whatever the compiler vectorises for the baseline).
    Generic,
    /// x86-64 AVX2 + FMA (256-bit vectors).
    Avx2,
    /// x86-64 AVX-512F (512-bit vectors); BF16 and VNNI kernels additionally need
    /// AVX512-BF16 / AVX512-VNNI, see [`Features`].
    Avx512,
    /// aarch64 Advanced SIMD (128-bit vectors).
    Neon,
    /// aarch64 Scalable Matrix Extension.
    Sme,
}

impl Isa {
    /// A short lower-case name (`generic`, `avx2`, `avx512`, `neon`, `sme`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Generic => "generic",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
            Isa::Sme => "sme",
        }
    }
}

/// The CPU features the GEMM kernels care about, as the hardware reports them (before any
/// environment override).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// AVX2 and FMA (both needed by the AVX2 kernels).
    pub avx2_fma: bool,
    /// F16C (half-precision conversions).
    pub f16c: bool,
    /// AVX-512 F, BW and VL.
    pub avx512: bool,
    /// AVX512-BF16 (`vdpbf16ps`).
    pub avx512_bf16: bool,
    /// AVX512-VNNI (`vpdpbusd`).
    pub avx512_vnni: bool,
    /// AMX-TILE with AMX-BF16 (`tdpbf16ps`), and the OS granted this process the tile data
    /// state (Linux `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`).
    pub amx_bf16: bool,
    /// AMX-TILE with AMX-INT8 (`tdpbssd`), and the OS granted the tile data state.
    pub amx_int8: bool,
    /// aarch64 Advanced SIMD.
    pub neon: bool,
    /// aarch64 SME.
    pub sme: bool,
}

/// The features of this CPU, detected once. Without the `simd` feature none are reported, so
/// every kernel takes its portable path.
pub fn hardware_features() -> Features {
    static HW: OnceLock<Features> = OnceLock::new();
    *HW.get_or_init(|| if cfg!(feature = "simd") { detect() } else { Features::default() })
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Features {
    let amx = amx_detect();
    Features {
        avx2_fma: std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
        f16c: std::arch::is_x86_feature_detected!("f16c"),
        avx512: std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl"),
        avx512_bf16: std::arch::is_x86_feature_detected!("avx512bf16"),
        avx512_vnni: std::arch::is_x86_feature_detected!("avx512vnni"),
        amx_bf16: amx.0,
        amx_int8: amx.1,
        neon: false,
        sme: false,
    }
}

/// Whether the AVX512-BF16 `vdpbf16ps` tiles beat bf16 converted to f32 panels on the f32 FMA
/// tiles: not on Intel CPUs, where `vdpbf16ps` issues on one port (an Intel Xeon with AVX512-BF16,
/// AMX switched off: `tjgemm --half --prepacked` 99–116 GFLOP/s against 145–180 for the f32
/// tiles, 0.63–0.70×), yes elsewhere (Zen 4: 1.44–1.48× on squares). Read once from the CPUID
/// vendor string.
#[cfg(target_arch = "x86_64")]
pub(crate) fn bf16_dot_preferred() -> bool {
    static PREFERRED: OnceLock<bool> = OnceLock::new();
    *PREFERRED.get_or_init(|| !intel())
}

/// Whether CPUID leaf 0 names the vendor "GenuineIntel".
#[cfg(target_arch = "x86_64")]
fn intel() -> bool {
    let r = std::arch::x86_64::__cpuid(0);
    // "Genu" "ineI" "ntel" in EBX, EDX, ECX (little-endian).
    (r.ebx, r.edx, r.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e)
}

/// CPUID leaf 7 sub-leaf 0, EDX: AMX-BF16 (bit 22), AMX-TILE (bit 24), AMX-INT8 (bit 25).
#[cfg(target_arch = "x86_64")]
const AMX_BF16_BIT: u32 = 1 << 22;
#[cfg(target_arch = "x86_64")]
const AMX_TILE_BIT: u32 = 1 << 24;
#[cfg(target_arch = "x86_64")]
const AMX_INT8_BIT: u32 = 1 << 25;

/// Whether (AMX-BF16, AMX-INT8) are usable: CPUID reports AMX-TILE and the type, and (Linux)
/// the kernel grants the tile data state to this process; (false, false) when either says no.
#[cfg(target_arch = "x86_64")]
fn amx_detect() -> (bool, bool) {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // `__cpuid` is available on every x86-64 CPU; leaf 7 is read only when leaf 0 lists it.
    if __cpuid(0).eax < 7 {
        return (false, false);
    }
    let edx = __cpuid_count(7, 0).edx;
    if edx & AMX_TILE_BIT == 0 || edx & (AMX_BF16_BIT | AMX_INT8_BIT) == 0 || !amx_permission() {
        return (false, false);
    }
    (edx & AMX_BF16_BIT != 0, edx & AMX_INT8_BIT != 0)
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` (Linux 5.16+): asks the kernel to
/// enable the AMX tile data for this process; true when granted (returns 0).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_permission() -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: the arch_prctl system call with these arguments only changes the process's
    // permitted xsave features (or fails with a negative errno); the syscall instruction
    // clobbers rcx and r11, declared here.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

/// Other systems: AMX stays off (the permission request is Linux's).
#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn amx_permission() -> bool {
    false
}

/// Whether the AMX tiles may be used where the hardware has them: not when
/// `TENSORJIT_DISABLE_AMX=1` (read once).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn amx_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !env_flag("TENSORJIT_DISABLE_AMX"))
}

#[cfg(target_arch = "aarch64")]
fn detect() -> Features {
    Features { neon: std::arch::is_aarch64_feature_detected!("neon"), sme: hwcap_sme(), ..Features::default() }
}

/// `AT_HWCAP2` of `getauxval`.
#[cfg(target_arch = "aarch64")]
const AT_HWCAP2: core::ffi::c_ulong = 26;
#[cfg(target_arch = "aarch64")]
/// `HWCAP2_SME` in `AT_HWCAP2` (Linux, arch/arm64/include/uapi/asm/hwcap.h).
const HWCAP2_SME: core::ffi::c_ulong = 1 << 23;

#[cfg(target_arch = "aarch64")]
unsafe extern "C" {
    /// glibc's auxiliary vector lookup (returns 0 for unknown types).
    fn getauxval(kind: core::ffi::c_ulong) -> core::ffi::c_ulong;
}

#[cfg(target_arch = "aarch64")]
/// Whether the kernel reports SME to this process (Linux `AT_HWCAP2 & HWCAP2_SME`).
pub(crate) fn hwcap_sme() -> bool {
    // SAFETY: getauxval only reads the process's auxiliary vector; any type value is allowed.
    let caps = unsafe { getauxval(AT_HWCAP2) };
    caps & HWCAP2_SME != 0
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect() -> Features {
    Features::default()
}

/// Whether an on/off variable is on: set to anything but blanks or `0`.
fn env_flag(name: &str) -> bool {
    crate::env::env_value(name).is_some_and(|v| v != "0")
}

/// Whether the hardware can run kernels of `isa` (ignoring environment overrides).
pub fn isa_supported(isa: Isa) -> bool {
    let f = hardware_features();
    match isa {
        Isa::Generic => true,
        Isa::Avx2 => f.avx2_fma,
        Isa::Avx512 => f.avx512 && f.avx2_fma,
        Isa::Neon => f.neon,
        Isa::Sme => f.sme,
    }
}

/// The instruction set the GEMM entry points use by default: the best one the hardware
/// supports, lowered by the environment variables `TENSORJIT_DISABLE_AVX512=1`,
/// `TENSORJIT_DISABLE_AVX2=1` (x86-64), `TENSORJIT_DISABLE_SME=1`, `TENSORJIT_DISABLE_NEON=1`
/// (aarch64). Read once per process; the choice is reported as a `tracing` debug event (target
/// `tensorjit::gemm`).
pub fn selected_isa() -> Isa {
    static SEL: OnceLock<Isa> = OnceLock::new();
    *SEL.get_or_init(|| {
        let pick = |isa: Isa, var: &str| isa_supported(isa) && !env_flag(var);
        let isa = if pick(Isa::Avx512, "TENSORJIT_DISABLE_AVX512") && !env_flag("TENSORJIT_DISABLE_AVX2") {
            Isa::Avx512
        } else if pick(Isa::Avx2, "TENSORJIT_DISABLE_AVX2") {
            Isa::Avx2
        } else if pick(Isa::Sme, "TENSORJIT_DISABLE_SME") && !env_flag("TENSORJIT_DISABLE_NEON") {
            Isa::Sme
        } else if pick(Isa::Neon, "TENSORJIT_DISABLE_NEON") {
            Isa::Neon
        } else {
            Isa::Generic
        };
        tracing::debug!(
            target: "tensorjit::gemm",
            isa = isa.name(),
            features = ?hardware_features(),
            "selected the GEMM kernels"
        );
        isa
    })
}

/// A one-line description of the dispatch decision (the "debug log" of the choice):
/// the selected ISA and the hardware features it was chosen from.
// Only the crate's own tests and benches use it (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn dispatch_summary() -> String {
    let f = hardware_features();
    format!(
        "gemm isa={} (avx2+fma={} f16c={} avx512={} avx512-bf16={} avx512-vnni={} amx-bf16={} amx-int8={}{} neon={} sme={})",
        selected_isa().name(),
        f.avx2_fma,
        f.f16c,
        f.avx512,
        f.avx512_bf16,
        f.avx512_vnni,
        f.amx_bf16,
        f.amx_int8,
        if amx_enabled() { "" } else { " disabled" },
        f.neon,
        f.sme
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUID vendor check agrees with the kernel's `vendor_id` line (Linux), and the bf16
    /// dot-product preference follows it.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn the_vendor_check_agrees_with_proc_cpuinfo() {
        let info = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo");
        let vendor = info
            .lines()
            .find_map(|l| {
                l.strip_prefix("vendor_id").map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
            .expect("a vendor_id line");
        assert_eq!(intel(), vendor == "GenuineIntel", "vendor_id {vendor}");
        assert_eq!(bf16_dot_preferred(), vendor != "GenuineIntel");
    }
}
