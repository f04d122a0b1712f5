//! The MPI engine: [`InterProcess`](crate::InterProcess) on rsmpi over the system's MPI.
//!
//! | file             | job                                                                 |
//! |------------------|---------------------------------------------------------------------|
//! | `runtime.rs`     | `MpiRuntime`: `MPI_Init_thread(SERIALIZED)`, finalise, the MPI lock  |
//! | `communicator.rs`| `MpiInterProcess`: the status agreement, then the collective         |
//! | `packet.rs`      | the status packet: status words plus a small all-reduce's data       |
//! | `post.rs`        | starting non-blocking collectives on owned buffers (the only FFI     |
//! |                  | calls that take buffer pointers)                                     |
//! | `in_flight.rs`   | a pending operation owning its memory; the deadline-bounded wait     |
//! | `reductions.rs`  | datatype and operation per element type, the user-defined operations |

pub(crate) mod communicator;
pub(crate) mod in_flight;
pub(crate) mod packet;
pub(crate) mod post;
pub(crate) mod reductions;
pub(crate) mod runtime;
