//! Communicators: made-up handles of one rank each, on device 0.

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// The live communicators, and the last handle made.
static LIVE: Mutex<(Option<HashSet<usize>>, usize)> = Mutex::new((None, 0x9_0000));

fn with<R>(f: impl FnOnce(&mut HashSet<usize>, &mut usize) -> R) -> R {
    let mut guard = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
    let (set, next) = &mut *guard;
    f(set.get_or_insert_with(HashSet::new), next)
}

/// A new communicator's handle.
pub(crate) fn create() -> usize {
    with(|live, next| {
        *next += 16;
        live.insert(*next);
        *next
    })
}

/// Whether `comm` names a live communicator.
pub(crate) fn is_live(comm: usize) -> bool {
    with(|live, _| live.contains(&comm))
}

/// Destroys `comm`; `false` when it was not live.
pub(crate) fn destroy(comm: usize) -> bool {
    with(|live, _| live.remove(&comm))
}
