//! Random sequences of allocate, free, record-stream and release, checked after every step.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::fake::{CountingUpstream, ManualEvents};
use crate::alloc::DeviceAllocation;
use crate::pool::core::{ALLOCATION_UNIT as UNIT, PoolCore};
use cuhost_driver_sys as sys;
use proptest::prelude::*;
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: usize, stream: usize },
    Free { pick: usize },
    FreeRecorded { pick: usize, other: usize },
    Complete { stream: usize },
    FreeAll { stream: Option<usize> },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..10 * UNIT, 0..3usize).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (any::<usize>(), 0..3usize).prop_map(|(pick, other)| Op::FreeRecorded { pick, other }),
        1 => (0..3usize).prop_map(|stream| Op::Complete { stream }),
        1 => proptest::option::of(0..3usize).prop_map(|stream| Op::FreeAll { stream }),
    ]
}

fn stream(n: usize) -> sys::CUstream {
    (0x20_0000 + n * 0x40) as sys::CUstream
}

fn check(core: &PoolCore, up: &CountingUpstream, live: &[DeviceAllocation]) -> Result<(), TestCaseError> {
    core.check_invariants().map_err(TestCaseError::fail)?;
    let mut ranges: Vec<(u64, u64)> =
        live.iter().filter(|a| a.size > 0).map(|a| (a.ptr, a.ptr + a.size as u64)).collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        prop_assert!(w[0].1 <= w[1].0, "live blocks overlap: {:?}", w);
    }
    let upstream_live: usize = up.get().live.values().sum();
    prop_assert_eq!(core.total_bytes(), upstream_live);
    prop_assert!(core.used_bytes() >= live.iter().map(|a| a.size).sum::<usize>());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn bookkeeping_holds_under_random_use(ops in proptest::collection::vec(op(), 1..200), limit in prop_oneof![Just(0usize), (8..40usize).prop_map(|u| u * UNIT)]) {
        let up = Arc::new(CountingUpstream::default());
        let ev = Arc::new(ManualEvents::default());
        let core = PoolCore::new(up.clone(), ev.clone());
        core.set_limit(limit);
        let mut live: Vec<DeviceAllocation> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { size, stream: s } => match core.malloc(size, stream(s)) {
                    Ok(a) => {
                        prop_assert!(a.size >= size && a.size % UNIT == 0);
                        live.push(a);
                    }
                    Err(e) => prop_assert!(limit != 0, "only a limit can refuse: {e}"),
                },
                Op::Free { pick } if !live.is_empty() => {
                    let a = live.swap_remove(pick % live.len());
                    core.free(a, &[]).map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                Op::FreeRecorded { pick, other } if !live.is_empty() => {
                    let a = live.swap_remove(pick % live.len());
                    core.free(a, &[stream(other)]).map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                Op::Complete { stream: s } => ev.complete(stream(s)),
                Op::FreeAll { stream: s } => core.free_all_blocks(s.map(stream)).map_err(|e| TestCaseError::fail(e.to_string()))?,
                _ => {}
            }
            check(&core, &up, &live)?;
        }
        // Nothing leaks: give everything back and the upstream holds nothing.
        for a in live.drain(..) {
            core.free(a, &[]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        for s in 0..3 {
            ev.complete(stream(s));
        }
        core.free_all_blocks(None).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(core.used_bytes(), 0);
        prop_assert_eq!(core.total_bytes(), 0);
        prop_assert!(up.get().live.is_empty());
        check(&core, &up, &[])?;
    }
}
