//! Work promised to streams but queued only later, when a scope ends (an NCCL group queues its
//! calls at `ncclGroupEnd`): memory such work uses and that is given back inside the scope is
//! given back once the scope has queued the work.

#![forbid(unsafe_code)]

use std::collections::HashMap;
#[cfg(feature = "nccl")]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// A release of memory that an open scope's work uses, run once the scope has closed: with
/// `true` when the scope's work is queued (the memory may go back in stream order), `false`
/// when it may still be being queued in the background (the memory must be kept).
pub(crate) type Release = Box<dyn FnOnce(bool) + Send>;

/// A scope not closed yet.
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
enum Scope {
    /// Its work is not queued yet: the releases handed to it wait.
    Open(Vec<Release>),
    /// It cannot be known when its work is queued (a wait for it failed): it never closes, and
    /// a release handed to it keeps its memory at once.
    Abandoned,
}

/// The scopes open on any thread, by id, with the releases handed to them.
static OPEN: Mutex<Option<HashMap<u64, Scope>>> = Mutex::new(None);
#[cfg(feature = "nccl")]
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[cfg(feature = "nccl")]
/// Opens a scope and returns its id (never 0, never reused).
pub(crate) fn open_scope() -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    OPEN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(id, Scope::Open(Vec::new()));
    id
}

#[cfg(feature = "nccl")]
/// Closes the scope `id` once its work is queued (or will never be), and returns the releases
/// handed to it, for the caller to run.
pub(crate) fn close_scope(id: u64) -> Vec<Release> {
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    match open.as_mut().and_then(|m| m.remove(&id)) {
        Some(Scope::Open(releases)) => releases,
        Some(Scope::Abandoned) => {
            open.as_mut().map(|m| m.insert(id, Scope::Abandoned));
            Vec::new()
        }
        None => Vec::new(),
    }
}

#[cfg(feature = "nccl")]
/// Gives up the scope `id`, whose work may be queued at any time from now on (a wait for it
/// failed): it stays open for good, so that memory its work uses is never given back, and the
/// releases handed to it are returned, for the caller to run as not queued.
pub(crate) fn abandon_scope(id: u64) -> Vec<Release> {
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    match open.get_or_insert_with(HashMap::new).insert(id, Scope::Abandoned) {
        Some(Scope::Open(releases)) => releases,
        _ => Vec::new(),
    }
}

/// Whether the scope `id` has not closed yet.
pub(crate) fn is_open(id: u64) -> bool {
    OPEN.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|m| m.contains_key(&id))
}

/// Hands `release` to the scope `id`, to run once its work is queued; gives it back when the
/// scope has closed already (the work is queued: release now). A scope given up runs it at
/// once, as not queued (the memory is kept).
pub(crate) fn defer_to(id: u64, release: Release) -> Result<(), Release> {
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    match open.as_mut().and_then(|m| m.get_mut(&id)) {
        Some(Scope::Open(list)) => {
            list.push(release);
            Ok(())
        }
        Some(Scope::Abandoned) => {
            drop(open);
            release(false);
            Ok(())
        }
        None => Err(release),
    }
}

#[cfg(all(test, feature = "nccl"))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn releases_wait_for_their_scope_and_run_once() {
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = |ran: &Arc<AtomicUsize>| -> Release {
            let ran = ran.clone();
            Box::new(move |queued| {
                assert!(queued);
                ran.fetch_add(1, Ordering::SeqCst);
            })
        };
        let id = open_scope();
        assert!(is_open(id));
        assert!(defer_to(id, counter(&ran)).is_ok());
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a release ran inside its scope");
        let releases = close_scope(id);
        assert!(!is_open(id));
        assert_eq!(releases.len(), 1);
        releases.into_iter().for_each(|r| r(true));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        let late = defer_to(id, counter(&ran));
        assert!(late.is_err(), "a closed scope took a release");
        assert!(close_scope(id).is_empty());
    }

    #[test]
    fn an_abandoned_scope_keeps_what_it_is_handed_for_good() {
        let kept = Arc::new(AtomicUsize::new(0));
        let keeper = |kept: &Arc<AtomicUsize>| -> Release {
            let kept = kept.clone();
            Box::new(move |queued| {
                assert!(!queued, "memory of a scope given up was released");
                kept.fetch_add(1, Ordering::SeqCst);
            })
        };
        let id = open_scope();
        assert!(defer_to(id, keeper(&kept)).is_ok());
        let releases = abandon_scope(id);
        assert_eq!(releases.len(), 1);
        releases.into_iter().for_each(|r| r(false));
        assert!(is_open(id), "a scope given up counts as closed");
        assert!(defer_to(id, keeper(&kept)).is_ok(), "a scope given up handed a release back");
        assert_eq!(kept.load(Ordering::SeqCst), 2);
        assert!(close_scope(id).is_empty());
        assert!(is_open(id), "closing a scope given up reopened its memory");
    }
}
