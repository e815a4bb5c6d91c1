//! [`PinnedMemoryPool`]: CuPy's pool of page-locked host memory.

use super::core::round_size;
use super::hooks::{self, HookEvent, MemoryKind, Point};
use crate::alloc::{DriverEvents, HostAllocator, recorded_work_is_over};
use crate::alloc::{PinnedAllocation, PinnedAllocator, StreamEvents, StreamRef};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::event::Event;
use cuhost_driver_sys as sys;
use std::panic::Location;
use std::sync::{Arc, Mutex, MutexGuard};

/// Size classes: powers of two, so 64 cover every size.
const CLASSES: usize = usize::BITS as usize;

/// What a buffer kept from reuse waits for.
enum Done {
    /// An event of the pool's [`StreamEvents`], recorded on a stream when the buffer came back.
    Recorded(u64),
    /// The event a [`PinnedBuffer`](crate::memory::PinnedBuffer)'s copy tracker recorded after the
    /// buffer's copies, handed over with it: it covers those copies whatever stream, thread or
    /// context they ran on. Destroyed once complete.
    Copies(Event),
}

/// A buffer kept from reuse until its copies are done.
struct Pending {
    ptr: usize,
    size: usize,
    done: Done,
}

/// Whether the work before a copy event's last recording can no longer touch the memory
/// (see [`recorded_work_is_over`]: an event last recorded in a stream capture keeps it); never
/// blocks.
fn copies_done(event: &Event) -> bool {
    // SAFETY: the event is alive while `event` is; querying needs no current context.
    recorded_work_is_over(unsafe { sys::cuEventQuery(event.as_raw()) })
}

struct State {
    /// Free buffers (addresses) by class (log2 of the size).
    free: [Vec<usize>; CLASSES],
    /// Buffers kept until a copy's event completes (one entry per event).
    pending: Vec<Pending>,
    idle_events: Vec<u64>,
    used: usize,
    total: usize,
    n_free: usize,
}

impl Default for State {
    fn default() -> Self {
        State {
            free: std::array::from_fn(|_| Vec::new()),
            pending: Vec::new(),
            idle_events: Vec::new(),
            used: 0,
            total: 0,
            n_free: 0,
        }
    }
}

impl State {
    fn poll(&mut self, events: &dyn StreamEvents) {
        let mut k = 0;
        while k < self.pending.len() {
            let complete = match &self.pending[k].done {
                Done::Recorded(event) => events.is_complete(*event),
                Done::Copies(event) => copies_done(event),
            };
            if !complete {
                k += 1;
                continue;
            }
            let Pending { ptr, size, done } = self.pending.swap_remove(k);
            match done {
                Done::Recorded(event) => self.idle_events.push(event),
                Done::Copies(event) => drop(event),
            }
            // A buffer recorded on several streams has one entry per event; the last one frees it.
            if !self.pending.iter().any(|p| p.ptr == ptr) {
                self.used -= size;
                self.free[class_of(size)].push(ptr);
                self.n_free += 1;
            }
        }
    }
}

fn class_of(size: usize) -> usize {
    size.trailing_zeros() as usize
}

/// The size a request is served with: rounded to 512, then up to a power of two.
pub(crate) fn pinned_size(size: usize) -> Option<usize> {
    round_size(size)?.checked_next_power_of_two()
}

/// A pool of page-locked host memory, as CuPy's `PinnedMemoryPool`
/// ([CuPy](https://docs.cupy.dev/en/stable/reference/generated/cupy.cuda.PinnedMemoryPool.html)).
///
/// Sizes are rounded up to 512 bytes and then to a power of two; a freed buffer is reused for
/// requests of exactly its size class (no split or merge). A buffer that an asynchronous copy
/// reads or writes is kept from reuse until the copy is done:
/// [`PinnedBuffer`](crate::memory::PinnedBuffer)s record their copies themselves, with an event in the
/// context of the copy's stream, and hand that event to the pool when they are dropped
/// ([`PinnedAllocator::deallocate_after`]); the pool keeps the buffer until the event has
/// completed, without waiting, whatever device, context or thread the copies ran on.
pub struct PinnedMemoryPool {
    state: Mutex<State>,
    upstream: Arc<dyn PinnedAllocator>,
    events: Arc<dyn StreamEvents>,
}

impl std::fmt::Debug for PinnedMemoryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedMemoryPool").field("total_bytes", &self.total_bytes()).finish()
    }
}

impl PinnedMemoryPool {
    /// A pool of portable `cuMemHostAlloc` memory, with events in `context`.
    pub fn new(context: &Context) -> PinnedMemoryPool {
        PinnedMemoryPool::with_allocator(context, Arc::new(HostAllocator::new(context)))
    }

    /// A pool on `upstream` (any [`PinnedAllocator`], e.g. the runtime's), with the driver's
    /// events in `context` for memory given back behind streams.
    pub fn with_allocator(context: &Context, upstream: Arc<dyn PinnedAllocator>) -> PinnedMemoryPool {
        PinnedMemoryPool::with_parts(upstream, Arc::new(DriverEvents::new(context)))
    }

    /// A pool on `upstream`, with events from `events`: for event sources of your own.
    ///
    /// `events` serve memory given back behind streams (the pool records one of them on each
    /// stream); memory a [`PinnedBuffer`](crate::memory::PinnedBuffer) gives back with copies in
    /// flight comes with the copies' own event
    /// ([`PinnedAllocator::deallocate_after`]), which the pool queries with the driver.
    pub fn with_parts(upstream: Arc<dyn PinnedAllocator>, events: Arc<dyn StreamEvents>) -> PinnedMemoryPool {
        PinnedMemoryPool { state: Mutex::new(State::default()), upstream, events }
    }

    /// The context of the upstream allocator, where errors of `Drop`s are kept.
    pub(crate) fn upstream_context(&self) -> Option<&Context> {
        self.upstream.context()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What hooks are told about an event of this pool.
    fn event(
        &self,
        size: usize,
        mem_size: usize,
        mem_ptr: *mut u8,
        location: &'static Location<'static>,
    ) -> HookEvent {
        HookEvent {
            kind: MemoryKind::PinnedHost,
            device_id: -1,
            size,
            mem_size,
            mem_ptr: mem_ptr as u64,
            pmem_id: self as *const Self as usize,
            location,
        }
    }

    #[inline]
    #[track_caller]
    pub(crate) fn allocate_raw(&self, size: usize) -> Result<PinnedAllocation> {
        let location = Location::caller();
        if hooks::any() {
            return self.allocate_hooked(size, location);
        }
        self.allocate_inner(size, location)
    }

    #[cold]
    fn allocate_hooked(&self, size: usize, location: &'static Location<'static>) -> Result<PinnedAllocation> {
        let mem_size = pinned_size(size).unwrap_or(size);
        hooks::call(Point::MallocPre, &self.event(size, mem_size, std::ptr::null_mut(), location));
        let a = self.allocate_inner(size, location)?;
        hooks::call(Point::MallocPost, &self.event(size, a.size, a.ptr, location));
        Ok(a)
    }

    fn allocate_inner(&self, size: usize, location: &'static Location<'static>) -> Result<PinnedAllocation> {
        if size == 0 {
            return Ok(PinnedAllocation { ptr: std::ptr::null_mut(), size: 0 });
        }
        let class_size = pinned_size(size).ok_or_else(|| {
            Error::invalid("PinnedMemoryPool::malloc", format!("{size} bytes is more than any host can pin"))
        })?;
        let class = class_of(class_size);
        {
            let mut s = self.lock();
            if s.free[class].is_empty() && !s.pending.is_empty() {
                s.poll(&*self.events);
            }
            if let Some(ptr) = s.free[class].pop() {
                s.n_free -= 1;
                s.used += class_size;
                return Ok(PinnedAllocation { ptr: ptr as *mut u8, size: class_size });
            }
        }
        let a = match self.upstream_allocate(class_size, location) {
            Ok(a) => a,
            Err(e) if super::core::is_out_of_memory(&e) => {
                self.free_all_blocks()?;
                self.upstream_allocate(class_size, location).map_err(|_| Error::OutOfMemory {
                    requested: size,
                    held: self.total_bytes(),
                    limit: None,
                })?
            }
            Err(e) => return Err(e),
        };
        let mut s = self.lock();
        s.used += class_size;
        s.total += class_size;
        Ok(PinnedAllocation { ptr: a.ptr, size: class_size })
    }

    /// One upstream allocation, with the hooks around it.
    fn upstream_allocate(
        &self,
        size: usize,
        location: &'static Location<'static>,
    ) -> Result<PinnedAllocation> {
        hooks::arm_checker();
        let hooked = hooks::any();
        if hooked {
            let e = HookEvent { pmem_id: 0, ..self.event(0, size, std::ptr::null_mut(), location) };
            hooks::call(Point::AllocPre, &e);
        }
        let a = self.upstream.allocate(size);
        if let (true, Ok(a)) = (hooked, &a) {
            hooks::call(
                Point::AllocPost,
                &HookEvent { pmem_id: 0, ..self.event(0, a.size, a.ptr, location) },
            );
        }
        a
    }

    /// Takes a buffer back; with `recorded` streams, keeps it from reuse until an event
    /// recorded now on each has completed. Hooks see the free.
    #[inline]
    #[track_caller]
    pub(crate) fn give_back(&self, allocation: PinnedAllocation, recorded: &[sys::CUstream]) -> Result<()> {
        if hooks::any() {
            let e = self.event(0, allocation.size, allocation.ptr, Location::caller());
            hooks::call(Point::FreePre, &e);
            let r = self.give_back_inner(allocation, recorded);
            hooks::call(Point::FreePost, &e);
            return r;
        }
        self.give_back_inner(allocation, recorded)
    }

    fn give_back_inner(&self, allocation: PinnedAllocation, recorded: &[sys::CUstream]) -> Result<()> {
        if allocation.size == 0 {
            return Ok(());
        }
        let mut s = self.lock();
        let mut deferred = 0;
        let mut first_error = Ok(());
        for stream in recorded {
            let event = match s.idle_events.pop() {
                Some(e) => Ok(e),
                None => self.events.create(),
            };
            // SAFETY: the buffer holds its recorded streams alive during this call.
            let stream = unsafe { StreamRef::from_raw(*stream) };
            match event.and_then(|e| self.events.record(e, stream).map(|()| e)) {
                Ok(e) => {
                    s.pending.push(Pending {
                        ptr: allocation.ptr as usize,
                        size: allocation.size,
                        done: Done::Recorded(e),
                    });
                    deferred += 1;
                }
                Err(e) => {
                    // Without the event the copy's end is unknown: keep the buffer forever.
                    first_error = Err(e);
                }
            }
        }
        first_error?;
        if deferred == 0 {
            s.used -= allocation.size;
            s.free[class_of(allocation.size)].push(allocation.ptr as usize);
            s.n_free += 1;
        }
        Ok(())
    }

    /// Takes a buffer back whose copies may still be in flight, all of them before `copies`
    /// was recorded: it is kept from reuse until `copies` has completed (then destroyed). Hooks
    /// see the free. Never waits, and never fails.
    #[inline]
    #[track_caller]
    pub(crate) fn give_back_after(&self, allocation: PinnedAllocation, copies: Event) -> Result<()> {
        let hooked = hooks::any().then(|| self.event(0, allocation.size, allocation.ptr, Location::caller()));
        if let Some(e) = &hooked {
            hooks::call(Point::FreePre, e);
        }
        if allocation.size != 0 {
            let pending =
                Pending { ptr: allocation.ptr as usize, size: allocation.size, done: Done::Copies(copies) };
            self.lock().pending.push(pending);
        }
        if let Some(e) = &hooked {
            hooks::call(Point::FreePost, e);
        }
        Ok(())
    }

    /// Gives every free buffer back to the upstream allocator (buffers waiting on copies whose
    /// events have completed first become free).
    ///
    /// Every such buffer leaves the pool's free list; the first error the upstream returned
    /// while giving them back is returned. A buffer whose release failed is counted in
    /// [`total_bytes`](Self::total_bytes) still (the upstream may hold it), but is not given
    /// back again (an allocator's failed release gives the memory up).
    pub fn free_all_blocks(&self) -> Result<()> {
        let mut released = Vec::new();
        {
            let mut s = self.lock();
            s.poll(&*self.events);
            for (class, list) in s.free.iter_mut().enumerate() {
                released.extend(list.drain(..).map(|p| (p, 1usize << class)));
            }
            s.n_free = 0;
            s.total -= released.iter().map(|r| r.1).sum::<usize>();
        }
        let mut first_error = Ok(());
        let mut unreleased = 0;
        for (ptr, size) in released {
            // SAFETY: the buffer came from this upstream, is free, and left the pool's books.
            let r = unsafe { self.upstream.deallocate(PinnedAllocation { ptr: ptr as *mut u8, size }) };
            if r.is_err() {
                unreleased += size;
            }
            if first_error.is_ok() {
                first_error = r;
            }
        }
        if unreleased != 0 {
            // Not given back: the upstream may still hold the memory, so it stays counted.
            self.lock().total += unreleased;
        }
        first_error
    }

    /// The number of free buffers held.
    pub fn n_free_blocks(&self) -> usize {
        self.lock().n_free
    }

    /// Bytes in buffers handed out or waiting for a copy.
    pub fn used_bytes(&self) -> usize {
        self.lock().used
    }

    /// Bytes obtained from the upstream allocator and not given back.
    pub fn total_bytes(&self) -> usize {
        self.lock().total
    }
}

impl Drop for PinnedMemoryPool {
    fn drop(&mut self) {
        let _ = self.free_all_blocks();
        for e in std::mem::take(&mut self.lock().idle_events) {
            self.events.destroy(e);
        }
    }
}

// SAFETY: the pool hands out each upstream buffer (exclusively owned page-locked memory of at
// least the size asked, by the upstream's own contract) to one caller at a time: a buffer is
// reused only after it was given back and, when given back behind streams or copies, only once
// their events report completion (`StreamEvents`'s contract, or `cuEventQuery` on the copies'
// own event).
unsafe impl PinnedAllocator for PinnedMemoryPool {
    #[track_caller]
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        self.allocate_raw(size)
    }

    #[track_caller]
    unsafe fn deallocate(&self, allocation: PinnedAllocation) -> Result<()> {
        self.give_back(allocation, &[])
    }

    #[track_caller]
    unsafe fn deallocate_after(&self, allocation: PinnedAllocation, copies: Event) -> Result<()> {
        // The copies' own event covers them wherever they ran; reuse waits for it. Recording
        // an event of the pool's now, on a stream handle resolved on this thread, would not.
        self.give_back_after(allocation, copies)
    }

    fn context(&self) -> Option<&Context> {
        self.upstream_context()
    }
}
