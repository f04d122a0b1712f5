//! # ruccl-sim
//!
//! Everything that lets ruCCL be checked without a GPU: host-side element types and values shared
//! by every device adapter ([`host`]).
#![allow(missing_docs)] // placeholder until the sim crate lands

pub mod host;
