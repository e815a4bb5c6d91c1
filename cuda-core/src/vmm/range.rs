//! [`AddressRange`]: a reservation of device virtual addresses, into which physical memory is
//! mapped.

use crate::context::Context;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// A range of reserved device virtual addresses with no memory behind them until
/// [`map`](Self::map)ped.
///
/// Clones share the reservation; it is freed
/// ([`cuMemAddressFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html))
/// when the last clone and the last [`Mapping`](super::Mapping) into it are dropped, in whatever order.
#[derive(Clone, Debug)]
pub struct AddressRange {
    inner: Arc<Reservation>,
}

#[derive(Debug)]
struct Reservation {
    ptr: sys::CUdeviceptr,
    size: usize,
    context: Context,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let (ptr, size) = (self.ptr, self.size);
        // SAFETY: the reservation is freed once; every mapping into it holds this value, so
        // none is left.
        self.context.with_current_for_drop("Reservation", || unsafe { driver!(cuMemAddressFree(ptr, size)) });
    }
}

impl AddressRange {
    /// Reserves `size` bytes of virtual addresses, aligned to `alignment` bytes (0: the
    /// driver's default, the allocation granularity)
    /// ([`cuMemAddressReserve`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    ///
    /// A size of 0 or an alignment that is not 0 or a power of two is an
    /// [`Error::InvalidArgument`]; a size that is not a multiple of the allocation granularity
    /// is the driver's `CUDA_ERROR_INVALID_VALUE`.
    pub fn reserve(context: &Context, size: usize, alignment: usize) -> Result<AddressRange> {
        AddressRange::reserve_with_hint("AddressRange::reserve", context, size, alignment, 0)
    }

    /// Reserves `size` bytes starting exactly at `address`, aligned as in
    /// [`reserve`](Self::reserve). When the driver cannot give that address (it is taken,
    /// or not aligned to the granularity), this is an [`Error::InvalidArgument`] and nothing
    /// stays reserved.
    pub fn reserve_at(
        context: &Context,
        size: usize,
        alignment: usize,
        address: sys::CUdeviceptr,
    ) -> Result<AddressRange> {
        if address == 0 {
            return Err(Error::invalid(
                "AddressRange::reserve_at",
                "address 0 asks for no address; use AddressRange::reserve",
            ));
        }
        let range =
            AddressRange::reserve_with_hint("AddressRange::reserve_at", context, size, alignment, address)?;
        if range.as_raw() != address {
            return Err(Error::invalid(
                "AddressRange::reserve_at",
                format!(
                    "{size} bytes at {address:#x} could not be reserved (the driver offered {:#x}); the \
                     addresses are taken or not aligned to the allocation granularity",
                    range.as_raw()
                ),
            ));
        }
        Ok(range)
    }

    fn reserve_with_hint(
        operation: &'static str,
        context: &Context,
        size: usize,
        alignment: usize,
        address: sys::CUdeviceptr,
    ) -> Result<AddressRange> {
        if size == 0 {
            return Err(Error::invalid(
                operation,
                "a size of 0 bytes was requested; reserve at least one granule",
            ));
        }
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(Error::invalid(
                operation,
                format!("alignment {alignment} is not a power of two; pass 0 for the default"),
            ));
        }
        context.enter()?;
        let mut ptr = 0;
        // SAFETY: one out-parameter; flags must be 0.
        unsafe { driver!(cuMemAddressReserve(&mut ptr, size, alignment, address, 0)) }?;
        Ok(AddressRange { inner: Arc::new(Reservation { ptr, size, context: context.clone() }) })
    }

    /// The first reserved address.
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.inner.ptr
    }

    /// The number of bytes reserved.
    #[inline]
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The context the range was reserved in.
    #[inline]
    pub fn context(&self) -> &Context {
        &self.inner.context
    }
}

/// Checks a mapping of a physical allocation of `size` bytes at `offset` into a range of
/// `range_size` bytes.
pub(super) fn check_mapping(range_size: usize, offset: usize, size: usize, granularity: usize) -> Result<()> {
    const OP: &str = "AddressRange::map";
    if size == 0 {
        return Err(Error::invalid(OP, "a mapping of 0 bytes was requested; map at least one granule"));
    }
    for (what, value) in [("offset", offset), ("size", size)] {
        if granularity != 0 && value % granularity != 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "the {what} of {value} bytes is not a multiple of the allocation granularity of \
                     {granularity} bytes"
                ),
            ));
        }
    }
    match offset.checked_add(size) {
        Some(end) if end <= range_size => Ok(()),
        _ => Err(Error::invalid(
            OP,
            format!(
                "{size} bytes at offset {offset} end past the reserved range of {range_size} bytes; \
                 reserve a larger range"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: usize = 2 << 20;

    fn message(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidArgument { message, .. }) => message,
            other => format!("not refused: {other:?}"),
        }
    }

    #[test]
    fn mappings_inside_the_range_pass() {
        assert!(check_mapping(4 * G, 0, 4 * G, G).is_ok());
        assert!(check_mapping(4 * G, 2 * G, G, G).is_ok());
        assert!(check_mapping(4 * G, 3 * G, G, G).is_ok());
    }

    #[test]
    fn mappings_past_the_end_are_refused() {
        assert!(message(check_mapping(4 * G, 3 * G, 2 * G, G)).contains("past the reserved range"));
        assert!(message(check_mapping(4 * G, usize::MAX - G + 1, G, G)).contains("past the reserved"));
    }

    #[test]
    fn unaligned_mappings_name_the_granularity() {
        let m = message(check_mapping(4 * G, 4096, G, G));
        assert!(m.contains("offset of 4096") && m.contains(&G.to_string()), "{m}");
        assert!(message(check_mapping(4 * G, 0, 4096, G)).contains("size of 4096"));
        assert!(message(check_mapping(4 * G, 0, 0, G)).contains("0 bytes"));
    }
}
