//! The simulated memory: device allocations are host bytes at made-up addresses (never reused,
//! so the driver itself never hands out an address twice), pinned allocations are real host
//! memory whose address the program reads and writes directly.

use std::alloc::Layout;
use std::collections::BTreeMap;

/// Device addresses start here, far above any host address, so that the two never meet.
pub const DEVICE_BASE: u64 = 0xD000_0000_0000_0000;
/// Device allocations are aligned (and spaced) to this, as `cuMemAlloc` aligns.
const DEVICE_ALIGN: u64 = 512;
/// Pinned allocations are page-aligned.
const PINNED_ALIGN: usize = 4096;

#[derive(Debug)]
struct Block {
    bytes: Vec<u8>,
    live: bool,
}

#[derive(Debug)]
struct Pinned {
    layout: Layout,
    live: bool,
}

/// Physical memory of the virtual memory management calls (`cuMemCreate`).
#[derive(Debug)]
struct Physical {
    bytes: Vec<u8>,
    released: bool,
}

/// Physical memory mapped at an address (`cuMemMap`); an unmapped one is kept until the next
/// reset, or until the addresses are mapped again, so that late work still lands somewhere:
/// in the memory mapped there since, as it would on a device.
#[derive(Debug)]
struct Mapped {
    handle: u64,
    size: u64,
    live: bool,
}

/// Every allocation made so far: live ones, and freed ones kept until the next reset so that
/// late work (which the checker reports) still lands in memory the simulator owns.
#[derive(Debug)]
pub struct Memory {
    device: BTreeMap<u64, Block>,
    pinned: BTreeMap<u64, Pinned>,
    next_device: u64,
    /// Reserved address ranges (`cuMemAddressReserve`): start and size.
    reserved: BTreeMap<u64, u64>,
    physical: BTreeMap<u64, Physical>,
    mapped: BTreeMap<u64, Mapped>,
    next_handle: u64,
}

impl Default for Memory {
    fn default() -> Memory {
        Memory {
            device: BTreeMap::new(),
            pinned: BTreeMap::new(),
            next_device: DEVICE_BASE,
            reserved: BTreeMap::new(),
            physical: BTreeMap::new(),
            mapped: BTreeMap::new(),
            next_handle: 0x7_0000,
        }
    }
}

/// The allocation granularity the simulated device reports for physical memory (a real one
/// reports 2 MiB; smaller keeps the simulated memory cheap).
pub const GRANULARITY: usize = 64 << 10;

impl Memory {
    /// `size` bytes of zeroed device memory; its address.
    pub fn alloc_device(&mut self, size: usize) -> u64 {
        let ptr = self.next_device;
        let span = (size as u64).max(1).next_multiple_of(DEVICE_ALIGN);
        self.next_device += span + DEVICE_ALIGN;
        self.device.insert(ptr, Block { bytes: vec![0; size.max(1)], live: true });
        ptr
    }

    /// The size of the live device allocation that starts at `ptr`.
    pub fn device_size(&self, ptr: u64) -> Option<usize> {
        self.device.get(&ptr).filter(|b| b.live).map(|b| b.bytes.len())
    }

    /// Marks the device allocation at `ptr` freed; its size, or `None` when it is no live
    /// allocation.
    pub fn free_device(&mut self, ptr: u64) -> Option<usize> {
        let block = self.device.get_mut(&ptr).filter(|b| b.live)?;
        block.live = false;
        Some(block.bytes.len())
    }

    /// `size` bytes of zeroed page-aligned host memory; null when the host has none.
    pub fn alloc_pinned(&mut self, size: usize) -> *mut u8 {
        let Ok(layout) = Layout::from_size_align(size.max(1), PINNED_ALIGN) else {
            return std::ptr::null_mut();
        };
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if !ptr.is_null() {
            self.pinned.insert(ptr as u64, Pinned { layout, live: true });
        }
        ptr
    }

    /// The size of the live pinned allocation that starts at `ptr`.
    pub fn pinned_size(&self, ptr: u64) -> Option<usize> {
        self.pinned.get(&ptr).filter(|p| p.live).map(|p| p.layout.size())
    }

    /// Marks the pinned allocation at `ptr` freed (its memory stays until the next reset); its
    /// size, or `None` when it is no live allocation.
    pub fn free_pinned(&mut self, ptr: u64) -> Option<usize> {
        let p = self.pinned.get_mut(&ptr).filter(|p| p.live)?;
        p.live = false;
        Some(p.layout.size())
    }

    /// Reserves `size` bytes of addresses aligned to `align` (0: the granularity).
    pub fn reserve(&mut self, size: u64, align: u64) -> u64 {
        let align = align.max(GRANULARITY as u64);
        let ptr = self.next_device.next_multiple_of(align);
        self.next_device = ptr + size.next_multiple_of(DEVICE_ALIGN) + DEVICE_ALIGN;
        self.reserved.insert(ptr, size);
        ptr
    }

    /// Frees a reservation made by [`reserve`](Self::reserve) with these bounds; `false` when
    /// there is none, or something is mapped in it.
    pub fn address_free(&mut self, ptr: u64, size: u64) -> bool {
        let inside = |a: u64| a >= ptr && a < ptr + size;
        if self.reserved.get(&ptr) != Some(&size) || self.mapped.iter().any(|(&a, m)| m.live && inside(a)) {
            return false;
        }
        self.reserved.remove(&ptr);
        true
    }

    /// `size` bytes of zeroed physical memory; its handle.
    pub fn create_physical(&mut self, size: usize) -> u64 {
        self.next_handle += 1;
        self.physical.insert(self.next_handle, Physical { bytes: vec![0; size], released: false });
        self.next_handle
    }

    /// Releases physical memory (kept while mapped, as the driver keeps it).
    pub fn release_physical(&mut self, handle: u64) -> bool {
        match self.physical.get_mut(&handle) {
            Some(p) if !p.released => {
                p.released = true;
                true
            }
            _ => false,
        }
    }

    /// Maps all of the physical memory `handle` (of `size` bytes) at `ptr`, inside a
    /// reservation and over nothing mapped; `false` otherwise. Unmapped mappings it covers are
    /// forgotten: late work for them lands in this one.
    pub fn map(&mut self, ptr: u64, size: u64, handle: u64) -> bool {
        let physical_ok =
            self.physical.get(&handle).is_some_and(|p| !p.released && p.bytes.len() as u64 == size);
        let reserved = self.reserved.range(..=ptr).next_back().is_some_and(|(&a, &s)| ptr + size <= a + s);
        let overlaps = |(&a, m): (&u64, &Mapped)| a < ptr + size && ptr < a + m.size;
        if !physical_ok || !reserved || self.mapped.iter().filter(|(_, m)| m.live).any(overlaps) {
            return false;
        }
        let dead: Vec<u64> = self.mapped.iter().filter(|e| overlaps(*e)).map(|(&a, _)| a).collect();
        dead.iter().for_each(|a| {
            self.mapped.remove(a);
        });
        self.mapped.insert(ptr, Mapped { handle, size, live: true });
        true
    }

    /// Unmaps what is mapped at exactly `ptr..ptr + size`; `false` when nothing is.
    pub fn unmap(&mut self, ptr: u64, size: u64) -> bool {
        match self.mapped.get_mut(&ptr) {
            Some(m) if m.live && m.size == size => {
                m.live = false;
                true
            }
            _ => false,
        }
    }

    /// Whether `len` bytes at `ptr` are mapped.
    pub fn is_mapped(&self, ptr: u64, len: u64) -> bool {
        self.mapped_of(ptr, len).is_some_and(|a| self.mapped.get(&a).is_some_and(|m| m.live))
    }

    fn mapped_of(&self, addr: u64, len: u64) -> Option<u64> {
        let (&base, m) = self.mapped.range(..=addr).next_back()?;
        (addr.saturating_add(len) <= base + m.size).then_some(base)
    }

    /// Gives back what was freed: no work refers to it any more (called with nothing queued).
    pub fn sweep(&mut self) {
        self.mapped.retain(|_, m| m.live);
        let mapped: Vec<u64> = self.mapped.values().map(|m| m.handle).collect();
        self.physical.retain(|h, p| !p.released || mapped.contains(h));
        self.device.retain(|_, b| b.live);
        let dead: Vec<(u64, Layout)> =
            self.pinned.iter().filter(|(_, p)| !p.live).map(|(&a, p)| (a, p.layout)).collect();
        for (addr, layout) in dead {
            self.pinned.remove(&addr);
            // SAFETY: allocated in `alloc_pinned` with this layout, freed once (removed above).
            unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        }
    }

    /// Whether `len` bytes at `addr` lie in one allocation the simulator made (live or not).
    pub fn is_tracked(&self, addr: u64, len: u64) -> bool {
        self.block_of(addr, len).is_some()
            || self.pinned_of(addr, len).is_some()
            || self.mapped_of(addr, len).is_some()
    }

    /// The end of the live allocation (device or pinned) that holds `addr`, if any.
    pub fn live_end(&self, addr: u64) -> Option<u64> {
        if let Some((&base, b)) = self.device.range(..=addr).next_back() {
            let end = base + b.bytes.len() as u64;
            if b.live && addr < end {
                return Some(end);
            }
        }
        if let Some((&base, m)) = self.mapped.range(..=addr).next_back() {
            if m.live && addr < base + m.size {
                return Some(base + m.size);
            }
        }
        let (&base, p) = self.pinned.range(..=addr).next_back()?;
        let end = base + p.layout.size() as u64;
        (p.live && addr < end).then_some(end)
    }

    fn block_of(&self, addr: u64, len: u64) -> Option<u64> {
        let (&base, block) = self.device.range(..=addr).next_back()?;
        (addr.saturating_add(len) <= base + block.bytes.len() as u64).then_some(base)
    }

    fn pinned_of(&self, addr: u64, len: u64) -> Option<u64> {
        let (&base, p) = self.pinned.range(..=addr).next_back()?;
        (addr.saturating_add(len) <= base + p.layout.size() as u64).then_some(base)
    }

    /// Where the `len` bytes at `addr` are: inside a device or pinned allocation, or (below
    /// [`DEVICE_BASE`]) the caller's own host memory, which a synchronous copy reads or writes
    /// while the caller waits. `None` for device addresses outside every allocation.
    pub fn locate(&mut self, addr: u64, len: u64) -> Option<*mut u8> {
        if addr >= DEVICE_BASE {
            if let Some(base) = self.block_of(addr, len) {
                let block = self.device.get_mut(&base)?;
                return Some(block.bytes[(addr - base) as usize..].as_mut_ptr());
            }
            let base = self.mapped_of(addr, len)?;
            let handle = self.mapped.get(&base)?.handle;
            let physical = self.physical.get_mut(&handle)?;
            return Some(physical.bytes[(addr - base) as usize..].as_mut_ptr());
        }
        Some(addr as *mut u8)
    }
}
