//! Stream attributes (access-policy window, priority) and capture status.

use super::Stream;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

/// How accesses to memory are treated by the L2 cache (`CUaccessProperty`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessProperty {
    /// `CU_ACCESS_PROPERTY_NORMAL`.
    Normal,
    /// `CU_ACCESS_PROPERTY_STREAMING`: less likely to persist in L2.
    Streaming,
    /// `CU_ACCESS_PROPERTY_PERSISTING`: more likely to persist in L2.
    Persisting,
}

impl AccessProperty {
    /// The raw `CUaccessProperty`.
    pub fn as_raw(self) -> sys::CUaccessProperty {
        use sys::CUaccessProperty as P;
        match self {
            AccessProperty::Normal => P::CU_ACCESS_PROPERTY_NORMAL,
            AccessProperty::Streaming => P::CU_ACCESS_PROPERTY_STREAMING,
            AccessProperty::Persisting => P::CU_ACCESS_PROPERTY_PERSISTING,
        }
    }
}

impl TryFrom<sys::CUaccessProperty> for AccessProperty {
    type Error = Error;
    fn try_from(raw: sys::CUaccessProperty) -> Result<AccessProperty> {
        use AccessProperty::*;
        [Normal, Streaming, Persisting].into_iter().find(|p| p.as_raw() == raw).ok_or_else(|| {
            Error::invalid("AccessProperty::try_from", format!("unknown CUaccessProperty {}", raw.0))
        })
    }
}

/// An L2 access-policy window (`CUaccessPolicyWindow`): a device address range and how hits
/// and misses in it are treated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AccessPolicyWindow {
    /// Start of the range (a device address).
    pub base: sys::CUdeviceptr,
    /// Length of the range in bytes (at most `Device::max_access_policy_window_size`).
    pub num_bytes: usize,
    /// Fraction of accesses given `hit_prop`, in `[0, 1]`.
    pub hit_ratio: f32,
    /// Property of the `hit_ratio` fraction of accesses.
    pub hit_prop: AccessProperty,
    /// Property of the other accesses.
    pub miss_prop: AccessProperty,
}

/// Whether a stream is being captured into a graph (`CUstreamCaptureStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// `CU_STREAM_CAPTURE_STATUS_NONE`: not capturing.
    None,
    /// `CU_STREAM_CAPTURE_STATUS_ACTIVE`: capturing.
    Active,
    /// `CU_STREAM_CAPTURE_STATUS_INVALIDATED`: the capture failed and must be ended.
    Invalidated,
}

impl TryFrom<sys::CUstreamCaptureStatus> for CaptureStatus {
    type Error = Error;
    fn try_from(raw: sys::CUstreamCaptureStatus) -> Result<CaptureStatus> {
        use sys::CUstreamCaptureStatus as S;
        match raw {
            S::CU_STREAM_CAPTURE_STATUS_NONE => Ok(CaptureStatus::None),
            S::CU_STREAM_CAPTURE_STATUS_ACTIVE => Ok(CaptureStatus::Active),
            S::CU_STREAM_CAPTURE_STATUS_INVALIDATED => Ok(CaptureStatus::Invalidated),
            _ => Err(Error::invalid(
                "CaptureStatus::try_from",
                format!("unknown CUstreamCaptureStatus {}", raw.0),
            )),
        }
    }
}

/// How the CPU thread waits for work of a stream (`CUsynchronizationPolicy`): spin, yield or
/// block while it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncPolicy {
    /// `CU_SYNC_POLICY_AUTO`: the driver picks from the number of active contexts and
    /// processors.
    Auto,
    /// `CU_SYNC_POLICY_SPIN`: spin; lowest latency, one busy core.
    Spin,
    /// `CU_SYNC_POLICY_YIELD`: spin, yielding the thread between checks.
    Yield,
    /// `CU_SYNC_POLICY_BLOCKING_SYNC`: block on a synchronization primitive.
    BlockingSync,
}

impl SyncPolicy {
    /// The raw `CUsynchronizationPolicy`.
    pub fn as_raw(self) -> sys::CUsynchronizationPolicy {
        use sys::CUsynchronizationPolicy as P;
        match self {
            SyncPolicy::Auto => P::CU_SYNC_POLICY_AUTO,
            SyncPolicy::Spin => P::CU_SYNC_POLICY_SPIN,
            SyncPolicy::Yield => P::CU_SYNC_POLICY_YIELD,
            SyncPolicy::BlockingSync => P::CU_SYNC_POLICY_BLOCKING_SYNC,
        }
    }
}

impl TryFrom<sys::CUsynchronizationPolicy> for SyncPolicy {
    type Error = Error;
    fn try_from(raw: sys::CUsynchronizationPolicy) -> Result<SyncPolicy> {
        use SyncPolicy::*;
        [Auto, Spin, Yield, BlockingSync].into_iter().find(|p| p.as_raw() == raw).ok_or_else(|| {
            Error::invalid("SyncPolicy::try_from", format!("unknown CUsynchronizationPolicy {}", raw.0))
        })
    }
}

impl Stream {
    fn get_attribute(&self, id: sys::CUstreamAttrID) -> Result<sys::CUstreamAttrValue> {
        // SAFETY: a plain C union; all zeroes is a valid value.
        let mut v: sys::CUstreamAttrValue = unsafe { std::mem::zeroed() };
        // SAFETY: the stream is alive; the union is large enough for any attribute.
        unsafe { driver!(cuStreamGetAttribute(self.as_raw(), id, &mut v)) }?;
        Ok(v)
    }

    fn set_attribute(&self, id: sys::CUstreamAttrID, v: &sys::CUstreamAttrValue) -> Result<()> {
        self.context().take_deferred()?;
        // SAFETY: the stream is alive; the value is initialised for this attribute.
        unsafe { driver!(cuStreamSetAttribute(self.as_raw(), id, v)) }
    }

    /// The stream's L2 access-policy window
    /// ([`cuStreamGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// Fails with the driver's status when it refuses the query, and with an
    /// [`Error::InvalidArgument`] for an access property this crate does not know.
    pub fn access_policy_window(&self) -> Result<AccessPolicyWindow> {
        let v = self.get_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW)?;
        // SAFETY: the driver wrote this member for this attribute.
        let w = unsafe { v.accessPolicyWindow };
        Ok(AccessPolicyWindow {
            base: w.base_ptr as sys::CUdeviceptr,
            num_bytes: w.num_bytes,
            hit_ratio: w.hitRatio,
            hit_prop: AccessProperty::try_from(w.hitProp)?,
            miss_prop: AccessProperty::try_from(w.missProp)?,
        })
    }

    /// Sets the stream's L2 access-policy window; `hit_ratio` must be in `[0, 1]`
    /// ([`cuStreamSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// A `hit_ratio` outside `[0, 1]` is an [`Error::InvalidArgument`]; a window larger than
    /// the device allows
    /// ([`Device::max_access_policy_window_size`](crate::device::Device::max_access_policy_window_size))
    /// is refused by the driver.
    pub fn set_access_policy_window(&self, window: &AccessPolicyWindow) -> Result<()> {
        if !(0.0..=1.0).contains(&window.hit_ratio) {
            return Err(Error::invalid(
                "Stream::set_access_policy_window",
                format!("hit_ratio {} is outside [0, 1]", window.hit_ratio),
            ));
        }
        // SAFETY: a plain C union; all zeroes is a valid value.
        let mut v: sys::CUstreamAttrValue = unsafe { std::mem::zeroed() };
        v.accessPolicyWindow = sys::CUaccessPolicyWindow {
            base_ptr: window.base as *mut std::ffi::c_void,
            num_bytes: window.num_bytes,
            hitRatio: window.hit_ratio,
            hitProp: window.hit_prop.as_raw(),
            missProp: window.miss_prop.as_raw(),
            ..Default::default()
        };
        self.set_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v)
    }

    /// How a host thread waits for this stream's work (`CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY`,
    /// a stream attribute only)
    /// ([`cuStreamGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// Fails with the driver's status when it refuses the query, and with an
    /// [`Error::InvalidArgument`] for a policy this crate does not know.
    pub fn sync_policy(&self) -> Result<SyncPolicy> {
        let v = self.get_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY)?;
        // SAFETY: the driver wrote this member for this attribute.
        SyncPolicy::try_from(unsafe { v.syncPolicy })
    }

    /// Sets how a host thread waits for this stream's work
    /// ([`cuStreamSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html));
    /// an error only when the driver refuses the value.
    pub fn set_sync_policy(&self, policy: SyncPolicy) -> Result<()> {
        // SAFETY: a plain C union; all zeroes is a valid value.
        let mut v: sys::CUstreamAttrValue = unsafe { std::mem::zeroed() };
        v.syncPolicy = policy.as_raw();
        self.set_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v)
    }

    /// The stream's priority attribute
    /// ([`cuStreamGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html));
    /// an error only when the driver refuses the query.
    pub fn priority_attribute(&self) -> Result<i32> {
        let v = self.get_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY)?;
        // SAFETY: the driver wrote this member for this attribute.
        Ok(unsafe { v.priority })
    }

    /// Sets the stream's priority attribute, applied to work launched later
    /// ([`cuStreamSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html));
    /// an error only when the driver refuses the value.
    pub fn set_priority_attribute(&self, priority: i32) -> Result<()> {
        // SAFETY: a plain C union; all zeroes is a valid value.
        let mut v: sys::CUstreamAttrValue = unsafe { std::mem::zeroed() };
        v.priority = priority;
        self.set_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY, &v)
    }

    /// Copies all attributes of `source` to this stream
    /// ([`cuStreamCopyAttributes`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn copy_attributes_from(&self, source: &Stream) -> Result<()> {
        // SAFETY: both streams are alive.
        unsafe { driver!(cuStreamCopyAttributes(self.as_raw(), source.as_raw())) }
    }

    /// Whether the stream is being captured into a graph
    /// ([`cuStreamIsCapturing`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        let mut s = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the stream is alive; one out-parameter.
        unsafe { driver!(cuStreamIsCapturing(self.as_raw(), &mut s)) }?;
        CaptureStatus::try_from(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_policies_round_trip_and_unknown_ones_are_refused() {
        for p in [SyncPolicy::Auto, SyncPolicy::Spin, SyncPolicy::Yield, SyncPolicy::BlockingSync] {
            assert_eq!(SyncPolicy::try_from(p.as_raw()).ok(), Some(p));
        }
        assert!(SyncPolicy::try_from(sys::CUsynchronizationPolicy(99)).is_err());
    }
}
