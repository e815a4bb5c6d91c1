//! The kernels the one-call path ([`kernel`](super::kernel)) loaded, found again by context,
//! source, name and options with no compile-cache lookup, no SHA-256 and no module load.
//!
//! # Which contexts, and for how long
//!
//! A loaded kernel is a [`SharedFunction`], which holds its module, which holds its context.
//! A table that holds kernels therefore holds their contexts: owned by a context it would be a
//! reference cycle, and as a process-wide table it would keep every created context alive
//! until the process ends. So only **primary contexts** are served: the table holds each
//! entry's primary context retained for as long as the entry lives, as the CUDA runtime keeps
//! a device's primary context and CuPy its per-device kernel cache for the life of the
//! process. Other contexts (created, green, borrowed, another library's) are not served: each
//! call compiles through the compile cache and loads a module, and the caller keeps the
//! kernel it got.
//!
//! An entry is found by the raw handle of its primary context. That handle names the same
//! context for as long as the entry lives, because the entry keeps the context retained: a
//! primary context released to its end (and possibly made again at the same address) has no
//! entry left to be found under that address. [`forget`](LoadedKernels::forget) drops every
//! entry; what a caller still holds stays loaded, the rest is unloaded, and a primary context
//! nobody else holds is released.
//!
//! # The lookup
//!
//! Entries are filed under a 64-bit checksum of their source. The checksum of the source last
//! seen at an address and length is remembered, so that a source kept in one place (a
//! `const`, a `static`, a `String` held by the caller) is not read whole to be hashed on each
//! call; what is found there is always compared with the entry's own copy of the source
//! (one `memcmp`), name and options, so a freed buffer reused for another source finds
//! nothing stale. The table grows by one entry per kernel loaded (its source, name, options
//! and module) until [`forget`](LoadedKernels::forget); the remembered addresses are capped at
//! [`SEEN_LIMIT`].

#![forbid(unsafe_code)]

use super::checksum::checksum;
use super::options::CompileOptions;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The most source addresses remembered; past it the memory of addresses starts afresh (the
/// entries stay, and are found by their checksum).
pub(crate) const SEEN_LIMIT: usize = 4096;

/// One loaded kernel and what it was loaded from.
struct Entry<V> {
    /// The identity of the context (the raw handle of a primary context the value keeps).
    context: usize,
    source: Box<str>,
    name: Box<str>,
    options: CompileOptions,
    value: V,
}

impl<V> Entry<V> {
    fn is(&self, context: usize, source: &str, name: &str, options: &CompileOptions) -> bool {
        self.context == context && *self.name == *name && *self.source == *source && self.options == *options
    }
}

struct Table<V> {
    /// The entries by the checksum of their source.
    by_source: HashMap<u64, Vec<Entry<V>>>,
    /// The checksum of the source last seen at an address and length.
    seen_at: HashMap<(usize, usize), u64>,
}

impl<V: Clone> Table<V> {
    fn find(
        &self,
        sum: u64,
        context: usize,
        source: &str,
        name: &str,
        options: &CompileOptions,
    ) -> Option<V> {
        let entries = self.by_source.get(&sum)?;
        entries.iter().find(|e| e.is(context, source, name, options)).map(|e| e.value.clone())
    }

    fn remember(&mut self, source: &str, sum: u64) {
        if self.seen_at.len() >= SEEN_LIMIT {
            self.seen_at.clear();
        }
        self.seen_at.insert(address(source), sum);
    }
}

/// The address and length of `source`, under which its checksum is remembered.
fn address(source: &str) -> (usize, usize) {
    (source.as_ptr() as usize, source.len())
}

/// Loaded kernels (`V`) by context identity, source, name and options; see the module's
/// documentation. `Send + Sync` when `V` is.
pub(crate) struct LoadedKernels<V> {
    table: Mutex<Table<V>>,
}

impl<V: Clone> LoadedKernels<V> {
    /// An empty table.
    pub(crate) fn new() -> Self {
        LoadedKernels { table: Mutex::new(Table { by_source: HashMap::new(), seen_at: HashMap::new() }) }
    }

    fn lock(&self) -> MutexGuard<'_, Table<V>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kernel loaded for `context` from `source`, `name` and `options`, if there is one.
    #[inline]
    pub(crate) fn get(
        &self,
        context: usize,
        source: &str,
        name: &str,
        options: &CompileOptions,
    ) -> Option<V> {
        {
            let table = self.lock();
            if let Some(&sum) = table.seen_at.get(&address(source)) {
                if let Some(value) = table.find(sum, context, source, name, options) {
                    return Some(value);
                }
            }
        }
        self.get_by_contents(context, source, name, options)
    }

    /// [`get`](Self::get) for a source not seen at this address before: hashed whole (outside
    /// the lock), and its address remembered when an entry holds it.
    #[cold]
    fn get_by_contents(
        &self,
        context: usize,
        source: &str,
        name: &str,
        options: &CompileOptions,
    ) -> Option<V> {
        let sum = checksum(source.as_bytes());
        let mut table = self.lock();
        let value = table.find(sum, context, source, name, options)?;
        table.remember(source, sum);
        Some(value)
    }

    /// Files `value` as the kernel loaded for `context` from `source`, `name` and `options`,
    /// and returns it; if another thread filed one meanwhile, that one is kept and returned and
    /// `value` is dropped (after the lock is let go: dropping a module unloads it).
    pub(crate) fn insert(
        &self,
        context: usize,
        source: &str,
        name: &str,
        options: &CompileOptions,
        value: V,
    ) -> V {
        let sum = checksum(source.as_bytes());
        let mut table = self.lock();
        table.remember(source, sum);
        if let Some(existing) = table.find(sum, context, source, name, options) {
            drop(table);
            drop(value);
            return existing;
        }
        let entry = Entry {
            context,
            source: source.into(),
            name: name.into(),
            options: options.clone(),
            value: value.clone(),
        };
        table.by_source.entry(sum).or_default().push(entry);
        value
    }

    /// Drops every entry (outside the lock) and returns how many there were.
    pub(crate) fn forget(&self) -> usize {
        let entries = {
            let mut table = self.lock();
            table.seen_at.clear();
            std::mem::take(&mut table.by_source)
        };
        entries.values().map(Vec::len).sum()
    }

    /// How many kernels the table holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_source.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::Arc;

    /// A kernel stand-in: which load made it, and a count of the holders of what it keeps.
    #[derive(Clone, Debug)]
    struct Loaded {
        load: usize,
        keeps: Arc<()>,
    }

    /// The table's answer, or a new load (counted) filed in it, as the one-call path does.
    fn kernel(
        table: &LoadedKernels<Loaded>,
        loads: &Cell<usize>,
        context: usize,
        source: &str,
        name: &str,
        options: &CompileOptions,
    ) -> Loaded {
        if let Some(hit) = table.get(context, source, name, options) {
            return hit;
        }
        loads.set(loads.get() + 1);
        table.insert(context, source, name, options, Loaded { load: loads.get(), keeps: Arc::new(()) })
    }

    const SOURCE: &str = "extern \"C\" __global__ void k(float *x) { x[0] = 1; }";

    #[test]
    fn a_second_call_is_answered_without_a_load_and_everything_in_the_key_counts() {
        let table = LoadedKernels::new();
        let loads = Cell::new(0);
        let defaults = CompileOptions::new();
        let first = kernel(&table, &loads, 0x1000, SOURCE, "k", &defaults);
        let again = kernel(&table, &loads, 0x1000, SOURCE, "k", &defaults);
        assert_eq!((first.load, again.load, loads.get()), (1, 1, 1));
        assert!(Arc::ptr_eq(&first.keeps, &again.keeps), "the same kernel");

        // The same text at another address is found by its contents.
        let copy = String::from(SOURCE);
        assert_eq!(kernel(&table, &loads, 0x1000, &copy, "k", &defaults).load, 1);
        // Each part of the key makes another kernel.
        assert_eq!(kernel(&table, &loads, 0x2000, SOURCE, "k", &defaults).load, 2, "another context");
        assert_eq!(kernel(&table, &loads, 0x1000, SOURCE, "k2", &defaults).load, 3, "another name");
        let fast = CompileOptions::new().fast_math(true);
        assert_eq!(kernel(&table, &loads, 0x1000, SOURCE, "k", &fast).load, 4, "other options");
        assert_eq!(kernel(&table, &loads, 0x1000, &SOURCE[1..], "k", &defaults).load, 5, "another source");
        assert_eq!(table.len(), 5);
        assert_eq!(kernel(&table, &loads, 0x1000, SOURCE, "k", &defaults).load, 1, "still there");
    }

    /// A buffer that held one source and then another, at the same address and length, finds
    /// the kernel of what it holds now.
    #[test]
    fn a_reused_buffer_finds_the_kernel_of_its_new_contents() {
        let table = LoadedKernels::new();
        let loads = Cell::new(0);
        let defaults = CompileOptions::new();
        let mut buffer = String::from("__global__ void a() {}");
        let a = kernel(&table, &loads, 0x1000, &buffer, "k", &defaults);
        let at = buffer.as_ptr();
        buffer.replace_range(.., "__global__ void b() {}");
        assert_eq!(buffer.as_ptr(), at, "the same storage");
        let b = kernel(&table, &loads, 0x1000, &buffer, "k", &defaults);
        assert_eq!((a.load, b.load), (1, 2), "the old kernel is not handed out for the new text");
        buffer.replace_range(.., "__global__ void a() {}");
        assert_eq!(kernel(&table, &loads, 0x1000, &buffer, "k", &defaults).load, 1);
    }

    /// The table keeps what its kernels keep (their modules, and through them their contexts)
    /// until it forgets them; a context at the same address afterwards gets a new load.
    #[test]
    fn entries_keep_their_kernels_until_forgotten_and_then_nothing_stale_is_found() {
        let table = LoadedKernels::new();
        let loads = Cell::new(0);
        let defaults = CompileOptions::new();
        let first = kernel(&table, &loads, 0x1000, SOURCE, "k", &defaults);
        let keeps = Arc::downgrade(&first.keeps);
        drop(first);
        assert!(keeps.upgrade().is_some(), "held by the table");
        assert_eq!(table.forget(), 1);
        assert!(keeps.upgrade().is_none(), "let go by forget");
        assert_eq!(table.len(), 0);
        let after = kernel(&table, &loads, 0x1000, SOURCE, "k", &defaults);
        assert_eq!(after.load, 2, "a context at the same address gets a kernel loaded afresh");
    }

    #[test]
    fn a_kernel_filed_twice_keeps_the_first() {
        let table = LoadedKernels::new();
        let defaults = CompileOptions::new();
        let first = Loaded { load: 1, keeps: Arc::new(()) };
        let second = Loaded { load: 2, keeps: Arc::new(()) };
        let late = Arc::downgrade(&second.keeps);
        assert_eq!(table.insert(0x1000, SOURCE, "k", &defaults, first).load, 1);
        assert_eq!(table.insert(0x1000, SOURCE, "k", &defaults, second).load, 1);
        assert!(late.upgrade().is_none(), "the second is dropped");
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn remembered_addresses_are_capped() {
        let table = LoadedKernels::new();
        let loads = Cell::new(0);
        let defaults = CompileOptions::new();
        let sources: Vec<String> = (0..SEEN_LIMIT + 10).map(|i| format!("// {i}\n{SOURCE}")).collect();
        for s in &sources {
            kernel(&table, &loads, 0x1000, s, "k", &defaults);
        }
        assert!(table.lock().seen_at.len() <= SEEN_LIMIT);
        assert_eq!(table.len(), sources.len());
        assert_eq!(kernel(&table, &loads, 0x1000, &sources[0], "k", &defaults).load, 1, "found by contents");
        assert_eq!(loads.get(), sources.len());
    }
}
