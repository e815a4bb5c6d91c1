//! The bookkeeping of one shard of a memory pool: chunks, best-fit free lists, stream arenas.
//!
//! A shard owns the upstream allocations of the streams whose key hashes to it. Each upstream
//! allocation is a run of chunks linked in address order; a chunk is free, in use, or waiting for
//! events recorded on other streams. Free chunks of one stream (an *arena*) sit in bins sorted
//! by size, each bin an intrusive list through the chunk slab, so that best fit is a binary
//! search and no step of a steady-state allocate/free allocates on the heap.

use crate::stream::Stream;
use std::mem::ManuallyDrop;

/// No chunk.
pub(crate) const NIL: u32 = u32::MAX;

/// The bits of a chunk's generation that a token carries.
pub(crate) const GENERATION_MASK: u32 = 0x00FF_FFFF;

/// The state of a chunk slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// The slot holds no chunk.
    Vacant,
    /// In a bin, ready for reuse.
    Free,
    /// Handed out.
    Used,
    /// Given back, but kept from reuse until this many recorded events have completed.
    Pending(u32),
}

/// A piece of an upstream allocation.
#[derive(Clone, Debug)]
pub(crate) struct Chunk {
    pub(crate) addr: u64,
    pub(crate) size: usize,
    /// The key of the arena (stream) this chunk belongs to.
    pub(crate) stream: u64,
    pub(crate) state: State,
    /// Bumped whenever the chunk is handed out or the slot emptied, so stale tokens are caught.
    pub(crate) generation: u32,
    /// The upstream allocation's token, on the first chunk of each upstream allocation.
    pub(crate) upstream: u64,
    prev: u32,
    next: u32,
    link_prev: u32,
    link_next: u32,
}

#[derive(Clone, Copy, Debug)]
struct Bin {
    size: usize,
    head: u32,
}

#[derive(Debug)]
struct Arena {
    stream: u64,
    bins: Vec<Bin>,
    /// Upstream allocations owned by this arena.
    blocks: usize,
    /// A handle of the arena's stream, held for the buffers that borrow it (see [`Shard::keep`]).
    keeper: Option<Stream>,
}

/// What [`Shard::take`] hands out: slot, address, generation and the kept stream handle.
pub(crate) type Taken = (u32, u64, u32, Option<ManuallyDrop<Stream>>);

/// Why a chunk could not be given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stale {
    /// The token names no chunk that is in use: a double free or a foreign pointer.
    NotInUse,
}

/// One shard's state; always used under its shard's lock.
#[derive(Debug, Default)]
pub(crate) struct Shard {
    chunks: Vec<Chunk>,
    vacant: Vec<u32>,
    arenas: Vec<Arena>,
    /// (chunk, event) pairs still to complete.
    pending: Vec<(u32, u64)>,
    /// Events created earlier and free for the next deferral.
    pub(crate) idle_events: Vec<u64>,
    /// Bytes in use, pending ones included.
    pub(crate) used: usize,
    /// Bytes of upstream allocations held.
    pub(crate) held: usize,
    /// Free chunks in all bins.
    pub(crate) free_chunks: usize,
}

/// Removes the bin at `at`. The last bin (in the steady state of one size, the only one) is
/// popped: `Vec::remove` would call `memmove` to shift the no bins after it.
#[inline]
fn remove_bin(bins: &mut Vec<Bin>, at: usize) {
    if at + 1 == bins.len() {
        bins.pop();
    } else {
        bins.remove(at);
    }
}

impl Shard {
    #[inline]
    fn arena(&self, stream: u64) -> Option<usize> {
        self.arenas.iter().position(|a| a.stream == stream)
    }

    fn arena_or_new(&mut self, stream: u64) -> usize {
        match self.arena(stream) {
            Some(i) => i,
            None => {
                self.arenas.push(Arena { stream, bins: Vec::new(), blocks: 0, keeper: None });
                self.arenas.len() - 1
            }
        }
    }

    fn new_slot(&mut self, chunk: Chunk) -> u32 {
        match self.vacant.pop() {
            Some(i) => {
                let generation = self.chunks[i as usize].generation;
                self.chunks[i as usize] = Chunk { generation, ..chunk };
                i
            }
            None => {
                self.chunks.push(chunk);
                (self.chunks.len() - 1) as u32
            }
        }
    }

    fn vacate(&mut self, i: u32) {
        let c = &mut self.chunks[i as usize];
        c.state = State::Vacant;
        c.generation = c.generation.wrapping_add(1);
        self.vacant.push(i);
    }

    /// The chunk at `i`, for reading.
    pub(crate) fn chunk(&self, i: u32) -> Option<&Chunk> {
        self.chunks.get(i as usize)
    }

    fn bin_insert(&mut self, arena: usize, i: u32) {
        let size = self.chunks[i as usize].size;
        let bins = &mut self.arenas[arena].bins;
        let at = bins.partition_point(|b| b.size < size);
        let old_head = match bins.get(at) {
            Some(b) if b.size == size => b.head,
            _ => {
                bins.insert(at, Bin { size, head: NIL });
                NIL
            }
        };
        bins[at].head = i;
        let c = &mut self.chunks[i as usize];
        c.state = State::Free;
        c.link_prev = NIL;
        c.link_next = old_head;
        if old_head != NIL {
            self.chunks[old_head as usize].link_prev = i;
        }
        self.free_chunks += 1;
    }

    fn bin_remove(&mut self, arena: usize, i: u32) {
        let (size, lp, ln) = {
            let c = &self.chunks[i as usize];
            (c.size, c.link_prev, c.link_next)
        };
        if ln != NIL {
            self.chunks[ln as usize].link_prev = lp;
        }
        if lp != NIL {
            self.chunks[lp as usize].link_next = ln;
        } else {
            let bins = &mut self.arenas[arena].bins;
            let at = bins.partition_point(|b| b.size < size);
            if ln == NIL {
                remove_bin(bins, at);
            } else {
                bins[at].head = ln;
            }
        }
        self.free_chunks -= 1;
    }

    /// Best fit from `stream`'s arena: the smallest free chunk of at least `size` bytes, split
    /// when larger. Returns the chunk's slot, address and generation, now in use, and with
    /// `keep`, the uncounted handle of [`keep`](Self::keep).
    #[inline(always)]
    pub(crate) fn take(&mut self, stream: u64, size: usize, keep: Option<&Stream>) -> Option<Taken> {
        let arena = self.arena(stream)?;
        let bins = &mut self.arenas[arena].bins;
        let at = bins.partition_point(|b| b.size < size);
        let i = bins.get(at)?.head;
        // Pop the head of the bin found (what `bin_remove` would do, without searching again).
        let after = self.chunks[i as usize].link_next;
        if after == NIL {
            remove_bin(bins, at);
        } else {
            bins[at].head = after;
            self.chunks[after as usize].link_prev = NIL;
        }
        self.free_chunks -= 1;
        let (addr, have) = {
            let c = &self.chunks[i as usize];
            (c.addr, c.size)
        };
        if have > size {
            self.split(arena, stream, i, size);
        }
        let c = &mut self.chunks[i as usize];
        c.state = State::Used;
        c.generation = c.generation.wrapping_add(1);
        let generation = c.generation;
        self.used += size;
        let kept = keep.map(|k| self.keep_in(arena, k));
        Some((i, addr, generation, kept))
    }

    /// Splits the chunk at slot `i` (of `arena`, keyed `stream`) after its first `size` bytes:
    /// the rest becomes a free chunk of its own, binned. Out of line, so that taking a chunk of
    /// the size asked stays small enough to inline.
    #[inline(never)]
    fn split(&mut self, arena: usize, stream: u64, i: u32, size: usize) {
        let (addr, have, next) = {
            let c = &self.chunks[i as usize];
            (c.addr, c.size, c.next)
        };
        let rest = self.new_slot(Chunk {
            addr: addr + size as u64,
            size: have - size,
            stream,
            state: State::Free,
            generation: 0,
            upstream: 0,
            prev: i,
            next,
            link_prev: NIL,
            link_next: NIL,
        });
        if next != NIL {
            self.chunks[next as usize].prev = rest;
        }
        let c = &mut self.chunks[i as usize];
        c.size = size;
        c.next = rest;
        self.bin_insert(arena, rest);
    }

    /// Records a new upstream allocation, wholly in use, in `stream`'s arena.
    pub(crate) fn insert_used(&mut self, stream: u64, addr: u64, size: usize, upstream: u64) -> u32 {
        let arena = self.arena_or_new(stream);
        self.arenas[arena].blocks += 1;
        let i = self.new_slot(Chunk {
            addr,
            size,
            stream,
            state: State::Used,
            generation: 0,
            upstream,
            prev: NIL,
            next: NIL,
            link_prev: NIL,
            link_next: NIL,
        });
        let c = &mut self.chunks[i as usize];
        c.generation = c.generation.wrapping_add(1);
        self.used += size;
        self.held += size;
        i
    }

    /// Checks that slot `i` holds an in-use chunk of this generation.
    #[inline]
    pub(crate) fn check_in_use(&self, i: u32, generation: u32) -> Result<(), Stale> {
        match self.chunks.get(i as usize) {
            Some(c) if c.state == State::Used && c.generation & GENERATION_MASK == generation => Ok(()),
            _ => Err(Stale::NotInUse),
        }
    }

    /// Gives an in-use chunk back to its arena, merging it with free neighbours.
    #[inline]
    pub(crate) fn release(&mut self, i: u32, generation: u32) -> Result<(), Stale> {
        self.check_in_use(i, generation)?;
        self.used -= self.chunks[i as usize].size;
        self.make_free(i);
        Ok(())
    }

    fn make_free(&mut self, mut i: u32) {
        let stream = self.chunks[i as usize].stream;
        // The arena exists as long as it holds a chunk.
        let Some(arena) = self.arena(stream) else { return };
        let prev = self.chunks[i as usize].prev;
        if prev != NIL && self.chunks[prev as usize].state == State::Free {
            self.bin_remove(arena, prev);
            let (size, next) = {
                let c = &self.chunks[i as usize];
                (c.size, c.next)
            };
            let p = &mut self.chunks[prev as usize];
            p.size += size;
            p.next = next;
            if next != NIL {
                self.chunks[next as usize].prev = prev;
            }
            self.vacate(i);
            i = prev;
        }
        let next = self.chunks[i as usize].next;
        if next != NIL && self.chunks[next as usize].state == State::Free {
            self.bin_remove(arena, next);
            let (size, after) = {
                let n = &self.chunks[next as usize];
                (n.size, n.next)
            };
            let c = &mut self.chunks[i as usize];
            c.size += size;
            c.next = after;
            if after != NIL {
                self.chunks[after as usize].prev = i;
            }
            self.vacate(next);
        }
        self.bin_insert(arena, i);
    }

    /// Keeps an in-use chunk from reuse until `event` (already recorded) has completed; called
    /// once per event.
    pub(crate) fn defer(&mut self, i: u32, generation: u32, event: u64) -> Result<(), Stale> {
        let Some(c) = self.chunks.get_mut(i as usize) else { return Err(Stale::NotInUse) };
        match c.state {
            State::Used if c.generation & GENERATION_MASK == generation => c.state = State::Pending(1),
            State::Pending(n) if c.generation & GENERATION_MASK == generation => {
                c.state = State::Pending(n + 1)
            }
            _ => return Err(Stale::NotInUse),
        }
        self.pending.push((i, event));
        Ok(())
    }

    /// Whether any chunk waits for events.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Frees the pending chunks whose events have all completed, asking `complete` about each
    /// event once; completed events go back to the idle list.
    pub(crate) fn poll_pending(&mut self, mut complete: impl FnMut(u64) -> bool) {
        let mut k = 0;
        while k < self.pending.len() {
            let (i, event) = self.pending[k];
            if !complete(event) {
                k += 1;
                continue;
            }
            self.pending.swap_remove(k);
            self.idle_events.push(event);
            match self.chunks[i as usize].state {
                State::Pending(1) => {
                    self.used -= self.chunks[i as usize].size;
                    self.make_free(i);
                }
                State::Pending(n) => self.chunks[i as usize].state = State::Pending(n - 1),
                _ => {}
            }
        }
    }

    /// Holds a handle of `stream` (arena `key`, which exists) for as long as the arena does,
    /// and returns an uncounted copy of the held handle for a buffer whose chunk, in use, is in
    /// the arena: the arena outlives the chunk's use, so the copy stays valid that long.
    #[inline]
    pub(crate) fn keep(&mut self, key: u64, stream: &Stream) -> Option<ManuallyDrop<Stream>> {
        let arena = self.arena(key)?;
        Some(self.keep_in(arena, stream))
    }

    /// [`keep`](Self::keep) in the arena at index `arena`.
    #[inline]
    fn keep_in(&mut self, arena: usize, stream: &Stream) -> ManuallyDrop<Stream> {
        let kept = self.arenas[arena].keeper.get_or_insert_with(|| stream.clone());
        // SAFETY: the keeper leaves the arena only when no chunk of it is in use
        // (`retire_idle_keepers`) or the arena is dropped empty (`drain_whole_free`), so it
        // outlives the caller's chunk.
        unsafe { kept.uncounted() }
    }

    /// Takes the handles held for streams that nobody else holds any more, whose arenas have no
    /// chunk in use or pending and whose work has finished, so that the streams can be
    /// destroyed (outside the lock). Their arenas keep their free chunks.
    pub(crate) fn retire_idle_keepers(&mut self, out: &mut Vec<Stream>) {
        for a in 0..self.arenas.len() {
            let orphan = self.arenas[a].keeper.as_ref().is_some_and(Stream::is_sole_handle);
            if !orphan {
                continue;
            }
            let key = self.arenas[a].stream;
            let busy = self
                .chunks
                .iter()
                .any(|c| c.stream == key && matches!(c.state, State::Used | State::Pending(_)));
            // Dropping the last handle destroys an owned stream, whose handle the driver may
            // then give to a new stream: the chunks freed in its order must be past use by then.
            let idle =
                self.arenas[a].keeper.as_ref().is_some_and(|k| !k.is_owned() || k.query().unwrap_or(false));
            if !busy && idle {
                out.extend(self.arenas[a].keeper.take());
            }
        }
    }

    /// Removes every free chunk that is a whole upstream allocation, from `stream`'s arena or
    /// all arenas, pushing its address and size to `out`; drops arenas left empty, pushing the
    /// stream handles they held to `keepers` (to be dropped outside the lock).
    pub(crate) fn drain_whole_free(
        &mut self,
        stream: Option<u64>,
        out: &mut Vec<(u64, usize, u64)>,
        keepers: &mut Vec<Stream>,
    ) {
        for arena in 0..self.arenas.len() {
            if stream.is_some_and(|s| s != self.arenas[arena].stream) {
                continue;
            }
            let mut b = 0;
            while b < self.arenas[arena].bins.len() {
                let mut i = self.arenas[arena].bins[b].head;
                let mut removed_bin = false;
                while i != NIL {
                    let (addr, size, prev, next, link_next, token) = {
                        let c = &self.chunks[i as usize];
                        (c.addr, c.size, c.prev, c.next, c.link_next, c.upstream)
                    };
                    if prev == NIL && next == NIL {
                        let last = self.arenas[arena].bins[b].head == i && link_next == NIL;
                        self.bin_remove(arena, i);
                        self.vacate(i);
                        self.held -= size;
                        self.arenas[arena].blocks -= 1;
                        out.push((addr, size, token));
                        if last {
                            removed_bin = true;
                        }
                    }
                    i = link_next;
                }
                if !removed_bin {
                    b += 1;
                }
            }
        }
        for a in self.arenas.iter_mut().filter(|a| a.blocks == 0) {
            keepers.extend(a.keeper.take());
        }
        self.arenas.retain(|a| a.blocks > 0);
    }

    /// The free chunks' bytes, counted from the bins.
    pub(crate) fn free_bytes_in_bins(&self) -> usize {
        self.arenas
            .iter()
            .flat_map(|a| a.bins.iter())
            .map(|b| {
                let mut n = 0;
                let mut i = b.head;
                while i != NIL {
                    n += b.size;
                    i = self.chunks[i as usize].link_next;
                }
                n
            })
            .sum()
    }

    /// Checks the shard's invariants; returns what is broken. Used by tests.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let mut used = 0;
        let mut free = 0;
        let mut held = 0;
        let mut free_chunks = 0;
        for (i, c) in self.chunks.iter().enumerate() {
            match c.state {
                State::Vacant => continue,
                State::Free => {
                    free += c.size;
                    free_chunks += 1;
                }
                State::Used | State::Pending(_) => used += c.size,
            }
            if c.size == 0 {
                return Err(format!("chunk {i} is empty"));
            }
            if c.prev == NIL {
                // The head of an upstream allocation: walk it.
                let mut j = i as u32;
                let mut end = c.addr;
                while j != NIL {
                    let d = &self.chunks[j as usize];
                    if d.addr != end {
                        return Err(format!("chunk {j} at {:#x} does not follow {end:#x}", d.addr));
                    }
                    if d.stream != c.stream {
                        return Err(format!("chunk {j} left its block's arena"));
                    }
                    if d.state == State::Free
                        && d.next != NIL
                        && self.chunks[d.next as usize].state == State::Free
                    {
                        return Err(format!("free chunks {j} and {} were not merged", d.next));
                    }
                    end += d.size as u64;
                    held += d.size;
                    j = d.next;
                }
            } else if self.chunks[c.prev as usize].next != i as u32 {
                return Err(format!("chunk {i}'s neighbour links disagree"));
            }
        }
        if used != self.used {
            return Err(format!("used bytes {} but chunks in use sum to {used}", self.used));
        }
        if held != self.held {
            return Err(format!("held bytes {} but blocks sum to {held}", self.held));
        }
        if free != self.free_bytes_in_bins() || free_chunks != self.free_chunks {
            return Err(format!("bins hold {} bytes, free chunks {free}", self.free_bytes_in_bins()));
        }
        if used + free != held {
            return Err(format!("used {used} + free {free} != held {held}"));
        }
        for a in &self.arenas {
            if a.bins.windows(2).any(|w| w[0].size >= w[1].size) {
                return Err("bins out of order".into());
            }
        }
        Ok(())
    }
}
