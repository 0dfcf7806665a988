//! Forms the vendored node tests cannot reach (their Resize scales and sizes are runtime
//! inputs; pooling and ConvTranspose corner cases): single-node graphs on constant operands,
//! folded at import and compared with the ONNX reference implementation's results.

use crate::onnx::graph::Ctx;
use crate::onnx::proto::attribute_proto::AttributeType;
use crate::onnx::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto};

fn floats(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: data.to_vec(),
        ..Default::default()
    }
}

fn int64s(name: &str, data: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![data.len() as i64],
        data_type: Some(7),
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

enum A {
    I(i64),
    F(f32),
    S(&'static str),
    Is(&'static [i64]),
}

fn attr(name: &str, v: A) -> AttributeProto {
    let mut a = AttributeProto { name: Some(name.into()), ..Default::default() };
    match v {
        A::I(i) => {
            a.r#type = Some(AttributeType::Int as i32);
            a.i = Some(i);
        }
        A::F(f) => {
            a.r#type = Some(AttributeType::Float as i32);
            a.f = Some(f);
        }
        A::S(s) => {
            a.r#type = Some(AttributeType::String as i32);
            a.s = Some(s.as_bytes().to_vec());
        }
        A::Is(v) => {
            a.r#type = Some(AttributeType::Ints as i32);
            a.ints = v.to_vec();
        }
    }
    a
}

/// Imports one `op` node on constant operands (`""` = omitted) and returns each output's dims
/// and elements (the node folds to constants).
fn run(
    op: &str,
    opset: i64,
    inits: Vec<TensorProto>,
    inputs: &[&str],
    attrs: Vec<AttributeProto>,
    nout: usize,
) -> Vec<(Vec<i64>, Vec<f64>)> {
    let mut ctx = Ctx::new("t", opset, None, crate::onnx::ops::handler);
    let outputs: Vec<String> = (0..nout).map(|i| format!("y{i}")).collect();
    let node = NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.clone(),
        op_type: Some(op.into()),
        attribute: attrs,
        ..Default::default()
    };
    let g = GraphProto {
        node: vec![node],
        initializer: inits,
        output: outputs.iter().map(|o| ValueInfoProto { name: Some(o.clone()), ..Default::default() }).collect(),
        ..Default::default()
    };
    let outs = ctx.import_body(&g, &[]).expect("import");
    outs.iter()
        .map(|&v| {
            let data = ctx
                .known_f64s(v)
                .or_else(|| ctx.known_i64s(v).map(|i| i.iter().map(|&x| x as f64).collect()))
                .expect("folded output");
            (ctx.shape(v).dims.clone(), data)
        })
        .collect()
}

fn close(got: &(Vec<i64>, Vec<f64>), dims: &[i64], want: &[f64]) {
    assert_eq!(got.0, dims, "dims");
    assert_eq!(got.1.len(), want.len());
    for (i, (a, e)) in got.1.iter().zip(want).enumerate() {
        assert!((a - e).abs() <= 1e-5 + 1e-4 * e.abs(), "element {i}: {a} (expected {e})\n{:?}", got.1);
    }
}

/// `[1, 1, 4, 4]` holding 1..=16.
fn x44() -> TensorProto {
    floats("x", &[1, 1, 4, 4], &(1..=16).map(|v| v as f32).collect::<Vec<_>>())
}

/// `[1, 1, 3, 5]` holding `(0.37·i − 1.5)²`.
fn x35() -> TensorProto {
    floats("x", &[1, 1, 3, 5], &(0..15).map(|i| (i as f32 * 0.37 - 1.5).powi(2)).collect::<Vec<_>>())
}

fn empty() -> TensorProto {
    floats("roi", &[0], &[])
}

#[test]
fn resize_linear_half_pixel_scales() {
    let y = run(
        "Resize",
        19,
        vec![x35(), empty(), floats("scales", &[4], &[1.0, 1.0, 1.6, 0.7])],
        &["x", "roi", "scales"],
        vec![attr("mode", A::S("linear"))],
        1,
    );
    #[rustfmt::skip]
    close(&y[0], &[1, 1, 4, 3], &[2.0414786338806152, 0.8273499608039856, 0.14126425981521606, 1.2390410900115967, 0.8805375695228577, 1.0500768423080444, 0.520514190196991, 1.384332299232483, 2.7761929035186768, 3.6523001194000244, 5.738439559936523, 8.352621078491211]);
}

#[test]
fn resize_cubic_exclude_outside() {
    let y = run(
        "Resize",
        19,
        vec![x44(), empty(), floats("scales", &[4], &[1.0, 1.0, 0.8, 1.3])],
        &["x", "roi", "scales"],
        vec![attr("mode", A::S("cubic")), attr("cubic_coeff_a", A::F(-0.5)), attr("exclude_outside", A::I(1))],
        1,
    );
    #[rustfmt::skip]
    close(&y[0], &[1, 1, 3, 5], &[1.2456343173980713, 1.886004090309143, 2.717578887939453, 3.5134103298187256, 4.274181365966797, 6.451132774353027, 7.091502666473389, 7.923077583312988, 8.71890926361084, 9.479680061340332, 11.8264741897583, 12.466843605041504, 13.298418998718262, 14.094249725341797, 14.855020523071289]);
}

#[test]
fn resize_nearest_ceil_align_corners_sizes() {
    let y = run(
        "Resize",
        19,
        vec![x35(), empty(), int64s("sizes", &[1, 1, 5, 7])],
        &["x", "roi", "", "sizes"],
        vec![
            attr("mode", A::S("nearest")),
            attr("nearest_mode", A::S("ceil")),
            attr("coordinate_transformation_mode", A::S("align_corners")),
        ],
        1,
    );
    #[rustfmt::skip]
    close(&y[0], &[1, 1, 5, 7], &[2.25, 1.2768999338150024, 0.5776000022888184, 0.5776000022888184, 0.15209998190402985, 0.0003999992331955582, 0.0003999992331955582, 0.12250001728534698, 0.5184000134468079, 1.1881003379821777, 1.1881003379821777, 2.1316001415252686, 3.3488996028900146, 3.3488996028900146, 0.12250001728534698, 0.5184000134468079, 1.1881003379821777, 1.1881003379821777, 2.1316001415252686, 3.3488996028900146, 3.3488996028900146, 4.840000152587891, 6.60490083694458, 8.643600463867188, 8.643600463867188, 10.956099510192871, 13.542402267456055, 13.542402267456055, 4.840000152587891, 6.60490083694458, 8.643600463867188, 8.643600463867188, 10.956099510192871, 13.542402267456055, 13.542402267456055]);
}

#[test]
fn resize_tf_crop_and_resize_axes_extrapolation() {
    let y = run(
        "Resize",
        19,
        vec![x44(), floats("roi", &[4], &[0.4, 0.6, -0.2, 1.1]), int64s("sizes", &[3, 3])],
        &["x", "roi", "", "sizes"],
        vec![
            attr("mode", A::S("linear")),
            attr("coordinate_transformation_mode", A::S("tf_crop_and_resize")),
            attr("extrapolation_value", A::F(10.0)),
            attr("axes", A::Is(&[2, 3])),
        ],
        1,
    );
    close(&y[0], &[1, 1, 3, 3], &[7.600000381469727, 8.350000381469727, 10.0, 4.0, 4.75, 10.0, 10.0, 10.0, 10.0]);
}

#[test]
fn resize_linear_antialias() {
    let y = run(
        "Resize",
        19,
        vec![x44(), empty(), floats("scales", &[4], &[1.0, 1.0, 0.6, 0.6])],
        &["x", "roi", "scales"],
        vec![attr("mode", A::S("linear")), attr("antialias", A::I(1))],
        1,
    );
    close(&y[0], &[1, 1, 2, 2], &[2.875, 4.5, 9.375, 11.0]);
}

#[test]
fn upsample_nearest() {
    let y = run(
        "Upsample",
        9,
        vec![floats("x", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]), floats("scales", &[4], &[1.0, 1.0, 2.0, 1.5])],
        &["x", "scales"],
        vec![attr("mode", A::S("nearest"))],
        1,
    );
    close(&y[0], &[1, 1, 4, 3], &[1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 3.0, 3.0, 4.0]);
}

#[test]
fn max_pool_indices() {
    let y = run(
        "MaxPool",
        12,
        vec![x35()],
        &["x"],
        vec![attr("kernel_shape", A::Is(&[2, 2])), attr("pads", A::Is(&[1, 0, 0, 1])), attr("strides", A::Is(&[1, 2]))],
        2,
    );
    #[rustfmt::skip]
    close(&y[0], &[1, 1, 3, 3], &[2.25, 0.5776000022888184, 0.0003999992331955582, 2.25, 2.1316001415252686, 3.3488996028900146, 6.60490083694458, 10.956099510192871, 13.542402267456055]);
    close(&y[1], &[1, 1, 3, 3], &[0.0, 2.0, 4.0, 0.0, 8.0, 9.0, 11.0, 13.0, 14.0]);
}

#[test]
fn average_pool_ceil_mode_counts() {
    let attrs = |include: i64| {
        vec![
            attr("kernel_shape", A::Is(&[2, 3])),
            attr("pads", A::Is(&[0, 1, 0, 0])),
            attr("strides", A::Is(&[2, 2])),
            attr("ceil_mode", A::I(1)),
            attr("count_include_pad", A::I(include)),
        ]
    };
    let y = run("AveragePool", 19, vec![x35()], &["x"], attrs(0), 1);
    #[rustfmt::skip]
    close(&y[0], &[1, 1, 2, 3], &[1.041949987411499, 0.9741167426109314, 1.408249855041504, 5.722450256347656, 8.734867095947266, 12.249250411987305]);
    let y = run("AveragePool", 19, vec![x35()], &["x"], attrs(1), 1);
    #[rustfmt::skip]
    close(&y[0], &[1, 1, 2, 3], &[0.6946333050727844, 0.9741167426109314, 1.408249855041504, 3.814966917037964, 8.734867095947266, 12.249250411987305]);
}

#[test]
fn einsum_batched_diagonal_contraction() {
    let y = run(
        "Einsum",
        12,
        vec![
            floats("x", &[2, 3, 3], &(0..18).map(|v| v as f32).collect::<Vec<_>>()),
            floats("y", &[2, 3], &(0..6).map(|v| v as f32).collect::<Vec<_>>()),
        ],
        &["x", "y"],
        vec![attr("equation", A::S("bii,bi->b"))],
        1,
    );
    close(&y[0], &[2], &[20.0, 164.0]);
}

#[test]
fn conv_transpose_output_shape_beyond_full() {
    let y = run(
        "ConvTranspose",
        17,
        vec![x35(), floats("w", &[1, 2, 1, 3], &[1.0, -2.0, 0.5, 3.0, 1.0, -1.0])],
        &["x", "w"],
        vec![attr("strides", A::Is(&[2, 2])), attr("output_shape", A::Is(&[6, 11]))],
        1,
    );
    #[rustfmt::skip]
    close(&y[0], &[1, 2, 6, 11], &[2.25, -4.5, 2.401899814605713, -2.553799867630005, 1.2160499095916748, -1.1552000045776367, 0.44089996814727783, -0.3041999638080597, 0.07644999027252197, -0.0007999984663911164, 0.0001999996165977791, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.12250001728534698, -0.24500003457069397, 0.5796500444412231, -1.0368000268936157, 1.4473003149032593, -2.3762006759643555, 2.7256503105163574, -4.263200283050537, 4.414699554443359, -6.697799205780029, 1.6744498014450073, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.840000152587891, -9.680000305175781, 9.024900436401367, -13.20980167388916, 11.946050643920898, -17.287200927734375, 15.277899742126465, -21.912199020385742, 19.02045249938965, -27.08480453491211, 6.771201133728027, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 6.75, 2.25, 1.5806999206542969, 1.2768999338150024, 0.45590007305145264, 0.5776000022888184, -0.12130004167556763, 0.15209998190402985, -0.1508999913930893, 0.0003999992331955582, -0.0003999992331955582, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.36750006675720215, 0.12250001728534698, 1.4327000379562378, 0.5184000134468079, 3.04590106010437, 1.1881003379821777, 5.206699848175049, 2.1316001415252686, 7.915098190307617, 3.3488996028900146, -3.3488996028900146, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 14.520000457763672, 4.840000152587891, 14.974702835083008, 6.60490083694458, 19.32590103149414, 8.643600463867188, 24.22469711303711, 10.956099510192871, 29.671104431152344, 13.542402267456055, -13.542402267456055, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
}
