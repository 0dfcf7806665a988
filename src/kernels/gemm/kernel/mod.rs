//! The microkernel contract shared by every ISA: the tile arguments, kernel families (one tile
//! function per row count), packed element conversions, aligned scratch buffers, and the
//! portable generic tile (the reference the SIMD tiles are tested against).

use super::epilogue::Scalar;
use super::isa::Isa;
use half::{bf16, f16};

mod aligned;

pub use aligned::Scratch;
pub(crate) use aligned::{AlignedBuf, PanelBuf};

/// Arguments of one microkernel call: an `mr x nr` tile of C from a packed A micro-panel
/// (`kgroups` groups of `g` k values for each of `MR_max` rows) and a B micro-panel (`kgroups`
/// groups of `g` k values for each of `nr` columns, `b_kstride` elements apart).
///
/// The tile computes `acc = Σ a·b + colsum[j]` (non-null colsum only: the VNNI correction
/// belongs to the product), then `acc *= alpha` (when `alpha != 1`), `acc += beta·C` (when
/// `read_c`), `acc += bias_row[i] + bias_col[j]` (non-null pointers only), and
/// stores the full `mr x nr` tile at `c` with row stride `rsc` and unit column stride.
pub(crate) struct TileArgs<PA, PB, T> {
    pub kgroups: usize,
    pub a: *const PA,
    /// Elements between consecutive k groups of the A panel (`MR_max * g` packed, 1 when A is
    /// read in place).
    pub a_kstride: usize,
    /// Elements between the rows of the A panel: `g` packed; A's row stride when a row-major
    /// A is read in place (only with `g == 1`, see [`Family::reads_a_in_place`]).
    pub a_rs: usize,
    pub b: *const PB,
    /// Elements between consecutive k groups of the B panel (`nr * g` packed, `rsb` direct).
    pub b_kstride: usize,
    /// When non-null, the tile also stores each k group of B it loads here, `nr * g` elements
    /// a group: the direct path's first row tile packs a strided panel for the tiles after it.
    pub b_copy: *mut PB,
    pub c: *mut T,
    pub rsc: usize,
    pub alpha: T,
    pub beta: T,
    pub read_c: bool,
    pub bias_row: *const T,
    pub bias_col: *const T,
    /// Per-column integer correction (VNNI's unsigned offset); null for other kernels.
    pub colsum: *const i32,
    /// When non-null, `pf_lines` cache lines from here (the next B panel) to fetch into L2 while
    /// the k loop runs, spread over its steps (a hint; tiles that do not prefetch ignore it).
    pub pf: *const u8,
    pub pf_lines: usize,
}

/// A tile function. # Safety: pointers valid for the extents in [`TileArgs`], the CPU has the
/// kernel's features.
pub(crate) type TileFn<PA, PB, T> = unsafe fn(&TileArgs<PA, PB, T>);

/// A family of tiles sharing `nr`, the packing layout and the ISA; `tiles[r - 1]` computes
/// `r` rows (`r <= mr`), so row remainders need no padding work.
pub(crate) struct Family<PA: 'static, PB: 'static, T: 'static> {
    pub name: &'static str,
    pub isa: Isa,
    pub mr: usize,
    pub nr: usize,
    /// k values per group in the packed panels (1 float, 2 bf16 pairs, 4 int8 quads).
    pub g: usize,
    pub tiles: &'static [TileFn<PA, PB, T>],
    /// k values per group of the packed A panels when they differ from `g` (0: `g`): the AMX
    /// tiles read A rows of 64 bytes (32 bf16 / 64 int8 k values) against B in pairs / quads.
    pub a_group: usize,
    /// Whether the tile needs `colsum` (-128 × column sums of each packed B block).
    pub needs_colsum: bool,
}

impl<PA, PB, T> Family<PA, PB, T> {
    /// k values per group of the packed A panels (a multiple of `g`).
    pub fn ga(&self) -> usize {
        if self.a_group == 0 { self.g } else { self.a_group }
    }

    /// Whether the tiles honour [`TileArgs::a_rs`] other than `g` (every tile but SME's, which
    /// loads each k's A rows as one vector).
    pub fn reads_a_in_place(&self) -> bool {
        self.g == 1 && self.isa != Isa::Sme
    }

    /// Whether the tiles honour [`TileArgs::b_copy`] (the SME tile, in asm, does not).
    pub fn copies_b_in_tile(&self) -> bool {
        self.isa != Isa::Sme
    }

    /// Estimated cycles per k step of one `rows x nr` tile: bounded by FMA issue (2 per
    /// cycle), loads (2 per cycle: B vectors + A broadcasts) and the FMA latency (about 4
    /// cycles: each accumulator gets one FMA per k step, so small tiles stall).
    pub fn panel_cost(&self, rows: usize, lanes: usize) -> f64 {
        let nv = (self.nr / lanes).max(1) as f64;
        let r = rows as f64;
        (r * nv / 2.0).max((nv + r) / 2.0).max(4.0)
    }

    /// Estimated cycles per k step of `rows` rows of one column panel: whole `mr`-row tiles and
    /// a shorter last one.
    pub fn rows_cost(&self, rows: usize, lanes: usize) -> f64 {
        (rows / self.mr) as f64 * self.panel_cost(self.mr, lanes)
            + if rows.is_multiple_of(self.mr) { 0.0 } else { self.panel_cost(rows % self.mr, lanes) }
    }
}

/// Conversion from an input element to a packed element.
pub(crate) trait PackFrom<TI: Copy>: Copy + Send + Sync + 'static {
    /// The padding value (multiplies to zero with the other operand's padding or data).
    const PAD: Self;
    /// Whether `Self` and `TI` are the same type (then B can be read in place).
    const IDENTITY: bool = false;
    fn cvt(x: TI) -> Self;
    /// Converts `src` into `dst` (same length): element by element unless the type has a vector
    /// conversion.
    #[inline(always)]
    fn cvt_run(src: &[TI], dst: &mut [Self]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = Self::cvt(x);
        }
    }
}

impl PackFrom<f32> for f32 {
    const PAD: f32 = 0.0;
    const IDENTITY: bool = true;
    #[inline(always)]
    fn cvt(x: f32) -> f32 {
        x
    }
}
impl PackFrom<f64> for f64 {
    const PAD: f64 = 0.0;
    const IDENTITY: bool = true;
    #[inline(always)]
    fn cvt(x: f64) -> f64 {
        x
    }
}
impl PackFrom<bf16> for f32 {
    const PAD: f32 = 0.0;
    #[inline(always)]
    fn cvt(x: bf16) -> f32 {
        f32::from_bits((x.to_bits() as u32) << 16)
    }
    /// Eight values at a time in SSE2 registers (part of every x86-64 CPU): each bf16 is
    /// interleaved under a zero halfword (`punpcklwd`/`punpckhwd`), which is the shift left by
    /// 16 that makes its f32. Exact, like [`PackFrom::cvt`].
    #[inline(always)]
    fn cvt_run(src: &[bf16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut i = 0;
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            while i + 8 <= n {
                // SAFETY: i + 8 <= n, so the 16-byte load of src[i..i+8] and the two 16-byte
                // stores to dst[i..i+8] are in bounds (unaligned forms); SSE2 is baseline x86-64.
                unsafe {
                    let v = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
                    let z = _mm_setzero_si128();
                    let d = dst.as_mut_ptr().add(i).cast::<__m128i>();
                    _mm_storeu_si128(d, _mm_unpacklo_epi16(z, v));
                    _mm_storeu_si128(d.add(1), _mm_unpackhi_epi16(z, v));
                }
                i += 8;
            }
        }
        for (d, &x) in dst[i..n].iter_mut().zip(&src[i..n]) {
            *d = Self::cvt(x);
        }
    }
}
impl PackFrom<f16> for f32 {
    const PAD: f32 = 0.0;
    #[inline(always)]
    fn cvt(x: f16) -> f32 {
        x.to_f32()
    }
    /// F16C `vcvtph2ps`, 8 values an instruction, where the CPU has it (`half` detects it).
    #[inline(always)]
    fn cvt_run(src: &[f16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        let n = src.len().min(dst.len());
        src[..n].convert_to_f32_slice(&mut dst[..n]);
    }
}
impl PackFrom<bf16> for bf16 {
    const PAD: bf16 = bf16::ZERO;
    const IDENTITY: bool = true;
    #[inline(always)]
    fn cvt(x: bf16) -> bf16 {
        x
    }
}
impl PackFrom<i8> for i8 {
    const PAD: i8 = 0;
    const IDENTITY: bool = true;
    #[inline(always)]
    fn cvt(x: i8) -> i8 {
        x
    }
}
/// `x + 128` as an unsigned byte (VNNI multiplies u8 by i8).
impl PackFrom<i8> for u8 {
    const PAD: u8 = 0;
    #[inline(always)]
    fn cvt(x: i8) -> u8 {
        (x as u8) ^ 0x80
    }
}
impl PackFrom<i8> for i32 {
    const PAD: i32 = 0;
    #[inline(always)]
    fn cvt(x: i8) -> i32 {
        x as i32
    }
}

/// The epilogue of the portable tiles (the same steps as the SIMD template in `tile.rs`).
///
/// # Safety
/// See [`TileArgs`].
pub(crate) unsafe fn generic_store<PA, PB, T: Scalar, const MR: usize, const NR: usize>(
    t: &TileArgs<PA, PB, T>,
    acc: &[[T; NR]; MR],
) {
    // SAFETY: the caller guarantees `c` and the non-null bias/colsum pointers cover the tile.
    unsafe {
        for (i, row) in acc.iter().enumerate() {
            let crow = t.c.add(i * t.rsc);
            for (j, x) in row.iter().enumerate() {
                let mut v = *x;
                if !t.colsum.is_null() {
                    v = T::add(v, T::from_i32(*t.colsum.add(j)));
                }
                if t.alpha != T::ONE {
                    v = T::mul_add(v, t.alpha, T::ZERO);
                }
                if t.read_c {
                    v = T::mul_add(t.beta, *crow.add(j), v);
                }
                if !t.bias_row.is_null() {
                    v = T::add(v, *t.bias_row.add(i));
                }
                if !t.bias_col.is_null() {
                    v = T::add(v, *t.bias_col.add(j));
                }
                *crow.add(j) = v;
            }
        }
    }
}

/// The portable tile: `MR` rows x `NR` columns, generic over the element type; tests hold the
/// SIMD tiles against it.
///
/// # Safety
/// See [`TileArgs`]; `g == 1`.
pub(crate) unsafe fn generic_tile<T: Scalar, const MR: usize, const NR: usize>(t: &TileArgs<T, T, T>) {
    let mut acc = [[T::ZERO; NR]; MR];
    // SAFETY: the caller guarantees the panels hold `kgroups` steps at the given strides and
    // that `c` (and the non-null bias pointers) cover the MR x NR tile.
    unsafe {
        let (mut a, mut b, mut bc) = (t.a, t.b, t.b_copy);
        for _ in 0..t.kgroups {
            let bv: [T; NR] = std::ptr::read_unaligned(b.cast());
            if !bc.is_null() {
                std::ptr::write_unaligned(bc.cast(), bv);
                bc = bc.add(NR);
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let av = *a.add(i * t.a_rs);
                for (x, &bj) in row.iter_mut().zip(bv.iter()) {
                    *x = T::mul_add(av, bj, *x);
                }
            }
            a = a.add(t.a_kstride);
            b = b.add(t.b_kstride);
        }
        generic_store(t, &acc);
    }
}

/// Widening of a packed element to the accumulator type.
#[cfg(test)]
pub(crate) trait Widen<T> {
    fn widen(self) -> T;
}
#[cfg(test)]
impl Widen<i32> for u8 {
    fn widen(self) -> i32 {
        self as i32
    }
}
#[cfg(test)]
impl Widen<i32> for i8 {
    fn widen(self) -> i32 {
        self as i32
    }
}
#[cfg(test)]
impl Widen<f32> for bf16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// A scalar model of the grouped SIMD tiles (`vdpbf16ps` pairs with `G = 2`, `vpdpbusd` quads
/// with `G = 4`): same packed layout, same column-sum correction, plain Rust arithmetic. It
/// lets hosts without AVX512-BF16/VNNI test the grouped packing and the VNNI offset logic.
///
/// # Safety
/// See [`TileArgs`].
#[cfg(test)]
pub(crate) unsafe fn grouped_tile<PA, PB, T, const MR: usize, const NR: usize, const G: usize>(t: &TileArgs<PA, PB, T>)
where
    PA: Copy + Widen<T>,
    PB: Copy + Widen<T>,
    T: Scalar,
{
    let mut acc = [[T::ZERO; NR]; MR];
    // SAFETY: the caller guarantees the panels hold `kgroups` groups at the given strides and
    // that the tile and the non-null side pointers are in bounds.
    unsafe {
        let (mut a, mut b) = (t.a, t.b);
        for _ in 0..t.kgroups {
            for (i, row) in acc.iter_mut().enumerate() {
                for (j, x) in row.iter_mut().enumerate() {
                    for q in 0..G {
                        let av: T = (*a.add(i * t.a_rs + q)).widen();
                        let bv: T = (*b.add(j * G + q)).widen();
                        *x = T::mul_add(av, bv, *x);
                    }
                }
            }
            a = a.add(t.a_kstride);
            b = b.add(t.b_kstride);
        }
        generic_store(t, &acc);
    }
}

/// The scalar model of the VNNI family (same layout: 14 x 32, u8 x i8 quads, column sums).
#[cfg(test)]
pub(crate) static MODEL_VNNI: Family<u8, i8, i32> = Family {
    name: "model-vnni-i8-3x32",
    isa: Isa::Generic,
    mr: 3,
    nr: 32,
    g: 4,
    tiles: &[
        grouped_tile::<u8, i8, i32, 1, 32, 4>,
        grouped_tile::<u8, i8, i32, 2, 32, 4>,
        grouped_tile::<u8, i8, i32, 3, 32, 4>,
    ],
    a_group: 0,
    needs_colsum: true,
};

/// The scalar model of the AVX512-BF16 family's layout (bf16 pairs).
#[cfg(test)]
pub(crate) static MODEL_BF16: Family<bf16, bf16, f32> = Family {
    name: "model-bf16-3x32",
    isa: Isa::Generic,
    mr: 3,
    nr: 32,
    g: 2,
    tiles: &[
        grouped_tile::<bf16, bf16, f32, 1, 32, 2>,
        grouped_tile::<bf16, bf16, f32, 2, 32, 2>,
        grouped_tile::<bf16, bf16, f32, 3, 32, 2>,
    ],
    a_group: 0,
    needs_colsum: false,
};

macro_rules! generic_family {
    ($name:ident, $T:ty, $nr:literal) => {
        pub(crate) static $name: Family<$T, $T, $T> = Family {
            name: concat!("generic-", stringify!($T), "-4x", $nr),
            isa: Isa::Generic,
            mr: 4,
            nr: $nr,
            g: 1,
            tiles: &[
                generic_tile::<$T, 1, $nr>,
                generic_tile::<$T, 2, $nr>,
                generic_tile::<$T, 3, $nr>,
                generic_tile::<$T, 4, $nr>,
            ],
            a_group: 0,
            needs_colsum: false,
        };
    };
}

generic_family!(GENERIC_F32, f32, 8);
generic_family!(GENERIC_F64, f64, 8);
generic_family!(GENERIC_I32, i32, 8);

#[cfg(test)]
pub(crate) mod soft;

#[cfg(test)]
mod tests {
    use super::PackFrom;
    use half::{bf16, f16};

    /// The run conversions against the definitions: bf16 bits shifted into the top of an f32,
    /// f16 through f64 (exact), at every length up to 40 (vector body and scalar tail) and on
    /// special values (signed zero, denormals, infinities, NaN payloads).
    #[test]
    fn conversion_runs_match_the_definitions() {
        let bits: Vec<u16> = (0..40u32)
            .map(|i| match i % 8 {
                0 => 0x8000,
                1 => 0x0001,
                2 => 0x7f80,
                3 => 0xffc1,
                _ => (i.wrapping_mul(40503) % 65536) as u16,
            })
            .collect();
        for len in 0..=bits.len() {
            let src: Vec<bf16> = bits[..len].iter().map(|&b| bf16::from_bits(b)).collect();
            let mut dst = vec![0.0f32; len];
            <f32 as PackFrom<bf16>>::cvt_run(&src, &mut dst);
            for (d, &b) in dst.iter().zip(&bits) {
                assert_eq!(d.to_bits(), (b as u32) << 16, "len {len} bits {b:#06x}");
            }
            let src: Vec<f16> = bits[..len].iter().map(|&b| f16::from_bits(b)).collect();
            <f32 as PackFrom<f16>>::cvt_run(&src, &mut dst);
            for (d, &b) in dst.iter().zip(&bits) {
                let want = f16::from_bits(b).to_f64();
                if want.is_nan() {
                    assert!(d.is_nan(), "len {len} bits {b:#06x}");
                } else {
                    assert_eq!(*d as f64, want, "len {len} bits {b:#06x}");
                }
            }
        }
    }
}
