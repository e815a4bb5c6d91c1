//! The keep-alive list a graph shares with its conditional bodies and executable graphs, and
//! the snapshots of it that clones and parent graphs hold.

#![forbid(unsafe_code)]

use crate::memory::HostAccess;
use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

/// One kept value.
pub(crate) type Kept = Arc<dyn Any + Send + Sync>;

/// Values kept alive for as long as some graph or executable graph may use them.
///
/// A list never holds another live list: a graph that copies another (a clone, a child-graph
/// node) holds a [`Snapshot`] of that graph's items at the moment of the copy, which is all the
/// copy can refer to. Snapshots only ever hold older snapshots, so no cycle of `Arc`s can form.
#[derive(Default)]
pub(crate) struct KeepAlive {
    items: Mutex<Vec<Kept>>,
}

/// The items a list held at one moment, frozen.
pub(crate) struct Snapshot {
    items: Vec<Kept>,
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeepAlive({} values)", self.len())
    }
}

impl KeepAlive {
    /// Adds one value.
    pub(crate) fn push(&self, value: Kept) {
        self.lock().push(value);
    }

    /// The number of values held directly.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is held, directly or through the snapshots held.
    pub(crate) fn is_empty(&self) -> bool {
        all_empty(&self.lock())
    }

    /// The items held now, as one value to keep: what a copy of the graph made now refers to.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::new(Snapshot { items: self.lock().clone() })
    }

    /// The pinned buffers that copies captured into the graph (or into graphs it copied) use:
    /// one entry per buffer, writes winning over reads, sorted by tracker (the order in which a
    /// launch locks them).
    pub(crate) fn host_accesses(&self) -> Vec<HostAccess> {
        let mut found = Vec::new();
        collect(&self.lock(), &mut found);
        found.sort_by_key(|a| Arc::as_ptr(&a.uses) as usize);
        found.dedup_by(|later, kept| {
            let same = Arc::ptr_eq(&later.uses, &kept.uses);
            if same {
                kept.writes |= later.writes;
            }
            same
        });
        found
    }

    /// The values of type `T` held directly (not through snapshots).
    pub(crate) fn items_of<T: Any + Send + Sync>(&self) -> Vec<Arc<T>> {
        self.lock().iter().filter_map(|item| item.clone().downcast::<T>().ok()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Snapshot {
    /// Whether nothing is held, directly or through older snapshots.
    pub(crate) fn is_empty(&self) -> bool {
        all_empty(&self.items)
    }
}

/// Appends the host accesses among `items`, and in the snapshots among them.
fn collect(items: &[Kept], found: &mut Vec<HostAccess>) {
    for item in items {
        if let Some(access) = item.downcast_ref::<HostAccess>() {
            found.push(access.clone());
        } else if let Some(snapshot) = item.downcast_ref::<Snapshot>() {
            collect(&snapshot.items, found);
        }
    }
}

/// Whether `items` hold nothing but empty snapshots.
pub(crate) fn all_empty(items: &[Kept]) -> bool {
    items.iter().all(|item| item.downcast_ref::<Snapshot>().is_some_and(Snapshot::is_empty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_live_as_long_as_the_last_list_that_holds_them() {
        let value = Arc::new(5u32);
        let graph = Arc::new(KeepAlive::default());
        graph.push(value.clone());
        let clone = KeepAlive::default();
        clone.push(graph.snapshot());
        assert_eq!((graph.len(), clone.len()), (1, 1));
        assert_eq!(Arc::strong_count(&value), 3);
        drop(graph);
        assert_eq!(Arc::strong_count(&value), 2, "the clone's snapshot still holds it");
        drop(clone);
        assert_eq!(Arc::strong_count(&value), 1);
        assert!(KeepAlive::default().is_empty());
        let nested = KeepAlive::default();
        nested.push(KeepAlive::default().snapshot());
        assert!(nested.is_empty(), "only empty snapshots inside");
        let inner = KeepAlive::default();
        inner.push(Arc::new(1u8));
        nested.push(inner.snapshot());
        assert!(!nested.is_empty());
    }

    /// G6 (a) of the soundness review: a graph that holds a clone of itself as a child used to
    /// hold the clone's live list, which held its own: a cycle that leaked every value.
    #[test]
    fn graphs_that_hold_each_other_do_not_form_a_cycle() {
        let value = Arc::new(7u64);
        let a = Arc::new(KeepAlive::default());
        a.push(value.clone());
        let b = Arc::new(KeepAlive::default());
        b.push(a.snapshot()); // b = a.try_clone()
        a.push(b.snapshot()); // a.add_child_graph_node(&b)
        b.push(a.snapshot()); // b.add_child_graph_node(&a)
        drop((a, b));
        assert_eq!(Arc::strong_count(&value), 1, "the value outlived both graphs");
    }
}
