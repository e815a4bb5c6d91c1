//! Libraries: code loaded once for all contexts, and their context-independent kernels.

use super::ParamLayout;
use super::{
    Claims, Function, FunctionAttribute, Global, JitLog, JitOptions, driver_string, image, symbol_name,
};
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result, check};
use crate::module::CacheConfig;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Code loaded for every context, present and future
/// ([`cuLibraryLoadData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
///
/// The driver keeps its own copy of the image. A [`Kernel`] of the library launches in the
/// context of the stream it is launched on; no context needs to be current to load it.
///
/// The library is unloaded on drop. A library belongs to no context, so an error while
/// unloading is kept in the context current on the dropping thread, when it is one this crate
/// made or retained (read it with [`Context::take_deferred_errors`]); [`unload`](Self::unload)
/// returns it instead, wherever it is called.
#[derive(Debug)]
pub struct Library {
    /// Null once unloaded.
    raw: sys::CUlibrary,
    log: JitLog,
    /// The variables that have a live [`Global`].
    claims: Claims,
}

// SAFETY: a CUlibrary may be used from any thread; the driver synchronizes access to it.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

impl Library {
    /// Loads PTX, a cubin or a fat binary, recognising which it is; PTX is compiled for each
    /// context's device when first used there
    /// ([`cuLibraryLoadData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// # Errors
    ///
    /// A cubin or fat binary whose header is malformed or truncated, or PTX that is empty or
    /// holds a NUL byte, is an [`Error::InvalidArgument`], found before the driver reads it.
    /// An image the driver or the JIT compiler rejects is an [`Error::Jit`] with the
    /// compiler's log.
    pub fn from_image(image: &[u8], options: &JitOptions) -> Result<Library> {
        crate::device::init()?;
        match image::kind(image) {
            image::Kind::Cubin => {
                image::check_cubin("Library::from_image", image)?;
                Library::load(image::Aligned::new(image).as_ptr(), options)
            }
            image::Kind::Fatbin => {
                image::check_fatbin("Library::from_image", image)?;
                Library::load(image::Aligned::new(image).as_ptr(), options)
            }
            image::Kind::Ptx => {
                let text = image::ptx_cstring("Library::from_image", image)?;
                Library::load(text.as_ptr().cast(), options)
            }
        }
    }

    /// Loads PTX text
    /// ([`cuLibraryLoadData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// Empty text, or text with a NUL byte, is an [`Error::InvalidArgument`]; PTX the driver
    /// cannot load is an [`Error::Jit`] with the compiler's log.
    pub fn from_ptx(ptx: &str, options: &JitOptions) -> Result<Library> {
        crate::device::init()?;
        let text = image::ptx_cstring("Library::from_ptx", ptx.as_bytes())?;
        Library::load(text.as_ptr().cast(), options)
    }

    /// Loads a `.ptx`, `.cubin` or `.fatbin` file, which the driver reads itself
    /// ([`cuLibraryLoadFromFile`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// A file that cannot be opened is an [`Error::InvalidArgument`] with the operating
    /// system's reason, and so is a path with a NUL byte (or, off Unix, one that is not UTF-8);
    /// an image the driver or the JIT compiler rejects is an [`Error::Jit`] with the compiler's
    /// log.
    pub fn from_file(path: impl AsRef<Path>, options: &JitOptions) -> Result<Library> {
        let path = path.as_ref();
        let bad = |why: String| {
            Error::invalid("Library::from_file", format!("cannot read {}: {why}", path.display()))
        };
        std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
        #[cfg(unix)]
        let name = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()));
        #[cfg(not(unix))]
        let name = std::ffi::CString::new(path.to_str().ok_or_else(|| bad("the path is not UTF-8".into()))?);
        let name = name.map_err(|_| bad("the path holds a NUL byte".into()))?;
        crate::device::init()?;
        let mut raw_options = options.to_raw();
        let (keys, values) = raw_options.arrays();
        let mut raw = std::ptr::null_mut();
        // SAFETY: a NUL-terminated path; the JIT option arrays have `len()` entries; no library
        // options are passed.
        let status = unsafe {
            driver!(status: cuLibraryLoadFromFile(
                &mut raw,
                name.as_ptr(),
                keys,
                values,
                raw_options.len(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            ))
        };
        let log = raw_options.check(status)?;
        Ok(Library { raw, log, claims: Claims::default() })
    }

    fn load(image: *const std::ffi::c_void, options: &JitOptions) -> Result<Library> {
        let mut raw_options = options.to_raw();
        let (keys, values) = raw_options.arrays();
        let mut raw = std::ptr::null_mut();
        // SAFETY: `image` is checked (or NUL-terminated PTX) and outlives the call; the JIT
        // option arrays have `len()` entries; no library options are passed.
        let status = unsafe {
            driver!(status: cuLibraryLoadData(
                &mut raw,
                image,
                keys,
                values,
                raw_options.len(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            ))
        };
        let log = raw_options.check(status)?;
        Ok(Library { raw, log, claims: Claims::default() })
    }

    /// The raw `CUlibrary`.
    pub fn as_raw(&self) -> sys::CUlibrary {
        self.raw
    }

    /// The module the library is loaded as in `ctx` (the library owns it: do not unload it)
    /// ([`cuLibraryGetModule`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)),
    /// for code that works with `CUmodule`s.
    ///
    /// Fails with the driver's status when it refuses the call.
    pub fn module_raw(&self, ctx: &Context) -> Result<sys::CUmodule> {
        ctx.enter()?;
        let mut module = std::ptr::null_mut();
        // SAFETY: a live library and one out-parameter.
        unsafe { driver!(cuLibraryGetModule(&mut module, self.raw)) }?;
        Ok(module)
    }

    /// The host address of the unified function `symbol` (a function compiled for both host
    /// and device) ([`cuLibraryGetUnifiedFunction`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// A name with a NUL byte is an [`Error::InvalidArgument`]; a name the library does not
    /// hold fails with the driver's status (`CUDA_ERROR_NOT_FOUND`).
    pub fn unified_function(&self, symbol: &str) -> Result<*mut std::ffi::c_void> {
        let name = symbol_name("Library::unified_function", symbol)?;
        let mut address = std::ptr::null_mut();
        // SAFETY: a live library, a NUL-terminated name and one out-parameter.
        unsafe { driver!(cuLibraryGetUnifiedFunction(&mut address, self.raw, name.as_ptr())) }?;
        Ok(address)
    }

    /// What the JIT compiler wrote while loading.
    pub fn jit_log(&self) -> &JitLog {
        &self.log
    }

    /// The kernel called `name`
    /// ([`cuLibraryGetKernel`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// A name with a NUL byte, or one the library has no kernel of, is an
    /// [`Error::InvalidArgument`] naming it.
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>> {
        let c_name = symbol_name("Library::kernel", name)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live library, a NUL-terminated name, one out-parameter.
        let status = unsafe { driver!(status: cuLibraryGetKernel(&mut raw, self.raw, c_name.as_ptr())) };
        if status.is(sys::CUresult::CUDA_ERROR_NOT_FOUND) {
            return Err(Error::invalid(
                "Library::kernel",
                format!("no kernel named `{name}` in this library"),
            ));
        }
        status.check()?;
        Ok(Kernel::wrap(raw))
    }

    /// Every kernel in the library
    /// ([`cuLibraryEnumerateKernels`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// Fails with the status of `cuLibraryGetKernelCount` or `cuLibraryEnumerateKernels` when
    /// the driver refuses either.
    pub fn kernels(&self) -> Result<Vec<Kernel<'_>>> {
        let mut count = 0;
        // SAFETY: a live library, one out-parameter.
        unsafe { driver!(cuLibraryGetKernelCount(&mut count, self.raw)) }?;
        let mut raw = vec![std::ptr::null_mut(); count as usize];
        // SAFETY: the array holds `count` entries.
        unsafe { driver!(cuLibraryEnumerateKernels(raw.as_mut_ptr(), count, self.raw)) }?;
        Ok(raw.into_iter().map(Kernel::wrap).collect())
    }

    /// The `__device__` variable `name` as it exists in `ctx`
    /// ([`cuLibraryGetGlobal`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// A name with a NUL byte or that the library does not define, a variable whose size is not
    /// a whole number of `T`s, or an address not aligned for `T`, is an
    /// [`Error::InvalidArgument`]; so is a variable whose `Global` (in this context) is alive
    /// already (one handle per variable, see [`Global`]).
    pub fn global<'a, T: bytemuck::Pod>(&'a self, ctx: &'a Context, name: &str) -> Result<Global<'a, T>> {
        self.variable(ctx, name, false)
    }

    /// The `__managed__` variable `name`
    /// ([`cuLibraryGetManaged`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    /// A managed variable has one address for every context, so it has one live `Global` at a
    /// time across them all.
    ///
    /// Fails as [`global`](Self::global) does.
    pub fn managed<'a, T: bytemuck::Pod>(&'a self, ctx: &'a Context, name: &str) -> Result<Global<'a, T>> {
        self.variable(ctx, name, true)
    }

    fn variable<'a, T: bytemuck::Pod>(
        &'a self,
        ctx: &'a Context,
        name: &str,
        managed: bool,
    ) -> Result<Global<'a, T>> {
        let c_name = symbol_name("Library::global", name)?;
        ctx.enter()?;
        let (mut ptr, mut bytes) = (0, 0);
        let (call, status) = if managed {
            // SAFETY: a live library, a NUL-terminated name, two out-parameters.
            ("cuLibraryGetManaged", unsafe {
                sys::cuLibraryGetManaged(&mut ptr, &mut bytes, self.raw, c_name.as_ptr())
            })
        } else {
            // SAFETY: as above.
            ("cuLibraryGetGlobal", unsafe {
                sys::cuLibraryGetGlobal(&mut ptr, &mut bytes, self.raw, c_name.as_ptr())
            })
        };
        if status == sys::CUresult::CUDA_ERROR_NOT_FOUND {
            return Err(Error::invalid(
                "Library::global",
                format!("no variable named `{name}` in this library"),
            ));
        }
        check(call, status)?;
        Global::new("Library::global", name, ctx, &self.claims, ptr, bytes)
    }
}

impl Library {
    /// Unloads the library now, returning the driver's status
    /// ([`cuLibraryUnload`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html))
    /// instead of keeping it in a context as `Drop` does. The library is gone either way.
    ///
    /// Fails with the driver's status when the unload fails (after a fault in the context, that
    /// fault).
    pub fn unload(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return Ok(());
        }
        // SAFETY: this value owns the library and unloads it once (`raw` is null afterwards);
        // nothing borrowed from it outlives it.
        unsafe { driver!(cuLibraryUnload(raw)) }
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            // A library belongs to no context: keep the error in the thread's current one.
            crate::context::defer_to_current(e.dropping("Library", None));
        }
    }
}

/// A kernel of a [`Library`] (`CUkernel`): one handle for every context.
///
/// Launch it with [`Kernel::launch`](crate::launch) (in the stream's context), or get the
/// [`Function`] for one context with [`Kernel::function`].
///
/// The value remembers the kernel's threads-per-block limit on the last device it was
/// launched on, and its parameter layout once a launch has asked for it, so keep it (rather
/// than asking the library again) to launch repeatedly.
#[derive(Debug)]
pub struct Kernel<'l> {
    raw: sys::CUkernel,
    /// `(ordinal + 1) << 32 | limit` for the last device asked about; 0 when none was.
    max_threads: AtomicU64,
    /// The parameter layout, the same on every device; read at the first launch.
    params: OnceLock<ParamLayout>,
    _library: PhantomData<&'l Library>,
}

impl Clone for Kernel<'_> {
    fn clone(&self) -> Self {
        Kernel {
            raw: self.raw,
            max_threads: AtomicU64::new(self.max_threads.load(Ordering::Relaxed)),
            params: self.params.clone(),
            _library: PhantomData,
        }
    }
}

// SAFETY: a CUkernel may be used from any thread.
unsafe impl Send for Kernel<'_> {}
// SAFETY: as above.
unsafe impl Sync for Kernel<'_> {}

impl<'l> Kernel<'l> {
    fn wrap(raw: sys::CUkernel) -> Kernel<'l> {
        Kernel { raw, max_threads: AtomicU64::new(0), params: OnceLock::new(), _library: PhantomData }
    }

    /// The most threads a block of this kernel may have on `device`
    /// (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK` through
    /// [`cuKernelGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// The answer for the last device asked about is remembered: asking again for that device
    /// makes no driver call and allocates nothing.
    ///
    /// Fails with the driver's status when it refuses the query (a kernel not loaded for that
    /// device's context, for instance).
    pub fn max_threads_per_block(&self, device: &Device) -> Result<u32> {
        match self.cached_max_threads(device) {
            Some(max) => Ok(max),
            None => self.query_max_threads(device),
        }
    }

    #[inline]
    pub(crate) fn cached_max_threads(&self, device: &Device) -> Option<u32> {
        let packed = self.max_threads.load(Ordering::Relaxed);
        if packed >> 32 == device_tag(device) { Some(packed as u32) } else { None }
    }

    #[cold]
    pub(crate) fn query_max_threads(&self, device: &Device) -> Result<u32> {
        let value = self.attribute(FunctionAttribute::MaxThreadsPerBlock, device)?;
        let max = u32::try_from(value).map_err(|_| {
            Error::invalid(
                "Kernel::max_threads_per_block",
                format!("the driver reported a limit of {value} threads per block"),
            )
        })?;
        self.max_threads.store(device_tag(device) << 32 | u64::from(max), Ordering::Relaxed);
        Ok(max)
    }

    /// The parameter layout, if a launch has read it already.
    #[inline]
    pub(crate) fn cached_param_layout(&self) -> Option<&ParamLayout> {
        self.params.get()
    }

    /// Reads the parameter layout (`cuKernelGetParamInfo` for each parameter) and remembers
    /// it; a driver that cannot report it gives a layout that checks nothing, remembered too.
    /// The driver answers from the kernel as loaded in the current context.
    #[cold]
    pub(crate) fn query_param_layout(&self) -> &ParamLayout {
        let raw = self.raw;
        self.params.get_or_init(|| {
            ParamLayout::read(
                |count| super::params::kernel_param_count(raw, count),
                |index, offset, size| {
                    // SAFETY: a live kernel and two out-parameters.
                    unsafe { sys::cuKernelGetParamInfo(raw, index, offset, size) }
                },
            )
        })
    }

    /// The raw `CUkernel`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUkernel {
        self.raw
    }

    /// The library the kernel belongs to, as the driver reports it
    /// ([`cuKernelGetLibrary`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)):
    /// the [`Library::as_raw`] of the library this kernel borrows.
    ///
    /// Fails with the driver's status when it refuses the call.
    pub fn library_raw(&self) -> Result<sys::CUlibrary> {
        let mut library = std::ptr::null_mut();
        // SAFETY: a live kernel and one out-parameter.
        unsafe { driver!(cuKernelGetLibrary(&mut library, self.raw)) }?;
        Ok(library)
    }

    /// The kernel's function in `ctx`, loading it there if needed
    /// ([`cuKernelGetFunction`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// The function dies with the library and with the context, so it borrows both:
    ///
    /// ```compile_fail,E0597
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, ContextFlags, Device, Library, module::{FunctionAttribute, JitOptions}};
    /// let dev = Device::get(0)?;
    /// let library = Library::from_ptx("", &JitOptions::new())?;
    /// let k = library.kernel("k")?;
    /// let f = {
    ///     let ctx = Context::create(&dev, ContextFlags::empty())?;
    ///     k.function(&ctx)? // F12 of the soundness review: `ctx` is destroyed here
    /// };
    /// f.attribute(FunctionAttribute::NumRegs)?;
    /// # Ok(()) }
    /// ```
    ///
    /// ```no_run
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, Device, Library, module::{FunctionAttribute, JitOptions}};
    /// let library = Library::from_ptx(".version 8.0\n.target sm_70\n.address_size 64\n.entry k() { ret; }\n", &JitOptions::new())?;
    /// let k = library.kernel("k")?;
    /// let ctx = Context::primary(&Device::get(0)?)?;
    /// let f = k.function(&ctx)?;
    /// assert!(f.attribute(FunctionAttribute::NumRegs)? >= 0);
    /// # Ok(()) }
    /// ```
    pub fn function<'a>(&self, ctx: &'a Context) -> Result<Function<'a>>
    where
        'l: 'a,
    {
        ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live kernel, one out-parameter; `ctx` is current.
        unsafe { driver!(cuKernelGetFunction(&mut raw, self.raw)) }?;
        // SAFETY: the function lives as long as the library (`'l`) and the context (`ctx`),
        // and `'a` is no longer than either.
        unsafe { Function::from_raw(raw) }
    }

    /// One attribute on `device`
    /// ([`cuKernelGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    pub fn attribute(&self, attribute: FunctionAttribute, device: &Device) -> Result<i32> {
        let mut value = 0;
        // SAFETY: a live kernel, one out-parameter.
        unsafe { driver!(cuKernelGetAttribute(&mut value, attribute.as_raw(), self.raw, device.as_raw())) }?;
        Ok(value)
    }

    /// Sets one attribute on `device`
    /// ([`cuKernelSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    pub fn set_attribute(&self, attribute: FunctionAttribute, value: i32, device: &Device) -> Result<()> {
        // SAFETY: a live kernel.
        unsafe { driver!(cuKernelSetAttribute(attribute.as_raw(), value, self.raw, device.as_raw())) }
    }

    /// Sets the preferred cache configuration on `device`
    /// ([`cuKernelSetCacheConfig`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    pub fn set_cache_config(&self, config: CacheConfig, device: &Device) -> Result<()> {
        // SAFETY: a live kernel.
        unsafe { driver!(cuKernelSetCacheConfig(self.raw, config.as_raw(), device.as_raw())) }
    }

    /// The kernel's name
    /// ([`cuKernelGetName`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    pub fn name(&self) -> Result<String> {
        let mut text = std::ptr::null();
        // SAFETY: a live kernel and one out-parameter; the string lives with the library.
        unsafe { driver!(cuKernelGetName(&mut text, self.raw)) }?;
        Ok(driver_string(text))
    }

    /// Offset and size in bytes of parameter `index`, or `None` past the last one
    /// ([`cuKernelGetParamInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LIBRARY.html)).
    ///
    /// The driver answers from the kernel as loaded into a context (libraries load lazily), so
    /// this makes `ctx` current first.
    pub fn param_info(&self, ctx: &Context, index: usize) -> Result<Option<(usize, usize)>> {
        ctx.enter()?;
        let (mut offset, mut size) = (0, 0);
        // SAFETY: a live kernel and two out-parameters.
        let status =
            unsafe { driver!(status: cuKernelGetParamInfo(self.raw, index, &mut offset, &mut size)) };
        if status.is(sys::CUresult::CUDA_ERROR_INVALID_VALUE) {
            return Ok(None);
        }
        status.check()?;
        Ok(Some((offset, size)))
    }
}

/// The cache tag of a device: its ordinal plus one, so that 0 means "nothing cached".
#[inline]
fn device_tag(device: &Device) -> u64 {
    u64::from(device.as_raw() as u32) + 1
}
