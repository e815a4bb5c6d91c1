//! Device resources: the SMs of a device, a context or a green context, and their splits into
//! groups a green context can be made of.

use crate::context::Context;
use crate::device::{self, Device};
use crate::error::{Error, Result, check};
use crate::flags::flags;
use cuhost_driver_sys as sys;
use std::mem::size_of;

flags! {
    /// Flags of [`SmResource::split_by_count`] (`CUdevSmResourceSplitByCount_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SplitFlags: u32 {
        /// `CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING`: treat every SM on its own, for
        /// smaller groups, at the cost of features that need SMs scheduled together (large
        /// thread clusters on compute capability 9.0 and later).
        const IGNORE_SM_COSCHEDULING = 0x1;
        /// `CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE`: compute capability 9.0 and
        /// later only: groups that allow thread clusters as large as possible.
        const MAX_POTENTIAL_CLUSTER_SIZE = 0x2;
    }
}

/// The size of the driver's `CUdevResource` (version 1), the same in every header that declares it.
const RESOURCE_BYTES: usize = 144;

/// Where CUDA 13.1 and later headers put `nextResource`, a pointer to a further resource: the
/// last pointer-sized bytes of the struct. CUDA 13.0 headers leave those bytes unused at the end
/// of the union of resource kinds.
const NEXT_RESOURCE_OFFSET: usize = RESOURCE_BYTES - size_of::<*mut sys::CUdevResource>();

const _: () = {
    assert!(size_of::<sys::CUdevResource>() == RESOURCE_BYTES);
};
#[cfg(cuda_headers_13_1)]
const _: () = {
    assert!(std::mem::offset_of!(sys::CUdevResource, nextResource) == NEXT_RESOURCE_OFFSET);
};

/// Clears the pointer to a further resource in a resource the driver wrote: the value is copied
/// and moved around from here on, so a pointer into the array it was written to would dangle by
/// the time the resource is given back to the driver.
fn detached(mut raw: sys::CUdevResource) -> sys::CUdevResource {
    let base: *mut sys::CUdevResource = &mut raw;
    // SAFETY: the assertions above keep NEXT_RESOURCE_OFFSET and the pointer after it inside the
    // struct; zero bytes are a null pointer (13.1 headers) or unused union bytes (13.0 headers).
    unsafe {
        base.cast::<u8>().add(NEXT_RESOURCE_OFFSET).write_bytes(0, size_of::<*mut sys::CUdevResource>())
    };
    raw
}

/// A set of streaming multiprocessors as the driver describes it (a `CUdevResource` of type
/// `CU_DEV_RESOURCE_TYPE_SM`): all the SMs of a device ([`SmResource::of_device`]), of a context
/// ([`SmResource::of_context`]) or of a green context
/// ([`GreenContext::sm_resource`](super::GreenContext::sm_resource)), or a group of a split.
///
/// The value holds the whole resource the driver wrote, including bytes only the driver reads,
/// so that it can be split or given to [`GreenContext::create`](super::GreenContext::create).
/// It is a plain value: copying it is free, and it owns nothing.
///
/// [`Stream::sm_resource`](crate::stream::Stream::sm_resource) (CUDA 13.1) reports the counts of a
/// stream's SMs only, as a summary that cannot be split.
#[derive(Clone, Copy)]
pub struct SmResource {
    raw: sys::CUdevResource,
    device: Device,
}

// SAFETY: the resource is plain data the driver reads back; the only pointer in it (the
// `nextResource` of newer headers) is always null (see `detached`).
unsafe impl Send for SmResource {}
// SAFETY: as above; `&SmResource` only reads.
unsafe impl Sync for SmResource {}

impl std::fmt::Debug for SmResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmResource")
            .field("device", &self.device.ordinal())
            .field("sm_count", &self.sm_count())
            .field("min_partition_size", &self.min_partition_size())
            .field("coscheduled_alignment", &self.coscheduled_alignment())
            .finish()
    }
}

/// The groups a split made, and the SMs left over.
#[derive(Clone, Debug)]
pub struct SmSplit {
    /// The groups, each with at least the SMs asked for; disjoint.
    pub groups: Vec<SmResource>,
    /// The SMs that went to no group, if any. They come without the guarantees of the groups
    /// (SMs scheduled together), and splitting them further is discouraged by NVIDIA.
    pub remainder: Option<SmResource>,
}

/// The resource of `kind` of `device`
/// ([`cuDeviceGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
pub(super) fn device_resource(device: &Device, kind: sys::CUdevResourceType) -> Result<sys::CUdevResource> {
    device::init()?;
    let mut raw = sys::CUdevResource::default();
    // SAFETY: one out-parameter of the type the call fills; the device came from the driver.
    unsafe { driver!(cuDeviceGetDevResource(device.as_raw(), &mut raw, kind)) }?;
    Ok(raw)
}

/// The resource of `kind` available to `ctx`
/// ([`cuCtxGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
pub(super) fn context_resource(ctx: &Context, kind: sys::CUdevResourceType) -> Result<sys::CUdevResource> {
    ctx.take_deferred()?;
    let mut raw = sys::CUdevResource::default();
    // SAFETY: the context is alive while `ctx` is; one out-parameter of the type the call fills.
    unsafe { driver!(cuCtxGetDevResource(ctx.as_raw(), &mut raw, kind)) }?;
    Ok(raw)
}

impl SmResource {
    /// All the SMs of `device`
    /// ([`cuDeviceGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// CUDA 12.4). On an older driver this is an [`Error::Load`] naming the version needed.
    pub fn of_device(device: &Device) -> Result<SmResource> {
        let raw = device_resource(device, sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM)?;
        Ok(SmResource::wrap(raw, *device))
    }

    /// The SMs available to `ctx`: all of the device's for an ordinary context, the green
    /// context's for one given by [`GreenContext::context`](super::GreenContext::context)
    /// ([`cuCtxGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// CUDA 12.4).
    ///
    /// Fails with an error kept from a `Drop` in the context, or the driver's status
    /// (`cuCtxGetDevResource`; an [`Error::Load`] on a driver older than 12.4).
    pub fn of_context(ctx: &Context) -> Result<SmResource> {
        let raw = context_resource(ctx, sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM)?;
        Ok(SmResource::wrap(raw, ctx.device()))
    }

    /// Wraps a resource the driver wrote, detached from the array it was written to.
    pub(super) fn wrap(raw: sys::CUdevResource, device: Device) -> SmResource {
        SmResource { raw: detached(raw), device }
    }

    /// Wraps a raw SM resource of `device`.
    ///
    /// # Safety
    ///
    /// `raw` must be a `CU_DEV_RESOURCE_TYPE_SM` resource as a driver call wrote it (all its
    /// bytes, including those only the driver reads) for `device`: this value gives it back to
    /// the driver, which trusts them.
    pub unsafe fn from_raw(raw: sys::CUdevResource, device: Device) -> SmResource {
        SmResource::wrap(raw, device)
    }

    /// The raw resource, as the driver wrote it (with its pointer to a further resource null).
    pub fn as_raw(&self) -> sys::CUdevResource {
        self.raw
    }

    /// The device whose SMs these are.
    pub fn device(&self) -> Device {
        self.device
    }

    fn sm(&self) -> sys::CUdevSmResource {
        // SAFETY: every member of the union is plain integers, for which any bytes are valid;
        // the driver filled the SM member, the one asked for.
        unsafe { self.raw.__bindgen_anon_1.sm }
    }

    /// How many SMs.
    pub fn sm_count(&self) -> u32 {
        self.sm().smCount
    }

    /// The fewest SMs a group split from these can have.
    pub fn min_partition_size(&self) -> u32 {
        self.sm().minSmPartitionSize
    }

    /// The granularity of SM counts in a split: SMs guaranteed to be scheduled together, of
    /// which a group's count is a multiple.
    pub fn coscheduled_alignment(&self) -> u32 {
        self.sm().smCoscheduledAlignment
    }

    /// Splits these SMs into as many disjoint groups of at least `min_count` SMs as fit, and
    /// the remainder
    /// ([`cuDevSmResourceSplitByCount`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// CUDA 12.4).
    ///
    /// The driver rounds `min_count` up to what the hardware allows
    /// ([`min_partition_size`](Self::min_partition_size),
    /// [`coscheduled_alignment`](Self::coscheduled_alignment)), so groups may be larger than
    /// asked, and fewer than `sm_count / min_count`.
    ///
    /// # Errors
    ///
    /// A `min_count` larger than [`sm_count`](Self::sm_count), or one that leaves no group, is
    /// an [`Error::InvalidArgument`] that says how many SMs there are. The driver refuses to
    /// split a group that a split made (`CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION`): make a
    /// green context of it and split [its SMs](super::GreenContext::sm_resource) instead.
    pub fn split_by_count(&self, min_count: u32, flags: SplitFlags) -> Result<SmSplit> {
        const CALL: &str = "cuDevSmResourceSplitByCount";
        let available = self.sm_count();
        if min_count > available {
            return Err(Error::invalid(
                "SmResource::split_by_count",
                format!(
                    "groups of {min_count} SMs cannot be split from {available} SMs; ask for at most {available}"
                ),
            ));
        }
        let mut count = 0;
        // SAFETY: a null result asks for the number of groups only; the input is a resource the
        // driver wrote; a null remainder is allowed.
        check(CALL, unsafe {
            sys::cuDevSmResourceSplitByCount(
                std::ptr::null_mut(),
                &mut count,
                &self.raw,
                std::ptr::null_mut(),
                flags.bits(),
                min_count,
            )
        })?;
        if count == 0 {
            return Err(Error::invalid(
                "SmResource::split_by_count",
                format!(
                    "no group of {min_count} SMs fits in these {available} SMs (groups have at least {} SMs, \
                     in multiples of {}); ask for fewer",
                    self.min_partition_size(),
                    self.coscheduled_alignment()
                ),
            ));
        }
        let len = usize::try_from(count).map_err(|_| {
            Error::invalid("SmResource::split_by_count", format!("{count} groups do not fit in memory"))
        })?;
        let mut groups = vec![sys::CUdevResource::default(); len];
        let mut remainder = sys::CUdevResource::default();
        // SAFETY: `groups` holds `count` resources, which bounds what the driver writes (it
        // lowers `count` to the number written); the remainder is one resource.
        check(CALL, unsafe {
            sys::cuDevSmResourceSplitByCount(
                groups.as_mut_ptr(),
                &mut count,
                &self.raw,
                &mut remainder,
                flags.bits(),
                min_count,
            )
        })?;
        groups.truncate(usize::try_from(count).unwrap_or(len));
        Ok(self.split_of(groups, remainder))
    }

    /// The values of a split's output.
    fn split_of(&self, groups: Vec<sys::CUdevResource>, remainder: sys::CUdevResource) -> SmSplit {
        let groups = groups.into_iter().map(|raw| SmResource::wrap(raw, self.device)).collect();
        let remainder = SmResource::wrap(remainder, self.device);
        let left = remainder.raw.type_ == sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM
            && remainder.sm_count() > 0;
        SmSplit { groups, remainder: left.then_some(remainder) }
    }
}

#[cfg(cuda_headers_13_1)]
mod structured {
    use super::{SmResource, SmSplit};
    use crate::error::{Error, Result};
    use crate::flags::flags;
    use cuhost_driver_sys as sys;

    flags! {
        /// Flags of one group of [`SmResource::split`] (`CUdevSmResourceGroup_flags`).
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct SmGroupFlags: u32 {
            /// `CU_DEV_SM_RESOURCE_GROUP_BACKFILL`: take the co-scheduling constraint as a
            /// hint, filling the group up to its SM count with other SMs where needed.
            const BACKFILL = 0x1;
        }
    }

    /// What one group of [`SmResource::split`] asks for (`CU_DEV_SM_RESOURCE_GROUP_PARAMS`).
    /// The default asks the driver to find out how many SMs fit, with the default
    /// co-scheduling.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SmGroupParams {
        /// The SMs the group needs: 0 lets the driver fill in what fits; otherwise a multiple of
        /// 2, and of `coscheduled_sm_count` where that is not 0.
        pub sm_count: u32,
        /// SMs to schedule together (for thread clusters on compute capability 9.0 and
        /// later); 0 is the device's default ([`SmResource::coscheduled_alignment`]).
        pub coscheduled_sm_count: u32,
        /// Where possible, co-scheduled sets merged into sets of this size; 0 keeps
        /// `coscheduled_sm_count`.
        pub preferred_coscheduled_sm_count: u32,
        /// How strictly the constraints hold.
        pub flags: SmGroupFlags,
    }

    impl SmResource {
        /// Splits these SMs into one group for each entry of `groups`, in order, each as that
        /// entry asks, and the remainder
        /// ([`cuDevSmResourceSplit`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
        /// CUDA 13.1). Unlike [`split_by_count`](Self::split_by_count), groups may differ in
        /// size and counts are not rounded up: a count the hardware cannot give is refused.
        ///
        /// # Errors
        ///
        /// No group is an [`Error::InvalidArgument`]. The driver refuses counts it cannot
        /// satisfy (`CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION`). On a driver older than 13.1
        /// this is an [`Error::Load`] naming the version needed.
        pub fn split(&self, groups: &[SmGroupParams]) -> Result<SmSplit> {
            let count = u32::try_from(groups.len()).map_err(|_| {
                Error::invalid("SmResource::split", format!("{} groups are too many", groups.len()))
            })?;
            if count == 0 {
                return Err(Error::invalid("SmResource::split", "no group was asked for; pass at least one"));
            }
            let mut params: Vec<sys::CU_DEV_SM_RESOURCE_GROUP_PARAMS> = groups
                .iter()
                .map(|g| sys::CU_DEV_SM_RESOURCE_GROUP_PARAMS {
                    smCount: g.sm_count,
                    coscheduledSmCount: g.coscheduled_sm_count,
                    preferredCoscheduledSmCount: g.preferred_coscheduled_sm_count,
                    flags: g.flags.bits(),
                    ..Default::default()
                })
                .collect();
            let mut result = vec![sys::CUdevResource::default(); groups.len()];
            let mut remainder = sys::CUdevResource::default();
            // SAFETY: `result` and `params` hold `count` entries each, zeroed where not set; the
            // input is a resource the driver wrote; no flags are defined.
            unsafe {
                driver!(cuDevSmResourceSplit(
                    result.as_mut_ptr(),
                    count,
                    &self.raw,
                    &mut remainder,
                    0,
                    params.as_mut_ptr(),
                ))
            }?;
            Ok(self.split_of(result, remainder))
        }
    }
}

#[cfg(cuda_headers_13_1)]
pub use structured::{SmGroupFlags, SmGroupParams};
