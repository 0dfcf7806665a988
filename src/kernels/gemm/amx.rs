//! AMX tile microkernels: bf16 (`TDPBF16PS`, f32 accumulation) and int8 (`TDPBSSD`, i32
//! accumulation) on 32 x 32 blocks of C held in four 16 x 16 accumulator tiles, written once
//! over a [`TileUnit`]: the hardware (stable `asm!`, the AMX intrinsics being unstable) or a
//! software model of the same instructions, so the driver, packing, tile loop, edges and
//! epilogue run and are tested on CPUs without AMX.
//!
//! Layout (one call, `kgroups` B groups of `g` k values): each A tile is 16 rows of 64 bytes
//! (`a_group` 32 bf16 / 64 int8 k values) `a_rs` elements apart — a row-major A read in place
//! (whole 32-row tiles when k is a multiple of the group), or A packed in such rows per 16 B
//! groups (zero padded past k); B is packed in the VNNI layout (`g` = 2 bf16 pairs / 4 int8
//! quads for each of 32 columns per k group), so each B tile is 16 k groups of 16 columns, one
//! group per 128-byte row. Tiles: tmm0-3 the accumulators (rows 0-15 / 16-31 x columns 0-15 /
//! 16-31), tmm4-5 the A rows, tmm6-7 the B columns. A depth step short of 16 groups (the end
//! of k) copies its B rows into zeroed scratch, so every step runs on the one configuration:
//! the padded A bytes are zero against zero B rows.
//!
//! The asm is assembled on every x86-64 build but runs only where CPUID reports AMX-TILE with
//! AMX-BF16 / AMX-INT8 and Linux granted XTILEDATA (`isa::Features::amx_bf16`); the tests check
//! it against the model there (`tests/gemm_amx.rs`).

use std::mem::MaybeUninit;

use half::bf16;

use super::epilogue::Scalar;
use super::isa::Isa;
use super::kernel::{Family, TileArgs, generic_store};

/// Rows of a tile, bytes of a tile row.
const ROWS: usize = 16;
const ROW_BYTES: usize = 64;
/// Columns of C per call (two tiles of 16 4-byte accumulators).
const NR: usize = 32;

/// The 64-byte operand of `LDTILECFG` (palette 1): bytes per row and rows of tmm0-15.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TileCfg {
    pub palette: u8,
    pub start_row: u8,
    pub reserved: [u8; 14],
    pub colsb: [u16; 16],
    pub rows: [u8; 16],
}

impl TileCfg {
    /// The configuration of the microkernels: tmm0-7 all 16 rows of 64 bytes.
    pub const KERNEL: TileCfg = {
        let mut c = TileCfg { palette: 1, start_row: 0, reserved: [0; 14], colsb: [0; 16], rows: [0; 16] };
        let mut t = 0;
        while t < 8 {
            c.colsb[t] = ROW_BYTES as u16;
            c.rows[t] = ROWS as u8;
            t += 1;
        }
        c
    };
}

/// The dot-product instruction of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dot {
    /// `TDPBF16PS`: bf16 pairs, f32 accumulation.
    Bf16,
    /// `TDPBSSD`: signed int8 quads, i32 accumulation.
    Int8,
}

/// The tile instructions the kernels use. Register numbers are 0-7.
pub(crate) trait TileUnit {
    /// Whether this is the hardware (then the CPU has AVX-512F as well: the AMX families are
    /// chosen only on the AVX-512 ISA).
    const HW: bool;
    /// A unit ready for `LDTILECFG`.
    fn new() -> Self;
    /// `LDTILECFG [cfg]` (every tile is zeroed).
    ///
    /// # Safety
    /// On hardware: the CPU has AMX-TILE and the OS granted XTILEDATA to this thread.
    unsafe fn config(&mut self, cfg: &TileCfg);
    /// `cfg` in force: `LDTILECFG` unless the thread's tile configuration is already `cfg`
    /// (the tiles' contents are then left as they are; [`TileUnit::zero`] clears them).
    ///
    /// # Safety
    /// As [`TileUnit::config`].
    unsafe fn ensure_config(&mut self, cfg: &TileCfg) {
        // SAFETY: the caller's contract.
        unsafe { self.config(cfg) }
    }
    /// `TILEZERO tmm<t>`.
    ///
    /// # Safety
    /// Configured; the CPU has AMX-TILE.
    unsafe fn zero(&mut self, t: usize);
    /// `TILELOADD tmm<t>, [p + stride]`: `rows[t]` rows of `colsb[t]` bytes, `stride` bytes apart.
    ///
    /// # Safety
    /// `p` is readable for those rows; configured.
    unsafe fn load(&mut self, t: usize, p: *const u8, stride: usize);
    /// `TDPBF16PS` / `TDPBSSD tmm<c>, tmm<a>, tmm<b>` with the kernel's pairing: `a = 4 + c/2`,
    /// `b = 6 + c%2`.
    ///
    /// # Safety
    /// Configured; the CPU has the instruction's feature.
    unsafe fn dot(&mut self, kind: Dot, c: usize);
    /// `TILESTORED [p + stride], tmm<t>`.
    ///
    /// # Safety
    /// `p` is writable for `rows[t]` rows of `colsb[t]` bytes, `stride` bytes apart.
    unsafe fn store(&mut self, t: usize, p: *mut u8, stride: usize);
}

/// The element types of a kernel.
pub(crate) trait Kind: 'static {
    type In: Copy + 'static;
    type Acc: Scalar;
    const DOT: Dot;
    /// Writes rows 0..R of the accumulators to C with the tile's epilogue (as
    /// [`generic_store`]), on an AVX-512 CPU.
    ///
    /// # Safety
    /// [`generic_store`]'s contract; the CPU has AVX-512F.
    unsafe fn store_avx512<const R: usize>(t: &TileArgs<Self::In, Self::In, Self::Acc>, acc: &[[Self::Acc; NR]; R]) {
        // SAFETY: the caller's contract.
        unsafe { generic_store::<Self::In, Self::In, Self::Acc, R, NR>(t, acc) }
    }
}

/// bf16 pairs into f32.
pub(crate) struct Bf16K;
impl Kind for Bf16K {
    type In = bf16;
    type Acc = f32;
    const DOT: Dot = Dot::Bf16;
    #[cfg(target_arch = "x86_64")]
    unsafe fn store_avx512<const R: usize>(t: &TileArgs<bf16, bf16, f32>, acc: &[[f32; NR]; R]) {
        // SAFETY: the caller's contract.
        unsafe { store_f32_avx512::<R>(t, acc) }
    }
}

/// [`generic_store`] for f32 accumulators in 16-lane vectors, with the same operations in the
/// same order (`alpha·v + 0`, `beta·c + v`, then the row bias, then the column bias), so the
/// results are the same bits.
///
/// # Safety
/// [`generic_store`]'s contract: C (`rsc` apart) is writable, and readable when `read_c`, for R
/// rows of 32 columns; non-null biases cover the tile. The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_f32_avx512<const R: usize>(t: &TileArgs<bf16, bf16, f32>, acc: &[[f32; NR]; R]) {
    use std::arch::x86_64::*;
    let (alpha, beta, zero) = (_mm512_set1_ps(t.alpha), _mm512_set1_ps(t.beta), _mm512_setzero_ps());
    // SAFETY: every pointer below stays inside the extents of the contract (rows < R, columns <
    // 32, bias rows < R and columns < 32).
    unsafe {
        let bias_col =
            (!t.bias_col.is_null()).then(|| [_mm512_loadu_ps(t.bias_col), _mm512_loadu_ps(t.bias_col.add(16))]);
        for (i, row) in acc.iter().enumerate() {
            let crow = t.c.add(i * t.rsc);
            for h in 0..2 {
                let mut v = _mm512_loadu_ps(row.as_ptr().add(16 * h));
                if t.alpha != 1.0 {
                    v = _mm512_add_ps(_mm512_mul_ps(v, alpha), zero);
                }
                if t.read_c {
                    v = _mm512_add_ps(_mm512_mul_ps(beta, _mm512_loadu_ps(crow.add(16 * h))), v);
                }
                if !t.bias_row.is_null() {
                    v = _mm512_add_ps(v, _mm512_set1_ps(*t.bias_row.add(i)));
                }
                if let Some(b) = bias_col {
                    v = _mm512_add_ps(v, b[h]);
                }
                _mm512_storeu_ps(crow.add(16 * h), v);
            }
        }
    }
}

/// int8 quads into i32.
pub(crate) struct Int8K;
impl Kind for Int8K {
    type In = i8;
    type Acc = i32;
    const DOT: Dot = Dot::Int8;
}

/// One call of the driver: `R` rows (1..=32) x 32 columns of C over `kgroups` B groups.
///
/// # Safety
/// The [`TileArgs`] contract with A packed in 64-byte row groups (`a_rs` elements apart, blocks
/// of 16 B groups `a_kstride` elements apart, 32 rows) and B in VNNI groups of 32 columns
/// (`b_kstride` elements apart); on hardware as [`TileUnit::config`].
unsafe fn amx_tile<K: Kind, U: TileUnit, const R: usize>(t: &TileArgs<K::In, K::In, K::Acc>) {
    let es = size_of::<K::In>();
    let mut u = U::new();
    // Accumulator rows as stored by TILESTORED (32 rows of 32 values; rows 0..R are written
    // before they are read). Neither buffer is initialised: 6 KiB of stores per call otherwise.
    let mut out = MaybeUninit::<[[K::Acc; NR]; 32]>::uninit();
    // B rows of a short last step, zero past its groups (two tiles' worth: 16 rows x 128 bytes;
    // zeroed when used).
    let mut tail = MaybeUninit::<[u8; ROWS * 2 * ROW_BYTES]>::uninit();
    let two = R > ROWS;
    // SAFETY: the A and B reads stay inside the panels described by the contract (whole 16-group
    // steps, and a short last step through `tail`); the stores go to `out` (32 rows x 128 bytes);
    // the hardware conditions are the caller's. The configuration stays in force after the call
    // (no TILERELEASE): the next call on this thread skips LDTILECFG and zeroes its accumulators.
    unsafe {
        u.ensure_config(&TileCfg::KERNEL);
        u.zero(0);
        u.zero(1);
        if two {
            u.zero(2);
            u.zero(3);
        }
        let steps = t.kgroups.div_ceil(ROWS);
        let bstride = t.b_kstride * es;
        let astride = t.a_rs * es;
        for s in 0..steps {
            let groups = (t.kgroups - s * ROWS).min(ROWS);
            let a = t.a.add(s * t.a_kstride).cast::<u8>();
            let mut b = t.b.add(s * ROWS * t.b_kstride).cast::<u8>();
            let mut bs = bstride;
            if groups < ROWS {
                let tail = tail.as_mut_ptr().cast::<u8>();
                std::ptr::write_bytes(tail, 0, ROWS * 2 * ROW_BYTES);
                for r in 0..groups {
                    std::ptr::copy_nonoverlapping(b.add(r * bstride), tail.add(r * 2 * ROW_BYTES), 2 * ROW_BYTES);
                }
                b = tail;
                bs = 2 * ROW_BYTES;
            }
            u.load(4, a, astride);
            u.load(6, b, bs);
            u.load(7, b.add(ROW_BYTES), bs);
            u.dot(K::DOT, 0);
            u.dot(K::DOT, 1);
            if two {
                u.load(5, a.add(ROWS * astride), astride);
                u.dot(K::DOT, 2);
                u.dot(K::DOT, 3);
            }
        }
        let o = out.as_mut_ptr().cast::<u8>();
        let ostride = NR * 4;
        u.store(0, o, ostride);
        u.store(1, o.add(ROW_BYTES), ostride);
        if two {
            u.store(2, o.add(ROWS * ostride), ostride);
            u.store(3, o.add(ROWS * ostride + ROW_BYTES), ostride);
        }
        // Rows 0..R of `out` (R ≤ 32), all written by the stores above.
        let acc = &*out.as_ptr().cast::<[[K::Acc; NR]; R]>();
        if U::HW {
            K::store_avx512::<R>(t, acc);
        } else {
            generic_store::<K::In, K::In, K::Acc, R, NR>(t, acc);
        }
    }
}

/// The 32 row counts of a family.
macro_rules! amx_tiles {
    ($k:ty, $u:ty) => {
        &[
            amx_tile::<$k, $u, 1>,
            amx_tile::<$k, $u, 2>,
            amx_tile::<$k, $u, 3>,
            amx_tile::<$k, $u, 4>,
            amx_tile::<$k, $u, 5>,
            amx_tile::<$k, $u, 6>,
            amx_tile::<$k, $u, 7>,
            amx_tile::<$k, $u, 8>,
            amx_tile::<$k, $u, 9>,
            amx_tile::<$k, $u, 10>,
            amx_tile::<$k, $u, 11>,
            amx_tile::<$k, $u, 12>,
            amx_tile::<$k, $u, 13>,
            amx_tile::<$k, $u, 14>,
            amx_tile::<$k, $u, 15>,
            amx_tile::<$k, $u, 16>,
            amx_tile::<$k, $u, 17>,
            amx_tile::<$k, $u, 18>,
            amx_tile::<$k, $u, 19>,
            amx_tile::<$k, $u, 20>,
            amx_tile::<$k, $u, 21>,
            amx_tile::<$k, $u, 22>,
            amx_tile::<$k, $u, 23>,
            amx_tile::<$k, $u, 24>,
            amx_tile::<$k, $u, 25>,
            amx_tile::<$k, $u, 26>,
            amx_tile::<$k, $u, 27>,
            amx_tile::<$k, $u, 28>,
            amx_tile::<$k, $u, 29>,
            amx_tile::<$k, $u, 30>,
            amx_tile::<$k, $u, 31>,
            amx_tile::<$k, $u, 32>,
        ]
    };
}

/// A family of the AMX kernels on tile unit `U`.
macro_rules! amx_family {
    ($name:literal, $isa:expr, $k:ty, $u:ty, $g:literal, $ga:literal) => {
        Family {
            name: $name,
            isa: $isa,
            mr: 32,
            nr: NR,
            g: $g,
            tiles: amx_tiles!($k, $u),
            a_group: $ga,
            needs_colsum: false,
        }
    };
}

/// AMX-BF16 on the hardware, 32 x 32.
#[cfg(target_arch = "x86_64")]
pub(crate) static AMX_BF16: Family<bf16, bf16, f32> = amx_family!("amx-bf16-32x32", Isa::Avx512, Bf16K, Hw, 2, 32);
/// AMX-INT8 on the hardware, 32 x 32 (signed x signed, no offset correction).
#[cfg(target_arch = "x86_64")]
pub(crate) static AMX_I8: Family<i8, i8, i32> = amx_family!("amx-i8-32x32", Isa::Avx512, Int8K, Hw, 4, 64);
/// The bf16 kernels on the software tile model (any CPU).
// The crate's own tests run it (and the AMX test binary through `internals`).
#[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
pub(crate) static MODEL_AMX_BF16: Family<bf16, bf16, f32> =
    amx_family!("model-amx-bf16-32x32", Isa::Generic, Bf16K, Model, 2, 32);
/// The int8 kernels on the software tile model (any CPU).
#[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
pub(crate) static MODEL_AMX_I8: Family<i8, i8, i32> =
    amx_family!("model-amx-i8-32x32", Isa::Generic, Int8K, Model, 4, 64);

/// The AMX tile unit itself (x86-64 `asm!`).
#[cfg(target_arch = "x86_64")]
pub(crate) struct Hw;

/// `$tpl` (naming `tmm<N>` by `$r`) for register `$t` in 0..8.
#[cfg(target_arch = "x86_64")]
macro_rules! per_tmm {
    ($t:expr, |$r:ident| $body:expr) => {
        match $t {
            0 => {
                macro_rules! $r {
                    () => {
                        "tmm0"
                    };
                }
                $body
            }
            1 => {
                macro_rules! $r {
                    () => {
                        "tmm1"
                    };
                }
                $body
            }
            2 => {
                macro_rules! $r {
                    () => {
                        "tmm2"
                    };
                }
                $body
            }
            3 => {
                macro_rules! $r {
                    () => {
                        "tmm3"
                    };
                }
                $body
            }
            4 => {
                macro_rules! $r {
                    () => {
                        "tmm4"
                    };
                }
                $body
            }
            5 => {
                macro_rules! $r {
                    () => {
                        "tmm5"
                    };
                }
                $body
            }
            6 => {
                macro_rules! $r {
                    () => {
                        "tmm6"
                    };
                }
                $body
            }
            _ => {
                macro_rules! $r {
                    () => {
                        "tmm7"
                    };
                }
                $body
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
impl TileUnit for Hw {
    const HW: bool = true;
    fn new() -> Self {
        Hw
    }
    unsafe fn config(&mut self, cfg: &TileCfg) {
        // SAFETY: cfg is a valid 64-byte palette-1 configuration; AMX is present and enabled
        // (the caller's contract, checked by `isa::hardware_features` before the family is used).
        unsafe { std::arch::asm!("ldtilecfg [{0}]", in(reg) cfg as *const TileCfg, options(nostack, readonly)) };
    }
    unsafe fn ensure_config(&mut self, cfg: &TileCfg) {
        let mut now = MaybeUninit::<TileCfg>::uninit();
        // SAFETY: STTILECFG writes the 64 bytes of `now` (all zero when the tiles are not
        // configured); AMX is present and enabled (the caller's contract). Every bit pattern is
        // a valid TileCfg (integers only).
        let now = unsafe {
            std::arch::asm!("sttilecfg [{0}]", in(reg) now.as_mut_ptr(), options(nostack));
            now.assume_init()
        };
        if now != *cfg {
            // SAFETY: the caller's contract.
            unsafe { self.config(cfg) }
        }
    }
    unsafe fn zero(&mut self, t: usize) {
        // SAFETY: a register-only instruction on a configured tile (the caller's contract).
        unsafe { per_tmm!(t, |tmm| std::arch::asm!(concat!("tilezero ", tmm!()), options(nostack, nomem))) }
    }
    unsafe fn load(&mut self, t: usize, p: *const u8, stride: usize) {
        // SAFETY: the rows read are the caller's contract.
        unsafe {
            per_tmm!(t, |tmm| std::arch::asm!(
                concat!("tileloadd ", tmm!(), ", [{p} + {s}*1]"),
                p = in(reg) p,
                s = in(reg) stride,
                options(nostack, readonly)
            ))
        }
    }
    unsafe fn dot(&mut self, kind: Dot, c: usize) {
        // SAFETY: register-only instructions on configured tiles; the features are the caller's.
        unsafe {
            match (kind, c) {
                (Dot::Bf16, 0) => std::arch::asm!("tdpbf16ps tmm0, tmm4, tmm6", options(nostack, nomem)),
                (Dot::Bf16, 1) => std::arch::asm!("tdpbf16ps tmm1, tmm4, tmm7", options(nostack, nomem)),
                (Dot::Bf16, 2) => std::arch::asm!("tdpbf16ps tmm2, tmm5, tmm6", options(nostack, nomem)),
                (Dot::Bf16, _) => std::arch::asm!("tdpbf16ps tmm3, tmm5, tmm7", options(nostack, nomem)),
                (Dot::Int8, 0) => std::arch::asm!("tdpbssd tmm0, tmm4, tmm6", options(nostack, nomem)),
                (Dot::Int8, 1) => std::arch::asm!("tdpbssd tmm1, tmm4, tmm7", options(nostack, nomem)),
                (Dot::Int8, 2) => std::arch::asm!("tdpbssd tmm2, tmm5, tmm6", options(nostack, nomem)),
                (Dot::Int8, _) => std::arch::asm!("tdpbssd tmm3, tmm5, tmm7", options(nostack, nomem)),
            }
        }
    }
    unsafe fn store(&mut self, t: usize, p: *mut u8, stride: usize) {
        // SAFETY: the rows written are the caller's contract.
        unsafe {
            per_tmm!(t, |tmm| std::arch::asm!(
                concat!("tilestored [{p} + {s}*1], ", tmm!()),
                p = in(reg) p,
                s = in(reg) stride,
                options(nostack)
            ))
        }
    }
}

/// A software model of the AMX tile unit: eight 1 KiB registers and a configuration, with the
/// semantics of Intel's pseudocode (SDM vol. 2, `LDTILECFG`, `TILELOADD`, `TILESTORED`,
/// `TDPBF16PS`, `TDPBSSD`): loads zero the bytes past `colsb` and the rows past `rows`; the dot
/// products read `a.colsb / 4` groups, write `c.rows` rows of `c.colsb / 4` lanes and zero the
/// rest of `c`; bf16 inputs are denormal-as-zero, each product (exact in f32) is added with
/// round-to-nearest-even and a denormal sum is flushed to zero (the even element of a pair
/// first); int8 quads are signed x signed, summed with wrap-around. An invalid configuration
/// or operand shape (a #UD on the hardware) panics: the kernels never issue one.
#[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
pub(crate) struct Model {
    cfg: TileCfg,
    regs: [[u8; ROWS * ROW_BYTES]; 8],
}

#[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
impl Model {
    /// Row `r` of tile `t` as 4-byte lanes.
    fn lane(&self, t: usize, r: usize, l: usize) -> [u8; 4] {
        let o = r * ROW_BYTES + 4 * l;
        self.regs[t][o..o + 4].try_into().expect("4 bytes")
    }
    /// An error of the model (an invalid configuration or operand), as the hardware's #UD.
    fn fault(what: &str) -> ! {
        panic!("AMX model: {what} (the instruction would raise #UD)")
    }
}

/// `make_fp32` of the AMX-BF16 pseudocode: bf16 bits as an f32, denormals as zero.
#[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
fn bf16_daz(lo: u8, hi: u8) -> f32 {
    let bits = (u16::from_le_bytes([lo, hi]) as u32) << 16;
    if bits & 0x7f80_0000 == 0 { f32::from_bits(bits & 0x8000_0000) } else { f32::from_bits(bits) }
}

/// Flush-to-zero of a denormal f32.
#[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
fn ftz(x: f32) -> f32 {
    if x.to_bits() & 0x7f80_0000 == 0 { f32::from_bits(x.to_bits() & 0x8000_0000) } else { x }
}

impl TileUnit for Model {
    const HW: bool = false;
    fn new() -> Self {
        Model { cfg: TileCfg { palette: 0, ..TileCfg::KERNEL }, regs: [[0; ROWS * ROW_BYTES]; 8] }
    }
    unsafe fn config(&mut self, cfg: &TileCfg) {
        if cfg.palette != 1 {
            Self::fault("palette other than 1");
        }
        for t in 0..8 {
            if cfg.rows[t] as usize > ROWS || cfg.colsb[t] as usize > ROW_BYTES {
                Self::fault("tile larger than 16 rows x 64 bytes");
            }
        }
        self.cfg = *cfg;
        self.regs = [[0; ROWS * ROW_BYTES]; 8];
    }
    unsafe fn zero(&mut self, t: usize) {
        if self.cfg.palette != 1 {
            Self::fault("TILEZERO before LDTILECFG");
        }
        self.regs[t] = [0; ROWS * ROW_BYTES];
    }
    unsafe fn load(&mut self, t: usize, p: *const u8, stride: usize) {
        if self.cfg.palette != 1 {
            Self::fault("TILELOADD before LDTILECFG");
        }
        let (rows, colsb) = (self.cfg.rows[t] as usize, self.cfg.colsb[t] as usize);
        let reg = &mut self.regs[t];
        reg.fill(0);
        for r in 0..rows {
            // SAFETY: the caller's contract (rows x colsb bytes at p, stride apart).
            let src = unsafe { std::slice::from_raw_parts(p.add(r * stride), colsb) };
            reg[r * ROW_BYTES..r * ROW_BYTES + colsb].copy_from_slice(src);
        }
    }
    unsafe fn dot(&mut self, kind: Dot, c: usize) {
        let (a, b) = (4 + c / 2, 6 + c % 2);
        let cfg = self.cfg;
        if cfg.palette != 1 {
            Self::fault("dot product before LDTILECFG");
        }
        let (rows, lanes, groups) = (cfg.rows[c] as usize, cfg.colsb[c] as usize / 4, cfg.colsb[a] as usize / 4);
        // The SDM's operand checks: A has C's rows, B has A's groups as rows and C's width.
        if cfg.rows[a] as usize != rows || cfg.rows[b] as usize != groups || cfg.colsb[b] != cfg.colsb[c] {
            Self::fault("tile shapes do not match");
        }
        let mut out = [0u8; ROWS * ROW_BYTES];
        for m in 0..rows {
            for n in 0..lanes {
                let cv = self.lane(c, m, n);
                let v = match kind {
                    Dot::Bf16 => {
                        let mut acc = f32::from_le_bytes(cv);
                        for k in 0..groups {
                            let (x, y) = (self.lane(a, m, k), self.lane(b, k, n));
                            acc = ftz(acc + bf16_daz(x[0], x[1]) * bf16_daz(y[0], y[1]));
                            acc = ftz(acc + bf16_daz(x[2], x[3]) * bf16_daz(y[2], y[3]));
                        }
                        acc.to_le_bytes()
                    }
                    Dot::Int8 => {
                        let mut acc = i32::from_le_bytes(cv);
                        for k in 0..groups {
                            let (x, y) = (self.lane(a, m, k), self.lane(b, k, n));
                            for q in 0..4 {
                                acc = acc.wrapping_add(x[q] as i8 as i32 * y[q] as i8 as i32);
                            }
                        }
                        acc.to_le_bytes()
                    }
                };
                out[m * ROW_BYTES + 4 * n..m * ROW_BYTES + 4 * n + 4].copy_from_slice(&v);
            }
        }
        self.regs[c] = out;
    }
    unsafe fn store(&mut self, t: usize, p: *mut u8, stride: usize) {
        if self.cfg.palette != 1 {
            Self::fault("TILESTORED before LDTILECFG");
        }
        let (rows, colsb) = (self.cfg.rows[t] as usize, self.cfg.colsb[t] as usize);
        for r in 0..rows {
            // SAFETY: the caller's contract (rows x colsb bytes at p, stride apart).
            let dst = unsafe { std::slice::from_raw_parts_mut(p.add(r * stride), colsb) };
            dst.copy_from_slice(&self.regs[t][r * ROW_BYTES..r * ROW_BYTES + colsb]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration with tmm`t` of `rows` rows and `colsb` bytes (the rest as the kernels').
    fn cfg_with(shapes: &[(usize, u8, u16)]) -> TileCfg {
        let mut c = TileCfg::KERNEL;
        for &(t, rows, colsb) in shapes {
            c.rows[t] = rows;
            c.colsb[t] = colsb;
        }
        c
    }

    fn bf(x: f32) -> [u8; 2] {
        bf16::from_f32(x).to_bits().to_le_bytes()
    }

    /// TDPBF16PS on 2 x 2 pairs by hand: C (2 rows x 2 lanes) += A (2 rows x 2 pairs) · B (2
    /// pair rows x 2 lanes), lanes past C's width and rows past its height zero; loads zero the
    /// bytes past `colsb`.
    #[test]
    fn model_tdpbf16ps_by_hand() {
        let mut u = Model::new();
        // SAFETY: the model touches only the buffers passed, with the extents configured.
        unsafe {
            u.config(&cfg_with(&[(0, 2, 8), (4, 2, 8), (6, 2, 8)]));
            // A rows: [1, 2 | 3, 4], [5, 6 | 7, 8] (k pairs 0, 1).
            let a: Vec<u8> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 99.0, 99.0].iter().flat_map(|&x| bf(x)).collect();
            // B pair rows: k pair 0: col0 (1, 0), col1 (0, 1); k pair 1: col0 (2, 2), col1 (-1, 0.5).
            let b: Vec<u8> = [1.0, 0.0, 0.0, 1.0, 2.0, 2.0, -1.0, 0.5].iter().flat_map(|&x| bf(x)).collect();
            let c: Vec<u8> = [10.0f32, 20.0, 30.0, 40.0].iter().flat_map(|x| x.to_le_bytes()).collect();
            u.load(4, a.as_ptr(), 8);
            u.load(6, b.as_ptr(), 8);
            u.load(0, c.as_ptr(), 8);
            // Past colsb the register is zero (the 99s are not loaded).
            assert_eq!(u.regs[4][8..12], [0, 0, 0, 0]);
            u.dot(Dot::Bf16, 0);
            let mut out = [0f32; 4];
            u.store(0, out.as_mut_ptr().cast(), 8);
            // Row 0: col0 10 + 1·1 + 2·0 + 3·2 + 4·2 = 25; col1 20 + 0 + 2 + (-3) + 2 = 21.
            // Row 1: col0 30 + 5 + 14 + 16 = 65; col1 40 + 6 - 7 + 4 = 43.
            assert_eq!(out, [25.0, 21.0, 65.0, 43.0]);
            // The dot product zeroed C past its 2 lanes and 2 rows.
            assert!(u.regs[0][8..64].iter().chain(&u.regs[0][72..]).all(|&x| x == 0));
        }
    }

    /// TDPBSSD by hand: signed quads, wrap-around.
    #[test]
    fn model_tdpbssd_by_hand() {
        let mut u = Model::new();
        // SAFETY: as above.
        unsafe {
            u.config(&cfg_with(&[(0, 1, 4), (4, 1, 8), (6, 2, 4)]));
            let a: [i8; 8] = [1, -2, 3, -128, 127, 0, 1, 1];
            let b: [i8; 8] = [5, 6, 7, -128, 1, 1, -1, 2];
            let c = [i32::MAX];
            u.load(4, a.as_ptr().cast(), 8);
            u.load(6, b.as_ptr().cast(), 4);
            u.load(0, c.as_ptr().cast(), 4);
            u.dot(Dot::Int8, 0);
            let mut out = [0i32];
            u.store(0, out.as_mut_ptr().cast(), 4);
            // 5 - 12 + 21 + 16384 + 127 + 0 - 1 + 2 = 16526, added to i32::MAX with wrap-around.
            assert_eq!(out[0], i32::MAX.wrapping_add(16526));
        }
    }

    /// Denormal bf16 inputs count as zero; a denormal sum is flushed to zero.
    #[test]
    fn model_bf16_is_daz_ftz() {
        assert_eq!(bf16_daz(0x01, 0x00), 0.0);
        assert_eq!(bf16_daz(0x80, 0x3f), 1.0);
        assert_eq!(ftz(f32::from_bits(1)), 0.0);
        assert_eq!(ftz(-f32::MIN_POSITIVE), -f32::MIN_POSITIVE);
    }

    /// The AVX-512 store gives `generic_store`'s bits for every epilogue combination (alpha,
    /// beta·C, row and column biases; values that round differently when fused or reordered).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_store_matches_the_generic_store_bit_for_bit() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        const R: usize = 5;
        let f = |i: usize| ((i * 2654435761) % 1000) as f32 / 7.0 - 71.3;
        let acc: [[f32; NR]; R] = std::array::from_fn(|i| std::array::from_fn(|j| f(i * NR + j) * 1.0e3));
        let c0: Vec<f32> = (0..R * 40).map(|i| f(i + 77) * 0.37).collect();
        let (brow, bcol): (Vec<f32>, Vec<f32>) =
            ((0..R).map(|i| f(i + 5)).collect(), (0..NR).map(|j| f(j + 9)).collect());
        for combo in 0..16 {
            let args = |c: &mut Vec<f32>| TileArgs::<bf16, bf16, f32> {
                kgroups: 0,
                a: std::ptr::null(),
                a_kstride: 0,
                a_rs: 0,
                b: std::ptr::null(),
                b_kstride: 0,
                b_copy: std::ptr::null_mut(),
                c: c.as_mut_ptr(),
                rsc: 40,
                alpha: if combo & 1 != 0 { 0.3 } else { 1.0 },
                beta: -1.7,
                read_c: combo & 2 != 0,
                bias_row: if combo & 4 != 0 { brow.as_ptr() } else { std::ptr::null() },
                bias_col: if combo & 8 != 0 { bcol.as_ptr() } else { std::ptr::null() },
                colsum: std::ptr::null(),
                pf: std::ptr::null(),
                pf_lines: 0,
            };
            let (mut want, mut got) = (c0.clone(), c0.clone());
            // SAFETY: C has R rows of 40 >= 32 columns; the biases cover R rows / 32 columns;
            // AVX-512F checked above.
            unsafe {
                generic_store::<bf16, bf16, f32, R, NR>(&args(&mut want), &acc);
                store_f32_avx512::<R>(&args(&mut got), &acc);
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "epilogue combination {combo:#06b}");
        }
    }

    #[test]
    #[should_panic(expected = "#UD")]
    fn model_rejects_mismatched_tiles() {
        let mut u = Model::new();
        // SAFETY: no memory is touched before the fault.
        unsafe {
            u.config(&cfg_with(&[(6, 3, 64)]));
            u.dot(Dot::Bf16, 0);
        }
    }

    /// Pre-packed bf16 B on the model family (the panels `PackedB` makes for AMX), through the
    /// driver's pre-packed path, against a naive loop.
    #[test]
    fn model_prepacked_bf16_matches_naive() {
        use crate::kernels::gemm::driver::{BSource, Job, PackedPanels, RawMat, RawMatMut};
        use crate::kernels::gemm::{Activation, Blocking, blocking};
        for &(m, n, k, kc) in &[(33, 40, 70, 32), (5, 64, 33, 64), (40, 31, 1, 0)] {
            let v = |x: usize| bf16::from_f32(((x * 7 % 17) as f32 - 8.0) / 8.0);
            let a: Vec<bf16> = (0..m * k).map(v).collect();
            let b: Vec<bf16> = (0..k * n).map(|x| v(x + 3)).collect();
            let mut c = vec![0.0f32; m * n];
            let fam = &MODEL_AMX_BF16;
            let kc = blocking::packed_kc(fam.nr, fam.g, 2, Blocking { kc, mc: 0, nc: 0 });
            // SAFETY: b holds k x n values.
            let pp =
                unsafe { PackedPanels::pack::<bf16, bf16>(fam, RawMat { ptr: b.as_ptr(), rs: n, cs: 1 }, k, n, kc) };
            let job = Job {
                m,
                n,
                k,
                a: RawMat { ptr: a.as_ptr(), rs: k, cs: 1 },
                b: RawMat { ptr: std::ptr::null(), rs: 0, cs: 0 },
                c: RawMatMut { ptr: c.as_mut_ptr(), rs: n, cs: 1 },
                alpha: 1.0,
                beta: 0.0,
                bias_row: None,
                bias_col: None,
                act: Activation::None,
                finish: None,
            };
            let blk = blocking::block_sizes(fam.mr, fam.nr, fam.g, 2, 2, Blocking { kc: pp.kc, mc: 64, nc: 0 });
            crate::kernels::gemm::driver::run(fam, &job, &BSource::Prepacked(&pp), blk, 1);
            for i in 0..m {
                for j in 0..n {
                    // Multiples of 1/8 below 1: every product and partial sum is exact in f32.
                    let s: f32 = (0..k).map(|p| a[i * k + p].to_f32() * b[p * n + j].to_f32()).sum();
                    assert_eq!(c[i * n + j], s, "{m}x{n}x{k} kc={kc} ({i},{j})");
                }
            }
        }
    }
}
