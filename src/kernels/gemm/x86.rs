//! x86-64 microkernels: a small vocabulary of vector operations per ISA and element type (one
//! macro each), and one tile template stamped for every vocabulary and row count. AVX2+FMA
//! f32/f64, AVX-512F f32/f64, AVX512-BF16 (`vdpbf16ps`, bf16 pairs into f32) and AVX512-VNNI
//! (`vpdpbusd`, int8 quads into i32).

use std::arch::x86_64::*;

use super::epilogue::Scalar;
use super::isa::Isa;
use super::kernel::{Family, TileArgs};
use half::bf16;

// ---- vocabularies ----

macro_rules! v_avx2_f32 {
    (W) => {
        8
    };
    (G) => {
        1
    };
    (zero) => {
        _mm256_setzero_ps()
    };
    (zero_b) => {
        _mm256_setzero_ps()
    };
    (load_b, $p:expr) => {
        _mm256_loadu_ps($p)
    };
    (bcast_a, $p:expr) => {
        _mm256_set1_ps(*$p)
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        _mm256_fmadd_ps($a, $b, $acc)
    };
    (splat, $x:expr) => {
        _mm256_set1_ps($x)
    };
    (mul, $a:expr, $b:expr) => {
        _mm256_mul_ps($a, $b)
    };
    (add, $a:expr, $b:expr) => {
        _mm256_add_ps($a, $b)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        _mm256_fmadd_ps($a, $b, $c)
    };
    (load_c, $p:expr) => {
        _mm256_loadu_ps($p)
    };
    (store_c, $p:expr, $v:expr) => {
        _mm256_storeu_ps($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        _mm256_setzero_ps()
    }};
}

macro_rules! v_avx2_f64 {
    (W) => {
        4
    };
    (G) => {
        1
    };
    (zero) => {
        _mm256_setzero_pd()
    };
    (zero_b) => {
        _mm256_setzero_pd()
    };
    (load_b, $p:expr) => {
        _mm256_loadu_pd($p)
    };
    (bcast_a, $p:expr) => {
        _mm256_set1_pd(*$p)
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        _mm256_fmadd_pd($a, $b, $acc)
    };
    (splat, $x:expr) => {
        _mm256_set1_pd($x)
    };
    (mul, $a:expr, $b:expr) => {
        _mm256_mul_pd($a, $b)
    };
    (add, $a:expr, $b:expr) => {
        _mm256_add_pd($a, $b)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        _mm256_fmadd_pd($a, $b, $c)
    };
    (load_c, $p:expr) => {
        _mm256_loadu_pd($p)
    };
    (store_c, $p:expr, $v:expr) => {
        _mm256_storeu_pd($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        _mm256_setzero_pd()
    }};
}

macro_rules! v_avx512_f32 {
    (W) => {
        16
    };
    (G) => {
        1
    };
    (zero) => {
        _mm512_setzero_ps()
    };
    (zero_b) => {
        _mm512_setzero_ps()
    };
    (load_b, $p:expr) => {
        _mm512_loadu_ps($p)
    };
    (bcast_a, $p:expr) => {
        _mm512_set1_ps(*$p)
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        _mm512_fmadd_ps($a, $b, $acc)
    };
    (splat, $x:expr) => {
        _mm512_set1_ps($x)
    };
    (mul, $a:expr, $b:expr) => {
        _mm512_mul_ps($a, $b)
    };
    (add, $a:expr, $b:expr) => {
        _mm512_add_ps($a, $b)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        _mm512_fmadd_ps($a, $b, $c)
    };
    (load_c, $p:expr) => {
        _mm512_loadu_ps($p)
    };
    (store_c, $p:expr, $v:expr) => {
        _mm512_storeu_ps($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        _mm512_setzero_ps()
    }};
}

macro_rules! v_avx512_f64 {
    (W) => {
        8
    };
    (G) => {
        1
    };
    (zero) => {
        _mm512_setzero_pd()
    };
    (zero_b) => {
        _mm512_setzero_pd()
    };
    (load_b, $p:expr) => {
        _mm512_loadu_pd($p)
    };
    (bcast_a, $p:expr) => {
        _mm512_set1_pd(*$p)
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        _mm512_fmadd_pd($a, $b, $acc)
    };
    (splat, $x:expr) => {
        _mm512_set1_pd($x)
    };
    (mul, $a:expr, $b:expr) => {
        _mm512_mul_pd($a, $b)
    };
    (add, $a:expr, $b:expr) => {
        _mm512_add_pd($a, $b)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        _mm512_fmadd_pd($a, $b, $c)
    };
    (load_c, $p:expr) => {
        _mm512_loadu_pd($p)
    };
    (store_c, $p:expr, $v:expr) => {
        _mm512_storeu_pd($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        _mm512_setzero_pd()
    }};
}

/// Reinterprets 512 integer bits as 32 bf16 lanes (`__m512bh` has no cast intrinsic).
macro_rules! as_bh {
    ($x:expr) => {
        // Both types are 64-byte plain SIMD values; every bit pattern is a valid bf16 vector.
        std::mem::transmute::<__m512i, __m512bh>($x)
    };
}

macro_rules! v_avx512_bf16 {
    (W) => {
        16
    };
    (G) => {
        2
    };
    (zero) => {
        _mm512_setzero_ps()
    };
    (zero_b) => {
        as_bh!(_mm512_setzero_si512())
    };
    (load_b, $p:expr) => {
        as_bh!(_mm512_loadu_si512($p.cast()))
    };
    (bcast_a, $p:expr) => {
        as_bh!(_mm512_set1_epi32(std::ptr::read_unaligned($p.cast::<i32>())))
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        _mm512_dpbf16_ps($acc, $a, $b)
    };
    (splat, $x:expr) => {
        _mm512_set1_ps($x)
    };
    (mul, $a:expr, $b:expr) => {
        _mm512_mul_ps($a, $b)
    };
    (add, $a:expr, $b:expr) => {
        _mm512_add_ps($a, $b)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        _mm512_fmadd_ps($a, $b, $c)
    };
    (load_c, $p:expr) => {
        _mm512_loadu_ps($p)
    };
    (store_c, $p:expr, $v:expr) => {
        _mm512_storeu_ps($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        _mm512_setzero_ps()
    }};
}

macro_rules! v_avx512_vnni {
    (W) => {
        16
    };
    (G) => {
        4
    };
    (zero) => {
        _mm512_setzero_si512()
    };
    (zero_b) => {
        _mm512_setzero_si512()
    };
    (load_b, $p:expr) => {
        _mm512_loadu_si512($p.cast())
    };
    (bcast_a, $p:expr) => {
        _mm512_set1_epi32(std::ptr::read_unaligned($p.cast::<i32>()))
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        _mm512_dpbusd_epi32($acc, $a, $b)
    };
    (splat, $x:expr) => {
        _mm512_set1_epi32($x)
    };
    (mul, $a:expr, $b:expr) => {
        _mm512_mullo_epi32($a, $b)
    };
    (add, $a:expr, $b:expr) => {
        _mm512_add_epi32($a, $b)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        _mm512_add_epi32(_mm512_mullo_epi32($a, $b), $c)
    };
    (load_c, $p:expr) => {
        _mm512_loadu_si512($p.cast())
    };
    (store_c, $p:expr, $v:expr) => {
        _mm512_storeu_si512($p.cast(), $v)
    };
    (load_colsum, $p:expr) => {
        _mm512_loadu_si512($p.cast())
    };
}

/// One row of an AVX2 f32 k step (see `simd_tile!`'s `@row`); for 3 vectors of B, the
/// broadcast and its FMAs as one asm block. With 12 accumulators, 3 B vectors and the broadcast
/// the 4 x 24 tile needs all 16 ymm registers, and LLVM's schedule (the next row's broadcast
/// hoisted above this row's last FMA) spilled an accumulator to the stack inside the k loop:
/// a store and reload on its dependency chain every k step, 38 instead of 85 GFLOP/s (Zen 3).
/// As one block, the broadcast register is free again before the next row's broadcast. Two
/// vectors (6 x 16, 15 registers) stay with the compiler: the same asm was ~1% slower there.
macro_rules! avx2_f32_row {
    ($v:ident, $row:expr, $ap:expr, $bv:expr) => {{
        let row: &mut [__m256] = &mut $row[..];
        let bv: &[__m256] = &$bv[..];
        let ap: *const f32 = $ap;
        match (row, bv) {
            ([c0, c1, c2], [b0, b1, b2]) => std::arch::asm!(
                "vbroadcastss {t}, dword ptr [{a}]",
                "vfmadd231ps {c0}, {t}, {b0}",
                "vfmadd231ps {c1}, {t}, {b1}",
                "vfmadd231ps {c2}, {t}, {b2}",
                a = in(reg) ap,
                t = out(ymm_reg) _,
                c0 = inout(ymm_reg) *c0,
                c1 = inout(ymm_reg) *c1,
                c2 = inout(ymm_reg) *c2,
                b0 = in(ymm_reg) *b0,
                b1 = in(ymm_reg) *b1,
                b2 = in(ymm_reg) *b2,
                options(pure, readonly, nostack, preserves_flags),
            ),
            (row, bv) => simd_tile!(@row [] $v, row, ap, bv),
        }
    }};
}

simd_tile!(tile_avx2_f32, "avx2,fma", v_avx2_f32, f32, f32, f32, row = avx2_f32_row);
simd_tile!(tile_avx2_f64, "avx2,fma", v_avx2_f64, f64, f64, f64);
simd_tile!(tile_avx512_f32, "avx512f,avx512bw,avx512vl,avx2,fma", v_avx512_f32, f32, f32, f32);
simd_tile!(tile_avx512_f64, "avx512f,avx512bw,avx512vl,avx2,fma", v_avx512_f64, f64, f64, f64);
simd_tile!(tile_avx512_bf16, "avx512f,avx512bw,avx512vl,avx512bf16", v_avx512_bf16, bf16, bf16, f32);
simd_tile!(tile_avx512_vnni, "avx512f,avx512bw,avx512vl,avx512vnni", v_avx512_vnni, u8, i8, i32);

/// AVX2 f32, 6 x 16 (12 accumulators): large shapes.
pub(crate) static AVX2_F32: Family<f32, f32, f32> = Family {
    name: "avx2-f32-6x16",
    isa: Isa::Avx2,
    mr: 6,
    nr: 16,
    g: 1,
    tiles: tiles!(tile_avx2_f32, 2; 1 2 3 4 5 6),
    a_group: 0,
    needs_colsum: false,
};

/// AVX2 f32, 4 x 24 (12 accumulators): skinny shapes (small M).
pub(crate) static AVX2_F32_WIDE: Family<f32, f32, f32> = Family {
    name: "avx2-f32-4x24",
    isa: Isa::Avx2,
    mr: 4,
    nr: 24,
    g: 1,
    tiles: tiles!(tile_avx2_f32, 3; 1 2 3 4),
    a_group: 0,
    needs_colsum: false,
};

/// AVX2 f64, 6 x 8.
pub(crate) static AVX2_F64: Family<f64, f64, f64> = Family {
    name: "avx2-f64-6x8",
    isa: Isa::Avx2,
    mr: 6,
    nr: 8,
    g: 1,
    tiles: tiles!(tile_avx2_f64, 2; 1 2 3 4 5 6),
    a_group: 0,
    needs_colsum: false,
};

/// AVX-512 f32, 14 x 32 (28 accumulators): large shapes.
pub(crate) static AVX512_F32: Family<f32, f32, f32> = Family {
    name: "avx512-f32-14x32",
    isa: Isa::Avx512,
    mr: 14,
    nr: 32,
    g: 1,
    tiles: tiles!(tile_avx512_f32, 2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    a_group: 0,
    needs_colsum: false,
};

/// AVX-512 f32, 8 x 48 (24 accumulators): skinny shapes (small M, e.g. 8 or 16 rows).
pub(crate) static AVX512_F32_WIDE: Family<f32, f32, f32> = Family {
    name: "avx512-f32-8x48",
    isa: Isa::Avx512,
    mr: 8,
    nr: 48,
    g: 1,
    tiles: tiles!(tile_avx512_f32, 3; 1 2 3 4 5 6 7 8),
    a_group: 0,
    needs_colsum: false,
};

/// AVX-512 f64, 14 x 16.
pub(crate) static AVX512_F64: Family<f64, f64, f64> = Family {
    name: "avx512-f64-14x16",
    isa: Isa::Avx512,
    mr: 14,
    nr: 16,
    g: 1,
    tiles: tiles!(tile_avx512_f64, 2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    a_group: 0,
    needs_colsum: false,
};

/// AVX512-BF16, 14 x 32: bf16 pairs, f32 accumulation.
pub(crate) static AVX512_BF16: Family<bf16, bf16, f32> = Family {
    name: "avx512bf16-14x32",
    isa: Isa::Avx512,
    mr: 14,
    nr: 32,
    g: 2,
    tiles: tiles!(tile_avx512_bf16, 2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    a_group: 0,
    needs_colsum: false,
};

/// AVX512-VNNI, 14 x 32: (i8 + 128) as u8 times i8 quads into i32, corrected by -128·Σb.
pub(crate) static AVX512_VNNI: Family<u8, i8, i32> = Family {
    name: "avx512vnni-i8-14x32",
    isa: Isa::Avx512,
    mr: 14,
    nr: 32,
    g: 4,
    tiles: tiles!(tile_avx512_vnni, 2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    a_group: 0,
    needs_colsum: true,
};
