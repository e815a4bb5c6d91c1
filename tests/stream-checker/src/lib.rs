//! The happens-before model that checks `cuda-core`'s stream rule: vector clocks per stream
//! and host thread ([`clock`]), and the checker of memory accesses, owners and releases with
//! its reports ([`checker`]).
//!
//! Two drivers feed it: the simulated `libcuda` of `tests/sim-cuda-driver`, which runs queued
//! work late in random orders on machines without a GPU, and the checking driver of
//! `tests/checked-cuda-driver`, which sits between a program and the real `libcuda`.

pub mod checker;
pub mod clock;
