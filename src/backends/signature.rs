//! The parameters and results of a compiled `main`, and the argument handling every executable
//! shares: checking the inputs against the parameters and taking their storage, shared or
//! donated, so that a rejected call donates nothing.

use crate::api::backend::check_inputs;
use crate::api::buffer::Buffer;
use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

/// A shape with the same dtype and dims and no axis names.
pub(crate) fn unnamed(s: &Shape) -> Shape {
    Shape::new(s.dtype, &s.dims)
}

/// Names and shapes of `main`'s parameters and the shapes of its results.
#[derive(Clone, Debug)]
pub(crate) struct Signature {
    /// Parameter names, in order.
    pub input_names: Vec<String>,
    /// Parameter shapes, in order.
    pub input_shapes: Vec<Shape>,
    /// Result shapes.
    pub output_shapes: Vec<Shape>,
}

impl Signature {
    /// The signature of `m`'s `main` (which must have returned).
    pub(crate) fn of(m: &Module) -> Result<Signature> {
        Ok(Signature {
            input_names: m.func(m.main).param_names.clone(),
            input_shapes: m.param_shapes(m.main),
            output_shapes: m.output_shapes(m.main)?,
        })
    }

    /// Checks `inputs` (count, dtypes, shapes, `donate` flags, every buffer live), runs
    /// `check(i, buffer)` on each, and only then takes their storage: shared reads first, then
    /// the donated buffers moved out (a buffer passed twice, once donated, stays readable by the
    /// shared use, whose tensor shares the storage that is then never written). Errors about a
    /// buffer name its parameter.
    pub(crate) fn take_inputs(
        &self,
        inputs: &[&Buffer],
        donate: &[bool],
        mut check: impl FnMut(usize, &Buffer) -> Result<()>,
    ) -> Result<Vec<Tensor>> {
        check_inputs(&self.input_names, &self.input_shapes, inputs, donate)?;
        let donated = |i: usize| donate.get(i).copied().unwrap_or(false);
        for (i, buf) in inputs.iter().enumerate() {
            check(i, buf)?;
            if !buf.is_live() {
                // `storage` reports the buffer's state; checked before any donation happens.
                buf.storage().map_err(|e| self.name_param(e, i))?;
            }
        }
        let mut args: Vec<Option<Tensor>> = vec![None; inputs.len()];
        for (i, buf) in inputs.iter().enumerate() {
            if !donated(i) {
                let data = buf.storage().map_err(|e| self.name_param(e, i))?;
                args[i] = Some(Tensor { shape: unnamed(buf.shape()), data });
            }
        }
        for (i, buf) in inputs.iter().enumerate() {
            if donated(i) {
                let data = buf.take_for_donation().map_err(|e| self.name_param(e, i))?;
                args[i] = Some(Tensor { shape: unnamed(buf.shape()), data });
            }
        }
        Ok(args.into_iter().flatten().collect())
    }

    /// Adds "given as parameter i (name)" to a buffer-state error, keeping its kind.
    fn name_param(&self, e: Error, i: usize) -> Error {
        match e {
            Error::UseAfterFree { what, state } => Error::UseAfterFree {
                what: format!("{what} given as parameter {i} ({:?})", self.input_names[i]),
                state,
            },
            other => other,
        }
    }
}
