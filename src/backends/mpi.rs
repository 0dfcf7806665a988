//! [`MpiCommunicator`]: the [`Communicator`] of an SPMD program run as one process per rank under
//! `mpirun` (feature `mpi`; rsmpi over the system's MPI library; docs/distributed.md).
//!
//! Replica groups become MPI sub-communicators (`MPI_Comm_split`, colour = the group's index,
//! key = the rank's position in it), created by the first collective that names the groups and
//! kept for the process's life. f32/f64 Sum and Product go to `MPI_Allreduce` on the buffers
//! themselves; the other dtypes and Max/Min gather the group's buffers and reduce them with the
//! reference kernels ([`gather_reduce`]), so that they follow the catalogue's rules (half
//! rounding, NaN propagation, wrapping integers) rather than the MPI library's.

use std::collections::HashMap;
use std::sync::Mutex;

use mpi::Threading;
use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::environment::Universe;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::{Communicator as _, CommunicatorCollectives, Root};

use crate::api::collective::{Communicator, check_reduce, gather_reduce, group_of};
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::ArithReduce;

/// Most elements (or bytes) one MPI call moves: MPI counts are C `int`.
const MAX_COUNT: usize = 1 << 30;

/// The ranks of `MPI_COMM_WORLD`. Make one per process with [`MpiCommunicator::init`] (it
/// initialises MPI; dropping it finalises MPI) and give it to every execution's
/// [`ExecOptions::communicator`](crate::ExecOptions).
pub struct MpiCommunicator {
    rank: usize,
    size: usize,
    /// Every MPI call is made with this lock held (one collective at a time in the process).
    inner: Mutex<Inner>,
}

struct Inner {
    world: SimpleCommunicator,
    /// This rank's sub-communicator for each partition into replica groups used so far.
    groups: HashMap<Vec<Vec<usize>>, SimpleCommunicator>,
    /// Declared last, so dropped last: finalises MPI after the communicators above are freed.
    _universe: Universe,
}

// SAFETY: the MPI handles in `Inner` are plain values (pointers into the MPI library) that MPI lets
// any thread use when it was initialised with at least `Threading::Serialized` and no two calls
// run at once: `MpiCommunicator::init` refuses a lower level, and `Inner` is only reached through
// `MpiCommunicator::inner`'s lock, so calls are serialised.
unsafe impl Send for Inner {}

impl std::fmt::Debug for MpiCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MpiCommunicator(rank {} of {})", self.rank, self.size)
    }
}

impl MpiCommunicator {
    /// Initialises MPI (once per process; `Err` if it already is, or if the library cannot serve
    /// calls from several threads one at a time) and returns the world's communicator.
    pub fn init() -> Result<MpiCommunicator> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| Error::invalid("MPI", "MPI is already initialised in this process"))?;
        if !matches!(threading, Threading::Serialized | Threading::Multiple) {
            return Err(Error::not_implemented("MPI", format!("the MPI library offers only {threading:?} threading")));
        }
        let world = universe.world();
        let (rank, size) = (usize::try_from(world.rank()), usize::try_from(world.size()));
        let (Ok(rank), Ok(size)) = (rank, size) else {
            return Err(Error::invalid("MPI", "negative rank or size"));
        };
        Ok(MpiCommunicator {
            rank,
            size,
            inner: Mutex::new(Inner { world, groups: HashMap::new(), _universe: universe }),
        })
    }

    /// Runs `f` on this rank's communicator for `groups` (checked; a sub-communicator is made
    /// the first time, collectively: every rank reaches the same call).
    fn with_comm<R>(
        &self,
        op: &str,
        groups: &[Vec<usize>],
        f: impl FnOnce(&SimpleCommunicator) -> Result<R>,
    ) -> Result<R> {
        let group = group_of(op, groups, self.rank, self.size)?;
        let mut inner = self.inner.lock().map_err(|_| Error::invalid(op, "a thread panicked during an MPI call"))?;
        let Inner { world, groups: cache, .. } = &mut *inner;
        if groups.is_empty() {
            return f(world);
        }
        if !cache.contains_key(groups) {
            let color = groups.iter().position(|g| *g == group).unwrap_or(0);
            let key = group.iter().position(|&r| r == self.rank).unwrap_or(0);
            let (Ok(color), Ok(key)) = (i32::try_from(color), i32::try_from(key)) else {
                return Err(Error::invalid(op, "too many replica groups for MPI"));
            };
            let sub = world
                .split_by_color_with_key(Color::with_value(color), key)
                .ok_or_else(|| Error::invalid(op, format!("MPI_Comm_split for {groups:?} gave no communicator")))?;
            cache.insert(groups.to_vec(), sub);
        }
        let sub = cache.get(groups).ok_or_else(|| Error::invalid(op, "sub-communicator missing"))?;
        f(sub)
    }
}

/// Whether every member of `c` passed the same `values` (a collective: all members learn the
/// same answer, so a mismatch is an `Err` on each of them instead of a hang or a crash).
fn agree(c: &SimpleCommunicator, values: &[usize]) -> bool {
    let send: Vec<i64> = values.iter().flat_map(|&v| [v as i64, -(v as i64)]).collect();
    let mut max = vec![0i64; send.len()];
    c.all_reduce_into(&send[..], &mut max[..], SystemOperation::max());
    max == send
}

/// `MPI_Allreduce` of `send` into `recv` as elements of `T`, in chunks of at most [`MAX_COUNT`].
fn reduce_typed<T: bytemuck::Pod + Equivalence>(
    c: &SimpleCommunicator,
    send: &[u8],
    recv: &mut [u8],
    op: SystemOperation,
) {
    let chunk = MAX_COUNT * size_of::<T>();
    for (s, r) in send.chunks(chunk).zip(recv.chunks_mut(chunk)) {
        match (bytemuck::try_cast_slice::<u8, T>(s), bytemuck::try_cast_slice_mut::<u8, T>(r)) {
            (Ok(s), Ok(r)) => c.all_reduce_into(s, r, op),
            // Unaligned buffers (tensors never are): through aligned copies.
            _ => {
                let mut typed = vec![T::zeroed(); s.len() / size_of::<T>()];
                bytemuck::cast_slice_mut::<T, u8>(&mut typed).copy_from_slice(s);
                let mut out = vec![T::zeroed(); typed.len()];
                c.all_reduce_into(&typed[..], &mut out[..], op);
                r.copy_from_slice(bytemuck::cast_slice(&out));
            }
        }
    }
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, groups: &[Vec<usize>], send: &[u8], recv: &mut [u8]) -> Result<()> {
        const OP: &str = "AllGather";
        let members = group_of(OP, groups, self.rank, self.size)?.len();
        let fits = send.len().checked_mul(members).is_some_and(|n| n == recv.len() && n <= MAX_COUNT);
        self.with_comm(OP, groups, |c| {
            if !agree(c, &[send.len(), fits as usize]) || !fits {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "members' sizes differ, or {members} x {} bytes do not fill the {}-byte receive buffer (at most {MAX_COUNT})",
                        send.len(),
                        recv.len()
                    ),
                ));
            }
            c.all_gather_into(send, recv);
            Ok(())
        })
    }

    fn broadcast(&self, groups: &[Vec<usize>], root: usize, buf: &mut [u8]) -> Result<()> {
        const OP: &str = "CollectiveBroadcast";
        let members = group_of(OP, groups, self.rank, self.size)?.len();
        let Some(root) = i32::try_from(root).ok().filter(|&r| (r as usize) < members) else {
            return Err(Error::invalid(OP, format!("root {root} out of range for a group of {members} members")));
        };
        self.with_comm(OP, groups, |c| {
            if !agree(c, &[buf.len()]) {
                return Err(Error::invalid(
                    OP,
                    format!("members' buffers differ in size (this one {} bytes)", buf.len()),
                ));
            }
            for part in buf.chunks_mut(MAX_COUNT) {
                c.process_at_rank(root).broadcast_into(part);
            }
            Ok(())
        })
    }

    fn all_reduce(
        &self,
        groups: &[Vec<usize>],
        dtype: DType,
        kind: ArithReduce,
        send: &[u8],
        recv: &mut [u8],
    ) -> Result<()> {
        const OP: &str = "AllReduce";
        check_reduce(OP, dtype, kind, send.len(), recv.len())?;
        let op = match kind {
            ArithReduce::Sum => SystemOperation::sum(),
            ArithReduce::Product => SystemOperation::product(),
            ArithReduce::Max | ArithReduce::Min => return gather_reduce(self, groups, dtype, kind, send, recv),
        };
        self.with_comm(OP, groups, |c| {
            if !agree(c, &[send.len(), dtype as usize]) {
                return Err(Error::invalid(
                    OP,
                    format!("members' operands differ (this one {} bytes of {dtype})", send.len()),
                ));
            }
            match dtype {
                DType::Float32 => reduce_typed::<f32>(c, send, recv, op),
                DType::Float64 => reduce_typed::<f64>(c, send, recv, op),
                _ => return Ok(false),
            }
            Ok(true)
        })
        .and_then(|native| if native { Ok(()) } else { gather_reduce(self, groups, dtype, kind, send, recv) })
    }
}
