//! How long the symbolic checker takes on the largest built-in plans it takes on: every
//! collective and algorithm at W = 64 with the longest input whose buffers stay within the
//! checker's bound (about four million buffer elements over all ranks).
//!
//! `cargo run --release -p ruccl-core --example verify_largest`

use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation, verify};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = 64;
    // The checker's bound is 2^22 buffer elements over all ranks: 65 536 per rank at W = 64.
    let per_rank = (1 << 22) / world;
    let collectives = [
        Collective::AllReduce(ReduceOperation::Sum),
        Collective::ReduceScatter(ReduceOperation::Sum),
        Collective::AllGather,
        Collective::Broadcast { root: 5 },
        Collective::Reduce {
            op: ReduceOperation::Sum,
            root: 5,
        },
        Collective::Gather { root: 5 },
        Collective::Scatter { root: 5 },
        Collective::AllToAll,
    ];
    println!(
        "{:<28} {:<17} {:>8} {:>6} {:>10}",
        "collective", "algorithm", "n", "steps", "verify ms"
    );
    for collective in collectives {
        // The input whose buffer is `per_rank` elements (a multiple of W where blocks need it).
        let input_len = match collective {
            Collective::AllGather | Collective::Gather { .. } => per_rank / world,
            _ => per_rank,
        };
        for algorithm in [
            Algorithm::Ring,
            Algorithm::Direct,
            Algorithm::HalvingDoubling,
        ] {
            let Ok(plan) = Plan::new(collective, algorithm, world, input_len) else {
                continue; // all-to-all: direct only; a size an algorithm refuses for its traffic
            };
            let start = Instant::now();
            verify(&plan)?;
            let elapsed = start.elapsed();
            println!(
                "{:<28} {:<17} {:>8} {:>6} {:>10.1}",
                collective.to_string(),
                algorithm.to_string(),
                input_len,
                plan.steps().len(),
                elapsed.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}
