//! aarch64 SME f32 microkernel: FMOPA outer products into the four 32-bit ZA tiles (a 2 x 2
//! grid of SVL_s x SVL_s tiles), written as inline asm because the SME target features are
//! unstable. The streaming vector length is read at run time (RDSVL), and the family (tile
//! geometry `2·SVL_s`, capped at 32) is picked from it: 8 x 8 at SVL 128, 16 x 16 at SVL 256,
//! 32 x 32 at SVL 512 and above (one predicated ZA tile then covers it).
//!
//! The tile consumes the same packed panels as every other family (A: `mr` rows per k step,
//! B: `nr` columns per k step at `b_kstride`), stores the finished ZA rows to a stack buffer
//! and applies the epilogue (alpha, beta·C, biases) in ordinary (non-streaming) code.

use std::arch::asm;
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use super::isa::{Isa, isa_supported};
use super::kernel::{Family, TileArgs};

/// The largest tile side (rows = columns): the driver's edge buffer holds 32 x 32 values.
const MAX_SIDE: usize = 32;

/// The streaming SVE vector length in bytes, or `None` without SME.
pub(crate) fn streaming_vl_bytes() -> Option<usize> {
    static SVL: OnceLock<usize> = OnceLock::new();
    if !isa_supported(Isa::Sme) {
        return None;
    }
    Some(*SVL.get_or_init(|| {
        let vl: u64;
        // SAFETY: SME is present (checked above); RDSVL only reads the streaming vector length
        // and is valid outside streaming mode.
        unsafe {
            asm!(
                ".arch_extension sme",
                "rdsvl {vl}, #1",
                vl = out(reg) vl,
                options(nomem, nostack, preserves_flags),
            );
        }
        vl as usize
    }))
}

/// One SME tile of `R` rows x `NR` columns (see [`TileArgs`]; `NR` is the family's `nr`).
///
/// # Safety
/// SME is present; the pointers in `t` cover the panels and the tile as in [`TileArgs`]
/// (A panels hold `NR` rows per k step: every SME family is square).
unsafe fn sme_tile<const R: usize, const NR: usize>(t: &TileArgs<f32, f32, f32>) {
    // SAFETY: forwarded from the caller.
    unsafe { sme_tile_dyn(t, R, NR) }
}

/// The body of [`sme_tile`]: the ZA k loop, then the epilogue from a stack buffer.
///
/// # Safety
/// As for [`sme_tile`], with `rows <= nr <= MAX_SIDE` and `nr <= 2·SVL_s`.
#[inline(never)]
unsafe fn sme_tile_dyn(t: &TileArgs<f32, f32, f32>, rows: usize, nr: usize) {
    debug_assert!((1..=nr).contains(&rows) && nr <= MAX_SIDE);
    let mut buf = MaybeUninit::<[f32; MAX_SIDE * MAX_SIDE]>::uninit();
    let out = buf.as_mut_ptr().cast::<f32>();
    let ldb = MAX_SIDE * 4;
    // SAFETY: SME is present (the family is only chosen when it is). The asm reads, for each
    // of `t.kgroups` k steps, `rows` (<= the panel's mr) floats of A at `a` and `nr` floats of
    // B at `b` (predicated loads touch only active lanes), and writes `rows` x `nr` floats of
    // the local buffer. It enters and leaves streaming mode itself (SMSTART/SMSTOP zero
    // z0-z31 and p0-p15, all declared clobbered) and uses ZA only between them, so no Rust
    // code runs in streaming mode and no ZA state outlives the block.
    unsafe {
        asm!(
            ".arch_extension sme",
            ".arch_extension sve",
            "smstart",
            "zero {{za}}",
            "cntw {s}",
            // p0/p1: A rows [0, S) and [S, 2S) below `rows`; p2/p3: B columns below `nr`.
            "whilelt p0.s, xzr, {rows}",
            "whilelt p1.s, {s}, {rows}",
            "whilelt p2.s, xzr, {nr}",
            "whilelt p3.s, {s}, {nr}",
            "cbz {k}, 2f",
            "1:",
            "ld1w {{z0.s}}, p0/z, [{a}]",
            "ld1w {{z1.s}}, p1/z, [{a}, #1, mul vl]",
            "ld1w {{z2.s}}, p2/z, [{b}]",
            "ld1w {{z3.s}}, p3/z, [{b}, #1, mul vl]",
            "add {a}, {a}, {ask}",
            "add {b}, {b}, {bsk}",
            "fmopa za0.s, p0/m, p2/m, z0.s, z2.s",
            "fmopa za1.s, p0/m, p3/m, z0.s, z3.s",
            "fmopa za2.s, p1/m, p2/m, z1.s, z2.s",
            "fmopa za3.s, p1/m, p3/m, z1.s, z3.s",
            "subs {k}, {k}, #1",
            "b.ne 1b",
            "2:",
            // Rows [0, min(S, rows)) from za0 | za1, then rows [S, rows) from za2 | za3.
            // {b} is reused as the right half's address (S floats to the right).
            "cmp {rows}, {s}",
            "csel {k}, {rows}, {s}, lo",
            "mov w12, #0",
            "3:",
            "add {b}, {out}, {s}, lsl #2",
            "st1w {{za0h.s[w12, 0]}}, p2, [{out}]",
            "st1w {{za1h.s[w12, 0]}}, p3, [{b}]",
            "add {out}, {out}, {ldb}",
            "add w12, w12, #1",
            "cmp x12, {k}",
            "b.lo 3b",
            "subs {k}, {rows}, {s}",
            "b.ls 5f",
            "mov w12, #0",
            "4:",
            "add {b}, {out}, {s}, lsl #2",
            "st1w {{za2h.s[w12, 0]}}, p2, [{out}]",
            "st1w {{za3h.s[w12, 0]}}, p3, [{b}]",
            "add {out}, {out}, {ldb}",
            "add w12, w12, #1",
            "cmp x12, {k}",
            "b.lo 4b",
            "5:",
            "smstop",
            a = inout(reg) t.a => _,
            b = inout(reg) t.b => _,
            k = inout(reg) t.kgroups => _,
            out = inout(reg) out => _,
            ask = in(reg) t.a_kstride * 4,
            bsk = in(reg) t.b_kstride * 4,
            rows = in(reg) rows,
            nr = in(reg) nr,
            ldb = in(reg) ldb,
            s = out(reg) _,
            out("x12") _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _,
            out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _, out("v12") _, out("v13") _,
            out("v14") _, out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _,
            out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            out("p0") _, out("p1") _, out("p2") _, out("p3") _, out("p4") _, out("p5") _, out("p6") _,
            out("p7") _, out("p8") _, out("p9") _, out("p10") _, out("p11") _, out("p12") _,
            out("p13") _, out("p14") _, out("p15") _, out("ffr") _,
            options(nostack),
        );
    }
    // SAFETY: the asm wrote rows x nr values at row stride MAX_SIDE; the caller guarantees
    // that C (row stride `t.rsc`) and the non-null bias pointers cover rows x nr.
    unsafe {
        let acc = buf.as_ptr().cast::<f32>();
        for i in 0..rows {
            let src = std::slice::from_raw_parts(acc.add(i * MAX_SIDE), nr);
            let crow = std::slice::from_raw_parts_mut(t.c.add(i * t.rsc), nr);
            let brow = if t.bias_row.is_null() { 0.0 } else { *t.bias_row.add(i) };
            let bcol = (!t.bias_col.is_null()).then(|| std::slice::from_raw_parts(t.bias_col, nr));
            for (j, (c, &x)) in crow.iter_mut().zip(src).enumerate() {
                let mut v = if t.alpha == 1.0 { x } else { x * t.alpha };
                if t.read_c {
                    v += t.beta * *c;
                }
                if !t.bias_row.is_null() {
                    v += brow;
                }
                if let Some(bc) = bcol {
                    v += bc[j];
                }
                *c = v;
            }
        }
    }
}

macro_rules! sme_family {
    ($name:ident, $label:literal, $side:literal; $($r:literal)*) => {
        static $name: Family<f32, f32, f32> = Family {
            name: $label,
            isa: Isa::Sme,
            mr: $side,
            nr: $side,
            g: 1,
            tiles: tiles!(sme_tile, $side; $($r)*),
            a_group: 0,
            needs_colsum: false,
        };
    };
}

sme_family!(SME_F32_8, "sme-f32-8x8", 8; 1 2 3 4 5 6 7 8);
sme_family!(SME_F32_16, "sme-f32-16x16", 16; 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
sme_family!(SME_F32_32, "sme-f32-32x32", 32;
    1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32);

static FAMS_8: [&Family<f32, f32, f32>; 1] = [&SME_F32_8];
static FAMS_16: [&Family<f32, f32, f32>; 1] = [&SME_F32_16];
static FAMS_32: [&Family<f32, f32, f32>; 1] = [&SME_F32_32];

/// The SME f32 family list for this CPU's streaming vector length (`None` without SME).
pub(crate) fn f32_families() -> Option<&'static [&'static Family<f32, f32, f32>]> {
    Some(match streaming_vl_bytes()? / 4 {
        0..=4 => &FAMS_8,
        5..=8 => &FAMS_16,
        _ => &FAMS_32,
    })
}
