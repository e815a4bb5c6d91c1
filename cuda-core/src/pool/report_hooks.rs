//! Two ready-made hooks: [`DebugPrintHook`] and [`LineProfileHook`].

#![forbid(unsafe_code)]

use super::hooks::{HookEvent, MemoryHook, MemoryKind};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;

/// Writes one JSON line per event (CuPy's `DebugPrintHook`, with the memory's kind, `device`
/// or `pinned_host`, added), e.g.
/// `{"hook":"malloc","kind":"device","device_id":0,"size":1000,"mem_size":1024,"mem_ptr":140241027809280,"pmem_id":"0x5581c2f0","file":"src/main.rs","line":12}`.
pub struct DebugPrintHook {
    out: RefCell<Box<dyn Write>>,
}

impl std::fmt::Debug for DebugPrintHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DebugPrintHook")
    }
}

impl Default for DebugPrintHook {
    fn default() -> Self {
        DebugPrintHook::new(Box::new(std::io::stdout()))
    }
}

impl DebugPrintHook {
    /// Writes to `out`.
    pub fn new(out: Box<dyn Write>) -> Self {
        DebugPrintHook { out: RefCell::new(out) }
    }

    fn print(&self, hook: &str, e: &HookEvent) {
        let Ok(mut out) = self.out.try_borrow_mut() else { return };
        let file: String = e.location.file().chars().flat_map(char::escape_default).collect();
        // A failed write of a debug line is not worth failing an allocation for.
        let _ = writeln!(
            out,
            "{{\"hook\":\"{hook}\",\"kind\":\"{}\",\"device_id\":{},\"size\":{},\"mem_size\":{},\"mem_ptr\":{},\"pmem_id\":\"{:#x}\",\"file\":\"{file}\",\"line\":{}}}",
            e.kind.name(),
            e.device_id,
            e.size,
            e.mem_size,
            e.mem_ptr,
            e.pmem_id,
            e.location.line(),
        );
    }
}

impl MemoryHook for DebugPrintHook {
    fn name(&self) -> &str {
        "DebugPrintHook"
    }
    fn alloc_postprocess(&self, e: &HookEvent) {
        self.print("alloc", e);
    }
    fn malloc_postprocess(&self, e: &HookEvent) {
        self.print("malloc", e);
    }
    fn free_postprocess(&self, e: &HookEvent) {
        self.print("free", e);
    }
}

/// Bytes attributed to one call site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineUsage {
    /// Bytes the pool handed out from this site (rounded sizes).
    pub used_bytes: usize,
    /// Bytes the pool obtained from upstream for requests from this site.
    pub acquired_bytes: usize,
}

/// Attributes used and acquired bytes of device memory to the call sites that asked for them
/// (CuPy's `LineProfileHook`); sites are known through `#[track_caller]`. Events of pinned
/// host memory ([`MemoryKind::PinnedHost`]) are not counted, so that the figures stay those of
/// device memory.
#[derive(Debug, Default)]
pub struct LineProfileHook {
    sites: RefCell<BTreeMap<(&'static str, u32), LineUsage>>,
}

impl LineProfileHook {
    /// An empty profile.
    pub fn new() -> Self {
        Self::default()
    }

    /// The usage per site (file, line), in file and line order.
    pub fn usage(&self) -> Vec<((&'static str, u32), LineUsage)> {
        self.sites.borrow().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Writes the report: one line per site, then the totals; the error is the writer's.
    pub fn print_report(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut total = LineUsage::default();
        writeln!(out, "{:<60} {:>14} {:>14}", "site", "used bytes", "acquired bytes")?;
        for ((file, line), u) in self.usage() {
            writeln!(out, "{:<60} {:>14} {:>14}", format!("{file}:{line}"), u.used_bytes, u.acquired_bytes)?;
            total.used_bytes += u.used_bytes;
            total.acquired_bytes += u.acquired_bytes;
        }
        writeln!(out, "{:<60} {:>14} {:>14}", "total", total.used_bytes, total.acquired_bytes)
    }

    fn site(&self, e: &HookEvent, f: impl FnOnce(&mut LineUsage)) {
        if e.kind != MemoryKind::Device {
            return;
        }
        if let Ok(mut sites) = self.sites.try_borrow_mut() {
            f(sites.entry((e.location.file(), e.location.line())).or_default());
        }
    }
}

impl MemoryHook for LineProfileHook {
    fn name(&self) -> &str {
        "LineProfileHook"
    }
    fn alloc_postprocess(&self, e: &HookEvent) {
        self.site(e, |u| u.acquired_bytes += e.mem_size);
    }
    fn malloc_postprocess(&self, e: &HookEvent) {
        self.site(e, |u| u.used_bytes += e.mem_size);
    }
}
