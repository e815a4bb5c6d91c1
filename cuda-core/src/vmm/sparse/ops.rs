//! The driver side of a sparse array: map and unmap operations
//! ([`cuMemMapArrayAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)),
//! their order against other streams and the array's work, and the waits for them.

use super::super::physical::PhysicalMemory;
use super::SparseRegion;
use super::tiles::{Binding, Handle, Tiles, UNMAPPED};
use crate::error::{Error, Result};
use crate::stream::Stream;
use cuhost_driver_sys as sys;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, Ordering};

impl Tiles {
    /// Refuses `stream` where the driver could not run the operation on it for this array, and
    /// makes it wait for the operations queued on other streams; the context is current after.
    pub(super) fn prepare(&mut self, operation: &'static str, stream: &Stream) -> Result<()> {
        if stream.context() != &self.ctx {
            return Err(Error::refused(
                crate::error::Reason::WRONG_CONTEXT,
                operation,
                "the stream belongs to another context than the array; map and unmap on a stream of the \
                 array's context",
            ));
        }
        crate::track::nameable(&self.ctx, stream)?;
        // Release-style: an error kept from elsewhere in the context does not stop an unmap.
        self.ctx.make_current()?;
        stream.bind_if_default()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the stream is alive while `stream` is; one out-parameter.
        unsafe { driver!(cuStreamIsCapturing(stream.as_raw(), &mut status)) }?;
        if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                operation,
                "the stream is being captured into a graph, where a mapping would not take place when \
                 this array believes it does; map and unmap on a stream that is not capturing",
            ));
        }
        let pending = self.pending.get_mut().unwrap_or_else(PoisonError::into_inner);
        crate::track::order_after(stream, &pending.streams)?;
        // Memory unmapped by operations that have all run goes now, rather than at the next
        // lend or the drop (a loop of maps and unmaps would hold every pool otherwise).
        if !pending.retired.is_empty() && pending.streams.iter().all(ran) {
            pending.retired.clear();
        }
        self.ctx.make_current()
    }

    /// The one `CUarrayMapInfo` of an operation on `region` of `handle`.
    pub(super) fn info(
        &self,
        operation: &'static str,
        handle: Handle,
        region: &SparseRegion,
        map: bool,
    ) -> Result<sys::CUarrayMapInfo> {
        let mut info = sys::CUarrayMapInfo::default();
        match handle {
            Handle::Array(a) => {
                info.resourceType = sys::CUresourcetype::CU_RESOURCE_TYPE_ARRAY;
                info.resource.array = a;
            }
            Handle::Mipmapped(m) => {
                info.resourceType = sys::CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
                info.resource.mipmap = m;
            }
        }
        match *region {
            SparseRegion::Level { level, layer, offset, extent } => {
                info.subresourceType =
                    sys::CUarraySparseSubresourceType::CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL;
                info.subresource.sparseLevel = sys::CUarrayMapInfo_st__bindgen_ty_2__bindgen_ty_1 {
                    level,
                    layer,
                    offsetX: offset[0],
                    offsetY: offset[1],
                    offsetZ: offset[2],
                    extentWidth: extent[0],
                    extentHeight: extent[1],
                    extentDepth: extent[2],
                    ..Default::default()
                };
            }
            SparseRegion::MipTail { layer, offset, size } => {
                info.subresourceType =
                    sys::CUarraySparseSubresourceType::CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_MIPTAIL;
                info.subresource.miptail = sys::CUarrayMapInfo_st__bindgen_ty_2__bindgen_ty_2 {
                    layer,
                    offset,
                    size,
                    ..Default::default()
                };
            }
        }
        info.memOperationType = if map {
            sys::CUmemOperationType::CU_MEM_OPERATION_TYPE_MAP
        } else {
            sys::CUmemOperationType::CU_MEM_OPERATION_TYPE_UNMAP
        };
        info.memHandleType = sys::CUmemHandleType::CU_MEM_HANDLE_TYPE_GENERIC;
        let ordinal = self.device.ordinal();
        info.deviceBitMask =
            u32::try_from(ordinal).ok().and_then(|o| 1u32.checked_shl(o)).ok_or_else(|| {
                Error::invalid(
                    operation,
                    format!("device {ordinal} does not fit the driver's 32-bit device mask"),
                )
            })?;
        Ok(info)
    }

    /// Maps `region` onto `physical` from `offset` on, in `stream`'s order, and notes it.
    pub(super) fn map(
        &mut self,
        operation: &'static str,
        handle: Handle,
        region: &SparseRegion,
        physical: &PhysicalMemory,
        offset: usize,
        stream: &Stream,
    ) -> Result<()> {
        let cover = self.cover(operation, region)?;
        let state = self.state(&cover);
        if cover.indices.iter().any(|&i| state[i] != UNMAPPED) {
            return Err(Error::invalid(
                operation,
                "part of the region is mapped already; unmap it first (a mapping is never replaced in \
                 place, so that work still reading the old memory cannot see it change)",
            ));
        }
        physical.mappable(operation)?;
        let tb = self.tile_bytes;
        let fits = (offset as u64).checked_add(cover.bytes).is_some_and(|end| end <= physical.size() as u64);
        if offset as u64 % tb != 0 || !fits {
            return Err(Error::invalid(
                operation,
                format!(
                    "the region takes {} bytes of the tile pool, at offset {offset}, which must be a multiple \
                     of the tile size ({tb} bytes) and leave the bytes inside the pool's {}",
                    cover.bytes,
                    physical.size()
                ),
            ));
        }
        // Whether the memory is a tile pool is not reported back by the driver: memory that is
        // not one is refused by the map itself.
        let props = physical.properties()?;
        if props.location != crate::memory::MemLocation::Device(self.device) {
            return Err(Error::invalid(
                operation,
                format!(
                    "the tile pool lives at {:?}, and a sparse array of device {} maps memory of its own \
                     device only",
                    props.location,
                    self.device.ordinal()
                ),
            ));
        }
        self.prepare(operation, stream)?;
        let mut info = self.info(operation, handle, region, true)?;
        info.memHandle.memHandle = physical.as_raw();
        info.offset = offset as u64;
        // SAFETY: one initialized entry naming a live array and a live tile pool; the region and
        // the pool's bytes were checked above; the pool is held below for as long as it is mapped.
        unsafe { driver!(cuMemMapArrayAsync(&mut info, 1, stream.as_raw())) }?;
        let slot = match self
            .bindings
            .iter()
            .position(|b| b.as_ref().is_some_and(|b| b.physical.as_raw() == physical.as_raw()))
        {
            Some(slot) => slot,
            None => {
                let binding = Some(Binding { physical: physical.clone(), tiles: 0 });
                match self.bindings.iter().position(Option::is_none) {
                    Some(free) => {
                        self.bindings[free] = binding;
                        free
                    }
                    None => {
                        self.bindings.push(binding);
                        self.bindings.len() - 1
                    }
                }
            }
        };
        if let Some(b) = self.bindings[slot].as_mut() {
            b.tiles += cover.indices.len();
        }
        let (state, mapped) = self.state_mut(&cover);
        for &i in &cover.indices {
            state[i] = slot as u32;
        }
        *mapped += cover.indices.len();
        self.queued_on(stream);
        Ok(())
    }

    /// Unmaps `region` in `stream`'s order, after the work `queued` says was queued through the
    /// array, and notes it.
    pub(super) fn unmap(
        &mut self,
        operation: &'static str,
        handle: Handle,
        queued: &AtomicBool,
        region: &SparseRegion,
        stream: &Stream,
    ) -> Result<()> {
        let cover = self.cover(operation, region)?;
        self.prepare(operation, stream)?;
        if queued.load(Ordering::Acquire) {
            // Work queued through the array on any stream may still read the tiles: the unmap is
            // ordered after all of it. Nothing can queue more while `self` is borrowed mutably.
            // SAFETY: no arguments; the array's context is current (prepare).
            unsafe { driver!(cuCtxSynchronize()) }?;
            queued.store(false, Ordering::Release);
        }
        let mut info = self.info(operation, handle, region, false)?;
        // SAFETY: one initialized entry naming a live array and a region checked above; the
        // memory of the unmapped tiles is kept until the unmap has been waited for.
        unsafe { driver!(cuMemMapArrayAsync(&mut info, 1, stream.as_raw())) }?;
        let mut released = Vec::new();
        let (state, mapped) = match (&mut self.tail, cover.tail) {
            (Some(t), true) => (&mut t.state, &mut t.mapped),
            _ => {
                let l = &mut self.sparse[cover.level];
                (&mut l.state, &mut l.mapped)
            }
        };
        for &i in &cover.indices {
            let slot = std::mem::replace(&mut state[i], UNMAPPED);
            if slot == UNMAPPED {
                continue;
            }
            *mapped -= 1;
            let entry = &mut self.bindings[slot as usize];
            if let Some(b) = entry.as_mut() {
                b.tiles -= 1;
                if b.tiles == 0 {
                    released.extend(entry.take().map(|b| b.physical));
                }
            }
        }
        self.pending.get_mut().unwrap_or_else(PoisonError::into_inner).retired.append(&mut released);
        self.queued_on(stream);
        Ok(())
    }

    /// Notes an operation queued on `stream`, which waits for every earlier one (prepare).
    pub(super) fn queued_on(&mut self, stream: &Stream) {
        let pending = self.pending.get_mut().unwrap_or_else(PoisonError::into_inner);
        pending.streams.clear();
        pending.streams.push(stream.clone());
    }

    /// Waits for the mapping operations queued so far, so that what they map is mapped for
    /// any work queued from now on, on any stream; releases the memory unmapped by them.
    pub(super) fn settle(&self) -> Result<()> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.streams.is_empty() && pending.retired.is_empty() {
            return Ok(());
        }
        // Waits that also reach another thread's per-thread stream (through its context).
        for s in &pending.streams {
            s.synchronize_for_release()?;
        }
        pending.streams.clear();
        pending.retired.clear();
        Ok(())
    }

    /// Waits for the pending operations for a release; on failure leaks every binding (the
    /// memory stays mapped rather than freed under the array) and keeps the error.
    pub(super) fn settle_for_release(&mut self) -> bool {
        let pending = self.pending.get_mut().unwrap_or_else(PoisonError::into_inner);
        let waited = pending.streams.iter().map(Stream::synchronize_for_release).fold(Ok(()), Result::and);
        match waited {
            Ok(()) => {
                pending.streams.clear();
                true
            }
            Err(e) => {
                std::mem::forget(std::mem::take(&mut pending.retired));
                std::mem::forget(std::mem::take(&mut self.bindings));
                self.ctx.defer(e.dropping("SparseTiles", None));
                false
            }
        }
    }
}

/// Whether everything queued so far on `stream`, a created stream, has run; a default stream
/// (which may name another thread's) or a failed query counts as not run.
fn ran(stream: &Stream) -> bool {
    // SAFETY: the stream is alive while `stream` is; the query changes nothing.
    !stream.is_default() && unsafe { sys::cuStreamQuery(stream.as_raw()) } == sys::CUresult::CUDA_SUCCESS
}
