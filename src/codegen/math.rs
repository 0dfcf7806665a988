//! Transcendental functions emitted as Cranelift IR (Cranelift has no exp/log/sin instructions).
//!
//! Every function is straight-line IR (plus one guarded loop for the huge-argument reduction of
//! sin/cos) that works lane-wise, so the same code serves a scalar and a vector of the element
//! type: `Emit::ty` is `F32`, `F32X4`, `F64` or `F64X2`.
//!
//! * f32 `exp`, `logistic`, `tanh` are native single-precision approximations.
//! * Every other f32 function is evaluated in f64 lanes (the f32 lanes are promoted, the f64 code
//!   below runs, and the result is rounded once to f32), which makes those functions nearly
//!   correctly rounded and gives sin/cos an exact reduction over the whole f32 range.
//! * The f64 functions use range reduction, Taylor or Chebyshev-fitted polynomials and, where
//!   the result depends on cancellation (log inside pow, the argument of sin/cos), double-f64
//!   ("double-double") arithmetic.
//!
//! The methods and the measured error (tests/jit_math.rs) are listed in docs/jit-math.md.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::{BlockArg, ConstantData, InstBuilder, MemFlags, Type, Value, types};
use cranelift_frontend::FunctionBuilder;

use crate::codegen::loop_kernel::ElemTy;
use crate::ir::op::{BinaryOp, UnaryOp};

/// Flags for bitcasts between vector types: lanes in little-endian order (every target here).
pub(crate) fn little_endian() -> MemFlags {
    MemFlags::new().with_endianness(cranelift_codegen::ir::Endianness::Little)
}

/// Whether [`Emit::unary`] implements `op` for element type `ty`.
pub(crate) fn supports_unary(op: UnaryOp, ty: ElemTy) -> bool {
    matches!(ty, ElemTy::F32 | ElemTy::F64)
        && matches!(
            op,
            UnaryOp::Exp
                | UnaryOp::Expm1
                | UnaryOp::Log
                | UnaryOp::Log1p
                | UnaryOp::Logistic
                | UnaryOp::Tanh
                | UnaryOp::Erf
                | UnaryOp::Sin
                | UnaryOp::Cos
        )
}

/// Whether [`Emit::binary`] implements `op` for element type `ty`.
pub(crate) fn supports_binary(op: BinaryOp, ty: ElemTy) -> bool {
    matches!(ty, ElemTy::F32 | ElemTy::F64) && matches!(op, BinaryOp::Pow | BinaryOp::Atan2)
}

/// Lane-independent helpers for one element type (scalar or vector).
pub(crate) struct Emit<'a, 'b> {
    pub b: &'a mut FunctionBuilder<'b>,
    /// `F32`, `F32X4`, `F64` or `F64X2`.
    pub ty: Type,
}

// ---- constants -------------------------------------------------------------------------------

/// ln 2 split so that `n·LN2_HI` is exact for |n| < 2^21 (the classic fdlibm split).
const LN2_HI: f64 = 0.6931471803691238;
const LN2_LO: f64 = 1.9082149292705877e-10;
/// ln(f64::MAX) and the input below which e^x is under half the smallest subnormal.
const EXP_HI: f64 = 709.782712893384;
const EXP_LO: f64 = -745.1332191019412;
/// 1.5·2^52: adding it to an integer-valued f64 (|n| < 2^51) puts n in the low bits.
const MAGIC: f64 = 6755399441055744.0;
/// π/2 in four parts; the first three have at most 33 significant bits, so `n·P` is exact for
/// |n| < 2^20 (fdlibm's medium-range split).
const PIO2_1: f64 = 1.5707963267341256;
const PIO2_2: f64 = 6.077100506303966e-11;
const PIO2_3: f64 = 2.0222662487111665e-21;
const PIO2_3T: f64 = 8.4784276603689e-32;
/// π/2, π/4, π as double-f64 (high part, low part).
const PIO2_H: f64 = std::f64::consts::FRAC_PI_2;
const PIO2_L: f64 = 6.123233995736766e-17;
const PIO4_H: f64 = std::f64::consts::FRAC_PI_4;
const PIO4_L: f64 = 3.061616997868383e-17;
const PI_H: f64 = std::f64::consts::PI;
const PI_L: f64 = 1.2246467991473532e-16;
/// |x| from which sin/cos use the Payne–Hanek reduction: n = round(x·2/π) < 2^20 below it.
const HUGE_TRIG: f64 = 1_647_099.0;

/// 1/k! for k = 2..=13: e^r − 1 = r + r²·Σ EXP_Q[j]·r^j (Taylor; the first dropped term,
/// r^14/14!, is below 2^−57 relative for |r| ≤ ln2/2).
const EXP_Q: [f64; 12] = [
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40320.0,
    1.0 / 362880.0,
    1.0 / 3628800.0,
    1.0 / 39916800.0,
    1.0 / 479001600.0,
    1.0 / 6227020800.0,
];

/// 2/(2k+1) for k = 2..=13: 2·atanh(s) = 2s + (2/3)s³ + s⁵·Σ LOG_R[j]·s^{2j} (Taylor; |s| ≤
/// 0.1716, the first dropped term is below 2^−66 relative).
const LOG_R: [f64; 12] = [
    2.0 / 5.0,
    2.0 / 7.0,
    2.0 / 9.0,
    2.0 / 11.0,
    2.0 / 13.0,
    2.0 / 15.0,
    2.0 / 17.0,
    2.0 / 19.0,
    2.0 / 21.0,
    2.0 / 23.0,
    2.0 / 25.0,
    2.0 / 27.0,
];
/// 2/3 as double-f64.
const TWO_THIRDS_H: f64 = 0.6666666666666666;
const TWO_THIRDS_L: f64 = 3.700743415417188e-17;

/// sin y = y + y³·Σ SIN_S[j]·y^{2j} (Taylor to y^17; |y| ≤ π/4, dropped term < 2^−62 relative).
const SIN_S: [f64; 8] = [
    -1.0 / 6.0,
    1.0 / 120.0,
    -1.0 / 5040.0,
    1.0 / 362880.0,
    -1.0 / 39916800.0,
    1.0 / 6227020800.0,
    -1.0 / 1307674368000.0,
    1.0 / 355687428096000.0,
];
/// cos y = 1 − y²/2 + y⁴·Σ COS_C[j]·y^{2j} (Taylor to y^16; dropped term < 2^−58).
const COS_C: [f64; 7] = [
    1.0 / 24.0,
    -1.0 / 720.0,
    1.0 / 40320.0,
    -1.0 / 3628800.0,
    1.0 / 479001600.0,
    -1.0 / 87178291200.0,
    1.0 / 20922789888000.0,
];

/// erf(x)/x as a polynomial in z = x² on [0, 1]: Chebyshev interpolant of degree 12 computed at
/// 60 digits (max relative error 1.6e−17), converted to monomials.
const ERF_SMALL: [f64; 13] = [
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
const ERFCX: [(f64, f64, [f64; 13]); 4] = [
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

/// atan(b)/b as a polynomial in z = b² on [0, tan²(π/8)]: Chebyshev interpolant of degree 11
/// at 60 digits (max relative error 4e−18).
const ATAN_P: [f64; 12] = [
    1.0,
    -0.3333333333333312,
    0.19999999999940893,
    -0.14285714279250245,
    0.11111110744919658,
    -0.09090896809064027,
    0.07692045330902225,
    -0.06662951813629191,
    0.05846878297330872,
    -0.05035102456601552,
    0.03796525745386593,
    -0.017805397205419446,
];

/// 2/π in 26-bit chunks, scaled by 2^600 so that the deep chunks stay normal: entry i is
/// bits 26i+1 ..= 26i+26 after the binary point of 2/π, times 2^(600 − 26(i+1)) (each an exact
/// f64; computed with mpmath at 1300 bits). Used by [`Emit::reduce_huge`].
static TWO_OVER_PI_SCALED: [f64; 45] = [
    2.6416636121591983e+180,
    4.473755396398119e+172,
    2.973748106092612e+164,
    1.1474672122087409e+157,
    4.2248973588586766e+148,
    1.3044644088886268e+141,
    2.622129163535969e+133,
    4.362534648040072e+124,
    3.927251695255066e+117,
    1.4037479001408836e+110,
    9.998090070469519e+101,
    1.8848416382657083e+94,
    4.352055270832885e+86,
    5.4322946486718525e+78,
    1.0840950971148388e+70,
    8.70829287409932e+62,
    1.6968815912787755e+55,
    3.591425416078619e+47,
    2.0273152711908564e+39,
    6.627587756293737e+31,
    7.387579808812906e+23,
    1.4741694633213952e+16,
    20550100.0,
    2.224660098552704,
    1.3493819395193896e-08,
    6.069069152926887e-17,
    1.15584179878604e-23,
    1.540688207690201e-31,
    2.9372122277192276e-39,
    1.646405443094729e-47,
    6.145422639522993e-55,
    4.960733889607687e-63,
    6.181229475297696e-71,
    5.112693181914562e-79,
    1.9536696731873403e-86,
    2.6938405463710756e-94,
    2.6764978826042154e-102,
    8.841120253208753e-110,
    7.853222147741055e-118,
    8.753749820038938e-126,
    7.975215318056252e-134,
    1.5231577594109698e-141,
    5.8566448117620214e-149,
    3.2724949462484394e-157,
    5.654565357393325e-166,
];

/// Number of 26-bit chunks of 2/π that the Payne–Hanek reduction uses for f64 inputs (enough
/// for |x| up to f64::MAX) and for inputs that came from f32 (|x| < 2^128).
const TRIG_CHUNKS_F64: i64 = 45;
const TRIG_CHUNKS_F32: i64 = 9;

/// Which of sin and cos [`Emit::sincos_d`] computes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trig {
    Sin,
    Cos,
}

impl Emit<'_, '_> {
    /// The transcendental unary `op` applied to `x`, or `None` when this module does not
    /// implement it (see [`supports_unary`]).
    pub fn unary(&mut self, op: UnaryOp, x: Value) -> Option<Value> {
        if self.is_f64() {
            return self.unary_d(op, x, TRIG_CHUNKS_F64);
        }
        Some(match op {
            UnaryOp::Exp => self.exp(x),
            UnaryOp::Logistic => self.logistic(x),
            UnaryOp::Tanh => self.tanh(x),
            UnaryOp::Expm1 | UnaryOp::Log | UnaryOp::Log1p | UnaryOp::Erf | UnaryOp::Sin | UnaryOp::Cos => {
                self.via_f64(&[x], |e, a| e.unary_d(op, a[0], TRIG_CHUNKS_F32))?
            }
            _ => return None,
        })
    }

    /// The transcendental binary `op` (Pow, Atan2) applied to `x, y`, or `None` when this module
    /// does not implement it (see [`supports_binary`]). For Atan2, `x` is the numerator y and
    /// `y` the denominator x (operand order of the op: lhs = y, rhs = x).
    pub fn binary(&mut self, op: BinaryOp, x: Value, y: Value) -> Option<Value> {
        if !matches!(op, BinaryOp::Pow | BinaryOp::Atan2) {
            return None;
        }
        if self.is_f64() {
            return self.binary_d(op, x, y);
        }
        self.via_f64(&[x, y], |e, a| e.binary_d(op, a[0], a[1]))
    }

    fn unary_d(&mut self, op: UnaryOp, x: Value, chunks: i64) -> Option<Value> {
        Some(match op {
            UnaryOp::Exp => self.exp_d(x, None),
            UnaryOp::Expm1 => self.expm1_d(x),
            UnaryOp::Log => self.log_d(x),
            UnaryOp::Log1p => self.log1p_d(x),
            UnaryOp::Logistic => self.logistic_d(x),
            UnaryOp::Tanh => self.tanh_d(x),
            UnaryOp::Erf => self.erf_d(x),
            UnaryOp::Sin => self.sincos_d(x, Trig::Sin, chunks),
            UnaryOp::Cos => self.sincos_d(x, Trig::Cos, chunks),
            _ => return None,
        })
    }

    fn binary_d(&mut self, op: BinaryOp, x: Value, y: Value) -> Option<Value> {
        Some(match op {
            BinaryOp::Pow => self.pow_d(x, y),
            BinaryOp::Atan2 => self.atan2_d(x, y),
            _ => return None,
        })
    }

    /// Runs `f` on the arguments widened to f64 lanes and rounds its result once to f32. An
    /// `f32x4` is processed as two `f64x2` halves.
    fn via_f64(&mut self, args: &[Value], mut f: impl FnMut(&mut Emit, &[Value]) -> Option<Value>) -> Option<Value> {
        let le = little_endian();
        if !self.ty.is_vector() {
            let wide: Vec<Value> = args.iter().map(|&a| self.b.ins().fpromote(types::F64, a)).collect();
            let r = f(&mut Emit { b: &mut *self.b, ty: types::F64 }, &wide)?;
            return Some(self.b.ins().fdemote(types::F32, r));
        }
        // Lanes 2, 3 moved down to lanes 0, 1 (byte shuffle), then widened.
        let hi_mask: Vec<u8> = (8..16).chain(8..16).collect();
        let hi_mask = self.b.func.dfg.immediates.push(ConstantData::from(hi_mask));
        let mut lo_args = vec![];
        let mut hi_args = vec![];
        for &a in args {
            lo_args.push(self.b.ins().fvpromote_low(a));
            let bytes = self.b.ins().bitcast(types::I8X16, le, a);
            let hi = self.b.ins().shuffle(bytes, bytes, hi_mask);
            let hi = self.b.ins().bitcast(types::F32X4, le, hi);
            hi_args.push(self.b.ins().fvpromote_low(hi));
        }
        let r_lo = f(&mut Emit { b: &mut *self.b, ty: types::F64X2 }, &lo_args)?;
        let r_hi = f(&mut Emit { b: &mut *self.b, ty: types::F64X2 }, &hi_args)?;
        // fvdemote puts the two results in lanes 0, 1 (lanes 2, 3 are zero); join the halves.
        let d_lo = self.b.ins().fvdemote(r_lo);
        let d_hi = self.b.ins().fvdemote(r_hi);
        let join: Vec<u8> = (0..8).chain(16..24).collect();
        let join = self.b.func.dfg.immediates.push(ConstantData::from(join));
        let a = self.b.ins().bitcast(types::I8X16, le, d_lo);
        let c = self.b.ins().bitcast(types::I8X16, le, d_hi);
        let r = self.b.ins().shuffle(a, c, join);
        Some(self.b.ins().bitcast(types::F32X4, le, r))
    }

    // ---- lane helpers ---------------------------------------------------------------------

    fn is_f64(&self) -> bool {
        self.ty.lane_type() == types::F64
    }

    /// The integer type with the lane layout of `ty`.
    fn int_ty(&self) -> Type {
        match (self.is_f64(), self.ty.is_vector()) {
            (false, false) => types::I32,
            (false, true) => types::I32X4,
            (true, false) => types::I64,
            (true, true) => types::I64X2,
        }
    }

    /// A constant of the element type (splatted for vectors).
    pub fn c(&mut self, v: f32) -> Value {
        self.cf(v as f64)
    }

    /// A constant given in f64, rounded to the lane type (f32 or f64).
    pub fn cf(&mut self, v: f64) -> Value {
        let s = if self.is_f64() { self.b.ins().f64const(v) } else { self.b.ins().f32const(v as f32) };
        if self.ty.is_vector() { self.b.ins().splat(self.ty, s) } else { s }
    }

    /// An integer constant of the lane integer type (splatted for vectors).
    fn ci(&mut self, v: i64) -> Value {
        let lane = self.int_ty().lane_type();
        let s = self.b.ins().iconst(lane, if lane == types::I32 { v as i32 as i64 } else { v });
        let ity = self.int_ty();
        if self.ty.is_vector() { self.b.ins().splat(ity, s) } else { s }
    }

    fn flags() -> MemFlags {
        little_endian()
    }

    /// The bits of float lanes as integer lanes.
    fn bits(&mut self, x: Value) -> Value {
        let ity = self.int_ty();
        self.b.ins().bitcast(ity, Self::flags(), x)
    }

    fn bits_to_float(&mut self, x: Value) -> Value {
        self.b.ins().bitcast(self.ty, Self::flags(), x)
    }

    /// `-x`. Vectors flip the sign bits with a constant mask (one `xorps` against a pooled
    /// constant; Cranelift's own `fneg` rebuilds the mask with two instructions at every use).
    pub fn neg(&mut self, x: Value) -> Value {
        if !self.ty.is_vector() {
            return self.b.ins().fneg(x);
        }
        let m = self.cf(-0.0);
        self.b.ins().bxor(x, m)
    }

    /// `|x|`, as [`Emit::neg`] with an `andps` against the all-but-sign mask.
    pub fn abs(&mut self, x: Value) -> Value {
        if !self.ty.is_vector() {
            return self.b.ins().fabs(x);
        }
        let s = if self.is_f64() {
            self.b.ins().f64const(Ieee64::with_bits(u64::MAX >> 1))
        } else {
            self.b.ins().f32const(Ieee32::with_bits(u32::MAX >> 1))
        };
        let m = self.b.ins().splat(self.ty, s);
        self.b.ins().band(x, m)
    }

    /// `min(x, k)` for a constant `k` that is neither NaN nor ±0: `k < x ? k : x`, one `minps`
    /// on x86 (Cranelift's general `fmin` also orders signed zeros and NaN operands, ~8
    /// instructions). A NaN `x` gives `x`, as the propagating minimum does.
    fn min_k(&mut self, x: Value, k: Value) -> Value {
        self.select_cmp(FloatCC::LessThan, k, x, k, x)
    }

    /// `max(x, k)` for a constant `k` that is neither NaN nor ±0 (one `maxps`; see
    /// [`Emit::min_k`]).
    fn max_k(&mut self, x: Value, k: Value) -> Value {
        self.select_cmp(FloatCC::LessThan, x, k, k, x)
    }

    /// `a * b + c` with one rounding (FMA instructions when the host has them).
    pub fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        self.b.ins().fma(a, b, c)
    }

    /// Selects `t` where `cond(a, b)` holds, else `f`.
    pub fn select_cmp(&mut self, cc: FloatCC, a: Value, b: Value, t: Value, f: Value) -> Value {
        let m = self.b.ins().fcmp(cc, a, b);
        if self.ty.is_vector() {
            let m = self.b.ins().bitcast(self.ty, Self::flags(), m);
            self.b.ins().bitselect(m, t, f)
        } else {
            self.b.ins().select(m, t, f)
        }
    }

    /// All-ones integer lanes where `cc(a, b)` holds, zero elsewhere.
    fn mask(&mut self, cc: FloatCC, a: Value, b: Value) -> Value {
        let m = self.b.ins().fcmp(cc, a, b);
        if self.ty.is_vector() {
            m
        } else {
            let ity = self.int_ty();
            self.b.ins().bmask(ity, m)
        }
    }

    /// `mask(cc, a, k)` for a constant `k`.
    fn mask_c(&mut self, cc: FloatCC, a: Value, k: f64) -> Value {
        let kc = self.cf(k);
        self.mask(cc, a, kc)
    }

    /// Float lanes: `t` where the integer mask `m` is all ones, else `f`.
    fn blend(&mut self, m: Value, t: Value, f: Value) -> Value {
        let tb = self.bits(t);
        let fb = self.bits(f);
        let tm = self.b.ins().band(tb, m);
        let fm = self.b.ins().band_not(fb, m);
        let r = self.b.ins().bor(tm, fm);
        self.bits_to_float(r)
    }

    /// `blend` with a constant for `t`.
    fn blend_c(&mut self, m: Value, t: f64, f: Value) -> Value {
        let tc = self.cf(t);
        self.blend(m, tc, f)
    }

    /// All-ones lanes where the sign bit of `x` is set (also −0 and −NaN).
    fn sign_mask(&mut self, x: Value) -> Value {
        let xb = self.bits(x);
        let shift = if self.is_f64() { 63 } else { 31 };
        self.b.ins().sshr_imm(xb, shift)
    }

    /// `mag` (non-negative) with the sign bit of `sgn`.
    fn with_sign_of(&mut self, mag: Value, sgn: Value) -> Value {
        if !self.ty.is_vector() {
            return self.b.ins().fcopysign(mag, sgn);
        }
        let sb = self.bits(sgn);
        let mb = self.bits(mag);
        let mask = self.ci(if self.is_f64() { i64::MIN } else { i32::MIN as i64 });
        let s = self.b.ins().band(sb, mask);
        let r = self.b.ins().bor(mb, s);
        self.bits_to_float(r)
    }

    /// Horner evaluation of `coeffs[0] + coeffs[1]·x + …` (f32 coefficients).
    fn poly(&mut self, x: Value, coeffs: &[f32]) -> Value {
        let wide: Vec<f64> = coeffs.iter().map(|&k| k as f64).collect();
        self.polyd(x, &wide)
    }

    /// Horner evaluation of `coeffs[0] + coeffs[1]·x + …`, coefficients rounded to the lane type.
    fn polyd(&mut self, x: Value, coeffs: &[f64]) -> Value {
        let mut acc = self.cf(coeffs[coeffs.len() - 1]);
        for &k in coeffs[..coeffs.len() - 1].iter().rev() {
            let kc = self.cf(k);
            acc = self.fma(acc, x, kc);
        }
        acc
    }

    /// Float lanes of `a + b` as an unevaluated sum `(s, e)`, `s + e = a + b` exactly (Knuth).
    fn two_sum(&mut self, a: Value, b: Value) -> (Value, Value) {
        let s = self.b.ins().fadd(a, b);
        let bb = self.b.ins().fsub(s, a);
        let aa = self.b.ins().fsub(s, bb);
        let db = self.b.ins().fsub(b, bb);
        let da = self.b.ins().fsub(a, aa);
        let e = self.b.ins().fadd(da, db);
        (s, e)
    }

    /// `two_sum` for |a| ≥ |b| (Dekker).
    fn fast_two_sum(&mut self, a: Value, b: Value) -> (Value, Value) {
        let s = self.b.ins().fadd(a, b);
        let t = self.b.ins().fsub(s, a);
        let e = self.b.ins().fsub(b, t);
        (s, e)
    }

    /// 2^n for integer-valued f64 lanes n in [−1022, 1023] (built from the exponent bits).
    fn pow2_d(&mut self, n: Value) -> Value {
        let magic = self.cf(MAGIC);
        let t = self.b.ins().fadd(n, magic);
        let tb = self.bits(t);
        // bits(n + MAGIC) = bits(MAGIC) + n; subtract it and add the exponent bias in one step.
        let off = self.ci(MAGIC.to_bits() as i64 - 1023);
        let e = self.b.ins().isub(tb, off);
        let e = self.b.ins().ishl_imm(e, 52);
        self.bits_to_float(e)
    }

    /// x·2^n for integer-valued f64 lanes n in [−1075, 1024], in two exact halves.
    fn scale_d(&mut self, x: Value, n: Value) -> Value {
        let half = self.cf(0.5);
        let h = self.b.ins().fmul(n, half);
        let n1 = self.b.ins().floor(h);
        let n2 = self.b.ins().fsub(n, n1);
        let s1 = self.pow2_d(n1);
        let s2 = self.pow2_d(n2);
        let y = self.b.ins().fmul(x, s1);
        self.b.ins().fmul(y, s2)
    }

    // ---- f32 (native single precision) ----------------------------------------------------

    /// e^x. Range reduction `x = n·ln2 + r`, |r| ≤ ln2/2, degree-6 polynomial for e^r, and the
    /// scale 2^n applied in two halves so that results near the subnormal boundary and near
    /// f32::MAX are exact powers. Below −87.3365 (result subnormal) gives 0, above 88.7228 gives
    /// +Inf; NaN propagates.
    pub fn exp(&mut self, x: Value) -> Value {
        const LO: f32 = -87.336_55;
        const HI: f32 = 88.722_84;
        let lo = self.c(LO);
        let hi = self.c(HI);
        let xc = self.max_k(x, lo);
        let xc = self.min_k(xc, hi);
        let log2e = self.c(std::f32::consts::LOG2_E);
        let t = self.b.ins().fmul(xc, log2e);
        let n = self.b.ins().nearest(t);
        let ln2_hi = self.c(-0.693_359_4);
        let ln2_lo = self.c(2.121_944_4e-4);
        let r = self.fma(n, ln2_hi, xc);
        let r = self.fma(n, ln2_lo, r);
        // e^r ≈ 1 + r + r²·P(r), P a degree-5 fit on [−ln2/2, ln2/2] (the classic Cephes expf set).
        let p5 = self.poly(r, &[0.5, 1.666_666_5e-1, 4.166_579_6e-2, 8.333_452e-3, 1.398_2e-3, 1.987_569_1e-4]);
        let r2 = self.b.ins().fmul(r, r);
        let one_c = self.c(1.0);
        let lin = self.b.ins().fadd(r, one_c);
        let p = self.fma(r2, p5, lin);
        let ity = self.int_ty();
        let ni = self.b.ins().fcvt_to_sint_sat(ity, n);
        let n1 = self.b.ins().sshr_imm(ni, 1);
        let n2 = self.b.ins().isub(ni, n1);
        let bias = self.ci(127);
        let e1 = self.b.ins().iadd(n1, bias);
        let e2 = self.b.ins().iadd(n2, bias);
        let e1 = self.b.ins().ishl_imm(e1, 23);
        let e2 = self.b.ins().ishl_imm(e2, 23);
        let s1 = self.bits_to_float(e1);
        let s2 = self.bits_to_float(e2);
        let y = self.b.ins().fmul(p, s1);
        let y = self.b.ins().fmul(y, s2);
        let zero = self.c(0.0);
        let inf = self.c(f32::INFINITY);
        let y = self.select_cmp(FloatCC::LessThan, x, lo, zero, y);
        self.select_cmp(FloatCC::GreaterThan, x, hi, inf, y)
    }

    /// 1 / (1 + e^−x).
    pub fn logistic(&mut self, x: Value) -> Value {
        let nx = self.neg(x);
        let e = self.exp(nx);
        let one = self.c(1.0);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(one, d)
    }

    /// tanh(x) = sign(x)·(1 − 2/(e^{2|x|} + 1)), with a polynomial for |x| < 0.4 where that
    /// form cancels; |x| is clamped to 10, where the quotient already rounds to ±1 (at 9 it
    /// would still give 1 − 2^−24).
    pub fn tanh(&mut self, x: Value) -> Value {
        let ax = self.abs(x);
        let ten = self.c(10.0);
        let axc = self.min_k(ax, ten);
        let two = self.c(2.0);
        let t = self.b.ins().fmul(axc, two);
        let e = self.exp(t);
        let one = self.c(1.0);
        let d = self.b.ins().fadd(e, one);
        let q = self.b.ins().fdiv(two, d);
        let big = self.b.ins().fsub(one, q);
        // Small |x|: odd polynomial x + x^3·P(x^2) (Taylor to x^13; the first dropped term is below
        // 1e-8 relative for |x| < 0.4).
        let x2 = self.b.ins().fmul(x, x);
        let p = self
            .poly(x2, &[-0.333_333_34, 0.133_333_33, -0.053_968_254, 0.021_869_488, -0.008_863_236, 0.003_592_128_6]);
        let x3 = self.b.ins().fmul(x2, x);
        let small = self.fma(x3, p, x);
        let signed_big = self.with_sign_of(big, x);
        let lim = self.c(0.4);
        // NaN: the comparison is false, so the result is signed_big, which is NaN (min_k keeps it).
        let r = self.select_cmp(FloatCC::LessThan, ax, lim, small, signed_big);
        // ±0 exactly (the FMA above turns −0 into +0: −0·p with p < 0 is +0).
        let zero = self.c(0.0);
        self.select_cmp(FloatCC::Equal, x, zero, x, r)
    }

    // ---- f64 lanes ------------------------------------------------------------------------

    /// Cody–Waite reduction of `x` clamped to `[lo, hi]`: `x = n·ln2 + r` with `n` integral
    /// (as a float) and |r| ≤ ln2/2, `ln2` split in two parts so `r` is exact. `lo`, `hi` are
    /// constants, neither NaN nor zero.
    fn reduce_ln2_d(&mut self, x: Value, lo: Value, hi: Value) -> (Value, Value) {
        let xc = self.max_k(x, lo);
        let xc = self.min_k(xc, hi);
        let log2e = self.cf(std::f64::consts::LOG2_E);
        let t = self.b.ins().fmul(xc, log2e);
        let n = self.b.ins().nearest(t);
        let nn = self.neg(n);
        let l1 = self.cf(LN2_HI);
        let l2 = self.cf(LN2_LO);
        let r = self.fma(nn, l1, xc);
        (n, self.fma(nn, l2, r))
    }

    /// e^(x + xl), `xl` an optional low part (|xl| ≤ 2^−40·|x|, from pow). `x = n·ln2 + r`
    /// (Cody–Waite), e^r − 1 by its Taylor polynomial to r^13, scale 2^n in two halves (so
    /// subnormal results are produced, not flushed). Above ln(MAX) +Inf, below −745.13 zero, NaN
    /// propagates.
    fn exp_d(&mut self, x: Value, xl: Option<Value>) -> Value {
        let lo = self.cf(EXP_LO);
        let hi = self.cf(EXP_HI);
        let (n, mut r) = self.reduce_ln2_d(x, lo, hi);
        if let Some(xl) = xl {
            r = self.b.ins().fadd(r, xl);
        }
        let q = self.polyd(r, &EXP_Q);
        let r2 = self.b.ins().fmul(r, r);
        let em = self.fma(r2, q, r);
        let one = self.cf(1.0);
        let p = self.b.ins().fadd(one, em);
        let y = self.scale_d(p, n);
        let zero = self.cf(0.0);
        let inf = self.cf(f64::INFINITY);
        let y = self.select_cmp(FloatCC::LessThan, x, lo, zero, y);
        self.select_cmp(FloatCC::GreaterThan, x, hi, inf, y)
    }

    /// e^x − 1: with `x = n·ln2 + r`, `2^n·(expm1(r) + 1 − 2^−n)`, and `expm1(r)` itself when
    /// n = 0 (|x| ≤ ln2/2, no cancellation). −1 below −40, +Inf above ln(MAX), ±0 kept.
    fn expm1_d(&mut self, x: Value) -> Value {
        let lo = self.cf(-40.0);
        let hi = self.cf(EXP_HI);
        let (n, r) = self.reduce_ln2_d(x, lo, hi);
        let q = self.polyd(r, &EXP_Q);
        let r2 = self.b.ins().fmul(r, r);
        let em = self.fma(r2, q, r);
        // 1 − 2^−n, with n clamped to ±60 (beyond, 2^−n is negligible or the result is −1).
        let c60 = self.cf(60.0);
        let m60 = self.cf(-60.0);
        let nc = self.min_k(n, c60);
        let nc = self.max_k(nc, m60);
        let nneg = self.neg(nc);
        let t = self.pow2_d(nneg);
        let one = self.cf(1.0);
        let om = self.b.ins().fsub(one, t);
        let s = self.b.ins().fadd(em, om);
        let big = self.scale_d(s, n);
        let zero = self.cf(0.0);
        let y = self.select_cmp(FloatCC::Equal, n, zero, em, big);
        let m1 = self.cf(-1.0);
        let inf = self.cf(f64::INFINITY);
        let y = self.select_cmp(FloatCC::LessThan, x, lo, m1, y);
        let y = self.select_cmp(FloatCC::GreaterThan, x, hi, inf, y);
        self.select_cmp(FloatCC::Equal, x, zero, x, y)
    }

    /// ln x as a double-f64 `(hi, lo)` for finite x > 0 (garbage otherwise; callers select the
    /// special values). `x = 2^k·m`, m ∈ [√½, √2), f = m − 1, s = f/(2 + f) carried as s + sl,
    /// ln m = 2s + (2/3)s³ (double-f64) + s⁵·R(s²); relative error about 2^−66.
    fn log_dd(&mut self, x: Value) -> (Value, Value) {
        // Subnormals: scale by 2^54 first.
        let tiny = self.mask_c(FloatCC::LessThan, x, f64::MIN_POSITIVE);
        let k54 = self.cf(18014398509481984.0);
        let xs0 = self.b.ins().fmul(x, k54);
        let xs = self.blend(tiny, xs0, x);
        let zero = self.cf(0.0);
        let kadj = self.blend_c(tiny, -54.0, zero);
        // u = bits(x) − bits(√½) + 2^62 is positive; its top bits are k + 1024 and its mantissa
        // bits plus bits(√½) give m ∈ [√½, √2).
        let c = std::f64::consts::FRAC_1_SQRT_2.to_bits() as i64;
        let xb = self.bits(xs);
        let off = self.ci(c - (1i64 << 62));
        let u = self.b.ins().isub(xb, off);
        let kk = self.b.ins().ushr_imm(u, 52);
        let magic = self.ci(MAGIC.to_bits() as i64);
        let kb = self.b.ins().iadd(kk, magic);
        let kf = self.bits_to_float(kb);
        let kmag = self.cf(MAGIC + 1024.0);
        let kf = self.b.ins().fsub(kf, kmag);
        let kf = self.b.ins().fadd(kf, kadj);
        let mmask = self.ci((1i64 << 52) - 1);
        let mb = self.b.ins().band(u, mmask);
        let cc = self.ci(c);
        let mb = self.b.ins().iadd(mb, cc);
        let m = self.bits_to_float(mb);
        let one = self.cf(1.0);
        let two = self.cf(2.0);
        let f = self.b.ins().fsub(m, one);
        // s = f / d, d = 2 + f = dh + dl exactly.
        let dh = self.b.ins().fadd(two, f);
        let t = self.b.ins().fsub(dh, two);
        let dl = self.b.ins().fsub(f, t);
        let sh = self.b.ins().fdiv(f, dh);
        let nsh = self.neg(sh);
        let rem = self.fma(nsh, dh, f);
        let sdl = self.b.ins().fmul(sh, dl);
        let rem = self.b.ins().fsub(rem, sdl);
        let sl = self.b.ins().fdiv(rem, dh);
        // s³ as a double-f64, times 2/3.
        let s2h = self.b.ins().fmul(sh, sh);
        let ns2h = self.neg(s2h);
        let s2l = self.fma(sh, sh, ns2h);
        let s3h = self.b.ins().fmul(s2h, sh);
        let ns3h = self.neg(s3h);
        let s3l = self.fma(s2h, sh, ns3h);
        let s3l = self.fma(s2l, sh, s3l);
        let ch = self.cf(TWO_THIRDS_H);
        let cl = self.cf(TWO_THIRDS_L);
        let t1h = self.b.ins().fmul(ch, s3h);
        let nt1h = self.neg(t1h);
        let t1l = self.fma(ch, s3h, nt1h);
        let t1l = self.fma(cl, s3h, t1l);
        let t1l = self.fma(ch, s3l, t1l);
        // s⁵·R(s²)
        let rp = self.polyd(s2h, &LOG_R);
        let s5 = self.b.ins().fmul(s3h, s2h);
        let r = self.b.ins().fmul(s5, rp);
        // k·ln2 + 2s + t1 + (2 sl + t1l + r + k·ln2_lo)
        let l1 = self.cf(LN2_HI);
        let l2 = self.cf(LN2_LO);
        let a = self.b.ins().fmul(kf, l1);
        let s2 = self.b.ins().fadd(sh, sh);
        let (h1, e1) = self.two_sum(a, s2);
        let (h2, e2) = self.two_sum(h1, t1h);
        let sl2 = self.b.ins().fadd(sl, sl);
        let small = self.b.ins().fadd(sl2, t1l);
        let small = self.b.ins().fadd(small, r);
        let small = self.fma(kf, l2, small);
        let e = self.b.ins().fadd(e1, e2);
        let lo = self.b.ins().fadd(e, small);
        self.fast_two_sum(h2, lo)
    }

    /// ln x: `log_dd` rounded, with ln(±0) = −Inf, ln(<0) = NaN, ln(+Inf) = +Inf, NaN kept.
    fn log_d(&mut self, x: Value) -> Value {
        let (h, l) = self.log_dd(x);
        let r = self.b.ins().fadd(h, l);
        self.log_specials(x, x, r)
    }

    /// Special values of ln(u) given the argument `u` (x for log, 1 + x for log1p), with NaN
    /// taken from `x`.
    fn log_specials(&mut self, u: Value, x: Value, r: Value) -> Value {
        let zero = self.cf(0.0);
        let ninf = self.cf(f64::NEG_INFINITY);
        let inf = self.cf(f64::INFINITY);
        let nan = self.cf(f64::NAN);
        let r = self.select_cmp(FloatCC::LessThan, u, zero, nan, r);
        let r = self.select_cmp(FloatCC::Equal, u, zero, ninf, r);
        let r = self.select_cmp(FloatCC::Equal, u, inf, inf, r);
        self.select_cmp(FloatCC::Unordered, x, x, x, r)
    }

    /// ln(1 + x) = ln(u) + (x − (u − 1))/u with u = 1 + x rounded (the correction restores
    /// what the rounding of u lost). ±0 kept, −1 → −Inf, < −1 → NaN.
    fn log1p_d(&mut self, x: Value) -> Value {
        let one = self.cf(1.0);
        let u = self.b.ins().fadd(one, x);
        let um1 = self.b.ins().fsub(u, one);
        let c = self.b.ins().fsub(x, um1);
        let (h, l) = self.log_dd(u);
        let cu = self.b.ins().fdiv(c, u);
        let lo = self.b.ins().fadd(l, cu);
        let r = self.b.ins().fadd(h, lo);
        let r = self.log_specials(u, x, r);
        let zero = self.cf(0.0);
        self.select_cmp(FloatCC::Equal, x, zero, x, r)
    }

    /// 1 / (1 + e^−x) (the form XLA and the reference kernels use).
    fn logistic_d(&mut self, x: Value) -> Value {
        let nx = self.neg(x);
        let e = self.exp_d(nx, None);
        let one = self.cf(1.0);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(one, d)
    }

    /// tanh x = sign(x)·t/(t + 2) with t = expm1(2|x|) (no cancellation anywhere); |x| is
    /// clamped to 20, beyond which the quotient rounds to 1.
    fn tanh_d(&mut self, x: Value) -> Value {
        let ax = self.abs(x);
        let c20 = self.cf(20.0);
        let axc = self.min_k(ax, c20);
        let a2 = self.b.ins().fadd(axc, axc);
        let t = self.expm1_d(a2);
        let two = self.cf(2.0);
        let d = self.b.ins().fadd(t, two);
        let r = self.b.ins().fdiv(t, d);
        self.with_sign_of(r, x)
    }

    /// erf x. |x| < 1: x·P(x²); 1 ≤ |x| < 6: 1 − e^{−x²}·erfcx(|x|) with erfcx from four
    /// polynomial pieces (coefficients chosen per lane) and e^{−x²} corrected for the rounding of
    /// x²; |x| ≥ 6 rounds to ±1 through the same formula. NaN propagates.
    fn erf_d(&mut self, x: Value) -> Value {
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

    /// sin x or cos x. Reduction `x = n·π/2 + y` with y as a double-f64 (|y| ≤ π/4): Cody–Waite
    /// with a four-part π/2 when every lane has |x| < 1647099 (n < 2^20), otherwise (a branch
    /// taken only when some lane is that large) the Payne–Hanek reduction of [`Self::reduce_huge`]
    /// for those lanes. Then the Taylor polynomials of sin and cos on y, and the quadrant n mod 4
    /// picks and signs one of them. ±Inf and NaN give NaN; sin(±0) = ±0.
    fn sincos_d(&mut self, x: Value, which: Trig, chunks: i64) -> Value {
        let (yh, yl, q) = self.reduce_pio2(x, chunks);
        // sin y ≈ yh + (yl + yh³·S(z)); cos y ≈ w + (((1 − w) − z/2) + (z²·C(z) − yh·yl)), w = 1 − z/2.
        let z = self.b.ins().fmul(yh, yh);
        let sp = self.polyd(z, &SIN_S);
        let y3 = self.b.ins().fmul(z, yh);
        let sin_tail = self.fma(y3, sp, yl);
        let s = self.b.ins().fadd(yh, sin_tail);
        let cp = self.polyd(z, &COS_C);
        let z2 = self.b.ins().fmul(z, z);
        let half = self.cf(0.5);
        let hz = self.b.ins().fmul(z, half);
        let one = self.cf(1.0);
        let w = self.b.ins().fsub(one, hz);
        let t = self.b.ins().fsub(one, w);
        let t = self.b.ins().fsub(t, hz);
        let nyl = self.neg(yl);
        let u = self.b.ins().fmul(yh, nyl);
        let u = self.fma(z2, cp, u);
        let t = self.b.ins().fadd(t, u);
        let c = self.b.ins().fadd(w, t);
        // Quadrant: sin x = [s, c, −s, −c][q], cos x = [c, −s, −c, s][q].
        let one_i = self.ci(1);
        let odd = self.b.ins().band(q, one_i);
        let zero_i = self.ci(0);
        let swap = self.b.ins().isub(zero_i, odd);
        let (neg_src, r) = match which {
            Trig::Sin => (q, self.blend(swap, c, s)),
            Trig::Cos => {
                let q1 = self.b.ins().iadd(q, one_i);
                (q1, self.blend(swap, s, c))
            }
        };
        let two_i = self.ci(2);
        let neg = self.b.ins().band(neg_src, two_i);
        let neg = self.b.ins().ishl_imm(neg, 62);
        let rb = self.bits(r);
        let rb = self.b.ins().bxor(rb, neg);
        let r = self.bits_to_float(rb);
        let r = if which == Trig::Sin {
            let zero = self.cf(0.0);
            self.select_cmp(FloatCC::Equal, x, zero, x, r)
        } else {
            r
        };
        let ax = self.abs(x);
        let inf = self.cf(f64::INFINITY);
        let nan = self.cf(f64::NAN);
        self.select_cmp(FloatCC::Equal, ax, inf, nan, r)
    }

    /// `x = n·π/2 + (yh + yl)`, returning `(yh, yl, n)` with n in integer lanes (only n mod 4 is
    /// meaningful). Cody–Waite for every lane; when any lane has |x| ≥ [`HUGE_TRIG`], a branch
    /// computes the Payne–Hanek reduction for all lanes and those lanes take it.
    fn reduce_pio2(&mut self, x: Value, chunks: i64) -> (Value, Value, Value) {
        let inv = self.cf(std::f64::consts::FRAC_2_PI);
        let t = self.b.ins().fmul(x, inv);
        let n = self.b.ins().nearest(t);
        let nn = self.neg(n);
        let p1 = self.cf(PIO2_1);
        let t1 = self.fma(nn, p1, x); // exact: n·PIO2_1 exact, x − n·PIO2_1 exact (Sterbenz)
        let p2 = self.cf(PIO2_2);
        let w2 = self.b.ins().fmul(n, p2); // exact
        let nw2 = self.neg(w2);
        let (h, e1) = self.two_sum(t1, nw2);
        let p3 = self.cf(PIO2_3);
        let w3 = self.b.ins().fmul(n, p3); // exact
        let nw3 = self.neg(w3);
        let (h, e2) = self.two_sum(h, nw3);
        let p4 = self.cf(PIO2_3T);
        let lo = self.b.ins().fadd(e1, e2);
        let lo = self.fma(nn, p4, lo);
        let (yh, yl) = self.fast_two_sum(h, lo);
        let q = self.quadrant(n);

        // Branch to the Payne–Hanek reduction when some lane is huge.
        let ax = self.abs(x);
        let lim = self.cf(HUGE_TRIG);
        let big = self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, ax, lim);
        let any = if self.ty.is_vector() { self.b.ins().vany_true(big) } else { big };
        let huge_blk = self.b.create_block();
        let merge = self.b.create_block();
        let ity = self.int_ty();
        let m_yh = self.b.append_block_param(merge, self.ty);
        let m_yl = self.b.append_block_param(merge, self.ty);
        let m_q = self.b.append_block_param(merge, ity);
        let cheap = [BlockArg::Value(yh), BlockArg::Value(yl), BlockArg::Value(q)];
        self.b.ins().brif(any, huge_blk, &[], merge, &cheap);

        self.b.switch_to_block(huge_blk);
        let (hh, hl, hq) = self.reduce_huge(x, chunks);
        let bigm = self.mask(FloatCC::GreaterThanOrEqual, ax, lim);
        let yh2 = self.blend(bigm, hh, yh);
        let yl2 = self.blend(bigm, hl, yl);
        let hqb = self.b.ins().band(hq, bigm);
        let qb = self.b.ins().band_not(q, bigm);
        let q2 = self.b.ins().bor(hqb, qb);
        self.b.ins().jump(merge, &[BlockArg::Value(yh2), BlockArg::Value(yl2), BlockArg::Value(q2)]);

        self.b.switch_to_block(merge);
        (m_yh, m_yl, m_q)
    }

    /// Integer lanes holding the integer-valued f64 lanes `n` (|n| < 2^51) modulo 2^64.
    fn quadrant(&mut self, n: Value) -> Value {
        let magic = self.cf(MAGIC);
        let t = self.b.ins().fadd(n, magic);
        let tb = self.bits(t);
        let mb = self.ci(MAGIC.to_bits() as i64);
        self.b.ins().isub(tb, mb)
    }

    /// Payne–Hanek: `x·(2/π) mod 4` computed exactly enough for every lane with |x| ≥ 2^20.
    /// x·2^−600 is split into two halves of at most 27 significant bits, and each half is
    /// multiplied by the 26-bit chunks of 2/π (scaled by 2^600, [`TWO_OVER_PI_SCALED`]), so
    /// every product is exact; each product is reduced mod 4 exactly and accumulated exactly
    /// (TwoSum) into `hi` (kept in [−2, 2] by exact mod-4 steps) and `lo`, whose own rounding
    /// errors go to `lolo`. The chunks are loaded in a loop of `chunks` iterations (45 cover
    /// f64::MAX, 9 cover f32::MAX). The sum's error is about 2^−150 quarter turns plus the
    /// truncated table (x·2^−1170), far below the closest approach of any f64 to a multiple of
    /// π/2 (about 2^−61).
    fn reduce_huge(&mut self, x: Value, chunks: i64) -> (Value, Value, Value) {
        let down = self.cf(2f64.powi(-600));
        let xs = self.b.ins().fmul(x, down);
        let xb = self.bits(xs);
        let lowmask = self.ci((1i64 << 27) - 1);
        let hb = self.b.ins().band_not(xb, lowmask);
        let xh = self.bits_to_float(hb);
        let xl = self.b.ins().fsub(xs, xh);

        let table = self.b.ins().iconst(types::I64, TWO_OVER_PI_SCALED.as_ptr() as i64);
        let zero = self.cf(0.0);
        let i0 = self.b.ins().iconst(types::I64, 0);
        let lp = self.b.create_block();
        let done = self.b.create_block();
        let i = self.b.append_block_param(lp, types::I64);
        let hi = self.b.append_block_param(lp, self.ty);
        let lo = self.b.append_block_param(lp, self.ty);
        let lolo = self.b.append_block_param(lp, self.ty);
        let d_hi = self.b.append_block_param(done, self.ty);
        let d_lo = self.b.append_block_param(done, self.ty);
        let d_lolo = self.b.append_block_param(done, self.ty);
        let z = BlockArg::Value(zero);
        self.b.ins().jump(lp, &[BlockArg::Value(i0), z, z, z]);

        self.b.switch_to_block(lp);
        let off = self.b.ins().ishl_imm(i, 3);
        let addr = self.b.ins().iadd(table, off);
        let flags = MemFlags::trusted().with_readonly();
        let c = self.b.ins().load(types::F64, flags, addr, 0);
        let c = if self.ty.is_vector() { self.b.ins().splat(self.ty, c) } else { c };
        let quarter = self.cf(0.25);
        let four = self.cf(4.0);
        let mut hi = hi;
        let mut lo = lo;
        let mut lolo = lolo;
        for part in [xh, xl] {
            let p = self.b.ins().fmul(part, c); // exact
            let pq = self.b.ins().fmul(p, quarter);
            let k = self.b.ins().nearest(pq);
            let nfour = self.neg(four);
            let r = self.fma(k, nfour, p); // p − 4k, exact, in [−2, 2]
            let (s, e) = self.two_sum(hi, r);
            let (l, e2) = self.two_sum(lo, e);
            lo = l;
            lolo = self.b.ins().fadd(lolo, e2);
            let sq = self.b.ins().fmul(s, quarter);
            let k = self.b.ins().nearest(sq);
            let nfour = self.neg(four);
            hi = self.fma(k, nfour, s); // exact
        }
        let i1 = self.b.ins().iadd_imm(i, 1);
        let more = self.b.ins().icmp_imm(IntCC::SignedLessThan, i1, chunks);
        self.b.ins().brif(
            more,
            lp,
            &[BlockArg::Value(i1), BlockArg::Value(hi), BlockArg::Value(lo), BlockArg::Value(lolo)],
            done,
            &[BlockArg::Value(hi), BlockArg::Value(lo), BlockArg::Value(lolo)],
        );

        self.b.switch_to_block(done);
        // The fraction f = (hi − n) + lo + lolo in quarter turns (hi − n is exact and may be
        // smaller than lo), then y = f·π/2 as a double-f64.
        let n = self.b.ins().nearest(d_hi);
        let fh0 = self.b.ins().fsub(d_hi, n);
        let (fh, fl) = self.two_sum(fh0, d_lo);
        let fl = self.b.ins().fadd(fl, d_lolo);
        let ph = self.cf(PIO2_H);
        let pl = self.cf(PIO2_L);
        let yh = self.b.ins().fmul(fh, ph);
        let nyh = self.neg(yh);
        let yl = self.fma(fh, ph, nyh);
        let yl = self.fma(fh, pl, yl);
        let yl = self.fma(fl, ph, yl);
        let (yh, yl) = self.fast_two_sum(yh, yl);
        let q = self.quadrant(n);
        (yh, yl, q)
    }

    /// x^y. |x|^y = e^{y·ln|x|} with ln|x| as a double-f64 ([`Self::log_dd`]), the product
    /// y·ln|x| as a double-f64, and e^(h + l) ([`Self::exp_d`] with a low part); then the sign
    /// for negative x and odd integer y, and C99 Annex F special cases by selects.
    fn pow_d(&mut self, x: Value, y: Value) -> Value {
        let ax = self.abs(x);
        let (lh, ll) = self.log_dd(ax);
        let zero = self.cf(0.0);
        let inf = self.cf(f64::INFINITY);
        // ln 0 = −Inf, ln Inf = +Inf exactly (the product then gives 0 or Inf below).
        let z = self.mask(FloatCC::Equal, ax, zero);
        let i = self.mask(FloatCC::Equal, ax, inf);
        let lh = self.blend_c(z, f64::NEG_INFINITY, lh);
        let lh = self.blend_c(i, f64::INFINITY, lh);
        let zi = self.b.ins().bor(z, i);
        let ll = self.blend_c(zi, 0.0, ll);
        let ph = self.b.ins().fmul(y, lh);
        let nph = self.neg(ph);
        let pl = self.fma(y, lh, nph);
        let pl = self.fma(y, ll, pl);
        let r = self.exp_d(ph, Some(pl));
        // Negative base: odd integer y negates, non-integer y gives NaN (finite x only).
        let fy = self.b.ins().floor(y);
        let yint = self.mask(FloatCC::Equal, fy, y);
        let half = self.cf(0.5);
        let yh = self.b.ins().fmul(y, half);
        let fyh = self.b.ins().floor(yh);
        let hnot = self.mask(FloatCC::NotEqual, fyh, yh);
        let yodd = self.b.ins().band(yint, hnot);
        let xneg = self.sign_mask(x);
        let flip = self.b.ins().band(xneg, yodd);
        let nr = self.neg(r);
        let r = self.blend(flip, nr, r);
        let xlt = self.mask(FloatCC::LessThan, x, zero);
        let ninf = self.cf(f64::NEG_INFINITY);
        let xfin = self.mask(FloatCC::GreaterThan, x, ninf);
        let bad = self.b.ins().band(xlt, xfin);
        let bad = self.b.ins().band_not(bad, yint);
        let r = self.blend_c(bad, f64::NAN, r);
        // NaN operands propagate, except for the cases below.
        let xy = self.b.ins().fadd(x, y);
        let unord = self.mask(FloatCC::Unordered, x, y);
        let r = self.blend(unord, xy, r);
        // (−1)^±Inf = 1, 1^y = 1 (even NaN), x^±0 = 1 (even NaN).
        let one = self.cf(1.0);
        let ay = self.abs(y);
        let a1 = self.mask(FloatCC::Equal, ax, one);
        let yinf = self.mask(FloatCC::Equal, ay, inf);
        let m1inf = self.b.ins().band(a1, yinf);
        let r = self.blend_c(m1inf, 1.0, r);
        let r = self.select_cmp(FloatCC::Equal, x, one, one, r);
        self.select_cmp(FloatCC::Equal, y, zero, one, r)
    }

    /// atan2(y, x): a = min(|x|,|y|)/max(|x|,|y|) ∈ [0, 1]; for a > tan(π/8),
    /// atan a = π/4 + atan((a − 1)/(a + 1)); atan b = b·P(b²) on |b| ≤ tan(π/8); then
    /// π/2 ∓ θ when |y| > |x| (− when x ≥ 0), else π − θ when x has its sign bit set, and
    /// finally the sign of y. Both zero (a := 0) and both infinite (a := 1) follow the C99
    /// table through the same steps.
    fn atan2_d(&mut self, y: Value, x: Value) -> Value {
        let ay = self.abs(y);
        let ax = self.abs(x);
        let mx = self.b.ins().fmax(ay, ax);
        let mn = self.b.ins().fmin(ay, ax);
        let a = self.b.ins().fdiv(mn, mx);
        let zero = self.cf(0.0);
        let inf = self.cf(f64::INFINITY);
        let one = self.cf(1.0);
        let a = self.select_cmp(FloatCC::Equal, mx, zero, zero, a);
        let a = self.select_cmp(FloatCC::Equal, mn, inf, one, a);
        let am1 = self.b.ins().fsub(a, one);
        let ap1 = self.b.ins().fadd(a, one);
        let bb = self.b.ins().fdiv(am1, ap1);
        let big = self.mask_c(FloatCC::GreaterThan, a, 0.41421356237309503);
        let b = self.blend(big, bb, a);
        let z = self.b.ins().fmul(b, b);
        let p = self.polyd(z, &ATAN_P[1..]);
        let bz = self.b.ins().fmul(b, z);
        let at = self.fma(bz, p, b);
        let q4h = self.cf(PIO4_H);
        let q4l = self.cf(PIO4_L);
        let t = self.b.ins().fadd(q4l, at);
        let t = self.b.ins().fadd(q4h, t);
        let th = self.blend(big, t, at);
        // With t = ±θ by the sign of x (−0 counts as negative): |y| > |x| gives π/2 − t
        // (π/2 ∓ θ); otherwise x < 0 gives π + t (π − θ) and x > 0 gives θ. One rounding each.
        let xneg = self.sign_mask(x);
        let nth = self.neg(th);
        let t = self.blend(xneg, nth, th);
        let p2h = self.cf(PIO2_H);
        let p2l = self.cf(PIO2_L);
        let u = self.b.ins().fsub(p2l, t);
        let swapped = self.b.ins().fadd(p2h, u);
        let pih = self.cf(PI_H);
        let pil = self.cf(PI_L);
        let u = self.b.ins().fadd(pil, t);
        let back = self.b.ins().fadd(pih, u);
        let r = self.blend(xneg, back, th);
        let r = self.select_cmp(FloatCC::GreaterThan, ay, ax, swapped, r);
        self.with_sign_of(r, y)
    }
}
