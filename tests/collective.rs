//! AllReduce across ranks (`tensorjit::api::collective`) without MPI: ranks are threads joined by
//! a `LocalCommunicator`. Reduction kinds, dtypes, replica groups and several operands on both
//! backends against naive loops; the SPMD scenarios of tests/common/spmd.rs; the single-device
//! behaviour without a communicator; bad groups and mismatched buffers are errors on every rank.

#[path = "common/spmd.rs"]
mod spmd;

use std::sync::Arc;

use half::{bf16, f16};
use spmd::{BACKENDS, backend, compile, with};
use tensorjit::api::collective::{Communicator, LocalCommunicator};
use tensorjit::ir::op::ArithReduce;
use tensorjit::ir::optype::OpType;
use tensorjit::ir::text::parse_module;
use tensorjit::{Buffer, DType, Element, Error, ExecOptions, Shape};

/// Runs `f(rank's communicator)` on `size` threads and returns each rank's result, by rank.
fn ranks<T: Send>(size: usize, f: impl Fn(Arc<dyn Communicator>) -> T + Sync) -> Vec<T> {
    let comms = LocalCommunicator::new_group(size).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(Arc::new(c)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank `r`'s data: small integers so that every kind is exact in every dtype.
fn rank_data(r: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 7 + r * 3) % 5) as f64 - 2.0 + r as f64).collect()
}

fn fold(kind: ArithReduce, vals: impl Iterator<Item = f64>) -> f64 {
    vals.reduce(|a, b| match kind {
        ArithReduce::Sum => a + b,
        ArithReduce::Product => a * b,
        ArithReduce::Max => a.max(b),
        ArithReduce::Min => a.min(b),
    })
    .unwrap()
}

/// One AllReduce of a `[n]` operand of `T` over `size` ranks with `groups`, on `backend`; each
/// rank's result is compared with the fold of its group's data.
fn check<T: Element + Copy>(
    name: &str,
    size: usize,
    kind: ArithReduce,
    groups: &[Vec<usize>],
    to: impl Fn(f64) -> T + Sync,
    from: impl Fn(T) -> f64 + Sync,
) {
    let n = 7;
    let be = backend(name);
    let e = compile(&be, |f| {
        let x = f.parameter("x", Shape::new(T::DTYPE, &[n as i64]))?;
        f.all_reduce(&[x], kind, groups)
    });
    let got = ranks(size, |c| {
        let mine: Vec<T> = rank_data(c.rank(), n).into_iter().map(&to).collect();
        let out = e.execute_with(&[&Buffer::from_slice(&mine, &[n]).unwrap()], &[], &spmd::with(&c)).unwrap();
        out[0].to_vec::<T>().unwrap().into_iter().map(&from).collect::<Vec<f64>>()
    });
    for (r, got) in got.iter().enumerate() {
        let group: Vec<usize> = if groups.is_empty() {
            (0..size).collect()
        } else {
            groups.iter().find(|g| g.contains(&r)).unwrap().clone()
        };
        let want: Vec<f64> = (0..n).map(|i| fold(kind, group.iter().map(|&m| from(to(rank_data(m, n)[i]))))).collect();
        assert_eq!(got, &want, "{name} {} {kind:?} {groups:?} rank {r}", T::DTYPE);
    }
}

#[test]
fn kinds_on_two_ranks() {
    for name in BACKENDS {
        for kind in [ArithReduce::Sum, ArithReduce::Product, ArithReduce::Max, ArithReduce::Min] {
            check::<f32>(name, 2, kind, &[], |v| v as f32, |v| v as f64);
            check::<i32>(name, 2, kind, &[vec![0, 1]], |v| v as i32, |v| v as f64);
        }
    }
}

#[test]
fn dtypes() {
    for name in BACKENDS {
        let sum = ArithReduce::Sum;
        check::<f64>(name, 2, sum, &[], |v| v, |v| v);
        check::<f16>(name, 2, ArithReduce::Max, &[], f16::from_f64, f16::to_f64);
        check::<bf16>(name, 2, sum, &[], bf16::from_f64, bf16::to_f64);
        check::<i64>(name, 3, ArithReduce::Product, &[], |v| v as i64, |v| v as f64);
        check::<u8>(name, 2, ArithReduce::Min, &[], |v| (v + 2.0) as u8, |v| v as f64);
        check::<i8>(name, 2, sum, &[], |v| v as i8, |v| v as f64);
    }
}

#[test]
fn replica_groups_partition_the_ranks() {
    for name in BACKENDS {
        check::<f32>(name, 4, ArithReduce::Sum, &[vec![0, 2], vec![1, 3]], |v| v as f32, |v| v as f64);
        check::<f32>(name, 4, ArithReduce::Max, &[vec![3], vec![2, 0, 1]], |v| v as f32, |v| v as f64);
        check::<f32>(name, 3, ArithReduce::Sum, &[vec![0], vec![1], vec![2]], |v| v as f32, |v| v as f64);
    }
}

#[test]
fn several_operands_of_several_dtypes() {
    for name in BACKENDS {
        let be = backend(name);
        let e = compile(&be, |f| {
            let a = f.parameter("a", Shape::new(DType::Float32, &[2, 3]))?;
            let b = f.parameter("b", Shape::new(DType::Int32, &[4]))?;
            let outs = f.all_reduce(&[a, b, a], ArithReduce::Sum, &[])?;
            // The operands stay as they were: a later use of `a` sees this rank's values.
            Ok(vec![outs[0], outs[1], outs[2], f.add(a, a)?])
        });
        let got = ranks(2, |c| {
            let r = c.rank() as f32;
            let a = Buffer::from_slice(&[1.0 + r, 2., 3., 4., 5., 6. * (r + 1.)], &[2, 3]).unwrap();
            let b = Buffer::from_slice(&[10i32 * (c.rank() as i32 + 1), -1, 0, i32::MAX], &[4]).unwrap();
            let out = e.execute_with(&[&a, &b], &[], &with(&c)).unwrap();
            (
                out[0].to_vec::<f32>().unwrap(),
                out[1].to_vec::<i32>().unwrap(),
                out[2].to_vec::<f32>().unwrap(),
                out[3].to_vec::<f32>().unwrap(),
            )
        });
        for (r, (a, b, a2, twice)) in got.into_iter().enumerate() {
            assert_eq!(a, vec![3., 4., 6., 8., 10., 18.], "{name}");
            assert_eq!(a2, a, "{name}");
            // i32::MAX + i32::MAX wraps, as the Add kernel does.
            assert_eq!(b, vec![30, -2, 0, -2], "{name}");
            let rf = r as f32;
            assert_eq!(twice, vec![2. + 2. * rf, 4., 6., 8., 10., 12. * (rf + 1.)], "{name}");
        }
    }
}

#[test]
fn spmd_scenarios_on_two_and_three_ranks() {
    for name in BACKENDS {
        for size in [2, 3] {
            ranks(size, |c| spmd::data_parallel(name, &c));
            ranks(size, |c| spmd::gradient(name, &c));
            ranks(size, |c| spmd::tensor_parallel(name, &c));
        }
    }
}

#[test]
fn without_a_communicator_one_device() {
    for name in BACKENDS {
        let be = backend(name);
        let x = Buffer::from_slice(&[1.5f32, -2.], &[2]).unwrap();
        let one = compile(&be, |f| {
            f.all_reduce(&[f.parameter("x", Shape::new(DType::Float32, &[2]))?], ArithReduce::Sum, &[vec![0]])
        });
        assert_eq!(one.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap(), vec![1.5, -2.], "{name}");
        let two = compile(&be, |f| {
            f.all_reduce(&[f.parameter("x", Shape::new(DType::Float32, &[2]))?], ArithReduce::Sum, &[vec![0, 1]])
        });
        let err = two.execute_with(&[&x], &[], &ExecOptions::default()).unwrap_err();
        assert!(matches!(err, Error::NotImplemented { .. }), "{name}: {err}");
        // A communicator of one rank is one device too.
        let solo: Arc<dyn Communicator> = Arc::new(LocalCommunicator::new_group(1).unwrap().remove(0));
        let out = one.execute_with(&[&x], &[], &with(&solo)).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.5, -2.], "{name}");
    }
}

#[test]
fn bad_groups_fail_on_every_rank() {
    for name in BACKENDS {
        let be = backend(name);
        // Groups that do not partition two ranks: rank 1 left out; rank 5 of 2.
        for groups in [vec![vec![0]], vec![vec![0, 5], vec![1]]] {
            let e = compile(&be, |f| {
                f.all_reduce(&[f.parameter("x", Shape::new(DType::Float32, &[1]))?], ArithReduce::Sum, &groups)
            });
            let errs = ranks(2, |c| {
                e.execute_with(&[&Buffer::from_slice(&[1f32], &[1]).unwrap()], &[], &with(&c)).unwrap_err().to_string()
            });
            for err in errs {
                assert!(
                    err.contains("AllReduce") && (err.contains("rank 1") || err.contains("rank 5")),
                    "{name}: {err}"
                );
            }
        }
    }
}

#[test]
fn mismatched_buffers_fail_on_every_rank() {
    // Different sizes across ranks (different programs): an error on each, no hang.
    let errs = ranks(2, |c| {
        let send = vec![0u8; 4 * (c.rank() + 1)];
        let mut recv = send.clone();
        c.all_reduce(&[], DType::Float32, ArithReduce::Sum, &send, &mut recv).unwrap_err().to_string()
    });
    assert!(errs.iter().all(|e| e.contains("AllGather") && e.contains("[4, 8]")), "{errs:?}");
    // Locally wrong buffers: send and receive sizes differ, partial elements, bad dtype or kind.
    let c = LocalCommunicator::new_group(1).unwrap().remove(0);
    for (dtype, kind, send, recv) in [
        (DType::Float32, ArithReduce::Sum, 8, 4),
        (DType::Float32, ArithReduce::Sum, 6, 6),
        (DType::Complex64, ArithReduce::Max, 8, 8),
        (DType::Bool, ArithReduce::Sum, 1, 1),
    ] {
        let err = c.all_reduce(&[], dtype, kind, &vec![0; send], &mut vec![0; recv]).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{dtype} {kind:?}: {err}");
    }
    assert!(c.all_gather(&[], &[1, 2], &mut [0; 3]).is_err());
    assert!(c.broadcast(&[], 1, &mut [0; 2]).is_err());
    assert!(LocalCommunicator::new_group(0).is_err());
}

#[test]
fn all_gather_and_broadcast() {
    let got = ranks(4, |c| {
        let groups = [vec![3, 1], vec![0, 2]];
        let mine = [c.rank() as u8; 2];
        let mut all = [0u8; 4];
        c.all_gather(&groups, &mine, &mut all).unwrap();
        let mut b = [c.rank() as u8 * 10, 7];
        c.broadcast(&groups, 1, &mut b).unwrap();
        let mut world = [0u8; 4];
        c.all_gather(&[], &mine[..1], &mut world).unwrap();
        (all, b, world)
    });
    assert_eq!(got[0], ([0, 0, 2, 2], [20, 7], [0, 1, 2, 3]));
    assert_eq!(got[1], ([3, 3, 1, 1], [10, 7], [0, 1, 2, 3]));
    assert_eq!(got[2], ([0, 0, 2, 2], [20, 7], [0, 1, 2, 3]));
    assert_eq!(got[3], ([3, 3, 1, 1], [10, 7], [0, 1, 2, 3]));
}

#[test]
fn repeated_executions_pair_up() {
    // Many executions in a row (and two executables interleaved) keep the ranks' calls paired.
    for name in BACKENDS {
        let be = backend(name);
        let e = compile(&be, |f| {
            f.all_reduce(&[f.parameter("x", Shape::new(DType::Float32, &[3]))?], ArithReduce::Sum, &[])
        });
        let g = compile(&be, |f| {
            f.all_reduce(&[f.parameter("x", Shape::new(DType::Float32, &[3]))?], ArithReduce::Max, &[vec![1], vec![0]])
        });
        let got = ranks(2, |c| {
            (0..20)
                .map(|i| {
                    let x = Buffer::from_slice(&[i as f32, c.rank() as f32, 1.], &[3]).unwrap();
                    let s = e.execute_with(&[&x], &[], &with(&c)).unwrap()[0].to_vec::<f32>().unwrap();
                    let m = g.execute_with(&[&x], &[], &with(&c)).unwrap()[0].to_vec::<f32>().unwrap();
                    (s, m)
                })
                .collect::<Vec<_>>()
        });
        for (r, runs) in got.iter().enumerate() {
            for (i, (s, m)) in runs.iter().enumerate() {
                assert_eq!(s, &vec![2. * i as f32, 1., 2.], "{name}");
                assert_eq!(m, &vec![i as f32, r as f32, 1.], "{name}");
            }
        }
    }
}

#[test]
fn declared_only_collectives_are_named_errors() {
    // The catalogue declares CollectiveBroadcast and AllGather as op-type names without semantics:
    // no backend claims them and the text format rejects them by name (the communicator's
    // all_gather/broadcast, tested above, are the library's calls).
    for name in BACKENDS {
        let be = backend(name);
        let ops = &be.capabilities().operations;
        assert!(ops.contains(&OpType::AllReduce), "{name}");
        for t in [OpType::AllGather, OpType::CollectiveBroadcast] {
            assert!(!ops.contains(&t), "{name} claims {t:?}");
        }
    }
    for op in ["all_gather", "collective_broadcast"] {
        let text = format!("module @m\n\nfunc @main(%0 \"x\": f32[2]) {{\n  %1 = {op} %0 : f32[4]\n  return %1\n}}\n");
        let err = parse_module(&text).unwrap_err().to_string();
        assert!(err.contains(op) && err.contains("not an op"), "{op}: {err}");
    }
}
