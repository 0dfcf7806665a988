//! The per-tile steps of an item: transposed scores `sᵀ = scale·k·qᵀ`, bias and mask,
//! the online-softmax update and the `P·V` accumulation, each dispatched to the ISA micro-kernels.

use super::*;

/// Transposed scores of a tile: `st[j][r] = scale · Σ_c k_j[c]·qt[c][r]` for the `nk` key rows
/// of `k` (`ks` apart) and query lanes `r < lanes` (a multiple of [`QH`]), plus `kadd[j]` (an
/// additive key-only mask; scores of −∞ stay −∞, as `mask_tile` does) when given, which only
/// the AVX2 and AVX-512 paths take. The x86-64 paths also set `tmax[r]` to the lane's maximum score (the
/// generic path leaves `tmax` alone).
#[allow(clippy::too_many_arguments)]
pub(super) fn scores(
    isa: FusedIsa,
    qt: &[f32],
    d: usize,
    k: &[f32],
    ks: usize,
    nk: usize,
    lanes: usize,
    scale: f32,
    kadd: Option<&[f32]>,
    st: &mut [f32],
    tmax: &mut [f32; Q_BLOCK],
) {
    assert!(
        kadd.is_none_or(|a| a.len() >= nk && matches!(isa, FusedIsa::Avx2 | FusedIsa::Avx512))
            && (1..=K_BLOCK).contains(&nk)
            && lanes <= Q_BLOCK
            && lanes.is_multiple_of(QH)
            && qt.len() >= d * Q_BLOCK
            && k.len() >= (nk - 1) * ks + d
            && st.len() >= K_BLOCK * Q_BLOCK
    );
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        let stp = st.as_mut_ptr();
        tmax[..lanes].fill(f32::NEG_INFINITY);
        let (qp, kp, mxp) = (qt.as_ptr(), k.as_ptr(), tmax.as_mut_ptr());
        let two = lanes == 2 * avx512::LANES;
        for (j, nr) in row_groups(nk, avx512::ROWS) {
            // SAFETY: AVX-512F confirmed by `checked()`; key rows j..j+nr ≤ nk of k (d values,
            // ks apart); lanes 0..lanes (16 or 32, the vectors the call covers) of qt's d rows,
            // of st's rows j..j+nr and of tmax, kadd (when given) values j..j+nr ≤ nk (asserted
            // above).
            unsafe {
                let (kj, sj) = (kp.add(j * ks), stp.add(j * Q_BLOCK));
                let ka = kadd.map_or(std::ptr::null(), |a| a.as_ptr().add(j));
                if two {
                    with_rows!([1 2 3 4 5 6 7 8 9 10 11 12], nr, avx512::qk2, (qp, d, kj, ks, sj, scale, ka, mxp))
                } else {
                    with_rows!([1 2 3 4 5 6 7 8 9 10 11 12], nr, avx512::qk1, (qp, d, kj, ks, sj, scale, ka, mxp))
                }
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        let stp = st.as_mut_ptr();
        tmax[..lanes].fill(f32::NEG_INFINITY);
        let mxp = tmax.as_mut_ptr();
        // Key groups outside, query halves inside: a group's key rows are read from L1 by the
        // second half.
        for (j, nr) in row_groups(nk, avx2::ROWS) {
            for h in (0..lanes).step_by(QH) {
                // SAFETY: AVX2+FMA confirmed by `checked()`; key rows j..j+nr ≤ nk of k (d
                // values, ks apart), lanes h..h+16 ≤ Q_BLOCK of qt's d rows, of st's rows
                // j..j+nr and of tmax, kadd (when given) values j..j+nr ≤ nk (asserted above).
                unsafe {
                    let ka = kadd.map_or(std::ptr::null(), |a| a.as_ptr().add(j));
                    let (qp, kp, sp) = (qt.as_ptr().add(h), k.as_ptr().add(j * ks), stp.add(j * Q_BLOCK + h));
                    with_rows!([1 2 3 4 5 6], nr, avx2::qk_r, (qp, d, kp, ks, sp, scale, ka, mxp.add(h)))
                }
            }
        }
        return;
    }
    // Only the x86-64 paths report the lanes' maxima.
    let _ = (isa, tmax);
    for j in 0..nk {
        let kr = &k[j * ks..j * ks + d];
        let row = &mut st[j * Q_BLOCK..j * Q_BLOCK + lanes];
        row.fill(0.0);
        for (c, &x) in kr.iter().enumerate() {
            for (o, &qv) in row.iter_mut().zip(&qt[c * Q_BLOCK..c * Q_BLOCK + lanes]) {
                *o += x * qv;
            }
        }
        row.iter_mut().for_each(|o| *o *= scale);
    }
}

/// The AVX2 `P·V` micro-kernel calls covering query lanes `0..lanes` (halves of [`QH`]) and
/// `0..rows` value columns in groups of up to `avx2::ROWS` ([`row_groups`]): `f(h, r, n)` for
/// lanes `h..h + QH` and rows `r..r + n`.
#[cfg(target_arch = "x86_64")]
pub(super) fn micro_tiles(lanes: usize, rows: usize, mut f: impl FnMut(usize, usize, usize)) {
    // Column groups outside, query halves inside: the second half reads the group's value
    // entries from L1.
    for (r, n) in row_groups(rows, avx2::ROWS) {
        for h in (0..lanes).step_by(QH) {
            f(h, r, n);
        }
    }
}

/// `rows` split into the fewest groups of at most `max` rows, of sizes differing by at most one
/// (larger first): `(first row, rows)` of each. Even groups keep every micro-kernel call near
/// its widest form (128 keys in groups of 6 are 18 × 6 + 4 × 5, not 21 × 6 + 2).
#[cfg(target_arch = "x86_64")]
pub(super) fn row_groups(rows: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let g = rows.div_ceil(max.max(1));
    let (base, extra) = (rows.checked_div(g).unwrap_or(0), rows.checked_rem(g).unwrap_or(0));
    (0..g).map(move |i| (i * base + i.min(extra), base + usize::from(i < extra)))
}

/// Applies `f(score, value)` to the scores of query rows `i0..i0 + rows` and keys
/// `j0 + c0..j0 + nk` with the value of a `[B, H, Sq, Skv]`-broadcast operand (element strides `sm`) at (b, h, i,
/// j). An operand that does not vary along the query axis (the `[B, 1, 1, Skv]` padding mask)
/// is read once per key and applied to the key's row of query lanes (a vectorisable loop).
#[allow(clippy::too_many_arguments)]
#[inline]
fn apply_broadcast<T: Copy>(
    m: &[T],
    sm: [usize; 4],
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    j0: usize,
    c0: usize,
    nk: usize,
    st: &mut [f32],
    f: impl Fn(f32, T) -> f32,
) {
    let base = b * sm[0] + h * sm[1] + i0 * sm[2] + j0 * sm[3];
    if sm[2] == 0 {
        for j in c0..nk {
            let mv = m[base + j * sm[3]];
            for x in &mut st[j * Q_BLOCK..j * Q_BLOCK + rows] {
                *x = f(*x, mv);
            }
        }
    } else {
        for r in 0..rows {
            apply_row(m, sm, b, h, i0 + r, j0, c0..nk, r, st, &f);
        }
    }
}

/// A Bool mask's effect on a score: kept, or excluded (−∞).
fn keep_or_hide(x: f32, keep: bool) -> f32 {
    if keep { x } else { f32::NEG_INFINITY }
}

/// An additive mask's (or bias's) effect on a score; excluded keys stay −∞.
fn add_unless_hidden(x: f32, a: f32) -> f32 {
    if x == f32::NEG_INFINITY { x } else { x + a }
}

/// Excludes (−∞) causally hidden keys and keys masked by the Bool mask, adds the additive mask
/// and the bias (to keys not already −∞), for query rows `i0..i0 + rows` and keys `j0..j0 + nk`.
/// The mask and the bias are applied from key `j0 + c0` on: the caller has found the keys
/// before it neutral for every row of the block (see `mask_extent`).
#[allow(clippy::too_many_arguments)]
pub(super) fn mask_tile(
    p: &AttentionParams<'_>,
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    j0: usize,
    c0: usize,
    nk: usize,
    st: &mut [f32],
) {
    if p.causal {
        for r in 0..rows {
            // Keys visible to query i0 + r within the tile.
            let nv = (i0 + r + 1).saturating_sub(j0).min(nk);
            for j in nv..nk {
                st[j * Q_BLOCK + r] = f32::NEG_INFINITY;
            }
        }
    }
    match p.mask {
        AttentionMask::None => {}
        AttentionMask::Bool(m, sm) => apply_broadcast(m, sm, b, h, i0, rows, j0, c0, nk, st, keep_or_hide),
        AttentionMask::Additive(m, sm) => apply_broadcast(m, sm, b, h, i0, rows, j0, c0, nk, st, add_unless_hidden),
    }
    if let Some((bias, sb)) = p.bias {
        apply_broadcast(bias, sb, b, h, i0, rows, j0, c0, nk, st, add_unless_hidden);
    }
}

/// The first pass of a query-varying mask (see `mask_extent`): for query row `i0 + r` and keys
/// `j0..j0 + nk`, keys before `lo[r]` are left as they are, keys from `hi[r]` on become −∞
/// (hidden; an additive mask's hidden keys weigh 0 next to any score above `SEEN`), and the
/// mask is applied to the keys between.
#[allow(clippy::too_many_arguments)]
pub(super) fn mask_rows(
    p: &AttentionParams<'_>,
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    j0: usize,
    nk: usize,
    lo: &[usize; Q_BLOCK],
    hi: &[usize; Q_BLOCK],
    st: &mut [f32],
) {
    for r in 0..rows {
        let (a, z) = (lo[r].saturating_sub(j0).min(nk), hi[r].saturating_sub(j0).min(nk));
        for j in z..nk {
            st[j * Q_BLOCK + r] = f32::NEG_INFINITY;
        }
        if a < z {
            match p.mask {
                AttentionMask::Bool(m, sm) => apply_row(m, sm, b, h, i0 + r, j0, a..z, r, st, &keep_or_hide),
                AttentionMask::Additive(m, sm) => apply_row(m, sm, b, h, i0 + r, j0, a..z, r, st, &add_unless_hidden),
                AttentionMask::None => {}
            }
        }
    }
}

/// `f(score, value)` on query lane `r` (row `i`) for tile columns `cols` (keys `j0 + c`).
#[allow(clippy::too_many_arguments)]
#[inline]
fn apply_row<T: Copy>(
    m: &[T],
    sm: [usize; 4],
    b: usize,
    h: usize,
    i: usize,
    j0: usize,
    cols: std::ops::Range<usize>,
    r: usize,
    st: &mut [f32],
    f: &impl Fn(f32, T) -> f32,
) {
    let base = b * sm[0] + h * sm[1] + i * sm[2] + j0 * sm[3];
    for j in cols {
        let x = &mut st[j * Q_BLOCK + r];
        *x = f(*x, m[base + j * sm[3]]);
    }
}

/// Online-softmax update of query lanes `0..lanes` with the `nk` transposed scores of a tile:
/// the scores become `e^(s − m')` in place, `alpha` receives `e^(m − m')`, `l` becomes
/// `α·l + Σ e^(s − m')` and `m` becomes `m'` (NaN if a score or `m` is NaN). A lane whose `m'`
/// is −∞ (nothing visible yet) gets probabilities 0, `α` 0 and keeps `m = −∞`, `l = 0`.
#[allow(clippy::too_many_arguments)]
pub(super) fn softmax_tile(
    isa: FusedIsa,
    st: &mut [f32],
    nk: usize,
    lanes: usize,
    tmax: Option<&[f32; Q_BLOCK]>,
    m: &mut [f32; Q_BLOCK],
    l: &mut [f32; Q_BLOCK],
    alpha: &mut [f32; Q_BLOCK],
) {
    assert!(lanes <= Q_BLOCK && lanes.is_multiple_of(8) && st.len() >= nk * Q_BLOCK);
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        let mut x = 0;
        if isa == FusedIsa::Avx512 {
            while x + avx512::LANES <= lanes {
                // SAFETY: AVX-512F confirmed by `checked()`; lanes x..x+16 ≤ Q_BLOCK of the nk
                // rows of st and of m, l, alpha (asserted above).
                unsafe {
                    avx512::softmax_lanes(
                        st.as_mut_ptr().add(x),
                        nk,
                        tmax.map(|t| t.as_ptr().add(x)),
                        m.as_mut_ptr().add(x),
                        l.as_mut_ptr().add(x),
                        alpha.as_mut_ptr().add(x),
                    )
                };
                x += avx512::LANES;
            }
        }
        for x in (x..lanes).step_by(8) {
            // SAFETY: AVX2+FMA confirmed by `checked()`; lanes x..x+8 ≤ Q_BLOCK of the nk rows
            // of st and of m, l, alpha (asserted above).
            unsafe {
                avx2::softmax_lanes(
                    st.as_mut_ptr().add(x),
                    nk,
                    tmax.map(|t| t.as_ptr().add(x)),
                    m.as_mut_ptr().add(x),
                    l.as_mut_ptr().add(x),
                    alpha.as_mut_ptr().add(x),
                )
            };
        }
        return;
    }
    let _ = (isa, tmax);
    let mut mt = [f32::NEG_INFINITY; Q_BLOCK];
    for j in 0..nk {
        for (a, &s) in mt[..lanes].iter_mut().zip(&st[j * Q_BLOCK..j * Q_BLOCK + lanes]) {
            *a = nan_max(*a, s);
        }
    }
    let mut mu = [0f32; Q_BLOCK];
    for r in 0..lanes {
        let mn = nan_max(m[r], mt[r]);
        mu[r] = if mn == f32::NEG_INFINITY { 0.0 } else { mn };
        alpha[r] = exp_scalar(m[r] - mu[r]);
        m[r] = mn;
    }
    let mut sum = [0f32; Q_BLOCK];
    for j in 0..nk {
        let row = &mut st[j * Q_BLOCK..j * Q_BLOCK + lanes];
        for ((x, &u), sm) in row.iter_mut().zip(&mu[..lanes]).zip(&mut sum[..lanes]) {
            *x = exp_scalar(*x - u);
            *sm += *x;
        }
    }
    for r in 0..lanes {
        l[r] = l[r] * alpha[r] + sum[r];
    }
}

/// `accᵀ[c][r] = α_r·accᵀ[c][r] + Σ_j pᵀ[j][r]·v_j[c]` (or without the first term when `first`)
/// for `c < vd`, lanes `r < lanes`, the `nk` value rows of `v` (`vs` apart). The vector path
/// multiplies every weight, so it is used only when the value rows are `finite`; otherwise keys
/// with weight 0 are skipped, so an infinite value on an excluded key does not make the row NaN.
#[allow(clippy::too_many_arguments)]
pub(super) fn pv(
    isa: FusedIsa,
    st: &[f32],
    nk: usize,
    v: &[f32],
    vs: usize,
    vd: usize,
    lanes: usize,
    alpha: &[f32; Q_BLOCK],
    first: bool,
    finite: bool,
    acc: &mut [f32],
) {
    assert!(
        nk >= 1
            && lanes <= Q_BLOCK
            && lanes.is_multiple_of(QH)
            && st.len() >= nk * Q_BLOCK
            && v.len() >= (nk - 1) * vs + vd
            && acc.len() >= vd * Q_BLOCK
    );
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 && finite {
        let (sp, vp, accp, ap) = (st.as_ptr(), v.as_ptr(), acc.as_mut_ptr(), alpha.as_ptr());
        let two = lanes == 2 * avx512::LANES;
        for (c, nc) in row_groups(vd, avx512::ROWS) {
            // SAFETY: AVX-512F confirmed by `checked()`; rows 0..nk of st, lanes 0..lanes (16 or
            // 32, the vectors the call covers); value columns c..c+nc ≤ vd of the nk rows of v;
            // acc rows c..c+nc ≤ vd; alpha lanes 0..lanes (asserted above).
            unsafe {
                let (vc, ac) = (vp.add(c), accp.add(c * Q_BLOCK));
                if two {
                    with_rows!([1 2 3 4 5 6 7 8 9 10 11 12], nc, avx512::pv2, (sp, nk, vc, vs, ac, ap, first))
                } else {
                    with_rows!([1 2 3 4 5 6 7 8 9 10 11 12], nc, avx512::pv1, (sp, nk, vc, vs, ac, ap, first))
                }
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() && finite {
        let accp = acc.as_mut_ptr();
        micro_tiles(lanes, vd, |h, c, nc| {
            // SAFETY: AVX2+FMA confirmed by `checked()`; rows 0..nk of st and lanes h..h+16 ≤
            // Q_BLOCK; value columns c..c+nc ≤ vd of the nk rows of v; acc rows c..c+nc ≤ vd,
            // lanes h..h+16; alpha lanes h..h+16 (asserted above).
            unsafe {
                let (sp, vp, ap) = (st.as_ptr().add(h), v.as_ptr().add(c), alpha.as_ptr().add(h));
                with_rows!([1 2 3 4 5 6], nc, avx2::pv_r, (sp, nk, vp, vs, accp.add(c * Q_BLOCK + h), ap, first))
            }
        });
        return;
    }
    let _ = isa;
    for c in 0..vd {
        let row = &mut acc[c * Q_BLOCK..c * Q_BLOCK + lanes];
        if first {
            row.fill(0.0);
        } else {
            row.iter_mut().zip(&alpha[..lanes]).for_each(|(a, &al)| *a *= al);
        }
    }
    for j in 0..nk {
        let prow = &st[j * Q_BLOCK..j * Q_BLOCK + lanes];
        for (c, &x) in v[j * vs..j * vs + vd].iter().enumerate() {
            let row = &mut acc[c * Q_BLOCK..c * Q_BLOCK + lanes];
            if finite {
                row.iter_mut().zip(prow).for_each(|(a, &w)| *a += w * x);
            } else {
                row.iter_mut().zip(prow).filter(|(_, w)| **w != 0.0).for_each(|(a, &w)| *a += w * x);
            }
        }
    }
}
