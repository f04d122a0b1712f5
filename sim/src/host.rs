//! Element types and host-side values, and the [`HostTensors`] trait through which test
//! harnesses (the conformance suite, the perf CLI) move values onto and off any device: the
//! `ruccl-host` crate's, re-exported so harness code needs one import path.

pub use ruccl_host::{ElementType, HostTensors, HostValues, ParseElementTypeError};
