//! The launch attributes that are plain values: the L2 access-policy window, the memory
//! synchronization domain map, device-updatable kernel nodes and NVLink-centric scheduling. Each is a hint or a setting the driver copies at the
//! call; none refers to anything that must outlive the launch.

use super::LaunchConfig;
use crate::error::{Error, Result};
use crate::memory::{DeviceView, DeviceViewMut};
use crate::stream::{AccessPolicyWindow, AccessProperty, CaptureStatus, Stream};
use bytemuck::Pod;
use cuhost_driver_sys as sys;

/// Which hardware memory-synchronization domain each logical domain
/// ([`MemSyncDomain`](super::MemSyncDomain)) of the kernel uses (`CUlaunchMemSyncDomainMap`).
///
/// Domain IDs are below the device's
/// [`mem_sync_domain_count`](crate::device::Device::mem_sync_domain_count) (4 on compute capability
/// 9.0); a launch with a larger one is an [`Error::InvalidArgument`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MemSyncDomainMap {
    /// The domain ID of kernels in [`MemSyncDomain::Default`](super::MemSyncDomain::Default).
    pub default: u8,
    /// The domain ID of kernels in [`MemSyncDomain::Remote`](super::MemSyncDomain::Remote).
    pub remote: u8,
}

impl MemSyncDomainMap {
    /// The map `default → default`, `remote → remote`.
    pub const fn new(default: u8, remote: u8) -> MemSyncDomainMap {
        MemSyncDomainMap { default, remote }
    }

    pub(super) fn as_raw(self) -> sys::CUlaunchMemSyncDomainMap {
        sys::CUlaunchMemSyncDomainMap { default_: self.default, remote: self.remote, ..Default::default() }
    }
}

impl AccessPolicyWindow {
    /// A window over the memory of `view`: accesses to a `hit_ratio` share of it get
    /// `hit_prop`, the others `miss_prop`.
    ///
    /// The window keeps the address and length, not the borrow: it is a cache hint the
    /// driver never dereferences, so a window that outlives the memory is harmless (it
    /// describes addresses nobody reads any more). Taking them from a view rather than a
    /// number keeps the range one the program owned.
    pub fn over<T: Pod>(
        view: &DeviceView<'_, T>,
        hit_ratio: f32,
        hit_prop: AccessProperty,
        miss_prop: AccessProperty,
    ) -> AccessPolicyWindow {
        AccessPolicyWindow {
            base: view.as_raw(),
            num_bytes: view.size_in_bytes(),
            hit_ratio,
            hit_prop,
            miss_prop,
        }
    }

    /// [`over`](Self::over) for an exclusive view.
    pub fn over_mut<T: Pod>(
        view: &DeviceViewMut<'_, T>,
        hit_ratio: f32,
        hit_prop: AccessProperty,
        miss_prop: AccessProperty,
    ) -> AccessPolicyWindow {
        AccessPolicyWindow::over(&view.as_view(), hit_ratio, hit_prop, miss_prop)
    }

    /// Refuses a hit ratio outside `[0, 1]` (NaN included) and a miss property the driver
    /// does not take (`Persisting`: misses are `Normal` or `Streaming`).
    pub(super) fn check(&self, operation: &'static str) -> Result<()> {
        if !(0.0..=1.0).contains(&self.hit_ratio) {
            return Err(Error::invalid(
                operation,
                format!("the access-policy window's hit_ratio {} is outside [0, 1]", self.hit_ratio),
            ));
        }
        if self.miss_prop == AccessProperty::Persisting {
            return Err(Error::invalid(
                operation,
                "the access-policy window's miss_prop is Persisting; misses are Normal or Streaming",
            ));
        }
        Ok(())
    }

    pub(super) fn as_raw(&self) -> sys::CUaccessPolicyWindow {
        sys::CUaccessPolicyWindow {
            base_ptr: self.base as *mut std::ffi::c_void,
            num_bytes: self.num_bytes,
            hitRatio: self.hit_ratio,
            hitProp: self.hit_prop.as_raw(),
            missProp: self.miss_prop.as_raw(),
            ..Default::default()
        }
    }

    /// The fields as integers, for equality and hashing (the ratio by its bits).
    pub(super) fn key(&self) -> (u64, usize, u32, AccessProperty, AccessProperty) {
        (self.base, self.num_bytes, self.hit_ratio.to_bits(), self.hit_prop, self.miss_prop)
    }
}

impl LaunchConfig<'_> {
    /// Sets the L2 access-policy window of this launch (`CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW`;
    /// [`AccessPolicyWindow::over`] makes one from a view). Checked at launch: the hit ratio
    /// in `[0, 1]`, misses not `Persisting`; a window larger than
    /// [`Device::max_access_policy_window_size`](crate::device::Device::max_access_policy_window_size)
    /// is refused by the driver.
    pub fn access_policy_window(mut self, window: AccessPolicyWindow) -> Self {
        self.access_policy_window = Some(window);
        self
    }

    /// Sets the memory synchronization domain map (`CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP`;
    /// compute capability 9.0). Each ID is checked against the device's domain count at
    /// launch.
    pub fn mem_sync_domain_map(mut self, map: MemSyncDomainMap) -> Self {
        self.mem_sync_domain_map = Some(map);
        self
    }

    /// Makes the kernel node this launch becomes in a stream capture device-updatable
    /// (`CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE`, CUDA 12.4): kernels can then change
    /// its parameters from the device. Graphs only: a launch on a stream that is not being
    /// captured is an [`Error::InvalidArgument`]. The node's device handle is read from the
    /// captured graph's node, not returned by the launch.
    pub fn device_updatable_kernel_node(mut self, on: bool) -> Self {
        self.device_updatable_kernel_node = on;
        self
    }

    /// Asks the driver to schedule the kernel for NVLink utilization
    /// (`CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING`, CUDA 13.0); a hint.
    pub fn nvlink_util_centric_scheduling(mut self, on: bool) -> Self {
        self.nvlink_util_centric_scheduling = on;
        self
    }

    /// The checks of the value attributes that need no stream.
    pub(super) fn check_values(&self, operation: &'static str) -> Result<()> {
        if let Some(window) = &self.access_policy_window {
            window.check(operation)?;
        }
        Ok(())
    }

    /// The checks of the value attributes that need the stream: the domain IDs against the
    /// stream's device (one attribute query), a device-updatable node only in a capture (one
    /// capture-status query). Nothing is asked when neither is set.
    #[cold]
    pub(super) fn check_values_on(&self, operation: &'static str, stream: &Stream) -> Result<()> {
        if let Some(map) = self.mem_sync_domain_map {
            let count = stream.context().device().mem_sync_domain_count()?;
            let largest = map.default.max(map.remote);
            if i32::from(largest) >= count {
                return Err(Error::invalid(
                    operation,
                    format!(
                        "memory synchronization domain {largest} was asked for; the device has {count} (IDs 0 to {})",
                        count - 1
                    ),
                ));
            }
        }
        if self.device_updatable_kernel_node && stream.capture_status()? != CaptureStatus::Active {
            return Err(Error::invalid(
                operation,
                "a device-updatable kernel node is made only in a graph: launch on a stream being captured, or add the node to a graph",
            ));
        }
        Ok(())
    }

    /// Whether [`check_values_on`](Self::check_values_on) has anything to do.
    #[inline]
    pub(super) fn needs_stream_checks(&self) -> bool {
        self.mem_sync_domain_map.is_some()
            || self.device_updatable_kernel_node
            || self.programmatic_event.is_some()
            || self.launch_completion_event.is_some()
    }

    /// Writes the value attributes this configuration asks for.
    pub(super) fn push_values(&self, out: &mut super::AttributeWriter<'_>) {
        use sys::CUlaunchAttributeID as Id;
        if let Some(window) = &self.access_policy_window {
            out.push(
                Id::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                sys::CUlaunchAttributeValue { accessPolicyWindow: window.as_raw() },
            );
        }
        if let Some(map) = self.mem_sync_domain_map {
            out.push(
                Id::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
                sys::CUlaunchAttributeValue { memSyncDomainMap: map.as_raw() },
            );
        }
        if self.device_updatable_kernel_node {
            out.push(
                Id::CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
                sys::CUlaunchAttributeValue {
                    deviceUpdatableKernelNode: sys::CUlaunchAttributeValue_union__bindgen_ty_5 {
                        deviceUpdatable: 1,
                        devNode: std::ptr::null_mut(),
                        ..Default::default()
                    },
                },
            );
        }
        if self.nvlink_util_centric_scheduling {
            out.push(
                Id::CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
                sys::CUlaunchAttributeValue { nvlinkUtilCentricScheduling: 1 },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::{ClusterScheduling, MAX_ATTRIBUTES, MemSyncDomain};
    use std::hash::{BuildHasher, RandomState};
    use std::mem::MaybeUninit;

    fn window(hit_ratio: f32, miss_prop: AccessProperty) -> AccessPolicyWindow {
        AccessPolicyWindow {
            base: 0x7000_0000,
            num_bytes: 1 << 20,
            hit_ratio,
            hit_prop: AccessProperty::Persisting,
            miss_prop,
        }
    }

    #[test]
    fn value_attributes_are_written_as_their_raw_values() {
        let mut attrs = [const { MaybeUninit::uninit() }; MAX_ATTRIBUTES];
        let config = LaunchConfig::new(4, 32)
            .access_policy_window(window(0.5, AccessProperty::Streaming))
            .mem_sync_domain_map(MemSyncDomainMap::new(0, 1))
            .device_updatable_kernel_node(true)
            .nvlink_util_centric_scheduling(true);
        let raw = config.raw_config(std::ptr::null_mut(), &mut attrs);
        assert_eq!(raw.numAttrs, 4);
        use sys::CUlaunchAttributeID as Id;
        // SAFETY: the first four were written by raw_config, each with the variant read here.
        unsafe {
            let at = |i: usize| attrs[i].assume_init_ref();
            assert_eq!(at(0).id, Id::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW);
            let w = at(0).value.accessPolicyWindow;
            assert_eq!((w.base_ptr as u64, w.num_bytes, w.hitRatio), (0x7000_0000, 1 << 20, 0.5));
            assert_eq!(w.hitProp, sys::CUaccessProperty::CU_ACCESS_PROPERTY_PERSISTING);
            assert_eq!(w.missProp, sys::CUaccessProperty::CU_ACCESS_PROPERTY_STREAMING);
            assert_eq!(at(1).id, Id::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP);
            assert_eq!((at(1).value.memSyncDomainMap.default_, at(1).value.memSyncDomainMap.remote), (0, 1));
            assert_eq!(at(2).id, Id::CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE);
            assert_eq!(at(2).value.deviceUpdatableKernelNode.deviceUpdatable, 1);
            assert_eq!(at(3).id, Id::CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING);
            assert_eq!(at(3).value.nvlinkUtilCentricScheduling, 1);
        }
        assert!(config.check("t", 0).is_ok());
    }

    #[test]
    fn every_value_attribute_at_once_fits_with_room_for_the_two_events() {
        let mut attrs = [const { MaybeUninit::uninit() }; MAX_ATTRIBUTES];
        let all = LaunchConfig::new(8, 64)
            .cluster(2)
            .cooperative(true)
            .priority(0)
            .programmatic_stream_serialization(true)
            .cluster_scheduling(ClusterScheduling::Spread)
            .preferred_cluster(4)
            .mem_sync_domain(MemSyncDomain::Remote)
            .shared_memory_carveout(10)
            .access_policy_window(window(1.0, AccessProperty::Normal))
            .mem_sync_domain_map(MemSyncDomainMap::default())
            .device_updatable_kernel_node(true)
            .nvlink_util_centric_scheduling(true);
        let raw = all.raw_config(std::ptr::null_mut(), &mut attrs);
        // The programmatic and launch-completion events are the other two.
        assert_eq!(raw.numAttrs as usize + 2, MAX_ATTRIBUTES);
        let ids: std::collections::HashSet<u32> =
            // SAFETY: raw_config wrote the first numAttrs.
            attrs[..raw.numAttrs as usize].iter().map(|a| unsafe { a.assume_init_ref() }.id.0).collect();
        assert_eq!(ids.len(), raw.numAttrs as usize, "each attribute once");
        let raw = all.raw_launch_config(std::ptr::null_mut(), &mut attrs);
        assert_eq!(raw.numAttrs as usize + 2, MAX_ATTRIBUTES, "no events set: none written");
    }

    #[test]
    fn bad_windows_are_refused_and_configurations_compare_by_value() {
        for bad in [
            window(-0.1, AccessProperty::Normal),
            window(1.5, AccessProperty::Normal),
            window(f32::NAN, AccessProperty::Normal),
            window(0.5, AccessProperty::Persisting),
        ] {
            let e = LaunchConfig::new(1, 1).access_policy_window(bad).check("t", 0);
            assert!(matches!(e, Err(Error::InvalidArgument { .. })), "{bad:?}: {e:?}");
        }
        let a = LaunchConfig::new(1, 1).access_policy_window(window(0.25, AccessProperty::Normal));
        let b = LaunchConfig::new(1, 1).access_policy_window(window(0.25, AccessProperty::Normal));
        assert_eq!(a, b);
        assert_ne!(a, b.nvlink_util_centric_scheduling(true));
        let hash = |c: &LaunchConfig<'_>| {
            let s = RandomState::new();
            (s.hash_one(c), s)
        };
        let (h, s) = hash(&a);
        assert_eq!(h, s.hash_one(b));
    }
}
