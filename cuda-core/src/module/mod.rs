//! Modules, libraries, the linker, functions and globals: loading GPU code and finding what is
//! in it.
//!
//! See the [Module Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html),
//! [Library Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)
//! and [Execution Control](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)
//! sections of the driver API.
//!
//! * A [`Module`] is code loaded into one context: PTX (compiled by the driver's JIT compiler
//!   for the context's device), a cubin, or a fat binary. Its [`Function`]s are launched with
//!   [`crate::launch`].
//! * A [`Library`] is code loaded once for every context; its [`Kernel`]s launch in the context
//!   of the stream they are launched on.
//! * The [`Linker`] links PTX, cubins, fat binaries and objects into one cubin.
//! * [`Global`] is a typed view of a `__device__` variable.
//!
//! Failed compilation is an [`Error::Jit`] that carries the compiler's log.

mod function;
mod global;
mod image;
mod jit;
mod library;
mod link;
mod param_counts;
mod params;
pub(crate) mod ptx_params;
mod shared;

pub use function::{CacheConfig, Function, FunctionAttribute, SharedMemoryConfig};
pub(crate) use global::Claims;
pub use global::Global;
pub use jit::{JitCacheMode, JitFallback, JitLog, JitOptions, JitTarget, OptimizationLevel};
pub use library::{Kernel, Library};
pub use link::{JitInputType, Linker};
pub(crate) use param_counts::ParamCounts;
#[cfg(feature = "compile")]
pub(crate) use param_counts::{field_at, put_field};
pub(crate) use params::ParamLayout;
pub use shared::SharedFunction;

use crate::context::Context;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::ffi::{CString, c_char};
use std::path::Path;
use std::sync::Arc;

/// Code loaded into one context
/// ([`cuModuleLoadDataEx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
///
/// The module keeps its context alive and is unloaded on drop; an error while unloading is kept
/// in the context (see [`Context::take_deferred_errors`]).
///
/// ```no_run
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, module::Module};
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let module = Module::from_ptx(&ctx, ".version 8.0\n.target sm_70\n.address_size 64\n")?;
/// assert!(module.functions()?.is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Module {
    /// The loaded code (the raw module and its context), unloaded when its last holder is
    /// gone: this module, and the graphs whose captured launches run its kernels.
    code: Arc<LoadedCode>,
    log: JitLog,
    /// The variables that have a live [`Global`].
    claims: Claims,
    /// The parameter count of each kernel, where the PTX the module was loaded or compiled
    /// from declares them.
    ptx_params: ParamCounts,
}

// `Send` and `Sync` come from `LoadedCode`'s: the raw module is held there only.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Module>()
};

impl Module {
    /// Compiles PTX text for the context's device and loads it, with default [`JitOptions`].
    ///
    /// Fails as [`Module::from_ptx_with`] does.
    pub fn from_ptx(ctx: &Context, ptx: &str) -> Result<Module> {
        Module::from_ptx_with(ctx, ptx, &JitOptions::new())
    }

    /// Compiles PTX text with the given options and loads it. [`Module::jit_log`] has the
    /// compiler's logs; a compile error is an [`Error::Jit`] with the error log.
    pub fn from_ptx_with(ctx: &Context, ptx: &str, options: &JitOptions) -> Result<Module> {
        let text = image::ptx_cstring("Module::from_ptx", ptx.as_bytes())?;
        let mut module = Module::load(ctx, text.as_ptr().cast(), options)?;
        module.ptx_params = ptx_params::entry_param_counts(ptx);
        Ok(module)
    }

    /// Loads a cubin (an ELF image for one architecture) with no option: a cubin needs no
    /// compiling, so the driver is asked for no log (whose buffers would be zeroed and handed
    /// over on every load) and the call is the plain `cuModuleLoadData`. A refusal is asked again
    /// with a small log, so that the error carries the driver's reason.
    ///
    /// Fails as [`Module::from_cubin_with`] does.
    pub fn from_cubin(ctx: &Context, cubin: &[u8]) -> Result<Module> {
        match Module::from_cubin_with(ctx, cubin, &JitOptions::new().with_log_capacity(0)) {
            Err(Error::Jit { .. }) => {
                Module::from_cubin_with(ctx, cubin, &JitOptions::new().with_log_capacity(2048))
            }
            loaded => loaded,
        }
    }

    /// Loads a cubin with the given options
    /// ([`cuModuleLoadDataEx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    ///
    /// Bytes that are not a 64-bit ELF image with its tables inside the slice are an
    /// [`Error::InvalidArgument`]; a cubin the driver cannot load (built for another
    /// architecture, for instance) is an [`Error::Jit`].
    pub fn from_cubin_with(ctx: &Context, cubin: &[u8], options: &JitOptions) -> Result<Module> {
        image::check_cubin("Module::from_cubin", cubin)?;
        Module::load(ctx, image::Aligned::new(cubin).as_ptr(), options)
    }

    /// Loads a fat binary (cubins for several architectures and PTX); the driver picks the
    /// best match for the device, compiling PTX if no cubin fits.
    ///
    /// Fails as [`Module::from_fatbin_with`] does.
    pub fn from_fatbin(ctx: &Context, fatbin: &[u8]) -> Result<Module> {
        Module::from_fatbin_with(ctx, fatbin, &JitOptions::new())
    }

    /// Loads a fat binary with the given options
    /// ([`cuModuleLoadDataEx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    ///
    /// Bytes without a fat binary header, or shorter than it says, are an
    /// [`Error::InvalidArgument`]; a fat binary with nothing for the device
    /// (`CUDA_ERROR_NO_BINARY_FOR_GPU`) or whose PTX does not compile is an [`Error::Jit`].
    pub fn from_fatbin_with(ctx: &Context, fatbin: &[u8], options: &JitOptions) -> Result<Module> {
        image::check_fatbin("Module::from_fatbin", fatbin)?;
        Module::load(ctx, image::Aligned::new(fatbin).as_ptr(), options)
    }

    /// Loads PTX, a cubin or a fat binary from bytes, recognising which it is; fails as the
    /// method for that kind does.
    pub fn from_image(ctx: &Context, image: &[u8], options: &JitOptions) -> Result<Module> {
        match image::kind(image) {
            image::Kind::Cubin => Module::from_cubin_with(ctx, image, options),
            image::Kind::Fatbin => Module::from_fatbin_with(ctx, image, options),
            image::Kind::Ptx => {
                let text = image::ptx_cstring("Module::from_image", image)?;
                let mut module = Module::load(ctx, text.as_ptr().cast(), options)?;
                module.ptx_params = ptx_params::entry_param_counts(&String::from_utf8_lossy(image));
                Ok(module)
            }
        }
    }

    /// Reads a `.ptx`, `.cubin` or `.fatbin` file and loads it like [`Module::from_image`].
    ///
    /// A file that cannot be read is an [`Error::InvalidArgument`] with the operating system's
    /// reason; otherwise it fails as [`Module::from_image`] does.
    pub fn from_file(ctx: &Context, path: impl AsRef<Path>, options: &JitOptions) -> Result<Module> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| {
            Error::invalid("Module::from_file", format!("cannot read {}: {e}", path.display()))
        })?;
        Module::from_image(ctx, &bytes, options)
    }

    fn load(ctx: &Context, image: *const std::ffi::c_void, options: &JitOptions) -> Result<Module> {
        ctx.enter()?;
        let mut raw_options = options.to_raw();
        let (keys, values) = raw_options.arrays();
        let mut raw = std::ptr::null_mut();
        // SAFETY: `image` is a checked, complete image (or NUL-terminated PTX) that outlives the
        // call; the option arrays have `len()` entries and their buffers live in `raw_options`.
        // With no option (a cached CUBIN), the plain call, as a program that loads a CUBIN makes it.
        let status = unsafe {
            match raw_options.len() {
                0 => driver!(status: cuModuleLoadData(&mut raw, image)),
                n => driver!(status: cuModuleLoadDataEx(&mut raw, image, n, keys, values)),
            }
        };
        let log = raw_options.check(status)?;
        Ok(Module {
            code: LoadedCode::new(ctx, raw),
            log,
            claims: Claims::default(),
            ptx_params: ParamCounts::default(),
        })
    }

    #[cfg(feature = "compile")]
    /// The module with the parameter count of each kernel, as the PTX it was compiled from
    /// declares them (`(kernel name, count)`), so that looking a kernel up reads its layout
    /// without asking past its last parameter. The counts must be those of this module's code.
    pub(crate) fn with_param_counts(mut self, counts: ParamCounts) -> Module {
        self.ptx_params = counts;
        self
    }

    /// Adopts a loaded module; it is unloaded on drop.
    ///
    /// # Safety
    ///
    /// `raw` must be a live module loaded into `ctx`, owned by nobody else.
    pub unsafe fn from_raw(ctx: &Context, raw: sys::CUmodule) -> Module {
        Module {
            code: LoadedCode::new(ctx, raw),
            log: JitLog::default(),
            claims: Claims::default(),
            ptx_params: ParamCounts::default(),
        }
    }

    /// The raw `CUmodule`.
    pub fn as_raw(&self) -> sys::CUmodule {
        self.code.raw
    }

    /// The context the module is loaded in.
    pub fn context(&self) -> &Context {
        &self.code.ctx
    }

    /// What the JIT compiler wrote while loading (empty for cubins that needed no compiling).
    pub fn jit_log(&self) -> &JitLog {
        &self.log
    }

    /// The kernel called `name`
    /// ([`cuModuleGetFunction`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    /// A name that is not in the module is an error that says so (`CUDA_ERROR_NOT_FOUND`).
    pub fn function(&self, name: &str) -> Result<Function<'_>> {
        let c_name = symbol_name("Module::function", name)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: live module, NUL-terminated name, one out-parameter.
        let status =
            unsafe { driver!(status: cuModuleGetFunction(&mut raw, self.code.raw, c_name.as_ptr())) };
        if status.is(sys::CUresult::CUDA_ERROR_NOT_FOUND) {
            return Err(Error::invalid(
                "Module::function",
                format!(
                    "no kernel named `{name}` in this module (cuModuleGetFunction: CUDA_ERROR_NOT_FOUND); check the .entry name, which C++ mangles unless declared extern \"C\""
                ),
            ));
        }
        status.check()?;
        let count = self.ptx_params.get(name);
        // SAFETY: the function belongs to this module, which the result borrows; the count was
        // read from the PTX it was compiled from.
        unsafe { Function::from_raw_counted(raw, count) }.map(|f| f.loaded_from(&self.code))
    }

    /// Every kernel in the module
    /// ([`cuModuleEnumerateFunctions`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    ///
    /// Fails with the driver's status when it refuses to count or list the functions, or to
    /// read one's attributes (see [`Function::from_raw`]).
    pub fn functions(&self) -> Result<Vec<Function<'_>>> {
        let mut count = 0;
        // SAFETY: live module, one out-parameter.
        unsafe { driver!(cuModuleGetFunctionCount(&mut count, self.code.raw)) }?;
        let mut raw = vec![std::ptr::null_mut(); count as usize];
        // SAFETY: the array holds `count` entries.
        unsafe { driver!(cuModuleEnumerateFunctions(raw.as_mut_ptr(), count, self.code.raw)) }?;
        // SAFETY: each function belongs to this module, which the results borrow; a count is
        // the one its PTX declares.
        raw.into_iter()
            .map(|f| {
                unsafe { Function::from_raw_counted(f, self.ptx_count_of(f)) }
                    .map(|f| f.loaded_from(&self.code))
            })
            .collect()
    }

    /// The parameter count the PTX gives the function `raw` of this module, found by its name
    /// ([`cuFuncGetName`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html));
    /// `None` for a module not loaded from PTX or a name the driver does not give.
    fn ptx_count_of(&self, raw: sys::CUfunction) -> Option<usize> {
        if self.ptx_params.is_empty() {
            return None;
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: a live function of this module and one out-parameter; the driver keeps the
        // name for the life of the module.
        let status = unsafe { sys::cuFuncGetName(&mut name, raw) };
        if status != sys::CUresult::CUDA_SUCCESS || name.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string owned by the driver, read at once.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_str().ok()?;
        self.ptx_params.get(name)
    }

    /// The `__device__` variable called `name`, viewed as elements of `T`
    /// ([`cuModuleGetGlobal`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    /// Its size must be a multiple of `size_of::<T>()`.
    ///
    /// A name with a NUL byte or that the module does not define, a size that is not a whole
    /// number of `T`s, or an address not aligned for `T`, is an [`Error::InvalidArgument`]; so
    /// is a variable whose `Global` is alive already (one handle per variable, see [`Global`]).
    pub fn global<T: bytemuck::Pod>(&self, name: &str) -> Result<Global<'_, T>> {
        let c_name = symbol_name("Module::global", name)?;
        let (mut ptr, mut bytes) = (0, 0);
        // SAFETY: live module, NUL-terminated name, two out-parameters.
        let status = unsafe {
            driver!(status: cuModuleGetGlobal(&mut ptr, &mut bytes, self.code.raw, c_name.as_ptr()))
        };
        if status.is(sys::CUresult::CUDA_ERROR_NOT_FOUND) {
            return Err(Error::invalid("Module::global", format!("no global named `{name}` in this module")));
        }
        status.check()?;
        Global::new("Module::global", name, &self.code.ctx, &self.claims, ptr, bytes)
    }
}

/// A module's loaded code: unloaded when the last holder (the module, a graph whose captured
/// launches run its kernels) is gone.
#[derive(Debug)]
pub(crate) struct LoadedCode {
    raw: sys::CUmodule,
    ctx: Context,
}

// SAFETY: a CUmodule may be used and unloaded from any thread.
unsafe impl Send for LoadedCode {}
// SAFETY: shared access only reads the handle.
unsafe impl Sync for LoadedCode {}

impl LoadedCode {
    fn new(ctx: &Context, raw: sys::CUmodule) -> Arc<LoadedCode> {
        Arc::new(LoadedCode { raw, ctx: ctx.clone() })
    }
}

impl Drop for LoadedCode {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: the module is owned by its `Module` and shared only through this value; the
        // last holder unloads it: nothing borrowed from the module outlives the module, and
        // every graph that may launch its kernels holds this value.
        self.ctx.with_current_for_drop("Module", || unsafe { driver!(cuModuleUnload(raw)) });
    }
}

/// How the driver loads modules: all kernels at once, or each on first use
/// ([`cuModuleGetLoadingMode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)),
/// set by the `CUDA_MODULE_LOADING` environment variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModuleLoadingMode {
    /// `CU_MODULE_EAGER_LOADING`.
    Eager,
    /// `CU_MODULE_LAZY_LOADING`.
    Lazy,
}

impl TryFrom<sys::CUmoduleLoadingMode> for ModuleLoadingMode {
    type Error = Error;
    fn try_from(raw: sys::CUmoduleLoadingMode) -> Result<Self> {
        match raw {
            sys::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING => Ok(Self::Eager),
            sys::CUmoduleLoadingMode::CU_MODULE_LAZY_LOADING => Ok(Self::Lazy),
            other => Err(Error::invalid(
                "ModuleLoadingMode::try_from",
                format!("unknown loading mode {}", other.0),
            )),
        }
    }
}

/// The driver's module loading mode
/// ([`cuModuleGetLoadingMode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
///
/// A mode this crate does not know (from a newer driver) is an [`Error::InvalidArgument`].
pub fn loading_mode() -> Result<ModuleLoadingMode> {
    crate::device::init()?;
    let mut raw = sys::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING;
    // SAFETY: one out-parameter.
    unsafe { driver!(cuModuleGetLoadingMode(&mut raw)) }?;
    ModuleLoadingMode::try_from(raw)
}

/// A symbol name as C wants it.
pub(crate) fn symbol_name(operation: &'static str, name: &str) -> Result<CString> {
    CString::new(name)
        .map_err(|_| Error::invalid(operation, format!("the name {name:?} contains a NUL byte")))
}

/// A C string the driver owns, copied out.
pub(crate) fn driver_string(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: the driver returned a NUL-terminated string that lives as long as its object.
    unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().into_owned()
}
