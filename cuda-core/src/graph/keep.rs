//! The keep-alive list a graph shares with its clones, parents and executable graphs.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

/// Values kept alive for as long as some graph or executable graph may use them.
#[derive(Default)]
pub(crate) struct KeepAlive {
    items: Mutex<Vec<Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeepAlive({} values)", self.len())
    }
}

impl KeepAlive {
    /// Adds one value.
    pub(crate) fn push(&self, value: Arc<dyn Any + Send + Sync>) {
        self.items.lock().unwrap_or_else(PoisonError::into_inner).push(value);
    }

    /// The number of values held directly.
    pub(crate) fn len(&self) -> usize {
        self.items.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether nothing is held, directly or through the lists held.
    pub(crate) fn is_empty(&self) -> bool {
        let items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.iter().all(|item| item.downcast_ref::<KeepAlive>().is_some_and(KeepAlive::is_empty))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_live_as_long_as_the_last_list_that_holds_them() {
        let value = Arc::new(5u32);
        let graph = Arc::new(KeepAlive::default());
        graph.push(value.clone());
        let exec = Arc::new(KeepAlive::default());
        exec.push(graph.clone());
        assert_eq!((graph.len(), exec.len()), (1, 1));
        assert_eq!(Arc::strong_count(&value), 2);
        drop(graph);
        assert_eq!(Arc::strong_count(&value), 2, "the executable graph's list still holds it");
        drop(exec);
        assert_eq!(Arc::strong_count(&value), 1);
        assert!(KeepAlive::default().is_empty());
        let nested = KeepAlive::default();
        nested.push(Arc::new(KeepAlive::default()));
        assert!(nested.is_empty(), "only empty lists inside");
        let inner = Arc::new(KeepAlive::default());
        inner.push(Arc::new(1u8));
        nested.push(inner);
        assert!(!nested.is_empty());
    }
}
