//! Domains: a library's own namespace of ranges, marks, categories and registered strings.
//!
//! See NVIDIA's [Domains](https://nvidia.github.io/NVTX/doxygen/group___d_o_m_a_i_n_s.html) and
//! [String Registration](https://nvidia.github.io/NVTX/doxygen/group___s_t_r_i_n_g___r_e_g_i_s_t_r_a_t_i_o_n.html).

use super::text::skip_copy;
use super::{DomainRange, DomainStartedRange, EventAttributes, Text};
use cuhost_nvtx_sys as sys;
use cuhost_nvtx_sys::NvtxCallbackIdCore2;
use cuhost_nvtx_sys::protocol::Module;
use std::marker::PhantomData;

/// An NVTX domain (`nvtxDomainCreateA`), destroyed (`nvtxDomainDestroy`) when dropped.
///
/// Without a tool the handle is null and every call does nothing.
#[derive(Debug)]
pub struct Domain {
    handle: sys::nvtxDomainHandle_t,
}

// SAFETY: a domain handle is an opaque token that NVTX functions accept from any thread.
unsafe impl Send for Domain {}
// SAFETY: as above; no method mutates the handle.
unsafe impl Sync for Domain {}

/// A string registered in a domain (`nvtxDomainRegisterStringA`), for use as the message of
/// that domain's events without passing the text each time. It lives as long as its domain.
#[derive(Clone, Copy, Debug)]
pub struct RegisteredString<'d> {
    handle: sys::nvtxStringHandle_t,
    _domain: PhantomData<&'d Domain>,
}

// SAFETY: an opaque token valid for the domain's life, usable from any thread.
unsafe impl Send for RegisteredString<'_> {}
// SAFETY: as above.
unsafe impl Sync for RegisteredString<'_> {}

impl RegisteredString<'_> {
    /// The raw handle.
    pub fn as_raw(&self) -> sys::nvtxStringHandle_t {
        self.handle
    }
}

impl Domain {
    /// Creates (or, if a domain of this name exists, gets) the domain `name`
    /// ([`nvtxDomainCreateA`](https://nvidia.github.io/NVTX/doxygen/group___d_o_m_a_i_n_s.html)).
    pub fn new(name: &(impl Text + ?Sized)) -> Domain {
        // SAFETY: a NUL-terminated string that lives through the call.
        let handle = name.with_c_str(|n| unsafe { sys::nvtxDomainCreateA(n.as_ptr()) });
        Domain { handle }
    }

    /// The raw handle (null when no tool is attached).
    pub fn as_raw(&self) -> sys::nvtxDomainHandle_t {
        self.handle
    }

    /// Registers `text` in this domain (`nvtxDomainRegisterStringA`).
    pub fn register_string(&self, text: &(impl Text + ?Sized)) -> RegisteredString<'_> {
        // SAFETY: a live domain handle and a NUL-terminated string.
        let handle = text.with_c_str(|t| unsafe { sys::nvtxDomainRegisterStringA(self.handle, t.as_ptr()) });
        RegisteredString { handle, _domain: PhantomData }
    }

    /// Names a category of this domain (`nvtxDomainNameCategoryA`).
    pub fn name_category(&self, category: u32, name: &(impl Text + ?Sized)) {
        // SAFETY: a live domain handle and a NUL-terminated string.
        name.with_c_str(|n| unsafe { sys::nvtxDomainNameCategoryA(self.handle, category, n.as_ptr()) });
    }

    /// Marks an instant named `message` in this domain (`nvtxDomainMarkEx`).
    pub fn mark<T: Text + ?Sized>(&self, message: &T) {
        if skip_copy::<T>(Module::CORE2, NvtxCallbackIdCore2::NVTX_CBID_CORE2_DomainMarkEx.0) {
            return;
        }
        message.with_c_str(|m| self.mark_with(&EventAttributes::new().message(m)));
    }

    /// Marks an instant with attributes in this domain (`nvtxDomainMarkEx`).
    pub fn mark_with(&self, attributes: &EventAttributes<'_>) {
        // SAFETY: a live domain handle and valid attributes.
        unsafe { sys::nvtxDomainMarkEx(self.handle, attributes.as_raw()) };
    }

    /// Opens a thread range named `message` in this domain (`nvtxDomainRangePushEx`).
    pub fn push_range<T: Text + ?Sized>(&self, message: &T) -> DomainRange<'_> {
        if let Some(skipped) = DomainRange::skipped::<T>(self) {
            return skipped;
        }
        message.with_c_str(|m| DomainRange::push(self, &EventAttributes::new().message(m)))
    }

    /// Opens a thread range with attributes in this domain (`nvtxDomainRangePushEx`).
    pub fn push_range_with(&self, attributes: &EventAttributes<'_>) -> DomainRange<'_> {
        DomainRange::push(self, attributes)
    }

    /// Starts a process range named `message` in this domain (`nvtxDomainRangeStartEx`).
    pub fn start_range<T: Text + ?Sized>(&self, message: &T) -> DomainStartedRange<'_> {
        if let Some(skipped) = DomainStartedRange::skipped::<T>(self) {
            return skipped;
        }
        message.with_c_str(|m| DomainStartedRange::start(self, &EventAttributes::new().message(m)))
    }

    /// Starts a process range with attributes in this domain (`nvtxDomainRangeStartEx`).
    pub fn start_range_with(&self, attributes: &EventAttributes<'_>) -> DomainStartedRange<'_> {
        DomainStartedRange::start(self, attributes)
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: the handle came from nvtxDomainCreateA; every borrow of the domain has ended.
        unsafe { sys::nvtxDomainDestroy(self.handle) };
    }
}
