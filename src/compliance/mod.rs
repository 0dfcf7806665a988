//! The reusable compliance suite: one function per case, helpers to build, run and compare, and
//! the [`compliance_tests!`](crate::compliance_tests) macro that turns every case into a `#[test]`.
//!
//! Every case is a `pub fn case(backend: &Arc<dyn Backend>) -> CaseResult` that builds a small
//! graph through the public API, executes it and compares the outputs with values worked out by
//! hand or from the math of the catalogue (`ops.md` §4, §9, §10, §11) — never with values
//! produced by running tensorjit. A case whose op, dtype or feature is missing from the backend's
//! [`Capabilities`](crate::Capabilities) is *skipped*: it returns `Ok(())` after recording the
//! reason with [`skip`].
//!
//! Use it from a test file of any backend:
//!
//! ```ignore
//! tensorjit::compliance_tests!(tensorjit::new_with_config("interp"));
//! ```
//!
//! which expands to a module `compliance` with one submodule per group and one `#[test]` per
//! case (e.g. `compliance::binary::div_int_by_zero`). [`all_cases`] lists them for custom
//! runners and [`run_all`] runs them all, counting passes, failures and skips.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use crate::api::{Backend, Buffer, Function, Value};
use crate::ir::dtype::{DType, Element};
use crate::ir::optype::OpType;
use crate::ir::shape::Shape;

/// Requires ops (by `OpType` variant name) and optionally dtypes (by `DType` variant name);
/// skips the case (returns `Ok(())` from it) when the backend lacks one.
macro_rules! need {
    ($b:expr, [$($op:ident),* $(,)?]) => {
        need!($b, [$($op),*], [])
    };
    ($b:expr, [$($op:ident),* $(,)?], [$($dt:ident),* $(,)?]) => {
        if let Some(why) = $crate::compliance::missing(
            $b,
            &[$($crate::ir::optype::OpType::$op),*],
            &[$($crate::ir::dtype::DType::$dt),*],
        ) {
            return $crate::compliance::skip(why);
        }
    };
}

/// Runs the generic function `$f::<T>(b)` for every listed element type whose dtype the backend
/// supports, naming the dtype in any failure; skips the case when none is supported.
macro_rules! for_types {
    ($b:expr, $f:ident, [$($t:ty),* $(,)?]) => {{
        let mut ran = 0usize;
        $(
            if $crate::compliance::has_dtype($b, <$t as $crate::ir::dtype::Element>::DTYPE) {
                ran += 1;
                $f::<$t>($b).map_err(|e| format!("[{}] {e}", <$t as $crate::ir::dtype::Element>::DTYPE))?;
            }
        )*
        if ran == 0 {
            return $crate::compliance::skip("none of the case's dtypes is supported");
        }
        Ok(())
    }};
}

pub mod binary;
pub mod control_flow;
pub mod convert;
pub mod dot_conv;
pub mod dynamic;
pub mod exec;
pub mod fft_rng;
pub mod fused;
pub mod gather_scatter;
pub mod misc;
pub mod reduce;
pub mod shape_ops;
pub mod unary;
pub mod window;

/// What every case returns: `Err(message)` on a mismatch or an unexpected error.
pub type CaseResult = Result<(), String>;

/// The signature of a case.
pub type CaseFn = fn(&Arc<dyn Backend>) -> CaseResult;

thread_local! {
    static SKIPPED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records that the running case is skipped (with `reason`) and returns `Ok(())`.
pub fn skip(reason: impl Into<String>) -> CaseResult {
    let reason = reason.into();
    SKIPPED.with(|s| *s.borrow_mut() = Some(reason));
    Ok(())
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// The backend lacks an op, dtype or feature the case needs.
    Skipped(String),
    /// A check failed (or the case panicked).
    Failed(String),
}

/// Runs one case, catching panics, and tells how it went.
pub fn run_case(case: CaseFn, backend: &Arc<dyn Backend>) -> Outcome {
    SKIPPED.with(|s| *s.borrow_mut() = None);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(backend)));
    let skipped = SKIPPED.with(|s| s.borrow_mut().take());
    match r {
        Ok(Ok(())) => match skipped {
            Some(why) => Outcome::Skipped(why),
            None => Outcome::Passed,
        },
        Ok(Err(msg)) => Outcome::Failed(msg),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".to_string());
            Outcome::Failed(format!("panicked: {msg}"))
        }
    }
}

/// Body of every generated `#[test]`: runs the case, panics with its message on failure and
/// reports the reason of a skip as a `tracing` info event (target `tensorjit::compliance`;
/// [`run_all`]'s [`Summary`] lists skips too).
pub fn run_test(name: &str, case: CaseFn, backend: &Arc<dyn Backend>) {
    match run_case(case, backend) {
        Outcome::Passed => {}
        Outcome::Skipped(why) => {
            tracing::info!(target: "tensorjit::compliance", case = name, backend = backend.name(), "skipped: {why}");
        }
        Outcome::Failed(msg) => panic!("{name} on backend {}: {msg}", backend.name()),
    }
}

/// Counts of a [`run_all`].
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Cases that passed.
    pub passed: Vec<String>,
    /// Cases skipped, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Cases that failed, with the message.
    pub failed: Vec<(String, String)>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} passed, {} failed, {} skipped", self.passed.len(), self.failed.len(), self.skipped.len())?;
        for (n, m) in &self.failed {
            writeln!(f, "FAILED {n}: {m}")?;
        }
        for (n, m) in &self.skipped {
            writeln!(f, "skipped {n}: {m}")?;
        }
        Ok(())
    }
}

/// Runs every case on `backend`.
pub fn run_all(backend: &Arc<dyn Backend>) -> Summary {
    let mut s = Summary::default();
    for &(name, case) in all_cases() {
        match run_case(case, backend) {
            Outcome::Passed => s.passed.push(name.to_string()),
            Outcome::Skipped(w) => s.skipped.push((name.to_string(), w)),
            Outcome::Failed(m) => s.failed.push((name.to_string(), m)),
        }
    }
    s
}

/// Every case as `("group::name", fn)`, in the order of the generated tests.
pub fn all_cases() -> &'static [(&'static str, CaseFn)] {
    crate::__compliance_cases!(list)
}

/// What [`compliance_tests!`](crate::compliance_tests) accepts as the backend: a backend or a
/// `Result` of one (an `Err` fails every test with its message).
pub trait IntoBackend {
    /// The backend, or a panic naming the construction error.
    fn into_backend(self) -> Arc<dyn Backend>;
}

impl IntoBackend for Arc<dyn Backend> {
    fn into_backend(self) -> Arc<dyn Backend> {
        self
    }
}

impl<E: fmt::Display> IntoBackend for Result<Arc<dyn Backend>, E> {
    fn into_backend(self) -> Arc<dyn Backend> {
        match self {
            Ok(b) => b,
            Err(e) => panic!("compliance suite: cannot construct the backend: {e}"),
        }
    }
}

/// Generates one `#[test]` per compliance case for the backend built by the given expression
/// (an `Arc<dyn Backend>` or a `Result` of one), constructed once and shared by the tests.
///
/// `compliance_tests!(expr)` makes a module named `compliance`;
/// `compliance_tests!(name, expr)` picks the module name. Items of the calling module are visible
/// to the expression.
#[macro_export]
macro_rules! compliance_tests {
    ($ctor:expr $(,)?) => {
        $crate::compliance_tests!(compliance, $ctor);
    };
    ($name:ident, $ctor:expr $(,)?) => {
        #[allow(unused_imports, non_snake_case)]
        mod $name {
            use super::*;
            fn backend() -> &'static ::std::sync::Arc<dyn $crate::Backend> {
                static B: ::std::sync::OnceLock<::std::sync::Arc<dyn $crate::Backend>> = ::std::sync::OnceLock::new();
                B.get_or_init(|| $crate::compliance::IntoBackend::into_backend($ctor))
            }
            $crate::__compliance_cases!(tests);
        }
    };
}

/// Internal: expands the case list of the suite in the given mode (`tests` or `list`).
#[doc(hidden)]
#[macro_export]
macro_rules! __compliance_expand {
    (tests; $($group:ident : [$($case:ident),* $(,)?];)*) => {
        $(
            mod $group {
                $(
                    #[test]
                    fn $case() {
                        $crate::compliance::run_test(
                            concat!(stringify!($group), "::", stringify!($case)),
                            $crate::compliance::$group::$case,
                            super::backend(),
                        );
                    }
                )*
            }
        )*
    };
    (list; $($group:ident : [$($case:ident),* $(,)?];)*) => {
        &[$($(
            (
                concat!(stringify!($group), "::", stringify!($case)),
                $crate::compliance::$group::$case as $crate::compliance::CaseFn,
            ),
        )*)*]
    };
}

/// Internal: the list of every case, by group.
#[doc(hidden)]
#[macro_export]
macro_rules! __compliance_cases {
    ($mode:ident) => {
        $crate::__compliance_expand! { $mode;
            binary: [
                add_bf16_scalars, add_shape1_broadcast, add_scalar_broadcast, add_u64_same_shape,
                add_two_sided_broadcast, add_every_dtype, add_int_overflow_wraps, add_empty_tensors,
                add_float_specials, sub_every_dtype, sub_unsigned_wraps, mul_broadcast_scalar,
                mul_f64_8x8, mul_int_overflow_wraps, div_i32_truncates, div_int_by_zero,
                div_float_ieee, div_every_dtype, rem_i32, rem_int_by_zero, rem_float_fmod,
                rem_every_dtype, pow_i32, pow_int_negative_exponent, pow_float_specials,
                pow_every_dtype, atan2_quadrants, atan2_half_types, max_min_i32,
                max_min_signed_zero_and_nan, max_min_every_dtype, max_min_complex_lexicographic,
                bitwise_u8, bitwise_every_int_dtype, logical_ops, shift_left_i32, shift_left_u8,
                shift_right_arithmetic_i32, shift_right_arithmetic_unsigned, shift_right_logical,
                shift_every_int_dtype, complex_from_parts, complex_arithmetic,
                binary_shape_errors, binary_dtype_group_errors, compare_f32_scalars,
                compare_nan_and_signed_zero, compare_every_dtype, compare_broadcast,
                compare_total_order_f32, compare_total_order_f64_and_ints,
                compare_complex_equality, compare_errors,
            ];
            unary: [
                neg_f32, neg_i32, neg_half, neg_int_min_and_zero_sign, abs_f32_i32,
                abs_negative_zero, abs_int_min, abs_every_dtype, abs_complex_magnitude, sign_float,
                sign_int_uint, sign_complex, sign_half, ceil_floor_round, round_ties_to_even,
                ceil_floor_signed_zero, exp_log_family, exp_log_specials, expm1_log1p_small,
                sqrt_rsqrt, sqrt_rsqrt_specials, trig_tanh, tanh_saturates, logistic_points,
                logistic_tails, erf_points, transcendental_f64_against_libm,
                unary_half_types_round_once, unary_complex_exp_log_sqrt, is_finite, is_nan,
                logical_not, bitwise_not, bit_count, clz, real_imag_conj, real_imag_on_floats,
                identity, unary_scalar_and_empty, unary_dtype_errors,
            ];
            convert: [
                int32_to_float32, float32_to_bfloat16, bfloat16_to_int32_truncates, bool_to_int32,
                float32_to_bool, float_to_int_saturates, float64_to_int64_saturates,
                float_to_unsigned_saturates, int_to_float_ties_to_even, int_to_int_wraps,
                to_bool_nonzero, bool_to_every_dtype, half_double_rounding, float_to_half_overflow,
                half_to_float_exact, complex_to_real_drops_imag, real_to_complex,
                packed_int4_from_u8, packed_int2_and_uint_from_u8, convert_same_dtype_noop,
                convert_every_pair_small_values, bitcast_u32_to_f32, bitcast_narrower,
                bitcast_wider, bitcast_float_bits, bitcast_u8_to_int4, bitcast_signed_unsigned,
                bitcast_errors,
            ];
            shape_ops: [
                reshape_basic, reshape_scalar_and_empty, reshape_errors, transpose_3d,
                transpose_scalar_and_errors, broadcast_scalar, broadcast_prefix,
                broadcast_interspaced, broadcast_permuting_axes, broadcast_errors,
                concatenate_1d, concatenate_axis0_i8, concatenate_three_bf16, concatenate_single_and_empty,
                concatenate_errors, slice_simple, slice_strided_2d, slice_empty, slice_strict_errors,
                dynamic_slice_negative_starts, dynamic_slice_2d, dynamic_update_slice_clamps,
                dynamic_update_slice_2d, pad_negative_and_interior, pad_crop_with_interior,
                pad_empty_input, pad_2d_interior, pad_leading_axes_only_and_bool, pad_errors,
                reverse_2d, reverse_one_axis, iota_int_and_half, iota_float_axis, iota_errors,
                where_scalars_bf16, where_scalar_cond, where_bool_vector_scalar_values,
                where_all_vectors, where_errors, clamp_nan_and_order, clamp_int_and_arrays,
                identity_and_scalars,
            ];
            reduce: [
                reduce_axis1_f32, reduce_max_f64, reduce_sum_u32_two_axes, reduce_all_axes,
                reduce_product_f32, reduce_int_wraps, reduce_bf16, reduce_empty_identities_float,
                reduce_empty_identities_int, reduce_empty_identities_bool, reduce_nan_propagates,
                reduce_bitwise, reduce_logical, reduce_sum_every_dtype, reduce_errors,
                argminmax_first_of_ties, argminmax_axis1_i32, argminmax_nan_first,
                argminmax_signed_zero_tie, argminmax_output_dtypes, argminmax_errors,
                cumsum_variants, cumprod_variants, cummax_nan, cummin_and_exclusive_identities,
                cumsum_int_wraps, cum_2d_axes, cum_bool_rejected, cum_half,
            ];
            window: [
                reduce_window_sum_w2_s1, reduce_window_product_padding, reduce_window_window_dilation,
                reduce_window_input_dilation, reduce_window_holes_hold_identity,
                reduce_window_default_strides, reduce_window_empty_output, reduce_window_2d,
                reduce_window_min_int, select_and_scatter_max_w3_s2, select_and_scatter_ties_first,
                select_and_scatter_overlapping, select_and_scatter_2d, select_and_scatter_min,
                select_and_scatter_nan_selection, select_and_scatter_padding_never_selected,
            ];
            gather_scatter: [
                gather_worked_example, gather_1d_clamped, gather_rows_clamped,
                gather_index_dtypes, gather_errors, scatter_out_of_bounds_skipped,
                scatter_duplicates_combine, scatter_max_nan, scatter_max_go_case,
                scatter_sum_go_case, scatter_min, scatter_2d_window_partly_outside,
                scatter_int_dtype,
            ];
            dot_conv: [
                dot_shape_example, dot_free_axes_order, dot_contract_pairs_in_order, dot_matmul_layouts,
                dot_vector_cases, dot_batch_matmul, dot_half_output_dtype, dot_half_f32_accumulation,
                dot_int8_wraps_and_output_dtype, dot_int_dtypes, dot_size0_contraction,
                dot_config_dtypes, dot_transposed_larger, dot_errors, conv_1d_padding,
                conv_1d_stride, conv_1d_input_dilation, conv_1d_kernel_dilation,
                conv_1d_feature_groups, conv_1d_batch_groups, conv_2d, conv_3d,
                conv_2d_transposed_output, conv_negative_padding_crops, conv_kernel_larger_than_input,
                conv_int_and_half_dtypes, conv_nhwc_hwio,
            ];
            fft_rng: [
                fft_forward_1d, fft_inverse_1d, fft_2d, fft_batched_f64, rfft, irfft,
                fft_length_errors, rng_philox_example_u32, rng_two_word_state, rng_u64_and_small_dtypes,
                rng_float_bits, rng_state_chaining, rng_counter_carry, rng_uniform_histogram_u32,
                rng_uniform_histogram_u64,
            ];
            control_flow: [
                functions_capability, closure_parent_links, named_function, call_function,
                call_multiple_outputs, call_errors, while_counter, while_false_at_start,
                while_captures_outer_value, if_branches, if_multiple_outputs_and_captures,
                nested_closure_capture, sort_f32, sort_descending_comparator, sort_stable_ties,
                sort_multi_operand_by_second, sort_2d_axes, sort_total_order_nan_and_zero,
                closure_foreign_value_error, barriers_optimization, barriers_scheduling,
                batch_norm_inference, batch_norm_training, batch_norm_gradient,
            ];
            fused: [
                softmax_1d, softmax_2d, softmax_stability, softmax_negative_axis_error, softmax_f64,
                gelu_exact, gelu_approximate, gelu_half, layer_norm_simple, layer_norm_gamma_beta,
                layer_norm_two_axes, dense_none, dense_relu, dense_activations,
                dense_outputs_input_layout, dense_multi_dim_outputs, attention_bhsd_causal,
                attention_bshd_causal, attention_half_causal, attention_boolean_mask,
                attention_bias, attention_bias_with_causal, attention_default_scale,
                attention_gqa, attention_quantized_hint, qkv_projection,
                quantized_dense_linear_int8, quantized_dense_linear_zero_point_blocks,
                quantized_dense_nf4, quantized_dense_ggml_q8_0, quantized_dense_ggml_q4_0,
                quantized_embedding_lookup_q8_0,
            ];
            dynamic: [
                add_dim1_broadcast, add_scalar_broadcast, dynamic_reshape_explicit_values,
                dynamic_reshape_mixed_inferred, dynamic_reduce, dynamic_concat_non_concat_axis,
                dynamic_slice_full_axis, dynamic_shape_and_dimension_size, dynamic_binding_errors,
            ];
            misc: [
                movement_every_dtype, movement_pad_reverse_where_every_dtype, indexing_every_dtype,
                reduce_max_min_product_every_dtype, cumulative_every_dtype, argminmax_every_dtype,
                sort_every_dtype, iota_every_dtype, complex_dot_and_product,
                subnormals_kept_by_data_movement, caller_fp_mode_unchanged, all_reduce_single_device,
                attention_seq_lens, half_reduction_tolerance,
            ];
            exec: [
                compile_and_execute, wrong_number_of_parameters, incompatible_parameters,
                donation_invalidates_input, non_donated_inputs_untouched, execute_repeatedly,
                execute_from_threads, duplicate_and_parameter_outputs, constant_only_graph,
                compile_requires_return, value_from_other_builder, empty_and_scalar_parameters,
            ];
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Capabilities.

/// Whether the backend supports dtype `d`.
pub fn has_dtype(b: &Arc<dyn Backend>, d: DType) -> bool {
    b.capabilities().dtypes.contains(&d)
}

/// Whether the backend supports op `op`.
pub fn has_op(b: &Arc<dyn Backend>, op: OpType) -> bool {
    b.capabilities().supports(op)
}

/// The reason to skip when an op or dtype is missing, else `None`.
pub fn missing(b: &Arc<dyn Backend>, ops: &[OpType], dtypes: &[DType]) -> Option<String> {
    let caps = b.capabilities();
    let ops: Vec<String> = ops.iter().filter(|o| !caps.supports(**o)).map(|o| format!("{o:?}")).collect();
    let dts: Vec<String> = dtypes.iter().filter(|d| !caps.dtypes.contains(d)).map(|d| d.to_string()).collect();
    if ops.is_empty() && dts.is_empty() {
        None
    } else {
        Some(format!("backend {} lacks ops {ops:?} / dtypes {dts:?}", b.name()))
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs.

/// A buffer holding `data` with dims `dims` (a bug in the case if they disagree).
pub fn t<T: Element>(data: &[T], dims: &[usize]) -> Buffer {
    match Buffer::from_slice(data, dims) {
        Ok(b) => b,
        Err(e) => panic!("compliance case input: {e}"),
    }
}

/// A rank-1 buffer.
pub fn v<T: Element>(data: &[T]) -> Buffer {
    t(data, &[data.len()])
}

/// A scalar buffer.
pub fn sc<T: Element>(value: T) -> Buffer {
    Buffer::scalar(value)
}

/// A buffer from raw bytes (packed dtypes).
pub fn raw(dtype: DType, dims: &[usize], bytes: &[u8]) -> Buffer {
    match Buffer::from_bytes(Shape::from_usize(dtype, dims), bytes) {
        Ok(b) => b,
        Err(e) => panic!("compliance case input: {e}"),
    }
}

/// A static shape.
pub fn shape(dtype: DType, dims: &[i64]) -> Shape {
    Shape::new(dtype, dims)
}

/// `0, 1, 2, …` converted to `T`.
pub fn iota_vec<T: TestElem>(n: usize) -> Vec<T> {
    (0..n).map(|i| T::from_f64(i as f64)).collect()
}

/// Converts small numbers to `T`.
pub fn vals<T: TestElem>(xs: &[f64]) -> Vec<T> {
    xs.iter().map(|&x| T::from_f64(x)).collect()
}

// ---------------------------------------------------------------------------------------------
// Building and running.

fn err_str(stage: &str, e: crate::error::Error) -> String {
    format!("{stage} failed: {e}")
}

/// Builds `main` with one parameter per input buffer (shapes and dtypes from the buffers), lets
/// `build` add the ops and pick the outputs, compiles, executes and returns the outputs.
pub fn exec(
    b: &Arc<dyn Backend>,
    inputs: &[Buffer],
    build: impl FnOnce(&Function, &[Value]) -> crate::Result<Vec<Value>>,
) -> Result<Vec<Buffer>, String> {
    let shapes: Vec<Shape> = inputs.iter().map(|x| x.shape().clone()).collect();
    exec_with(b, &shapes, inputs, build)
}

/// [`exec`] with explicit parameter shapes (e.g. with dynamic axes) instead of the inputs' shapes.
pub fn exec_with(
    b: &Arc<dyn Backend>,
    params: &[Shape],
    inputs: &[Buffer],
    build: impl FnOnce(&Function, &[Value]) -> crate::Result<Vec<Value>>,
) -> Result<Vec<Buffer>, String> {
    let builder = b.builder("compliance");
    let f = builder.main();
    let mut ps = Vec::with_capacity(params.len());
    for (i, s) in params.iter().enumerate() {
        ps.push(f.parameter(&format!("p{i}"), s.clone()).map_err(|e| err_str("parameter", e))?);
    }
    let outs = build(&f, &ps).map_err(|e| err_str("build", e))?;
    f.return_(&outs).map_err(|e| err_str("return", e))?;
    let exe = builder.compile().map_err(|e| err_str("compile", e))?;
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let res = exe.execute(&refs, &[]).map_err(|e| err_str("execute", e))?;
    if res.len() != outs.len() {
        return Err(format!("execute returned {} outputs, {} expected", res.len(), outs.len()));
    }
    Ok(res)
}

/// [`exec`] for a single output.
pub fn exec1(
    b: &Arc<dyn Backend>,
    inputs: &[Buffer],
    build: impl FnOnce(&Function, &[Value]) -> crate::Result<Value>,
) -> Result<Buffer, String> {
    let mut out = exec(b, inputs, |f, p| Ok(vec![build(f, p)?]))?;
    Ok(out.remove(0))
}

/// Expects building, compiling or executing the graph to fail (any error is accepted; a panic
/// is not). `what` describes the misuse for the message.
pub fn expect_error(
    b: &Arc<dyn Backend>,
    what: &str,
    inputs: &[Buffer],
    build: impl FnOnce(&Function, &[Value]) -> crate::Result<Vec<Value>>,
) -> CaseResult {
    match exec(b, inputs, build) {
        Err(_) => Ok(()),
        Ok(outs) => {
            let shapes: Vec<String> = outs.iter().map(|o| o.shape().to_string()).collect();
            Err(format!("{what}: expected an error, got outputs {shapes:?}"))
        }
    }
}

/// [`expect_error`] for ops returning one value.
pub fn expect_error1(
    b: &Arc<dyn Backend>,
    what: &str,
    inputs: &[Buffer],
    build: impl FnOnce(&Function, &[Value]) -> crate::Result<Value>,
) -> CaseResult {
    expect_error(b, what, inputs, |f, p| Ok(vec![build(f, p)?]))
}

// ---------------------------------------------------------------------------------------------
// Element helpers and comparisons.

/// Element types the suite compares: conversions to `f64`, bit patterns and NaN-aware equality.
pub trait TestElem: Element {
    /// The value as f64 (complex: real part; bool: 0/1).
    fn as_f64(self) -> f64;
    /// A value from a small number (rounded to nearest for floats, `as` for ints).
    fn from_f64(x: f64) -> Self;
    /// The raw bits (zero-extended).
    fn bits(self) -> u128;
    /// Equality where NaN equals NaN and −0 equals +0.
    fn same(self, other: Self) -> bool {
        self == other || (self.is_nan_val() && other.is_nan_val())
    }
    /// Whether this is a NaN (false for non-floats).
    fn is_nan_val(self) -> bool {
        false
    }
}

macro_rules! test_elem_int {
    ($($t:ty => $u:ty),*) => {$(
        impl TestElem for $t {
            fn as_f64(self) -> f64 { self as f64 }
            fn from_f64(x: f64) -> Self { x as $t }
            fn bits(self) -> u128 { (self as $u) as u128 }
        }
    )*};
}
test_elem_int!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, u8 => u8, u16 => u16, u32 => u32, u64 => u64);

impl TestElem for bool {
    fn as_f64(self) -> f64 {
        if self { 1.0 } else { 0.0 }
    }
    fn from_f64(x: f64) -> Self {
        x != 0.0
    }
    fn bits(self) -> u128 {
        self as u128
    }
}

impl TestElem for f32 {
    fn as_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn bits(self) -> u128 {
        self.to_bits() as u128
    }
    fn is_nan_val(self) -> bool {
        self.is_nan()
    }
}

impl TestElem for f64 {
    fn as_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
    fn bits(self) -> u128 {
        self.to_bits() as u128
    }
    fn is_nan_val(self) -> bool {
        self.is_nan()
    }
}

impl TestElem for f16 {
    fn as_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn bits(self) -> u128 {
        self.to_bits() as u128
    }
    fn is_nan_val(self) -> bool {
        self.is_nan()
    }
}

impl TestElem for bf16 {
    fn as_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn bits(self) -> u128 {
        self.to_bits() as u128
    }
    fn is_nan_val(self) -> bool {
        self.is_nan()
    }
}

impl TestElem for Complex32 {
    fn as_f64(self) -> f64 {
        self.re as f64
    }
    fn from_f64(x: f64) -> Self {
        Complex32::new(x as f32, 0.0)
    }
    fn bits(self) -> u128 {
        (self.re.to_bits() as u128) | ((self.im.to_bits() as u128) << 32)
    }
    fn same(self, o: Self) -> bool {
        self.re.same(o.re) && self.im.same(o.im)
    }
}

impl TestElem for Complex64 {
    fn as_f64(self) -> f64 {
        self.re
    }
    fn from_f64(x: f64) -> Self {
        Complex64::new(x, 0.0)
    }
    fn bits(self) -> u128 {
        (self.re.to_bits() as u128) | ((self.im.to_bits() as u128) << 64)
    }
    fn same(self, o: Self) -> bool {
        self.re.same(o.re) && self.im.same(o.im)
    }
}

/// Complex element types (re/im as f64).
pub trait ComplexElem: TestElem {
    /// (re, im).
    fn parts(self) -> (f64, f64);
}
impl ComplexElem for Complex32 {
    fn parts(self) -> (f64, f64) {
        (self.re as f64, self.im as f64)
    }
}
impl ComplexElem for Complex64 {
    fn parts(self) -> (f64, f64) {
        (self.re, self.im)
    }
}

/// The elements of `buf` after checking its dtype is `T`'s and its dims are `dims`.
pub fn get<T: TestElem>(what: &str, buf: &Buffer, dims: &[usize]) -> Result<Vec<T>, String> {
    if buf.dtype() != T::DTYPE {
        return Err(format!("{what}: output dtype {} (shape {}), expected {}", buf.dtype(), buf.shape(), T::DTYPE));
    }
    if buf.dims() != dims {
        return Err(format!("{what}: output shape {}, expected dims {dims:?}", buf.shape()));
    }
    buf.to_vec::<T>().map_err(|e| format!("{what}: reading the output: {e}"))
}

/// Checks dtype, dims and exact values (NaN equals NaN, −0 equals +0).
pub fn expect<T: TestElem>(what: &str, buf: &Buffer, dims: &[usize], want: &[T]) -> CaseResult {
    let got = get::<T>(what, buf, dims)?;
    if got.len() != want.len() || got.iter().zip(want).any(|(g, w)| !g.same(*w)) {
        return Err(format!("{what}: got {got:?}, expected {want:?}"));
    }
    Ok(())
}

/// Checks dtype, dims and the exact bit patterns (for cases about the sign of zero or NaN bits).
pub fn expect_bits<T: TestElem>(what: &str, buf: &Buffer, dims: &[usize], want: &[T]) -> CaseResult {
    let got = get::<T>(what, buf, dims)?;
    if got.len() != want.len() || got.iter().zip(want).any(|(g, w)| g.bits() != w.bits()) {
        return Err(format!("{what}: got {got:?}, expected bit-exact {want:?}"));
    }
    Ok(())
}

/// Whether `got` is within `atol + rtol·|want|` of `want` (NaN matches NaN, infinities match
/// exactly).
pub fn close(got: f64, want: f64, atol: f64, rtol: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= atol + rtol * want.abs()
}

/// Checks dtype, dims and values within `atol + rtol·|want|` (half types compared via their
/// value; NaN matches NaN).
pub fn expect_close<T: TestElem>(
    what: &str,
    buf: &Buffer,
    dims: &[usize],
    want: &[f64],
    atol: f64,
    rtol: f64,
) -> CaseResult {
    let got = get::<T>(what, buf, dims)?;
    let g: Vec<f64> = got.iter().map(|x| x.as_f64()).collect();
    if g.len() != want.len() || g.iter().zip(want).any(|(g, w)| !close(*g, *w, atol, rtol)) {
        return Err(format!("{what}: got {g:?}, expected {want:?} (atol {atol}, rtol {rtol})"));
    }
    Ok(())
}

/// Checks a complex output against `(re, im)` pairs within `atol + rtol·|want|` per part.
pub fn expect_complex<T: ComplexElem>(
    what: &str,
    buf: &Buffer,
    dims: &[usize],
    want: &[(f64, f64)],
    atol: f64,
    rtol: f64,
) -> CaseResult {
    let got = get::<T>(what, buf, dims)?;
    let g: Vec<(f64, f64)> = got.iter().map(|x| x.parts()).collect();
    let ok = g.len() == want.len()
        && g.iter().zip(want).all(|(g, w)| close(g.0, w.0, atol, rtol) && close(g.1, w.1, atol, rtol));
    if !ok {
        return Err(format!("{what}: got {g:?}, expected {want:?} (atol {atol}, rtol {rtol})"));
    }
    Ok(())
}

/// A tolerance suited to `T`: tight for f64, f32-level for f32, a few half ulps for F16/BF16,
/// zero for integers.
pub fn tol_for<T: Element>() -> f64 {
    match T::DTYPE {
        DType::Float64 | DType::Complex128 => 1e-12,
        DType::Float32 | DType::Complex64 => 1e-6,
        DType::Float16 => 2e-3,
        DType::BFloat16 => 1.6e-2,
        _ => 0.0,
    }
}

/// Fails with `msg` unless `cond`.
pub fn check(cond: bool, msg: impl FnOnce() -> String) -> CaseResult {
    if cond { Ok(()) } else { Err(msg()) }
}
