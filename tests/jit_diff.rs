//! Differential property test: random graphs of elementwise ops (the ones the JIT fuses and
//! others), comparisons and selects, clamps, dtype conversions between every kernel dtype, iotas,
//! broadcasts (scalar and along axes), reductions, reshapes and transposes, over random shapes
//! (including 0, 1 and primes) and dtypes (F32, F64, F16, BF16, the eight native ints, Bool),
//! built twice and run on "jit" and on the reference interpreter "interp".
//!
//! The jit backend runs with `reductions=ordered` (fused float Sum/Product reductions accumulate
//! in element order, as the reference does). Tolerances: every op other than the JIT's polynomial `exp`, `logistic` and `tanh` (F32) must
//! give bit-identical results (NaNs compare equal to any NaN, whatever the payload; F16/BF16 are
//! compared by value). Those three are only applied as the last op of an F32 graph, to values
//! both backends computed identically, and are compared within 4 ULP (docs/jit-math.md measures
//! at most 1, 2 and 2 ULP); results the reference gives as subnormal or zero may come back as
//! any value of magnitude below `f32::MIN_POSITIVE` (flush to zero, catalogue §9). Transcendental
//! ops that other parts of the JIT may approximate (log, sin, pow, atan2) are therefore kept out
//! of the inner steps. `cargo test --test jit_diff` (set `PROPTEST_CASES` for more cases).

use std::sync::Arc;

use half::{bf16, f16};
use proptest::prelude::*;
use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::op::{BinaryOp, CompareOp, ReduceKind, UnaryOp};
use tensorjit::{Backend, Buffer, Builder, DType, Executable, Function, Shape, Value};

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
    /// `Some(op)`: apply this transcendental to every F32 output (compared with a tolerance).
    last: Option<UnaryOp>,
    seed: u64,
}

const DIMS: [i64; 10] = [0, 1, 2, 3, 5, 7, 13, 17, 31, 67];
const DTYPES: [DType; 13] = [
    DType::Float32,
    DType::Float64,
    DType::Float16,
    DType::BFloat16,
    DType::Int8,
    DType::Int16,
    DType::Int32,
    DType::Int64,
    DType::Uint8,
    DType::Uint16,
    DType::Uint32,
    DType::Uint64,
    DType::Bool,
];
const FLOAT_BINARY: [BinaryOp; 7] =
    [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min, BinaryOp::Rem];
const INT_BINARY: [BinaryOp; 13] = [
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
    BinaryOp::ShiftRightLogical,
];
const BOOL_BINARY: [BinaryOp; 3] = [BinaryOp::LogicalAnd, BinaryOp::LogicalOr, BinaryOp::LogicalXor];
/// Exact unary float ops (IsFinite/IsNaN give Bool).
const FLOAT_UNARY: [UnaryOp; 12] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Ceil,
    UnaryOp::Floor,
    UnaryOp::Round,
    UnaryOp::Sign,
    UnaryOp::Identity,
    UnaryOp::IsFinite,
    UnaryOp::IsNaN,
    UnaryOp::Neg,
];
const INT_UNARY: [UnaryOp; 6] =
    [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Sign, UnaryOp::BitwiseNot, UnaryOp::BitCount, UnaryOp::Clz];
const COMPARE: [CompareOp; 6] = [
    CompareOp::Equal,
    CompareOp::NotEqual,
    CompareOp::GreaterOrEqual,
    CompareOp::GreaterThan,
    CompareOp::LessOrEqual,
    CompareOp::LessThan,
];
const CONSTS: [f64; 8] = [0.5, -2.0, 3.0, 0.0, -0.0, 1e-3, 7.25, 1.0];

fn program() -> impl Strategy<Value = Program> {
    let dtype = prop::sample::select(DTYPES[..12].to_vec());
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

/// Little-endian bytes of `v` converted to `d` (Rust `as` for ints: truncating, saturating).
fn value_bytes(d: DType, v: f64) -> Vec<u8> {
    match d {
        DType::Float32 => (v as f32).to_le_bytes().to_vec(),
        DType::Float64 => v.to_le_bytes().to_vec(),
        DType::Float16 => f16::from_f64(v).to_le_bytes().to_vec(),
        DType::BFloat16 => bf16::from_f64(v).to_le_bytes().to_vec(),
        DType::Int8 => (v as i8).to_le_bytes().to_vec(),
        DType::Int16 => (v as i16).to_le_bytes().to_vec(),
        DType::Int32 => (v as i32).to_le_bytes().to_vec(),
        DType::Int64 => (v as i64).to_le_bytes().to_vec(),
        DType::Uint8 => (v as u8).to_le_bytes().to_vec(),
        DType::Uint16 => (v as u16).to_le_bytes().to_vec(),
        DType::Uint32 => (v as u32).to_le_bytes().to_vec(),
        DType::Uint64 => (v as u64).to_le_bytes().to_vec(),
        _ => vec![(v != 0.0) as u8],
    }
}

fn scalar(f: &Function, d: DType, v: f64) -> tensorjit::Result<Value> {
    f.constant_bytes(Shape::scalar(d), &value_bytes(d, v))
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::Float16 | DType::BFloat16 | DType::Float32 | DType::Float64)
}

/// Builds the program's `main` with `builder`.
fn build(builder: &Builder, p: &Program) -> tensorjit::Result<()> {
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
        let d = sx.dtype;
        let partners: Vec<Value> = pool
            .iter()
            .copied()
            .filter(|&v| {
                let s = f.shape(v).map(|s| s.dtype == d && (s.dims == sx.dims || s.rank() == 0 || sx.rank() == 0));
                s.unwrap_or(false)
            })
            .collect();
        let y = partners[st.b as usize % partners.len()];
        let sub = st.sub as usize;
        let float = is_float(d);
        let boolean = d == DType::Bool;
        let v = match st.kind % 11 {
            0 | 1 => {
                let op = if boolean {
                    BOOL_BINARY[sub % 3]
                } else if float {
                    FLOAT_BINARY[sub % FLOAT_BINARY.len()]
                } else {
                    INT_BINARY[sub % INT_BINARY.len()]
                };
                f.binary(op, x, y)?
            }
            2 => {
                let op = if boolean {
                    UnaryOp::LogicalNot
                } else if float {
                    FLOAT_UNARY[sub % FLOAT_UNARY.len()]
                } else if d.is_signed_int() || !sub.is_multiple_of(3) {
                    INT_UNARY[sub % INT_UNARY.len()]
                } else {
                    UnaryOp::BitwiseNot
                };
                let op = if op == UnaryOp::Neg && d.is_unsigned() { UnaryOp::BitwiseNot } else { op };
                f.unary(op, x)?
            }
            3 => {
                let c = if boolean { x } else { f.compare(COMPARE[sub % COMPARE.len()], false, x, y)? };
                pool.push(c);
                if boolean {
                    // Where on a Bool condition over another dtype's values of the same dims.
                    let other: Vec<Value> = pool
                        .iter()
                        .copied()
                        .filter(|&v| f.shape(v).is_ok_and(|s| s.dims == sx.dims && s.dtype != DType::Bool))
                        .collect();
                    match other.len() {
                        0 => f.unary(UnaryOp::LogicalNot, x)?,
                        n => {
                            let t = other[sub % n];
                            let e = f.unary(UnaryOp::Identity, t)?;
                            f.where_(c, t, if st.b % 2 == 0 { e } else { scalar(&f, f.shape(t)?.dtype, 1.0)? })?
                        }
                    }
                } else {
                    f.where_(c, y, x)?
                }
            }
            4 if !boolean => {
                let k = CONSTS[sub % CONSTS.len()].abs() + 0.5;
                let lo = if d.is_unsigned() { 0.0 } else { -k };
                f.clamp(scalar(&f, d, lo)?, x, scalar(&f, d, k * 3.0)?)?
            }
            5 | 4 => {
                let to = DTYPES[sub % DTYPES.len()];
                let c = f.convert_dtype(x, to)?;
                if st.b % 3 == 0 { f.convert_dtype(c, d)? } else { c }
            }
            6 => {
                if sx.rank() == 0 {
                    f.broadcast_in_dim(x, &shape.with_dtype(d), &[])?
                } else {
                    let r = sx.rank();
                    let kind = match (boolean, sub % 2) {
                        (true, 0) => ReduceKind::LogicalOr,
                        (true, _) => ReduceKind::LogicalAnd,
                        (false, 0) => ReduceKind::Max,
                        (false, _) if float => ReduceKind::Sum,
                        (false, _) => ReduceKind::Min,
                    };
                    let red = f.reduce(kind, x, &[r - 1])?;
                    let axes: Vec<usize> = (0..r - 1).collect();
                    f.broadcast_in_dim(red, &sx, &axes)?
                }
            }
            7 => {
                if sx.rank() >= 2 && sub.is_multiple_of(2) {
                    let perm: Vec<usize> = (0..sx.rank()).rev().collect();
                    let t = f.transpose(x, &perm)?;
                    if sub.is_multiple_of(4) {
                        // Transposed back after an op: both remaps feed elementwise work.
                        let u = if boolean { f.unary(UnaryOp::LogicalNot, t)? } else { f.binary(BinaryOp::Max, t, t)? };
                        f.transpose(u, &perm)?
                    } else {
                        t
                    }
                } else {
                    let n: i64 = sx.dims.iter().product();
                    let flat = f.reshape(x, &[n])?;
                    let g = if boolean {
                        f.unary(UnaryOp::LogicalNot, flat)?
                    } else {
                        let c = scalar(&f, d, CONSTS[sub % CONSTS.len()])?;
                        f.mul(flat, c)?
                    };
                    f.reshape(g, &sx.dims)?
                }
            }
            8 if !boolean => {
                let c = scalar(&f, d, CONSTS[sub % CONSTS.len()])?;
                let op = if float { FLOAT_BINARY[(sub / 2) % 6] } else { INT_BINARY[(sub / 2) % INT_BINARY.len()] };
                if sub.is_multiple_of(2) { f.binary(op, x, c)? } else { f.binary(op, c, x)? }
            }
            9 if !boolean && sx.rank() > 0 => {
                let io = f.iota(&sx, sub % sx.rank())?;
                f.add(x, io)?
            }
            10 if sx.rank() >= 2 => {
                // A row broadcast along the leading axis, combined elementwise with x.
                let row = f.reduce(if boolean { ReduceKind::LogicalXor } else { ReduceKind::Max }, x, &[0])?;
                let axes: Vec<usize> = (1..sx.rank()).collect();
                let b = f.broadcast_in_dim(row, &sx, &axes)?;
                if boolean { f.binary(BinaryOp::LogicalAnd, x, b)? } else { f.sub(b, x)? }
            }
            _ => f.unary(if boolean { UnaryOp::LogicalNot } else { UnaryOp::Abs }, x)?,
        };
        pool.push(v);
    }
    let mut outs: Vec<Value> = vec![*pool.last().unwrap_or(&pool[0])];
    outs.extend(p.outputs.iter().map(|&i| pool[i as usize % pool.len()]));
    if let Some(op) = p.last {
        outs = outs
            .into_iter()
            .map(|v| if f.shape(v)?.dtype == DType::Float32 { f.unary(op, v) } else { Ok(v) })
            .collect::<tensorjit::Result<_>>()?;
    }
    f.return_(&outs)
}

/// Deterministic input data of dtype `d`: special values and a spread of ordinary ones.
fn data(d: DType, seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = vec![];
    for _ in 0..n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        if is_float(d) {
            let v = match s % 40 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3 => -0.0,
                4 => 1e30,
                5 => -1e-30,
                6 => 70000.0,
                k => (k as f64 - 22.0) / 4.0 + (s >> 40) as f64 / (1u64 << 26) as f64,
            };
            out.extend(value_bytes(d, v));
        } else if d == DType::Bool {
            out.push((s >> 20) as u8 & 1);
        } else {
            let w = d.size();
            let raw: u64 = match s % 8 {
                0 => 0,
                1 => u64::MAX,                           // −1 / MAX
                2 => 1u64 << (8 * w - 1),                // MIN / top bit
                3 => (1u64 << (8 * w - 1)) - 1,          // MAX / below the top bit
                4 | 5 => (s >> 32) % (8 * w as u64 + 3), // around the shift widths
                _ => s >> 7,
            };
            out.extend(&raw.to_le_bytes()[..w]);
        }
    }
    out
}

/// The elements of `b` as comparable keys: floats as f64 (NaN canonical), others as raw bits.
fn keys(b: &Buffer) -> Vec<(bool, u64)> {
    let bytes = b.to_bytes().unwrap();
    let d = b.dtype();
    let w = d.size();
    bytes
        .chunks(w.max(1))
        .map(|c| {
            let mut a = [0u8; 8];
            a[..w].copy_from_slice(c);
            let raw = u64::from_le_bytes(a);
            let v = match d {
                DType::Float32 => f32::from_bits(raw as u32) as f64,
                DType::Float64 => f64::from_bits(raw),
                DType::Float16 => f16::from_bits(raw as u16).to_f64(),
                DType::BFloat16 => bf16::from_bits(raw as u16).to_f64(),
                _ => return (false, raw),
            };
            if v.is_nan() { (true, 0) } else { (false, v.to_bits()) }
        })
        .collect()
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

fn backends() -> &'static (Arc<JitBackend>, Arc<dyn Backend>) {
    static B: std::sync::OnceLock<(Arc<JitBackend>, Arc<dyn Backend>)> = std::sync::OnceLock::new();
    B.get_or_init(|| {
        // TJ_DIFF_JIT: options for the jit backend (e.g. `dump=DIR` to inspect the clusters).
        // Float sums are compared bit for bit, so fused reductions accumulate in element order
        // (tests/jit_reduce.rs checks the default vectorised order within a tolerance).
        let opts = std::env::var("TJ_DIFF_JIT").unwrap_or_default();
        let opts =
            if opts.is_empty() { "reductions=ordered".to_string() } else { format!("reductions=ordered,{opts}") };
        let jit = JitBackend::new(&opts).expect("jit");
        let interp = tensorjit::new_with_config("interp").expect("interp");
        (jit, interp)
    })
}

/// Runs `p` on both backends, compares the outputs; returns the jit executable's loop count.
fn check(p: &Program) -> Result<usize, TestCaseError> {
    let (jit, interp) = backends();
    let bj = jit.builder("diff");
    build(&bj, p).map_err(|e| TestCaseError::fail(format!("jit build: {e}")))?;
    let ej = jit.compile_jit(bj.module()).map_err(|e| TestCaseError::fail(format!("jit compile: {e}")))?;
    let bi = interp.builder("diff");
    build(&bi, p).map_err(|e| TestCaseError::fail(format!("interp build: {e}")))?;
    let ei = bi.compile().map_err(|e| TestCaseError::fail(format!("interp compile: {e}")))?;
    let n: usize = p.dims.iter().map(|&d| d as usize).product();
    let shape = Shape::new(p.dtype, &p.dims);
    let inputs = [
        Buffer::from_bytes(shape.clone(), &data(p.dtype, p.seed, n)).unwrap(),
        Buffer::from_bytes(shape, &data(p.dtype, p.seed ^ 0x9e37, n)).unwrap(),
        Buffer::from_bytes(Shape::scalar(p.dtype), &data(p.dtype, p.seed ^ 7, 1)).unwrap(),
    ];
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let oj = ej.execute(&refs, &[]).map_err(|e| TestCaseError::fail(format!("jit execute: {e}")))?;
    let oi = ei.execute(&refs, &[]).map_err(|e| TestCaseError::fail(format!("interp execute: {e}")))?;
    prop_assert_eq!(oj.len(), oi.len());
    for (k, (a, b)) in oj.iter().zip(&oi).enumerate() {
        prop_assert_eq!(a.shape().dims.clone(), b.shape().dims.clone(), "output {} dims", k);
        prop_assert_eq!(a.dtype(), b.dtype(), "output {} dtype", k);
        let (ka, kb) = (keys(a), keys(b));
        for (i, (x, y)) in ka.iter().zip(&kb).enumerate() {
            let ok = match (p.last, a.dtype()) {
                (Some(_), DType::Float32) => {
                    let (x, y) = (f64::from_bits(x.1) as f32, f64::from_bits(y.1) as f32);
                    let (x, y) = if ka[i].0 { (f32::NAN, y) } else { (x, y) };
                    let y = if kb[i].0 { f32::NAN } else { y };
                    ulps32(x, y) <= 4 || (y.abs() < f32::MIN_POSITIVE && x.abs() < f32::MIN_POSITIVE)
                }
                _ => x == y,
            };
            prop_assert!(ok, "output {} ({}) element {}: jit {:?} vs interp {:?}", k, a.dtype(), i, x, y);
        }
    }
    Ok(ej.num_loop_steps())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn jit_matches_interp(p in program()) {
        check(&p)?;
    }
}

fn fixed(dtype: DType, dims: Vec<i64>, kinds: &[u8], seed: u64) -> Program {
    Program {
        dtype,
        dims,
        steps: (0..kinds.len())
            .map(|i| Step { kind: kinds[i], sub: i as u8 * 7 + 1, a: i as u16 + 3, b: 2 * i as u16 })
            .collect(),
        outputs: vec![4, 9],
        last: None,
        seed,
    }
}

/// Fixed graphs checked on every run, so the suite exercises the fused paths even if the random
/// cases happened not to: every dtype class, selects, converts, iotas, broadcasts along axes,
/// transposes and tails; each must run at least one compiled loop.
#[test]
fn fixed_graphs_match_interp_and_run_compiled_loops() {
    let kinds = [0, 1, 3, 4, 8, 6, 2, 5, 9, 10, 7, 0, 1, 2];
    for (i, d) in DTYPES[..12].iter().enumerate() {
        for dims in [vec![3, 13], vec![7, 5, 2], vec![67]] {
            let p = fixed(*d, dims.clone(), &kinds, 42 + i as u64);
            match check(&p) {
                Ok(loops) => assert!(loops >= 1, "{d} {dims:?}: no compiled loop step"),
                Err(e) => panic!("{d} {dims:?}: {e}"),
            }
        }
    }
}

/// A loop large enough to be split across threads, with strided (transposed, broadcast) inputs,
/// an iota and mixed dtypes: each chunk must read through the stride maps from its own start.
#[test]
fn large_strided_loops_split_across_threads_match_interp() {
    let (_, interp) = backends();
    let jit = JitBackend::new("parallelism=3").expect("jit");
    let (r, c) = (257i64, 300i64); // 77 100 elements > PARALLEL_MIN_ELEMENTS
    let build = |b: &Builder| -> tensorjit::Result<()> {
        let f = b.main();
        let x = f.parameter("x", Shape::new(DType::Float32, &[c, r]))?;
        let row = f.parameter("row", Shape::new(DType::Int32, &[c]))?;
        let t = f.transpose(x, &[1, 0])?; // [r, c]
        let rb = f.broadcast_in_dim(row, &Shape::new(DType::Int32, &[r, c]), &[1])?;
        let io = f.iota(&Shape::new(DType::Int32, &[r, c]), 0)?;
        let k = f.convert_dtype(f.sub(rb, io)?, DType::Float32)?;
        let y = f.mul(t, k)?;
        let neg = f.compare(CompareOp::LessThan, false, y, f.scalar(0f32)?)?;
        f.return_(&[y, f.convert_dtype(neg, DType::Uint8)?])
    };
    let bj = jit.builder("big");
    build(&bj).unwrap();
    let ej = jit.compile_jit(bj.module()).unwrap();
    assert!(ej.num_loop_steps() >= 1);
    let bi = interp.builder("big");
    build(&bi).unwrap();
    let ei = bi.compile().unwrap();
    let n = (r * c) as usize;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1013) as f32 * 0.5 - 200.0).collect();
    let rows: Vec<i32> = (0..c as i32).map(|i| i * 7 - 900).collect();
    let x = Buffer::from_slice(&xs, &[c as usize, r as usize]).unwrap();
    let row = Buffer::from_slice(&rows, &[c as usize]).unwrap();
    let oj = ej.execute(&[&x, &row], &[]).unwrap();
    let oi = ei.execute(&[&x, &row], &[]).unwrap();
    for (a, b) in oj.iter().zip(&oi) {
        assert_eq!(a.to_bytes().unwrap(), b.to_bytes().unwrap());
    }
    // Spot check by hand: y[2, 5] = x[5, 2] · (row[5] − 2) = (5·257 + 2 = 1287 → 274·0.5 − 200) · (−865 − 2).
    let y = oj[0].to_vec::<f32>().unwrap();
    assert_eq!(y[2 * c as usize + 5], (274.0f32 * 0.5 - 200.0) * -867.0);
}
