//! The status every process contributes to a generation, and the verdict every process reads
//! from their reduction. Pure arithmetic, no MPI: the engine reduces the words with `MAX`.
//!
//! A contribution is [`STATUS_WORDS`] signed 64-bit words:
//!
//! | word                  | value                                                         |
//! |-----------------------|---------------------------------------------------------------|
//! | [`FAILED`]            | `P - p` if process `p` failed locally, else `0`               |
//! | [`TIMED`]             | `1` if the process waits with a deadline, else `0`            |
//! | [`DESCRIPTION`] `+ i` | field `i` of the call `d`: its description (see [`encode`]), then its identity |
//! | [`NEGATED`] `+ i`     | `-d[i]`                                                       |
//!
//! After an all-reduce with `MAX`, `FAILED` is `P - p_min` for the lowest failing process (or
//! 0), `TIMED` says whether any process has a deadline, and the two halves hold `max d` and
//! `-min d` per field: the calls agree exactly when `max d == min d` for every field. Every
//! process computes the same verdict from the same reduced words, so they all take the same
//! branch.
//!
//! The identity fields ([`CallIdentity`]: communicator, its generation, the step) are checked
//! first: calls of different communicators that met in one generation are
//! [`Verdict::Crossed`] whatever else they carry — even a failure, whose text belongs to another
//! communicator's call.

use crate::error::{CallDescription, CallIdentity, CollectiveKind};
use ruccl_core::{ElementType, ReduceOperation};

/// Words describing one call.
pub(crate) const FIELDS: usize = 4;
/// Words of a call's identity.
pub(crate) const IDENTITY_FIELDS: usize = 3;
/// Words of a call on the wire: its description, then its identity.
pub(crate) const CALL_FIELDS: usize = FIELDS + IDENTITY_FIELDS;

/// Index of the failure word.
pub(crate) const FAILED: usize = 0;
/// Index of the deadline word.
pub(crate) const TIMED: usize = 1;
/// Index of the description's first field.
pub(crate) const DESCRIPTION: usize = 2;
/// Index of the negated description's first field.
pub(crate) const NEGATED: usize = DESCRIPTION + CALL_FIELDS;

/// Words of one status contribution.
pub(crate) const STATUS_WORDS: usize = NEGATED + CALL_FIELDS;

/// What every process does after the status reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nobody failed and every call agrees: run the collective.
    Proceed,
    /// Calls of different communicators (or different calls of one) met: everyone gathers every
    /// call, and nothing runs.
    Crossed,
    /// `process` is the lowest that failed locally: everyone receives its text.
    Failed {
        /// The lowest failing process.
        process: usize,
    },
    /// Nobody failed but the calls differ: everyone gathers every description.
    Mismatch,
}

/// `call` as [`FIELDS`] words — the generation, one word packing the kind, operation, element
/// type and root, the length, and the tag; see [`decode`] for the inverse. Packing keeps equality: two
/// calls agree exactly when their words do.
pub(crate) fn encode(call: &CallDescription) -> [i64; FIELDS] {
    let index = |position: Option<usize>| position.unwrap_or(0) as i64;
    let kind = index(
        CollectiveKind::ALL
            .iter()
            .position(|kind| *kind == call.kind),
    );
    let operation = call.operation.map_or(0, |operation| {
        1 + index(ReduceOperation::ALL.iter().position(|o| *o == operation))
    });
    let element = call.element.map_or(0, |element| {
        1 + index(ElementType::ALL.iter().position(|e| *e == element))
    });
    let root = call.root.map_or(0, |root| {
        saturate(root as u64).saturating_add(1).min(ROOT_LIMIT)
    });
    let code =
        kind | operation << KIND_BITS | element << (KIND_BITS + OPERATION_BITS) | root << CODE_BITS;
    [
        saturate(call.generation),
        code,
        saturate(call.len as u64),
        saturate(call.tag),
    ]
}

/// Bits of the kind, the operation and the element type in the packed word; the root above.
const KIND_BITS: u32 = 2;
const OPERATION_BITS: u32 = 3;
const ELEMENT_BITS: u32 = 4;
const CODE_BITS: u32 = KIND_BITS + OPERATION_BITS + ELEMENT_BITS;
// Every kind fits its field, and every operation and element type plus one (0 is "none").
const _: () = assert!(CollectiveKind::ALL.len() <= 1 << KIND_BITS);
const _: () = assert!(ReduceOperation::ALL.len() < 1 << OPERATION_BITS);
const _: () = assert!(ElementType::ALL.len() < 1 << ELEMENT_BITS);
/// Roots (plus one) above this share a code: no job has that many processes.
const ROOT_LIMIT: i64 = (1 << (63 - CODE_BITS)) - 1;

/// `call` and its `identity` as the [`CALL_FIELDS`] words that travel.
pub(crate) fn encode_call(call: &CallDescription, identity: &CallIdentity) -> [i64; CALL_FIELDS] {
    let mut words = [0; CALL_FIELDS];
    words[..FIELDS].copy_from_slice(&encode(call));
    words[FIELDS] = saturate(identity.communicator);
    words[FIELDS + 1] = saturate(identity.generation);
    words[FIELDS + 2] = saturate(identity.step);
    words
}

/// The inverse of [`encode_call`].
pub(crate) fn decode_call(words: &[i64]) -> Option<(CallDescription, CallIdentity)> {
    let [communicator, generation, step] = *words.get(FIELDS..CALL_FIELDS)? else {
        return None;
    };
    let identity = CallIdentity {
        communicator: u64::try_from(communicator).ok()?,
        generation: u64::try_from(generation).ok()?,
        step: u64::try_from(step).ok()?,
    };
    Some((decode(words.get(..FIELDS)?)?, identity))
}

/// The call [`encode`] described, or `None` for words no process of this version writes.
pub(crate) fn decode(words: &[i64]) -> Option<CallDescription> {
    let [generation, code, len, tag] = *words else {
        return None;
    };
    let code = u64::try_from(code).ok()?;
    let field = |shift: u32, bits: u32| ((code >> shift) & ((1 << bits) - 1)) as usize;
    let optional = |value: usize| value.checked_sub(1);
    Some(CallDescription {
        generation: u64::try_from(generation).ok()?,
        kind: *CollectiveKind::ALL.get(field(0, KIND_BITS))?,
        operation: match optional(field(KIND_BITS, OPERATION_BITS)) {
            Some(index) => Some(*ReduceOperation::ALL.get(index)?),
            None => None,
        },
        element: match optional(field(KIND_BITS + OPERATION_BITS, ELEMENT_BITS)) {
            Some(index) => Some(*ElementType::ALL.get(index)?),
            None => None,
        },
        len: usize::try_from(len).ok()?,
        root: optional(usize::try_from(code >> CODE_BITS).ok()?),
        tag: u64::try_from(tag).ok()?,
    })
}

/// Process `process` of `processes`' contribution for `call`; `timed` when it waits with a
/// deadline.
pub(crate) fn contribution(
    process: usize,
    processes: usize,
    failed: bool,
    timed: bool,
    call: &CallDescription,
    identity: &CallIdentity,
) -> [i64; STATUS_WORDS] {
    let mut words = [0; STATUS_WORDS];
    if failed {
        words[FAILED] = saturate(processes.saturating_sub(process) as u64);
    }
    words[TIMED] = i64::from(timed);
    let fields = encode_call(call, identity);
    for (index, field) in fields.iter().enumerate() {
        words[DESCRIPTION + index] = *field;
        words[NEGATED + index] = -*field;
    }
    words
}

/// The verdict from the `MAX`-reduced contributions of `processes` processes.
pub(crate) fn verdict(reduced: &[i64; STATUS_WORDS], processes: usize) -> Verdict {
    let identities_agree = (FIELDS..CALL_FIELDS)
        .all(|field| reduced[DESCRIPTION + field] == -reduced[NEGATED + field]);
    if !identities_agree {
        return Verdict::Crossed;
    }
    if reduced[FAILED] > 0 {
        let from_top = usize::try_from(reduced[FAILED]).unwrap_or(usize::MAX);
        return Verdict::Failed {
            process: processes.saturating_sub(from_top),
        };
    }
    if agreed_fields(reduced).is_some() {
        Verdict::Proceed
    } else {
        Verdict::Mismatch
    }
}

/// Whether any contributor waits with a deadline.
pub(crate) fn any_deadline(reduced: &[i64]) -> bool {
    reduced.get(TIMED).is_some_and(|timed| *timed != 0)
}

/// The call that (partially) reduced words describe, if no contributor failed and every
/// contributor described the same call.
pub(crate) fn agreed_call(reduced: &[i64]) -> Option<CallDescription> {
    if *reduced.get(FAILED)? != 0 {
        return None;
    }
    decode_call(agreed_fields(reduced)?).map(|(call, _)| call)
}

/// The description fields, if every contributor's agree.
fn agreed_fields(reduced: &[i64]) -> Option<&[i64]> {
    let maxima = reduced.get(DESCRIPTION..NEGATED)?;
    let negated_minima = reduced.get(NEGATED..STATUS_WORDS)?;
    let agree = maxima
        .iter()
        .zip(negated_minima)
        .all(|(max, negated_min)| *max == -*negated_min);
    agree.then_some(maxima)
}

fn saturate(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: CallIdentity = CallIdentity {
        communicator: 3,
        generation: 9,
        step: 1,
    };

    fn all_reduce(generation: u64, len: usize) -> CallDescription {
        CallDescription {
            generation,
            kind: CollectiveKind::AllReduce,
            operation: Some(ReduceOperation::Sum),
            element: Some(ElementType::F32),
            len,
            root: None,
            tag: 0,
        }
    }

    /// What MPI_Allreduce with MPI_MAX computes.
    fn reduce_max(contributions: &[[i64; STATUS_WORDS]]) -> [i64; STATUS_WORDS] {
        let mut reduced = [i64::MIN; STATUS_WORDS];
        for words in contributions {
            for (into, word) in reduced.iter_mut().zip(words) {
                *into = (*into).max(*word);
            }
        }
        reduced
    }

    #[test]
    fn every_description_survives_encoding() {
        for kind in CollectiveKind::ALL {
            let operations = ReduceOperation::ALL.map(Some);
            for operation in std::iter::once(None).chain(operations) {
                let elements = ElementType::ALL.map(Some);
                for element in std::iter::once(None).chain(elements) {
                    for root in [None, Some(0), Some(7)] {
                        for tag in [0, 1 << 62] {
                            let call = CallDescription {
                                generation: 41,
                                kind,
                                operation,
                                element,
                                len: 1 << 40,
                                root,
                                tag,
                            };
                            assert_eq!(decode(&encode(&call)), Some(call));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn agreeing_calls_proceed() {
        let call = all_reduce(5, 16);
        let words: Vec<_> = (0..3)
            .map(|p| contribution(p, 3, false, false, &call, &ANY))
            .collect();
        assert_eq!(verdict(&reduce_max(&words), 3), Verdict::Proceed);
    }

    #[test]
    fn the_lowest_failing_process_wins() {
        let call = all_reduce(0, 16);
        let words = [
            contribution(0, 4, false, true, &call, &ANY),
            contribution(1, 4, false, false, &call, &ANY),
            contribution(2, 4, true, false, &call, &ANY),
            contribution(3, 4, true, true, &call, &ANY),
        ];
        assert_eq!(
            verdict(&reduce_max(&words), 4),
            Verdict::Failed { process: 2 }
        );
    }

    #[test]
    fn a_failure_wins_over_a_mismatch() {
        let words = [
            contribution(0, 2, false, false, &all_reduce(0, 16), &ANY),
            contribution(1, 2, true, false, &all_reduce(0, 8), &ANY),
        ];
        assert_eq!(
            verdict(&reduce_max(&words), 2),
            Verdict::Failed { process: 1 }
        );
    }

    #[test]
    fn any_differing_field_is_a_mismatch() {
        let base = all_reduce(2, 16);
        let variants = [
            CallDescription {
                generation: 3,
                ..base
            },
            CallDescription {
                kind: CollectiveKind::ReduceScatter,
                ..base
            },
            CallDescription {
                operation: Some(ReduceOperation::Min),
                ..base
            },
            CallDescription {
                element: Some(ElementType::BF16),
                ..base
            },
            CallDescription { len: 17, ..base },
            CallDescription {
                root: Some(0),
                ..base
            },
            CallDescription { tag: 5, ..base },
        ];
        for other in variants {
            let words = [
                contribution(0, 3, false, false, &base, &ANY),
                contribution(1, 3, false, false, &other, &ANY),
                contribution(2, 3, false, false, &base, &ANY),
            ];
            assert_eq!(
                verdict(&reduce_max(&words), 3),
                Verdict::Mismatch,
                "{other}"
            );
        }
    }

    #[test]
    fn one_deadline_anywhere_is_seen_everywhere() {
        let call = all_reduce(1, 4);
        let words = [
            contribution(0, 3, false, false, &call, &ANY),
            contribution(1, 3, false, true, &call, &ANY),
            contribution(2, 3, false, false, &call, &ANY),
        ];
        let reduced = reduce_max(&words);
        assert!(any_deadline(&reduced));
        assert_eq!(agreed_call(&reduced), Some(call));
        let words = [contribution(0, 2, false, false, &call, &ANY); 2];
        assert!(!any_deadline(&reduce_max(&words)));
    }

    #[test]
    fn calls_of_different_communicators_are_crossed_even_when_one_failed() {
        let call = all_reduce(4, 16);
        let others = [
            CallIdentity {
                communicator: 4,
                ..ANY
            },
            CallIdentity {
                generation: 10,
                ..ANY
            },
            CallIdentity { step: 0, ..ANY },
        ];
        for other in others {
            for failed in [false, true] {
                let words = [
                    contribution(0, 2, false, false, &call, &ANY),
                    contribution(1, 2, failed, false, &call, &other),
                ];
                assert_eq!(verdict(&reduce_max(&words), 2), Verdict::Crossed, "{other}");
                assert_eq!(agreed_call(&reduce_max(&words)), None);
            }
        }
    }

    #[test]
    fn a_call_and_its_identity_survive_the_words() {
        let call = all_reduce(7, 3);
        assert_eq!(decode_call(&encode_call(&call, &ANY)), Some((call, ANY)));
    }

    #[test]
    fn foreign_words_do_not_decode() {
        // Operation code 7 and element code 15 name nothing.
        assert_eq!(decode(&[0, 7 << KIND_BITS, 0, 0]), None);
        assert_eq!(decode(&[0, 15 << (KIND_BITS + OPERATION_BITS), 0, 0]), None);
        assert_eq!(decode(&[-1, 0, 0, 0]), None);
        assert_eq!(decode(&[0, -1, 0, 0]), None);
        assert_eq!(decode(&[0, 0, 0, -1]), None);
        assert_eq!(decode(&[0, 0, 0]), None);
    }
}
