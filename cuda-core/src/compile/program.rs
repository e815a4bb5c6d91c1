//! [`Program`]: CUDA C++ source with its in-memory headers and name expressions, compiled by
//! NVRTC into a [`Compiled`].

use super::cache::{CacheHit, CacheKey, CompileCache, KeyHasher};
use super::options::{Arch, CompileOptions, Output};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::module::{Module, ParamCounts, SharedFunction, field_at, put_field};
use cuhost_nvrtc_sys as nvrtc;
use std::ffi::{CStr, CString, c_char};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// How many times this process has run `nvrtcCompileProgram`: a cache hit does not.
static COMPILATIONS: AtomicU64 = AtomicU64::new(0);

/// The number of NVRTC compilations this process has run so far; a compile answered from a
/// [`CompileCache`] runs none.
pub fn nvrtc_compilations() -> u64 {
    COMPILATIONS.load(Ordering::Relaxed)
}

/// A list's length as a key part.
fn count(n: usize) -> [u8; 8] {
    (n as u64).to_le_bytes()
}

/// CUDA C++ source to compile with NVRTC: the source, headers held in memory, and the name
/// expressions (`"scale<float>"`) whose lowered (mangled) names the result should report.
///
/// ```no_run
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::compile::{CompileOptions, Program};
/// use cuhost::{Context, Device};
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let program = Program::new(r#"#include "scale.h"
/// template <typename T> __global__ void scale(T *x, T a, unsigned n) {
///     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
///     if (i < n) x[i] = mul(x[i], a);
/// }"#)
/// .header("scale.h", "template <typename T> __device__ T mul(T x, T a) { return x * a; }")
/// .name_expression("scale<float>");
/// let compiled = program.compile_for(ctx.device(), &CompileOptions::new())?;
/// let module = compiled.load(&ctx)?;
/// let scale = compiled.shared_function(&module, "scale<float>")?;
/// # let _ = scale; Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Program {
    source: String,
    name: String,
    headers: Vec<(String, String)>,
    name_expressions: Vec<String>,
    key_memo: KeyMemo,
}

/// What a program keeps of its cache keys: its own parts (source, name, headers, name
/// expressions) hashed on its first look at a cache, so that a look with other options hashes
/// only the compiler's version and the options; and the last key with what it was made from,
/// so that a look with the same options, architecture and compiler hashes nothing. Made again
/// by each builder method. It follows from the fields, so programs compare and hash by their
/// fields alone.
#[derive(Default)]
struct KeyMemo {
    own_parts: OnceLock<KeyHasher>,
    last: Mutex<Option<LastKey>>,
}

/// A key and the options, architecture and NVRTC version it was made with.
#[derive(Clone)]
struct LastKey {
    options: CompileOptions,
    arch: Arch,
    nvrtc: i32,
    key: CacheKey,
}

impl Clone for KeyMemo {
    fn clone(&self) -> KeyMemo {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner).clone();
        KeyMemo { own_parts: self.own_parts.clone(), last: Mutex::new(last) }
    }
}

impl PartialEq for KeyMemo {
    fn eq(&self, _: &KeyMemo) -> bool {
        true
    }
}

impl Eq for KeyMemo {}

impl std::hash::Hash for KeyMemo {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl std::fmt::Debug for Program {
    /// The program's fields, without the kept hash (which follows from them).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("source", &self.source)
            .field("name", &self.name)
            .field("headers", &self.headers)
            .field("name_expressions", &self.name_expressions)
            .finish()
    }
}

impl Program {
    /// A program of `source`, named `kernel.cu` in the compiler's messages.
    pub fn new(source: impl Into<String>) -> Program {
        Program {
            source: source.into(),
            name: "kernel.cu".into(),
            headers: Vec::new(),
            name_expressions: Vec::new(),
            key_memo: KeyMemo::default(),
        }
    }

    /// The file name the compiler's messages give the source.
    pub fn named(mut self, name: impl Into<String>) -> Program {
        self.name = name.into();
        self.key_memo = KeyMemo::default();
        self
    }

    /// A header `#include "name"` finds, held in memory.
    pub fn header(mut self, name: impl Into<String>, contents: impl Into<String>) -> Program {
        self.headers.push((name.into(), contents.into()));
        self.key_memo = KeyMemo::default();
        self
    }

    /// A name expression (`"scale<float>"`, `"&counter"`): NVRTC instantiates it and the
    /// result reports its lowered name ([`Compiled::lowered_name`]).
    pub fn name_expression(mut self, expression: impl Into<String>) -> Program {
        self.name_expressions.push(expression.into());
        self.key_memo = KeyMemo::default();
        self
    }

    /// Compiles for `device`'s architecture (or the one `options` names), through the
    /// process-wide cache ([`CompileCache::global`]).
    ///
    /// Fails as [`compile_with_cache`](Self::compile_with_cache) does.
    pub fn compile_for(&self, device: crate::device::Device, options: &CompileOptions) -> Result<Compiled> {
        let arch = match options.arch {
            Some(a) => a,
            None => Arch::of(&device)?,
        };
        self.compile_with_cache(arch, options, CompileCache::global())
    }

    /// Compiles for `arch` (the architecture `options` names wins), answering from `cache`
    /// when it holds the same compile: same source, headers, name expressions, options,
    /// architecture and NVRTC version (major and minor: a patch release of the same minor
    /// release finds the entries of another; clear the directory after installing one to
    /// compile afresh).
    ///
    /// The cache is not used at all, in memory or on disk, when NVRTC reads files for the
    /// compile: with an [`include_path`](CompileOptions::include_path), or a
    /// [`raw`](CompileOptions::raw) option that names a file or directory (`-I`,
    /// `--include-path`, `-include`, `--pre-include`, the precompiled-header options). What
    /// those files hold is not in the key, so an edited header would bring back the old kernel;
    /// such a compile runs NVRTC every time and counts in
    /// [`CacheStats::uncached`](super::CacheStats::uncached). Headers given with
    /// [`header`](Self::header) are in the key and cache as usual.
    ///
    /// NVRTC also looks for a quoted `#include` that no in-memory header answers in the
    /// directory of the program's [name](Self::named) (the current directory for a bare name
    /// such as the default `kernel.cu`). Such a file is not in the key either: give it as a
    /// [`header`](Self::header), or name its directory with `include_path`.
    ///
    /// # Errors
    ///
    /// * [`Error::Nvrtc`] with the compiler's whole log when the source does not compile
    ///   ([`diagnostics`](super::diagnostics) splits it into file, line and message);
    /// * [`Error::Load`] naming the files tried and what to install when NVRTC is missing;
    /// * [`Error::InvalidArgument`] for a source, name, header or option with a NUL byte.
    pub fn compile_with_cache(
        &self,
        arch: Arch,
        options: &CompileOptions,
        cache: &CompileCache,
    ) -> Result<Compiled> {
        let arch = options.arch.unwrap_or(arch);
        // Formatted only for a compile: a hit needs the key, which the program keeps.
        let args = || options.to_args(arch);
        if options.reads_files() {
            cache.count_uncached();
            return self.run_nvrtc(&args(), options.output);
        }
        let key = self.key_for(options, arch, nvrtc_version()?);
        let (bytes, hit) =
            cache.get_or_insert_with(&key, || Ok(self.run_nvrtc(&args(), options.output)?.to_bytes()))?;
        if let Some(mut compiled) = Compiled::from_bytes(&bytes) {
            compiled.cache_hit = hit;
            return Ok(compiled);
        }
        // An entry of another shape under this key (written by hand, or by a build that laid
        // entries out differently): compile again and store the result over it.
        let compiled = self.run_nvrtc(&args(), options.output)?;
        cache.put(&key, &compiled.to_bytes());
        Ok(compiled)
    }

    /// Compiles for `arch` without any cache.
    ///
    /// Fails as [`compile_with_cache`](Self::compile_with_cache) does.
    pub fn compile(&self, arch: Arch, options: &CompileOptions) -> Result<Compiled> {
        self.run_nvrtc(&options.to_args(options.arch.unwrap_or(arch)), options.output)
    }

    /// The key of this program compiled with `options` for `arch` by NVRTC version `nvrtc`: the
    /// last key again if it was made from the same three ([`KeyMemo`]), else
    /// [`cache_key`](Self::cache_key) of the options' arguments, kept as the last.
    fn key_for(&self, options: &CompileOptions, arch: Arch, nvrtc: i32) -> CacheKey {
        let same = |last: &LastKey| last.arch == arch && last.nvrtc == nvrtc && last.options == *options;
        let last = || self.key_memo.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = last().as_ref().filter(|last| same(last)) {
            return last.key;
        }
        let key = self.cache_key(&options.to_args(arch), options.output, nvrtc);
        *last() = Some(LastKey { options: options.clone(), arch, nvrtc, key });
        key
    }

    /// The key of this program compiled with `args` into `output` by NVRTC version `nvrtc`:
    /// the program's own parts (hashed once, [`KeyMemo`]), then the compiler and the options.
    ///
    /// `nvrtcVersion` reports the major and minor release only, so that is what the key holds
    /// of the compiler. Each list (headers, name expressions, arguments) is preceded by its
    /// length, so no element can pass for one of another list.
    fn cache_key(&self, args: &[String], output: Output, nvrtc: i32) -> CacheKey {
        let mut key = self.key_memo.own_parts.get_or_init(|| self.hash_own_parts()).clone();
        key.part(&nvrtc.to_le_bytes());
        key.part(&[output.tag()]);
        key.part(&count(args.len()));
        args.iter().for_each(|a| key.part(a.as_bytes()));
        key.finish()
    }

    /// The key's first parts: a tag of the key's layout, then the program's own parts.
    fn hash_own_parts(&self) -> KeyHasher {
        let mut key = KeyHasher::new();
        key.part(b"cuda-core compile 5");
        key.part(self.source.as_bytes());
        key.part(self.name.as_bytes());
        key.part(&count(self.headers.len()));
        for (name, text) in &self.headers {
            key.part(name.as_bytes());
            key.part(text.as_bytes());
        }
        key.part(&count(self.name_expressions.len()));
        self.name_expressions.iter().for_each(|e| key.part(e.as_bytes()));
        key
    }

    fn run_nvrtc(&self, args: &[String], output: Output) -> Result<Compiled> {
        let c = |what: &str, text: &str| {
            CString::new(text)
                .map_err(|_| Error::invalid("Program::compile", format!("the {what} holds a NUL byte")))
        };
        let source = c("source", &self.source)?;
        let name = c("program name", &self.name)?;
        let header_texts = self.headers.iter().map(|(_, t)| c("header", t)).collect::<Result<Vec<_>>>()?;
        let header_names =
            self.headers.iter().map(|(n, _)| c("header name", n)).collect::<Result<Vec<_>>>()?;
        let expressions =
            self.name_expressions.iter().map(|e| c("name expression", e)).collect::<Result<Vec<_>>>()?;
        let options = args.iter().map(|a| c("option", a)).collect::<Result<Vec<_>>>()?;
        let texts: Vec<*const c_char> = header_texts.iter().map(|t| t.as_ptr()).collect();
        let names: Vec<*const c_char> = header_names.iter().map(|t| t.as_ptr()).collect();
        let count =
            i32::try_from(texts.len()).map_err(|_| Error::invalid("Program::compile", "too many headers"))?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings and arrays of `count` of them, alive across the call.
        check("nvrtcCreateProgram", unsafe {
            nvrtc::nvrtcCreateProgram(
                &mut raw,
                source.as_ptr(),
                name.as_ptr(),
                count,
                texts.as_ptr(),
                names.as_ptr(),
            )
        })?;
        let program = Guard(raw);
        for e in &expressions {
            // SAFETY: a live program and a NUL-terminated expression.
            check("nvrtcAddNameExpression", unsafe { nvrtc::nvrtcAddNameExpression(program.0, e.as_ptr()) })?;
        }
        let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let n = i32::try_from(pointers.len())
            .map_err(|_| Error::invalid("Program::compile", "too many options"))?;
        COMPILATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: a live program and `n` NUL-terminated options.
        let status = unsafe { nvrtc::nvrtcCompileProgram(program.0, n, pointers.as_ptr()) };
        let log = program.log()?;
        if status != nvrtc::nvrtcResult::NVRTC_SUCCESS {
            return Err(nvrtc_error("nvrtcCompileProgram", status, log));
        }
        let code = program.output(output)?;
        // With a CUBIN, NVRTC keeps the PTX it compiled: its `.entry` declarations give each
        // kernel's parameter count, which drivers before 13.2 cannot report without an error.
        let params = match output {
            Output::Cubin => program.output(Output::Ptx).ok().map_or_else(ParamCounts::default, |ptx| {
                crate::module::ptx_params::entry_param_counts(&String::from_utf8_lossy(&ptx))
            }),
            Output::Ptx | Output::LtoIr => ParamCounts::default(),
        };
        let mut lowered = Vec::new();
        for (text, e) in self.name_expressions.iter().zip(&expressions) {
            let mut name: *const c_char = std::ptr::null();
            // SAFETY: a compiled program, an expression added before compiling, one out-parameter.
            check("nvrtcGetLoweredName", unsafe {
                nvrtc::nvrtcGetLoweredName(program.0, e.as_ptr(), &mut name)
            })?;
            if name.is_null() {
                return Err(Error::invalid(
                    "Program::compile",
                    format!("NVRTC gave no lowered name for `{text}`"),
                ));
            }
            // SAFETY: NVRTC keeps the name until the program is destroyed (below, after this).
            let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
            lowered.push((text.clone(), name));
        }
        Ok(Compiled { output, code: Code::whole(code.into()), log, lowered, params, cache_hit: None })
    }
}

/// A program NVRTC created, destroyed on drop.
struct Guard(nvrtc::nvrtcProgram);

impl Guard {
    /// The program's log (warnings, or the errors of a failed compile).
    fn log(&self) -> Result<String> {
        let mut size = 0;
        // SAFETY: a live program and one out-parameter.
        check("nvrtcGetProgramLogSize", unsafe { nvrtc::nvrtcGetProgramLogSize(self.0, &mut size) })?;
        let mut log = vec![0u8; size.max(1)];
        // SAFETY: `log` holds the `size` bytes NVRTC writes.
        check("nvrtcGetProgramLog", unsafe { nvrtc::nvrtcGetProgramLog(self.0, log.as_mut_ptr().cast()) })?;
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        Ok(String::from_utf8_lossy(&log[..end]).trim_end().to_string())
    }

    /// The compiled code of the kind asked for.
    fn output(&self, output: Output) -> Result<Vec<u8>> {
        type Size = unsafe fn(nvrtc::nvrtcProgram, *mut usize) -> nvrtc::nvrtcResult;
        type Get = unsafe fn(nvrtc::nvrtcProgram, *mut c_char) -> nvrtc::nvrtcResult;
        let (size_call, get_call, size_fn, get_fn): (&'static str, &'static str, Size, Get) = match output {
            Output::Cubin => {
                ("nvrtcGetCUBINSize", "nvrtcGetCUBIN", nvrtc::nvrtcGetCUBINSize, nvrtc::nvrtcGetCUBIN)
            }
            Output::Ptx => ("nvrtcGetPTXSize", "nvrtcGetPTX", nvrtc::nvrtcGetPTXSize, nvrtc::nvrtcGetPTX),
            Output::LtoIr => {
                ("nvrtcGetLTOIRSize", "nvrtcGetLTOIR", nvrtc::nvrtcGetLTOIRSize, nvrtc::nvrtcGetLTOIR)
            }
        };
        let mut size = 0;
        // SAFETY: a compiled program and one out-parameter.
        check(size_call, unsafe { size_fn(self.0, &mut size) })?;
        if size == 0 {
            return Err(Error::invalid(
                "Program::compile",
                format!(
                    "NVRTC produced no {output:?} (a raw option that changes the target, such as a virtual architecture or -dlto, conflicts with the output asked for)"
                ),
            ));
        }
        let mut code = vec![0u8; size];
        // SAFETY: `code` holds the `size` bytes NVRTC writes.
        check(get_call, unsafe { get_fn(self.0, code.as_mut_ptr().cast()) })?;
        if output == Output::Ptx {
            // The PTX ends in a NUL, which is not part of the text.
            while code.last() == Some(&0) {
                code.pop();
            }
        }
        Ok(code)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: the program is live and destroyed once; a failure leaves nothing to undo.
        let _ = unsafe { nvrtc::nvrtcDestroyProgram(&mut self.0) };
    }
}

/// What a compile produced: the code, the compiler's log (warnings) and the lowered names of
/// the name expressions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiled {
    output: Output,
    code: Code,
    log: String,
    lowered: Vec<(String, String)>,
    /// The parameter count of each kernel of a CUBIN, from the PTX NVRTC compiled it from.
    params: ParamCounts,
    cache_hit: Option<CacheHit>,
}

impl Compiled {
    /// The kind of code.
    pub fn output(&self) -> Output {
        self.output
    }

    /// The code: a CUBIN, PTX text (no trailing NUL) or LTO-IR.
    pub fn code(&self) -> &[u8] {
        self.code.as_bytes()
    }

    /// The compiler's log of a successful compile: its warnings, empty when there were none.
    pub fn log(&self) -> &str {
        &self.log
    }

    /// The lowered (mangled) name NVRTC gave a name expression, as the module names it.
    pub fn lowered_name(&self, expression: &str) -> Option<&str> {
        self.lowered.iter().find(|(e, _)| e == expression).map(|(_, l)| l.as_str())
    }

    /// Where the result came from: `None` when NVRTC compiled it now, else the cache level
    /// that held it.
    pub fn cache_hit(&self) -> Option<CacheHit> {
        self.cache_hit
    }

    /// Loads the code into `ctx` as a shared [`Module`], from which
    /// [`shared_function`](Self::shared_function) takes the kernels an application keeps.
    ///
    /// LTO-IR cannot be loaded (link it with [`Linker`](super::Linker) first): an
    /// [`Error::InvalidArgument`]. Otherwise it fails as [`Module::from_cubin`] or
    /// [`Module::from_ptx`] does.
    pub fn load(&self, ctx: &Context) -> Result<Arc<Module>> {
        self.load_module(ctx).map(Arc::new)
    }

    fn load_module(&self, ctx: &Context) -> Result<Module> {
        match self.output {
            Output::Cubin => Ok(Module::from_cubin(ctx, self.code())?.with_param_counts(self.params.clone())),
            Output::Ptx => {
                let text = std::str::from_utf8(self.code())
                    .map_err(|_| Error::invalid("Compiled::load", "NVRTC's PTX is not UTF-8"))?;
                Module::from_ptx(ctx, text)
            }
            Output::LtoIr => Err(Error::invalid(
                "Compiled::load",
                "LTO-IR is linker input: link it with compile::Linker, then load the linked CUBIN",
            )),
        }
    }

    /// The kernel `name` of `module` (loaded from this result) as an owning handle: `name` may
    /// be a name expression given to the program, looked up by its lowered name, or the name
    /// of an `extern "C"` kernel.
    ///
    /// Fails as [`Module::shared_function`] does.
    pub fn shared_function(&self, module: &Arc<Module>, name: &str) -> Result<SharedFunction> {
        module.shared_function(self.lowered_name(name).unwrap_or(name))
    }

    /// The cache entry: the output tag and seven zero bytes, then length-prefixed code and log,
    /// the number of name pairs and the pairs, the number of parameter counts and the counts
    /// (name, count). The code starts 16 bytes in, so in an entry's storage (aligned to 8) it
    /// is aligned as the driver reads a CUBIN, and it is loaded from there without a copy.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![self.output.tag(), 0, 0, 0, 0, 0, 0, 0];
        let mut field = |bytes: &[u8]| put_field(&mut out, bytes);
        field(self.code.as_bytes());
        field(self.log.as_bytes());
        field(&(self.lowered.len() as u64).to_le_bytes());
        for (expression, lowered) in &self.lowered {
            field(expression.as_bytes());
            field(lowered.as_bytes());
        }
        field(&(self.params.len() as u64).to_le_bytes());
        out.extend_from_slice(self.params.as_bytes());
        out
    }

    /// Reads [`to_bytes`](Self::to_bytes)' format; `None` for bytes of any other shape. The
    /// code is not copied: the result shares `entry`'s storage.
    fn from_bytes(entry: &Arc<[u8]>) -> Option<Compiled> {
        let bytes: &[u8] = entry;
        let (&[tag, ref zeros @ ..], _) = bytes.split_first_chunk::<8>()?;
        let output = Output::from_tag(tag)?;
        if zeros != &[0; 7] {
            return None;
        }
        let mut at = 8;
        // The next length-prefixed field, as its place in `bytes`.
        let mut field = || -> Option<Range<usize>> {
            let place = field_at(bytes, at)?;
            at = place.end;
            Some(place)
        };
        let value = |place: Range<usize>| bytes.get(place);
        let number = |place| usize::try_from(u64::from_le_bytes(value(place)?.try_into().ok()?)).ok();
        let text = |place| String::from_utf8(value(place)?.to_vec()).ok();
        let code = Code { storage: entry.clone(), place: field()? };
        let log = text(field()?)?;
        let mut lowered = Vec::new();
        for _ in 0..number(field()?)? {
            let expression = text(field()?)?;
            lowered.push((expression, text(field()?)?));
        }
        let count = number(field()?)?;
        let (params, end) = ParamCounts::read(bytes, at, count)?;
        if end != bytes.len() {
            return None;
        }
        Some(Compiled { output, code, log, lowered, params, cache_hit: None })
    }
}

/// Compiled code in shared storage: all of NVRTC's output, or the place in a cache entry that
/// holds it, so that a cache hit copies nothing.
#[derive(Clone)]
struct Code {
    storage: Arc<[u8]>,
    place: Range<usize>,
}

impl Code {
    fn whole(storage: Arc<[u8]>) -> Code {
        Code { place: 0..storage.len(), storage }
    }

    fn as_bytes(&self) -> &[u8] {
        self.storage.get(self.place.clone()).unwrap_or_default()
    }
}

impl PartialEq for Code {
    fn eq(&self, other: &Code) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Code {}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_bytes(), f)
    }
}

/// The version of the NVRTC that compiles, `major * 1000 + minor * 10`.
pub(crate) fn nvrtc_version() -> Result<i32> {
    nvrtc::nvrtc_version().map_err(|source| Error::Load { call: "nvrtcVersion", source })
}

/// Turns an NVRTC status into a `Result`.
pub(crate) fn check(call: &'static str, status: nvrtc::nvrtcResult) -> Result<()> {
    if status == nvrtc::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(nvrtc_error(call, status, String::new()))
    }
}

#[cold]
fn nvrtc_error(call: &'static str, status: nvrtc::nvrtcResult, log: String) -> Error {
    if let Some(source) = nvrtc::load_error(call).or_else(nvrtc::library_error) {
        return Error::Load { call, source };
    }
    let log = with_builtins_hint(status, log, nvrtc::library_path());
    Error::Nvrtc { call, status, log }
}

/// `log`, followed where NVRTC could not open its builtins library by where that library must
/// be: NVRTC opens `libnvrtc-builtins` by its file name, which the loader finds beside the
/// `libnvrtc` loaded (the toolkit's and NVIDIA's wheels' `libnvrtc` have the run path
/// `$ORIGIN`), or on the loader's path. A `libnvrtc` copied away from it fails here.
fn with_builtins_hint(status: nvrtc::nvrtcResult, mut log: String, loaded: Option<String>) -> String {
    if status != nvrtc::nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE {
        return log;
    }
    let from = loaded.map_or_else(String::new, |file| format!(" (NVRTC was loaded from {file})"));
    if !log.is_empty() && !log.ends_with('\n') {
        log.push('\n');
    }
    log.push_str(&format!(
        "libnvrtc-builtins must be in the directory of the libnvrtc that was loaded{from}, as the CUDA \
         toolkit and NVIDIA's wheels install it, or on the loader's path (LD_LIBRARY_PATH)"
    ));
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_entries_round_trip_and_bad_ones_are_refused() {
        let c = Compiled {
            output: Output::Ptx,
            code: Code::whole(b".version 8.0".to_vec().into()),
            log: "warning: x".into(),
            lowered: vec![("f<int>".into(), "_Z1fIiEvv".into()), ("g".into(), "g".into())],
            params: ParamCounts::new(&[("_Z1fIiEvv".into(), 3)]),
            cache_hit: None,
        };
        let bytes = c.to_bytes();
        let read = |bytes: &[u8]| Compiled::from_bytes(&Arc::from(bytes));
        let entry: Arc<[u8]> = bytes.clone().into();
        let back = Compiled::from_bytes(&entry);
        assert_eq!(back, Some(c.clone()));
        let shared = back.as_ref().map(|b| b.code().as_ptr());
        assert_eq!(shared, Some(entry[16..].as_ptr()), "the code is shared with the entry, 16 bytes in");
        assert!(shared.is_some_and(|code| code as usize % 8 == 0), "aligned as the driver reads a CUBIN");
        assert_eq!(read(&bytes[..bytes.len() - 1]), None, "truncated");
        let mut extra = bytes.clone();
        extra.push(0);
        assert_eq!(read(&extra), None, "trailing bytes");
        let mut padded = bytes.clone();
        padded[3] = 1;
        assert_eq!(read(&padded), None, "a byte of the padding set (the layout before it)");
        assert_eq!(read(&[7, 0, 0, 0, 0, 0, 0, 0]), None, "unknown output");
        assert_eq!(read(&[]), None);
    }

    #[test]
    fn keys_change_with_everything_that_changes_the_output() {
        let p = Program::new("__global__ void k() {}");
        let args = vec!["--gpu-architecture=sm_90".to_string()];
        let base = p.cache_key(&args, Output::Cubin, 13000);
        assert_eq!(base, p.cache_key(&args, Output::Cubin, 13000));
        assert_ne!(base, p.cache_key(&args, Output::Ptx, 13000));
        assert_ne!(base, p.cache_key(&args, Output::Cubin, 13010), "another NVRTC");
        assert_ne!(base, p.cache_key(&["--gpu-architecture=sm_80".to_string()], Output::Cubin, 13000));
        assert_ne!(base, p.clone().header("a.h", "").cache_key(&args, Output::Cubin, 13000));
        assert_ne!(base, p.clone().name_expression("k").cache_key(&args, Output::Cubin, 13000));
        assert_ne!(base, p.clone().named("other.cu").cache_key(&args, Output::Cubin, 13000));
        assert_ne!(base, Program::new("__global__ void k(){}").cache_key(&args, Output::Cubin, 13000));
        let typed = |o: CompileOptions| p.cache_key(&o.to_args(Arch::new(9, 0)), Output::Cubin, 13000);
        assert_eq!(base, typed(CompileOptions::new()));
        assert_ne!(typed(CompileOptions::new().ftz(true)), typed(CompileOptions::new().ftz(false)));
        assert_ne!(base, typed(CompileOptions::new().prec_div(false)));
        assert_ne!(base, typed(CompileOptions::new().prec_sqrt(false)));
        assert_ne!(base, typed(CompileOptions::new().fmad(false)));
        assert_ne!(
            typed(CompileOptions::new().max_registers(32)),
            typed(CompileOptions::new().max_registers(40))
        );
    }

    /// The last key is kept with what it was made from: asked again with the same options,
    /// architecture and compiler, it is the same key; with any of them changed, or the program
    /// changed by a builder (on a clone that has the memo), it is the key made afresh.
    #[test]
    fn the_last_key_is_used_only_for_what_it_was_made_from() {
        let p = Program::new("__global__ void k() {}");
        let fresh = |p: &Program, o: &CompileOptions, arch: Arch, nvrtc: i32| {
            p.cache_key(&o.to_args(arch), o.output, nvrtc)
        };
        let (o, sm90) = (CompileOptions::new(), Arch::new(9, 0));
        let base = p.key_for(&o, sm90, 13000);
        assert_eq!(base, fresh(&p, &o, sm90, 13000));
        assert_eq!(p.key_for(&o, sm90, 13000), base);
        let others = [
            (o.clone().ftz(true), sm90, 13000),
            (o.clone().output(Output::Ptx), sm90, 13000),
            (o.clone(), Arch::new(8, 0), 13000),
            (o.clone(), sm90, 13010),
        ];
        for (options, arch, nvrtc) in others {
            let key = p.key_for(&options, arch, nvrtc);
            assert_ne!(key, base);
            assert_eq!(key, fresh(&p, &options, arch, nvrtc));
            assert_eq!(p.key_for(&o, sm90, 13000), base, "and back");
        }
        let kept = p.clone();
        assert_eq!(kept.key_for(&o, sm90, 13000), base);
        let changed = kept.header("a.h", "");
        assert_ne!(changed.key_for(&o, sm90, 13000), base, "a builder forgets the last key");
        assert_eq!(changed.key_for(&o, sm90, 13000), fresh(&changed, &o, sm90, 13000));
    }

    #[test]
    fn a_missing_builtins_library_is_explained() {
        let status = nvrtc::nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE;
        let log = with_builtins_hint(
            status,
            "nvrtc: error: failed to open".into(),
            Some("/x/libnvrtc.so.13".into()),
        );
        assert!(log.starts_with("nvrtc: error: failed to open\n"), "{log}");
        assert!(log.contains("libnvrtc-builtins") && log.contains("/x/libnvrtc.so.13"), "{log}");
        let other = with_builtins_hint(nvrtc::nvrtcResult::NVRTC_ERROR_COMPILATION, "e".into(), None);
        assert_eq!(other, "e");
    }

    /// H6: a header named `--` does not pass for a name expression, nor an expression for an
    /// argument: each list is counted.
    #[test]
    fn keys_keep_their_lists_apart() {
        let source = "template <typename T> __global__ void f() {}";
        let key = |p: Program, args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            p.cache_key(&args, Output::Cubin, 13000)
        };
        let header = Program::new(source).header("--", "f<int>");
        let expressions = Program::new(source).name_expression("f<int>").name_expression("--");
        assert_ne!(key(header, &[]), key(expressions, &[]));
        let expression = Program::new(source).name_expression("-DX");
        let argument = Program::new(source);
        assert_ne!(key(expression, &[]), key(argument, &["-DX"]));
    }
}
