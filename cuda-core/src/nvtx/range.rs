//! Ranges as guards: thread ranges (push/pop) and process ranges (start/end).
//!
//! See NVIDIA's [Markers and Ranges](https://nvidia.github.io/NVTX/doxygen/group___m_a_r_k_e_r_s___a_n_d___r_a_n_g_e_s.html).

use super::text::skip_copy;
use super::{Domain, EventAttributes, Text};
use cuhost_nvtx_sys as sys;
use cuhost_nvtx_sys::protocol::Module;
use cuhost_nvtx_sys::{NvtxCallbackIdCore, NvtxCallbackIdCore2};
use std::ffi::c_int;
use std::marker::PhantomData;

/// What `nvtxRangePush*` returns without a tool.
const NO_TOOL_LEVEL: c_int = -2;

/// A thread range (`nvtxRangePush*`), popped (`nvtxRangePop`) when dropped.
///
/// Thread ranges nest per OS thread, so the guard cannot move to another thread (`!Send`).
#[must_use = "the range ends when this guard is dropped"]
#[derive(Debug)]
pub struct Range {
    level: c_int,
    _not_send: PhantomData<*const ()>,
}

/// Opens a thread range named `message` on this thread (`nvtxRangePushA`).
#[inline]
pub fn push_range<T: Text + ?Sized>(message: &T) -> Range {
    let level = if skip_copy::<T>(Module::CORE, NvtxCallbackIdCore::NVTX_CBID_CORE_RangePushA.0) {
        NO_TOOL_LEVEL
    } else {
        // SAFETY: a NUL-terminated string that lives through the call.
        message.with_c_str(|m| unsafe { sys::nvtxRangePushA(m.as_ptr()) })
    };
    Range { level, _not_send: PhantomData }
}

/// Opens a thread range with attributes on this thread (`nvtxRangePushEx`).
#[inline]
pub fn push_range_with(attributes: &EventAttributes<'_>) -> Range {
    // SAFETY: valid version-3 attributes whose message outlives the call.
    let level = unsafe { sys::nvtxRangePushEx(attributes.as_raw()) };
    Range { level, _not_send: PhantomData }
}

impl Range {
    /// The zero-based nesting level the tool gave this range, or `None` when no tool is
    /// attached (or the tool reported an error).
    pub fn level(&self) -> Option<u32> {
        u32::try_from(self.level).ok()
    }
}

impl Drop for Range {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: pops the range this guard pushed on this thread (the guard is `!Send`).
        unsafe { sys::nvtxRangePop() };
    }
}

/// A process range (`nvtxRangeStart*`), ended (`nvtxRangeEnd`) when dropped or by
/// [`end`](Self::end). Process ranges need not nest and may end on any thread (`Send`).
#[must_use = "the range ends when this guard is dropped"]
#[derive(Debug)]
pub struct StartedRange {
    id: sys::nvtxRangeId_t,
}

/// Starts a process range named `message` (`nvtxRangeStartA`).
#[inline]
pub fn start_range<T: Text + ?Sized>(message: &T) -> StartedRange {
    let id = if skip_copy::<T>(Module::CORE, NvtxCallbackIdCore::NVTX_CBID_CORE_RangeStartA.0) {
        0
    } else {
        // SAFETY: a NUL-terminated string that lives through the call.
        message.with_c_str(|m| unsafe { sys::nvtxRangeStartA(m.as_ptr()) })
    };
    StartedRange { id }
}

/// Starts a process range with attributes (`nvtxRangeStartEx`).
#[inline]
pub fn start_range_with(attributes: &EventAttributes<'_>) -> StartedRange {
    // SAFETY: valid version-3 attributes whose message outlives the call.
    let id = unsafe { sys::nvtxRangeStartEx(attributes.as_raw()) };
    StartedRange { id }
}

impl StartedRange {
    /// The 64-bit range id the tool gave (0 when no tool is attached).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Ends the range now.
    pub fn end(self) {}
}

impl Drop for StartedRange {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: ends the range this guard started; ids are plain integers.
        unsafe { sys::nvtxRangeEnd(self.id) };
    }
}

/// A thread range in a [`Domain`] (`nvtxDomainRangePushEx`), popped
/// (`nvtxDomainRangePop`) when dropped; `!Send` like [`Range`].
#[must_use = "the range ends when this guard is dropped"]
#[derive(Debug)]
pub struct DomainRange<'d> {
    domain: &'d Domain,
    level: c_int,
    _not_send: PhantomData<*const ()>,
}

impl<'d> DomainRange<'d> {
    /// The range of a push that was skipped: no tool implements `nvtxDomainRangePushEx`.
    pub(super) fn skipped<T: Text + ?Sized>(domain: &'d Domain) -> Option<Self> {
        let id = NvtxCallbackIdCore2::NVTX_CBID_CORE2_DomainRangePushEx.0;
        // Built only when skipping: a guard built and dropped here would pop.
        skip_copy::<T>(Module::CORE2, id).then(|| DomainRange {
            domain,
            level: NO_TOOL_LEVEL,
            _not_send: PhantomData,
        })
    }

    pub(super) fn push(domain: &'d Domain, attributes: &EventAttributes<'_>) -> Self {
        // SAFETY: the domain handle is live for 'd; the attributes are valid.
        let level = unsafe { sys::nvtxDomainRangePushEx(domain.as_raw(), attributes.as_raw()) };
        DomainRange { domain, level, _not_send: PhantomData }
    }

    /// The zero-based nesting level the tool gave this range, or `None` without a tool.
    pub fn level(&self) -> Option<u32> {
        u32::try_from(self.level).ok()
    }
}

impl Drop for DomainRange<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: pops the range this guard pushed, in its domain, on this thread.
        unsafe { sys::nvtxDomainRangePop(self.domain.as_raw()) };
    }
}

/// A process range in a [`Domain`] (`nvtxDomainRangeStartEx`), ended
/// (`nvtxDomainRangeEnd`) when dropped; `Send` like [`StartedRange`].
#[must_use = "the range ends when this guard is dropped"]
#[derive(Debug)]
pub struct DomainStartedRange<'d> {
    domain: &'d Domain,
    id: sys::nvtxRangeId_t,
}

impl<'d> DomainStartedRange<'d> {
    /// The range of a start that was skipped: no tool implements `nvtxDomainRangeStartEx`.
    pub(super) fn skipped<T: Text + ?Sized>(domain: &'d Domain) -> Option<Self> {
        let id = NvtxCallbackIdCore2::NVTX_CBID_CORE2_DomainRangeStartEx.0;
        // Built only when skipping: a guard built and dropped here would end a range.
        skip_copy::<T>(Module::CORE2, id).then(|| DomainStartedRange { domain, id: 0 })
    }

    pub(super) fn start(domain: &'d Domain, attributes: &EventAttributes<'_>) -> Self {
        // SAFETY: the domain handle is live for 'd; the attributes are valid.
        let id = unsafe { sys::nvtxDomainRangeStartEx(domain.as_raw(), attributes.as_raw()) };
        DomainStartedRange { domain, id }
    }

    /// The 64-bit range id the tool gave (0 when no tool is attached).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Ends the range now.
    pub fn end(self) {}
}

impl Drop for DomainStartedRange<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: ends the range this guard started, in its domain.
        unsafe { sys::nvtxDomainRangeEnd(self.domain.as_raw(), self.id) };
    }
}
