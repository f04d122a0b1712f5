//! Export round trip: every built-in plan (all collectives × algorithms × W ≤ 16) exported to
//! MSCCL XML parses, passes `check`, and lowers back to a plan ruCCL's checker accepts.

use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation};
use ruccl_msccl::{Outcome, export, parse};

/// Every collective kind, with roots at both ends of the world.
fn collectives(world: usize) -> Vec<Collective> {
    let mut all = Vec::new();
    for kind in Collective::KINDS {
        match kind.root() {
            Some(_) => {
                all.push(kind.with_root(0));
                if world > 1 {
                    all.push(kind.with_root(world - 1));
                }
            }
            None => all.push(kind),
        }
    }
    all.push(Collective::AllReduce(ReduceOperation::Max));
    all
}

/// Round-trip one plan; `Err` says what broke.
fn round_trip(plan: &Plan) -> Result<(), String> {
    let xml = export(plan);
    let program = parse(&xml).map_err(|error| format!("parse: {error}"))?;
    let report = program
        .check()
        .map_err(|violation| format!("check: {violation}"))?;
    if !matches!(report.outcome, Outcome::Verified { .. }) {
        return Err(format!("check: {:?}", report.outcome));
    }
    if let Err(reason) = &report.lowered {
        return Err(format!("report: {reason}"));
    }
    let operation = plan
        .collective()
        .operation()
        .unwrap_or(ReduceOperation::Sum);
    let options = ruccl_msccl::LowerOptions::default().with_operation(operation);
    let parts = program
        .lower_with(plan.input_len(), options)
        .map_err(|error| format!("lower: {error}"))?;
    let again = Plan::from_parts(parts).map_err(|violation| format!("from_parts: {violation}"))?;
    if again.collective() != plan.collective() {
        return Err(format!(
            "collective {} became {}",
            plan.collective(),
            again.collective()
        ));
    }
    Ok(())
}

#[test]
fn every_built_in_plan_round_trips_through_msccl_xml() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for world in 1..=16 {
        for collective in collectives(world) {
            for algorithm in Algorithm::BUILT_IN {
                for input_len in [world * 2, world * world * 3, world * 5 + world] {
                    let Ok(plan) = Plan::new(collective, algorithm, world, input_len) else {
                        continue;
                    };
                    checked += 1;
                    if let Err(problem) = round_trip(&plan) {
                        failures.push(format!(
                            "{collective} {algorithm} W={world} n={input_len}: {problem}"
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} plans");
    assert!(
        failures.is_empty(),
        "{} of {checked} fail:\n{}",
        failures.len(),
        failures[..failures.len().min(30)].join("\n")
    );
}
