//! tierkv-bench: benchmark programs that print figures (never tests that fail on time).
//! `engine-bench` measures the engine in-process beside `std::collections::HashMap`,
//! `protocol-bench` the request decoders, and `tierkv-bench` drives servers over the network
//! (`run`) and serves the network floor (`floor`).
//!
//! It must never feed numbers back into the code it measures, and nothing here is used by the
//! server.

#![warn(missing_docs)]

pub mod ab;
pub mod compare;
pub mod flash_compare;
pub mod fleet;
pub mod floor;
pub mod loadgen;
pub mod ports;
pub mod real;
pub mod resp;
pub mod workload;
