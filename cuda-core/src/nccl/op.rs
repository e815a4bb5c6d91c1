//! Reduction operations: the built-in ones ([`ReduceOp`]) and the pre-multiplied sum
//! ([`PreMulSum`]), which NCCL makes per communicator.

use super::comm::Communicator;
use super::datatype::DataType;
use super::version::{require, since};
use crate::error::{Error, Result, check_nccl};
use crate::memory::DeviceView;
use cuhost_nccl_sys as nccl;
use std::marker::PhantomData;

/// A built-in reduction
/// ([`ncclRedOp_t`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html#ncclredop-t)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The product.
    Prod,
    /// The maximum.
    Max,
    /// The minimum.
    Min,
    /// The sum divided by the number of ranks (NCCL 2.10); integers are divided with
    /// truncation.
    Avg,
}

impl ReduceOp {
    /// The raw operation.
    pub fn as_raw(self) -> nccl::ncclRedOp_t {
        match self {
            ReduceOp::Sum => nccl::ncclRedOp_t::ncclSum,
            ReduceOp::Prod => nccl::ncclRedOp_t::ncclProd,
            ReduceOp::Max => nccl::ncclRedOp_t::ncclMax,
            ReduceOp::Min => nccl::ncclRedOp_t::ncclMin,
            ReduceOp::Avg => nccl::ncclRedOp_t::ncclAvg,
        }
    }

    /// The raw value as a `ReduceOp`; `None` for an operation made at run time or unknown.
    pub fn from_raw(raw: nccl::ncclRedOp_t) -> Option<ReduceOp> {
        [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg]
            .into_iter()
            .find(|op| op.as_raw() == raw)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A reduction usable on elements of `T` with a given communicator: a [`ReduceOp`], or a
/// [`PreMulSum`] of that communicator and type (by reference).
pub trait Reduction<T>: sealed::Sealed {
    /// The raw operation for `comm`; an operation made for another communicator is an
    /// [`Error::InvalidArgument`].
    fn raw_for(&self, comm: &Communicator) -> Result<nccl::ncclRedOp_t>;
}

impl sealed::Sealed for ReduceOp {}

impl<T: DataType> Reduction<T> for ReduceOp {
    #[inline]
    fn raw_for(&self, _comm: &Communicator) -> Result<nccl::ncclRedOp_t> {
        if *self == ReduceOp::Avg {
            require("ncclAvg", since::AVG_BF16)?;
        }
        Ok(self.as_raw())
    }
}

/// A sum in which each rank's values are first multiplied by a scalar
/// ([`ncclRedOpCreatePreMulSum`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/ops.html#ncclredopcreatepremulsum),
/// NCCL 2.11), for one communicator and element type; destroyed with `ncclRedOpDestroy` when
/// dropped. Pass it by reference where a [`Reduction`] is asked for.
///
/// The scalar is a value fixed now ([`new`](Self::new)) or one element of device memory read
/// when each collective runs ([`with_device_scalar`](Self::with_device_scalar)), which the
/// borrow keeps alive.
#[derive(Debug)]
pub struct PreMulSum<'a, T: DataType> {
    raw: nccl::ncclRedOp_t,
    comm: &'a Communicator,
    _scalar: PhantomData<&'a T>,
}

impl<'a, T: DataType> PreMulSum<'a, T> {
    /// A pre-multiplied sum whose scalar is `scalar` (`ncclScalarHostImmediate`).
    ///
    /// An NCCL older than 2.11, or too old for `T`, is an [`Error::Load`](crate::error::Error::Load)
    /// naming both versions; an error the communicator kept from an earlier call is returned
    /// first.
    pub fn new(comm: &'a Communicator, scalar: T) -> Result<PreMulSum<'a, T>> {
        let mut scalar = scalar;
        // SAFETY: NCCL reads the host scalar during the call.
        unsafe {
            PreMulSum::create(
                comm,
                (&mut scalar as *mut T).cast(),
                nccl::ncclScalarResidence_t::ncclScalarHostImmediate,
            )
        }
    }

    /// A pre-multiplied sum whose scalar is read from `scalar` (one element, on the
    /// communicator's device) when each collective runs (`ncclScalarDevice`). A view of
    /// another length is an [`Error::InvalidArgument`].
    pub fn with_device_scalar(comm: &'a Communicator, scalar: DeviceView<'a, T>) -> Result<PreMulSum<'a, T>> {
        if scalar.len() != 1 {
            return Err(Error::invalid(
                "PreMulSum::with_device_scalar",
                format!("the scalar is one element, but the view has {}; slice it to one", scalar.len()),
            ));
        }
        super::comm::same_device("PreMulSum::with_device_scalar", comm, scalar.context())?;
        // SAFETY: the view is device memory of the communicator's device, kept alive for 'a,
        // which the operation does not outlive.
        unsafe {
            PreMulSum::create(
                comm,
                scalar.as_raw() as *mut std::ffi::c_void,
                nccl::ncclScalarResidence_t::ncclScalarDevice,
            )
        }
    }

    /// # Safety
    ///
    /// `scalar` is readable as a `T` where `residence` says, for as long as NCCL reads it.
    unsafe fn create(
        comm: &'a Communicator,
        scalar: *mut std::ffi::c_void,
        residence: nccl::ncclScalarResidence_t,
    ) -> Result<PreMulSum<'a, T>> {
        require("ncclRedOpCreatePreMulSum", since::PRE_MUL_SUM)?;
        require("ncclRedOpCreatePreMulSum", T::SINCE)?;
        comm.context().take_deferred()?;
        let mut raw = nccl::ncclRedOp_t::ncclSum;
        // SAFETY: a live communicator; the scalar is as the caller vouches.
        check_nccl("ncclRedOpCreatePreMulSum", unsafe {
            nccl::ncclRedOpCreatePreMulSum(&mut raw, scalar, T::RAW, residence, comm.as_raw())
        })?;
        Ok(PreMulSum { raw, comm, _scalar: PhantomData })
    }

    /// The raw operation, valid with this communicator while `self` lives.
    pub fn as_raw(&self) -> nccl::ncclRedOp_t {
        self.raw
    }
}

impl<T: DataType> sealed::Sealed for &PreMulSum<'_, T> {}

impl<T: DataType> Reduction<T> for &PreMulSum<'_, T> {
    #[inline]
    fn raw_for(&self, comm: &Communicator) -> Result<nccl::ncclRedOp_t> {
        if std::ptr::eq(self.comm, comm) || self.comm.as_raw() == comm.as_raw() {
            Ok(self.raw)
        } else {
            Err(Error::invalid(
                "PreMulSum",
                "the operation was made for another communicator; make one per communicator",
            ))
        }
    }
}

impl<T: DataType> Drop for PreMulSum<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the operation was made for this communicator, which outlives it, and is
        // destroyed once.
        let status = unsafe { nccl::ncclRedOpDestroy(self.raw, self.comm.as_raw()) };
        if let Err(e) = self.comm.status("ncclRedOpDestroy", status) {
            self.comm.context().defer(e.dropping("PreMulSum", None));
        }
    }
}
