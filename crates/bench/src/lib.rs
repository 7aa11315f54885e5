//! tierkv-bench: benchmark programs that print figures (never tests that fail on time).
//! `engine-bench` measures the engine in-process beside `std::collections::HashMap`; the
//! network load generator `tierkv-bench` arrives with issue 4 and shares the key and workload
//! generators here.
//!
//! It must never feed numbers back into the code it measures, and nothing here is used by the
//! server.

pub mod workload;
