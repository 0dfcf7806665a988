//! aarch64 Advanced SIMD (NEON) microkernels: f32 8 x 12 and 4 x 16 tiles, f64 8 x 6, stamped
//! from the shared tile template with a NEON vocabulary.

use std::arch::aarch64::*;

use super::epilogue::Scalar;
use super::isa::Isa;
use super::kernel::{Family, TileArgs};

macro_rules! v_neon_f32 {
    (W) => {
        4
    };
    (G) => {
        1
    };
    (zero) => {
        vdupq_n_f32(0.0)
    };
    (zero_b) => {
        vdupq_n_f32(0.0)
    };
    (load_b, $p:expr) => {
        vld1q_f32($p)
    };
    (bcast_a, $p:expr) => {
        vld1q_dup_f32($p)
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        vfmaq_f32($acc, $a, $b)
    };
    (splat, $x:expr) => {
        vdupq_n_f32($x)
    };
    (mul, $a:expr, $b:expr) => {
        vmulq_f32($a, $b)
    };
    (add, $a:expr, $b:expr) => {
        vaddq_f32($a, $b)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        vfmaq_f32($c, $a, $b)
    };
    (load_c, $p:expr) => {
        vld1q_f32($p)
    };
    (store_c, $p:expr, $v:expr) => {
        vst1q_f32($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        vdupq_n_f32(0.0)
    }};
}

macro_rules! v_neon_f64 {
    (W) => {
        2
    };
    (G) => {
        1
    };
    (zero) => {
        vdupq_n_f64(0.0)
    };
    (zero_b) => {
        vdupq_n_f64(0.0)
    };
    (load_b, $p:expr) => {
        vld1q_f64($p)
    };
    (bcast_a, $p:expr) => {
        vld1q_dup_f64($p)
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        vfmaq_f64($acc, $a, $b)
    };
    (splat, $x:expr) => {
        vdupq_n_f64($x)
    };
    (mul, $a:expr, $b:expr) => {
        vmulq_f64($a, $b)
    };
    (add, $a:expr, $b:expr) => {
        vaddq_f64($a, $b)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        vfmaq_f64($c, $a, $b)
    };
    (load_c, $p:expr) => {
        vld1q_f64($p)
    };
    (store_c, $p:expr, $v:expr) => {
        vst1q_f64($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        vdupq_n_f64(0.0)
    }};
}

simd_tile!(tile_neon_f32, "neon", v_neon_f32, f32, f32, f32);
simd_tile!(tile_neon_f64, "neon", v_neon_f64, f64, f64, f64);

/// NEON f32, 8 x 12 (24 of the 32 vector registers accumulate): large shapes.
pub(crate) static NEON_F32: Family<f32, f32, f32> = Family {
    name: "neon-f32-8x12",
    isa: Isa::Neon,
    mr: 8,
    nr: 12,
    g: 1,
    tiles: tiles!(tile_neon_f32, 3; 1 2 3 4 5 6 7 8),
    a_group: 0,
    needs_colsum: false,
};

/// NEON f32, 4 x 16: small M.
pub(crate) static NEON_F32_WIDE: Family<f32, f32, f32> = Family {
    name: "neon-f32-4x16",
    isa: Isa::Neon,
    mr: 4,
    nr: 16,
    g: 1,
    tiles: tiles!(tile_neon_f32, 4; 1 2 3 4),
    a_group: 0,
    needs_colsum: false,
};

/// NEON f64, 8 x 6.
pub(crate) static NEON_F64: Family<f64, f64, f64> = Family {
    name: "neon-f64-8x6",
    isa: Isa::Neon,
    mr: 8,
    nr: 6,
    g: 1,
    tiles: tiles!(tile_neon_f64, 3; 1 2 3 4 5 6 7 8),
    a_group: 0,
    needs_colsum: false,
};
