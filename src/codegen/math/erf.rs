//! The error function in f64 lanes: a polynomial on [0, 1] and erfcx pieces on [1, 6].

use super::*;

/// erf(x)/x as a polynomial in z = x² on [0, 1]: Chebyshev interpolant of degree 12 computed at
/// 60 digits (max relative error 1.6e−17), converted to monomials.
pub(super) const ERF_SMALL: [f64; 13] = [
    std::f64::consts::FRAC_2_SQRT_PI,
    -0.3761263890318375,
    0.11283791670954879,
    -0.026866170645076792,
    0.0052239776248180145,
    -0.000854832698083379,
    0.0001205533111164271,
    -1.4925595266831182e-05,
    1.6461000484121368e-06,
    -1.6350312701054695e-07,
    1.4659775274047436e-08,
    -1.1372848856791674e-09,
    5.957176147748911e-11,
];
/// erfcx(x) = e^{x²}·erfc(x) on [1, 6] in four pieces (lower bound, centre, coefficients in
/// t = x − centre): Chebyshev interpolants of degree 12 at 60 digits; relative error 2.2e−17,
/// 5.1e−16, 1.6e−14, 1.4e−12, each below 2^−54/erfc(lower bound) so that 1 − e^{−x²}·erfcx is
/// within ¼ ulp.
pub(super) const ERFCX: [(f64, f64, [f64; 13]); 4] = [
    (
        1.0,
        1.25,
        [
            0.3678229164523611,
            -0.20882187596460952,
            0.1067955714965987,
            -0.05021827439604813,
            0.022011364250898474,
            -0.00908162761495057,
            0.0035531098979445968,
            -0.0013257839153641357,
            0.00047397059996488885,
            -0.00016293376713169493,
            5.404634674114516e-05,
            -1.7678831244654092e-05,
            5.494065543139676e-06,
        ],
    ),
    (
        1.5,
        1.875,
        [
            0.2694299851646704,
            -0.11801672272799475,
            0.04814863004967254,
            -0.018492027590627822,
            0.006738039159488131,
            -0.002343281625519923,
            0.0007814620007865198,
            -0.00025086968151995085,
            7.777106903402331e-05,
            -2.3332308436253344e-05,
            6.79703120897119e-06,
            -1.992787355367885e-06,
            5.489349480569381e-07,
        ],
    ),
    (
        2.25,
        2.875,
        [
            0.1860549346844711,
            -0.058563292659745386,
            0.017685468287522477,
            -0.005145047559605198,
            0.0014467282837671703,
            -0.00039428141146207504,
            0.00010438964084040667,
            -2.6903954746844338e-05,
            6.7609002476963e-06,
            -1.6559609684477168e-06,
            3.9744391275239935e-07,
            -9.995419590545677e-08,
            2.295796335313003e-08,
        ],
    ),
    (
        3.5,
        4.75,
        [
            0.11630270721024731,
            -0.023503448596501476,
            0.004661326368695728,
            -0.0009080989267613732,
            0.0001739283089901235,
            -3.277562949007631e-05,
            6.08108930382966e-06,
            -1.1118981029544583e-06,
            2.0034698237166781e-07,
            -3.524796365868836e-08,
            6.184507649360792e-09,
            -1.2539231843294967e-09,
            2.136625977914233e-10,
        ],
    ),
];

impl Emit<'_, '_> {
    /// erf x. |x| < 1: x·P(x²); 1 ≤ |x| < 6: 1 − e^{−x²}·erfcx(|x|) with erfcx from four
    /// polynomial pieces (coefficients chosen per lane) and e^{−x²} corrected for the rounding of
    /// x²; |x| ≥ 6 rounds to ±1 through the same formula. NaN propagates.
    pub(super) fn erf_d(&mut self, x: Value) -> Value {
        let x2 = self.b.ins().fmul(x, x);
        let p = self.polyd(x2, &ERF_SMALL);
        let small = self.b.ins().fmul(x, p);
        let ax = self.abs(x);
        let six = self.cf(6.0);
        let axc = self.min_k(ax, six);
        let masks: Vec<Value> =
            ERFCX[1..].iter().map(|&(lo, _, _)| self.mask_c(FloatCC::GreaterThanOrEqual, axc, lo)).collect();
        let pick = |e: &mut Self, f: &dyn Fn(usize) -> f64| {
            let mut v = e.cf(f(0));
            for (i, &m) in masks.iter().enumerate() {
                v = e.blend_c(m, f(i + 1), v);
            }
            v
        };
        let centre = pick(self, &|i| ERFCX[i].1);
        let t = self.b.ins().fsub(axc, centre);
        let n = ERFCX[0].2.len();
        let mut g = pick(self, &|i| ERFCX[i].2[n - 1]);
        for j in (0..n - 1).rev() {
            let k = pick(self, &|i| ERFCX[i].2[j]);
            g = self.fma(g, t, k);
        }
        let sq = self.b.ins().fmul(axc, axc);
        let nsq = self.neg(sq);
        let sql = self.fma(axc, axc, nsq);
        let nsql = self.neg(sql);
        let e = self.exp_d(nsq, Some(nsql));
        let eg = self.b.ins().fmul(e, g);
        let one = self.cf(1.0);
        let mid = self.b.ins().fsub(one, eg);
        let mid = self.with_sign_of(mid, x);
        self.select_cmp(FloatCC::LessThan, ax, one, small, mid)
    }
}
