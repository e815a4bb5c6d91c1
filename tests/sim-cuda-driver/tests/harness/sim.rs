//! The simulator as the test program sees it: the built library loaded as `libcuda` (through
//! `CUDA_DRIVER_LIBRARY_PATH`, before the first driver call) and its `sim_*` functions, and the
//! simulated NCCL (`tests/sim-nccl`, through `NCCL_LIBRARY_PATH`) whose calls it queues.

use std::ffi::{CStr, c_char, c_int};
use std::path::PathBuf;
use std::sync::OnceLock;

/// A built simulator library (`sim_cuda_driver`, `sim_nccl`): `cargo test` builds the cdylibs
/// into `deps/`, next to the test binary; one next to the binaries may be left from an
/// earlier `cargo build`.
fn library_path(crate_name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    let name = format!("{}{crate_name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let (in_deps, above) = (deps.join(&name), deps.parent().unwrap().join(&name));
    if modified(&above) > modified(&in_deps) { above } else { in_deps }
}

/// The `sim_*` functions of the loaded simulator.
pub struct Sim {
    pub reset: extern "C" fn(u64),
    pub set_step: extern "C" fn(u32),
    pub set_backtraces: extern "C" fn(c_int),
    pub report_count: extern "C" fn(c_int) -> u64,
    /// Queries of events that no longer exist, since the process started.
    pub dead_event_queries: extern "C" fn() -> u64,
    reports: extern "C" fn() -> *mut c_char,
    unsupported: extern "C" fn() -> *mut c_char,
    free_string: unsafe extern "C" fn(*mut c_char),
    /// The simulated NCCL's `sim_nccl_set_in_progress`: non-zero makes group ends answer
    /// `ncclInProgress` and leave their calls to `ncclCommGetAsyncError`.
    pub nccl_in_progress: extern "C" fn(c_int),
    _library: libloading::Library,
    _nccl: libloading::Library,
}

impl Sim {
    /// The simulator, loaded once per process.
    pub fn get() -> &'static Sim {
        static SIM: OnceLock<Sim> = OnceLock::new();
        SIM.get_or_init(Sim::load)
    }

    fn load() -> Sim {
        let path = library_path("sim_cuda_driver");
        assert!(path.exists(), "{} missing: build the sim-cuda-driver crate", path.display());
        let nccl = library_path("sim_nccl");
        assert!(nccl.exists(), "{} missing: build the sim-nccl crate", nccl.display());
        // SAFETY: set once, before the first driver and NCCL call of the process (the loaders
        // read them then), while no other thread of this program reads the environment.
        unsafe {
            std::env::set_var("CUDA_DRIVER_LIBRARY_PATH", &path);
            std::env::set_var("NCCL_LIBRARY_PATH", &nccl);
        }
        // SAFETY: the simulator's initialisers only set up Rust statics; the symbols below
        // have these signatures (see its `control` module), and the library stays loaded for
        // the life of the process (the driver loader opens the same file again).
        unsafe {
            let lib = libloading::Library::new(&path).unwrap();
            let nccl_lib = libloading::Library::new(&nccl).unwrap();
            macro_rules! f {
                ($name:literal) => {
                    *lib.get($name).unwrap()
                };
            }
            Sim {
                reset: f!(b"sim_reset\0"),
                set_step: f!(b"sim_set_step\0"),
                set_backtraces: f!(b"sim_set_backtraces\0"),
                report_count: f!(b"sim_report_count\0"),
                dead_event_queries: f!(b"sim_dead_event_queries\0"),
                reports: f!(b"sim_reports\0"),
                unsupported: f!(b"sim_unsupported\0"),
                free_string: f!(b"sim_free_string\0"),
                nccl_in_progress: *nccl_lib.get(b"sim_nccl_set_in_progress\0").unwrap(),
                _library: lib,
                _nccl: nccl_lib,
            }
        }
    }

    fn text(&self, f: extern "C" fn() -> *mut c_char) -> String {
        let p = f();
        // SAFETY: a NUL-terminated string of the simulator's, freed once below.
        let text = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        // SAFETY: as above.
        unsafe { (self.free_string)(p) };
        text
    }

    /// The reports since the last reset, in words.
    pub fn reports(&self) -> String {
        self.text(self.reports)
    }

    /// The driver functions looked up that the simulator does not implement.
    pub fn unsupported(&self) -> String {
        self.text(self.unsupported)
    }

    /// Reports of categories (a)–(c), and of (d).
    pub fn counts(&self) -> ([u64; 3], u64) {
        let c = |n| (self.report_count)(n);
        ([c(0), c(1), c(2)], c(3))
    }
}
