//! The pools' unit tests, on a CPU: the caching engine against a counting upstream and events
//! completed by hand (`engine`, and `property`, which runs random sequences of calls), the
//! pinned pool's crate-private paths (`pinned`), and the soundness review's pool findings
//! (`soundness`).

// The fakes are shared with the integration tests, each of which uses part of them.
#[allow(dead_code)]
#[path = "../../../tests/support/mod.rs"]
mod fake;

mod engine;
mod pinned;
mod property;
mod soundness;
