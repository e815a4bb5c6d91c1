//! Kernel launches: the launch configuration, typed arguments, cooperative launches.
//!
//! Every launch goes through
//! [`cuLaunchKernelEx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html):
//! the grid, block and dynamic shared memory of a [`LaunchConfig`], plus launch attributes for
//! what it asks beyond them: every launch attribute of `cuda.h` 13.0 (cluster dimensions and
//! scheduling, cooperative launch, priority, programmatic stream serialization and events,
//! the launch-completion event, memory synchronization domains, the L2 access-policy window,
//! the synchronization policy, the shared-memory carveout, device-updatable graph nodes,
//! NVLink-centric scheduling). Nothing is allocated on the heap: the attributes and the
//! argument pointers live on the stack.
//!
//! # Arguments
//!
//! The arguments are a tuple with one [`KernelArg`] per kernel parameter: scalars and
//! plain-data structs by reference (`&n`; a `#[repr(C)]` struct with padding is declared with
//! [`kernel_arg_struct!`](crate::kernel_arg_struct), see [`DeviceRepr`]), device buffers and views as themselves (`&x`,
//! `&mut y`, `y.view_mut()`), which pass their device address. Where the driver reports the
//! kernel's parameter layout
//! ([`cuFuncGetParamInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html),
//! [`cuKernelGetParamInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html);
//! CUDA 12.4 and later), it is read once per [`Function`] or [`Kernel`] and every launch
//! compares the number of arguments and the size of each with it: a mismatch is an
//! [`Error::InvalidArgument`] naming the parameter, before anything is launched. With an older
//! driver the comparison is skipped.
//!
//! Launching stays `unsafe`: matching sizes do not make matching types (a `u64` and a pointer
//! have the same size), and a kernel can read and write any memory its arguments point to.
//!
//! ```no_run
//! # fn main() -> cuhost::Result<()> {
//! use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags, module::Module};
//! # let ptx = "";
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let module = Module::from_ptx(&ctx, ptx)?;
//! let saxpy = module.function("saxpy")?;
//! let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! let (n, a) = (1024u32, 2.0f32);
//! let x = DeviceBuffer::from_slice(&stream, &vec![1.0f32; n as usize])?;
//! let mut y = DeviceBuffer::<f32>::zeroed(&stream, n as usize)?;
//! // SAFETY: saxpy takes (u32, f32, const float*, float*) and x, y hold n floats.
//! unsafe { saxpy.launch(&stream, &LaunchConfig::for_elements(n, 256), (&n, &a, &x, &mut y))? };
//! stream.synchronize()?;
//! # Ok(()) }
//! ```

mod args;
mod attributes_events;
mod attributes_policy;
mod by_value;

use crate::module::ParamLayout;
pub(crate) use args::address_arg;
pub use args::{KernelArg, KernelArgs};
pub use attributes_events::ProgrammaticEvent;
pub use attributes_policy::MemSyncDomainMap;
pub use by_value::DeviceRepr;

use crate::error::{Error, Result};
use crate::event::Event;
use crate::module::LoadedCode;
use crate::module::{Function, Kernel};
use crate::stream::{AccessPolicyWindow, Stream};
use cuhost_driver_sys as sys;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// Three dimensions of a grid, block or cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

impl Dim3 {
    /// The dimensions `(x, y, z)`.
    pub const fn new(x: u32, y: u32, z: u32) -> Dim3 {
        Dim3 { x, y, z }
    }

    /// `x * y * z`.
    pub const fn count(&self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3::new(x, 1, 1)
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3::new(x, y, 1)
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3::new(x, y, z)
    }
}

/// How to launch a kernel: grid and block dimensions, dynamic shared memory, and the launch
/// attributes of `cuLaunchKernelEx`
/// ([`CUlaunchConfig`](https://docs.nvidia.com/cuda/cuda-driver-api/structCUlaunchConfig.html)).
///
/// `'a` is the lifetime of the events it names ([`programmatic_event`](Self::programmatic_event),
/// [`launch_completion_event`](Self::launch_completion_event)); a configuration without
/// events is a `LaunchConfig<'static>`. Two configurations are equal when every field is,
/// events compared by handle and the access-policy window's hit ratio by its bits.
#[derive(Clone, Copy, Debug)]
pub struct LaunchConfig<'a> {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    /// Thread-block cluster dimensions, in blocks (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`;
    /// compute capability 9.0 and later). The grid must be a multiple of it.
    pub cluster: Option<Dim3>,
    /// Launch cooperatively (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`): all blocks are resident at
    /// once, so they can synchronize across the grid. The grid must fit on the device (see
    /// [`Function::max_active_blocks_per_multiprocessor`]).
    pub cooperative: bool,
    /// Priority of this launch (`CU_LAUNCH_ATTRIBUTE_PRIORITY`), in the context's stream
    /// priority range; `None` keeps the stream's.
    pub priority: Option<i32>,
    /// Allow the kernel to overlap with the previous kernel in the stream once that one
    /// triggers it (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`; compute
    /// capability 9.0 and later).
    pub programmatic_stream_serialization: bool,
    /// How the blocks of a cluster are placed on the GPU
    /// (`CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE`); `None` is the driver's.
    pub cluster_scheduling: Option<ClusterScheduling>,
    /// A cluster shape the driver uses where the GPU can, falling back to
    /// [`cluster`](Self::cluster) where it cannot (`CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION`,
    /// CUDA 12.8 drivers); each dimension must be a multiple of `cluster`'s.
    pub preferred_cluster: Option<Dim3>,
    /// The memory synchronization domain of the kernel's fences
    /// (`CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN`, compute capability 9.0 and later).
    pub mem_sync_domain: Option<MemSyncDomain>,
    /// The share of the L1/shared-memory split to give shared memory, in percent
    /// (`CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`); a hint.
    pub shared_memory_carveout: Option<u8>,
    /// The L2 access-policy window of the kernel's accesses
    /// (`CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW`); a cache hint.
    pub access_policy_window: Option<AccessPolicyWindow>,
    /// Which hardware domain each memory synchronization domain uses
    /// (`CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP`, compute capability 9.0).
    pub mem_sync_domain_map: Option<MemSyncDomainMap>,
    /// An event the kernel's blocks trigger (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`;
    /// stream launches only).
    pub programmatic_event: Option<ProgrammaticEvent<'a>>,
    /// An event recorded once every block has begun
    /// (`CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`; stream launches only).
    pub launch_completion_event: Option<&'a Event>,
    /// Make the captured kernel node device-updatable
    /// (`CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE`; graphs and captures only).
    pub device_updatable_kernel_node: bool,
    /// Schedule for NVLink utilization (`CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING`,
    /// CUDA 13.0); a hint.
    pub nvlink_util_centric_scheduling: bool,
}

/// How many launch attributes a configuration can carry: one of each kind `LaunchConfig`
/// has (every `CUlaunchAttributeID` of `cuda.h` 13.0 but `IGNORE` and the synchronization
/// policy, which the driver takes on streams only: `Stream::set_sync_policy`).
pub(crate) const MAX_ATTRIBUTES: usize = 14;

/// Fills the attribute array of a launch, one slot after another; a push past the end is
/// dropped (it cannot happen: there are `MAX_ATTRIBUTES` kinds and each is pushed once).
pub(crate) struct AttributeWriter<'s> {
    attrs: &'s mut [MaybeUninit<sys::CUlaunchAttribute>; MAX_ATTRIBUTES],
    n: usize,
}

impl AttributeWriter<'_> {
    #[inline]
    fn push(&mut self, id: sys::CUlaunchAttributeID, value: sys::CUlaunchAttributeValue) {
        if let Some(slot) = self.attrs.get_mut(self.n) {
            *slot = MaybeUninit::new(sys::CUlaunchAttribute { id, pad: [0; 4], value, ..Default::default() });
            self.n += 1;
        }
    }
}

impl LaunchConfig<'_> {
    /// Everything but the events, as plain values, for equality and hashing.
    #[allow(clippy::type_complexity)]
    fn key(
        &self,
    ) -> (
        (Dim3, Dim3, u32, Option<Dim3>, bool, Option<i32>, bool),
        (Option<ClusterScheduling>, Option<Dim3>, Option<MemSyncDomain>, Option<u8>),
        Option<(u64, usize, u32, crate::stream::AccessProperty, crate::stream::AccessProperty)>,
        (Option<MemSyncDomainMap>, Option<ProgrammaticEvent<'_>>, Option<usize>, bool, bool),
    ) {
        (
            (
                self.grid,
                self.block,
                self.shared_mem_bytes,
                self.cluster,
                self.cooperative,
                self.priority,
                self.programmatic_stream_serialization,
            ),
            (
                self.cluster_scheduling,
                self.preferred_cluster,
                self.mem_sync_domain,
                self.shared_memory_carveout,
            ),
            self.access_policy_window.map(|w| w.key()),
            (
                self.mem_sync_domain_map,
                self.programmatic_event,
                self.launch_completion_event.map(|e| e.as_raw() as usize),
                self.device_updatable_kernel_node,
                self.nvlink_util_centric_scheduling,
            ),
        )
    }
}

impl PartialEq for LaunchConfig<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for LaunchConfig<'_> {}

impl std::hash::Hash for LaunchConfig<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

/// Where the blocks of a cluster go (`CUclusterSchedulingPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterScheduling {
    /// `CU_CLUSTER_SCHEDULING_POLICY_DEFAULT`.
    Default,
    /// `CU_CLUSTER_SCHEDULING_POLICY_SPREAD`: clusters spread over the GPU.
    Spread,
    /// `CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING`: clusters placed to balance the load.
    LoadBalancing,
}

/// The domain a kernel's memory fences order against (`CUlaunchMemSyncDomain`): fences of
/// kernels in another domain do not wait for this one's memory operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemSyncDomain {
    /// `CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT`.
    Default,
    /// `CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE`: for kernels whose fences only order against remote
    /// (peer or network) work, such as NCCL's.
    Remote,
}

impl<'a> LaunchConfig<'a> {
    /// `grid` blocks of `block` threads, no dynamic shared memory and no attributes.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> LaunchConfig<'a> {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            shared_mem_bytes: 0,
            cluster: None,
            cooperative: false,
            priority: None,
            programmatic_stream_serialization: false,
            cluster_scheduling: None,
            preferred_cluster: None,
            mem_sync_domain: None,
            shared_memory_carveout: None,
            access_policy_window: None,
            mem_sync_domain_map: None,
            programmatic_event: None,
            launch_completion_event: None,
            device_updatable_kernel_node: false,
            nvlink_util_centric_scheduling: false,
        }
    }

    /// One thread per element: blocks of `block_size` threads, enough of them to cover
    /// `elements` (at least one block). `elements` is any unsigned count (a buffer's `usize`
    /// length as it is); a grid past what a launch can take saturates and is refused by the
    /// driver at launch.
    pub fn for_elements(elements: impl ElementCount, block_size: u32) -> LaunchConfig<'a> {
        let block_size = block_size.max(1);
        let blocks = elements.as_u64().div_ceil(u64::from(block_size)).max(1);
        LaunchConfig::new(u32::try_from(blocks).unwrap_or(u32::MAX), block_size)
    }

    /// Sets the dynamic shared memory per block.
    pub fn shared_mem_bytes(mut self, bytes: u32) -> LaunchConfig<'a> {
        self.shared_mem_bytes = bytes;
        self
    }

    /// Sets the cluster dimensions.
    pub fn cluster(mut self, dims: impl Into<Dim3>) -> LaunchConfig<'a> {
        self.cluster = Some(dims.into());
        self
    }

    /// Asks for a cooperative launch.
    pub fn cooperative(mut self, on: bool) -> LaunchConfig<'a> {
        self.cooperative = on;
        self
    }

    /// Sets the launch priority.
    pub fn priority(mut self, priority: i32) -> LaunchConfig<'a> {
        self.priority = Some(priority);
        self
    }

    /// Allows programmatic stream serialization.
    pub fn programmatic_stream_serialization(mut self, on: bool) -> LaunchConfig<'a> {
        self.programmatic_stream_serialization = on;
        self
    }

    /// Sets the cluster scheduling policy.
    pub fn cluster_scheduling(mut self, policy: ClusterScheduling) -> LaunchConfig<'a> {
        self.cluster_scheduling = Some(policy);
        self
    }

    /// Sets the preferred cluster dimensions.
    pub fn preferred_cluster(mut self, dims: impl Into<Dim3>) -> LaunchConfig<'a> {
        self.preferred_cluster = Some(dims.into());
        self
    }

    /// Sets the memory synchronization domain.
    pub fn mem_sync_domain(mut self, domain: MemSyncDomain) -> LaunchConfig<'a> {
        self.mem_sync_domain = Some(domain);
        self
    }

    /// Sets the preferred shared-memory carveout, in percent (checked at launch: at most 100).
    pub fn shared_memory_carveout(mut self, percent: u8) -> LaunchConfig<'a> {
        self.shared_memory_carveout = Some(percent);
        self
    }

    /// Rejects zero dimensions, a block larger than `max_threads` (when known), values out of
    /// range, and the launch-only attributes (events): what graph kernel nodes use.
    #[inline]
    pub(crate) fn check(&self, operation: &'static str, max_threads: u32) -> Result<()> {
        if self.has_events() {
            return Err(attributes_events::events_outside_a_launch(operation));
        }
        self.check_shape(operation, max_threads)
    }

    /// [`check`](Self::check) for a launch on `stream`: events allowed, and checked against
    /// the stream, with the other attributes that need it. Without those attributes this
    /// asks the driver nothing.
    #[inline]
    fn check_launch(&self, operation: &'static str, max_threads: u32, stream: &Stream) -> Result<()> {
        self.check_shape(operation, max_threads)?;
        if self.needs_stream_checks() {
            self.check_events(operation, stream)?;
            self.check_values_on(operation, stream)?;
        }
        Ok(())
    }

    /// Zero dimensions, the block size and the values of the attributes.
    #[inline]
    fn check_shape(&self, operation: &'static str, max_threads: u32) -> Result<()> {
        let block = self.block.count();
        if self.grid.count() == 0 || block == 0 {
            return Err(zero_dimension(operation, self));
        }
        if max_threads != 0 && block > u64::from(max_threads) {
            return Err(too_many_threads(operation, block, max_threads));
        }
        if let Some(percent) = self.shared_memory_carveout {
            if percent > 100 {
                return Err(Error::invalid(
                    operation,
                    format!("a shared-memory carveout of {percent}% was asked for; give 0 to 100"),
                ));
            }
        }
        self.check_values(operation)
    }

    /// Fills `attrs` with the attributes this configuration asks for, but the events, and
    /// returns the raw configuration pointing at them: what graph kernel nodes and occupancy
    /// queries use (neither takes events, and a graph must not keep an event handle the
    /// configuration only borrows).
    #[inline]
    pub(crate) fn raw_config(
        &self,
        stream: sys::CUstream,
        attrs: &mut [MaybeUninit<sys::CUlaunchAttribute>; MAX_ATTRIBUTES],
    ) -> sys::CUlaunchConfig {
        self.fill(stream, attrs, false)
    }

    /// [`raw_config`](Self::raw_config) with the events too, for `cuLaunchKernelEx`.
    #[inline]
    fn raw_launch_config(
        &self,
        stream: sys::CUstream,
        attrs: &mut [MaybeUninit<sys::CUlaunchAttribute>; MAX_ATTRIBUTES],
    ) -> sys::CUlaunchConfig {
        self.fill(stream, attrs, true)
    }

    #[inline]
    fn fill(
        &self,
        stream: sys::CUstream,
        attrs: &mut [MaybeUninit<sys::CUlaunchAttribute>; MAX_ATTRIBUTES],
        events: bool,
    ) -> sys::CUlaunchConfig {
        let mut out = AttributeWriter { attrs, n: 0 };
        let mut push = |id, value| out.push(id, value);
        if let Some(c) = self.cluster {
            push(
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                sys::CUlaunchAttributeValue {
                    clusterDim: sys::CUlaunchAttributeValue_union__bindgen_ty_1 {
                        x: c.x,
                        y: c.y,
                        z: c.z,
                        ..Default::default()
                    },
                },
            );
        }
        if self.cooperative {
            push(
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                sys::CUlaunchAttributeValue { cooperative: 1 },
            );
        }
        if let Some(priority) = self.priority {
            push(
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY,
                sys::CUlaunchAttributeValue { priority },
            );
        }
        if self.programmatic_stream_serialization {
            push(
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                sys::CUlaunchAttributeValue { programmaticStreamSerializationAllowed: 1 },
            );
        }
        if let Some(policy) = self.cluster_scheduling {
            use sys::CUclusterSchedulingPolicy as P;
            let raw = match policy {
                ClusterScheduling::Default => P::CU_CLUSTER_SCHEDULING_POLICY_DEFAULT,
                ClusterScheduling::Spread => P::CU_CLUSTER_SCHEDULING_POLICY_SPREAD,
                ClusterScheduling::LoadBalancing => P::CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING,
            };
            push(
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                sys::CUlaunchAttributeValue { clusterSchedulingPolicyPreference: raw },
            );
        }
        if let Some(c) = self.preferred_cluster {
            push(
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
                sys::CUlaunchAttributeValue {
                    preferredClusterDim: sys::CUlaunchAttributeValue_union__bindgen_ty_4 {
                        x: c.x,
                        y: c.y,
                        z: c.z,
                        ..Default::default()
                    },
                },
            );
        }
        if let Some(domain) = self.mem_sync_domain {
            let raw = match domain {
                MemSyncDomain::Default => sys::CUlaunchMemSyncDomain::CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT,
                MemSyncDomain::Remote => sys::CUlaunchMemSyncDomain::CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE,
            };
            push(
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
                sys::CUlaunchAttributeValue { memSyncDomain: raw },
            );
        }
        if let Some(percent) = self.shared_memory_carveout {
            push(
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                sys::CUlaunchAttributeValue { sharedMemCarveout: u32::from(percent) },
            );
        }
        self.push_values(&mut out);
        if events {
            self.push_events(&mut out);
        }
        let AttributeWriter { attrs, n } = out;
        sys::CUlaunchConfig {
            gridDimX: self.grid.x,
            gridDimY: self.grid.y,
            gridDimZ: self.grid.z,
            blockDimX: self.block.x,
            blockDimY: self.block.y,
            blockDimZ: self.block.z,
            sharedMemBytes: self.shared_mem_bytes,
            hStream: stream,
            attrs: attrs.as_mut_ptr().cast(),
            numAttrs: n as u32,
            ..Default::default()
        }
    }
}

#[cold]
fn zero_dimension(operation: &'static str, config: &LaunchConfig) -> Error {
    Error::invalid(
        operation,
        format!("grid {:?} and block {:?} must have no zero dimension", config.grid, config.block),
    )
}

#[cold]
fn too_many_threads(operation: &'static str, block: u64, max: u32) -> Error {
    Error::invalid(
        operation,
        format!(
            "a block of {block} threads is more than this kernel's limit of {max} threads per block (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK); launch smaller blocks and more of them"
        ),
    )
}

/// The one launch path: checks, raw configuration on the stack, one `cuLaunchKernelEx`.
///
/// # Safety
///
/// `f` is a live function (or a kernel cast to one) whose parameters match `args`.
#[inline]
unsafe fn launch_raw<A: KernelArgs>(
    operation: &'static str,
    f: sys::CUfunction,
    max_threads: u32,
    params: &ParamLayout,
    stream: &Stream,
    config: &LaunchConfig<'_>,
    args: A,
) -> Result<()> {
    config.check_launch(operation, max_threads, stream)?;
    params.check(operation, args.sizes().as_ref())?;
    let raw_stream = stream.as_raw();
    stream.context().take_deferred()?;
    // The default-stream handles act on the current context.
    stream.bind_if_default()?;
    // Buffers used on another stream than their own wait for this one before they are given
    // back; nothing to do on their own stream.
    crate::track::checker::launch_reads_forgotten();
    args.note_launch(stream)?;
    crate::track::checker::launch_reads_told();
    let mut attrs = [const { MaybeUninit::uninit() }; crate::launch::MAX_ATTRIBUTES];
    let raw = config.raw_launch_config(raw_stream, &mut attrs);
    // `args` stays where it is until the call returns: the pointers of views passed by value
    // point into it.
    let mut pointers = args.pointers();
    // SAFETY: `raw` points at `numAttrs` initialised attributes in `attrs`; `pointers` holds
    // one pointer per argument, to bytes that live until `args` is dropped after the call; the
    // caller guarantees they match the kernel's parameters.
    unsafe { driver!(cuLaunchKernelEx(&raw, f, pointers.as_mut().as_mut_ptr(), std::ptr::null_mut())) }
}

/// A launch on a capturing stream runs at the graph's launches: the graph holds the module's
/// loaded code (where the function came from a [`Module`](crate::Module)), so the module may be
/// dropped before them.
#[cold]
fn hold_code(stream: &Stream, code: Option<&Arc<LoadedCode>>) -> Result<()> {
    if let (Some(code), Some(capture)) = (code, crate::stream::capture_of(stream)?) {
        capture.note_once(code.clone());
    }
    Ok(())
}

impl Function<'_> {
    /// Launches the function on `stream`
    /// ([`cuLaunchKernelEx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)).
    ///
    /// A zero grid or block dimension, a block larger than the function allows, or arguments
    /// that differ in number or size from the kernel's parameters (where the driver reports
    /// them, see [the module documentation](crate::launch#arguments)) are an
    /// [`Error::InvalidArgument`] before any call. A kernel that faults while it runs is
    /// reported by the next synchronizing call (stream, event or context synchronize).
    ///
    /// # Safety
    ///
    /// `args` must match the kernel's parameters in number, order and type, and every pointer
    /// among them (buffers and views included) must be valid for what the kernel does with it
    /// until the kernel finishes (the memory must stay allocated, and nothing else may use it
    /// in a conflicting way). The stream must belong to the function's context. On a stream
    /// being captured, "until the kernel finishes" means for as long as the graph and its
    /// executable graphs may run: the crate's buffers and views passed as arguments, and the
    /// module of a function looked up in a [`Module`](crate::Module), are held by the graph;
    /// anything else (the library of a [`Kernel`], a function adopted from a raw handle,
    /// memory behind raw addresses, textures, surfaces, tensor maps) is the caller's to keep
    /// alive ([`Graph::keep`](crate::graph::Graph::keep)).
    #[inline]
    pub unsafe fn launch<A: KernelArgs>(
        &self,
        stream: &Stream,
        config: &LaunchConfig<'_>,
        args: A,
    ) -> Result<()> {
        if crate::stream::capturing::any() {
            hold_code(stream, self.loaded_code())?;
        }
        // SAFETY: the function is live while `self` borrows its module; the caller vouches
        // for the arguments.
        unsafe {
            launch_raw(
                "Function::launch",
                self.as_raw(),
                self.launch_limit(),
                self.param_layout(),
                stream,
                config,
                args,
            )
        }
    }

    /// Launches cooperatively: like [`launch`](Self::launch) with
    /// [`LaunchConfig::cooperative`] set, so that all blocks are resident at once and may
    /// synchronize across the grid. A grid larger than the device can hold at once fails with
    /// `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`.
    ///
    /// # Safety
    ///
    /// As for [`launch`](Self::launch).
    pub unsafe fn launch_cooperative<A: KernelArgs>(
        &self,
        stream: &Stream,
        config: &LaunchConfig<'_>,
        args: A,
    ) -> Result<()> {
        let config = config.cooperative(true);
        // SAFETY: as for `launch`.
        unsafe { self.launch(stream, &config, args) }
    }
}

impl Kernel<'_> {
    /// Launches the library kernel on `stream`, in the stream's context
    /// ([`cuLaunchKernelEx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)
    /// with the `CUkernel` in place of a function).
    ///
    /// A zero grid or block dimension, or a block larger than the kernel allows on the
    /// stream's device ([`Kernel::max_threads_per_block`], asked once per device and then
    /// remembered by this value), is an [`Error::InvalidArgument`] before the launch. So are
    /// arguments that differ in number or size from the kernel's parameters, where the driver
    /// reports them: the layout is asked for at the first launch and then remembered by this
    /// value.
    ///
    /// # Safety
    ///
    /// As for [`Function::launch`].
    #[inline]
    pub unsafe fn launch<A: KernelArgs>(
        &self,
        stream: &Stream,
        config: &LaunchConfig<'_>,
        args: A,
    ) -> Result<()> {
        let device = stream.context().device();
        let max_threads = match self.cached_max_threads(&device) {
            Some(max) => max,
            None => {
                // The first launch on this device: ask with the stream's context current, so
                // that a lazily loaded kernel is loaded where it is about to run.
                stream.context().make_current()?;
                self.query_max_threads(&device)?
            }
        };
        let params = match self.cached_param_layout() {
            Some(params) => params,
            None => {
                // As above: the driver answers from the kernel as loaded in a context.
                stream.context().make_current()?;
                self.query_param_layout()
            }
        };
        // SAFETY: the driver accepts a CUkernel where a CUfunction is expected; the kernel is
        // live while `self` borrows its library; the caller vouches for the arguments.
        unsafe {
            launch_raw("Kernel::launch", self.as_raw().cast(), max_threads, params, stream, config, args)
        }
    }
}

/// A count of elements for [`LaunchConfig::for_elements`]: `u32`, `u64` or `usize`, and `i32`
/// (what an integer literal is, and what C code holds; a negative count is 0).
pub trait ElementCount: Copy {
    /// The count as a `u64`.
    fn as_u64(self) -> u64;
}

impl ElementCount for u32 {
    fn as_u64(self) -> u64 {
        u64::from(self)
    }
}

impl ElementCount for u64 {
    fn as_u64(self) -> u64 {
        self
    }
}

impl ElementCount for usize {
    fn as_u64(self) -> u64 {
        // A usize is at most 64 bits on every target the driver supports.
        self as u64
    }
}

impl ElementCount for i32 {
    fn as_u64(self) -> u64 {
        u64::try_from(self).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_becomes_only_the_attributes_asked_for() {
        let mut attrs = [const { MaybeUninit::uninit() }; crate::launch::MAX_ATTRIBUTES];
        let plain = LaunchConfig::new((4, 2), 128).raw_config(std::ptr::null_mut(), &mut attrs);
        assert_eq!((plain.gridDimX, plain.gridDimY, plain.gridDimZ), (4, 2, 1));
        assert_eq!((plain.blockDimX, plain.numAttrs), (128, 0));
        let config =
            LaunchConfig::new(8, 64).shared_mem_bytes(1024).cluster(2).cooperative(true).priority(-1);
        let raw = config.raw_config(std::ptr::null_mut(), &mut attrs);
        assert_eq!((raw.sharedMemBytes, raw.numAttrs), (1024, 3));
        // SAFETY: the first three were written by raw_config.
        let ids: Vec<_> = attrs[..3].iter().map(|a| unsafe { a.assume_init_ref() }.id).collect();
        assert_eq!(
            ids,
            [
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY
            ]
        );
        // SAFETY: written by raw_config with the cluster variant.
        let cluster = unsafe { attrs[0].assume_init_ref().value.clusterDim };
        assert_eq!((cluster.x, cluster.y, cluster.z), (2, 1, 1));
    }

    #[test]
    fn bad_shapes_are_rejected_before_the_call() {
        assert!(LaunchConfig::new(0, 32).check("t", 1024).is_err());
        assert!(LaunchConfig::new(1, (32, 0)).check("t", 1024).is_err());
        let e = LaunchConfig::new(1, (32, 32, 2))
            .check("t", 1024)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("2048 threads") && e.contains("1024"), "{e}");
        assert!(LaunchConfig::new(1, 1024).check("t", 1024).is_ok());
        assert!(LaunchConfig::new(1, 4096).check("t", 0).is_ok(), "unknown limit: the driver decides");
        assert_eq!(LaunchConfig::for_elements(1000, 256).grid, Dim3::new(4, 1, 1));
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, Dim3::new(1, 1, 1));
        // A buffer's usize length goes in as it is; counts past a u32 saturate (the driver
        // refuses that grid at launch); a negative literal counts as 0.
        assert_eq!(LaunchConfig::for_elements(1000usize, 256).grid, Dim3::new(4, 1, 1));
        assert_eq!(LaunchConfig::for_elements(1u64 << 39, 256).grid, Dim3::new(1 << 31, 1, 1));
        assert_eq!(LaunchConfig::for_elements(1u64 << 40, 256).grid, Dim3::new(u32::MAX, 1, 1));
        assert_eq!(LaunchConfig::for_elements(-5, 32).grid, Dim3::new(1, 1, 1));
    }

    #[test]
    fn scheduling_domain_and_carveout_become_attributes() {
        let mut attrs = [const { MaybeUninit::uninit() }; MAX_ATTRIBUTES];
        let config = LaunchConfig::new(8, 64)
            .cluster_scheduling(ClusterScheduling::LoadBalancing)
            .preferred_cluster(4)
            .mem_sync_domain(MemSyncDomain::Remote)
            .shared_memory_carveout(25);
        let raw = config.raw_config(std::ptr::null_mut(), &mut attrs);
        assert_eq!(raw.numAttrs, 4);
        // SAFETY: the first four were written by raw_config.
        let ids: Vec<_> = attrs[..4].iter().map(|a| unsafe { a.assume_init_ref() }.id).collect();
        assert_eq!(
            ids,
            [
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
            ]
        );
        // SAFETY: each written with the variant read here.
        unsafe {
            assert_eq!(
                attrs[0].assume_init_ref().value.clusterSchedulingPolicyPreference,
                sys::CUclusterSchedulingPolicy::CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING
            );
            assert_eq!(attrs[1].assume_init_ref().value.preferredClusterDim.x, 4);
            assert_eq!(
                attrs[2].assume_init_ref().value.memSyncDomain,
                sys::CUlaunchMemSyncDomain::CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE
            );
            assert_eq!(attrs[3].assume_init_ref().value.sharedMemCarveout, 25);
        }
        assert!(config.check("t", 0).is_ok());
        assert!(matches!(
            config.shared_memory_carveout(101).check("t", 0),
            Err(Error::InvalidArgument { .. })
        ));
        // Every attribute at once still fits (the value attributes here, the events with
        // them in `attributes_policy`'s tests).
        let all = config.cluster(2).cooperative(true).priority(0).programmatic_stream_serialization(true);
        assert_eq!(all.raw_config(std::ptr::null_mut(), &mut attrs).numAttrs, 8);
    }
}
