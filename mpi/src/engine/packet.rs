//! The status packet: the status words plus a slot that carries a small all-reduce's data, so
//! that a small all-reduce without deadlines is **one** MPI collective, status and data
//! together.
//!
//! Every generation starts with an `MPI_Iallreduce` of one packet per process, always of the
//! same size ([`PACKET_WORDS`] words, one element of a contiguous datatype so MPI never splits
//! it), under one user-defined operation, [`reduce_packets`]:
//!
//! - the status words reduce with `MAX` (see `agreement.rs`);
//! - the slot reduces with the call's own operation when both sides are healthy partial
//!   results of one and the same call that [`carries_data`] (an all-reduce of at most
//!   [`SLOT_BYTES`]); otherwise the slot is left as it is: the final status then says "failed"
//!   or "mismatch" and nobody reads it.
//!
//! The packet size never depends on the call, so processes that disagree still post matching
//! MPI operations; which path a call takes is a function of its description and of the reduced
//! status, so processes that agree take the same one. The slot's result is used only when no
//! process waits with a deadline (the reduced status says so): with a deadline, completing the
//! packet must not complete the collective, or a late process would return `Ok` where an early
//! one gave up (see `communicator.rs`).

use crate::agreement::{self, STATUS_WORDS};
use crate::buffer::{read_le_bytes, write_le_bytes};
use crate::engine::reductions::{Combine, MAX, MIN, PRODUCT, SUM};
use crate::error::{CallDescription, CollectiveKind};
use half::{bf16, f16};
use mpi::collective::UnsafeUserOperation;
use mpi::datatype::{Equivalence, UserDatatype};
use mpi::ffi;
use ruccl_core::{ElementType, ReduceOperation};
use ruccl_host::HostValues;
use std::ffi::{c_int, c_void};

/// Bytes of data a packet carries: all-reduces up to this size need no second collective.
pub(crate) const SLOT_BYTES: usize = 64;

/// Words of one packet: the status, then the slot.
pub(crate) const PACKET_WORDS: usize = STATUS_WORDS + SLOT_BYTES / 8;

/// Whether an agreed call's data travels in the packet.
pub(crate) fn carries_data(call: &CallDescription) -> bool {
    call.kind == CollectiveKind::AllReduce
        && call.operation.is_some()
        && call
            .element
            .and_then(|element| call.len.checked_mul(element.size()))
            .is_some_and(|bytes| bytes <= SLOT_BYTES)
}

/// Makes `packet` a packet: `status`, then `data`'s bytes in the slot (zeros without data).
/// Reuses the vector's allocation.
pub(crate) fn pack_into(
    packet: &mut Vec<i64>,
    status: &[i64; STATUS_WORDS],
    data: Option<&HostValues>,
) {
    packet.clear();
    packet.resize(PACKET_WORDS, 0);
    packet[..STATUS_WORDS].copy_from_slice(status);
    if let Some(data) = data {
        let mut bytes = [0u8; SLOT_BYTES];
        if write_le_bytes(data, &mut bytes) {
            write_slot(packet, &bytes);
        }
    }
}

/// The status words of a packet.
pub(crate) fn status(packet: &[i64]) -> Option<[i64; STATUS_WORDS]> {
    packet.get(..STATUS_WORDS)?.try_into().ok()
}

/// Overwrites `buffer` with the slot's elements (of `buffer`'s type and length); `false` if they
/// do not fit the slot.
pub(crate) fn unpack_into(packet: &[i64], buffer: &mut HostValues) -> bool {
    read_le_bytes(buffer, &read_slot(packet))
}

fn read_slot(packet: &[i64]) -> [u8; SLOT_BYTES] {
    let mut bytes = [0u8; SLOT_BYTES];
    for (chunk, word) in bytes
        .chunks_exact_mut(8)
        .zip(packet.iter().skip(STATUS_WORDS))
    {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    bytes
}

fn write_slot(packet: &mut [i64], bytes: &[u8]) {
    for (word, chunk) in packet.iter_mut().skip(STATUS_WORDS).zip(bytes.chunks(8)) {
        let mut eight = [0u8; 8];
        eight[..chunk.len()].copy_from_slice(chunk);
        *word = i64::from_le_bytes(eight);
    }
}

/// `inout = incoming ⊕ inout` for one packet (see the module docs).
pub(crate) fn combine_packets(incoming: &[i64], inout: &mut [i64]) {
    if incoming.len() != PACKET_WORDS || inout.len() != PACKET_WORDS {
        return;
    }
    let fused = match (
        agreement::agreed_call(incoming),
        agreement::agreed_call(inout),
    ) {
        (Some(left), Some(right)) if left == right && carries_data(&left) => Some(left),
        _ => None,
    };
    for (current, incoming) in inout[..STATUS_WORDS].iter_mut().zip(incoming) {
        *current = (*current).max(*incoming);
    }
    let Some(call) = fused else {
        return;
    };
    let (Some(element), Some(operation)) = (call.element, call.operation) else {
        return;
    };
    let from = read_slot(incoming);
    let mut into = read_slot(inout);
    fold_slot(element, operation.combining(), call.len, &from, &mut into);
    write_slot(inout, &into);
}

/// An element the slot holds, read and written little-endian.
trait SlotElement: Combine {
    const SIZE: usize;
    fn read(bytes: &[u8]) -> Self;
    fn write(self, bytes: &mut [u8]);
}

macro_rules! slot_element {
    ($type:ty) => {
        impl SlotElement for $type {
            const SIZE: usize = std::mem::size_of::<$type>();
            fn read(bytes: &[u8]) -> Self {
                let mut array = [0u8; std::mem::size_of::<$type>()];
                array.copy_from_slice(&bytes[..Self::SIZE]);
                <$type>::from_le_bytes(array)
            }
            fn write(self, bytes: &mut [u8]) {
                bytes[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
        }
    };
}

slot_element!(f32);
slot_element!(f64);
slot_element!(f16);
slot_element!(bf16);
slot_element!(i32);
slot_element!(i64);
slot_element!(i8);
slot_element!(u8);
slot_element!(u32);
slot_element!(u64);

fn fold_slot(
    element: ElementType,
    operation: ReduceOperation,
    len: usize,
    from: &[u8],
    into: &mut [u8],
) {
    match element {
        ElementType::F32 => fold::<f32>(operation, len, from, into),
        ElementType::F64 => fold::<f64>(operation, len, from, into),
        ElementType::F16 => fold::<f16>(operation, len, from, into),
        ElementType::BF16 => fold::<bf16>(operation, len, from, into),
        ElementType::I32 => fold::<i32>(operation, len, from, into),
        ElementType::I64 => fold::<i64>(operation, len, from, into),
        ElementType::I8 => fold::<i8>(operation, len, from, into),
        ElementType::U8 => fold::<u8>(operation, len, from, into),
        ElementType::U32 => fold::<u32>(operation, len, from, into),
        ElementType::U64 => fold::<u64>(operation, len, from, into),
        // Only types of `ElementType::ALL` reach the wire, and each has an arm above.
        _ => {}
    }
}

fn fold<T: SlotElement>(operation: ReduceOperation, len: usize, from: &[u8], into: &mut [u8]) {
    let combine = match operation {
        ReduceOperation::Sum | ReduceOperation::Mean => T::combine::<SUM>,
        ReduceOperation::Product => T::combine::<PRODUCT>,
        ReduceOperation::Min => T::combine::<MIN>,
        ReduceOperation::Max => T::combine::<MAX>,
    };
    let chunks = from
        .chunks_exact(T::SIZE)
        .zip(into.chunks_exact_mut(T::SIZE));
    for (incoming, current) in chunks.take(len) {
        combine(T::read(incoming), T::read(current)).write(current);
    }
}

/// The MPI datatype (one packet, contiguous) and operation ([`reduce_packets`]) of a
/// communicator's status packets. Created under the MPI lock after `MPI_Init`, dropped under it
/// before `MPI_Finalize`.
pub(crate) struct PacketReduction {
    pub(crate) datatype: UserDatatype,
    pub(crate) op: UnsafeUserOperation,
}

impl PacketReduction {
    /// Call with the MPI lock held.
    pub(crate) fn new() -> Self {
        let words = c_int::try_from(PACKET_WORDS).unwrap_or(c_int::MAX);
        let datatype = UserDatatype::contiguous(words, &i64::equivalent_datatype());
        // SAFETY: the operation is only ever posted with `datatype`, one packet of
        // PACKET_WORDS 64-bit words, which is what `reduce_packets` reads and writes.
        let op = unsafe { UnsafeUserOperation::commutative(reduce_packets) };
        PacketReduction { datatype, op }
    }
}

/// The packet operation MPI calls: `inout[k] = incoming[k] ⊕ inout[k]` for `*len` packets.
///
/// # Safety
///
/// MPI calls it with `incoming` and `inout` pointing at `*len` packets of [`PACKET_WORDS`]
/// 64-bit words each (the datatype it is paired with), not necessarily 8-byte aligned.
unsafe extern "C" fn reduce_packets(
    incoming: *mut c_void,
    inout: *mut c_void,
    len: *mut c_int,
    _datatype: *mut ffi::MPI_Datatype,
) {
    // SAFETY: MPI passes a valid pointer to the packet count.
    let packets = usize::try_from(unsafe { *len }).unwrap_or(0);
    if packets == 0 || incoming.is_null() || inout.is_null() {
        return;
    }
    let bytes = PACKET_WORDS * 8;
    for packet in 0..packets {
        let mut from = [0i64; PACKET_WORDS];
        let mut into = [0i64; PACKET_WORDS];
        // SAFETY: MPI owns both arrays for the call; packet `packet` of each spans `bytes`
        // bytes from `packet * bytes` (the datatype's extent). Unaligned byte copies into
        // local arrays, so alignment does not matter; the arrays do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                incoming.cast::<u8>().add(packet * bytes),
                from.as_mut_ptr().cast::<u8>(),
                bytes,
            );
            std::ptr::copy_nonoverlapping(
                inout.cast::<u8>().add(packet * bytes),
                into.as_mut_ptr().cast::<u8>(),
                bytes,
            );
        }
        combine_packets(&from, &mut into);
        // SAFETY: as above; writes this packet of `inout` only.
        unsafe {
            std::ptr::copy_nonoverlapping(
                into.as_ptr().cast::<u8>(),
                inout.cast::<u8>().add(packet * bytes),
                bytes,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agreement::{Verdict, contribution, verdict};
    use crate::error::CallIdentity;

    fn pack(status: &[i64; STATUS_WORDS], data: Option<&HostValues>) -> Vec<i64> {
        let mut packet = Vec::new();
        pack_into(&mut packet, status, data);
        packet
    }

    fn unpack(packet: &[i64], element: ElementType, len: usize) -> Option<HostValues> {
        let mut buffer = HostValues::zeros(element, len)?;
        unpack_into(packet, &mut buffer).then_some(buffer)
    }

    fn call(len: usize, element: ElementType, operation: ReduceOperation) -> CallDescription {
        CallDescription {
            generation: 9,
            kind: CollectiveKind::AllReduce,
            operation: Some(operation),
            element: Some(element),
            len,
            root: None,
            tag: 0,
        }
    }

    /// Reduces the packets pairwise as MPI might: a tree, not a sequence.
    fn reduce(mut packets: Vec<Vec<i64>>) -> Vec<i64> {
        while packets.len() > 1 {
            let mut next = Vec::new();
            for pair in packets.chunks(2) {
                let mut into = pair[pair.len() - 1].clone();
                if pair.len() == 2 {
                    combine_packets(&pair[0], &mut into);
                }
                next.push(into);
            }
            packets = next;
        }
        packets.pop().unwrap()
    }

    #[test]
    fn a_small_all_reduce_travels_in_the_packet() {
        let processes = 5;
        let call = call(3, ElementType::I32, ReduceOperation::Sum);
        let packets = (0..processes)
            .map(|p| {
                let data = HostValues::I32(vec![p as i32, 10, -(p as i32)]);
                pack(
                    &contribution(p, processes, false, false, &call, &CallIdentity::default()),
                    Some(&data),
                )
            })
            .collect();
        let reduced = reduce(packets);
        assert_eq!(
            verdict(&status(&reduced).unwrap(), processes),
            Verdict::Proceed
        );
        assert_eq!(
            unpack(&reduced, ElementType::I32, 3),
            Some(HostValues::I32(vec![10, 50, -10]))
        );
    }

    #[test]
    fn half_precision_in_the_packet_rounds_once_per_combine() {
        let call = call(1, ElementType::F16, ReduceOperation::Max);
        let packets = [1.5f32, -2.0, 7.25]
            .iter()
            .enumerate()
            .map(|(p, value)| {
                let data = HostValues::F16(vec![f16::from_f32(*value)]);
                pack(
                    &contribution(p, 3, false, false, &call, &CallIdentity::default()),
                    Some(&data),
                )
            })
            .collect();
        let reduced = reduce(packets);
        assert_eq!(
            unpack(&reduced, ElementType::F16, 1),
            Some(HostValues::F16(vec![f16::from_f32(7.25)]))
        );
    }

    #[test]
    fn a_failed_or_disagreeing_side_leaves_the_slot_alone() {
        let good = call(1, ElementType::I64, ReduceOperation::Sum);
        let data = HostValues::I64(vec![5]);
        let mut into = pack(
            &contribution(0, 2, false, false, &good, &CallIdentity::default()),
            Some(&data),
        );
        combine_packets(
            &pack(
                &contribution(1, 2, true, false, &good, &CallIdentity::default()),
                None,
            ),
            &mut into,
        );
        assert_eq!(unpack(&into, ElementType::I64, 1), Some(data.clone()));
        assert_eq!(
            verdict(&status(&into).unwrap(), 2),
            Verdict::Failed { process: 1 }
        );

        let other = call(1, ElementType::I64, ReduceOperation::Max);
        let mut into = pack(
            &contribution(0, 2, false, false, &good, &CallIdentity::default()),
            Some(&data),
        );
        combine_packets(
            &pack(
                &contribution(1, 2, false, false, &other, &CallIdentity::default()),
                Some(&data),
            ),
            &mut into,
        );
        assert_eq!(unpack(&into, ElementType::I64, 1), Some(data));
        assert_eq!(verdict(&status(&into).unwrap(), 2), Verdict::Mismatch);
    }

    #[test]
    fn only_small_all_reduces_are_carried() {
        let f32_sum = |len| call(len, ElementType::F32, ReduceOperation::Sum);
        assert!(carries_data(&f32_sum(SLOT_BYTES / 4)));
        assert!(!carries_data(&f32_sum(SLOT_BYTES / 4 + 1)));
        assert!(carries_data(&call(
            SLOT_BYTES / 2,
            ElementType::BF16,
            ReduceOperation::Mean
        )));
        assert!(!carries_data(&call(
            usize::MAX,
            ElementType::F64,
            ReduceOperation::Sum
        )));
        let broadcast = CallDescription {
            kind: CollectiveKind::Broadcast,
            operation: None,
            root: Some(0),
            ..call(1, ElementType::F32, ReduceOperation::Sum)
        };
        assert!(!carries_data(&broadcast));
    }

    #[test]
    fn the_raw_operation_combines_unaligned_packets() {
        let call = call(2, ElementType::F64, ReduceOperation::Product);
        let left = pack(
            &contribution(0, 2, false, false, &call, &CallIdentity::default()),
            Some(&HostValues::F64(vec![2.0, -1.0])),
        );
        let right = pack(
            &contribution(1, 2, false, false, &call, &CallIdentity::default()),
            Some(&HostValues::F64(vec![0.5, 3.0])),
        );
        // Both packets one byte past an 8-byte boundary.
        let bytes = PACKET_WORDS * 8;
        let mut incoming = vec![0u8; bytes + 1];
        let mut inout = vec![0u8; bytes + 1];
        for (word, chunk) in left.iter().zip(incoming[1..].chunks_mut(8)) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        for (word, chunk) in right.iter().zip(inout[1..].chunks_mut(8)) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        let mut count: c_int = 1;
        // SAFETY: one packet of PACKET_WORDS words at each (unaligned) pointer.
        unsafe {
            reduce_packets(
                incoming[1..].as_mut_ptr().cast(),
                inout[1..].as_mut_ptr().cast(),
                &mut count,
                std::ptr::null_mut(),
            );
        }
        let words: Vec<i64> = inout[1..]
            .chunks(8)
            .map(|chunk| i64::from_le_bytes(chunk.try_into().unwrap()))
            .collect();
        assert_eq!(
            unpack(&words, ElementType::F64, 2),
            Some(HostValues::F64(vec![1.0, -3.0]))
        );
    }
}
