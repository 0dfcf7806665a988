//! Elementwise operators: arithmetic, comparisons, logic, activations, casts.
//!
//! ONNX broadcasting (NumPy rank extension) is brought onto the IR's equal-rank rule by
//! [`broadcastable`]; `Where` needs operands of equal dims, so its operands are broadcast in
//! full. Where ONNX and the IR differ (integer `Mod` sign, `Pow` with mixed operand types,
//! `Equal` on Bool), the mapping composes IR ops to follow the ONNX definition. Decompositions
//! into several float ops run in f32 for half types and round once at the end.

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::ValueId;
use crate::ir::op::{BinaryOp, CompareOp, Op, UnaryOp};
use crate::ir::shape::Shape;

use super::Handler;
use super::common::{
    bin, broadcast_dims, broadcast_named, broadcast_to, broadcast_to_named, broadcastable, cast, cmp, require_float,
    select, static_dims, un,
};
use crate::onnx::graph::{Ctx, Node};
use crate::onnx::tensor::{dtype_from_onnx, onnx_type_name};

/// Op types mapped here.
pub(super) const OPS: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "Cast",
    "CastLike",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "Div",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "Max",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "PRelu",
    "Pow",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Where",
    "Xor",
];

pub(super) fn lookup(op: &str) -> Option<Handler> {
    Some(match op {
        "Add" => |c, n| arith(c, n, BinaryOp::Add),
        "Sub" => |c, n| arith(c, n, BinaryOp::Sub),
        "Mul" => |c, n| arith(c, n, BinaryOp::Mul),
        "Div" => |c, n| arith(c, n, BinaryOp::Div),
        "Pow" => pow,
        "Mod" => modulo,
        "BitwiseAnd" => |c, n| bitwise(c, n, BinaryOp::BitwiseAnd),
        "BitwiseOr" => |c, n| bitwise(c, n, BinaryOp::BitwiseOr),
        "BitwiseXor" => |c, n| bitwise(c, n, BinaryOp::BitwiseXor),
        "BitShift" => bit_shift,
        "And" => |c, n| logical(c, n, BinaryOp::LogicalAnd),
        "Or" => |c, n| logical(c, n, BinaryOp::LogicalOr),
        "Xor" => |c, n| logical(c, n, BinaryOp::LogicalXor),
        "Equal" => |c, n| compare(c, n, CompareOp::Equal),
        "Less" => |c, n| compare(c, n, CompareOp::LessThan),
        "LessOrEqual" => |c, n| compare(c, n, CompareOp::LessOrEqual),
        "Greater" => |c, n| compare(c, n, CompareOp::GreaterThan),
        "GreaterOrEqual" => |c, n| compare(c, n, CompareOp::GreaterOrEqual),
        "Max" => |c, n| variadic(c, n, BinaryOp::Max),
        "Min" => |c, n| variadic(c, n, BinaryOp::Min),
        "Sum" => |c, n| variadic(c, n, BinaryOp::Add),
        "Mean" => mean,
        "Where" => where_,
        "Not" => not,
        "BitwiseNot" => bitwise_not,
        "Abs" => |c, n| unary(c, n, UnaryOp::Abs, Kind::Num),
        "Neg" => |c, n| unary(c, n, UnaryOp::Neg, Kind::Signed),
        "Sign" => |c, n| unary(c, n, UnaryOp::Sign, Kind::Num),
        "Sqrt" => |c, n| unary(c, n, UnaryOp::Sqrt, Kind::Float),
        "Exp" => |c, n| unary(c, n, UnaryOp::Exp, Kind::Float),
        "Log" => |c, n| unary(c, n, UnaryOp::Log, Kind::Float),
        "Erf" => |c, n| unary(c, n, UnaryOp::Erf, Kind::Float),
        "Tanh" => |c, n| unary(c, n, UnaryOp::Tanh, Kind::Float),
        "Sigmoid" => |c, n| unary(c, n, UnaryOp::Logistic, Kind::Float),
        "Floor" => |c, n| unary(c, n, UnaryOp::Floor, Kind::Float),
        "Ceil" => |c, n| unary(c, n, UnaryOp::Ceil, Kind::Float),
        "Round" => |c, n| unary(c, n, UnaryOp::Round, Kind::Float),
        "Sin" => |c, n| unary(c, n, UnaryOp::Sin, Kind::Float),
        "Cos" => |c, n| unary(c, n, UnaryOp::Cos, Kind::Float),
        "IsNaN" => is_nan,
        "IsInf" => is_inf,
        "Reciprocal" => reciprocal,
        "Relu" => relu,
        "LeakyRelu" => leaky_relu,
        "PRelu" => prelu,
        "Elu" => elu,
        "Selu" => selu,
        "Celu" => celu,
        "Gelu" => gelu,
        "HardSigmoid" => hard_sigmoid,
        "HardSwish" => hard_swish,
        "Softplus" => softplus,
        "Softsign" => softsign,
        "Mish" => mish,
        "ThresholdedRelu" => thresholded_relu,
        "Shrink" => shrink,
        "Clip" => clip,
        "Tan" => |c, n| float_fn(c, n, tan),
        "Atan" => |c, n| float_fn(c, n, atan),
        "Asin" => |c, n| float_fn(c, n, asin),
        "Acos" => |c, n| float_fn(c, n, acos),
        "Sinh" => |c, n| float_fn(c, n, sinh),
        "Cosh" => |c, n| float_fn(c, n, cosh),
        "Asinh" => |c, n| float_fn(c, n, asinh),
        "Acosh" => |c, n| float_fn(c, n, acosh),
        "Atanh" => |c, n| float_fn(c, n, atanh),
        "Cast" => cast_op,
        "CastLike" => cast_like,
        "Identity" => |_, n| Ok(vec![n.input(0)?]),
        _ => return None,
    })
}

// ------------------------------------------------------------------------------------------------
// Small emit helpers (operands already of equal rank, or scalars).

/// A scalar constant of `like`'s dtype.
fn lit(ctx: &mut Ctx<'_>, like: ValueId, v: f64) -> Result<ValueId> {
    ctx.scalar(ctx.dtype(like), v)
}

/// Brings `vs` to equal dims (scalars stay scalars): ONNX multidirectional broadcasting made
/// explicit, for the ops whose IR form does not broadcast size-1 axes (`Where`).
fn broadcast_all(ctx: &mut Ctx<'_>, n: &Node<'_>, vs: &[ValueId]) -> Result<Vec<ValueId>> {
    let vs = broadcastable(ctx, n, vs)?;
    let shaped: Vec<ValueId> = vs.iter().copied().filter(|&v| ctx.rank(v) > 0).collect();
    let Some(&first) = shaped.first() else { return Ok(vs) };
    if shaped.iter().all(|&v| ctx.shape(v).dims == ctx.shape(first).dims) {
        return Ok(vs);
    }
    if shaped.iter().any(|&v| ctx.shape(v).is_dynamic()) {
        let shapes: Vec<Shape> = shaped.iter().map(|&v| ctx.shape(v).clone()).collect();
        let out = broadcast_named(n, &shapes)?;
        return vs
            .iter()
            .map(|&v| if ctx.rank(v) == 0 { Ok(v) } else { broadcast_to_named(ctx, n, v, &out) })
            .collect();
    }
    let dims = shaped.iter().map(|&v| static_dims(ctx, n, v)).collect::<Result<Vec<_>>>()?;
    let out = broadcast_dims(n, &dims)?;
    vs.iter().map(|&v| if ctx.rank(v) == 0 { Ok(v) } else { broadcast_to(ctx, n, v, &out) }).collect()
}

/// The dtype classes the unary ops accept.
#[derive(Clone, Copy)]
enum Kind {
    /// Integers (signed or not) and floats.
    Num,
    /// Signed integers and floats.
    Signed,
    /// Floats.
    Float,
}

/// Checks `v`'s dtype against `kind` (an unsupported-type error naming the node otherwise).
fn require(ctx: &Ctx<'_>, n: &Node<'_>, v: ValueId, kind: Kind) -> Result<()> {
    let dt = ctx.dtype(v);
    let int = dt.is_int() && !dt.is_packed();
    let ok = match kind {
        Kind::Num => int || dt.is_float(),
        Kind::Signed => dt.is_signed_int() && !dt.is_packed() || dt.is_float(),
        Kind::Float => dt.is_float(),
    };
    if ok {
        return Ok(());
    }
    let what = match kind {
        Kind::Num => "integer and float types only",
        Kind::Signed => "signed integer and float types only",
        Kind::Float => "float types only",
    };
    Err(n.unsupported(format!("element type {dt} ({what})")))
}

/// Runs `f` on `x` (a float tensor) in f32 when `x` is a half type, rounding once at the end.
fn in_float(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    x: ValueId,
    f: impl FnOnce(&mut Ctx<'_>, ValueId) -> Result<ValueId>,
) -> Result<ValueId> {
    require_float(ctx, n, x)?;
    let dt = ctx.dtype(x);
    if dt.is_half() {
        let wide = cast(ctx, x, DType::Float32)?;
        let y = f(ctx, wide)?;
        cast(ctx, y, dt)
    } else {
        f(ctx, x)
    }
}

/// A float activation `x → f(x)` of input 0 computed by `f` (see [`in_float`]).
fn float_fn(ctx: &mut Ctx<'_>, n: &Node<'_>, f: fn(&mut Ctx<'_>, ValueId) -> Result<ValueId>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    Ok(vec![in_float(ctx, n, x, f)?])
}

// ------------------------------------------------------------------------------------------------
// Binary arithmetic, logic and comparisons.

/// The two operands of a binary node, which must have one dtype, brought to a common rank.
fn operands(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<(ValueId, ValueId)> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    if ctx.dtype(a) != ctx.dtype(b) {
        return Err(n.invalid(format!("operand types differ: {} and {}", ctx.dtype(a), ctx.dtype(b))));
    }
    let v = broadcastable(ctx, n, &[a, b])?;
    Ok((v[0], v[1]))
}

/// Add, Sub, Mul, Div: the IR's integer division truncates toward zero, as ONNX's does.
fn arith(ctx: &mut Ctx<'_>, n: &Node<'_>, op: BinaryOp) -> Result<Vec<ValueId>> {
    let (a, b) = operands(ctx, n)?;
    require(ctx, n, a, Kind::Num)?;
    Ok(vec![bin(ctx, op, a, b)?])
}

/// BitwiseAnd / Or / Xor on integers.
fn bitwise(ctx: &mut Ctx<'_>, n: &Node<'_>, op: BinaryOp) -> Result<Vec<ValueId>> {
    let (a, b) = operands(ctx, n)?;
    let dt = ctx.dtype(a);
    if !dt.is_int() || dt.is_packed() {
        return Err(n.unsupported(format!("element type {dt} (integer types only)")));
    }
    Ok(vec![bin(ctx, op, a, b)?])
}

/// `BitwiseNot` on integers.
fn bitwise_not(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = ctx.dtype(x);
    if !dt.is_int() || dt.is_packed() {
        return Err(n.unsupported(format!("element type {dt} (integer types only)")));
    }
    Ok(vec![un(ctx, UnaryOp::BitwiseNot, x)?])
}

/// `BitShift` (`direction` LEFT / RIGHT): amounts outside `[0, bits)` give 0 (or −1 for a
/// negative signed value shifted right).
fn bit_shift(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let dir = n.attr_s("direction")?.ok_or_else(|| n.invalid("attribute \"direction\" is required"))?;
    let (a, b) = operands(ctx, n)?;
    let dt = ctx.dtype(a);
    if !dt.is_int() || dt.is_packed() {
        return Err(n.unsupported(format!("element type {dt} (integer types only)")));
    }
    let op = match dir.as_str() {
        "LEFT" => BinaryOp::ShiftLeft,
        "RIGHT" if dt.is_unsigned() => BinaryOp::ShiftRightLogical,
        "RIGHT" => BinaryOp::ShiftRightArithmetic,
        other => return Err(n.invalid(format!("direction {other:?} (expected \"LEFT\" or \"RIGHT\")"))),
    };
    Ok(vec![bin(ctx, op, a, b)?])
}

/// And / Or / Xor on Bool.
fn logical(ctx: &mut Ctx<'_>, n: &Node<'_>, op: BinaryOp) -> Result<Vec<ValueId>> {
    let (a, b) = operands(ctx, n)?;
    if ctx.dtype(a) != DType::Bool {
        return Err(n.invalid(format!("element type {} (Bool expected)", ctx.dtype(a))));
    }
    Ok(vec![bin(ctx, op, a, b)?])
}

/// `Not` on Bool.
fn not(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    if ctx.dtype(x) != DType::Bool {
        return Err(n.invalid(format!("element type {} (Bool expected)", ctx.dtype(x))));
    }
    Ok(vec![un(ctx, UnaryOp::LogicalNot, x)?])
}

/// Comparisons (IEEE: NaN compares false). Bool operands: `Equal` is `!(a xor b)`; the ordered
/// comparisons compare them as 0/1.
fn compare(ctx: &mut Ctx<'_>, n: &Node<'_>, dir: CompareOp) -> Result<Vec<ValueId>> {
    let (mut a, mut b) = operands(ctx, n)?;
    let dt = ctx.dtype(a);
    if dt == DType::Bool {
        if dir == CompareOp::Equal {
            let x = bin(ctx, BinaryOp::LogicalXor, a, b)?;
            return Ok(vec![un(ctx, UnaryOp::LogicalNot, x)?]);
        }
        a = cast(ctx, a, DType::Uint8)?;
        b = cast(ctx, b, DType::Uint8)?;
    } else {
        require(ctx, n, a, Kind::Num)?;
    }
    Ok(vec![cmp(ctx, dir, a, b)?])
}

/// Max / Min / Sum of one or more operands (broadcasting).
fn variadic(ctx: &mut Ctx<'_>, n: &Node<'_>, op: BinaryOp) -> Result<Vec<ValueId>> {
    let vs = n.present_inputs();
    let Some(&first) = vs.first() else { return Err(n.invalid("at least one input is required")) };
    let dt = ctx.dtype(first);
    if let Some(&v) = vs.iter().find(|&&v| ctx.dtype(v) != dt) {
        return Err(n.invalid(format!("operand types differ: {dt} and {}", ctx.dtype(v))));
    }
    require(ctx, n, first, Kind::Num)?;
    let vs = broadcastable(ctx, n, &vs)?;
    let mut acc = vs[0];
    for &v in &vs[1..] {
        acc = bin(ctx, op, acc, v)?;
    }
    Ok(vec![acc])
}

/// `Mean`: the sum of the operands divided by their count.
fn mean(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let sum = variadic(ctx, n, BinaryOp::Add)?[0];
    let count = n.present_inputs().len();
    if count == 1 {
        return Ok(vec![sum]);
    }
    let k = lit(ctx, sum, count as f64)?;
    Ok(vec![bin(ctx, BinaryOp::Div, sum, k)?])
}

/// `Pow(base, exponent)`: the result has the base's type; operands of different types are
/// computed in f64 or i64 and converted back (float → integer truncates, as NumPy's `astype`).
fn pow(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    require(ctx, n, a, Kind::Num)?;
    require(ctx, n, b, Kind::Num)?;
    let (da, db) = (ctx.dtype(a), ctx.dtype(b));
    // Mixed types compute in f64 (any float involved) or i64, as NumPy promotes them, and the
    // result is converted back to the base's type.
    let work = if da == db {
        da
    } else if da.is_float() || db.is_float() {
        DType::Float64
    } else {
        DType::Int64
    };
    let a2 = cast(ctx, a, work)?;
    let b2 = cast(ctx, b, work)?;
    let v = broadcastable(ctx, n, &[a2, b2])?;
    let r = bin(ctx, BinaryOp::Pow, v[0], v[1])?;
    Ok(vec![cast(ctx, r, da)?])
}

/// `Mod`: `fmod = 1` is C `fmod` (the sign follows the dividend: the IR's `Rem`); `fmod = 0`
/// follows the divisor's sign (Python / NumPy `mod`), zero results taking the divisor's sign.
fn modulo(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let fmod = n.attr_i_or("fmod", 0)?;
    if fmod != 0 && fmod != 1 {
        return Err(n.invalid(format!("fmod = {fmod} (expected 0 or 1)")));
    }
    let (a, b) = operands(ctx, n)?;
    require(ctx, n, a, Kind::Num)?;
    let dt = ctx.dtype(a);
    if fmod == 1 || dt.is_unsigned() {
        return Ok(vec![bin(ctx, BinaryOp::Rem, a, b)?]);
    }
    let v = broadcast_all(ctx, n, &[a, b])?;
    let (a, b) = (v[0], v[1]);
    let r = bin(ctx, BinaryOp::Rem, a, b)?;
    let zero = lit(ctx, r, 0.0)?;
    let r_neg = cmp(ctx, CompareOp::LessThan, r, zero)?;
    let b_neg = cmp(ctx, CompareOp::LessThan, b, zero)?;
    let r_nonzero = cmp(ctx, CompareOp::NotEqual, r, zero)?;
    let signs_differ = bin(ctx, BinaryOp::LogicalXor, r_neg, b_neg)?;
    let adjust = bin(ctx, BinaryOp::LogicalAnd, r_nonzero, signs_differ)?;
    let shifted = bin(ctx, BinaryOp::Add, r, b)?;
    let out = select(ctx, adjust, shifted, r)?;
    if !dt.is_float() {
        return Ok(vec![out]);
    }
    // A zero remainder takes the divisor's sign (0 mod −2 = −0).
    let is_zero = cmp(ctx, CompareOp::Equal, out, zero)?;
    let neg_zero = lit(ctx, out, -0.0)?;
    let signed_zero = select(ctx, b_neg, neg_zero, zero)?;
    Ok(vec![select(ctx, is_zero, signed_zero, out)?])
}

/// `Where(cond, x, y)` with the three operands broadcast together.
fn where_(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (c, x, y) = (n.input(0)?, n.input(1)?, n.input(2)?);
    if ctx.dtype(c) != DType::Bool {
        return Err(n.invalid(format!("condition type {} (Bool expected)", ctx.dtype(c))));
    }
    if ctx.dtype(x) != ctx.dtype(y) {
        return Err(n.invalid(format!("operand types differ: {} and {}", ctx.dtype(x), ctx.dtype(y))));
    }
    let dt = ctx.dtype(x);
    if !(dt.is_bool() || dt.is_numeric()) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    let v = broadcast_all(ctx, n, &[c, x, y])?;
    let (c, x, y) = (v[0], v[1], v[2]);
    // Scalars may stay scalars: the IR takes the output dims from whichever operand has them.
    Ok(vec![select(ctx, c, x, y)?])
}

// ------------------------------------------------------------------------------------------------
// Unary ops.

/// A unary IR op whose semantics match the ONNX op, on the dtypes of `kind`.
fn unary(ctx: &mut Ctx<'_>, n: &Node<'_>, op: UnaryOp, kind: Kind) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require(ctx, n, x, kind)?;
    Ok(vec![un(ctx, op, x)?])
}

/// `IsNaN` (floats; integers are never NaN).
fn is_nan(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require(ctx, n, x, Kind::Float)?;
    Ok(vec![un(ctx, UnaryOp::IsNaN, x)?])
}

/// `IsInf` with `detect_negative` / `detect_positive`.
fn is_inf(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require(ctx, n, x, Kind::Float)?;
    let neg = n.attr_i_or("detect_negative", 1)? != 0;
    let pos = n.attr_i_or("detect_positive", 1)? != 0;
    let out = match (neg, pos) {
        (true, true) => {
            let a = un(ctx, UnaryOp::Abs, x)?;
            let inf = lit(ctx, x, f64::INFINITY)?;
            cmp(ctx, CompareOp::Equal, a, inf)?
        }
        (false, true) => {
            let inf = lit(ctx, x, f64::INFINITY)?;
            cmp(ctx, CompareOp::Equal, x, inf)?
        }
        (true, false) => {
            let inf = lit(ctx, x, f64::NEG_INFINITY)?;
            cmp(ctx, CompareOp::Equal, x, inf)?
        }
        (false, false) => {
            // Nothing is detected: x ≠ x is false except for NaN, which IsInf reports false too.
            let nan = un(ctx, UnaryOp::IsNaN, x)?;
            let f = ctx.scalar(DType::Bool, 0.0)?;
            bin(ctx, BinaryOp::LogicalAnd, nan, f)?
        }
    };
    Ok(vec![out])
}

/// `1 / x`.
fn reciprocal(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require(ctx, n, x, Kind::Float)?;
    let one = lit(ctx, x, 1.0)?;
    Ok(vec![bin(ctx, BinaryOp::Div, one, x)?])
}

/// `max(x, 0)` (NaN stays NaN).
fn relu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require(ctx, n, x, Kind::Signed)?;
    let zero = lit(ctx, x, 0.0)?;
    Ok(vec![bin(ctx, BinaryOp::Max, x, zero)?])
}

/// `x < 0 ? alpha·x : x`.
fn leaky_relu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let alpha = n.attr_f_or("alpha", 0.01)? as f64;
    let x = n.input(0)?;
    Ok(vec![in_float(ctx, n, x, |ctx, x| {
        let zero = lit(ctx, x, 0.0)?;
        let a = lit(ctx, x, alpha)?;
        let neg = cmp(ctx, CompareOp::LessThan, x, zero)?;
        let scaled = bin(ctx, BinaryOp::Mul, x, a)?;
        select(ctx, neg, scaled, x)
    })?])
}

/// `PRelu(x, slope)`: `x < 0 ? slope·x : x`, the slope broadcast to x.
fn prelu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (x, slope) = (n.input(0)?, n.input(1)?);
    require(ctx, n, x, Kind::Num)?;
    if ctx.dtype(x) != ctx.dtype(slope) {
        return Err(n.invalid(format!("operand types differ: {} and {}", ctx.dtype(x), ctx.dtype(slope))));
    }
    if ctx.rank(slope) > ctx.rank(x) {
        return Err(n.invalid("slope has a higher rank than x"));
    }
    let v = broadcastable(ctx, n, &[x, slope])?;
    let (x, slope) = (v[0], v[1]);
    let zero = lit(ctx, x, 0.0)?;
    let neg = cmp(ctx, CompareOp::LessThan, x, zero)?;
    let scaled = bin(ctx, BinaryOp::Mul, x, slope)?;
    if ctx.shape(scaled).dims != ctx.shape(x).dims {
        return Err(n.invalid(format!("slope {} does not broadcast to x {}", ctx.shape(slope), ctx.shape(x))));
    }
    Ok(vec![select(ctx, neg, scaled, x)?])
}

/// `alpha·(eˣ − 1)` for `x ≤ 0` (via expm1), else `x`.
fn elu_core(ctx: &mut Ctx<'_>, x: ValueId, alpha: f64) -> Result<ValueId> {
    let zero = lit(ctx, x, 0.0)?;
    let pos = cmp(ctx, CompareOp::GreaterThan, x, zero)?;
    let em1 = un(ctx, UnaryOp::Expm1, x)?;
    let a = lit(ctx, x, alpha)?;
    let neg = bin(ctx, BinaryOp::Mul, em1, a)?;
    select(ctx, pos, x, neg)
}

/// `Elu`.
fn elu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let alpha = n.attr_f_or("alpha", 1.0)? as f64;
    let x = n.input(0)?;
    Ok(vec![in_float(ctx, n, x, |ctx, x| elu_core(ctx, x, alpha))?])
}

/// `Selu`: `gamma · elu_alpha(x)`.
fn selu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let alpha = n.attr_f_or("alpha", 1.673_263_2)? as f64;
    let gamma = n.attr_f_or("gamma", 1.050_701)? as f64;
    let x = n.input(0)?;
    Ok(vec![in_float(ctx, n, x, |ctx, x| {
        let e = elu_core(ctx, x, alpha)?;
        let g = lit(ctx, x, gamma)?;
        bin(ctx, BinaryOp::Mul, e, g)
    })?])
}

/// `Celu`: `max(0, x) + min(0, alpha·(e^(x/alpha) − 1))`.
fn celu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let alpha = n.attr_f_or("alpha", 1.0)? as f64;
    if alpha == 0.0 {
        return Err(n.invalid("alpha must not be 0"));
    }
    let x = n.input(0)?;
    Ok(vec![in_float(ctx, n, x, |ctx, x| {
        let zero = lit(ctx, x, 0.0)?;
        let a = lit(ctx, x, alpha)?;
        let pos = bin(ctx, BinaryOp::Max, x, zero)?;
        let scaled = bin(ctx, BinaryOp::Div, x, a)?;
        let em1 = un(ctx, UnaryOp::Expm1, scaled)?;
        let neg = bin(ctx, BinaryOp::Mul, em1, a)?;
        let neg = bin(ctx, BinaryOp::Min, neg, zero)?;
        bin(ctx, BinaryOp::Add, pos, neg)
    })?])
}

/// `Gelu` (`approximate` = "none": erf form, "tanh": tanh approximation).
fn gelu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let approx = n.attr_s("approximate")?.unwrap_or_else(|| "none".to_string());
    let exact = match approx.as_str() {
        "none" => true,
        "tanh" => false,
        other => return Err(n.invalid(format!("approximate = {other:?} (expected \"none\" or \"tanh\")"))),
    };
    let x = n.input(0)?;
    require(ctx, n, x, Kind::Float)?;
    Ok(vec![ctx.emit1(Op::FusedGelu { exact }, &[x])?])
}

/// `max(0, min(1, alpha·x + beta))`.
fn hard_sigmoid_core(ctx: &mut Ctx<'_>, x: ValueId, alpha: f64, beta: f64) -> Result<ValueId> {
    let a = lit(ctx, x, alpha)?;
    let b = lit(ctx, x, beta)?;
    let zero = lit(ctx, x, 0.0)?;
    let one = lit(ctx, x, 1.0)?;
    let y = bin(ctx, BinaryOp::Mul, x, a)?;
    let y = bin(ctx, BinaryOp::Add, y, b)?;
    let y = bin(ctx, BinaryOp::Min, y, one)?;
    bin(ctx, BinaryOp::Max, y, zero)
}

/// `HardSigmoid`.
fn hard_sigmoid(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let alpha = n.attr_f_or("alpha", 0.2)? as f64;
    let beta = n.attr_f_or("beta", 0.5)? as f64;
    let x = n.input(0)?;
    Ok(vec![in_float(ctx, n, x, |ctx, x| hard_sigmoid_core(ctx, x, alpha, beta))?])
}

/// `HardSwish`: `x · HardSigmoid_{1/6, 1/2}(x)`.
fn hard_swish(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    Ok(vec![in_float(ctx, n, x, |ctx, x| {
        let h = hard_sigmoid_core(ctx, x, 1.0 / 6.0, 0.5)?;
        bin(ctx, BinaryOp::Mul, x, h)
    })?])
}

/// `ln(1 + eˣ)`, computed as `max(x, 0) + log1p(e^−|x|)` (no overflow for large x).
fn softplus_core(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let zero = lit(ctx, x, 0.0)?;
    let pos = bin(ctx, BinaryOp::Max, x, zero)?;
    let a = un(ctx, UnaryOp::Abs, x)?;
    let na = un(ctx, UnaryOp::Neg, a)?;
    let e = un(ctx, UnaryOp::Exp, na)?;
    let l = un(ctx, UnaryOp::Log1p, e)?;
    bin(ctx, BinaryOp::Add, pos, l)
}

/// `Softplus`.
fn softplus(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    float_fn(ctx, n, softplus_core)
}

/// `Softsign`: `x / (1 + |x|)`.
fn softsign(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    float_fn(ctx, n, |ctx, x| {
        let one = lit(ctx, x, 1.0)?;
        let a = un(ctx, UnaryOp::Abs, x)?;
        let d = bin(ctx, BinaryOp::Add, a, one)?;
        bin(ctx, BinaryOp::Div, x, d)
    })
}

/// `Mish`: `x · tanh(softplus(x))`.
fn mish(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    float_fn(ctx, n, |ctx, x| {
        let s = softplus_core(ctx, x)?;
        let t = un(ctx, UnaryOp::Tanh, s)?;
        bin(ctx, BinaryOp::Mul, x, t)
    })
}

/// `ThresholdedRelu`: `x > alpha ? x : 0`.
fn thresholded_relu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let alpha = n.attr_f_or("alpha", 1.0)? as f64;
    let x = n.input(0)?;
    Ok(vec![in_float(ctx, n, x, |ctx, x| {
        let a = lit(ctx, x, alpha)?;
        let zero = lit(ctx, x, 0.0)?;
        let keep = cmp(ctx, CompareOp::GreaterThan, x, a)?;
        select(ctx, keep, x, zero)
    })?])
}

/// `Shrink`: `x < −lambd ? x + bias : x > lambd ? x − bias : 0`. Integer inputs are computed
/// in f64 and truncated back, as NumPy does.
fn shrink(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let bias = n.attr_f_or("bias", 0.0)? as f64;
    let lambd = n.attr_f_or("lambd", 0.5)? as f64;
    let x0 = n.input(0)?;
    require(ctx, n, x0, Kind::Num)?;
    let dt = ctx.dtype(x0);
    let work = if dt.is_int() {
        DType::Float64
    } else if dt.is_half() {
        DType::Float32
    } else {
        dt
    };
    let x = cast(ctx, x0, work)?;
    let lo = lit(ctx, x, -lambd)?;
    let hi = lit(ctx, x, lambd)?;
    let b = lit(ctx, x, bias)?;
    let zero = lit(ctx, x, 0.0)?;
    let below = cmp(ctx, CompareOp::LessThan, x, lo)?;
    let above = cmp(ctx, CompareOp::GreaterThan, x, hi)?;
    let plus = bin(ctx, BinaryOp::Add, x, b)?;
    let minus = bin(ctx, BinaryOp::Sub, x, b)?;
    let inner = select(ctx, above, minus, zero)?;
    let y = select(ctx, below, plus, inner)?;
    Ok(vec![cast(ctx, y, dt)?])
}

/// `Clip(x, min, max)`: bounds as optional inputs (opset ≥ 11) or float attributes (before);
/// `min(max(x, lo), hi)` with NaN propagated, so `lo > hi` gives `hi`.
fn clip(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require(ctx, n, x, Kind::Num)?;
    let dt = ctx.dtype(x);
    let (lo, hi) = if n.opset < 11 {
        let lo = n.attr_f("min")?.map(|v| ctx.scalar(dt, v as f64)).transpose()?;
        let hi = n.attr_f("max")?.map(|v| ctx.scalar(dt, v as f64)).transpose()?;
        (lo, hi)
    } else {
        (n.opt_input(1), n.opt_input(2))
    };
    let mut y = x;
    for (bound, op, what) in [(lo, BinaryOp::Max, "min"), (hi, BinaryOp::Min, "max")] {
        let Some(b) = bound else { continue };
        if ctx.dtype(b) != dt {
            return Err(n.invalid(format!("{what} has type {} (x has {dt})", ctx.dtype(b))));
        }
        if ctx.shape(b).dims.iter().any(|&d| d != 1) {
            return Err(n.invalid(format!("{what} must be a scalar, got shape {}", ctx.shape(b))));
        }
        let b = if ctx.rank(b) > 0 { ctx.emit1(Op::Reshape { dims: vec![] }, &[b])? } else { b };
        y = bin(ctx, op, y, b)?;
    }
    Ok(vec![y])
}

// ------------------------------------------------------------------------------------------------
// Trigonometric and hyperbolic functions composed from the IR's Sin, Cos, Atan2, Exp, Log...

/// `sin x / cos x`.
fn tan(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let s = un(ctx, UnaryOp::Sin, x)?;
    let c = un(ctx, UnaryOp::Cos, x)?;
    bin(ctx, BinaryOp::Div, s, c)
}

/// `atan2(x, 1)`.
fn atan(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let one = lit(ctx, x, 1.0)?;
    bin(ctx, BinaryOp::Atan2, x, one)
}

/// `√((1 − x)(1 + x))` = `√(1 − x²)` without cancellation near ±1.
fn sqrt_one_minus_sq(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let one = lit(ctx, x, 1.0)?;
    let a = bin(ctx, BinaryOp::Sub, one, x)?;
    let b = bin(ctx, BinaryOp::Add, one, x)?;
    let p = bin(ctx, BinaryOp::Mul, a, b)?;
    un(ctx, UnaryOp::Sqrt, p)
}

/// `atan2(x, √(1 − x²))` (NaN outside [−1, 1]).
fn asin(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let r = sqrt_one_minus_sq(ctx, x)?;
    bin(ctx, BinaryOp::Atan2, x, r)
}

/// `atan2(√(1 − x²), x)` (NaN outside [−1, 1]).
fn acos(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let r = sqrt_one_minus_sq(ctx, x)?;
    bin(ctx, BinaryOp::Atan2, r, x)
}

/// `(expm1(x) − expm1(−x)) / 2` (accurate near 0).
fn sinh(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let nx = un(ctx, UnaryOp::Neg, x)?;
    let a = un(ctx, UnaryOp::Expm1, x)?;
    let b = un(ctx, UnaryOp::Expm1, nx)?;
    let d = bin(ctx, BinaryOp::Sub, a, b)?;
    let half = lit(ctx, x, 0.5)?;
    bin(ctx, BinaryOp::Mul, d, half)
}

/// `(eˣ + e⁻ˣ) / 2`.
fn cosh(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let nx = un(ctx, UnaryOp::Neg, x)?;
    let a = un(ctx, UnaryOp::Exp, x)?;
    let b = un(ctx, UnaryOp::Exp, nx)?;
    let s = bin(ctx, BinaryOp::Add, a, b)?;
    let half = lit(ctx, x, 0.5)?;
    bin(ctx, BinaryOp::Mul, s, half)
}

/// Beyond this magnitude `x² ± 1 = x²` in every float type the formulas run in, and the
/// inverse hyperbolic functions use `ln 2 + ln |x|` (which also avoids overflowing `x²`).
const LARGE: f64 = 1.0e8;

/// `sign(x) · log1p(|x| + x² / (1 + √(x² + 1)))`; `sign(x)·(ln 2 + ln |x|)` for huge |x|.
fn asinh(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let one = lit(ctx, x, 1.0)?;
    let a = un(ctx, UnaryOp::Abs, x)?;
    let big = lit(ctx, x, LARGE)?;
    let is_big = cmp(ctx, CompareOp::GreaterThan, a, big)?;
    let small = bin(ctx, BinaryOp::Min, a, big)?;
    let sq = bin(ctx, BinaryOp::Mul, small, small)?;
    let sq1 = bin(ctx, BinaryOp::Add, sq, one)?;
    let r = un(ctx, UnaryOp::Sqrt, sq1)?;
    let d = bin(ctx, BinaryOp::Add, r, one)?;
    let q = bin(ctx, BinaryOp::Div, sq, d)?;
    let s = bin(ctx, BinaryOp::Add, small, q)?;
    let near = un(ctx, UnaryOp::Log1p, s)?;
    let far = log_twice(ctx, a)?;
    let mag = select(ctx, is_big, far, near)?;
    // Restore the sign (asinh is odd); x = −0 gives −0, NaN stays NaN.
    let zero = lit(ctx, x, 0.0)?;
    let neg = cmp(ctx, CompareOp::LessThan, x, zero)?;
    let nmag = un(ctx, UnaryOp::Neg, mag)?;
    select(ctx, neg, nmag, mag)
}

/// `ln 2 + ln a` = `ln(2a)` without overflow.
fn log_twice(ctx: &mut Ctx<'_>, a: ValueId) -> Result<ValueId> {
    let l = un(ctx, UnaryOp::Log, a)?;
    let ln2 = lit(ctx, a, std::f64::consts::LN_2)?;
    bin(ctx, BinaryOp::Add, l, ln2)
}

/// `log1p((x − 1) + √((x − 1)(x + 1)))` for `x ≥ 1` (NaN below); `ln 2 + ln x` for huge x.
fn acosh(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let one = lit(ctx, x, 1.0)?;
    let big = lit(ctx, x, LARGE)?;
    let is_big = cmp(ctx, CompareOp::GreaterThan, x, big)?;
    let small = bin(ctx, BinaryOp::Min, x, big)?;
    let xm1 = bin(ctx, BinaryOp::Sub, small, one)?;
    let xp1 = bin(ctx, BinaryOp::Add, small, one)?;
    let p = bin(ctx, BinaryOp::Mul, xm1, xp1)?;
    let r = un(ctx, UnaryOp::Sqrt, p)?;
    let s = bin(ctx, BinaryOp::Add, xm1, r)?;
    let near = un(ctx, UnaryOp::Log1p, s)?;
    let far = log_twice(ctx, x)?;
    select(ctx, is_big, far, near)
}

/// `log1p(2x / (1 − x)) / 2`.
fn atanh(ctx: &mut Ctx<'_>, x: ValueId) -> Result<ValueId> {
    let one = lit(ctx, x, 1.0)?;
    let d = bin(ctx, BinaryOp::Sub, one, x)?;
    let x2 = bin(ctx, BinaryOp::Add, x, x)?;
    let q = bin(ctx, BinaryOp::Div, x2, d)?;
    let l = un(ctx, UnaryOp::Log1p, q)?;
    let half = lit(ctx, x, 0.5)?;
    bin(ctx, BinaryOp::Mul, l, half)
}

// ------------------------------------------------------------------------------------------------
// Casts.

/// The IR dtype of an ONNX element type code, or an unsupported-type error.
fn target_dtype(n: &Node<'_>, code: i64) -> Result<DType> {
    let code32 = i32::try_from(code).map_err(|_| n.invalid(format!("element type code {code}")))?;
    dtype_from_onnx(code32)
        .ok_or_else(|| n.unsupported(format!("cast to {} (no such element type in tensorjit)", onnx_type_name(code32))))
}

/// Converts `x` to `dt` (float → int truncates toward zero, any → Bool is `x ≠ 0`).
fn convert(ctx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId, dt: DType) -> Result<Vec<ValueId>> {
    // `saturate` and `round_mode` only affect float8 targets, which are rejected above.
    n.ignore_attrs(&["saturate", "round_mode"]);
    let src = ctx.dtype(x);
    if !(src.is_bool() || src.is_numeric()) {
        return Err(n.unsupported(format!("cast from {src}")));
    }
    if src.is_complex() != dt.is_complex() {
        return Err(n.unsupported(format!("cast from {src} to {dt}")));
    }
    Ok(vec![cast(ctx, x, dt)?])
}

/// `Cast(x)` to the type of attribute `to`.
fn cast_op(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let to = n.attr_i("to")?.ok_or_else(|| n.invalid("attribute \"to\" is required"))?;
    let dt = target_dtype(n, to)?;
    let x = n.input(0)?;
    convert(ctx, n, x, dt)
}

/// `CastLike(x, like)`: `x` converted to `like`'s type.
fn cast_like(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (x, like) = (n.input(0)?, n.input(1)?);
    let dt = ctx.dtype(like);
    convert(ctx, n, x, dt)
}
