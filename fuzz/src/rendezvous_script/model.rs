//! What every rank of one generation must receive when no abort interferes: the sim crate's
//! outcome predictor ([`FaultPlan::predict`]) — the one the model checkers and the tests use too —
//! with the collective's result its `Delivered` outcome stands for, computed here in exact integer
//! arithmetic (DESIGN.md's table of collectives).

use ruccl_core::{Algorithm, Collective, LinkModel, NativeCollectiveError, TensorInfo};
use ruccl_sim::conformance::reference::{integer_values, reduce_integers};
use ruccl_sim::fault::{FaultPlan, GenerationCalls, Outcome};
use ruccl_sim::{ElementType, HostValues};

/// What every rank of one generation must receive.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// Rank `r` gets `outputs[r]`; its output is armed to panic on drop iff `armed[r]`.
    Ok {
        /// Each rank's output.
        outputs: Vec<HostValues>,
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
    /// Each rank's element type and elements (i32 inputs hold values that fit).
    pub inputs: &'a [(ElementType, Vec<i64>)],
    /// The device's α–β model, which resolves `Auto`.
    pub model: LinkModel,
}

/// What every rank of the generation must receive when nothing aborts the communicator.
pub fn predict(plan: &FaultPlan, generation: &GenerationInputs<'_>) -> Expect {
    let shapes: Vec<TensorInfo> = generation
        .inputs
        .iter()
        .map(|(element, values)| TensorInfo {
            len: values.len(),
            element: *element,
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
        Outcome::Delivered { armed } => {
            // Delivered: the ranks agreed, on one shape.
            let (collective, _) = generation.requests[0];
            let element_type = generation.inputs[0].0;
            let inputs: Vec<Vec<i64>> = generation
                .inputs
                .iter()
                .map(|(_, values)| values.clone())
                .collect();
            Expect::Ok {
                outputs: results(collective, &inputs, element_type)
                    .iter()
                    .map(|values| integer_values(element_type, values))
                    .collect(),
                armed,
            }
        }
    }
}

/// Each rank's output of `collective` over `inputs` (one per rank, of one length), in the
/// integer arithmetic of `element_type`.
pub fn results(
    collective: Collective,
    inputs: &[Vec<i64>],
    element_type: ElementType,
) -> Vec<Vec<i64>> {
    let world = inputs.len();
    let length = inputs.first().map_or(0, Vec::len);
    let bits = if element_type == ElementType::I32 {
        32
    } else {
        64
    };
    let reduction = |operation| -> Vec<i64> {
        (0..length)
            .map(|index| {
                let column: Vec<i64> = inputs.iter().map(|values| values[index]).collect();
                reduce_integers(&column, operation, bits)
            })
            .collect()
    };
    match collective {
        Collective::AllReduce(operation) => vec![reduction(operation); world],
        Collective::ReduceScatter(operation) => {
            let reduced = reduction(operation);
            let block = length / world;
            (0..world)
                .map(|rank| reduced[rank * block..(rank + 1) * block].to_vec())
                .collect()
        }
        Collective::AllGather => vec![inputs.concat(); world],
        Collective::Broadcast { root } => vec![inputs[root].clone(); world],
        other => panic!("no reference for {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::results;
    use ruccl_core::{Collective, ReduceOperation};
    use ruccl_sim::ElementType;

    #[test]
    fn reduce_scatter_gives_each_rank_its_block_of_the_sum() {
        let inputs = vec![vec![1, 2, 3, 4], vec![10, 20, 30, 40]];
        let outputs = results(
            Collective::ReduceScatter(ReduceOperation::Sum),
            &inputs,
            ElementType::I64,
        );
        assert_eq!(outputs, vec![vec![11, 22], vec![33, 44]]);
    }

    #[test]
    fn all_gather_concatenates_in_rank_order() {
        let inputs = vec![vec![1], vec![2], vec![3]];
        let outputs = results(Collective::AllGather, &inputs, ElementType::I32);
        assert_eq!(outputs, vec![vec![1, 2, 3]; 3]);
    }
}
