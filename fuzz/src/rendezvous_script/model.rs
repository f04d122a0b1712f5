//! What every rank of one generation must receive when no abort interferes: the sim crate's
//! outcome predictor ([`FaultPlan::predict`]) — the one the model checkers and the tests use too —
//! with the collective's result its `Delivered` outcome stands for, from the sim crate's exact
//! reference ([`expected_outputs`]; integers, so exact whatever the fold order).

use ruccl_core::{Algorithm, Collective, LinkModel, NativeCollectiveError, TensorInfo};
use ruccl_sim::conformance::reference::{Expected, compare, expected_outputs};
use ruccl_sim::fault::{FaultPlan, GenerationCalls, Outcome};
use ruccl_sim::{ElementType, HostValues};

/// What every rank of one generation must receive.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// Rank `r` gets `outputs[r]`; its output is armed to panic on drop iff `armed[r]`.
    Ok {
        /// The outputs' element type.
        element_type: ElementType,
        /// Each rank's output.
        outputs: Vec<Expected>,
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
    /// What each rank asks for.
    pub requests: Vec<(Collective, Algorithm)>,
    /// Each rank's input.
    pub inputs: &'a [HostValues],
    /// The device's α–β model, which resolves `Auto`.
    pub model: LinkModel,
}

/// What every rank of the generation must receive when nothing aborts the communicator.
pub fn predict(plan: &FaultPlan, generation: &GenerationInputs<'_>) -> Expect {
    let shapes: Vec<TensorInfo> = generation
        .inputs
        .iter()
        .map(|values| TensorInfo {
            len: values.len(),
            element: values.element_type(),
        })
        .collect();
    let calls = GenerationCalls {
        device_generation: generation.device_generation,
        communicator_generation: generation.communicator_generation,
        requests: &generation.requests,
        inputs: &shapes,
        model: generation.model,
    };
    match plan.predict(&calls) {
        Outcome::Failed(error) => Expect::Err(error),
        // Delivered: the ranks agreed, on one shape.
        Outcome::Delivered { armed } => Expect::Ok {
            element_type: generation.inputs[0].element_type(),
            outputs: expected_outputs(generation.requests[0].0, generation.inputs),
            armed,
        },
    }
}

impl Expect {
    /// Whether rank `rank`'s `output` (and whether it was armed) is what this expects.
    pub fn admits(&self, rank: usize, output: &HostValues, was_armed: bool) -> bool {
        match self {
            Expect::Ok {
                element_type,
                outputs,
                armed,
            } => {
                outputs
                    .get(rank)
                    .is_some_and(|expected| compare(expected, *element_type, output).is_ok())
                    && armed.get(rank) == Some(&was_armed)
            }
            Expect::Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Expect, GenerationInputs, predict};
    use ruccl_core::{Algorithm, Collective, LinkModel, ReduceOperation};
    use ruccl_sim::HostValues;
    use ruccl_sim::fault::FaultPlan;

    #[test]
    fn a_clean_reduce_scatter_expects_each_rank_its_block_of_the_sum() {
        let inputs = [
            HostValues::U32(vec![1, 2, 3, 4]),
            HostValues::U32(vec![10, 20, 30, u32::MAX]),
        ];
        let collective = Collective::ReduceScatter(ReduceOperation::Sum);
        let expect = predict(
            &FaultPlan::none(),
            &GenerationInputs {
                device_generation: 0,
                communicator_generation: 0,
                requests: vec![(collective, Algorithm::Auto); 2],
                inputs: &inputs,
                model: LinkModel::default(),
            },
        );
        assert!(matches!(expect, Expect::Ok { .. }), "{expect:?}");
        assert!(expect.admits(0, &HostValues::U32(vec![11, 22]), false));
        assert!(expect.admits(1, &HostValues::U32(vec![33, 3]), false));
        assert!(!expect.admits(1, &HostValues::U32(vec![33, 3]), true));
        assert!(!expect.admits(1, &HostValues::U32(vec![11, 22]), false));
        assert!(!expect.admits(0, &HostValues::I64(vec![11, 22]), false));
    }
}
