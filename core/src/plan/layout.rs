//! Where each collective keeps its input and finds its output in a rank's working buffer.
//!
//! | collective      | buffer      | placement(r) | output(r)            |
//! |-----------------|-------------|--------------|----------------------|
//! | all-reduce      | `n`         | 0            | `0..n`               |
//! | reduce-scatter  | `W·m`       | 0            | `r·m..(r+1)·m`       |
//! | all-gather      | `W·m`       | `r·m`        | `0..W·m`             |
//! | broadcast       | `n`         | 0            | `0..n`               |
//! | reduce          | `n`         | 0            | `0..n` at the root, `0..0` elsewhere |
//! | gather          | `W·m`       | `r·m`        | `0..W·m` at the root, `0..0` elsewhere |
//! | scatter         | `W·m`       | 0            | `r·m..(r+1)·m`       |
//! | all-to-all      | `W·m`       | 0            | `0..W·m`             |
//!
//! Every built-in layout but all-gather's and gather's works in place
//! (`buffer_len == input_len`).

use crate::Collective;
use std::ops::Range;

/// A generation's buffers: their length, where each rank's input goes, what each rank receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Elements of every rank's working buffer.
    pub(crate) buffer_len: usize,
    /// `placements[r]`: where rank `r`'s input starts; one per rank.
    pub(crate) placements: Vec<usize>,
    /// `outputs[r]`: the part of rank `r`'s buffer it receives; one per rank.
    pub(crate) outputs: Vec<Range<usize>>,
}

impl Layout {
    /// The built-in layout of `collective` on `world` ranks with inputs of `input_len` elements,
    /// or why the request is impossible.
    pub(crate) fn new(
        collective: Collective,
        world: usize,
        input_len: usize,
    ) -> Result<Layout, String> {
        if world == 0 {
            return Err("a collective needs at least one rank".to_owned());
        }
        if let Some(root) = collective.root() {
            if root >= world {
                return Err(format!(
                    "the root {root} is outside the world of {world} ranks"
                ));
            }
        }
        let Some(output_len) = collective.output_len(world, input_len) else {
            return Err(match collective {
                Collective::ReduceScatter(_)
                | Collective::Scatter { .. }
                | Collective::AllToAll => {
                    format!(
                        "an input of {input_len} elements does not split into {world} equal blocks"
                    )
                }
                _ => format!("{world} ranks × {input_len} elements overflow the address space"),
            });
        };
        // Only the root receives anything.
        let at_root = |root: usize| -> Vec<Range<usize>> {
            (0..world)
                .map(|rank| if rank == root { 0..output_len } else { 0..0 })
                .collect()
        };
        let layout = match collective {
            Collective::AllGather => Layout {
                buffer_len: output_len,
                placements: (0..world).map(|rank| rank * input_len).collect(),
                outputs: vec![0..output_len; world],
            },
            Collective::Gather { root } => Layout {
                buffer_len: output_len,
                placements: (0..world).map(|rank| rank * input_len).collect(),
                outputs: at_root(root),
            },
            Collective::ReduceScatter(_) | Collective::Scatter { .. } => Layout {
                buffer_len: input_len,
                placements: vec![0; world],
                outputs: (0..world)
                    .map(|rank| super::block(rank, output_len))
                    .collect(),
            },
            Collective::Reduce { root, .. } => Layout {
                buffer_len: input_len,
                placements: vec![0; world],
                outputs: at_root(root),
            },
            Collective::AllReduce(_) | Collective::Broadcast { .. } | Collective::AllToAll => {
                Layout {
                    buffer_len: input_len,
                    placements: vec![0; world],
                    outputs: vec![0..input_len; world],
                }
            }
        };
        Ok(layout)
    }
}
