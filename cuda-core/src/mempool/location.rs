//! Pools by memory location and allocation kind (CUDA 13.0): the default and current pool of a
//! device, of host memory, of one host NUMA node, pinned or managed
//! ([`cuMemGetDefaultMemPool`, `cuMemGetMemPool`, `cuMemSetMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
//!
//! The device-only calls ([`MemPool::device_default`], [`MemPool::current`],
//! [`MemPool::set_current`]) are the `(PoolLocation::Device(d), PoolKind::Pinned)` case of
//! these, and share their record of which pool is current where.

use super::MemPool;
use crate::device::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Where the memory of a pool lives, for looking up a location's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolLocation {
    /// Memory of a device (`CU_MEM_LOCATION_TYPE_DEVICE`).
    Device(Device),
    /// Host memory (`CU_MEM_LOCATION_TYPE_HOST`).
    Host,
    /// Host memory of one NUMA node (`CU_MEM_LOCATION_TYPE_HOST_NUMA`).
    HostNuma(u32),
    /// No preferred location (`CU_MEM_LOCATION_TYPE_NONE`); only for [`PoolKind::Managed`].
    NoPreference,
}

/// What kind of memory a pool hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Page-locked memory at the location (`CU_MEM_ALLOCATION_TYPE_PINNED`).
    Pinned,
    /// Managed memory that migrates, preferring the location (`CU_MEM_ALLOCATION_TYPE_MANAGED`).
    Managed,
}

impl PoolKind {
    fn as_raw(self) -> sys::CUmemAllocationType {
        match self {
            PoolKind::Pinned => sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            PoolKind::Managed => sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_MANAGED,
        }
    }
}

/// The key of one (location, kind) slot: location type, location id, allocation type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SlotKey(u32, i32, u32);

impl SlotKey {
    /// The slot that `cuDeviceGetMemPool`/`cuDeviceSetMemPool` read and write.
    pub(super) fn device(device: &Device) -> Result<SlotKey> {
        let (location, _) = raw_location("MemPool", PoolLocation::Device(*device), PoolKind::Pinned)?;
        Ok(SlotKey(
            location.type_.0,
            crate::c_layout::mem_location_id(&location),
            PoolKind::Pinned.as_raw().0,
        ))
    }
}

/// The location and allocation type in C form, checked: a NUMA node or device ordinal beyond
/// `i32` and [`PoolLocation::NoPreference`] with pinned memory are refused here.
fn raw_location(
    operation: &'static str,
    location: PoolLocation,
    kind: PoolKind,
) -> Result<(sys::CUmemLocation, SlotKey)> {
    use sys::CUmemLocationType as L;
    let out_of_range = |what: &str, n: u64| Error::invalid(operation, format!("{what} {n} is out of range"));
    let (type_, id) = match location {
        PoolLocation::Device(device) => (
            L::CU_MEM_LOCATION_TYPE_DEVICE,
            i32::try_from(device.ordinal())
                .map_err(|_| out_of_range("device ordinal", device.ordinal() as u64))?,
        ),
        PoolLocation::Host => (L::CU_MEM_LOCATION_TYPE_HOST, 0),
        PoolLocation::HostNuma(node) => (
            L::CU_MEM_LOCATION_TYPE_HOST_NUMA,
            i32::try_from(node).map_err(|_| out_of_range("NUMA node", u64::from(node)))?,
        ),
        PoolLocation::NoPreference => {
            if kind != PoolKind::Managed {
                return Err(Error::invalid(
                    operation,
                    "only managed pools have a pool with no preferred location; ask for PoolKind::Managed, \
                     or name a device or the host",
                ));
            }
            // CU_MEM_LOCATION_TYPE_NONE, by value: headers before 13.0's name it INVALID.
            (L(0), 0)
        }
    };
    Ok((crate::c_layout::mem_location(type_, id), SlotKey(type_.0, id, kind.as_raw().0)))
}

/// The pools made current by this crate, per slot, held while current.
static CURRENT: Mutex<Vec<(SlotKey, MemPool)>> = Mutex::new(Vec::new());

pub(super) fn lock_current() -> MutexGuard<'static, Vec<(SlotKey, MemPool)>> {
    CURRENT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Records `pool` as current in `key`'s slot (the caller made it current under the lock), and
/// gives back the pool it replaces, to be dropped outside the lock.
pub(super) fn replace_current(
    slots: &mut Vec<(SlotKey, MemPool)>,
    key: SlotKey,
    pool: &MemPool,
) -> Option<MemPool> {
    let previous = slots.iter().position(|(k, _)| *k == key).map(|i| slots.swap_remove(i).1);
    slots.push((key, pool.clone()));
    previous
}

/// The value for a raw pool found current in `key`'s slot: the clone this crate holds, or the
/// borrowed default; a pool made current elsewhere is refused, since nothing keeps it alive.
pub(super) fn resolve_current(
    operation: &'static str,
    slots: &[(SlotKey, MemPool)],
    key: SlotKey,
    raw: sys::CUmemoryPool,
    default: impl FnOnce() -> Result<MemPool>,
    place: &dyn std::fmt::Display,
) -> Result<MemPool> {
    if let Some((_, pool)) = slots.iter().find(|(k, p)| *k == key && p.as_raw() == raw) {
        return Ok(pool.clone());
    }
    let default = default()?;
    if default.as_raw() == raw {
        return Ok(default);
    }
    Err(Error::invalid(
        operation,
        format!(
            "the current pool of {place} was set outside this crate (cudaMemSetMemPool, \
             cudaDeviceSetMemPool or a raw call), so no value can keep it alive; wrap it with the \
             unsafe MemPool::from_raw, or make a pool current through MemPool"
        ),
    ))
}

impl MemPool {
    /// The default pool of `location` for `kind` memory, borrowed (it lives as long as the
    /// driver does)
    /// ([`cuMemGetDefaultMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html),
    /// CUDA 13.0).
    ///
    /// `(PoolLocation::Device(d), PoolKind::Pinned)` is [`MemPool::device_default`]'s pool.
    /// [`PoolLocation::NoPreference`] with pinned memory is an [`Error::InvalidArgument`];
    /// a driver older than 13.0 is an [`Error::Load`]; a location or kind the driver or device
    /// does not support fails with the driver's status.
    pub fn default_at(location: PoolLocation, kind: PoolKind) -> Result<MemPool> {
        crate::device::init()?;
        let (mut raw_location, _) = raw_location("MemPool::default_at", location, kind)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the location is an initialized struct the call only reads.
        unsafe { driver!(cuMemGetDefaultMemPool(&mut raw, &mut raw_location, kind.as_raw())) }?;
        Ok(match (location, kind) {
            (PoolLocation::Device(_), PoolKind::Pinned) => MemPool::wrap(raw, false),
            _ => MemPool::wrap_other(raw),
        })
    }

    /// The pool that `kind` allocations at `location` come from now
    /// ([`cuMemGetMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html),
    /// CUDA 13.0).
    ///
    /// As with [`MemPool::current`]: a pool made current through this crate comes back as a
    /// clone of that value, the location's default pool comes back borrowed, and a pool made
    /// current outside this crate is an [`Error::InvalidArgument`].
    pub fn current_at(location: PoolLocation, kind: PoolKind) -> Result<MemPool> {
        crate::device::init()?;
        let (mut raw_location, key) = raw_location("MemPool::current_at", location, kind)?;
        let slots = lock_current();
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the location is an initialized struct the call only reads.
        unsafe { driver!(cuMemGetMemPool(&mut raw, &mut raw_location, kind.as_raw())) }?;
        resolve_current(
            "MemPool::current_at",
            &slots,
            key,
            raw,
            || MemPool::default_at(location, kind),
            &format_args!("{location:?} for {kind:?} memory"),
        )
    }

    /// Makes `pool` the one that `kind` allocations at `location` come from
    /// ([`cuMemSetMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html),
    /// CUDA 13.0).
    ///
    /// The crate keeps a clone of `pool` while it is current there, so dropping the caller's
    /// values does not destroy it; making another pool current (the location's
    /// [default](Self::default_at), for instance) lets it go. A pool whose memory is not of
    /// that location and kind fails with the driver's status, and then nothing changes.
    pub fn set_current_at(location: PoolLocation, kind: PoolKind, pool: &MemPool) -> Result<()> {
        let (mut raw_location, key) = raw_location("MemPool::set_current_at", location, kind)?;
        let mut slots = lock_current();
        // SAFETY: the pool is alive, and stays alive while current: the slot below holds it.
        unsafe { driver!(cuMemSetMemPool(&mut raw_location, kind.as_raw(), pool.as_raw())) }?;
        let previous = replace_current(&mut slots, key, pool);
        drop(slots);
        // The pool that was current may be destroyed here, outside the lock.
        drop(previous);
        Ok(())
    }
}
