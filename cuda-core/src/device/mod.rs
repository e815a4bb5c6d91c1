//! Devices: enumeration, identity (name, UUID, LUID, PCI bus id), memory and attributes.
//!
//! See the [Device Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)
//! section of the driver API.

mod atomics;
mod attributes;
mod notification;
mod ordinal;

pub use atomics::{AtomicCaps, AtomicOp};
pub use notification::{AsyncNotification, AsyncNotifications};
pub use ordinal::DeviceOrdinal;

use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

/// Initialises the driver once per process ([`cuInit`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html)).
///
/// Every constructor in this crate calls it; calling it yourself is only needed before raw
/// `-sys` calls.
pub fn init() -> Result<()> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: cuInit takes flags, which must be 0.
        unsafe { driver!(cuInit(0)) }
    })
    .clone()
}

/// The version of the installed driver, e.g. `13000` for 13.0
/// ([`cuDriverGetVersion`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VERSION.html)).
pub fn driver_version() -> Result<i32> {
    let mut v = 0;
    // SAFETY: one int out-parameter.
    unsafe { driver!(cuDriverGetVersion(&mut v)) }?;
    Ok(v)
}

/// A device's 16-byte UUID, as `nvidia-smi -L` prints it (`GPU-xxxxxxxx-...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Uuid(pub [u8; 16]);

impl std::fmt::Display for Uuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GPU-")?;
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A device's locally unique identifier and node mask (Windows with WDDM only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Luid {
    /// The 8-byte LUID.
    pub luid: [u8; 8],
    /// The device node mask.
    pub node_mask: u32,
}

/// Where [`flush_gpu_direct_rdma_writes`] makes writes visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushGpuDirectRdmaWritesScope {
    /// To the CUDA context's owner (the device of the current context).
    ToOwner,
    /// To all devices.
    ToAllDevices,
}

/// Makes GPUDirect RDMA writes to the current context's memory visible to later CUDA work
/// ([`cuFlushGPUDirectRDMAWrites`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
///
/// Bind a context first ([`crate::context::Context::bind_to_thread`]). Check
/// [`Device::gpu_direct_rdma_flush_writes_options`] for support: a device or scope without it
/// fails with the driver's status, as does a thread with no current context
/// (`CUDA_ERROR_INVALID_CONTEXT`).
pub fn flush_gpu_direct_rdma_writes(scope: FlushGpuDirectRdmaWritesScope) -> Result<()> {
    let scope = match scope {
        FlushGpuDirectRdmaWritesScope::ToOwner => {
            sys::CUflushGPUDirectRDMAWritesScope::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER
        }
        FlushGpuDirectRdmaWritesScope::ToAllDevices => {
            sys::CUflushGPUDirectRDMAWritesScope::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES
        }
    };
    // SAFETY: both arguments are valid enumerators.
    unsafe {
        driver!(cuFlushGPUDirectRDMAWrites(
            sys::CUflushGPUDirectRDMAWritesTarget::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
            scope,
        ))
    }
}

/// A CUDA device, identified by its ordinal.
///
/// A `Device` is a plain handle: copying it is free and it owns nothing. Use
/// [`crate::context::Context::primary`] to get a context on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    raw: sys::CUdevice,
}

impl Device {
    /// The number of devices
    /// ([`cuDeviceGetCount`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn count() -> Result<usize> {
        init()?;
        let mut n = 0;
        // SAFETY: one int out-parameter.
        unsafe { driver!(cuDeviceGetCount(&mut n)) }?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// The device of the given ordinal
    /// ([`cuDeviceGet`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    ///
    /// The ordinal may be any primitive integer up to 64 bits ([`DeviceOrdinal`]): the `int`
    /// CUDA code holds, a `u32`, a `usize` index, or a literal.
    ///
    /// # Errors
    ///
    /// An ordinal no device can have is an [`Error::InvalidArgument`] that says why: a negative
    /// one, or one the driver's `int` cannot hold, before any driver call; one past the last
    /// device, saying how many devices there are. Loading or initialising the driver fails
    /// with that error, as [`Device::count`] does.
    ///
    /// ```no_run
    /// use cuhost::Device;
    ///
    /// let first = Device::get(0)?;
    /// let from_c: i32 = 1; // as `cudaGetDevice` or an MPI rank gives it
    /// let second = Device::get(from_c)?;
    /// let third = Device::get(2u32)?;
    /// assert!(Device::get(-1).is_err());
    /// # let _ = (first, second, third);
    /// # Ok::<(), cuhost::Error>(())
    /// ```
    pub fn get(ordinal: impl DeviceOrdinal) -> Result<Device> {
        let ordinal = ordinal::as_int(ordinal)?;
        let ordinal = ordinal::within(ordinal, Device::count()?)?;
        let mut raw = 0;
        // SAFETY: one out-parameter; the ordinal is one of the devices present.
        unsafe { driver!(cuDeviceGet(&mut raw, ordinal)) }?;
        Ok(Device { raw })
    }

    /// All devices, in ordinal order; empty when the driver sees none.
    ///
    /// Fails only when the driver cannot be loaded or initialised, with the error of
    /// [`Device::count`].
    pub fn all() -> Result<Vec<Device>> {
        (0..Device::count()?).map(Device::get).collect()
    }

    /// The device with the given PCI bus id, in the form `[domain]:[bus]:[device].[function]`
    /// ([`cuDeviceGetByPCIBusId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// A string with a NUL byte is an [`Error::InvalidArgument`]; a malformed id, or one no
    /// device has, fails with the driver's status.
    pub fn by_pci_bus_id(pci_bus_id: &str) -> Result<Device> {
        init()?;
        let id = CString::new(pci_bus_id)
            .map_err(|_| Error::invalid("Device::by_pci_bus_id", "the PCI bus id contains a NUL byte"))?;
        let mut raw = 0;
        // SAFETY: a NUL-terminated string and one out-parameter.
        unsafe { driver!(cuDeviceGetByPCIBusId(&mut raw, id.as_ptr())) }?;
        Ok(Device { raw })
    }

    /// The device with the given UUID, or an [`Error::InvalidArgument`] if none has it.
    pub fn by_uuid(uuid: &Uuid) -> Result<Device> {
        for device in Device::all()? {
            if device.uuid()? == *uuid {
                return Ok(device);
            }
        }
        Err(Error::invalid("Device::by_uuid", format!("no device has UUID {uuid}")))
    }

    /// Wraps a raw device handle (an ordinal; nothing is owned).
    pub fn from_raw(raw: sys::CUdevice) -> Device {
        Device { raw }
    }

    /// The raw `CUdevice`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUdevice {
        self.raw
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        usize::try_from(self.raw).unwrap_or(0)
    }

    /// The device's name, e.g. `NVIDIA H100 80GB HBM3`
    /// ([`cuDeviceGetName`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn name(&self) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer holds 256 bytes and its length is passed.
        unsafe { driver!(cuDeviceGetName(buf.as_mut_ptr(), 256, self.raw)) }?;
        Ok(c_string(&buf))
    }

    /// The device's UUID
    /// ([`cuDeviceGetUuid`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn uuid(&self) -> Result<Uuid> {
        let mut uuid = sys::CUuuid { bytes: [0; 16], ..Default::default() };
        // SAFETY: one out-parameter of the right type.
        unsafe { driver!(cuDeviceGetUuid(&mut uuid, self.raw)) }?;
        Ok(Uuid(uuid.bytes.map(|b| b as u8)))
    }

    /// The device's LUID and node mask; only Windows with the WDDM driver model has them
    /// ([`cuDeviceGetLuid`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn luid(&self) -> Result<Luid> {
        let mut luid = [0 as c_char; 8];
        let mut node_mask = 0;
        // SAFETY: an 8-byte buffer, as the call requires, and one out-parameter.
        unsafe { driver!(cuDeviceGetLuid(luid.as_mut_ptr(), &mut node_mask, self.raw)) }?;
        Ok(Luid { luid: luid.map(|b| b as u8), node_mask })
    }

    /// The device's PCI bus id, `[domain]:[bus]:[device].[function]`
    /// ([`cuDeviceGetPCIBusId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn pci_bus_id(&self) -> Result<String> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: the buffer holds 64 bytes and its length is passed.
        unsafe { driver!(cuDeviceGetPCIBusId(buf.as_mut_ptr(), 64, self.raw)) }?;
        Ok(c_string(&buf))
    }

    /// Total device memory in bytes
    /// ([`cuDeviceTotalMem`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn total_memory(&self) -> Result<usize> {
        let mut bytes = 0;
        // SAFETY: one out-parameter.
        unsafe { driver!(cuDeviceTotalMem(&mut bytes, self.raw)) }?;
        Ok(bytes)
    }

    /// The compute capability as `(major, minor)`, e.g. `(9, 0)` for an H100.
    ///
    /// Reads two attributes; fails as [`Device::attribute`] does.
    pub fn compute_capability(&self) -> Result<(i32, i32)> {
        Ok((self.compute_capability_major()?, self.compute_capability_minor()?))
    }

    /// Any device attribute, raw
    /// ([`cuDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    /// The typed accessors (e.g. [`Device::multiprocessor_count`]) cover every attribute.
    pub fn attribute(&self, attribute: sys::CUdevice_attribute) -> Result<i32> {
        let mut v = 0;
        // SAFETY: one int out-parameter; an unknown attribute is refused by the driver.
        unsafe { driver!(cuDeviceGetAttribute(&mut v, attribute, self.raw)) }?;
        Ok(v)
    }

    /// Whether contexts on this device may be given an SM-count execution affinity
    /// ([`Context::create_with_affinity`](crate::context::Context::create_with_affinity))
    /// ([`cuDeviceGetExecAffinitySupport`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn exec_affinity_supported(&self) -> Result<bool> {
        let mut v = 0;
        // SAFETY: one int out-parameter.
        unsafe {
            driver!(cuDeviceGetExecAffinitySupport(
                &mut v,
                sys::CUexecAffinityType::CU_EXEC_AFFINITY_TYPE_SM_COUNT,
                self.raw,
            ))
        }?;
        Ok(v != 0)
    }

    /// The device's default memory pool, raw
    /// ([`cuDeviceGetDefaultMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn default_memory_pool(&self) -> Result<sys::CUmemoryPool> {
        let mut pool = std::ptr::null_mut();
        // SAFETY: one out-parameter.
        unsafe { driver!(cuDeviceGetDefaultMemPool(&mut pool, self.raw)) }?;
        Ok(pool)
    }

    /// The device's current memory pool (the one `cuMemAllocAsync` uses), raw
    /// ([`cuDeviceGetMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn memory_pool(&self) -> Result<sys::CUmemoryPool> {
        let mut pool = std::ptr::null_mut();
        // SAFETY: one out-parameter.
        unsafe { driver!(cuDeviceGetMemPool(&mut pool, self.raw)) }?;
        Ok(pool)
    }
}

fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(s) => s.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    }
}
