//! Peer access between devices: whether one device can reach another's memory, enabling and
//! disabling that access for a context, peer-to-peer attributes, and copies between contexts.
//!
//! See [Peer Context Memory Access](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html).
//! These are methods of [`Device`] and [`Context`], plus [`copy_peer`] and [`copy_peer_async`].

use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result, check};
use crate::memory::{DeviceView, DeviceViewMut};
use crate::stream::Stream;
use bytemuck::Pod;
use cuda_driver_sys as sys;

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
        check("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.as_raw(), peer.as_raw())
        })?;
        Ok(can != 0)
    }

    /// A peer-to-peer attribute of the link from this device to `peer`
    /// ([`cuDeviceGetP2PAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html)).
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
        check("cuDeviceGetP2PAttribute", unsafe {
            sys::cuDeviceGetP2PAttribute(&mut value, attribute.as_raw(), self.as_raw(), peer.as_raw())
        })?;
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
        check("cuCtxEnablePeerAccess", unsafe { sys::cuCtxEnablePeerAccess(peer.as_raw(), 0) })
    }

    /// Stops this context's access to memory of `peer`
    /// ([`cuCtxDisablePeerAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html)).
    /// Disabling access that is not enabled is `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED`.
    pub fn disable_peer_access(&self, peer: &Context) -> Result<()> {
        self.enter()?;
        // SAFETY: `peer` is a live context; this context is current.
        check("cuCtxDisablePeerAccess", unsafe { sys::cuCtxDisablePeerAccess(peer.as_raw()) })
    }
}

fn same_len(operation: &'static str, dst: usize, src: usize) -> Result<()> {
    if dst == src {
        Ok(())
    } else {
        Err(Error::invalid(operation, format!("destination has {dst} elements but source has {src}")))
    }
}

/// Copies device memory between contexts (on the same or different devices), with or without
/// peer access enabled
/// ([`cuMemcpyPeer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
pub fn copy_peer<T: Pod>(dst: &mut DeviceViewMut<'_, T>, src: &DeviceView<'_, T>) -> Result<()> {
    same_len("copy_peer", dst.len(), src.len())?;
    dst.context().enter()?;
    // SAFETY: both views hold `size_in_bytes()` bytes in their contexts.
    check("cuMemcpyPeer", unsafe {
        sys::cuMemcpyPeer(
            dst.device_ptr(),
            dst.context().as_raw(),
            src.device_ptr(),
            src.context().as_raw(),
            src.size_in_bytes(),
        )
    })
}

/// [`copy_peer`] queued on `stream`
/// ([`cuMemcpyPeerAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
pub fn copy_peer_async<T: Pod>(
    dst: &mut DeviceViewMut<'_, T>,
    src: &DeviceView<'_, T>,
    stream: &Stream,
) -> Result<()> {
    same_len("copy_peer_async", dst.len(), src.len())?;
    stream.context().enter()?;
    // SAFETY: both views hold `size_in_bytes()` bytes; their buffers' frees are ordered after
    // work queued before them, as for any async copy of device buffers.
    check("cuMemcpyPeerAsync", unsafe {
        sys::cuMemcpyPeerAsync(
            dst.device_ptr(),
            dst.context().as_raw(),
            src.device_ptr(),
            src.context().as_raw(),
            src.size_in_bytes(),
            stream.as_raw(),
        )
    })
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
