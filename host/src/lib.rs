//! # ruccl-host
//!
//! Values on the host and the one trait through which harnesses move them onto and off any
//! device: [`HostValues`] (a vector of one [`ElementType`]) and [`HostTensors`] (upload,
//! download, which types and operations a device takes). The simulated device, the CUDA
//! executor's `harness` feature and the MPI engine all speak it, so none of them depends on
//! another's harness. The collective path never uses this crate: tensors stay on their device.
//!
//! ```
//! use ruccl_host::{ElementType, HostValues};
//!
//! let mut values = HostValues::from(vec![1.0_f32, 2.0, 3.0]);
//! assert_eq!(values.element_type(), ElementType::F32);
//! let tail = values.split_off(2);
//! assert_eq!(tail, HostValues::F32(vec![3.0]));
//! values.resize(4); // pads with zeros
//! assert_eq!(values.get_f64(3), Some(0.0));
//! // As the bytes an adapter copies into device memory, and back.
//! let bytes = values.to_ne_bytes();
//! assert_eq!(HostValues::from_ne_bytes(ElementType::F32, &bytes), Some(values));
//! ```
//!
//! | module    | job                                                                   |
//! |-----------|-----------------------------------------------------------------------|
//! | `values`  | [`HostValues`]: type, length, elements, cutting and gluing            |
//! | `bytes`   | the values as device memory holds them: bytes and raw pointers        |
//! | `tensors` | [`HostTensors`]: upload, download, supported types and operations     |
//! | `memory`  | [`mem_available`]: what the host has free, checked before allocating  |

mod bytes;
mod memory;
mod tensors;
mod values;

pub use memory::{mem_available, parse_mem_available};
pub use ruccl_core::{ElementType, ParseElementTypeError};
pub use tensors::HostTensors;
pub use values::HostValues;
