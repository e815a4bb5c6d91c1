//! `cuhost::dlpack` on a GPU: buffers exported and imported back as views, in both ABIs,
//! with their memory freed when the deleter runs, once; refused layouts and views; and a tensor
//! handed to PyTorch (or CuPy) through a Python capsule, in the process that exported it.
//!
//! The Python test runs in a child process of this binary (started with `CHILD_ENV` set), so
//! that the embedded interpreter gets its `PYTHONHOME` from the environment it starts with and
//! cannot disturb the other tests. It is reported ignored where no Python with a shared
//! libpython and torch or cupy is found (see [`python::available`]).

use cuda_tests::{TestResult, ensure, ensure_eq, gpu, gpu_needing};
use cuhost::dlpack::{
    DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DlpackDtype, ImportedTensor, ManagedTensor,
    TensorFlags,
};
use cuhost::mempool::AsyncAllocator;
use cuhost::mempool::MemPool;
use cuhost::nccl::{Float8E5M2, bf16, f16};
use cuhost::{Context, Device, DeviceBuffer, Error, Stream, StreamFlags};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Set in the environment of the child process that embeds Python.
const CHILD_ENV: &str = "CUDA_CORE_DLPACK_PYTHON_CHILD";

fn main() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let outcome = python::child();
        cuda_tests::release_default_pools();
        let code = match outcome {
            Ok(report) => {
                println!("{report}");
                0
            }
            Err(e) => {
                eprintln!("dlpack python child: {e}");
                1
            }
        };
        std::process::exit(code);
    }
    cuda_tests::run(&[
        gpu("export_and_import_round_trip_frees_once", export_and_import_round_trip_frees_once),
        gpu("legacy_export_with_a_shape_imports_as_a_view", legacy_export_with_a_shape_imports_as_a_view),
        gpu("bad_layouts_and_views_are_refused", bad_layouts_and_views_are_refused),
        gpu("half_precision_and_fp8_elements_carry_their_data_types", half_precision_round_trip),
        gpu_needing(
            "python_consumer_reads_an_exported_buffer",
            python::available,
            python::consumer_reads_an_exported_buffer,
        ),
    ]);
}

fn ctx() -> Result<Context, Error> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    Ok(ctx)
}

/// The tests of this file count deleter calls in one counter: they run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

type VersionedDeleter = unsafe extern "C" fn(*mut DLManagedTensorVersioned);
type LegacyDeleter = unsafe extern "C" fn(*mut DLManagedTensor);

/// Calls of the deleters installed by `count_deletes_*`.
static DELETES: AtomicUsize = AtomicUsize::new(0);
static VERSIONED: Mutex<Option<VersionedDeleter>> = Mutex::new(None);
static LEGACY: Mutex<Option<LegacyDeleter>> = Mutex::new(None);

fn deletes() -> usize {
    DELETES.load(Ordering::SeqCst)
}

unsafe extern "C" fn counting_versioned(tensor: *mut DLManagedTensorVersioned) {
    DELETES.fetch_add(1, Ordering::SeqCst);
    let original = *VERSIONED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(deleter) = original {
        // SAFETY: the consumer calls this once, in place of the exporter's deleter.
        unsafe { deleter(tensor) }
    }
}

unsafe extern "C" fn counting_legacy(tensor: *mut DLManagedTensor) {
    DELETES.fetch_add(1, Ordering::SeqCst);
    let original = *LEGACY.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(deleter) = original {
        // SAFETY: as in `counting_versioned`.
        unsafe { deleter(tensor) }
    }
}

/// Puts a counting deleter in front of a handed-over tensor's own.
///
/// # Safety
///
/// `tensor` is a live tensor from `ManagedTensor::into_raw` that nothing uses concurrently.
unsafe fn count_deletes_versioned(tensor: *mut DLManagedTensorVersioned) {
    // SAFETY: the caller owns the live tensor.
    unsafe {
        *VERSIONED.lock().unwrap_or_else(PoisonError::into_inner) = (*tensor).deleter;
        (*tensor).deleter = Some(counting_versioned);
    }
}

/// As [`count_deletes_versioned`], for `ManagedTensor::into_raw_legacy`.
///
/// # Safety
///
/// As for [`count_deletes_versioned`].
unsafe fn count_deletes_legacy(tensor: *mut DLManagedTensor) {
    // SAFETY: the caller owns the live tensor.
    unsafe {
        *LEGACY.lock().unwrap_or_else(PoisonError::into_inner) = (*tensor).deleter;
        (*tensor).deleter = Some(counting_legacy);
    }
}

/// The message of an error that was expected; `what` names what should have been refused.
fn refusal<T>(result: Result<T, Error>, what: &str) -> Result<String, cuda_tests::Failed> {
    match result {
        Err(e) => Ok(e.to_string()),
        Ok(_) => Err(format!("{what} was accepted").into()),
    }
}

fn ordinal(ctx: &Context) -> i32 {
    i32::try_from(ctx.device().ordinal()).unwrap_or(-1)
}

fn export_and_import_round_trip_frees_once() -> TestResult {
    let _serial = serial();
    let ctx = ctx()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // The buffer comes from the device's current pool (no other test here allocates from it),
    // whose bytes in use show when the deleter has freed it.
    let pool = MemPool::current(&ctx.device())?;
    let used_before = pool.used_mem_current()?;
    const N: usize = 1 << 20;
    let host: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 * 0.5 - 100.0).collect();
    let mut buf = DeviceBuffer::<f32>::new_in(&stream, N, Arc::new(AsyncAllocator::new(&ctx)))?;
    stream.synchronize()?;
    buf.copy_from(&host)?;
    let address = buf.as_raw();
    let used = pool.used_mem_current()?;
    ensure!(
        used >= used_before + (N * 4) as u64,
        "the pool shows {used} bytes in use after a 4 MiB allocation"
    );

    let tensor = ManagedTensor::from_buffer(buf)?;
    ensure_eq!(tensor.shape(), [N as i64]);
    ensure_eq!(tensor.strides(), [1]);
    ensure_eq!(tensor.dtype(), f32::DTYPE);
    ensure_eq!(tensor.device().device_type, DLDeviceType::kDLCUDA);
    ensure_eq!(tensor.device().device_id, ordinal(&ctx));
    ensure_eq!(tensor.dl_tensor().data as u64, address);
    let raw = tensor.into_raw();
    let before = deletes();
    // SAFETY: a live tensor just handed over.
    unsafe { count_deletes_versioned(raw) };
    // SAFETY: handed over once, to this importer.
    let imported = unsafe { ImportedTensor::from_raw(raw) }?;
    ensure_eq!(imported.device().device_type, DLDeviceType::kDLCUDA);
    ensure_eq!(imported.device().device_id, ordinal(&ctx));
    ensure_eq!(imported.dtype(), f32::DTYPE);
    ensure_eq!(imported.shape(), [N as i64]);
    ensure!(imported.is_contiguous(), "a 1-D export is contiguous");
    {
        let view = imported.view::<f32>(&ctx)?;
        ensure_eq!((view.as_raw(), view.len()), (address, N));
        ensure!(view.to_vec()? == host, "the imported view reads other values than were written");
    }
    ensure_eq!(deletes() - before, 0);
    ensure_eq!(pool.used_mem_current()?, used);
    drop(imported);
    ensure_eq!(deletes() - before, 1);
    // The buffer is freed in its stream's order.
    stream.synchronize()?;
    ensure_eq!(pool.used_mem_current()?, used_before);
    let deferred = ctx.take_deferred_errors();
    ensure!(deferred.is_empty(), "freeing through the deleter failed: {deferred:?}");
    Ok(())
}

fn legacy_export_with_a_shape_imports_as_a_view() -> TestResult {
    let _serial = serial();
    let ctx = ctx()?;
    let host: Vec<i32> = (0..24).map(|i| i * 3 - 7).collect();
    let buf = DeviceBuffer::from_slice(&Stream::legacy(&ctx), &host)?;
    let address = buf.as_raw();
    let tensor = ManagedTensor::from_buffer_with_shape(buf, &[2, 3, 4], None)?;
    ensure_eq!(tensor.strides(), [12, 4, 1]);
    let raw = tensor.into_raw_legacy();
    let before = deletes();
    // SAFETY: a live tensor just handed over.
    unsafe { count_deletes_legacy(raw) };
    // SAFETY: handed over once, to this importer.
    let mut imported = unsafe { ImportedTensor::from_raw_legacy(raw) }?;
    ensure_eq!(imported.version(), None);
    ensure_eq!(imported.shape(), [2, 3, 4]);
    ensure_eq!(imported.strides(), Some(&[12i64, 4, 1][..]));
    ensure_eq!(imported.num_elements()?, 24);
    ensure!(imported.view::<u32>(&ctx).is_err(), "an int32 tensor was viewed as u32");
    {
        let mut view = imported.view_mut::<i32>(&ctx)?;
        ensure_eq!((view.as_raw(), view.len()), (address, 24));
        let doubled: Vec<i32> = host.iter().map(|v| v * 2).collect();
        view.copy_from_host(&doubled)?;
        ensure!(view.as_view().to_vec()? == doubled, "writes through the imported view were lost");
    }
    drop(imported);
    ensure_eq!(deletes() - before, 1);

    // Rows padded to 8 elements: exported with strides, imported, and refused as a flat view.
    let buf = DeviceBuffer::from_slice(&Stream::legacy(&ctx), &[1.0f64; 24])?;
    let tensor = ManagedTensor::from_buffer_with_shape(buf, &[3, 5], Some(&[8, 1]))?;
    let raw = tensor.into_raw();
    let before = deletes();
    // SAFETY: a live tensor just handed over.
    unsafe { count_deletes_versioned(raw) };
    // SAFETY: handed over once, to this importer.
    let imported = unsafe { ImportedTensor::from_raw(raw) }?;
    ensure!(!imported.is_contiguous(), "padded rows are not contiguous");
    let refused = refusal(imported.view::<f64>(&ctx), "a flat view of padded rows")?;
    ensure!(refused.contains("strides [8, 1] over shape [3, 5]"), "{refused}");
    drop(imported);
    ensure_eq!(deletes() - before, 1);
    Ok(())
}

/// Elements of `half::bf16` and of NCCL's 8-bit float end to end: written from the host,
/// exported with their own data types (`kDLBfloat`, `kDLFloat8_e5m2`), refused as views of
/// another type of the same size (`f16`, `u8`), imported back and read equal.
fn half_precision_round_trip() -> TestResult {
    let _serial = serial();
    let ctx = ctx()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let halves: Vec<bf16> = (0..4096).map(|i| bf16::from_f32(i as f32 * 0.25 - 100.0)).collect();
    let tensor = ManagedTensor::from_buffer(DeviceBuffer::from_slice(&stream, &halves)?)?;
    ensure_eq!(tensor.dtype(), bf16::DTYPE);
    // SAFETY: a live tensor just handed over, once.
    let imported = unsafe { ImportedTensor::from_raw(tensor.into_raw()) }?;
    ensure!(imported.view::<f16>(&ctx).is_err(), "a bfloat16 tensor was viewed as f16");
    ensure!(imported.view::<bf16>(&ctx)?.to_vec()? == halves, "the bfloat16 values changed");
    let bytes: Vec<Float8E5M2> = (0..=255u8).map(Float8E5M2).collect();
    let tensor = ManagedTensor::from_buffer(DeviceBuffer::from_slice(&stream, &bytes)?)?;
    ensure_eq!(tensor.dtype(), Float8E5M2::DTYPE);
    // SAFETY: as above.
    let imported = unsafe { ImportedTensor::from_raw(tensor.into_raw()) }?;
    ensure!(imported.view::<u8>(&ctx).is_err(), "an fp8 tensor was viewed as u8");
    ensure!(imported.view::<Float8E5M2>(&ctx)?.to_vec()? == bytes, "the fp8 values changed");
    Ok(())
}

fn bad_layouts_and_views_are_refused() -> TestResult {
    let _serial = serial();
    let ctx = ctx()?;
    let buf = DeviceBuffer::<u16>::zeroed(&Stream::legacy(&ctx), 10)?;
    match ManagedTensor::from_buffer_with_shape(buf, &[3, 4], None) {
        Err(e @ Error::InvalidArgument { .. }) => {
            let text = e.to_string();
            ensure!(text.contains("shape [3, 4] holds 12 elements but the buffer has 10"), "{text}");
        }
        other => return Err(format!("a 3x4 shape over 10 elements gave {other:?}").into()),
    }
    let buf = DeviceBuffer::<u16>::zeroed(&Stream::legacy(&ctx), 12)?;
    match ManagedTensor::from_buffer_with_shape(buf, &[3, 4], Some(&[5, 1])) {
        Err(e @ Error::InvalidArgument { .. }) => {
            let text = e.to_string();
            ensure!(text.contains("reach element 13 but the buffer has 12"), "{text}");
        }
        other => return Err(format!("strides past the end gave {other:?}").into()),
    }

    // A read-only export can be viewed, not written.
    let buf = DeviceBuffer::<u16>::zeroed(&Stream::legacy(&ctx), 12)?;
    let mut tensor = ManagedTensor::from_buffer_with_shape(buf, &[3, 4], Some(&[4, 1]))?;
    tensor.set_flags(TensorFlags::READ_ONLY);
    // SAFETY: handed over once, to this importer.
    let mut imported = unsafe { ImportedTensor::from_raw(tensor.into_raw()) }?;
    ensure!(imported.is_read_only(), "the read-only flag was lost");
    ensure_eq!(imported.view::<u16>(&ctx)?.to_vec()?, vec![0u16; 12]);
    let refused = refusal(imported.view_mut::<u16>(&ctx), "a writable view of a read-only tensor")?;
    ensure!(refused.contains("READ_ONLY"), "{refused}");
    ensure!(imported.view::<i16>(&ctx).is_err(), "a uint16 tensor was viewed as i16");
    Ok(())
}

/// PyTorch or CuPy in this process, through libpython loaded at run time.
mod python {
    use super::*;
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    use std::ffi::{CStr, CString, c_char, c_int, c_void};
    use std::process::Command;
    use std::sync::OnceLock;

    /// Interpreters to ask, in order: `CUDA_TEST_PYTHON`, `python3` on `PATH`, the GPU host's
    /// PyTorch environment.
    const VENV_PYTHON: &str = "/opt/torch/.venv/bin/python3";

    const LIB_ENV: &str = "CUDA_CORE_DLPACK_PYTHON_LIB";
    const PATHS_ENV: &str = "CUDA_CORE_DLPACK_PYTHON_PATHS";
    const SITES_ENV: &str = "CUDA_CORE_DLPACK_PYTHON_SITES";
    const MODULES_ENV: &str = "CUDA_CORE_DLPACK_PYTHON_MODULES";

    /// Prints where the interpreter's shared libpython is, its home, its module search path and
    /// which consumers are installed, one `key=value` a line.
    const PROBE: &str = r#"
import os, sys, sysconfig, importlib.util
v = sysconfig.get_config_var
ver = '%d.%d' % sys.version_info[:2]
names = [n for n in (v('INSTSONAME'), v('LDLIBRARY'), 'libpython%s.so.1.0' % ver, 'libpython%s.so' % ver)
         if n and '.so' in n]
dirs = [d for d in (v('LIBDIR'), os.path.join(sys.base_prefix, 'lib'), os.path.join(sys.base_exec_prefix, 'lib'),
                    v('LIBPL')) if d]
lib = next((os.path.join(d, n) for d in dirs for n in names if os.path.isfile(os.path.join(d, n))), '')
if not lib:
    import ctypes.util
    lib = ctypes.util.find_library('python' + ver) or ''
print('version=' + ver)
print('libdir=%s' % v('LIBDIR'))
print('soname=%s' % v('INSTSONAME'))
print('lib=' + lib)
home = sys.base_prefix
if sys.base_exec_prefix != sys.base_prefix:
    home += os.pathsep + sys.base_exec_prefix
print('home=' + home)
for p in sys.path:
    if p:
        print('path=' + p)
import site
for p in site.getsitepackages():
    print('site=' + p)
for m in ('torch', 'cupy'):
    if importlib.util.find_spec(m) is not None:
        print('module=' + m)
"#;

    /// What the child needs to embed the interpreter that a probe found.
    #[derive(Debug)]
    struct Setup {
        interpreter: String,
        version: String,
        lib: String,
        home: String,
        paths: Vec<String>,
        sites: Vec<String>,
        modules: Vec<String>,
    }

    fn probe_one(python: &str) -> Result<Setup, String> {
        let out = Command::new(python)
            .args(["-c", PROBE])
            .env_remove("PYTHONHOME")
            .output()
            .map_err(|e| format!("{python}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{python}: the probe failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut setup = Setup {
            interpreter: python.to_string(),
            version: String::new(),
            lib: String::new(),
            home: String::new(),
            paths: Vec::new(),
            sites: Vec::new(),
            modules: Vec::new(),
        };
        let (mut libdir, mut soname) = (String::new(), String::new());
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else { continue };
            let value = value.to_string();
            match key {
                "version" => setup.version = value,
                "libdir" => libdir = value,
                "soname" => soname = value,
                "lib" => setup.lib = value,
                "home" => setup.home = value,
                "path" => setup.paths.push(value),
                "site" => setup.sites.push(value),
                "module" => setup.modules.push(value),
                _ => {}
            }
        }
        if setup.lib.is_empty() {
            return Err(format!(
                "{python} (Python {}) has no shared libpython (sysconfig LIBDIR {libdir}, INSTSONAME {soname})",
                setup.version
            ));
        }
        if setup.modules.is_empty() {
            return Err(format!("{python} (Python {}) has neither torch nor cupy", setup.version));
        }
        Ok(setup)
    }

    fn probe() -> &'static Result<Setup, String> {
        static SETUP: OnceLock<Result<Setup, String>> = OnceLock::new();
        SETUP.get_or_init(|| {
            let mut candidates: Vec<String> = std::env::var("CUDA_TEST_PYTHON").into_iter().collect();
            candidates.extend(["python3".to_string(), VENV_PYTHON.to_string()]);
            let mut reasons = Vec::new();
            for python in &candidates {
                match probe_one(python) {
                    Ok(setup) => return Ok(setup),
                    Err(why) => reasons.push(why),
                }
            }
            Err(format!("no Python with a shared libpython and torch or cupy: {}", reasons.join("; ")))
        })
    }

    /// Whether a Python with a shared libpython and PyTorch or CuPy was found.
    pub fn available() -> Result<(), String> {
        probe().as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Runs the child and reports what it did.
    pub fn consumer_reads_an_exported_buffer() -> TestResult {
        let setup = probe().as_ref().map_err(Clone::clone)?;
        let out = Command::new(std::env::current_exe()?)
            .env(CHILD_ENV, "1")
            .env("PYTHONHOME", &setup.home)
            .env(LIB_ENV, &setup.lib)
            .env(PATHS_ENV, setup.paths.join("\n"))
            .env(SITES_ENV, setup.sites.join("\n"))
            .env(MODULES_ENV, setup.modules.join("\n"))
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.success(),
            "the child embedding Python {} from {} ({}) failed with {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            setup.version,
            setup.lib,
            setup.interpreter,
            out.status
        );
        println!(
            "Python {} from {} ({}):\n{}",
            setup.version,
            setup.lib,
            setup.interpreter,
            stdout.trim_end()
        );
        if !stderr.trim().is_empty() {
            println!("the child's stderr:\n{}", stderr.trim_end());
        }
        ensure!(stdout.contains(" took a "), "the child reported no consumer:\n{stdout}\n{stderr}");
        Ok(())
    }

    type PyObject = c_void;

    /// The few C-API functions the child calls.
    struct Py {
        initialize_ex: unsafe extern "C" fn(c_int),
        finalize_ex: unsafe extern "C" fn() -> c_int,
        run_simple_string: unsafe extern "C" fn(*const c_char) -> c_int,
        import_module: unsafe extern "C" fn(*const c_char) -> *mut PyObject,
        get_attr_string: unsafe extern "C" fn(*mut PyObject, *const c_char) -> *mut PyObject,
        call_function_obj_args: unsafe extern "C" fn(*mut PyObject, ...) -> *mut PyObject,
        capsule_new: unsafe extern "C" fn(
            *mut c_void,
            *const c_char,
            Option<unsafe extern "C" fn(*mut PyObject)>,
        ) -> *mut PyObject,
        capsule_is_valid: unsafe extern "C" fn(*mut PyObject, *const c_char) -> c_int,
        float_as_double: unsafe extern "C" fn(*mut PyObject) -> f64,
        err_occurred: unsafe extern "C" fn() -> *mut PyObject,
        err_print: unsafe extern "C" fn(),
        dec_ref: unsafe extern "C" fn(*mut PyObject),
    }

    impl Py {
        fn load(path: &str) -> Result<Py, String> {
            // Global symbols: extension modules (torch's included) find the C API in the
            // process rather than linking libpython themselves.
            // SAFETY: loading libpython runs no initialisation beyond its constructors.
            let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
                .map_err(|e| format!("cannot load {path}: {e}"))?;
            // Never unloaded: Python and the modules it loads stay until the process exits.
            let lib: &'static Library = Box::leak(Box::new(lib));
            fn get<T: Copy>(lib: &'static Library, name: &str) -> Result<T, String> {
                // SAFETY: each symbol is read with the type of its C declaration.
                unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s).map_err(|e| format!("{name}: {e}")) }
            }
            Ok(Py {
                initialize_ex: get(lib, "Py_InitializeEx")?,
                finalize_ex: get(lib, "Py_FinalizeEx")?,
                run_simple_string: get(lib, "PyRun_SimpleString")?,
                import_module: get(lib, "PyImport_ImportModule")?,
                get_attr_string: get(lib, "PyObject_GetAttrString")?,
                call_function_obj_args: get(lib, "PyObject_CallFunctionObjArgs")?,
                capsule_new: get(lib, "PyCapsule_New")?,
                capsule_is_valid: get(lib, "PyCapsule_IsValid")?,
                float_as_double: get(lib, "PyFloat_AsDouble")?,
                err_occurred: get(lib, "PyErr_Occurred")?,
                err_print: get(lib, "PyErr_Print")?,
                dec_ref: get(lib, "Py_DecRef")?,
            })
        }

        /// Runs source in `__main__`; Python prints the traceback of a failure.
        fn run(&self, code: &str) -> Result<(), String> {
            let source = CString::new(code).map_err(|e| e.to_string())?;
            // SAFETY: the interpreter is initialized and this thread holds the GIL.
            match unsafe { (self.run_simple_string)(source.as_ptr()) } {
                0 => Ok(()),
                _ => Err(format!("Python raised (traceback above) running:\n{code}")),
            }
        }

        /// An attribute of `__main__`, a new reference.
        fn main_attr(&self, name: &CStr) -> Result<*mut PyObject, String> {
            // SAFETY: the interpreter is initialized and this thread holds the GIL.
            unsafe {
                let main = (self.import_module)(c"__main__".as_ptr());
                if main.is_null() {
                    (self.err_print)();
                    return Err("no __main__ module".into());
                }
                let attr = (self.get_attr_string)(main, name.as_ptr());
                (self.dec_ref)(main);
                if attr.is_null() {
                    (self.err_print)();
                    return Err(format!("__main__ has no {name:?}"));
                }
                Ok(attr)
            }
        }
    }

    /// A Python string literal of `s`.
    fn py_str(s: &str) -> String {
        let mut out = String::from("'");
        for c in s.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('\'');
        out
    }

    fn py_list(items: &[&str]) -> String {
        format!("[{}]", items.iter().map(|s| py_str(s)).collect::<Vec<_>>().join(", "))
    }

    const SHAPE: [i64; 2] = [64, 48];

    /// The consumers: each takes the capsule, checks what it sees and returns the sum of
    /// `i * x[i]` over the flattened tensor, which depends on the order of the elements too,
    /// and gives its library's cached memory back so that a leak checker sees none.
    const CONSUMERS: &str = r#"
SHAPE = (64, 48)

def _consume_torch(capsule):
    import torch
    t = torch.from_dlpack(capsule)
    if tuple(t.shape) != SHAPE or t.device.type != 'cuda' or t.dtype != torch.float32:
        raise ValueError('torch sees shape %r on %s of %s' % (tuple(t.shape), t.device, t.dtype))
    x = t.double().flatten()
    w = torch.arange(x.numel(), dtype=torch.float64, device=x.device)
    s = float((x * w).sum())
    print('torch %s read it on %s' % (torch.__version__, t.device), flush=True)
    del t, x, w
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    getattr(torch._C, '_host_emptyCache', lambda: None)()
    return s

def _consume_cupy(capsule):
    import cupy
    a = cupy.from_dlpack(capsule)
    if a.shape != SHAPE or a.dtype != cupy.float32:
        raise ValueError('cupy sees shape %r of %s' % (a.shape, a.dtype))
    x = a.astype(cupy.float64).ravel()
    w = cupy.arange(x.size, dtype=cupy.float64)
    s = float((x * w).sum())
    print('cupy %s read it on device %d' % (cupy.__version__, a.device.id), flush=True)
    del a, x, w
    cupy.cuda.Device().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    return s
"#;

    #[derive(Clone, Copy)]
    enum Kind {
        Versioned,
        Legacy,
    }

    enum Outcome {
        /// The consumer took the tensor and computed the right sum: what happened.
        Took(String),
        /// The consumer refused the capsule and left it unused: why.
        Refused(String),
    }

    fn env_list(name: &str) -> Vec<String> {
        std::env::var(name).unwrap_or_default().lines().filter(|l| !l.is_empty()).map(String::from).collect()
    }

    /// The child: embeds Python, hands it exported tensors and checks what comes back.
    pub fn child() -> Result<String, String> {
        let lib = std::env::var(LIB_ENV).map_err(|_| format!("{LIB_ENV} is not set"))?;
        let paths = env_list(PATHS_ENV);
        let sites = env_list(SITES_ENV);
        let modules = env_list(MODULES_ENV);
        let ctx = ctx().map_err(|e| e.to_string())?;
        let py = Py::load(&lib)?;
        // SAFETY: first and only initialization, on this (the main) thread, which then holds
        // the GIL for everything below; 0 leaves signal handlers alone.
        unsafe { (py.initialize_ex)(0) };
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let sites: Vec<&str> = sites.iter().map(String::as_str).collect();
        py.run(&format!(
            "import sys, site\nsys.argv = ['cuda-tests-dlpack']\n\
             sys.path[:0] = [p for p in {} if p not in sys.path]\n\
             for p in {}:\n    site.addsitedir(p)\n",
            py_list(&paths),
            py_list(&sites)
        ))?;
        py.run(CONSUMERS)?;
        let mut refusals = Vec::new();
        let mut took = None;
        'consumers: for module in &modules {
            let name = CString::new(format!("_consume_{module}")).map_err(|e| e.to_string())?;
            let func = py.main_attr(&name)?;
            for kind in [Kind::Versioned, Kind::Legacy] {
                let outcome = attempt(&py, &ctx, func, module, kind);
                match outcome {
                    Ok(Outcome::Took(what)) => {
                        took = Some(what);
                        // SAFETY: a reference this function owns.
                        unsafe { (py.dec_ref)(func) };
                        break 'consumers;
                    }
                    Ok(Outcome::Refused(why)) => refusals.push(why),
                    Err(e) => {
                        // SAFETY: as above.
                        unsafe { (py.dec_ref)(func) };
                        return Err(e);
                    }
                }
            }
            // SAFETY: as above.
            unsafe { (py.dec_ref)(func) };
        }
        // SAFETY: the thread that initialized Python, holding the GIL, with no references left.
        let finalized = unsafe { (py.finalize_ex)() };
        let took = took.ok_or_else(|| format!("no consumer took the tensor: {}", refusals.join("; ")))?;
        let mut report = took;
        for r in &refusals {
            report.push_str(&format!("\nbefore that, {r}"));
        }
        report.push_str(&format!("\nPy_FinalizeEx returned {finalized}"));
        Ok(report)
    }

    /// Exports a fresh buffer, wraps it in a capsule of `kind` and calls `func` on it.
    fn attempt(
        py: &Py,
        ctx: &Context,
        func: *mut PyObject,
        module: &str,
        kind: Kind,
    ) -> Result<Outcome, String> {
        let n = (SHAPE[0] * SHAPE[1]) as usize;
        let host: Vec<f32> = (0..n).map(|i| ((i * 7919) % 101) as f32 - 50.0).collect();
        let expected: f64 = host.iter().enumerate().map(|(i, &x)| i as f64 * f64::from(x)).sum();
        let buf = DeviceBuffer::from_slice(&Stream::legacy(ctx), &host).map_err(|e| e.to_string())?;
        let tensor = ManagedTensor::from_buffer_with_shape(buf, &SHAPE, None).map_err(|e| e.to_string())?;
        let before = deletes();
        let (ptr, name): (*mut c_void, &CStr) = match kind {
            Kind::Versioned => {
                let raw = tensor.into_raw();
                // SAFETY: a live tensor just handed over.
                unsafe { count_deletes_versioned(raw) };
                (raw.cast(), c"dltensor_versioned")
            }
            Kind::Legacy => {
                let raw = tensor.into_raw_legacy();
                // SAFETY: as above.
                unsafe { count_deletes_legacy(raw) };
                (raw.cast(), c"dltensor")
            }
        };
        // Takes the tensor back when no consumer took it: dropping the import calls the deleter.
        let reclaim = || -> Result<(), String> {
            // SAFETY: the tensor was handed over and not taken; it is taken back once.
            let imported = unsafe {
                match kind {
                    Kind::Versioned => ImportedTensor::from_raw(ptr.cast()),
                    Kind::Legacy => ImportedTensor::from_raw_legacy(ptr.cast()),
                }
            };
            drop(imported.map_err(|e| e.to_string())?);
            Ok(())
        };
        let capsule_name = name.to_string_lossy();
        // SAFETY: the GIL is held; the name is a static string, and the capsule has no
        // destructor: whoever renames it owns the tensor, and otherwise `reclaim` frees it.
        let capsule = unsafe { (py.capsule_new)(ptr, name.as_ptr(), None) };
        if capsule.is_null() {
            // SAFETY: the GIL is held.
            unsafe { (py.err_print)() };
            reclaim()?;
            return Err("PyCapsule_New failed".into());
        }
        // SAFETY: the GIL is held; `func` and `capsule` are live; the argument list ends in null.
        let result = unsafe { (py.call_function_obj_args)(func, capsule, std::ptr::null_mut::<PyObject>()) };
        // A consumer that takes the tensor renames the capsule to "used_...".
        // SAFETY: as above.
        let taken = unsafe { (py.capsule_is_valid)(capsule, name.as_ptr()) } == 0;
        // SAFETY: the capsule reference this function owns.
        unsafe { (py.dec_ref)(capsule) };
        if result.is_null() {
            // SAFETY: the GIL is held and an exception is set.
            unsafe { (py.err_print)() };
            if taken {
                return Err(format!(
                    "{module} took the {capsule_name:?} capsule and then failed (traceback above)"
                ));
            }
            reclaim()?;
            let count = deletes() - before;
            ensure_deleted_once(count, module)?;
            return Ok(Outcome::Refused(format!(
                "{module} refused a {capsule_name:?} capsule (its traceback is on the child's stderr); taken back, \
                 deleter ran once"
            )));
        }
        // SAFETY: the GIL is held; `result` is a live reference this function owns.
        let (value, error) = unsafe {
            let value = (py.float_as_double)(result);
            let error = !(py.err_occurred)().is_null();
            (py.dec_ref)(result);
            (value, error)
        };
        if error {
            // SAFETY: the GIL is held and an exception is set.
            unsafe { (py.err_print)() };
            return Err(format!("{module} returned something that is not a float"));
        }
        if !taken {
            reclaim()?;
            return Err(format!("{module} returned but did not rename the {capsule_name:?} capsule"));
        }
        let mut count = deletes() - before;
        if count == 0 {
            // Cycles may hold the consumer's tensor until a collection.
            py.run("import gc\ngc.collect()")?;
            count = deletes() - before;
        }
        ensure_deleted_once(count, module)?;
        if (value - expected).abs() > 1e-9 * expected.abs().max(1.0) {
            return Err(format!(
                "{module} computed {value} from a {capsule_name:?} capsule; the host computed {expected}"
            ));
        }
        Ok(Outcome::Took(format!(
            "{module} took a {capsule_name:?} capsule of shape {SHAPE:?}: its sum {value} matches the host's, and the \
             deleter ran once when it let go"
        )))
    }

    fn ensure_deleted_once(count: usize, module: &str) -> Result<(), String> {
        if count == 1 {
            Ok(())
        } else {
            Err(format!("the deleter ran {count} times around {module}'s use of the tensor; expected once"))
        }
    }
}
