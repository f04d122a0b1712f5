//! The fold trees ruCCL's order gives a lowered all-reduce.
//!
//! ruCCL folds a combining step's values in a fixed order (senders below the receiver, the
//! receiver's own value, a local value, senders above) and promises every rank the same
//! all-reduce bits, which its checker proves by comparing *ordered* trees. MSCCL's reductions
//! are binary and commutative, so the checker of this crate compares unordered ones. A lowered
//! program can therefore fold `x ⊕ y` on one rank and `y ⊕ x` on another: the same bits on
//! MSCCL's executors, a refusal by ruCCL's checker. This replays the lowered steps on ordered
//! trees, chunk by chunk, and names the first output chunk where ranks differ.

use super::build::Built;
use crate::check::{Cells, Model};
use crate::error::MscclError;
use crate::program::Buffer;
use std::collections::HashMap;

/// Refuse a lowered all-reduce whose ranks end with different ordered trees.
pub(crate) fn check(model: &Model, cells: &Cells, built: &Built) -> Result<(), MscclError> {
    let world = model.world;
    let mut values: Vec<Vec<u32>> = built.cells.iter().map(|&count| vec![0; count]).collect();
    for (rank, values) in values.iter_mut().enumerate() {
        for (chunk, cell) in cells.local(rank, Buffer::Input, 0..cells.input).enumerate() {
            values[cell] = u32::try_from(1 + rank * cells.input + chunk).unwrap_or(u32::MAX);
        }
    }
    let mut interned: HashMap<(u32, u32), u32> = HashMap::new();
    let mut next = u32::try_from(1 + world * cells.input).unwrap_or(u32::MAX);
    for level in &built.levels {
        let mut updates = Vec::new();
        for &micro in level {
            let micro = &built.micros[micro];
            for chunk in 0..micro.lens.len() {
                let value = values[micro.from][micro.src + chunk];
                let own = values[micro.to][micro.dst + chunk];
                let new = if micro.combine {
                    let key = if micro.from < micro.to {
                        (value, own)
                    } else {
                        (own, value)
                    };
                    *interned.entry(key).or_insert_with(|| {
                        next = next.saturating_add(1);
                        next
                    })
                } else {
                    value
                };
                updates.push((micro.to, micro.dst + chunk, new));
            }
        }
        for (rank, cell, value) in updates {
            values[rank][cell] = value;
        }
    }
    let outputs: Vec<_> = (0..world)
        .map(|rank| cells.local(rank, Buffer::Output, 0..cells.output))
        .collect();
    for rank in 1..world {
        for chunk in 0..cells.output {
            let (mine, first) = (outputs[rank].start + chunk, outputs[0].start + chunk);
            if values[rank][mine] != values[0][first] {
                return Err(MscclError::FoldOrder {
                    gpu: rank,
                    chunk,
                    reason: String::new(),
                });
            }
        }
    }
    Ok(())
}
