//! Workqueue configurations (CUDA 13.1): how many stream-ordered workloads a green context
//! expects to run at once, and whether its work queues are shared with other contexts.
//!
//! Built where the bindings come from CUDA 13.1 headers or newer.

use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

/// How a green context's work queues are shared (`CUdevWorkqueueConfigScope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkqueueScope {
    /// `CU_WORKQUEUE_SCOPE_DEVICE_CTX`: share the work queues of every context (the driver's
    /// default).
    DeviceContext,
    /// `CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED`: where possible, use work queues no other
    /// balanced green context uses.
    GreenContextBalanced,
}

impl WorkqueueScope {
    /// The raw value.
    pub fn as_raw(self) -> sys::CUdevWorkqueueConfigScope {
        match self {
            WorkqueueScope::DeviceContext => sys::CUdevWorkqueueConfigScope::CU_WORKQUEUE_SCOPE_DEVICE_CTX,
            WorkqueueScope::GreenContextBalanced => {
                sys::CUdevWorkqueueConfigScope::CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED
            }
        }
    }
}

impl TryFrom<sys::CUdevWorkqueueConfigScope> for WorkqueueScope {
    type Error = Error;
    fn try_from(raw: sys::CUdevWorkqueueConfigScope) -> Result<Self> {
        use sys::CUdevWorkqueueConfigScope as S;
        match raw {
            S::CU_WORKQUEUE_SCOPE_DEVICE_CTX => Ok(WorkqueueScope::DeviceContext),
            S::CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED => Ok(WorkqueueScope::GreenContextBalanced),
            other => Err(Error::invalid(
                "WorkqueueScope::try_from",
                format!("unknown workqueue sharing scope {}; a newer crate may know it", other.0),
            )),
        }
    }
}

/// A workqueue configuration (a `CUdevResource` of type `CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG`):
/// a value to read from a device or context, change, and give to
/// [`GreenContext::create`](super::GreenContext::create) alongside its SMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WorkqueueConfig {
    /// The device whose work queues these are.
    pub device: Device,
    /// The most stream-ordered workloads expected to run at once. The driver's limit comes
    /// from `CUDA_DEVICE_MAX_CONNECTIONS` (read it from the primary context with
    /// [`WorkqueueConfig::of_context`]); a larger value is accepted, but then work queues may
    /// be shared.
    pub concurrency_limit: u32,
    /// How the work queues are shared.
    pub scope: WorkqueueScope,
}

impl WorkqueueConfig {
    /// The device's workqueue configuration
    /// ([`cuDeviceGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
    /// A driver older than 13.1 refuses the resource type (`CUDA_ERROR_INVALID_RESOURCE_TYPE`).
    pub fn of_device(device: &Device) -> Result<WorkqueueConfig> {
        let kind = sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG;
        WorkqueueConfig::from_resource(&super::resource::device_resource(device, kind)?)
    }

    /// The workqueue configuration of `ctx`; the primary context's gives the driver's
    /// concurrency limit
    /// ([`cuCtxGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
    ///
    /// Fails with an error kept from a `Drop` in the context, or the driver's status
    /// (`cuCtxGetDevResource`; a driver older than 13.1 refuses the resource type).
    pub fn of_context(ctx: &Context) -> Result<WorkqueueConfig> {
        let kind = sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG;
        WorkqueueConfig::from_resource(&super::resource::context_resource(ctx, kind)?)
    }

    /// Reads a resource the driver wrote for a workqueue configuration.
    pub(super) fn from_resource(raw: &sys::CUdevResource) -> Result<WorkqueueConfig> {
        // SAFETY: every member of the union is plain integers (and an enum newtype over one), for
        // which any bytes are valid; the driver filled this member, the one asked for.
        let wq = unsafe { raw.__bindgen_anon_1.wqConfig };
        Ok(WorkqueueConfig {
            device: Device::from_raw(wq.device),
            concurrency_limit: wq.wqConcurrencyLimit,
            scope: WorkqueueScope::try_from(wq.sharingScope)?,
        })
    }

    /// The raw resource.
    pub fn as_raw(&self) -> sys::CUdevResource {
        sys::CUdevResource {
            type_: sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG,
            __bindgen_anon_1: sys::CUdevResource_st__bindgen_ty_1 {
                wqConfig: sys::CUdevWorkqueueConfigResource {
                    device: self.device.as_raw(),
                    wqConcurrencyLimit: self.concurrency_limit,
                    sharingScope: self.scope.as_raw(),
                    ..Default::default()
                },
            },
            ..Default::default()
        }
    }
}
