//! The forward convolution kernels (`kernels::conv`: implicit GEMM, 1×1 GEMM and direct, Winograd F(4×4,3×3),
//! depthwise, the direct stem kernel) on small cases against a direct f64 loop, with bias + ReLU epilogues, 1 and 2
//! threads. Small enough to run under qemu: `../shared/tools/aarch64-test --test conv_aarch64`
//! (`.ci/run` does), where the GEMM underneath is the NEON microkernel and the depthwise kernel
//! takes its portable path; natively it cross-checks the x86 paths.

use tensorjit::kernels::conv::{ConvEpilogue, ConvFilter, ConvGeom, conv2d_f32};
use tensorjit::kernels::gemm::Activation;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// One case: batch, channels in/out, size, kernel, stride, padding, groups, channels-last.
struct Case(usize, usize, usize, usize, usize, usize, usize, usize, bool);

fn geom(c: &Case) -> ConvGeom {
    let Case(n, ci, co, hw, k, s, p, g, nhwc) = *c;
    let o = (hw + 2 * p - k) / s + 1;
    let strides = |ch: usize, side: usize| {
        if nhwc { [side * side * ch, 1, side * ch, ch] } else { [ch * side * side, side * side, side, 1] }
    };
    ConvGeom {
        batch: n,
        in_channels: ci,
        in_hw: [hw, hw],
        out_channels: co,
        out_hw: [o, o],
        kernel_hw: [k, k],
        stride: [s, s],
        pad: [p, p],
        dilation: [1, 1],
        groups: g,
        x_strides: strides(ci, hw),
        y_strides: strides(co, o),
    }
}

/// relu(conv(x, w) + bias) in f64, straight from the definition; w is OIHW (I per group).
fn direct(gm: &ConvGeom, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f64> {
    let (cig, cog) = (gm.in_channels / gm.groups, gm.out_channels / gm.groups);
    let ([oh, ow], [kh, kw]) = (gm.out_hw, gm.kernel_hw);
    let mut y = vec![0f64; gm.batch * gm.out_channels * oh * ow];
    for b in 0..gm.batch {
        for o in 0..gm.out_channels {
            let g = o / cog;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = f64::from(bias[o]);
                    for i in 0..cig {
                        for ty in 0..kh {
                            for tx in 0..kw {
                                let iy = (oy * gm.stride[0] + ty) as isize - gm.pad[0] as isize;
                                let ix = (ox * gm.stride[1] + tx) as isize - gm.pad[1] as isize;
                                if iy < 0 || ix < 0 || iy >= gm.in_hw[0] as isize || ix >= gm.in_hw[1] as isize {
                                    continue;
                                }
                                let [sn, sc, sh, sw] = gm.x_strides;
                                let xi = b * sn + (g * cig + i) * sc + iy as usize * sh + ix as usize * sw;
                                let wi = ((o * cig + i) * kh + ty) * kw + tx;
                                acc += f64::from(x[xi]) * f64::from(w[wi]);
                            }
                        }
                    }
                    let [sn, sc, sh, sw] = gm.y_strides;
                    y[b * sn + o * sc + oy * sh + ox * sw] = acc.max(0.0);
                }
            }
        }
    }
    y
}

#[test]
fn conv_kernels_match_the_direct_loop() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    let cases = [
        Case(2, 16, 16, 9, 3, 1, 1, 1, false), // Winograd (NCHW)
        Case(1, 16, 24, 16, 3, 1, 1, 1, true), // Winograd (NHWC)
        Case(2, 5, 7, 7, 3, 2, 1, 1, false),   // implicit GEMM, stride 2
        Case(1, 6, 4, 6, 3, 1, 0, 2, true),    // grouped
        Case(2, 12, 9, 5, 1, 1, 0, 1, true),   // 1×1 channels-last direct (NHWC)
        Case(2, 12, 9, 5, 1, 1, 0, 1, false),  // 1×1 direct, few input channels (NCHW)
        Case(1, 8, 8, 10, 3, 2, 1, 8, false),  // depthwise stride 2 (NCHW)
        Case(2, 9, 9, 6, 3, 1, 1, 9, true),    // depthwise channels-last (NHWC)
        Case(1, 3, 8, 11, 7, 2, 3, 1, false),  // stem-like 7×7/2
        Case(2, 10, 20, 9, 3, 2, 1, 1, false), // strided direct 3×3/2 (NCHW)
    ];
    let paths = [
        "winograd f(4,3)",
        "winograd f(4,3)",
        "implicit gemm",
        "implicit gemm",
        "pointwise channels-last",
        "pointwise direct",
        "depthwise direct",
        "depthwise direct",
        "stem direct",
        "strided direct",
    ];
    for (ci, c) in cases.iter().enumerate() {
        let gm = geom(c);
        let x = values(gm.batch * gm.in_channels * gm.in_hw[0] * gm.in_hw[1], 1 + ci as u64);
        let cig = gm.in_channels / gm.groups;
        let w = values(gm.out_channels * cig * gm.kernel_hw[0] * gm.kernel_hw[1], 100 + ci as u64);
        let bias = values(gm.out_channels, 200 + ci as u64);
        let want = direct(&gm, &x, &w, &bias);
        let [kh, kw] = gm.kernel_hw;
        let filter = ConvFilter::with_winograd(&gm, &w, [cig * kh * kw, kh * kw, kw, 1], true).expect("filter");
        assert_eq!(filter.describe(), paths[ci], "case {ci} takes another path");
        let epi = ConvEpilogue { bias: Some(&bias), activation: Activation::Relu, ..ConvEpilogue::default() };
        for threads in [None, Some(&pool)] {
            let mut y = vec![f32::NAN; want.len()];
            conv2d_f32(&gm, &x, &filter, &epi, &mut y, threads).expect("conv");
            // Winograd's error bound (docs/configuration.md) scaled by the terms' size, with room.
            let terms = (cig * kh * kw) as f64;
            for (i, (&g, &wv)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(g) - wv).abs() <= 1e-5 * terms,
                    "case {ci} ({}) threads {}: element {i}: {g} vs {wv}",
                    filter.describe(),
                    threads.is_some()
                );
            }
        }
    }
}
