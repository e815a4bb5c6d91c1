//! [`SharedFunction`]: a kernel that keeps its module alive, so that an application can keep
//! its kernels in a struct next to the module they come from.

use super::{Function, Module};
use crate::error::Result;
use std::sync::Arc;

/// A kernel of a module shared through an `Arc`, holding the module (and so its context)
/// alive: cheap to clone, `Send + Sync`, and free of the borrow that ties a [`Function`] to
/// its [`Module`]. Its attributes and parameter layout are read once, when it is looked up.
///
/// ```no_run
/// use cuhost::module::{Module, SharedFunction};
/// use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
/// use std::sync::Arc;
///
/// /// What an application keeps: its stream and its kernels, no borrow between them.
/// struct Gpu {
///     stream: Stream,
///     saxpy: SharedFunction,
/// }
///
/// # fn main() -> cuhost::Result<()> {
/// # let ptx = "";
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let module = Arc::new(Module::from_ptx(&ctx, ptx)?);
/// let gpu = Gpu { stream: Stream::new(&ctx, StreamFlags::NON_BLOCKING)?, saxpy: module.shared_function("saxpy")? };
/// drop(module); // the kernel keeps it loaded
/// let (n, a) = (1024u32, 2.0f32);
/// let x = DeviceBuffer::<f32>::zeroed(&gpu.stream, n as usize)?;
/// let mut y = DeviceBuffer::<f32>::zeroed(&gpu.stream, n as usize)?;
/// // SAFETY: saxpy takes (u32 n, f32 a, const f32* x, f32* y) and reads or writes n elements.
/// unsafe { gpu.saxpy.function().launch(&gpu.stream, &LaunchConfig::for_elements(n, 256), (&n, &a, &x, &mut y))? };
/// # Ok(()) }
/// ```
///
/// A [`Function`] taken from it borrows it, so it cannot outlive the handle that keeps its
/// module loaded:
///
/// ```compile_fail,E0505
/// # fn f(kernel: cuhost::module::SharedFunction) {
/// let function = kernel.function();
/// drop(kernel); // the module may be unloaded here
/// let _ = function.as_raw();
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct SharedFunction {
    /// Valid while `module` is alive, which this value ensures; handed out only with the
    /// lifetime of a borrow of this value.
    function: Function<'static>,
    module: Arc<Module>,
}

impl SharedFunction {
    /// The kernel, to launch or query, for as long as this handle is borrowed.
    #[inline]
    pub fn function(&self) -> Function<'_> {
        self.function
    }

    /// The module the kernel belongs to.
    pub fn module(&self) -> &Arc<Module> {
        &self.module
    }
}

impl Module {
    /// The kernel called `name`, as a handle that keeps this module alive
    /// ([`cuModuleGetFunction`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)):
    /// what an application keeps in a struct. Looked up once; copies of the handle share the
    /// attributes and parameter layout read then.
    ///
    /// Fails as [`Module::function`] does: a name that is not a kernel of the module is an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) naming it.
    pub fn shared_function(self: &Arc<Module>, name: &str) -> Result<SharedFunction> {
        let function = self.function(name)?;
        // SAFETY: the handle holds the module, so the function stays loaded for as long as the
        // handle lives; it is handed out only with the lifetime of a borrow of the handle.
        let function = unsafe { function.detached() };
        Ok(SharedFunction { function, module: Arc::clone(self) })
    }
}
