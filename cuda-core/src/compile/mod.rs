//! Kernels from source: CUDA C++ compiled at run time by NVRTC ([`Program`]), linked by
//! nvJitLink ([`Linker`]), and kept in a compile cache ([`CompileCache`]), in memory and on
//! disk.
//!
//! Built with the `compile` feature, which is on by default.
//!
//! The one-call path, as CuPy's `RawKernel` gives it: [`kernel`] compiles a source for a
//! context's device (a CUBIN for its real architecture), loads it and returns the kernel as an
//! owning handle; the second call with the same source, in this process or a later one, is
//! answered from the cache without running NVRTC.
//!
//! ```no_run
//! # fn main() -> cuda_core::Result<()> {
//! use cuda_core::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags, compile};
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
mod checksum;
mod link;
mod options;
mod program;
mod sha256;

pub use cache::{CacheHit, CacheKey, CacheStats, CompileCache};
pub use link::{LinkInput, Linked, Linker};
pub use options::{Arch, CompileOptions, CppStd, Output};
pub use program::{Compiled, Program, nvrtc_compilations};

use crate::context::Context;
use crate::error::Result;
use crate::module::SharedFunction;

/// Compiles `source` for `ctx`'s device with default [`CompileOptions`] (through
/// [`CompileCache::global`]), loads it into `ctx` and returns its kernel `name` (an
/// `extern "C"` name, or a name expression the source instantiates, such as
/// `"scale<float>"`).
///
/// Fails as [`Program::compile_for`], [`Compiled::load`] and
/// [`Module::shared_function`](crate::module::Module::shared_function) do.
pub fn kernel(ctx: &Context, source: &str, name: &str) -> Result<SharedFunction> {
    let mut program = Program::new(source);
    if name.contains('<') || name.contains(':') {
        program = program.name_expression(name);
    }
    let compiled = program.compile_for(ctx.device(), &CompileOptions::new())?;
    let module = compiled.load(ctx)?;
    compiled.shared_function(&module, name)
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
