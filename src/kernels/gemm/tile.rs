//! The register-tile template shared by every SIMD ISA: `simd_tile!` stamps an `MR x NV·W`
//! microkernel (k loop over packed or in-place A and B, optionally copying the B it loads, then
//! VNNI correction, scale, accumulate into C, bias, store) from a per-ISA vocabulary macro
//! (`W`, `G`, `zero`, `load_b`, `bcast_a`, `madd`, `splat`, `mul`, `add`, `fma`, `load_c`,
//! `store_c`, `load_colsum`).
// Targets without SIMD paths (wasm32) leave parts of the SIMD scaffolding unused.
#![cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code, unused_macros))]

/// The tile template: `MR` rows x `NV` vectors of `W` lanes; `$v` is the vocabulary macro.
///
/// `simd_tile!(name, "features", vocab, PA, PB, T)` compiles the tile with those target
/// features; `simd_tile!(@soft name, vocab, PA, PB, T)` without any (for the software
/// vocabularies of the tests, which model instructions this CPU may lack).
macro_rules! simd_tile {
    (@soft $fname:ident, $v:ident, $PA:ty, $PB:ty, $T:ty) => {
        simd_tile!(@emit [] [] $fname, $v, $PA, $PB, $T);
    };
    ($fname:ident, $feat:literal, $v:ident, $PA:ty, $PB:ty, $T:ty $(, row = $row:ident)?) => {
        simd_tile!(@emit [#[target_feature(enable = $feat)]] [$($row)?] $fname, $v, $PA, $PB, $T);
    };
    // One row of a k step: `acc[i][j] += a_i · b_j` for the NV vectors of B. A vocabulary may
    // supply its own (`row = macro`), e.g. in inline asm where the compiler's schedule spills.
    (@row [] $v:ident, $row:expr, $ap:expr, $bv:expr) => {{
        let av = $v!(bcast_a, $ap);
        for (x, &bj) in $row.iter_mut().zip($bv.iter()) {
            *x = $v!(madd, *x, av, bj);
        }
    }};
    (@row [$rm:ident] $v:ident, $row:expr, $ap:expr, $bv:expr) => {
        $rm!($v, $row, $ap, $bv)
    };
    (@emit [$(#[$attr:meta])*] [$($rm:ident)?] $fname:ident, $v:ident, $PA:ty, $PB:ty, $T:ty) => {
        /// One register tile (see [`TileArgs`]).
        ///
        /// # Safety
        /// The CPU supports the enabled target features and the pointers in `t` cover the
        /// panels and the tile.
        $(#[$attr])*
        pub(crate) unsafe fn $fname<const MR: usize, const NV: usize>(t: &TileArgs<$PA, $PB, $T>) {
            const W: usize = $v!(W);
            const G: usize = $v!(G);
            // SAFETY: the caller guarantees `t.kgroups` k groups are readable at the panel
            // strides, that the tile at `t.c` (row stride `t.rsc`) is writable for MR rows of
            // NV*W elements, and that non-null bias/colsum pointers cover MR rows / NV*W columns.
            unsafe {
                let mut acc = [[$v!(zero); NV]; MR];
                let (mut a, mut b) = (t.a, t.b);
                // One k step: NV vectors of B, MR broadcasts of A (rows `$ars` apart), MR·NV FMAs;
                // with `$bc`, the B vectors are also stored there (and `$bc` advanced).
                macro_rules! load_bv {
                    () => {{
                        let mut bv = [$v!(zero_b); NV];
                        for (j, x) in bv.iter_mut().enumerate() {
                            *x = $v!(load_b, b.add(j * W * G));
                        }
                        bv
                    }};
                }
                macro_rules! fma_rows {
                    ($ars:expr, $bv:ident) => {{
                        for (i, row) in acc.iter_mut().enumerate() {
                            simd_tile!(@row [$($rm)?] $v, row, a.add(i * $ars), &$bv);
                        }
                        a = a.add(t.a_kstride);
                        b = b.add(t.b_kstride);
                    }};
                }
                macro_rules! step {
                    ($ars:expr) => {{
                        let bv = load_bv!();
                        fma_rows!($ars, bv);
                    }};
                    ($ars:expr, $bc:ident) => {{
                        let bv = load_bv!();
                        debug_assert_eq!(size_of_val(&bv[0]), W * G * size_of::<$PB>());
                        for (j, x) in bv.iter().enumerate() {
                            $crate::kernels::gemm::tile::store_raw($bc.add(j * W * G), *x);
                        }
                        $bc = $bc.add(NV * W * G);
                        fma_rows!($ars, bv);
                    }};
                }
                // The k loop for A rows `$ars` apart.
                macro_rules! k_loop {
                    ($ars:expr) => {{
                        if t.b_kstride == NV * W * G {
                            // A packed panel: contiguous, the hardware prefetchers follow it.
                            // (Only panels read in place, rows a page or more apart, are copied.)
                            debug_assert!(t.b_copy.is_null());
                            if t.pf.is_null() {
                                for _ in 0..t.kgroups {
                                    step!($ars);
                                }
                            } else {
                                // The driver's share of the next panel, one line per step
                                // (the driver keeps shares within the steps).
                                let lines = t.pf_lines.min(t.kgroups);
                                let mut pf = t.pf;
                                for _ in 0..lines {
                                    $crate::kernels::gemm::tile::prefetch_l2(pf);
                                    pf = pf.wrapping_add(64);
                                    step!($ars);
                                }
                                for _ in lines..t.kgroups {
                                    step!($ars);
                                }
                            }
                        } else {
                            // B rows read in place (the direct path) come from L2/L3 a row stride
                            // apart, often a page or more, which the hardware prefetchers do not
                            // follow: fetch every line of the row a few k steps ahead.
                            let row_bytes = NV * W * G * size_of_val(&*b);
                            macro_rules! prefetch_ahead {
                                ($dist:expr) => {
                                    $crate::kernels::gemm::tile::prefetch_span(
                                        b.wrapping_add($dist * t.b_kstride).cast::<u8>(),
                                        row_bytes,
                                    )
                                };
                            }
                            if t.b_copy.is_null() {
                                for _ in 0..t.kgroups {
                                    prefetch_ahead!($crate::kernels::gemm::tile::B_PREFETCH);
                                    step!($ars);
                                }
                            } else {
                                // Also pack the panel for the row tiles after this one.
                                let mut bc = t.b_copy;
                                let dist = $crate::kernels::gemm::tile::B_PREFETCH_COPY;
                                for _ in 0..t.kgroups {
                                    prefetch_ahead!(dist);
                                    step!($ars, bc);
                                }
                            }
                        }
                    }};
                }
                if t.a_rs == G {
                    // A packed: the row offsets are constants.
                    k_loop!(G);
                } else {
                    // A read in place (row-major, unit k stride).
                    let ars = t.a_rs;
                    k_loop!(ars);
                }
                // The VNNI correction completes the product, so it comes before alpha.
                if !t.colsum.is_null() {
                    for j in 0..NV {
                        let cs = $v!(load_colsum, t.colsum.add(j * W));
                        for row in acc.iter_mut() {
                            row[j] = $v!(add, row[j], cs);
                        }
                    }
                }
                if t.alpha != <$T as Scalar>::ONE {
                    let s = $v!(splat, t.alpha);
                    for row in acc.iter_mut() {
                        for x in row.iter_mut() {
                            *x = $v!(mul, *x, s);
                        }
                    }
                }
                if t.read_c {
                    let bb = $v!(splat, t.beta);
                    for (i, row) in acc.iter_mut().enumerate() {
                        let crow = t.c.add(i * t.rsc);
                        for (j, x) in row.iter_mut().enumerate() {
                            *x = $v!(fma, $v!(load_c, crow.add(j * W)), bb, *x);
                        }
                    }
                }
                if !t.bias_row.is_null() {
                    for (i, row) in acc.iter_mut().enumerate() {
                        let s = $v!(splat, *t.bias_row.add(i));
                        for x in row.iter_mut() {
                            *x = $v!(add, *x, s);
                        }
                    }
                }
                if !t.bias_col.is_null() {
                    for j in 0..NV {
                        let bc = $v!(load_c, t.bias_col.add(j * W));
                        for row in acc.iter_mut() {
                            row[j] = $v!(add, row[j], bc);
                        }
                    }
                }
                for (i, row) in acc.iter().enumerate() {
                    let crow = t.c.add(i * t.rsc);
                    for (j, x) in row.iter().enumerate() {
                        $v!(store_c, crow.add(j * W), *x);
                    }
                }
            }
        }
    };
}

/// Stores the vector `v` at `p` (unaligned): a tile's copy of the B vectors it loaded. `V`
/// holds exactly the `W * G` elements at `p` (identity-packed families only).
///
/// # Safety
/// `p` is writable for `size_of::<V>()` bytes.
#[inline(always)]
pub(crate) unsafe fn store_raw<P, V: Copy>(p: *mut P, v: V) {
    // SAFETY: guaranteed by the caller.
    unsafe { p.cast::<V>().write_unaligned(v) }
}

/// How many k groups ahead the tiles prefetch B read in place. Further ahead cost the tiles
/// that read B rows under 4 KiB apart (Zen 3, 1 thread, direct path: 16x384x384 81 GFLOP/s at
/// 12, 72 at 32, 58 at 48).
pub(crate) const B_PREFETCH: usize = 12;

/// The prefetch distance of a tile that also copies its B panel
/// ([`super::kernel::TileArgs::b_copy`]): rows a page or more apart, fetched from L3, need more
/// time (Zen 3, 1 thread, GFLOP/s at 12 / 24 / 32: 16x768x3072 48 / 52-53 / 51-55,
/// 16x384x1536 66-67 / 69 / 69).
pub(crate) const B_PREFETCH_COPY: usize = 24;

/// Prefetches every cache line of the `bytes` bytes at `p` into L1, the last byte included (a
/// misaligned span touches one more line than `bytes / 64`).
#[inline(always)]
pub(crate) fn prefetch_span(p: *const u8, bytes: usize) {
    for off in (0..bytes).step_by(64) {
        prefetch_read(p.wrapping_add(off));
    }
    prefetch_read(p.wrapping_add(bytes - 1));
}

/// A read prefetch into L2 (a hint: never faults, any address); a no-op off x86-64.
#[inline(always)]
pub(crate) fn prefetch_l2(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch instructions do not access memory architecturally and never fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A read prefetch into L1 (a hint: never faults, any address); a no-op off x86-64.
#[inline(always)]
pub(crate) fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch instructions do not access memory architecturally and never fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// `&[f::<1, NV>, f::<2, NV>, …]`: one tile per row count.
macro_rules! tiles {
    ($f:ident, $nv:literal; $($r:literal)*) => { &[$($f::<$r, $nv>),*] };
}
