//! [`Linker`]: several compiled inputs (LTO-IR, PTX, CUBIN, fat binaries) linked by nvJitLink
//! into one CUBIN.

use super::options::{Arch, Output};
use super::program::Compiled;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::module::Module;
use cuhost_nvjitlink_sys as nvjitlink;
use std::ffi::{CString, c_char};
use std::sync::Arc;

/// The kind of one linker input (`nvJitLinkInputType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkInput {
    /// A CUBIN.
    Cubin,
    /// PTX text.
    Ptx,
    /// LTO-IR (from [`Output::LtoIr`]).
    LtoIr,
    /// A fat binary.
    Fatbin,
    /// A host object holding device code.
    Object,
    /// A library of objects.
    Library,
}

impl LinkInput {
    fn raw(self) -> nvjitlink::nvJitLinkInputType {
        use nvjitlink::nvJitLinkInputType as T;
        match self {
            LinkInput::Cubin => T::NVJITLINK_INPUT_CUBIN,
            LinkInput::Ptx => T::NVJITLINK_INPUT_PTX,
            LinkInput::LtoIr => T::NVJITLINK_INPUT_LTOIR,
            LinkInput::Fatbin => T::NVJITLINK_INPUT_FATBIN,
            LinkInput::Object => T::NVJITLINK_INPUT_OBJECT,
            LinkInput::Library => T::NVJITLINK_INPUT_LIBRARY,
        }
    }
}

/// Links several inputs into one CUBIN for one architecture with nvJitLink; with LTO-IR among
/// them, optimises across them at link time (`-lto`).
///
/// ```no_run
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::compile::{Arch, CompileOptions, Linker, Output, Program};
/// use cuhost::{Context, Device};
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let arch = Arch::of(&ctx.device())?;
/// let lto = CompileOptions::new().output(Output::LtoIr).relocatable(true);
/// let lib = Program::new("__device__ float twice(float x) { return 2 * x; }").compile(arch, &lto)?;
/// let main = Program::new(r#"__device__ float twice(float);
/// extern "C" __global__ void run(float *x) { x[threadIdx.x] = twice(x[threadIdx.x]); }"#)
///     .compile(arch, &lto)?;
/// let linked = Linker::new(arch).input(&lib).input(&main).link()?;
/// let module = linked.load(&ctx)?;
/// # let _ = module; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Linker {
    arch: Arch,
    options: Vec<String>,
    inputs: Vec<(LinkInput, String, Vec<u8>)>,
}

impl Linker {
    /// A linker producing a CUBIN for `arch`.
    pub fn new(arch: Arch) -> Linker {
        Linker { arch, options: Vec::new(), inputs: Vec::new() }
    }

    /// Any nvJitLink option, passed as written (`"-lineinfo"`, `"-maxrregcount=32"`).
    pub fn option(mut self, option: impl Into<String>) -> Linker {
        self.options.push(option.into());
        self
    }

    /// Adds the result of a compile (LTO-IR, PTX or CUBIN).
    pub fn input(self, compiled: &Compiled) -> Linker {
        let kind = match compiled.output() {
            Output::Cubin => LinkInput::Cubin,
            Output::Ptx => LinkInput::Ptx,
            Output::LtoIr => LinkInput::LtoIr,
        };
        self.input_bytes(kind, "program", compiled.code())
    }

    /// Adds `bytes` of `kind`; `name` names the input in the linker's messages.
    pub fn input_bytes(mut self, kind: LinkInput, name: impl Into<String>, bytes: &[u8]) -> Linker {
        let mut data = bytes.to_vec();
        if kind == LinkInput::Ptx && data.last() != Some(&0) {
            // nvJitLink reads PTX as a C string.
            data.push(0);
        }
        self.inputs.push((kind, name.into(), data));
        self
    }

    /// Links the inputs.
    ///
    /// # Errors
    ///
    /// * [`Error::NvJitLink`] with nvJitLink's error log when it refuses an input or the link
    ///   (an undefined symbol, inputs for another architecture);
    /// * [`Error::Load`] naming the files tried and what to install when nvJitLink is missing;
    /// * [`Error::InvalidArgument`] when there is no input, or an option or a name holds a NUL.
    pub fn link(&self) -> Result<Linked> {
        if self.inputs.is_empty() {
            return Err(Error::invalid("Linker::link", "nothing to link; add at least one input"));
        }
        let nul = |what: &str| Error::invalid("Linker::link", format!("the {what} holds a NUL byte"));
        let mut options = vec![format!("-arch={}", self.arch.real())];
        if self.inputs.iter().any(|(k, _, _)| *k == LinkInput::LtoIr) {
            options.push("-lto".into());
        }
        options.extend(self.options.iter().cloned());
        let options = options
            .into_iter()
            .map(CString::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| nul("option"))?;
        let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let count =
            u32::try_from(pointers.len()).map_err(|_| Error::invalid("Linker::link", "too many options"))?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `count` NUL-terminated options, alive across the call; one out-parameter.
        let status = unsafe { nvjitlink::nvJitLinkCreate(&mut raw, count, pointers.as_ptr()) };
        if status != nvjitlink::nvJitLinkResult::NVJITLINK_SUCCESS {
            // A refused option may still leave a handle, whose log names the option.
            let log = if raw.is_null() { String::new() } else { Handle(raw).log(true) };
            return Err(link_error("nvJitLinkCreate", status, log));
        }
        let handle = Handle(raw);
        for (kind, name, data) in &self.inputs {
            let name = CString::new(name.as_str()).map_err(|_| nul("input name"))?;
            // SAFETY: a live handle; `data` and `name` outlive the call (nvJitLink copies them).
            let status = unsafe {
                nvjitlink::nvJitLinkAddData(
                    handle.0,
                    kind.raw(),
                    data.as_ptr().cast(),
                    data.len(),
                    name.as_ptr(),
                )
            };
            handle.check("nvJitLinkAddData", status)?;
        }
        // SAFETY: a live handle.
        handle.check("nvJitLinkComplete", unsafe { nvjitlink::nvJitLinkComplete(handle.0) })?;
        let mut size = 0;
        // SAFETY: a completed link and one out-parameter.
        handle.check("nvJitLinkGetLinkedCubinSize", unsafe {
            nvjitlink::nvJitLinkGetLinkedCubinSize(handle.0, &mut size)
        })?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `cubin` holds the `size` bytes nvJitLink writes.
        handle.check("nvJitLinkGetLinkedCubin", unsafe {
            nvjitlink::nvJitLinkGetLinkedCubin(handle.0, cubin.as_mut_ptr().cast())
        })?;
        let log = handle.log(false);
        Ok(Linked { cubin, log })
    }
}

/// A linker handle, destroyed on drop.
struct Handle(nvjitlink::nvJitLinkHandle);

impl Handle {
    /// The error log (`error`) or the info log.
    fn log(&self, error: bool) -> String {
        let mut size = 0;
        // SAFETY: a live handle and one out-parameter.
        let status = unsafe {
            if error {
                nvjitlink::nvJitLinkGetErrorLogSize(self.0, &mut size)
            } else {
                nvjitlink::nvJitLinkGetInfoLogSize(self.0, &mut size)
            }
        };
        if status != nvjitlink::nvJitLinkResult::NVJITLINK_SUCCESS || size == 0 {
            return String::new();
        }
        let mut log = vec![0u8; size];
        // SAFETY: `log` holds the `size` bytes nvJitLink writes.
        let status = unsafe {
            if error {
                nvjitlink::nvJitLinkGetErrorLog(self.0, log.as_mut_ptr().cast())
            } else {
                nvjitlink::nvJitLinkGetInfoLog(self.0, log.as_mut_ptr().cast())
            }
        };
        if status != nvjitlink::nvJitLinkResult::NVJITLINK_SUCCESS {
            return String::new();
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).trim_end().to_string()
    }

    fn check(&self, call: &'static str, status: nvjitlink::nvJitLinkResult) -> Result<()> {
        if status == nvjitlink::nvJitLinkResult::NVJITLINK_SUCCESS {
            Ok(())
        } else {
            Err(link_error(call, status, self.log(true)))
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle is live and destroyed once.
        let _ = unsafe { nvjitlink::nvJitLinkDestroy(&mut self.0) };
    }
}

#[cold]
fn link_error(call: &'static str, status: nvjitlink::nvJitLinkResult, log: String) -> Error {
    if let Some(source) = nvjitlink::load_error(call).or_else(nvjitlink::library_error) {
        return Error::Load { call, source };
    }
    Error::NvJitLink { call, status, log }
}

/// A linked CUBIN and the linker's info log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linked {
    cubin: Vec<u8>,
    log: String,
}

impl Linked {
    /// The CUBIN.
    pub fn cubin(&self) -> &[u8] {
        &self.cubin
    }

    /// What nvJitLink reported while linking (empty when it said nothing).
    pub fn log(&self) -> &str {
        &self.log
    }

    /// Loads the CUBIN into `ctx` as a shared [`Module`], from which
    /// [`Module::shared_function`] takes the kernels an application keeps.
    ///
    /// Fails as [`Module::from_cubin`] does.
    pub fn load(&self, ctx: &Context) -> Result<Arc<Module>> {
        Module::from_cubin(ctx, &self.cubin).map(Arc::new)
    }
}
