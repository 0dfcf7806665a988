//! Reference kernels of the elementwise ops: unary (§4.3), binary and comparisons (§4.1, §4.2),
//! Clamp, Where, ConvertDType and Bitcast (§4.4). The work is split over the `ew_*` files.

#[path = "ew_binary.rs"]
mod ew_binary;
#[path = "ew_convert.rs"]
mod ew_convert;
#[path = "ew_unary.rs"]
mod ew_unary;

use super::common::check_arity;
use crate::error::{Error, Result};
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let name = op.op_type().to_string();
    let out = match op {
        Op::Unary(u) => {
            check_arity(&name, inputs, 1, out_shapes, 1)?;
            ew_unary::unary(*u, &inputs[0], &out_shapes[0])?
        }
        Op::Binary(b) => {
            check_arity(&name, inputs, 2, out_shapes, 1)?;
            ew_binary::binary(*b, &inputs[0], &inputs[1], &out_shapes[0])?
        }
        Op::Compare { dir, total_order } => {
            check_arity(&name, inputs, 2, out_shapes, 1)?;
            ew_binary::compare(*dir, *total_order, &inputs[0], &inputs[1], &out_shapes[0])?
        }
        Op::Clamp => {
            check_arity(&name, inputs, 3, out_shapes, 1)?;
            ew_binary::clamp(&inputs[0], &inputs[1], &inputs[2], &out_shapes[0])?
        }
        Op::Where => {
            check_arity(&name, inputs, 3, out_shapes, 1)?;
            ew_binary::select(&inputs[0], &inputs[1], &inputs[2], &out_shapes[0])?
        }
        Op::ConvertDType { .. } => {
            check_arity(&name, inputs, 1, out_shapes, 1)?;
            ew_convert::convert(&inputs[0], &out_shapes[0])?
        }
        Op::Bitcast { .. } => {
            check_arity(&name, inputs, 1, out_shapes, 1)?;
            ew_convert::bitcast(&inputs[0], &out_shapes[0])?
        }
        _ => return Err(Error::invalid(name, "not an elementwise op")),
    };
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dtype::DType;
    use crate::ir::op::{BinaryOp, UnaryOp};

    #[test]
    fn dispatch() {
        let x = Tensor::from_vec(Shape::new(DType::Float32, &[2]), &[1.0f32, -2.0]).unwrap();
        let r = eval(&Op::Unary(UnaryOp::Neg), std::slice::from_ref(&x), std::slice::from_ref(&x.shape)).unwrap();
        assert_eq!(r[0].typed::<f32>(), &[-1.0, 2.0]);
        let r = eval(&Op::Binary(BinaryOp::Mul), &[x.clone(), x.clone()], std::slice::from_ref(&x.shape)).unwrap();
        assert_eq!(r[0].typed::<f32>(), &[1.0, 4.0]);
        let r = eval(
            &Op::ConvertDType { dtype: DType::Int8 },
            std::slice::from_ref(&x),
            &[x.shape.with_dtype(DType::Int8)],
        );
        assert_eq!(r.unwrap()[0].typed::<i8>(), &[1, -2]);
        assert!(eval(&Op::Unary(UnaryOp::Neg), &[], std::slice::from_ref(&x.shape)).is_err());
        assert!(eval(&Op::Clamp, std::slice::from_ref(&x), std::slice::from_ref(&x.shape)).is_err());
    }
}
