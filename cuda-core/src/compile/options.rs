//! [`CompileOptions`]: how NVRTC compiles a [`Program`](super::Program), as typed values.

#![forbid(unsafe_code)]

use crate::device::Device;
use crate::error::{Error, Result};
use std::path::PathBuf;

/// What a compile produces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Output {
    /// Machine code for one real architecture (`sm_XX`): what the driver loads without
    /// compiling anything. The default.
    #[default]
    Cubin,
    /// PTX for a virtual architecture (`compute_XX`), compiled by the driver when loaded.
    Ptx,
    /// LTO-IR (`-dlto`), an input of [`Linker`](super::Linker) for link-time optimisation.
    LtoIr,
}

impl Output {
    pub(crate) fn tag(self) -> u8 {
        match self {
            Output::Cubin => 0,
            Output::Ptx => 1,
            Output::LtoIr => 2,
        }
    }

    pub(crate) fn from_tag(tag: u8) -> Option<Output> {
        [Output::Cubin, Output::Ptx, Output::LtoIr].into_iter().find(|o| o.tag() == tag)
    }
}

/// A GPU architecture by compute capability: `Arch::new(9, 0)` is `sm_90`/`compute_90`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    major: u32,
    minor: u32,
}

impl Arch {
    /// The architecture of compute capability `major.minor`.
    pub const fn new(major: u32, minor: u32) -> Arch {
        Arch { major, minor }
    }

    /// The architecture of `device` (its compute capability).
    ///
    /// Fails as [`Device::compute_capability`] does.
    pub fn of(device: &Device) -> Result<Arch> {
        let (major, minor) = device.compute_capability()?;
        let bad =
            || Error::invalid("Arch::of", format!("the device reports compute capability {major}.{minor}"));
        Ok(Arch {
            major: u32::try_from(major).map_err(|_| bad())?,
            minor: u32::try_from(minor).map_err(|_| bad())?,
        })
    }

    /// `major * 10 + minor`, as NVRTC numbers architectures (90 for 9.0); saturates rather
    /// than wrap for numbers no GPU has.
    pub fn number(self) -> u32 {
        self.major.saturating_mul(10).saturating_add(self.minor)
    }

    /// `sm_XX` (the major and minor versions written one after the other, as NVRTC names them).
    pub fn real(self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }

    /// `compute_XX`.
    pub fn virtual_arch(self) -> String {
        format!("compute_{}{}", self.major, self.minor)
    }
}

/// The C++ dialect (`--std`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CppStd {
    /// `--std=c++11`.
    Cpp11,
    /// `--std=c++14`.
    Cpp14,
    /// `--std=c++17` (NVRTC's default).
    Cpp17,
    /// `--std=c++20`.
    Cpp20,
}

impl CppStd {
    fn flag(self) -> &'static str {
        match self {
            CppStd::Cpp11 => "--std=c++11",
            CppStd::Cpp14 => "--std=c++14",
            CppStd::Cpp17 => "--std=c++17",
            CppStd::Cpp20 => "--std=c++20",
        }
    }
}

/// How to compile: the target, what to produce, and the compiler's options as typed values,
/// with [`raw`](Self::raw) for anything else NVRTC takes.
///
/// By default the output is a CUBIN for the real architecture of the device it is compiled for
/// ([`Program::compile_for`](super::Program::compile_for)). A CUBIN needs no compiling by the
/// driver; PTX does, and PTX from an NVRTC newer than the installed driver uses an ISA version
/// the driver does not know (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`), while a CUBIN from that
/// NVRTC loads wherever the architecture matches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub(crate) arch: Option<Arch>,
    pub(crate) output: Output,
    std: Option<CppStd>,
    defines: Vec<(String, Option<String>)>,
    include_paths: Vec<PathBuf>,
    relocatable: bool,
    line_info: bool,
    fast_math: bool,
    debug: bool,
    ftz: Option<bool>,
    prec_div: Option<bool>,
    prec_sqrt: Option<bool>,
    fmad: Option<bool>,
    max_registers: Option<u32>,
    raw: Vec<String>,
}

impl CompileOptions {
    /// No option set: a CUBIN for the device compiled for.
    pub fn new() -> CompileOptions {
        CompileOptions::default()
    }

    /// Compile for `arch` instead of the device's own architecture.
    pub fn arch(mut self, arch: Arch) -> CompileOptions {
        self.arch = Some(arch);
        self
    }

    /// Produce `output` (CUBIN, PTX or LTO-IR).
    pub fn output(mut self, output: Output) -> CompileOptions {
        self.output = output;
        self
    }

    /// The C++ dialect.
    pub fn std(mut self, std: CppStd) -> CompileOptions {
        self.std = Some(std);
        self
    }

    /// `-D name` (`value` given: `-D name=value`).
    pub fn define(mut self, name: impl Into<String>, value: Option<&str>) -> CompileOptions {
        self.defines.push((name.into(), value.map(str::to_string)));
        self
    }

    /// `-I dir`: a directory searched for `#include`s not given as in-memory headers.
    ///
    /// NVRTC reads the headers it finds there, and what they hold cannot be part of a cache
    /// key: a compile with an include path never uses a [`CompileCache`](super::CompileCache),
    /// so an edited header is always compiled afresh (see
    /// [`Program::compile_with_cache`](super::Program::compile_with_cache)). Headers given with
    /// [`Program::header`](super::Program::header) are cached.
    pub fn include_path(mut self, dir: impl Into<PathBuf>) -> CompileOptions {
        self.include_paths.push(dir.into());
        self
    }

    /// `-rdc=true`: relocatable device code, for linking with other translation units.
    pub fn relocatable(mut self, on: bool) -> CompileOptions {
        self.relocatable = on;
        self
    }

    /// `-lineinfo`: source line information for profilers and the sanitizer.
    pub fn line_info(mut self, on: bool) -> CompileOptions {
        self.line_info = on;
        self
    }

    /// `--use_fast_math`.
    pub fn fast_math(mut self, on: bool) -> CompileOptions {
        self.fast_math = on;
        self
    }

    /// `-G`: device debug information (and no optimisation).
    pub fn debug(mut self, on: bool) -> CompileOptions {
        self.debug = on;
        self
    }

    /// `--ftz=true|false`: flush single-precision denormals to zero (`true`) or keep them
    /// (`false`, NVRTC's default). Unset, NVRTC's default applies (and
    /// [`fast_math`](Self::fast_math) turns it on).
    pub fn ftz(mut self, on: bool) -> CompileOptions {
        self.ftz = Some(on);
        self
    }

    /// `--prec-div=true|false`: IEEE round-to-nearest single-precision division (`true`,
    /// NVRTC's default) or a faster approximation (`false`).
    pub fn prec_div(mut self, on: bool) -> CompileOptions {
        self.prec_div = Some(on);
        self
    }

    /// `--prec-sqrt=true|false`: IEEE round-to-nearest single-precision square root (`true`,
    /// NVRTC's default) or a faster approximation (`false`).
    pub fn prec_sqrt(mut self, on: bool) -> CompileOptions {
        self.prec_sqrt = Some(on);
        self
    }

    /// `--fmad=true|false`: contract multiplies and adds into fused multiply-adds (`true`,
    /// NVRTC's default) or not (`false`, for results that match a CPU's rounding step by step).
    pub fn fmad(mut self, on: bool) -> CompileOptions {
        self.fmad = Some(on);
        self
    }

    /// `--maxrregcount=N`: at most `registers` registers per thread (cudarc's `maxrregcount`);
    /// the rest spills to local memory. The driver's JIT has the same limit for PTX it
    /// compiles: [`JitOptions::max_registers`](crate::module::JitOptions::max_registers).
    pub fn max_registers(mut self, registers: u32) -> CompileOptions {
        self.max_registers = Some(registers);
        self
    }

    /// Any other NVRTC option, passed as written (`"--extra-device-vectorization"`).
    ///
    /// An option that names a file or directory NVRTC reads (`-I`, `--include-path`,
    /// `-include`, `--pre-include`, and the precompiled-header options `-pch`, `--create-pch`,
    /// `--use-pch`, `--pch-dir`, in either spelling) keeps the compile out of the cache, as
    /// [`include_path`](Self::include_path) does.
    pub fn raw(mut self, option: impl Into<String>) -> CompileOptions {
        self.raw.push(option.into());
        self
    }

    /// The output asked for.
    pub fn output_kind(&self) -> Output {
        self.output
    }

    /// Whether NVRTC reads files for these options, whose contents a cache key cannot cover:
    /// an include path, or a raw option naming a file or directory.
    pub(crate) fn reads_files(&self) -> bool {
        /// The options (long and short spellings, as prefixes of `--opt=value` and `-Ivalue`)
        /// that name include directories, pre-included headers or precompiled headers.
        const NAMING_FILES: &[&str] = &[
            "-I",
            "--include-path",
            "-include",
            "--pre-include",
            "-pch",
            "--pch",
            "-create-pch",
            "--create-pch",
            "-use-pch",
            "--use-pch",
        ];
        !self.include_paths.is_empty()
            || self.raw.iter().any(|o| NAMING_FILES.iter().any(|name| o.starts_with(name)))
    }

    /// The command line NVRTC gets for `arch`, in a fixed order (it is part of the cache key).
    pub(crate) fn to_args(&self, arch: Arch) -> Vec<String> {
        let mut args = Vec::new();
        let target = match self.output {
            Output::Ptx => arch.virtual_arch(),
            Output::Cubin | Output::LtoIr => arch.real(),
        };
        args.push(format!("--gpu-architecture={target}"));
        if self.output == Output::LtoIr {
            args.push("-dlto".into());
        }
        if let Some(std) = self.std {
            args.push(std.flag().into());
        }
        for (name, value) in &self.defines {
            args.push(match value {
                Some(v) => format!("-D{name}={v}"),
                None => format!("-D{name}"),
            });
        }
        for dir in &self.include_paths {
            args.push(format!("-I{}", dir.display()));
        }
        if self.relocatable {
            args.push("-rdc=true".into());
        }
        if self.line_info {
            args.push("-lineinfo".into());
        }
        if self.fast_math {
            args.push("--use_fast_math".into());
        }
        if self.debug {
            args.push("-G".into());
        }
        let switches = [("--ftz", self.ftz), ("--prec-div", self.prec_div), ("--prec-sqrt", self.prec_sqrt)];
        for (name, value) in switches.into_iter().chain([("--fmad", self.fmad)]) {
            if let Some(on) = value {
                args.push(format!("{name}={on}"));
            }
        }
        if let Some(registers) = self.max_registers {
            args.push(format!("--maxrregcount={registers}"));
        }
        args.extend(self.raw.iter().cloned());
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_render_as_nvrtc_flags_in_a_fixed_order() {
        let o = CompileOptions::new()
            .std(CppStd::Cpp17)
            .define("N", Some("4"))
            .define("FAST", None)
            .include_path("/inc")
            .relocatable(true)
            .line_info(true)
            .fast_math(true)
            .raw("-maxrregcount=32");
        assert_eq!(
            o.to_args(Arch::new(9, 0)),
            [
                "--gpu-architecture=sm_90",
                "--std=c++17",
                "-DN=4",
                "-DFAST",
                "-I/inc",
                "-rdc=true",
                "-lineinfo",
                "--use_fast_math",
                "-maxrregcount=32"
            ]
        );
        let ptx = CompileOptions::new().output(Output::Ptx).to_args(Arch::new(8, 6));
        assert_eq!(ptx, ["--gpu-architecture=compute_86"]);
        let lto = CompileOptions::new().output(Output::LtoIr).debug(true).to_args(Arch::new(9, 0));
        assert_eq!(lto, ["--gpu-architecture=sm_90", "-dlto", "-G"]);
    }

    /// H5: include paths and raw options that name files make NVRTC read what no key covers.
    #[test]
    fn options_that_name_files_are_recognised() {
        assert!(!CompileOptions::new().define("N", Some("1")).raw("-maxrregcount=32").reads_files());
        assert!(!CompileOptions::new().raw("--std=c++17").raw("-default-device").reads_files());
        assert!(CompileOptions::new().include_path("inc").reads_files());
        let naming = [
            "-Iinc",
            "-I",
            "--include-path=inc",
            "-include=k.h",
            "-include",
            "--pre-include=k.h",
            "-pch",
            "--pch",
            "--pch-dir=/tmp/pch",
            "--create-pch=k.pch",
            "-use-pch=k.pch",
        ];
        for option in naming {
            assert!(CompileOptions::new().raw(option).reads_files(), "{option}");
        }
    }

    #[test]
    fn floating_point_switches_and_the_register_limit_render_after_the_others() {
        let o = CompileOptions::new()
            .fast_math(true)
            .ftz(false)
            .prec_div(false)
            .prec_sqrt(true)
            .fmad(false)
            .max_registers(32)
            .raw("--extra-device-vectorization");
        assert_eq!(
            o.to_args(Arch::new(8, 0)),
            [
                "--gpu-architecture=sm_80",
                "--use_fast_math",
                "--ftz=false",
                "--prec-div=false",
                "--prec-sqrt=true",
                "--fmad=false",
                "--maxrregcount=32",
                "--extra-device-vectorization"
            ]
        );
        // Unset switches pass nothing: NVRTC's defaults apply.
        assert_eq!(
            CompileOptions::new().fmad(true).to_args(Arch::new(8, 0)),
            ["--gpu-architecture=sm_80", "--fmad=true"]
        );
    }

    /// Each typed option changes the options' value, and so the command line a cache key is
    /// made of: no two of these compile to the same key.
    #[test]
    fn typed_options_are_part_of_what_a_key_covers() {
        let all = [
            CompileOptions::new(),
            CompileOptions::new().ftz(true),
            CompileOptions::new().ftz(false),
            CompileOptions::new().prec_div(false),
            CompileOptions::new().prec_sqrt(false),
            CompileOptions::new().fmad(false),
            CompileOptions::new().max_registers(32),
            CompileOptions::new().max_registers(64),
        ];
        let lines: Vec<Vec<String>> = all.iter().map(|o| o.to_args(Arch::new(9, 0))).collect();
        for (i, a) in lines.iter().enumerate() {
            for b in &lines[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn outputs_round_trip_through_their_tags() {
        for o in [Output::Cubin, Output::Ptx, Output::LtoIr] {
            assert_eq!(Output::from_tag(o.tag()), Some(o));
        }
        assert_eq!(Output::from_tag(9), None);
    }
}
