//! Checks that drive the device directly through the executor trait: `exchange` semantics with
//! crafted steps, every built-in plan driven by hand, and every validation error.
//!
//! The crafted inputs ([`inputs::crafted`]) show the order a fold ran in: floats mix `±2^(p+1)`
//! with small integers, so a sum folded in another order than the contract's has other bits. The
//! expected outputs are the [plan interpreter](mod@super::interpret)'s, compared bit for bit.

use super::ConformanceConfig;
use super::driver::{Driver, refuses};
use super::inputs;
use super::interpret::{compare_bits, run_steps};
use super::report::{ConformanceFailure, ConformanceReport};
use crate::contain::{call, release};
use crate::host::{ElementType, HostTensors, HostValues};
use ruccl_core::{
    Algorithm, Collective, DeviceId, Plan, ReduceOperation, Step, Transfer, balanced_ranges,
};
use std::ops::Range;

/// A step in which every rank `r` sends `ranges[r]` to rank `(r + 1) % W`.
fn ring_step(ranges: Vec<Range<usize>>, combine: bool) -> Step {
    let world = ranges.len();
    Step {
        combine,
        transfers: ranges
            .into_iter()
            .enumerate()
            .map(|(from, range)| Transfer::new(from, (from + 1) % world, range))
            .collect(),
    }
}

/// A plan whose layout the crafted steps run over: `W` ranks, inputs of `length` elements in
/// place. (The device runs the steps it is given; the plan supplies the layout and operation.)
fn layout(world: usize, length: usize, operation: ReduceOperation) -> Result<Plan, String> {
    Plan::new(
        Collective::AllReduce(operation),
        Algorithm::Ring,
        world,
        length,
    )
    .map_err(|error| error.to_string())
}

/// Run `steps` over `plan`'s layout on the device and compare every rank's output with the
/// interpreter's, bit for bit.
fn agrees<D: HostTensors>(
    driver: &Driver<'_, D>,
    devices: &[DeviceId],
    inputs: &[HostValues],
    plan: &Plan,
    steps: &[Step],
) -> Result<(), String> {
    let expected = run_steps(plan, steps, inputs)
        .map_err(|error| format!("the suite's own steps are wrong: {error}"))?;
    let got = driver.run(devices, inputs, plan, steps)?;
    for (rank, (want, have)) in expected.iter().zip(&got).enumerate() {
        compare_bits(plan.collective(), want, have)
            .map_err(|mismatch| format!("rank {rank}: {mismatch}"))?;
    }
    Ok(())
}

/// One crafted exchange scenario.
struct Scenario {
    check: &'static str,
    label: &'static str,
    operation: ReduceOperation,
    steps: Vec<Step>,
}

/// The crafted scenarios for a world of `world` ranks and tensors of `2·world` elements.
fn scenarios(world: usize) -> Vec<Scenario> {
    let length = 2 * world;
    let chunks = balanced_ranges(length, world);
    let own_chunk: Vec<Range<usize>> = chunks.clone();
    let shared = vec![0..world; world];
    let shifted: Vec<Range<usize>> = (0..world).map(|rank| rank % 2..rank % 2 + world).collect();
    let middle = world / 2;
    let transfer = |from, to, range| Transfer::new(from, to, range);
    let mut scenarios = Vec::new();
    for (operation, label) in [
        (ReduceOperation::Sum, "sum, each rank sends its own chunk"),
        (ReduceOperation::Max, "max, each rank sends its own chunk"),
        (ReduceOperation::Min, "min, each rank sends its own chunk"),
    ] {
        scenarios.push(Scenario {
            check: "exchange/combine",
            label,
            operation,
            steps: vec![ring_step(own_chunk.clone(), true)],
        });
    }
    scenarios.extend([
        Scenario {
            check: "exchange/overwrite",
            label: "each rank sends its own chunk",
            operation: ReduceOperation::Sum,
            steps: vec![ring_step(own_chunk.clone(), false)],
        },
        Scenario {
            check: "exchange/pre_step_reads",
            label: "combine, every rank sends and receives one range",
            operation: ReduceOperation::Sum,
            steps: vec![ring_step(shared.clone(), true)],
        },
        Scenario {
            check: "exchange/pre_step_reads",
            label: "overwrite, every rank sends and receives one range",
            operation: ReduceOperation::Sum,
            steps: vec![ring_step(shared, false)],
        },
        Scenario {
            check: "exchange/pre_step_reads",
            label: "combine, partially overlapping ranges",
            operation: ReduceOperation::Sum,
            steps: vec![ring_step(shifted.clone(), true)],
        },
        Scenario {
            check: "exchange/pre_step_reads",
            label: "overwrite, partially overlapping ranges",
            operation: ReduceOperation::Sum,
            steps: vec![ring_step(shifted, false)],
        },
        Scenario {
            check: "exchange/empty_step",
            label: "every range empty",
            operation: ReduceOperation::Sum,
            steps: vec![
                ring_step(vec![0..0; world], true),
                ring_step(vec![length..length; world], false),
                Step {
                    combine: true,
                    transfers: Vec::new(),
                },
            ],
        },
        Scenario {
            check: "exchange/sequence",
            label: "combine, then overwrite the next chunk",
            operation: ReduceOperation::Sum,
            steps: vec![
                ring_step(own_chunk.clone(), true),
                ring_step(
                    (0..world)
                        .map(|rank| chunks[(rank + 1) % world].clone())
                        .collect(),
                    false,
                ),
            ],
        },
        Scenario {
            check: "exchange/fold_order",
            label: "sum, every other rank sends everything to the middle rank, listed from the highest",
            operation: ReduceOperation::Sum,
            steps: vec![Step {
                combine: true,
                transfers: (0..world)
                    .rev()
                    .filter(|&from| from != middle)
                    .map(|from| transfer(from, middle, 0..length))
                    .collect(),
            }],
        },
        Scenario {
            check: "exchange/fold_order",
            label: "sum, every rank receives from every other on staggered ranges, listed from the highest",
            operation: ReduceOperation::Sum,
            steps: vec![Step {
                combine: true,
                transfers: (0..world)
                    .rev()
                    .flat_map(|from| {
                        (0..world)
                            .filter(move |&to| to != from)
                            .map(move |to| transfer(from, to, from..length - to % 2))
                    })
                    .collect(),
            }],
        },
        Scenario {
            check: "exchange/fold_order",
            label: "max, every other rank sends everything to rank 0",
            operation: ReduceOperation::Max,
            steps: vec![Step {
                combine: true,
                transfers: (1..world).map(|from| transfer(from, 0, 0..length)).collect(),
            }],
        },
        Scenario {
            check: "exchange/offsets",
            label: "overwrite, every rank's chunk lands one chunk further on at the next rank",
            operation: ReduceOperation::Sum,
            steps: vec![Step {
                combine: false,
                transfers: (0..world)
                    .map(|rank| Transfer {
                        from: rank,
                        to: (rank + 1) % world,
                        range: chunks[rank].clone(),
                        at: chunks[(rank + 1) % world].start,
                    })
                    .collect(),
            }],
        },
        Scenario {
            check: "exchange/local_copies",
            label: "overwrite, every rank swaps its two halves with two local copies",
            operation: ReduceOperation::Sum,
            steps: vec![Step {
                combine: false,
                transfers: (0..world)
                    .flat_map(|rank| {
                        [
                            Transfer {
                                from: rank,
                                to: rank,
                                range: 0..world,
                                at: world,
                            },
                            Transfer {
                                from: rank,
                                to: rank,
                                range: world..length,
                                at: 0,
                            },
                        ]
                    })
                    .collect(),
            }],
        },
        Scenario {
            check: "exchange/local_copies",
            label: "combine, every rank folds its upper half and the previous rank's lower half into its lower half",
            operation: ReduceOperation::Sum,
            steps: vec![Step {
                combine: true,
                transfers: (0..world)
                    .flat_map(|rank| {
                        [
                            Transfer {
                                from: rank,
                                to: rank,
                                range: world..length,
                                at: 0,
                            },
                            transfer((rank + world - 1) % world, rank, 0..world),
                        ]
                    })
                    .collect(),
            }],
        },
        Scenario {
            check: "exchange/local_copies",
            label: "overwrite, a local copy whose source the next rank's transfer overwrites",
            operation: ReduceOperation::Sum,
            steps: vec![Step {
                combine: false,
                transfers: (0..world)
                    .flat_map(|rank| {
                        [
                            Transfer {
                                from: rank,
                                to: rank,
                                range: 0..world,
                                at: world,
                            },
                            transfer((rank + 1) % world, rank, 0..world),
                        ]
                    })
                    .collect(),
            }],
        },
        Scenario {
            check: "exchange/overwrite_many",
            label: "overwrite, rank 0 sends one chunk to every other rank",
            operation: ReduceOperation::Sum,
            steps: vec![Step {
                combine: false,
                transfers: (1..world)
                    .map(|to| transfer(0, to, chunks[to].clone()))
                    .collect(),
            }],
        },
    ]);
    scenarios
}

/// Every crafted exchange scenario, and every built-in plan driven by hand, for each world of
/// at least two ranks and each element type.
pub(crate) fn exchanges<D: HostTensors>(
    device: &D,
    devices_for: &dyn Fn(usize) -> Vec<DeviceId>,
    config: &ConformanceConfig,
    report: &mut ConformanceReport,
) {
    let driver = Driver { device };
    for &world in config.worlds.iter().filter(|&&world| world >= 2) {
        let devices = devices_for(world);
        if devices.len() != world {
            continue; // Reported by the matrix's device-list check.
        }
        for &element_type in &config.element_types {
            if !device.supports_type(element_type) {
                continue;
            }
            let length = 2 * world;
            let inputs: Vec<HostValues> = (0..world)
                .map(|rank| inputs::crafted(element_type, rank, length))
                .collect();
            for scenario in scenarios(world) {
                if !device.supports(element_type, scenario.operation) {
                    continue;
                }
                let case = format!("W={world} {element_type} n={length}: {}", scenario.label);
                let outcome = layout(world, length, scenario.operation)
                    .and_then(|plan| agrees(&driver, &devices, &inputs, &plan, &scenario.steps));
                report.check(failure(scenario.check, &case, outcome));
            }
            plans_by_hand(&driver, &devices, element_type, report);
        }
    }
}

/// Drive every built-in plan of every collective by hand (`begin`, each step, `finish`) on
/// crafted inputs of an uneven length: every rank must end with the interpreter's bits.
fn plans_by_hand<D: HostTensors>(
    driver: &Driver<'_, D>,
    devices: &[DeviceId],
    element_type: ElementType,
    report: &mut ConformanceReport,
) {
    let world = devices.len();
    let collectives = [
        Collective::AllReduce(ReduceOperation::Sum),
        Collective::AllReduce(ReduceOperation::Mean),
        Collective::ReduceScatter(ReduceOperation::Sum),
        Collective::AllGather,
        Collective::Broadcast { root: world - 1 },
        Collective::Reduce {
            op: ReduceOperation::Sum,
            root: world / 2,
        },
        Collective::Gather { root: world - 1 },
        Collective::Scatter { root: world / 2 },
        Collective::AllToAll,
    ];
    for collective in collectives {
        if collective
            .operation()
            .is_some_and(|operation| !driver.device.supports(element_type, operation))
        {
            continue;
        }
        let length = match collective {
            Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
                3 * world
            }
            _ => 2 * world + 1,
        };
        let inputs: Vec<HostValues> = (0..world)
            .map(|rank| inputs::crafted(element_type, rank, length))
            .collect();
        for algorithm in Algorithm::BUILT_IN {
            let Ok(plan) = Plan::new(collective, algorithm, world, length) else {
                continue; // Halving-doubling off powers of two.
            };
            let case = format!("W={world} {element_type} n={length}: {collective} via {algorithm}");
            let outcome = agrees(driver, devices, &inputs, &plan, plan.steps());
            report.check(failure("exchange/plan", &case, outcome));
        }
    }
}

fn failure(check: &str, case: &str, outcome: Result<(), String>) -> Result<(), ConformanceFailure> {
    outcome.map_err(|detail| ConformanceFailure {
        check: check.to_owned(),
        case: case.to_owned(),
        detail,
    })
}

/// Every validation the contract asks of a device, on a world of no ranks and of two ranks (if
/// the configuration has a world of two or more): each must be an error, neither `Ok` nor a panic.
pub(crate) fn validations<D: HostTensors>(
    device: &D,
    devices_for: &dyn Fn(usize) -> Vec<DeviceId>,
    config: &ConformanceConfig,
    report: &mut ConformanceReport,
) {
    // No plan exists for an empty world: a one-rank plan with no inputs is the closest call.
    let outcome = layout(1, 0, ReduceOperation::Sum).and_then(|plan| {
        refuses("begin with no ranks", || {
            device.begin(&[], Vec::new(), &plan)
        })
    });
    report.check(failure("validation/begin/empty_world", "W=0", outcome));
    if !config.worlds.iter().any(|&world| world >= 2) {
        report
            .skipped
            .push("the two-rank validations: no configured world has two ranks".to_owned());
        return;
    }
    let devices = devices_for(2);
    let [first, second] = devices[..] else {
        report.check(failure(
            "validation",
            "W=2",
            Err(format!(
                "the device list for 2 ranks has {} devices",
                devices.len()
            )),
        ));
        return;
    };
    let driver = Driver { device };
    let element_type = config
        .element_types
        .iter()
        .copied()
        .find(|&element_type| device.supports_type(element_type))
        .unwrap_or(ElementType::F32);
    let other_type = ElementType::ALL
        .into_iter()
        .find(|&candidate| candidate != element_type && device.supports_type(candidate))
        .unwrap_or(ElementType::I32);
    let operation = ReduceOperation::ALL
        .into_iter()
        .find(|&operation| device.supports(element_type, operation))
        .unwrap_or(ReduceOperation::Sum);
    let values = |rank: usize, length: usize| inputs::crafted(element_type, rank, length);
    let case = format!("W=2 {element_type} {operation}");

    // prepare: a tensor on another device than the one named.
    let outcome = call("upload", || device.upload(first, &values(0, 4))).and_then(|tensor| {
        refuses("prepare of a tensor on another device", || {
            device.prepare(tensor, second)
        })
    });
    report.check(failure("validation/prepare/wrong_device", &case, outcome));

    // begin: input count, empty world, lengths, element types, devices.
    let begin_refuses =
        |what: &str, devices: &[DeviceId], inputs: Result<Vec<D::Prepared>, String>| {
            let inputs = inputs?;
            let plan = layout(2, 4, operation)?;
            refuses(what, || device.begin(devices, inputs, &plan))
        };
    let outcome = begin_refuses(
        "begin with fewer inputs than devices",
        &devices,
        driver.prepare_all(&devices[..1], &[values(0, 4)]),
    );
    report.check(failure("validation/begin/input_count", &case, outcome));
    let outcome = begin_refuses(
        "begin with inputs of 4 and 5 elements",
        &devices,
        driver.prepare_all(&devices, &[values(0, 4), values(1, 5)]),
    );
    report.check(failure("validation/begin/length_mismatch", &case, outcome));
    let outcome = begin_refuses(
        &format!("begin with {element_type} and {other_type} inputs"),
        &devices,
        driver.prepare_all(&devices, &[values(0, 4), inputs::crafted(other_type, 1, 4)]),
    );
    report.check(failure(
        "validation/begin/element_type_mismatch",
        &case,
        outcome,
    ));
    let outcome = begin_refuses(
        "begin with each rank's input on the other rank's device",
        &devices,
        driver.prepare_all(&[second, first], &[values(1, 4), values(0, 4)]),
    );
    report.check(failure("validation/begin/wrong_device", &case, outcome));
    for checked_type in ElementType::ALL {
        if !device.supports_type(checked_type) {
            report.unsupported.push(format!("{checked_type} tensors"));
            continue;
        }
        for unsupported in ReduceOperation::ALL {
            if device.supports(checked_type, unsupported) {
                continue;
            }
            report
                .unsupported
                .push(format!("{unsupported} on {checked_type}"));
            let inputs = driver.prepare_all(
                &devices,
                &[
                    inputs::crafted(checked_type, 0, 4),
                    inputs::crafted(checked_type, 1, 4),
                ],
            );
            let outcome = inputs.and_then(|inputs| {
                let plan = layout(2, 4, unsupported)?;
                refuses("begin with an unsupported operation", || {
                    device.begin(&devices, inputs, &plan)
                })
            });
            let case = format!("W=2 {checked_type} {unsupported}");
            report.check(failure(
                "validation/begin/unsupported_operation",
                &case,
                outcome,
            ));
        }
    }

    // exchange: ranks, bounds, inverted ranges, two writers, one sender twice.
    let transfer = |from, to, range| Transfer::new(from, to, range);
    #[allow(clippy::reversed_empty_ranges)] // an inverted range is the point of this case
    let bad_steps: [(&str, &str, Step); 6] = [
        (
            "validation/exchange/no_such_rank",
            "exchange naming rank 2 of two",
            Step {
                combine: true,
                transfers: vec![transfer(0, 2, 0..2)],
            },
        ),
        (
            "validation/exchange/target_out_of_bounds",
            "exchange landing past the end",
            Step {
                combine: true,
                transfers: vec![Transfer {
                    from: 0,
                    to: 1,
                    range: 0..2,
                    at: 3,
                }],
            },
        ),
        (
            "validation/exchange/out_of_bounds",
            "exchange with a range past the end",
            Step {
                combine: true,
                transfers: vec![transfer(0, 1, 3..5)],
            },
        ),
        (
            "validation/exchange/inverted_range",
            "exchange with a range 3..1",
            Step {
                combine: true,
                transfers: vec![transfer(0, 1, 3..1)],
            },
        ),
        (
            "validation/exchange/double_write",
            "an overwriting step writing one element twice",
            Step {
                combine: false,
                transfers: vec![transfer(0, 1, 0..2), transfer(0, 1, 1..3)],
            },
        ),
        (
            "validation/exchange/duplicate_source",
            "a combining step delivering one sender twice",
            Step {
                combine: true,
                transfers: vec![transfer(1, 0, 0..3), transfer(1, 0, 2..4)],
            },
        ),
    ];
    for (check, what, step) in bad_steps {
        let outcome = exchange_refuses(
            &driver,
            &devices,
            [values(0, 4), values(1, 4)],
            operation,
            what,
            &step,
        );
        report.check(failure(check, &case, outcome));
    }
}

/// Begin a valid generation, expect `exchange(step)` to be refused, and drop everything.
fn exchange_refuses<D: HostTensors>(
    driver: &Driver<'_, D>,
    devices: &[DeviceId],
    values: [HostValues; 2],
    operation: ReduceOperation,
    what: &str,
    step: &Step,
) -> Result<(), String> {
    let device = driver.device;
    let inputs = driver.prepare_all(devices, &values)?;
    let plan = layout(2, 4, operation)?;
    let work = call("begin", || device.begin(devices, inputs, &plan));
    work.and_then(|mut work| {
        let outcome = refuses(what, || device.exchange(&mut work, step));
        release("drop of the work", work)?;
        outcome
    })
}
