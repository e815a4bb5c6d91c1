//! Kernels from source: CUDA C++ compiled at run time by NVRTC ([`Program`]), linked by
//! nvJitLink ([`Linker`]), and kept in a compile cache ([`CompileCache`]), in memory and on
//! disk.
//!
//! Built with the `compile` feature, which is on by default.
//!
//! The one-call path, as CuPy's `RawKernel` gives it: [`kernel`] compiles a source for a
//! context's device (a CUBIN for its real architecture), loads it and returns the kernel as an
//! owning handle. The second call in the same primary context returns the kernel already
//! loaded, in a lookup; in another context, or in a later process, it is answered from the
//! compile cache without running NVRTC.
//!
//! ```no_run
//! # fn main() -> cuhost::Result<()> {
//! use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags, compile};
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! let add_one = compile::kernel(
//!     &ctx,
//!     r#"extern "C" __global__ void add_one(float *x, unsigned n) {
//!         unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//!         if (i < n) x[i] += 1.0f;
//!     }"#,
//!     "add_one",
//! )?;
//! let mut x = DeviceBuffer::from_slice(&stream, &[1.0f32; 256])?;
//! let config = LaunchConfig::for_elements(256usize, 128);
//! // SAFETY: the kernel takes (float *, unsigned) and touches `n` elements of `x`.
//! unsafe { add_one.function().launch(&stream, &config, (&mut x, &256u32))? };
//! # Ok(()) }
//! ```
//!
//! Libraries: NVRTC (`libnvrtc.so.13` or `.12`) and nvJitLink (`libnvJitLink.so.13` or
//! `.12`) are loaded on first use, from the CUDA toolkit or NVIDIA's pip wheels
//! (`NVRTC_LIBRARY_PATH`, `NVJITLINK_LIBRARY_PATH` name a file); a missing one is an
//! [`Error::Load`](crate::error::Error::Load) that says what was tried and what to install.

mod cache;
mod cache_dir;
mod checksum;
mod link;
mod loaded;
mod options;
mod program;
mod sha256;
#[cfg(target_arch = "x86_64")]
mod sha256_ni;

pub use cache::{CacheHit, CacheKey, CacheStats, CompileCache};
pub use link::{LinkInput, Linked, Linker};
pub use options::{Arch, CompileOptions, CppStd, Output};
pub use program::{Compiled, Program, nvrtc_compilations};

use crate::context::Context;
use crate::error::Result;
use crate::module::SharedFunction;
use loaded::LoadedKernels;
use std::sync::LazyLock;

/// Compiles `source` for `ctx`'s device with default [`CompileOptions`] (through
/// [`CompileCache::global`]), loads it into `ctx` and returns its kernel `name` (an
/// `extern "C"` name, or a name expression the source instantiates, such as
/// `"scale<float>"`).
///
/// In a primary context the kernel is loaded once: the next call with the same context,
/// source and name returns it again, with no compile, no cache lookup and no module load (see
/// [`kernel_with`], which says for how long).
///
/// Fails as [`kernel_with`] does.
#[inline]
pub fn kernel(ctx: &Context, source: &str, name: &str) -> Result<SharedFunction> {
    kernel_with(ctx, source, name, &CompileOptions::new())
}

/// [`kernel`] with `options`: compiles `source` with them for `ctx`'s device (the
/// architecture `options` names wins), through [`CompileCache::global`], loads it into `ctx`
/// and returns its kernel `name`.
///
/// **What stays loaded.** In a [primary](Context::is_primary) context, the kernel is kept by
/// a process-wide table under (context, source, name, options), and a later call with the same
/// four returns it again: a lookup, no compile, no SHA-256 of the source and no module load.
/// An entry keeps its module loaded and its primary context retained until
/// [`forget_loaded_kernels`], as the CUDA runtime keeps a device's primary context, and CuPy
/// its kernels, for the life of the process; the table grows by one entry (a copy of the
/// source, the name and the options, and the module) per kernel loaded. Other contexts
/// (created, green, borrowed) are not served, since an entry would keep them alive: there each
/// call loads a module again (the compile cache still spares the compile), and the kernel to
/// keep is the [`SharedFunction`] returned. Options under which NVRTC reads files (an include
/// path) bypass the table, as they bypass the compile cache.
///
/// # Errors
///
/// As [`Program::compile_for`], [`Compiled::load`] and
/// [`Module::shared_function`](crate::module::Module::shared_function); a deferred error of
/// `ctx` (see [`Context::take_deferred_errors`]) is returned first.
#[inline]
pub fn kernel_with(
    ctx: &Context,
    source: &str,
    name: &str,
    options: &CompileOptions,
) -> Result<SharedFunction> {
    ctx.take_deferred()?;
    let context = loaded_context(ctx, options);
    if let Some(context) = context {
        if let Some(kernel) = LOADED.get(context, source, name, options) {
            return Ok(kernel);
        }
    }
    load_kernel(ctx, source, name, options, context)
}

/// The identity under which the table files kernels of `ctx` compiled with `options`, `None`
/// for a compile the table does not serve: the raw handle of a primary context, which names
/// the same context for as long as an entry (which keeps it retained) can be found under it.
#[inline]
fn loaded_context(ctx: &Context, options: &CompileOptions) -> Option<usize> {
    (ctx.is_primary() && !options.reads_files()).then(|| ctx.as_raw() as usize)
}

/// The miss of [`kernel_with`]: compiles (or finds the compile in the cache), loads, and files
/// the kernel under `context`.
#[cold]
fn load_kernel(
    ctx: &Context,
    source: &str,
    name: &str,
    options: &CompileOptions,
    context: Option<usize>,
) -> Result<SharedFunction> {
    let mut program = Program::new(source);
    if name.contains('<') || name.contains(':') {
        program = program.name_expression(name);
    }
    let compiled = program.compile_for(ctx.device(), options)?;
    let module = compiled.load(ctx)?;
    let kernel = compiled.shared_function(&module, name)?;
    Ok(match context {
        Some(context) => LOADED.insert(context, source, name, options, kernel),
        None => kernel,
    })
}

/// The kernels [`kernel`] and [`kernel_with`] loaded in primary contexts.
static LOADED: LazyLock<LoadedKernels<SharedFunction>> = LazyLock::new(LoadedKernels::new);

/// Drops the kernels [`kernel`] and [`kernel_with`] keep loaded in primary contexts, and
/// returns how many there were. Each one's module is unloaded when no [`SharedFunction`] the
/// application holds keeps it, and a primary context that nothing else holds is released. The
/// next call for one of them loads it again (from the compile cache, without compiling).
///
/// Call it before [`Context::reset_primary`], whose contract covers these modules too.
pub fn forget_loaded_kernels() -> usize {
    LOADED.forget()
}

/// One diagnostic of a compiler log: `file(line): error: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as the program or header is named.
    pub file: String,
    /// The line, from 1.
    pub line: u32,
    /// `error`, `warning` or the compiler's other word for it.
    pub severity: String,
    /// What the compiler says.
    pub message: String,
}

/// The diagnostics of an NVRTC log (from [`Error::Nvrtc`](crate::error::Error::Nvrtc) or
/// [`Compiled::log`]), one per line of the form `file(line): severity: message`; other lines
/// (the source excerpts NVRTC prints) are left out.
pub fn diagnostics(log: &str) -> Vec<Diagnostic> {
    log.lines()
        .filter_map(|line| {
            let (file, rest) = line.split_once('(')?;
            let (number, rest) = rest.split_once("):")?;
            let line = number.trim().parse().ok()?;
            let (severity, message) = rest.trim_start().split_once(':')?;
            let severity = severity.trim();
            let known = ["error", "warning", "remark", "note", "catastrophic"];
            if !known.iter().any(|k| severity.starts_with(k)) {
                return None;
            }
            Some(Diagnostic {
                file: file.trim().to_string(),
                line,
                severity: severity.to_string(),
                message: message.trim().to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only primary contexts are served by the table of loaded kernels: an entry keeps its
    /// context alive, which would keep a created or borrowed one past its owner's drop.
    #[test]
    fn only_primary_contexts_are_served_and_never_with_files_read() {
        let borrowed = Context::detached_for_tests();
        assert!(!borrowed.is_primary());
        assert_eq!(loaded_context(&borrowed, &CompileOptions::new()), None);
        let reads = CompileOptions::new().include_path("/usr/include");
        assert!(reads.reads_files());
        assert_eq!(loaded_context(&borrowed, &reads), None);
    }

    #[test]
    fn diagnostics_are_read_from_nvrtc_logs() {
        let log = "kernel.cu(3): error: identifier \"undefined_thing\" is undefined\n\
                   \x20   x[i] = undefined_thing;\n\
                   \x20          ^\n\n\
                   kernel.cu(7): warning #177-D: variable \"unused\" was declared but never referenced\n\
                   1 error detected in the compilation of \"kernel.cu\".";
        let d = diagnostics(log);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            d[0],
            Diagnostic {
                file: "kernel.cu".into(),
                line: 3,
                severity: "error".into(),
                message: "identifier \"undefined_thing\" is undefined".into()
            }
        );
        assert_eq!((d[1].line, d[1].severity.as_str()), (7, "warning #177-D"));
    }
}
