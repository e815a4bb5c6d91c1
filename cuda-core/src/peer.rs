//! Peer access between devices: whether one device can reach another's memory, enabling and
//! disabling that access for a context, peer-to-peer attributes, and copies between contexts.
//!
//! See [Peer Context Memory Access](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html).
//! These are methods of [`Device`] and [`Context`]. Copies between contexts or devices are the
//! buffers' and views' own copies ([`DeviceBuffer::copy_from_device`](crate::memory::DeviceBuffer::copy_from_device),
//! [`DeviceViewMut::copy_from_device_async`](crate::memory::DeviceViewMut::copy_from_device_async)), which
//! use `cuMemcpyPeer` when the contexts differ.

use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

/// A peer-to-peer attribute of a pair of devices (`CUdevice_P2PAttribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum P2PAttribute {
    /// `CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK`: relative performance of the link (lower is better).
    PerformanceRank,
    /// `CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED`: peer access can be enabled.
    AccessSupported,
    /// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`: atomics over the link are native.
    NativeAtomicSupported,
    /// `CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED`: CUDA arrays can be accessed over the link.
    CudaArrayAccessSupported,
    /// `CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED`: only some atomics are native.
    OnlyPartialNativeAtomicSupported,
}

impl P2PAttribute {
    /// The raw attribute.
    pub fn as_raw(self) -> sys::CUdevice_P2PAttribute {
        use sys::CUdevice_P2PAttribute as R;
        match self {
            P2PAttribute::PerformanceRank => R::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
            P2PAttribute::AccessSupported => R::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
            P2PAttribute::NativeAtomicSupported => R::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
            P2PAttribute::CudaArrayAccessSupported => R::CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED,
            P2PAttribute::OnlyPartialNativeAtomicSupported => {
                R::CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED
            }
        }
    }
}

impl TryFrom<sys::CUdevice_P2PAttribute> for P2PAttribute {
    type Error = Error;
    fn try_from(raw: sys::CUdevice_P2PAttribute) -> Result<Self> {
        use P2PAttribute::*;
        [
            PerformanceRank,
            AccessSupported,
            NativeAtomicSupported,
            CudaArrayAccessSupported,
            OnlyPartialNativeAtomicSupported,
        ]
        .into_iter()
        .find(|a| a.as_raw() == raw)
        .ok_or_else(|| Error::invalid("P2PAttribute::try_from", format!("unknown P2P attribute {}", raw.0)))
    }
}

impl Device {
    /// Whether contexts on this device can access memory of `peer`
    /// ([`cuDeviceCanAccessPeer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html)).
    /// A device is not its own peer.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        crate::device::init()?;
        let mut can = 0;
        // SAFETY: one out-parameter.
        unsafe { driver!(cuDeviceCanAccessPeer(&mut can, self.as_raw(), peer.as_raw())) }?;
        Ok(can != 0)
    }

    /// A peer-to-peer attribute of the link from this device to `peer`
    /// ([`cuDeviceGetP2PAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html)).
    ///
    /// Asking about a device and itself is an [`Error::InvalidArgument`]: there is no link.
    pub fn p2p_attribute(&self, peer: &Device, attribute: P2PAttribute) -> Result<i32> {
        if self == peer {
            return Err(Error::invalid(
                "Device::p2p_attribute",
                "a device has no peer-to-peer link to itself",
            ));
        }
        crate::device::init()?;
        let mut value = 0;
        // SAFETY: one out-parameter.
        unsafe {
            driver!(cuDeviceGetP2PAttribute(&mut value, attribute.as_raw(), self.as_raw(), peer.as_raw()))
        }?;
        Ok(value)
    }
}

impl Context {
    /// Lets this context access memory allocated in `peer`
    /// ([`cuCtxEnablePeerAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html)).
    /// Access is one-way: enable it on both to go both ways. Enabling twice is
    /// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<()> {
        if self == peer {
            return Err(Error::invalid("Context::enable_peer_access", "a context cannot be its own peer"));
        }
        self.enter()?;
        // SAFETY: `peer` is a live context; flags must be 0; this context is current.
        unsafe { driver!(cuCtxEnablePeerAccess(peer.as_raw(), 0)) }
    }

    /// Stops this context's access to memory of `peer`
    /// ([`cuCtxDisablePeerAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html)).
    /// Disabling access that is not enabled is `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED`.
    pub fn disable_peer_access(&self, peer: &Context) -> Result<()> {
        self.enter()?;
        // SAFETY: `peer` is a live context; this context is current.
        unsafe { driver!(cuCtxDisablePeerAccess(peer.as_raw())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip() {
        for a in [
            P2PAttribute::PerformanceRank,
            P2PAttribute::AccessSupported,
            P2PAttribute::NativeAtomicSupported,
            P2PAttribute::CudaArrayAccessSupported,
            P2PAttribute::OnlyPartialNativeAtomicSupported,
        ] {
            assert_eq!(P2PAttribute::try_from(a.as_raw()).ok(), Some(a));
        }
        assert!(P2PAttribute::try_from(sys::CUdevice_P2PAttribute(99)).is_err());
    }
}
