//! Starting collectives on owned buffers: every function here takes the buffers by value, checks
//! that their lengths and types fit the call, and starts the MPI operation — non-blocking, handing
//! the buffers to the [`InFlight`] that owns them until the operation completes, or blocking
//! (a communicator made with [`Waiting::Blocking`](crate::Waiting::Blocking)), handing them
//! straight back. This is the only module that passes buffer pointers to MPI.

use crate::buffer::{recv_ptr, send_ptr};
use crate::engine::in_flight::{InFlight, WaitError, mpi_error};
use crate::engine::packet::{PACKET_WORDS, PacketReduction};
use crate::engine::reductions::{Reduction, move_datatype};
use crate::engine::runtime::lock_mpi;
use crate::error::InterProcessError;
use mpi::ffi;
use mpi::raw::AsRaw;
use ruccl_host::HostValues;
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::time::Instant;

/// A communicator handle this crate created and frees (see `MpiInterProcess`'s `Drop`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Comm {
    pub(crate) raw: ffi::MPI_Comm,
    pub(crate) processes: usize,
    /// Blocking MPI collectives instead of non-blocking ones (the same on every process: the
    /// two kinds never match each other).
    pub(crate) blocking: bool,
}

/// A send buffer and a receive buffer.
pub(crate) type Pair<T> = (T, T);

/// A started operation: finished already (blocking) or pending.
pub(crate) enum Started<K> {
    /// The blocking call returned: the buffers are free again.
    Done(K),
    /// A non-blocking operation that owns the buffers until it completes.
    Pending(InFlight<K>),
}

impl<K> Started<K> {
    /// The buffers, once the operation completed (see [`InFlight::wait`]).
    pub(crate) fn wait(self, deadline: Option<Instant>) -> Result<K, WaitError> {
        match self {
            Started::Done(keep) => Ok(keep),
            Started::Pending(in_flight) => in_flight.wait(deadline),
        }
    }
}

/// `MPI_(I)allreduce(send → recv)`: `recv` must have `send`'s type and length.
pub(crate) fn all_reduce(
    comm: Comm,
    send: HostValues,
    recv: HostValues,
    reduction: Reduction,
) -> Result<Started<Pair<HostValues>>, InterProcessError> {
    same_type(&[&send, &recv], reduction.element)?;
    if send.len() != recv.len() {
        return Err(internal("all-reduce buffers differ in length"));
    }
    let count = count(send.len())?;
    let (datatype, op) = (reduction.datatype, reduction.op);
    // SAFETY: MPI gets pointers into `send` and `recv` only, distinct vectors owned by `keep`,
    // each of `count` elements of the reduction's datatype (the element's size); `comm` is a
    // live communicator of this crate.
    unsafe {
        post(
            "MPI_Allreduce",
            comm,
            (send, recv),
            |(send, recv), request| {
                let (send, recv) = (send_ptr(send), recv_ptr(recv));
                match request {
                    Some(request) => {
                        ffi::MPI_Iallreduce(send, recv, count, datatype, op, comm.raw, request)
                    }
                    None => ffi::MPI_Allreduce(send, recv, count, datatype, op, comm.raw),
                }
            },
        )
    }
}

/// `MPI_(I)allreduce` of one status packet (`send → recv`, [`PACKET_WORDS`] words each) under
/// the packet operation.
pub(crate) fn all_reduce_packet(
    comm: Comm,
    send: Vec<i64>,
    recv: Vec<i64>,
    packet: &PacketReduction,
) -> Result<Started<Pair<Vec<i64>>>, InterProcessError> {
    if send.len() != PACKET_WORDS || recv.len() != PACKET_WORDS {
        return Err(internal("a status packet of the wrong length"));
    }
    let (datatype, op) = (packet.datatype.as_raw(), packet.op.as_raw());
    // SAFETY: MPI gets pointers into `send` and `recv` only, distinct vectors owned by `keep`,
    // each one packet (PACKET_WORDS words) long: one element of the packet datatype.
    unsafe {
        post(
            "MPI_Allreduce",
            comm,
            (send, recv),
            |(send, recv), request| {
                let (send, recv) = (send.as_ptr().cast(), recv.as_mut_ptr().cast());
                match request {
                    Some(request) => {
                        ffi::MPI_Iallreduce(send, recv, 1, datatype, op, comm.raw, request)
                    }
                    None => ffi::MPI_Allreduce(send, recv, 1, datatype, op, comm.raw),
                }
            },
        )
    }
}

/// `MPI_(I)reduce_scatter_block(send → recv)`: `send` holds `processes` blocks of `recv`'s
/// length.
pub(crate) fn reduce_scatter(
    comm: Comm,
    send: HostValues,
    recv: HostValues,
    reduction: Reduction,
) -> Result<Started<Pair<HostValues>>, InterProcessError> {
    same_type(&[&send, &recv], reduction.element)?;
    if recv.len().checked_mul(comm.processes) != Some(send.len()) {
        return Err(internal(
            "reduce-scatter buffers do not fit the process count",
        ));
    }
    let _ = count(send.len())?;
    let block = count(recv.len())?;
    let (datatype, op) = (reduction.datatype, reduction.op);
    // SAFETY: MPI gets pointers into `send` (processes × block elements) and `recv` (block
    // elements) only, distinct vectors owned by `keep`, in the reduction's datatype.
    unsafe {
        post(
            "MPI_Reduce_scatter_block",
            comm,
            (send, recv),
            |(send, recv), request| {
                let (send, recv) = (send_ptr(send), recv_ptr(recv));
                match request {
                    Some(request) => ffi::MPI_Ireduce_scatter_block(
                        send, recv, block, datatype, op, comm.raw, request,
                    ),
                    None => {
                        ffi::MPI_Reduce_scatter_block(send, recv, block, datatype, op, comm.raw)
                    }
                }
            },
        )
    }
}

/// `MPI_(I)allgather(send → recv)`: `recv` holds `processes` blocks of `send`'s length.
pub(crate) fn all_gather(
    comm: Comm,
    send: HostValues,
    recv: HostValues,
) -> Result<Started<Pair<HostValues>>, InterProcessError> {
    let element = send.element_type();
    same_type(&[&send, &recv], element)?;
    if send.len().checked_mul(comm.processes) != Some(recv.len()) {
        return Err(internal("all-gather buffers do not fit the process count"));
    }
    let _ = count(recv.len())?;
    let block = count(send.len())?;
    let datatype =
        move_datatype(element).ok_or_else(|| internal("a buffer of a type MPI cannot move"))?;
    // SAFETY: MPI gets pointers into `send` (block elements) and `recv` (processes × block
    // elements) only, distinct vectors owned by `keep`, in a datatype of the element's size.
    unsafe {
        post(
            "MPI_Allgather",
            comm,
            (send, recv),
            |(send, recv), request| {
                let (send, recv) = (send_ptr(send), recv_ptr(recv));
                match request {
                    Some(request) => ffi::MPI_Iallgather(
                        send, block, datatype, recv, block, datatype, comm.raw, request,
                    ),
                    None => {
                        ffi::MPI_Allgather(send, block, datatype, recv, block, datatype, comm.raw)
                    }
                }
            },
        )
    }
}

/// `MPI_(I)bcast(buffer)` from `root`, in place.
pub(crate) fn broadcast(
    comm: Comm,
    buffer: HostValues,
    root: usize,
) -> Result<Started<HostValues>, InterProcessError> {
    if root >= comm.processes {
        return Err(internal("broadcast root outside the communicator"));
    }
    let root = count(root)?;
    let len = count(buffer.len())?;
    let datatype = move_datatype(buffer.element_type())
        .ok_or_else(|| internal("a buffer of a type MPI cannot move"))?;
    // SAFETY: MPI gets a pointer into `buffer` only, a vector of `len` elements owned by `keep`,
    // in a datatype of the element's size.
    unsafe {
        post("MPI_Bcast", comm, buffer, |buffer, request| {
            let buffer = recv_ptr(buffer);
            match request {
                Some(request) => ffi::MPI_Ibcast(buffer, len, datatype, root, comm.raw, request),
                None => ffi::MPI_Bcast(buffer, len, datatype, root, comm.raw),
            }
        })
    }
}

/// `MPI_Comm_idup(parent)` (always non-blocking: creation honours its deadline in either
/// waiting mode): the new handle lands in the box once the operation completes.
pub(crate) fn duplicate(
    parent: ffi::MPI_Comm,
) -> Result<InFlight<Box<MaybeUninit<ffi::MPI_Comm>>>, InterProcessError> {
    let mut slot = Box::new(MaybeUninit::<ffi::MPI_Comm>::uninit());
    let mut request = MaybeUninit::<ffi::MPI_Request>::uninit();
    let code = {
        let _mpi = lock_mpi();
        // SAFETY: MPI gets a pointer into the box `slot`, which moves into the InFlight
        // below and stays there until the operation completes; `parent` is a live
        // communicator; `request` is a local MPI writes the handle to.
        unsafe { ffi::MPI_Comm_idup(parent, slot.as_mut_ptr(), request.as_mut_ptr()) }
    };
    if code != 0 {
        return Err(mpi_error("MPI_Comm_idup", code));
    }
    // SAFETY: the call succeeded, so it wrote its request handle; MPI refers to the box's
    // contents only, which the InFlight now owns (moving a box does not move its contents).
    Ok(unsafe { InFlight::new(request.assume_init(), slot) })
}

/// Starts `start` on `keep` under the MPI lock: non-blocking (`start` gets `Some(request)`)
/// unless `comm.blocking` (`start` gets `None` and returns when the collective is done).
///
/// # Safety
///
/// `start` starts one MPI collective — the non-blocking form writing its request through the
/// pointer it is given, the blocking form otherwise — and passes MPI pointers only into heap
/// memory owned by `keep` (vector contents), of the sizes its datatypes and counts say.
unsafe fn post<K>(
    call: &'static str,
    comm: Comm,
    mut keep: K,
    start: impl FnOnce(&mut K, Option<*mut ffi::MPI_Request>) -> c_int,
) -> Result<Started<K>, InterProcessError> {
    if comm.blocking {
        let code = {
            let _mpi = lock_mpi();
            start(&mut keep, None)
        };
        return if code == 0 {
            Ok(Started::Done(keep))
        } else {
            Err(mpi_error(call, code))
        };
    }
    let mut request = MaybeUninit::<ffi::MPI_Request>::uninit();
    let code = {
        let _mpi = lock_mpi();
        start(&mut keep, Some(request.as_mut_ptr()))
    };
    if code != 0 {
        // MPI refused to start: nothing refers to `keep`, which is dropped normally.
        return Err(mpi_error(call, code));
    }
    // SAFETY: a successful non-blocking call wrote its request handle; by `post`'s contract MPI
    // holds pointers into `keep`'s heap memory only, and `keep` moves into the InFlight
    // untouched (moving a vector does not move its elements).
    Ok(Started::Pending(unsafe {
        InFlight::new(request.assume_init(), keep)
    }))
}

fn same_type(
    buffers: &[&HostValues],
    element: ruccl_core::ElementType,
) -> Result<(), InterProcessError> {
    if buffers
        .iter()
        .all(|buffer| buffer.element_type() == element)
    {
        Ok(())
    } else {
        Err(internal(
            "buffers of another element type than the operation's",
        ))
    }
}

/// `len` as MPI's `int` count (callers validate lengths before the status agreement, so this
/// only fails on an engine bug).
fn count(len: usize) -> Result<c_int, InterProcessError> {
    c_int::try_from(len).map_err(|_| internal("a count beyond MPI's int range"))
}

fn internal(message: &str) -> InterProcessError {
    InterProcessError::Internal {
        message: message.to_owned(),
    }
}
