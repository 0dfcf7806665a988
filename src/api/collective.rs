//! Collective communication for SPMD programs: the [`Communicator`] an execution's AllReduce
//! runs over (give one to [`ExecOptions::communicator`](crate::ExecOptions)), the checks of
//! replica groups, and [`LocalCommunicator`], ranks as threads of one process (docs/distributed.md).
//!
//! An SPMD program is one module run by every rank, each on its own share of the data; its
//! `AllReduce` nodes combine the ranks' values. Without a communicator an execution is one device
//! (a replica group of one member is the identity, a larger one is `NotImplemented`), as before.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{ArithReduce, BinaryOp, Op};
use crate::ir::shape::Shape;
use crate::kernels::Tensor;
use crate::memory::AlignedBytes;

/// The ranks of an SPMD program and the collectives between them. Every rank calls the same
/// collectives in the same order (as running the same module does); a call returns once its
/// group has exchanged.
///
/// `groups` (an AllReduce's `replica_groups`) is either empty, one group of every rank, or a
/// partition of `0..size()`: each rank in exactly one group. A collective runs within the
/// caller's group, whose members are ordered as listed. Implementations check `groups` with
/// [`group_of`] and that the members' buffers agree in size: bad input is an `Err` on every
/// member, never a hang or a panic.
pub trait Communicator: Send + Sync + fmt::Debug {
    /// This rank, `0..size()`.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn size(&self) -> usize;

    /// Writes the `send` bytes of every member of this rank's group, in group order, into `recv`
    /// (`group length × send.len()` bytes).
    fn all_gather(&self, groups: &[Vec<usize>], send: &[u8], recv: &mut [u8]) -> Result<()>;

    /// Copies `buf` of the member at position `root` of this rank's group into the `buf` of
    /// every other member (all of equal length).
    fn broadcast(&self, groups: &[Vec<usize>], root: usize, buf: &mut [u8]) -> Result<()>;

    /// Writes into `recv` the elementwise `kind` reduction of the `send` buffers (elements of
    /// `dtype`, little-endian, `send.len() == recv.len()`) of this rank's group. The default
    /// gathers the buffers and reduces them in group order with the reference kernels
    /// ([`gather_reduce`]): every member gets the same bits.
    fn all_reduce(
        &self,
        groups: &[Vec<usize>],
        dtype: DType,
        kind: ArithReduce,
        send: &[u8],
        recv: &mut [u8],
    ) -> Result<()> {
        gather_reduce(self, groups, dtype, kind, send, recv)
    }
}

/// The members of `rank`'s group in `groups` (empty: every rank `0..size`), after checking that
/// `groups` is a partition of `0..size`. `op` names the collective in errors.
pub fn group_of(op: &str, groups: &[Vec<usize>], rank: usize, size: usize) -> Result<Vec<usize>> {
    if rank >= size {
        return Err(Error::invalid(op, format!("rank {rank} out of range for {size} ranks")));
    }
    if groups.is_empty() {
        return Ok((0..size).collect());
    }
    let mut seen = vec![false; size];
    for (g, group) in groups.iter().enumerate() {
        if group.is_empty() {
            return Err(Error::invalid(op, format!("replica group {g} is empty")));
        }
        for &d in group {
            match seen.get_mut(d) {
                None => return Err(Error::invalid(op, format!("replica group {group:?} names rank {d} of {size}"))),
                Some(true) => return Err(Error::invalid(op, format!("rank {d} appears twice in {groups:?}"))),
                Some(s) => *s = true,
            }
        }
    }
    if let Some(missing) = seen.iter().position(|&s| !s) {
        return Err(Error::invalid(op, format!("replica groups {groups:?} leave out rank {missing} of {size}")));
    }
    groups.iter().find(|g| g.contains(&rank)).cloned().ok_or_else(|| Error::invalid(op, "rank not in a group"))
}

/// Checks that `dtype` can be reduced with `kind` and that `send` and `recv` are whole, equal
/// numbers of elements.
pub fn check_reduce(op: &str, dtype: DType, kind: ArithReduce, send: usize, recv: usize) -> Result<()> {
    if !dtype.is_numeric() || (dtype.is_complex() && matches!(kind, ArithReduce::Max | ArithReduce::Min)) {
        return Err(Error::invalid(op, format!("cannot reduce {dtype} with {kind:?}")));
    }
    let elem = Shape::new(dtype, &[1]).byte_size().unwrap_or(0);
    if send != recv || elem == 0 || !send.is_multiple_of(elem) {
        return Err(Error::invalid(
            op,
            format!("send {send} and receive {recv} bytes are not equal whole numbers of {dtype} elements"),
        ));
    }
    Ok(())
}

/// [`Communicator::all_reduce`] by gathering the group's buffers and reducing them in group
/// order with the reference kernels (any numeric dtype; the same bits on every member).
pub fn gather_reduce<C: Communicator + ?Sized>(
    comm: &C,
    groups: &[Vec<usize>],
    dtype: DType,
    kind: ArithReduce,
    send: &[u8],
    recv: &mut [u8],
) -> Result<()> {
    const OP: &str = "AllReduce";
    check_reduce(OP, dtype, kind, send.len(), recv.len())?;
    let members = group_of(OP, groups, comm.rank(), comm.size())?.len();
    let total = send.len().checked_mul(members).ok_or_else(|| Error::invalid(OP, "gathered size overflows"))?;
    let mut all = AlignedBytes::try_recycled(total)?;
    comm.all_gather(groups, send, all.as_bytes_mut())?;
    let n = send.len();
    let shape = elements(dtype, n);
    let part = |i: usize| Tensor {
        shape: shape.clone(),
        data: Arc::new(AlignedBytes::from_bytes(&all.as_bytes()[i * n..(i + 1) * n])),
    };
    let op = Op::Binary(match kind {
        ArithReduce::Sum => BinaryOp::Add,
        ArithReduce::Product => BinaryOp::Mul,
        ArithReduce::Max => BinaryOp::Max,
        ArithReduce::Min => BinaryOp::Min,
    });
    let mut acc = part(0);
    for i in 1..members {
        let next = crate::kernels::reference::eval(&op, &[acc, part(i)], std::slice::from_ref(&shape))?;
        acc = next.into_iter().next().ok_or_else(|| Error::invalid(OP, "reduction returned nothing"))?;
    }
    recv.copy_from_slice(acc.bytes());
    Ok(())
}

/// A 1-D shape of `bytes` bytes of `dtype` (checked whole by [`check_reduce`]).
fn elements(dtype: DType, bytes: usize) -> Shape {
    let elem = Shape::new(dtype, &[1]).byte_size().unwrap_or(1).max(1);
    Shape::new(dtype, &[(bytes / elem) as i64])
}

/// The AllReduce of the backends: each operand reduced across its replica group by `comm`, or,
/// without one, the single-device behaviour (groups of one member are the identity).
pub(crate) fn all_reduce_tensors(
    op: &str,
    comm: Option<&dyn Communicator>,
    kind: ArithReduce,
    groups: &[Vec<usize>],
    inputs: Vec<Tensor>,
) -> Result<Vec<Tensor>> {
    let Some(comm) = comm else {
        if let Some(g) = groups.iter().find(|g| g.len() > 1) {
            return Err(Error::not_implemented(
                op,
                format!("replica group {g:?} spans several devices and the execution has no communicator"),
            ));
        }
        return Ok(inputs);
    };
    group_of(op, groups, comm.rank(), comm.size())?;
    inputs
        .iter()
        .map(|x| {
            let mut out = AlignedBytes::try_recycled(x.data.len())?;
            comm.all_reduce(groups, x.shape.dtype, kind, x.bytes(), out.as_bytes_mut())?;
            Ok(Tensor { shape: x.shape.clone(), data: Arc::new(out) })
        })
        .collect()
}

/// How long a [`LocalCommunicator`] rank waits for the rest of its group before giving up (a
/// rank that never joins means the threads run different programs).
const LOCAL_WAIT: Duration = Duration::from_secs(60);

/// One collective call of one group: each member's contribution, and how many have read them.
struct Round {
    parts: Vec<Option<Vec<u8>>>,
    taken: usize,
}

/// What the ranks of a [`LocalCommunicator`] share: the collectives in flight, by group and
/// sequence number.
#[derive(Default)]
struct Board {
    rounds: Mutex<HashMap<(Vec<usize>, u64), Round>>,
    changed: Condvar,
}

/// Ranks as threads of one process: [`LocalCommunicator::new_group`] makes `size` of them, one
/// for each thread's executions. For testing SPMD programs without MPI, and for splitting work
/// between threads. Every collective copies through shared memory.
pub struct LocalCommunicator {
    rank: usize,
    size: usize,
    board: Arc<Board>,
    /// Per group of this rank: how many collectives it has called (pairs calls across ranks).
    calls: Mutex<HashMap<Vec<usize>, u64>>,
}

impl fmt::Debug for LocalCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalCommunicator(rank {} of {})", self.rank, self.size)
    }
}

impl LocalCommunicator {
    /// `size` (≥ 1) connected ranks, rank `i` at index `i`.
    pub fn new_group(size: usize) -> Result<Vec<LocalCommunicator>> {
        if size == 0 {
            return Err(Error::invalid("LocalCommunicator", "a group needs at least 1 rank"));
        }
        let board = Arc::new(Board::default());
        Ok((0..size)
            .map(|rank| LocalCommunicator { rank, size, board: board.clone(), calls: Mutex::default() })
            .collect())
    }

    /// Posts `send` to this rank's group and returns every member's contribution, in group order.
    fn exchange(&self, op: &str, groups: &[Vec<usize>], send: &[u8]) -> Result<Vec<Vec<u8>>> {
        let group = group_of(op, groups, self.rank, self.size)?;
        let pos = group.iter().position(|&r| r == self.rank).ok_or_else(|| Error::invalid(op, "rank not in group"))?;
        fn poisoned<T>(_: T) -> Error {
            Error::invalid("collective", "a rank panicked during a collective")
        }
        let seq = {
            let mut calls = self.calls.lock().map_err(poisoned)?;
            let c = calls.entry(group.clone()).or_insert(0);
            *c += 1;
            *c
        };
        let key = (group, seq);
        let members = key.0.len();
        let mut rounds = self.board.rounds.lock().map_err(poisoned)?;
        let round = rounds.entry(key.clone()).or_insert_with(|| Round { parts: vec![None; members], taken: 0 });
        round.parts[pos] = Some(send.to_vec());
        self.board.changed.notify_all();
        let deadline = Instant::now() + LOCAL_WAIT;
        loop {
            let round = rounds.get_mut(&key).ok_or_else(|| Error::invalid(op, "collective round vanished"))?;
            if round.parts.iter().all(Option::is_some) {
                let parts: Vec<Vec<u8>> = round.parts.iter().map(|p| p.clone().unwrap_or_default()).collect();
                round.taken += 1;
                if round.taken == members {
                    rounds.remove(&key);
                }
                return Ok(parts);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::invalid(
                    op,
                    format!("rank {} waited {LOCAL_WAIT:?} for group {:?}: a member never joined", self.rank, key.0),
                ));
            }
            rounds = self.board.changed.wait_timeout(rounds, left).map_err(poisoned)?.0;
        }
    }
}

impl Communicator for LocalCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, groups: &[Vec<usize>], send: &[u8], recv: &mut [u8]) -> Result<()> {
        const OP: &str = "AllGather";
        let parts = self.exchange(OP, groups, send)?;
        // Every member sees every size, so all of them fail alike.
        if parts.iter().any(|p| p.len() != send.len()) || Some(recv.len()) != send.len().checked_mul(parts.len()) {
            let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
            return Err(Error::invalid(
                OP,
                format!("members send {sizes:?} bytes; receive buffer {} bytes", recv.len()),
            ));
        }
        for (dst, p) in recv.chunks_exact_mut(send.len().max(1)).zip(&parts) {
            dst.copy_from_slice(p);
        }
        Ok(())
    }

    fn broadcast(&self, groups: &[Vec<usize>], root: usize, buf: &mut [u8]) -> Result<()> {
        const OP: &str = "CollectiveBroadcast";
        let parts = self.exchange(OP, groups, buf)?;
        let src = parts.get(root).ok_or_else(|| {
            Error::invalid(OP, format!("root {root} out of range for a group of {} members", parts.len()))
        })?;
        if parts.iter().any(|p| p.len() != src.len()) {
            let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
            return Err(Error::invalid(OP, format!("members' buffers differ in size: {sizes:?} bytes")));
        }
        buf.copy_from_slice(src);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_checked() {
        assert_eq!(group_of("t", &[], 1, 3).unwrap(), vec![0, 1, 2]);
        assert_eq!(group_of("t", &[vec![2, 0], vec![1]], 0, 3).unwrap(), vec![2, 0]);
        for bad in [vec![vec![0, 1]], vec![vec![0, 1, 2, 3]], vec![vec![0, 0], vec![1, 2]], vec![vec![], vec![0, 1, 2]]]
        {
            assert!(group_of("t", &bad, 0, 3).is_err(), "{bad:?}");
        }
        assert!(group_of("t", &[], 3, 3).is_err());
    }

    #[test]
    fn reduce_checks_dtype_and_sizes() {
        assert!(check_reduce("t", DType::Float32, ArithReduce::Sum, 8, 8).is_ok());
        assert!(check_reduce("t", DType::Float32, ArithReduce::Sum, 6, 6).is_err());
        assert!(check_reduce("t", DType::Float32, ArithReduce::Sum, 8, 4).is_err());
        assert!(check_reduce("t", DType::Complex64, ArithReduce::Max, 8, 8).is_err());
        assert!(check_reduce("t", DType::Bool, ArithReduce::Sum, 1, 1).is_err());
    }
}
