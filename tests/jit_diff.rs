//! Differential property test: random graphs of elementwise ops (the ones the JIT fuses and
//! others), scalar broadcasts, dtype conversions, reductions, reshapes and transposes, over random
//! shapes (including 0, 1 and primes) in F32 and F64, built twice and run on "jit" and on the
//! reference interpreter "interp".
//!
//! Tolerances: every op other than the JIT's polynomial `exp`, `logistic` and `tanh` (F32) must
//! give bit-identical results (NaNs compare equal to any NaN). Those three are only applied as the
//! last op of a graph, to values both backends computed identically, and are compared within
//! 4 ULP (docs/jit-math.md measures at most 1, 2 and 2 ULP); results the reference gives as
//! subnormal or zero may come back as any value of magnitude below `f32::MIN_POSITIVE` (flush to
//! zero, catalogue §9). `cargo test --test jit_diff` (set `PROPTEST_CASES` for more cases).

use std::sync::Arc;

use proptest::prelude::*;
use tensorjit::ir::op::{BinaryOp, CompareOp, UnaryOp};
use tensorjit::{Backend, Buffer, DType, Function, Shape, Value};

/// One random op, interpreted against the pool of values built so far.
#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    sub: u8,
    a: u16,
    b: u16,
}

#[derive(Clone, Debug)]
struct Program {
    dtype: DType,
    dims: Vec<i64>,
    steps: Vec<Step>,
    outputs: Vec<u16>,
    /// `Some(op)`: apply this transcendental to every output (compared with a tolerance).
    last: Option<UnaryOp>,
    seed: u64,
}

const DIMS: [i64; 10] = [0, 1, 2, 3, 5, 7, 13, 17, 31, 67];
const BINARY: [BinaryOp; 9] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::Pow,
    BinaryOp::Rem,
    BinaryOp::Atan2,
];
/// Exact (or computed by the same reference kernel on both sides) unary ops.
const UNARY: [UnaryOp; 11] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Ceil,
    UnaryOp::Floor,
    UnaryOp::Round,
    UnaryOp::Sign,
    UnaryOp::Log,
    UnaryOp::Sin,
    UnaryOp::Identity,
];
const COMPARE: [CompareOp; 6] = [
    CompareOp::Equal,
    CompareOp::NotEqual,
    CompareOp::GreaterOrEqual,
    CompareOp::GreaterThan,
    CompareOp::LessOrEqual,
    CompareOp::LessThan,
];
const CONSTS: [f64; 7] = [0.5, -2.0, 3.0, 0.0, -0.0, 1e-3, 7.25];

fn program() -> impl Strategy<Value = Program> {
    let dtype = prop_oneof![Just(DType::Float32), Just(DType::Float64)];
    let dims = prop::collection::vec(prop::sample::select(DIMS.to_vec()), 0..=3)
        .prop_map(|d| if d.iter().product::<i64>() > 4096 { vec![d[0]] } else { d });
    let step =
        (any::<u8>(), any::<u8>(), any::<u16>(), any::<u16>()).prop_map(|(kind, sub, a, b)| Step { kind, sub, a, b });
    let last = prop_oneof![
        3 => Just(None),
        1 => Just(Some(UnaryOp::Exp)),
        1 => Just(Some(UnaryOp::Logistic)),
        1 => Just(Some(UnaryOp::Tanh)),
    ];
    (dtype, dims, prop::collection::vec(step, 1..14), prop::collection::vec(any::<u16>(), 1..4), last, any::<u64>())
        .prop_map(|(dtype, dims, steps, outputs, last, seed)| Program { dtype, dims, steps, outputs, last, seed })
}

fn scalar(f: &Function, d: DType, v: f64) -> tensorjit::Result<Value> {
    match d {
        DType::Float32 => f.scalar(v as f32),
        _ => f.scalar(v),
    }
}

/// Builds the program on `backend` and compiles it.
fn build(backend: &Arc<dyn Backend>, p: &Program) -> tensorjit::Result<Arc<dyn tensorjit::Executable>> {
    let builder = backend.builder("diff");
    let f = builder.main();
    let shape = Shape::new(p.dtype, &p.dims);
    let mut pool: Vec<Value> = vec![
        f.parameter("x", shape.clone())?,
        f.parameter("y", shape.clone())?,
        f.parameter("s", Shape::scalar(p.dtype))?,
    ];
    for st in &p.steps {
        let x = pool[st.a as usize % pool.len()];
        let sx = f.shape(x)?;
        let partners: Vec<Value> = pool
            .iter()
            .copied()
            .filter(|&v| {
                let s =
                    f.shape(v).map(|s| s.dtype == sx.dtype && (s.dims == sx.dims || s.rank() == 0 || sx.rank() == 0));
                s.unwrap_or(false)
            })
            .collect();
        let y = partners[st.b as usize % partners.len()];
        let sub = st.sub as usize;
        let v = match st.kind % 9 {
            0 | 1 => f.binary(BINARY[sub % BINARY.len()], x, y)?,
            2 => f.unary(UNARY[sub % UNARY.len()], x)?,
            3 => {
                let c = f.compare(COMPARE[sub % COMPARE.len()], false, x, y)?;
                f.where_(c, y, x)?
            }
            4 => {
                let k = CONSTS[sub % CONSTS.len()].abs() + 0.5;
                f.clamp(scalar(&f, sx.dtype, -k)?, x, scalar(&f, sx.dtype, k)?)?
            }
            5 => {
                let other = if sx.dtype == DType::Float32 { DType::Float64 } else { DType::Float32 };
                match sub % 3 {
                    0 => f.convert_dtype(x, other)?,
                    1 => f.convert_dtype(f.convert_dtype(x, DType::Int32)?, sx.dtype)?,
                    _ => f.convert_dtype(f.convert_dtype(x, other)?, sx.dtype)?,
                }
            }
            6 => {
                if sx.rank() == 0 {
                    f.broadcast_in_dim(x, &shape.with_dtype(sx.dtype), &[])?
                } else {
                    let r = sx.rank();
                    let red =
                        if sub.is_multiple_of(2) { f.reduce_sum(x, &[r - 1])? } else { f.reduce_max(x, &[r - 1])? };
                    let axes: Vec<usize> = (0..r - 1).collect();
                    f.broadcast_in_dim(red, &sx, &axes)?
                }
            }
            7 => {
                if sx.rank() >= 2 && sub.is_multiple_of(2) {
                    let perm: Vec<usize> = (0..sx.rank()).rev().collect();
                    f.transpose(x, &perm)?
                } else {
                    let n: i64 = sx.dims.iter().product();
                    let flat = f.reshape(x, &[n])?;
                    let c = scalar(&f, sx.dtype, CONSTS[sub % CONSTS.len()])?;
                    f.reshape(f.mul(flat, c)?, &sx.dims)?
                }
            }
            _ => {
                let c = scalar(&f, sx.dtype, CONSTS[sub % CONSTS.len()])?;
                if sub.is_multiple_of(2) {
                    f.binary(BINARY[(sub / 2) % 6], x, c)?
                } else {
                    f.binary(BINARY[(sub / 2) % 6], c, x)?
                }
            }
        };
        pool.push(v);
    }
    let mut outs: Vec<Value> = vec![*pool.last().unwrap_or(&pool[0])];
    outs.extend(p.outputs.iter().map(|&i| pool[i as usize % pool.len()]));
    if let Some(op) = p.last {
        outs = outs.into_iter().map(|v| f.unary(op, v)).collect::<tensorjit::Result<_>>()?;
    }
    f.return_(&outs)?;
    builder.compile()
}

/// Deterministic input data with a sprinkling of special values.
fn data(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match s % 40 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3 => -0.0,
                4 => 1e30,
                5 => -1e-30,
                k => (k as f64 - 22.0) / 4.0 + (s >> 40) as f64 / (1u64 << 26) as f64,
            }
        })
        .collect()
}

fn buffer(d: DType, dims: &[i64], vals: &[f64]) -> Buffer {
    let udims: Vec<usize> = dims.iter().map(|&x| x as usize).collect();
    match d {
        DType::Float32 => Buffer::from_slice(&vals.iter().map(|&v| v as f32).collect::<Vec<_>>(), &udims).unwrap(),
        _ => Buffer::from_slice(vals, &udims).unwrap(),
    }
}

fn as_f64(b: &Buffer) -> Vec<f64> {
    match b.dtype() {
        DType::Float32 => b.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect(),
        _ => b.to_vec::<f64>().unwrap(),
    }
}

/// ULP distance of two f32 values (0 for two NaNs).
fn ulps32(a: f32, b: f32) -> u64 {
    if a.is_nan() && b.is_nan() {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u64::MAX;
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 { i64::from(i32::MIN) - i64::from(i) } else { i64::from(i) }
    };
    (key(a) - key(b)).unsigned_abs()
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

fn backends() -> &'static (Arc<dyn Backend>, Arc<dyn Backend>) {
    static B: std::sync::OnceLock<(Arc<dyn Backend>, Arc<dyn Backend>)> = std::sync::OnceLock::new();
    B.get_or_init(|| {
        let jit = tensorjit::runtime::jit::JitBackend::constructor("").expect("jit");
        let interp = tensorjit::new_with_config("interp").expect("interp");
        (jit, interp)
    })
}

fn check(p: &Program) -> Result<(), TestCaseError> {
    let (jit, interp) = backends();
    let ej = build(jit, p).map_err(|e| TestCaseError::fail(format!("jit build/compile: {e}")))?;
    let ei = build(interp, p).map_err(|e| TestCaseError::fail(format!("interp build/compile: {e}")))?;
    let n: usize = p.dims.iter().map(|&d| d as usize).product();
    let inputs = [
        buffer(p.dtype, &p.dims, &data(p.seed, n)),
        buffer(p.dtype, &p.dims, &data(p.seed ^ 0x9e37, n)),
        buffer(p.dtype, &[], &data(p.seed ^ 7, 1)),
    ];
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let oj = ej.execute(&refs, &[]).map_err(|e| TestCaseError::fail(format!("jit execute: {e}")))?;
    let oi = ei.execute(&refs, &[]).map_err(|e| TestCaseError::fail(format!("interp execute: {e}")))?;
    prop_assert_eq!(oj.len(), oi.len());
    for (k, (a, b)) in oj.iter().zip(&oi).enumerate() {
        prop_assert_eq!(a.shape().dims.clone(), b.shape().dims.clone(), "output {} dims", k);
        prop_assert_eq!(a.dtype(), b.dtype(), "output {} dtype", k);
        let (va, vb) = (as_f64(a), as_f64(b));
        for (i, (&x, &y)) in va.iter().zip(&vb).enumerate() {
            let ok = match (p.last, a.dtype()) {
                (Some(_), DType::Float32) => {
                    let (x, y) = (x as f32, y as f32);
                    ulps32(x, y) <= 4 || (y.abs() < f32::MIN_POSITIVE && x.abs() < f32::MIN_POSITIVE)
                }
                _ => same(x, y),
            };
            prop_assert!(ok, "output {} element {}: jit {:e} vs interp {:e}", k, i, x, y);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(192)
    ))]

    #[test]
    fn jit_matches_interp(p in program()) {
        check(&p)?;
    }
}

/// A fixed graph checked on every run, so the suite exercises the fused path even if the random
/// cases happened not to: every JIT binary op, a select, a scalar broadcast and a tail length.
#[test]
fn fixed_graph_matches_interp() {
    let p = Program {
        dtype: DType::Float32,
        dims: vec![3, 13],
        steps: (0..12)
            .map(|i| Step { kind: [0, 1, 3, 4, 8, 6][i % 6], sub: i as u8 * 7, a: i as u16 + 3, b: 2 * i as u16 })
            .collect(),
        outputs: vec![4, 9],
        last: None,
        seed: 42,
    };
    if let Err(e) = check(&p) {
        panic!("{e}");
    }
}
