//! Data-movement kernels: one strided gather that copies any view of a tensor — a transpose, a
//! broadcast, a strided slice — into a contiguous output, cache-blocked and split across the
//! thread pool. It replaces the reference kernels' per-element index arithmetic on the jit's
//! hot paths (attention head split/merge, mask broadcasts, slices).
//!
//! A view is described per *output* axis by its size and the distance, in elements, between
//! consecutive source elements along it (`0` for a broadcast axis). [`View::simplify`] drops
//! size-1 axes and merges axes that are contiguous in the source, so that a transpose of
//! `[8, 128, 12, 32]` to `[8, 12, 128, 32]` runs as rows of 32 elements, and a transpose whose
//! innermost source axis is not innermost in the output runs as 2-D tiles.

use rayon::prelude::*;

/// A view of a source buffer, per output axis (outermost first): `src[base + Σ i_k·strides[k]]`
/// for every output index `i` (row-major, contiguous output).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Output sizes.
    pub dims: Vec<usize>,
    /// Source distance between consecutive elements along each output axis (0: broadcast).
    pub strides: Vec<usize>,
    /// Source offset of the first element.
    pub base: usize,
}

/// Tile edge for 2-D transposes (elements): a 16 × 16 tile of 4-byte elements is 1 KiB of source
/// and 1 KiB of destination, comfortably inside L1.
const TILE: usize = 16;

/// Output elements below which the copy stays on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

impl View {
    /// The view of a row-major tensor of dims `in_dims` transposed by `perm` (`out[k] =
    /// in[perm[k]]`).
    pub fn transpose(in_dims: &[usize], perm: &[usize]) -> View {
        let in_strides = row_major_strides(in_dims);
        View {
            dims: perm.iter().map(|&p| in_dims[p]).collect(),
            strides: perm.iter().map(|&p| in_strides[p]).collect(),
            base: 0,
        }
    }

    /// The view of a row-major tensor of dims `in_dims` broadcast to `out_dims`, input axis `j`
    /// becoming output axis `axes[j]` (an input axis of size 1 broadcasts).
    pub fn broadcast(in_dims: &[usize], out_dims: &[usize], axes: &[usize]) -> View {
        let in_strides = row_major_strides(in_dims);
        let mut strides = vec![0; out_dims.len()];
        for (j, &a) in axes.iter().enumerate() {
            if in_dims[j] != 1 {
                strides[a] = in_strides[j];
            }
        }
        View { dims: out_dims.to_vec(), strides, base: 0 }
    }

    /// The view of a row-major tensor of dims `in_dims` sliced to `starts + k·steps` along each
    /// axis, `out_dims` elements long.
    pub fn slice(in_dims: &[usize], starts: &[usize], steps: &[usize], out_dims: &[usize]) -> View {
        let in_strides = row_major_strides(in_dims);
        View {
            dims: out_dims.to_vec(),
            strides: in_strides.iter().zip(steps).map(|(s, k)| s * k).collect(),
            base: starts.iter().zip(&in_strides).map(|(a, s)| a * s).sum(),
        }
    }

    /// Number of output elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest source index the view reads plus one (0 when empty).
    pub fn extent(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        self.base + self.dims.iter().zip(&self.strides).map(|(d, s)| (d - 1) * s).sum::<usize>() + 1
    }

    /// The same view with size-1 axes dropped and source-contiguous neighbours merged (at least
    /// one axis remains).
    pub fn simplify(&self) -> View {
        let mut dims: Vec<usize> = Vec::with_capacity(self.dims.len());
        let mut strides: Vec<usize> = Vec::with_capacity(self.dims.len());
        for (&d, &s) in self.dims.iter().zip(&self.strides) {
            if d == 1 {
                continue;
            }
            match (dims.last_mut(), strides.last_mut()) {
                // The previous axis steps over exactly this axis's whole extent: one axis.
                (Some(pd), Some(ps)) if *ps == s * d => {
                    *pd *= d;
                    *ps = s;
                }
                _ => {
                    dims.push(d);
                    strides.push(s);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            strides.push(1);
        }
        View { dims, strides, base: self.base }
    }
}

/// Row-major strides (elements) of `dims`.
pub fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * dims[k + 1];
    }
    s
}

/// Copies `view` of `src` into `dst` (contiguous, `view.len()` elements), splitting the work
/// across `pool` when it is large. The caller checks `dst.len() == view.len()` and
/// `view.extent() <= src.len()` (else this panics on an index: a bug, not bad input).
pub fn gather<T: Copy + Send + Sync>(src: &[T], view: &View, dst: &mut [T], pool: Option<&rayon::ThreadPool>) {
    let v = view.simplify();
    assert_eq!(dst.len(), v.len(), "movement::gather: destination length");
    assert!(v.extent() <= src.len(), "movement::gather: view reads past the source");
    let threads = pool.map_or(1, |p| p.current_num_threads());
    if threads <= 1 || v.len() < PARALLEL_MIN_ELEMENTS || v.dims.len() < 2 {
        gather_seq(src, &v, dst);
        return;
    }
    // Split the output into contiguous chunks along a prefix of its axes: the shortest prefix
    // with enough chunks to balance the pool.
    let want = threads * 8;
    let mut k = 0;
    let mut chunks = v.dims[0];
    while chunks < want && k + 2 < v.dims.len() {
        k += 1;
        chunks *= v.dims[k];
    }
    let inner = View { dims: v.dims[k + 1..].to_vec(), strides: v.strides[k + 1..].to_vec(), base: 0 };
    let chunk_len = inner.len();
    let prefix_dims = &v.dims[..=k];
    let prefix_strides = &v.strides[..=k];
    let mut run = || {
        dst.par_chunks_mut(chunk_len).enumerate().for_each(|(c, out)| {
            // The source offset of prefix index `c`.
            let mut rem = c;
            let mut off = v.base;
            for a in (0..prefix_dims.len()).rev() {
                off += (rem % prefix_dims[a]) * prefix_strides[a];
                rem /= prefix_dims[a];
            }
            gather_seq(src, &View { base: off, ..inner.clone() }, out);
        })
    };
    match pool {
        Some(p) => p.install(run),
        None => run(),
    }
}

/// [`gather`] on the calling thread; `v` is simplified.
fn gather_seq<T: Copy>(src: &[T], v: &View, dst: &mut [T]) {
    let r = v.dims.len();
    let (n_last, s_last) = (v.dims[r - 1], v.strides[r - 1]);
    // The output axis that walks the source contiguously, when it is not the last one: the
    // copy is then a sequence of 2-D transposes of (that axis × the last axis).
    let q = (0..r - 1).rev().find(|&a| v.strides[a] == 1 && s_last > 1);
    let outer_axes: Vec<usize> = (0..r - 1).filter(|&a| Some(a) != q).collect();
    let outer: usize = outer_axes.iter().map(|&a| v.dims[a]).product();
    let out_strides = row_major_strides(&v.dims);
    let mut idx = vec![0usize; outer_axes.len()];
    for _ in 0..outer {
        let mut s_off = v.base;
        let mut d_off = 0;
        for (&a, &i) in outer_axes.iter().zip(&idx) {
            s_off += i * v.strides[a];
            d_off += i * out_strides[a];
        }
        match q {
            None => {
                // Rows along the last axis.
                let out = &mut dst[d_off..d_off + n_last];
                match s_last {
                    1 => out.copy_from_slice(&src[s_off..s_off + n_last]),
                    0 => out.fill(src[s_off]),
                    s => {
                        for (j, o) in out.iter_mut().enumerate() {
                            *o = src[s_off + j * s];
                        }
                    }
                }
            }
            Some(q) => {
                let (n_q, d_q) = (v.dims[q], out_strides[q]);
                for i0 in (0..n_q).step_by(TILE) {
                    let i1 = (i0 + TILE).min(n_q);
                    for j0 in (0..n_last).step_by(TILE) {
                        let j1 = (j0 + TILE).min(n_last);
                        for i in i0..i1 {
                            let out = &mut dst[d_off + i * d_q + j0..d_off + i * d_q + j1];
                            let from = s_off + i + j0 * s_last;
                            for (jj, o) in out.iter_mut().enumerate() {
                                *o = src[from + jj * s_last];
                            }
                        }
                    }
                }
            }
        }
        // Next outer index (row-major over `outer_axes`).
        for p in (0..idx.len()).rev() {
            idx[p] += 1;
            if idx[p] < v.dims[outer_axes[p]] {
                break;
            }
            idx[p] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The view's elements, one by one by the definition (the oracle).
    fn naive(src: &[u32], v: &View) -> Vec<u32> {
        let n = v.len();
        let mut out = Vec::with_capacity(n);
        for lin in 0..n {
            let mut rem = lin;
            let mut off = v.base;
            for a in (0..v.dims.len()).rev() {
                off += (rem % v.dims[a]) * v.strides[a];
                rem /= v.dims[a];
            }
            out.push(src[off]);
        }
        out
    }

    #[test]
    fn simplify_merges_contiguous_axes_and_drops_units() {
        // [8,128,12,32] -> perm [0,2,1,3]: axes 0 and 3 stay whole, nothing merges across.
        let v = View::transpose(&[8, 128, 12, 32], &[0, 2, 1, 3]).simplify();
        assert_eq!(v.dims, vec![8, 12, 128, 32]);
        assert_eq!(v.strides, vec![128 * 12 * 32, 32, 12 * 32, 1]);
        // The identity permutation is one contiguous row.
        let v = View::transpose(&[2, 1, 3, 4], &[0, 1, 2, 3]).simplify();
        assert_eq!((v.dims, v.strides), (vec![24], vec![1]));
    }

    #[test]
    fn transposes_broadcasts_and_slices_match_the_definition() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let src: Vec<u32> = (0..400_000u32).collect();
        let cases = vec![
            View::transpose(&[8, 128, 12, 32], &[0, 2, 1, 3]),
            View::transpose(&[8, 12, 128, 32], &[0, 1, 3, 2]),
            View::transpose(&[3, 5, 7, 11], &[3, 1, 0, 2]),
            View::transpose(&[37, 53], &[1, 0]),
            View::transpose(&[1, 1, 1], &[2, 0, 1]),
            View::transpose(&[4, 0, 3], &[2, 1, 0]),
            View::broadcast(&[8, 128], &[8, 12, 128, 128], &[0, 3]),
            View::broadcast(&[1], &[5, 7], &[1]),
            View::broadcast(&[], &[3, 4], &[]),
            View::broadcast(&[7, 1], &[7, 9], &[0, 1]),
            View::slice(&[40, 50], &[3, 5], &[2, 3], &[10, 15]),
            View::slice(&[6, 7, 8], &[1, 0, 2], &[1, 1, 1], &[4, 7, 5]),
        ];
        for v in cases {
            let want = naive(&src, &v);
            for p in [None, Some(&pool)] {
                let mut got = vec![u32::MAX; v.len()];
                gather(&src, &v, &mut got, p);
                assert_eq!(got, want, "{v:?}");
            }
        }
    }
}
