//! What every rank of one generation must receive when no abort interferes: the sim crate's
//! outcome predictor ([`FaultPlan::predict`]) — the one the model checkers and the tests use too —
//! with the reduction its `Delivered` outcome stands for.

use ruccl_core::{NativeCollectiveError, ReduceOperation};
use ruccl_sim::conformance::reference::integer_reduction;
use ruccl_sim::fault::{FaultPlan, GenerationCalls, Outcome};
use ruccl_sim::{ElementType, HostValues};

/// What every rank of one generation must receive.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// Every rank gets `values`; rank `r`'s output is armed to panic on drop iff `armed[r]`.
    Ok {
        /// The reduction.
        values: HostValues,
        /// Which outputs a `drop:what=output` fault armed.
        armed: Vec<bool>,
    },
    /// Every rank gets this error.
    Err(NativeCollectiveError),
}

/// One generation as the model sees it.
#[derive(Clone, Debug)]
pub struct GenerationInputs<'a> {
    /// The fault decorator's generation: how many times each rank has called before.
    pub device_generation: u64,
    /// The communicator's generation: how many generations it has closed before.
    pub communicator_generation: u64,
    /// The operation each rank asks for.
    pub operations: Vec<ReduceOperation>,
    /// Each rank's elements (i32 cases hold values that fit).
    pub inputs: &'a [Vec<i64>],
    /// i32 or i64.
    pub element_type: ElementType,
}

/// What every rank of the generation must receive when nothing aborts the communicator.
pub fn predict(plan: &FaultPlan, generation: &GenerationInputs<'_>) -> Expect {
    let calls = GenerationCalls {
        device_generation: generation.device_generation,
        communicator_generation: generation.communicator_generation,
        operations: &generation.operations,
    };
    match plan.predict(&calls) {
        Outcome::Failed(error) => Expect::Err(error),
        Outcome::Delivered { armed } => Expect::Ok {
            values: integer_reduction(
                generation.inputs,
                generation.operations[0],
                generation.element_type,
            ),
            armed,
        },
    }
}
