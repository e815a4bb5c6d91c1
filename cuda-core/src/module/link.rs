//! The JIT linker: PTX, cubins, fat binaries, objects and libraries linked into one cubin.

use super::{JitLog, JitOptions, image, jit::RawJitOptions, symbol_name};
use crate::context::Context;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::ffi::CString;
use std::path::Path;

/// The kind of a linker input (`CUjitInputType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JitInputType {
    /// `CU_JIT_INPUT_CUBIN`: compiled device code.
    Cubin,
    /// `CU_JIT_INPUT_PTX`: PTX text, compiled by the JIT compiler.
    Ptx,
    /// `CU_JIT_INPUT_FATBINARY`: a fat binary.
    Fatbinary,
    /// `CU_JIT_INPUT_OBJECT`: a host object holding device code (from `nvcc -rdc`).
    Object,
    /// `CU_JIT_INPUT_LIBRARY`: an archive of host objects holding device code.
    Library,
}

impl JitInputType {
    /// The raw value.
    pub fn as_raw(self) -> sys::CUjitInputType {
        sys::CUjitInputType(self as u32)
    }
}

impl TryFrom<sys::CUjitInputType> for JitInputType {
    type Error = Error;
    fn try_from(raw: sys::CUjitInputType) -> Result<Self> {
        [Self::Cubin, Self::Ptx, Self::Fatbinary, Self::Object, Self::Library]
            .get(raw.0 as usize)
            .copied()
            .ok_or_else(|| {
                Error::invalid("JitInputType::try_from", format!("unknown linker input type {}", raw.0))
            })
    }
}

/// A pending link
/// ([`cuLinkCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
///
/// Add inputs, then [`complete`](Linker::complete) to get the linked cubin, which can be
/// loaded with [`Module::from_cubin`](super::Module::from_cubin). The link state is destroyed
/// on drop.
///
/// ```no_run
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, module::{JitOptions, Linker, Module}};
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let mut linker = Linker::new(&ctx, &JitOptions::new())?;
/// linker.add_ptx("a.ptx", ".version 8.0\n.target sm_70\n.address_size 64\n")?;
/// let cubin = linker.complete()?.to_vec();
/// let module = Module::from_cubin(&ctx, &cubin)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Linker {
    state: sys::CUlinkState,
    ctx: Context,
    // The driver writes the logs into these buffers for the whole life of the link state.
    options: Box<RawJitOptions>,
}

impl Linker {
    /// Starts a link for the device of `ctx` with the given options
    /// ([`cuLinkCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    ///
    /// Options the driver refuses are an [`Error::Jit`] with its log.
    pub fn new(ctx: &Context, options: &JitOptions) -> Result<Linker> {
        ctx.enter()?;
        let mut options = Box::new(options.to_raw());
        let (keys, values) = options.arrays();
        let mut state = std::ptr::null_mut();
        // SAFETY: the option arrays have `len()` entries (null when none); their log buffers live
        // in the box, which the linker keeps until the state is destroyed.
        let status = unsafe { driver!(status: cuLinkCreate(options.len(), keys, values, &mut state)) };
        options.check(status)?;
        Ok(Linker { state, ctx: ctx.clone(), options })
    }

    /// The raw `CUlinkState`.
    pub fn as_raw(&self) -> sys::CUlinkState {
        self.state
    }

    /// The logs so far: compile errors of a failed input are in `error`.
    pub fn log(&self) -> JitLog {
        self.options.log()
    }

    /// Adds PTX text; `name` appears in the log
    /// ([`cuLinkAddData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    ///
    /// Empty text, or text with a NUL byte, is an [`Error::InvalidArgument`]; PTX that does
    /// not compile is an [`Error::Jit`] with the compiler's log.
    pub fn add_ptx(&mut self, name: &str, ptx: &str) -> Result<()> {
        let text = image::ptx_cstring("Linker::add_ptx", ptx.as_bytes())?;
        let bytes = text.as_bytes_with_nul();
        self.add(JitInputType::Ptx, name, bytes.as_ptr(), bytes.len())
    }

    /// Adds a cubin
    /// ([`cuLinkAddData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    ///
    /// Bytes that are not a 64-bit ELF image with its tables inside the slice are an
    /// [`Error::InvalidArgument`]; a cubin the linker rejects is an [`Error::Jit`].
    pub fn add_cubin(&mut self, name: &str, cubin: &[u8]) -> Result<()> {
        image::check_cubin("Linker::add_cubin", cubin)?;
        self.add(JitInputType::Cubin, name, cubin.as_ptr(), cubin.len())
    }

    /// Adds a fat binary
    /// ([`cuLinkAddData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    ///
    /// Bytes without a fat binary header, or shorter than it says, are an
    /// [`Error::InvalidArgument`]; an input the linker rejects is an [`Error::Jit`].
    pub fn add_fatbin(&mut self, name: &str, fatbin: &[u8]) -> Result<()> {
        image::check_fatbin("Linker::add_fatbin", fatbin)?;
        self.add(JitInputType::Fatbinary, name, fatbin.as_ptr(), fatbin.len())
    }

    /// Adds input of any kind from bytes
    /// ([`cuLinkAddData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    /// PTX given this way needs no terminating NUL.
    ///
    /// Each kind is checked as its own method checks it ([`add_ptx`](Self::add_ptx),
    /// [`add_cubin`](Self::add_cubin), [`add_fatbin`](Self::add_fatbin)); an empty object or
    /// library is an [`Error::InvalidArgument`]. Input the linker rejects is an [`Error::Jit`].
    pub fn add_data(&mut self, kind: JitInputType, name: &str, data: &[u8]) -> Result<()> {
        match kind {
            JitInputType::Ptx => {
                let text = image::ptx_cstring("Linker::add_data", data)?;
                let bytes = text.as_bytes_with_nul();
                self.add(kind, name, bytes.as_ptr(), bytes.len())
            }
            JitInputType::Cubin => self.add_cubin(name, data),
            JitInputType::Fatbinary => self.add_fatbin(name, data),
            JitInputType::Object | JitInputType::Library => {
                if data.is_empty() {
                    return Err(Error::invalid("Linker::add_data", "the input is empty"));
                }
                self.add(kind, name, data.as_ptr(), data.len())
            }
        }
    }

    fn add(&mut self, kind: JitInputType, name: &str, data: *const u8, len: usize) -> Result<()> {
        let c_name = symbol_name("Linker::add_data", name)?;
        self.ctx.enter()?;
        // SAFETY: `data` points to `len` readable bytes, checked for its kind; the driver reads
        // them during the call only (it takes a mutable pointer but does not write).
        let status = unsafe {
            driver!(status: cuLinkAddData(
                self.state,
                kind.as_raw(),
                data.cast_mut().cast(),
                len,
                c_name.as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            ))
        };
        self.options.check(status).map(drop)
    }

    /// Adds the input in a file
    /// ([`cuLinkAddFile`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    ///
    /// A path with a NUL byte, or that is not a readable file, is an
    /// [`Error::InvalidArgument`]; input the linker rejects is an [`Error::Jit`] with its log.
    pub fn add_file(&mut self, kind: JitInputType, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::invalid("Linker::add_file", "the path contains a NUL byte"))?;
        if !path.is_file() {
            return Err(Error::invalid(
                "Linker::add_file",
                format!("{} is not a readable file", path.display()),
            ));
        }
        self.ctx.enter()?;
        // SAFETY: a NUL-terminated path; no per-input options.
        let status = unsafe {
            driver!(status: cuLinkAddFile(
                self.state,
                kind.as_raw(),
                c_path.as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            ))
        };
        self.options.check(status).map(drop)
    }

    /// Finishes the link and returns the cubin
    /// ([`cuLinkComplete`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html)).
    /// The bytes belong to the linker; copy them (`to_vec`) to keep them past it.
    ///
    /// Unresolved symbols or inputs that do not fit together are an [`Error::Jit`] with the
    /// linker's log.
    pub fn complete(&mut self) -> Result<&[u8]> {
        self.ctx.enter()?;
        let (mut cubin, mut size) = (std::ptr::null_mut(), 0usize);
        // SAFETY: two out-parameters.
        let status = unsafe { driver!(status: cuLinkComplete(self.state, &mut cubin, &mut size)) };
        self.options.check(status)?;
        if cubin.is_null() {
            return Err(Error::invalid("Linker::complete", "the linker returned no image"));
        }
        // SAFETY: the driver returned `size` bytes that live until the state is destroyed,
        // which cannot happen while `self` is borrowed.
        Ok(unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) })
    }
}

impl Drop for Linker {
    fn drop(&mut self) {
        let state = self.state;
        // SAFETY: this value owns the link state; the cubin it returned was borrowed from it.
        self.ctx.with_current_for_drop("Linker", || unsafe { driver!(cuLinkDestroy(state)) });
    }
}

// SAFETY: the link state is used by one owner at a time (`&mut self` for every change).
unsafe impl Send for Linker {}
