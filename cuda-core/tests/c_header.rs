//! `include/cuda_core_memory.h` agrees with the C functions of `cuhost::pool::capi`.
//!
//! Three checks, on a CPU:
//! 1. the header compiles as C11 and as C++ with every warning an error, and each function
//!    converts without a cast to a pointer of the exact type written below (`C_SIGNATURES`),
//!    which mirrors the Rust signatures checked at compile time in `RUST_SIGNATURES`;
//! 2. the symbols the compiled C object needs are exactly the ones this crate defines, and
//!    this test binary, linked against cuda-core, defines each of them;
//! 3. the functions, declared here by name as C would see them (`extern "C"`), link and behave
//!    as the header says against an allocator of the test's own;
//! 4. a C program that includes the header links against a shared library made of cuda-core
//!    (a one-line cdylib built with `rustc` from the cuda-core rlib next to this test) and runs.
//!
//! Checks 1, 2 and 4 are skipped, with a message, where no C compiler (or `nm`, or `rustc`
//! and the rlib) is found.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cuhost::Result;
use cuhost::alloc::{Allocator, DeviceAllocation, StreamRef, using_allocator};
use cuhost::pool::capi::{self, AllocatorHandle};
use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The functions and their C pointer types, as the header must declare them.
const C_SIGNATURES: &[(&str, &str)] = &[
    ("cuda_core_get_allocator_handle", "cuda_core_allocator_handle *(*)(void)"),
    ("cuda_core_malloc", "void *(*)(cuda_core_allocator_handle *, size_t)"),
    ("cuda_core_free", "void (*)(cuda_core_allocator_handle *, void *)"),
    ("cuda_core_destroy_allocator_handle", "void (*)(cuda_core_allocator_handle *)"),
    ("cuda_core_get_last_error", "size_t (*)(char *, size_t)"),
];

/// The same functions on the Rust side, each coerced to the type that mirrors its C type
/// (`size_t` is `usize`, `void *` is `*mut c_void`, `char *` is `*mut c_char`).
type GetHandle = extern "C" fn() -> *mut AllocatorHandle;
type Malloc = unsafe extern "C" fn(*mut AllocatorHandle, usize) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut AllocatorHandle, *mut c_void);
type Destroy = unsafe extern "C" fn(*mut AllocatorHandle);
type LastError = unsafe extern "C" fn(*mut c_char, usize) -> usize;
const RUST_SIGNATURES: (GetHandle, Malloc, Free, Destroy, LastError) = (
    capi::cuda_core_get_allocator_handle,
    capi::cuda_core_malloc,
    capi::cuda_core_free,
    capi::cuda_core_destroy_allocator_handle,
    capi::cuda_core_get_last_error,
);

// The functions as C code links them: by name only.
unsafe extern "C" {
    fn cuda_core_get_allocator_handle() -> *mut c_void;
    fn cuda_core_malloc(handle: *mut c_void, size: usize) -> *mut c_void;
    fn cuda_core_free(handle: *mut c_void, ptr: *mut c_void);
    fn cuda_core_destroy_allocator_handle(handle: *mut c_void);
    fn cuda_core_get_last_error(buf: *mut c_char, len: usize) -> usize;
}

fn header_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// A scratch directory of this process for `test`, removed when the test passes.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        // The build's scratch directory, or the system's where the test binary was moved.
        let base = Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
            .filter(|d| d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("c_header-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The C compiler to use, unless it or the header is missing (then the reason is printed).
fn c_compiler() -> Option<String> {
    if !header_dir().join("cuda_core_memory.h").is_file() {
        println!("skipped: the header is not at {} (the test binary was moved)", header_dir().display());
        return None;
    }
    let cc =
        find_tool(&[std::env::var("CC").ok(), Some("cc".into()), Some("gcc".into()), Some("clang".into())]);
    if cc.is_none() {
        println!("skipped: no C compiler found (set CC)");
    }
    cc
}

/// The first of `candidates` that runs (`--version`), if any.
fn find_tool(candidates: &[Option<String>]) -> Option<String> {
    candidates
        .iter()
        .flatten()
        .find(|t| Command::new(t).arg("--version").output().is_ok_and(|o| o.status.success()))
        .cloned()
}

/// A translation unit that assigns each function to a pointer of its exact type and uses
/// every declaration of the header.
fn check_source() -> String {
    let mut src = String::from("#include \"cuda_core_memory.h\"\n\n");
    for (i, (name, ty)) in C_SIGNATURES.iter().enumerate() {
        // `T (*)(A)` becomes `T (*const f_i)(A) = name;`
        let declarator = ty.replacen("(*)", &format!("(*const f{i})"), 1);
        src += &format!("{declarator} = {name};\n");
    }
    src += "\nint cuda_core_header_check(void);\nint cuda_core_header_check(void) {\n";
    src += "    char why[128];\n    cuda_core_allocator_handle *h = f0();\n";
    src += "    void *p = f1(h, 1000);\n    f2(h, p);\n    f3(h);\n";
    src += "    return f4(why, sizeof why) == 0 ? 0 : 1;\n}\n";
    src
}

/// Compiles `source` (as `file`) with `compiler` and `flags` into an object; the diagnostics
/// on failure.
fn compile(
    dir: &Path,
    compiler: &str,
    flags: &[&str],
    file: &str,
    source: &str,
) -> std::result::Result<PathBuf, String> {
    let src = dir.join(file);
    std::fs::write(&src, source).unwrap();
    let obj = dir.join(format!("{file}.o"));
    let out = Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(header_dir())
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(obj)
    } else {
        Err(format!("{compiler} {flags:?} {file}:\n{}", String::from_utf8_lossy(&out.stderr)))
    }
}

#[test]
fn the_header_compiles_as_c_and_cpp_with_the_exact_signatures() {
    let _keep = RUST_SIGNATURES;
    let Some(cc) = c_compiler() else { return };
    let tmp = Scratch::new("compile");
    let strict = ["-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wstrict-prototypes"];
    compile(&tmp.0, &cc, &strict, "check.c", &check_source()).unwrap_or_else(|e| panic!("{e}"));

    // A wrong pointer type must be refused, or the check above proves nothing.
    let wrong =
        check_source().replace("size_t (*const f4)(char *, size_t)", "int (*const f4)(char *, size_t)");
    assert!(compile(&tmp.0, &cc, &strict, "wrong.c", &wrong).is_err(), "a mismatched signature compiled");

    match find_tool(&[
        std::env::var("CXX").ok(),
        Some("c++".into()),
        Some("g++".into()),
        Some("clang++".into()),
    ]) {
        Some(cxx) => {
            let flags = ["-std=c++11", "-Wall", "-Wextra", "-Wpedantic", "-Werror"];
            compile(&tmp.0, &cxx, &flags, "check.cpp", &check_source()).unwrap_or_else(|e| panic!("{e}"));
        }
        None => println!("skipped the C++ half: no C++ compiler found (set CXX)"),
    }
}

/// The symbols `nm` lists for `path` with `flag` (`-u`: undefined, `--defined-only`).
fn symbols(nm: &str, flag: &str, path: &Path) -> Vec<String> {
    let out = Command::new(nm).arg(flag).arg(path).output().unwrap();
    assert!(out.status.success(), "nm {flag} {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect()
}

#[test]
fn the_symbols_the_header_names_are_the_ones_cuda_core_defines() {
    // Keep the definitions in this binary (the linker drops what nothing uses).
    std::hint::black_box(RUST_SIGNATURES);
    let Some(cc) = c_compiler() else { return };
    let Some(nm) = find_tool(&[std::env::var("NM").ok(), Some("nm".into())]) else {
        println!("skipped: no nm found (set NM)");
        return;
    };
    let tmp = Scratch::new("symbols");
    let obj =
        compile(&tmp.0, &cc, &["-std=c11"], "symbols.c", &check_source()).unwrap_or_else(|e| panic!("{e}"));
    let mut needed: Vec<String> =
        symbols(&nm, "-u", &obj).into_iter().filter(|s| s.starts_with("cuda_core_")).collect();
    needed.sort();
    let mut declared: Vec<String> = C_SIGNATURES.iter().map(|(n, _)| n.to_string()).collect();
    declared.sort();
    assert_eq!(needed, declared, "the C object needs other symbols than the header is meant to declare");

    let exe = std::env::current_exe().unwrap();
    let defined = symbols(&nm, "--defined-only", &exe);
    for name in &declared {
        assert!(
            defined.iter().any(|d| d == name),
            "{name} is not defined by cuda-core (nm {})",
            exe.display()
        );
    }
}

/// An upstream that hands out addresses from a counter; panics when asked for 13 bytes.
#[derive(Default)]
struct Counter(Mutex<(u64, usize)>);

// SAFETY: test-only; the addresses come from a counter, each handed out once, and nothing ever
// reads or writes them (the C program only passes them back to `cuda_core_free`).
unsafe impl Allocator for Counter {
    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        assert_ne!(size, 13, "unlucky size");
        let mut s = self.0.lock().unwrap();
        s.0 += 0x1000;
        s.1 += 1;
        Ok(DeviceAllocation { ptr: 0x9000_0000 + s.0, size, token: 0 })
    }

    unsafe fn deallocate(&self, _a: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        self.0.lock().unwrap().1 -= 1;
        Ok(())
    }
}

/// Takes the last error through the C function, as a string.
fn last_error_message() -> Option<String> {
    // SAFETY: a null buffer of length 0 only asks for the length.
    let len = unsafe { cuda_core_get_last_error(std::ptr::null_mut(), 0) };
    if len == 0 {
        return None;
    }
    let mut buf = vec![0 as c_char; len + 1];
    // SAFETY: `buf` has `len + 1` writable bytes.
    let written = unsafe { cuda_core_get_last_error(buf.as_mut_ptr(), buf.len()) };
    assert_eq!(written, len);
    assert_eq!(buf[len], 0, "NUL-terminated");
    Some(String::from_utf8(buf[..len].iter().map(|&c| c as u8).collect()).unwrap())
}

#[test]
fn the_functions_link_by_name_and_behave_as_the_header_says() {
    let counter = Arc::new(Counter::default());
    let _current = using_allocator(counter.clone());
    // SAFETY: the handle is used only until it is destroyed at the end of this block.
    unsafe {
        let h = cuda_core_get_allocator_handle();
        assert!(!h.is_null());
        let p = cuda_core_malloc(h, 1000);
        let q = cuda_core_malloc(h, 1000);
        assert!(!p.is_null() && p != q);
        assert_eq!(counter.0.lock().unwrap().1, 2);
        assert!(cuda_core_malloc(h, 0).is_null());
        assert_eq!(last_error_message(), None, "0 bytes is not an error");

        cuda_core_free(h, p);
        assert_eq!(counter.0.lock().unwrap().1, 1);
        cuda_core_free(h, std::ptr::null_mut());
        assert_eq!(last_error_message(), None, "freeing NULL is not an error");
        cuda_core_free(h, p);
        let why = last_error_message().unwrap();
        assert!(why.contains("not allocated through this handle"), "{why}");

        // A panic in the allocator stays on the Rust side.
        assert!(cuda_core_malloc(h, 13).is_null());
        let why = last_error_message().unwrap();
        assert!(why.contains("unlucky size"), "{why}");

        // A short buffer gets a truncated, terminated message and the full length.
        cuda_core_malloc(std::ptr::null_mut(), 8);
        let mut small = [1 as c_char; 8];
        let full = cuda_core_get_last_error(small.as_mut_ptr(), small.len());
        assert!(full > 7 && small[7] == 0, "{full}");
        assert_eq!(cuda_core_get_last_error(small.as_mut_ptr(), small.len()), 0, "taken");

        // Destroying the handle frees what is still allocated through it.
        cuda_core_destroy_allocator_handle(h);
        assert_eq!(counter.0.lock().unwrap().1, 0);
        cuda_core_destroy_allocator_handle(std::ptr::null_mut());
    }
}

/// A C program that calls every function of the header through the names it declares. In a
/// fresh process no context is current, so the handle is NULL and the reason is kept; where
/// one is made after all, it allocates and frees a mebibyte.
const C_PROGRAM: &str = r#"
#include "cuda_core_memory.h"
#include <stdio.h>
#include <string.h>

int main(void) {
    char why[512];
    cuda_core_allocator_handle *h = cuda_core_get_allocator_handle();
    if (h == NULL) {
        size_t n = cuda_core_get_last_error(why, sizeof why);
        if (n == 0 || strlen(why) == 0) return 2;
        printf("no handle: %s\n", why);
    } else {
        void *p = cuda_core_malloc(h, 1 << 20);
        cuda_core_free(h, p);
        cuda_core_destroy_allocator_handle(h);
        printf("handle: allocated %s\n", p == NULL ? "nothing" : "1 MiB");
    }
    if (cuda_core_malloc(NULL, 8) != NULL) return 3;
    size_t n = cuda_core_get_last_error(why, sizeof why);
    if (n == 0 || strstr(why, "null") == NULL) return 4;
    printf("null handle: %s\n", why);
    cuda_core_free(NULL, NULL);
    cuda_core_destroy_allocator_handle(NULL);
    if (cuda_core_get_last_error(NULL, 0) == 0) return 5; /* the NULL handle of free was refused */
    return 0;
}
"#;

/// The newest cuda-core rlib in the directory of this test binary (the one it was linked
/// with, or a later build of the same source).
fn cuda_core_rlib() -> Option<PathBuf> {
    let deps = std::env::current_exe().ok()?.parent()?.to_path_buf();
    std::fs::read_dir(deps)
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("libcuhost-") && name.ends_with(".rlib")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, p)| p)
}

#[test]
fn a_c_program_links_against_cuda_core_and_runs() {
    let Some(cc) = c_compiler() else { return };
    let (Some(rustc), Some(rlib)) =
        (find_tool(&[std::env::var("RUSTC").ok(), Some("rustc".into())]), cuda_core_rlib())
    else {
        println!("skipped: no rustc or no cuda-core rlib next to this test to make a shared library of");
        return;
    };
    let tmp = Scratch::new("program");
    let dir = &tmp.0;
    let lib_src = dir.join("capi_check.rs");
    std::fs::write(&lib_src, "pub use cuhost::pool::capi::*;\n").unwrap();
    let lib = dir.join("libcapi_check.so");
    let deps = rlib.parent().unwrap();
    let out = Command::new(&rustc)
        .args(["--edition", "2024", "--crate-type", "cdylib", "--crate-name", "capi_check"])
        .arg("-L")
        .arg(format!("dependency={}", deps.display()))
        .arg("--extern")
        .arg(format!("cuhost={}", rlib.display()))
        .arg(&lib_src)
        .arg("-o")
        .arg(&lib)
        .output()
        .unwrap();
    if !out.status.success() {
        // A toolchain other than the one that built the rlib, or a half-written rlib.
        println!(
            "skipped: rustc could not make the shared library:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }

    let src = dir.join("program.c");
    std::fs::write(&src, C_PROGRAM).unwrap();
    let exe = dir.join("program");
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(header_dir())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", dir.display()))
        .arg("-lcapi_check")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the C program does not link against cuda-core:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let run = Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("null handle: ") && stdout.contains("the handle is null"), "{stdout}");
}
