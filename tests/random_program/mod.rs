//! Random programs from bytes, run on the "jit" and "interp" backends and compared: shared by the
//! differential property test (`tests/differential.rs`) and the `diff` fuzz target
//! (`fuzz/fuzz_targets/diff.rs`), which both include this one file by path.
//!
//! The bytes choose a dtype (f32, f64 or i32), a small static shape (rank 0–3, dims ≤ 8), a chain
//! of steps over a pool of values of that shape (unary and binary elementwise ops, ops with the
//! scalar parameter, compare + select, reshape and transpose round trips, max/min (int: sum)
//! reductions broadcast back, explicit broadcasts), then outputs, each with a tail op, and last
//! the input data (specials included: NaN, ±inf, −0, i32::MIN/MAX). Bytes past the end come
//! from a xorshift generator seeded by the length, so short inputs still make varied programs.
//!
//! Comparison of each output element, jit against interp:
//! - i32: exact (wrapping integer arithmetic is associative, so sums and dots too).
//! - float chain ops (add, sub, mul, div, min, max, neg, abs, floor, ceil, round, sqrt, sign,
//!   selects, reshapes, transposes, broadcasts, max/min reductions): bit-identical, any NaN equal
//!   to any NaN.
//! - transcendental tails (exp, log, tanh, logistic, sin, cos): within the bound of
//!   docs/jit-math.md for the dtype plus 1 ULP (the bound is against a correctly rounded or
//!   1-ULP reference; the interpreter's libm result is within 1 ULP), both infinities and NaN
//!   exact; results below the smallest normal in magnitude may be flushed to zero.
//! - accumulating tails (float sum over all axes, dot): `|jit − interp| ≤ n·ε·m + min_positive`,
//!   where `n` is the number of terms, `ε` the dtype's machine epsilon and `m` the same reduction
//!   of the absolute values (an extra output), the a-priori bound for two summation orders (or
//!   FMA); not checked where `m` is not finite (an infinite or NaN term).
//!
//! Programs the builder rejects are skipped; a program one backend runs and the other rejects
//! is a failure.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use tensorjit::api::DotConfig;
use tensorjit::ir::op::{BinaryOp, CompareOp, ReduceKind, UnaryOp};
use tensorjit::{Backend, Buffer, DType, Function, Shape};

/// The jit backend's config: two threads, the default (fast, reassociating) reductions.
pub const JIT_CONFIG: &str = "jit:parallelism=2";

const DTYPES: [DType; 3] = [DType::Float32, DType::Float64, DType::Int32];
const DIMS: [i64; 6] = [1, 2, 3, 4, 5, 8];
const FLOAT_UNARY: [UnaryOp; 7] =
    [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Floor, UnaryOp::Ceil, UnaryOp::Round, UnaryOp::Sqrt, UnaryOp::Sign];
const INT_UNARY: [UnaryOp; 4] = [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::BitwiseNot, UnaryOp::Sign];
const FLOAT_BINARY: [BinaryOp; 6] =
    [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min];
const INT_BINARY: [BinaryOp; 12] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Rem,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::BitwiseAnd,
    BinaryOp::BitwiseOr,
    BinaryOp::BitwiseXor,
    BinaryOp::ShiftLeft,
    BinaryOp::ShiftRightArithmetic,
];
const COMPARE: [CompareOp; 6] = [
    CompareOp::Equal,
    CompareOp::NotEqual,
    CompareOp::GreaterOrEqual,
    CompareOp::GreaterThan,
    CompareOp::LessOrEqual,
    CompareOp::LessThan,
];
/// Transcendental tails with their docs/jit-math.md bounds (f32, f64) in ULP.
const TRANSCENDENTAL: [(UnaryOp, u64, u64); 6] = [
    (UnaryOp::Exp, 2, 2),
    (UnaryOp::Log, 1, 2),
    (UnaryOp::Tanh, 4, 4),
    (UnaryOp::Logistic, 4, 4),
    (UnaryOp::Sin, 1, 2),
    (UnaryOp::Cos, 1, 2),
];

/// The bytes of one program; reads past the end continue with a xorshift sequence.
pub struct Source<'a> {
    data: &'a [u8],
    pos: usize,
    state: u64,
}

impl<'a> Source<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Source { data, pos: 0, state: 0x9E37_79B9_7F4A_7C15 ^ data.len() as u64 }
    }

    pub fn byte(&mut self) -> u8 {
        let b = match self.data.get(self.pos) {
            Some(&b) => b,
            None => {
                self.state ^= self.state << 13;
                self.state ^= self.state >> 7;
                self.state ^= self.state << 17;
                (self.state >> 24) as u8
            }
        };
        self.pos += 1;
        b
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.byte() as usize % xs.len()]
    }
}

/// How an output is compared.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rule {
    Exact,
    Ulp(u64),
    /// `terms` summed; output `mag` holds the sum of the absolute values.
    Accum {
        terms: usize,
        mag: usize,
    },
}

struct Program {
    dtype: DType,
    dims: Vec<i64>,
    rules: Vec<Rule>,
}

fn is_float(d: DType) -> bool {
    d != DType::Int32
}

/// Builds the program the bytes of `src` describe into `f`.
fn build(f: &Function, src: &mut Source) -> tensorjit::Result<Program> {
    let dtype = src.pick(&DTYPES);
    let rank = src.byte() as usize % 4;
    let dims: Vec<i64> = (0..rank).map(|_| src.pick(&DIMS)).collect();
    let shape = Shape::new(dtype, &dims);
    let float = is_float(dtype);
    let s = f.parameter("s", Shape::scalar(dtype))?;
    let mut pool = vec![f.parameter("x", shape.clone())?, f.parameter("y", shape.clone())?];
    let binary_op = |src: &mut Source| if float { src.pick(&FLOAT_BINARY) } else { src.pick(&INT_BINARY) };
    let steps = 1 + src.byte() % 8;
    for _ in 0..steps {
        let x = pool[src.byte() as usize % pool.len()];
        let y = pool[src.byte() as usize % pool.len()];
        let v = match src.byte() % 7 {
            0 => f.unary(if float { src.pick(&FLOAT_UNARY) } else { src.pick(&INT_UNARY) }, x)?,
            1 => f.binary(binary_op(src), x, y)?,
            2 => {
                let op = binary_op(src);
                if src.byte().is_multiple_of(2) { f.binary(op, x, s)? } else { f.binary(op, s, x)? }
            }
            3 => {
                let c = f.compare(src.pick(&COMPARE), false, x, y)?;
                f.where_(c, x, y)?
            }
            4 if rank >= 2 => {
                let perm: Vec<usize> = (0..rank).rev().collect();
                let t = f.binary(binary_op(src), f.transpose(x, &perm)?, f.transpose(y, &perm)?)?;
                f.transpose(t, &perm)?
            }
            4 => {
                let n: i64 = dims.iter().product();
                let flat = f.binary(binary_op(src), f.reshape(x, &[n])?, f.reshape(y, &[n])?)?;
                f.reshape(flat, &dims)?
            }
            5 if rank >= 1 => {
                let axis = src.byte() as usize % rank;
                let kind = match (float, src.byte() % 3) {
                    (_, 0) => ReduceKind::Max,
                    (false, 1) => ReduceKind::Sum,
                    _ => ReduceKind::Min,
                };
                let r = f.reduce(kind, x, &[axis])?;
                let keep: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
                let b = f.broadcast_in_dim(r, &shape, &keep)?;
                f.binary(binary_op(src), x, b)?
            }
            _ => {
                let b = f.broadcast_in_dim(s, &shape, &[])?;
                f.binary(binary_op(src), b, x)?
            }
        };
        pool.push(v);
    }

    let n_out = 1 + src.byte() as usize % 3;
    let (mut outs, mut rules, mut mags) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n_out {
        let v = pool[src.byte() as usize % pool.len()];
        match src.byte() % 4 {
            1 if float => {
                let (op, b32, b64) = src.pick(&TRANSCENDENTAL);
                outs.push(f.unary(op, v)?);
                rules.push(Rule::Ulp(1 + if dtype == DType::Float32 { b32 } else { b64 }));
            }
            2 if rank >= 1 => {
                let all: Vec<usize> = (0..rank).collect();
                outs.push(f.reduce(ReduceKind::Sum, v, &all)?);
                let terms = dims.iter().product::<i64>() as usize;
                mags.push((f.reduce(ReduceKind::Sum, f.unary(UnaryOp::Abs, v)?, &all)?, terms));
                rules.push(if float { Rule::Accum { terms, mag: n_out + mags.len() - 1 } } else { Rule::Exact });
            }
            3 if rank >= 1 => {
                // v · pᵀ over the last axis: [k]·[k] → scalar, [m, k]·[m, k]ᵀ → [m, m], [b, m, k] batched.
                let p = pool[src.byte() as usize % pool.len()];
                let last = rank - 1;
                let batch: Vec<usize> = if rank == 3 { vec![0] } else { vec![] };
                let dot = |a, b| f.dot_general(a, &[last], &batch, b, &[last], &batch, DotConfig::default());
                outs.push(dot(v, p)?);
                let terms = dims[last] as usize;
                mags.push((dot(f.unary(UnaryOp::Abs, v)?, f.unary(UnaryOp::Abs, p)?)?, terms));
                rules.push(if float { Rule::Accum { terms, mag: n_out + mags.len() - 1 } } else { Rule::Exact });
            }
            _ => {
                outs.push(v);
                rules.push(Rule::Exact);
            }
        }
    }
    // The magnitudes are outputs too, each checked against itself (all its terms are ≥ 0).
    for (i, (m, terms)) in mags.into_iter().enumerate() {
        outs.push(m);
        rules.push(Rule::Accum { terms, mag: n_out + i });
    }
    f.return_(&outs)?;
    Ok(Program { dtype, dims, rules })
}

/// The little-endian bytes of `n` input elements of `d`.
fn input_data(src: &mut Source, d: DType, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * 8);
    for _ in 0..n {
        let small = (src.byte() as i8) as f64 / 4.0;
        let v = match src.byte() % 16 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => -0.0,
            4 => 1e30,
            5 => 1e-3 * small,
            _ => small,
        };
        match d {
            DType::Float32 => out.extend((v as f32).to_le_bytes()),
            DType::Float64 => out.extend(v.to_le_bytes()),
            _ => {
                let i = match v {
                    x if x.is_nan() => 0,
                    f64::INFINITY => i32::MAX,
                    f64::NEG_INFINITY => i32::MIN,
                    x => (x * 4.0) as i32,
                };
                out.extend(i.to_le_bytes())
            }
        }
    }
    out
}

/// The (jit, interp) backends, made once per process.
fn backends() -> &'static (Arc<dyn Backend>, Arc<dyn Backend>) {
    static B: OnceLock<(Arc<dyn Backend>, Arc<dyn Backend>)> = OnceLock::new();
    B.get_or_init(|| {
        let jit = tensorjit::new_with_config(JIT_CONFIG).expect("the jit backend");
        let interp = tensorjit::new_with_config("interp").expect("the interp backend");
        (jit, interp)
    })
}

/// The distance in ULP between two floats of the same sign class (−0 = +0).
fn ulps(a: f64, b: f64, f32_: bool) -> u64 {
    let key = |x: f64| -> i128 {
        let bits = if f32_ { (x as f32).to_bits() as i32 as i128 } else { x.to_bits() as i64 as i128 };
        let mask = if f32_ { 0x7fff_ffff } else { i64::MAX as i128 };
        if bits < 0 { -(bits & mask) } else { bits }
    };
    (key(a) - key(b)).unsigned_abs().min(u64::MAX as u128) as u64
}

fn values(b: &Buffer) -> Vec<f64> {
    let bytes = b.to_bytes().unwrap_or_default();
    match b.dtype() {
        DType::Float32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        DType::Float64 => bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
        _ => bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
    }
}

/// Whether jit's `a` matches interp's `b` under `rule` (`mag`: interp's magnitude output).
fn element_ok(rule: Rule, a: f64, b: f64, mag: f64, d: DType) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan() || matches!(rule, Rule::Accum { .. }) && !mag.is_finite();
    }
    let f32_ = d == DType::Float32;
    let (eps, tiny) =
        if f32_ { (f32::EPSILON as f64, f32::MIN_POSITIVE as f64) } else { (f64::EPSILON, f64::MIN_POSITIVE) };
    match rule {
        _ if d == DType::Int32 => a == b,
        Rule::Exact => a.to_bits() == b.to_bits(),
        Rule::Ulp(u) => {
            if a.is_infinite() || b.is_infinite() {
                a == b
            } else {
                ulps(a, b, f32_) <= u || a.abs() < tiny && b.abs() < tiny
            }
        }
        Rule::Accum { terms, .. } => !mag.is_finite() || (a - b).abs() <= terms as f64 * eps * mag + tiny,
    }
}

/// What [`check`] did with one byte string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Both backends ran the program and agreed.
    Compared,
    /// The builder rejected the program, or both backends failed on it.
    Skipped,
}

/// Builds the program of `data` for both backends, runs it and compares the outputs. `Err`
/// describes the first disagreement (the program is printed in the IR text).
pub fn check(data: &[u8]) -> Result<Outcome, String> {
    let (jit, interp) = backends();
    let mut src_j = Source::new(data);
    let bj = jit.builder("diff");
    let Ok(p) = build(&bj.main(), &mut src_j) else { return Ok(Outcome::Skipped) };
    let mut src = Source::new(data);
    let bi = interp.builder("diff");
    build(&bi.main(), &mut src).map_err(|e| format!("the second build failed: {e}"))?;
    let module = bi.module();
    let text = tensorjit::ir::text::print_module(&module);

    let n: usize = p.dims.iter().product::<i64>() as usize;
    let shape = Shape::new(p.dtype, &p.dims);
    let inputs = [
        Buffer::from_bytes(Shape::scalar(p.dtype), &input_data(&mut src, p.dtype, 1)),
        Buffer::from_bytes(shape.clone(), &input_data(&mut src, p.dtype, n)),
        Buffer::from_bytes(shape, &input_data(&mut src, p.dtype, n)),
    ];
    let inputs: Vec<Buffer> =
        inputs.into_iter().collect::<tensorjit::Result<_>>().map_err(|e| format!("inputs: {e}"))?;
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let run = |b: &Arc<dyn Backend>, m| b.compile(m).and_then(|e| e.execute(&refs, &[]));
    let (oj, oi) = match (run(jit, bj.module()), run(interp, module)) {
        (Ok(j), Ok(i)) => (j, i),
        (Err(_), Err(_)) => return Ok(Outcome::Skipped),
        (j, i) => {
            return Err(format!(
                "one backend failed: jit {:?}, interp {:?}\n{text}",
                j.err().map(|e| e.to_string()),
                i.err().map(|e| e.to_string())
            ));
        }
    };
    if oj.len() != oi.len() || oj.len() != p.rules.len() {
        return Err(format!(
            "{} jit outputs, {} interp outputs, {} expected\n{text}",
            oj.len(),
            oi.len(),
            p.rules.len()
        ));
    }
    let interp_values: Vec<Vec<f64>> = oi.iter().map(values).collect();
    for (k, (a, rule)) in oj.iter().zip(&p.rules).enumerate() {
        if a.shape() != oi[k].shape() {
            return Err(format!("output {k}: jit shape {} vs interp {}\n{text}", a.shape(), oi[k].shape()));
        }
        let mag = |i: usize| match rule {
            Rule::Accum { mag, .. } => interp_values[*mag].get(i).copied().unwrap_or(f64::NAN),
            _ => 0.0,
        };
        for (i, (&x, &y)) in values(a).iter().zip(&interp_values[k]).enumerate() {
            if !element_ok(*rule, x, y, mag(i), p.dtype) {
                return Err(format!(
                    "output {k} ({rule:?}) element {i}: jit {x:e} vs interp {y:e} (magnitude {:e}); inputs s={:?} x={:?} y={:?}\n{text}",
                    mag(i),
                    values(&inputs[0]),
                    values(&inputs[1]),
                    values(&inputs[2]),
                ));
            }
        }
    }
    Ok(Outcome::Compared)
}
