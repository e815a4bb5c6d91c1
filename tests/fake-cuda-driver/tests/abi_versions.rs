//! Every `cuda-core` call whose driver ABI changed after CUDA 12.0, against the fake driver
//! emulating 12.0, 12.2, 12.4, 12.8 and 13.0: the newest ABI the driver has is the one called,
//! and a call no ABI of the driver can serve is a load error naming the call, the version it
//! needs and the version installed, with nothing called. Each version runs in its own process.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

const VERSIONS: [i32; 5] = [12000, 12020, 12040, 12080, 13000];

fn fake_driver() -> PathBuf {
    let probe = PathBuf::from(env!("CARGO_BIN_EXE_abi-probe"));
    let dir = probe.parent().map(PathBuf::from).unwrap_or_default();
    let name = if cfg!(windows) { "fake_cuda_driver.dll" } else { "libfake_cuda_driver.so" };
    // `cargo test` rebuilds the copy in deps/; one next to the binaries may be left from an
    // earlier `cargo build`. The newer one is this build's.
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let (direct, in_deps) = (dir.join(name), dir.join("deps").join(name));
    if modified(&direct) > modified(&in_deps) { direct } else { in_deps }
}

fn probe(version: i32) -> BTreeMap<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_abi-probe"))
        .env_remove("CUDA_API_PER_THREAD_DEFAULT_STREAM")
        .env_remove("FAKE_CUDA_RESOLVE_DELAY_MS")
        .env("FAKE_CUDA_DRIVER_VERSION", version.to_string())
        .env("CUDA_DRIVER_LIBRARY_PATH", fake_driver())
        .output()
        .unwrap_or_else(|e| panic!("cannot run the probe: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "probe at {version} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("setup=err"), "probe at {version}: {stdout}");
    stdout.lines().filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

/// Checks one step: its result and the entry points it reached.
fn expect(r: &BTreeMap<String, String>, version: i32, step: &str, result: &str, abi: &str) {
    assert_eq!(r[step], result, "{step} on driver {version}");
    assert_eq!(r[&format!("{step}.abi")], abi, "{step} on driver {version}: ABI reached");
}

fn too_old(call: &str, needed: i32, installed: i32) -> String {
    format!("err:too-old call={call} symbol={call} needed={needed} installed={installed}")
}

/// A call with one ABI, introduced at `needed`: reached on newer drivers, refused on older.
fn single(r: &BTreeMap<String, String>, v: i32, step: &str, call: &str, needed: i32, ok: &str, abi: &str) {
    if v >= needed {
        expect(r, v, step, ok, abi);
    } else {
        expect(r, v, step, &too_old(call, needed, v), "");
    }
}

#[test]
fn every_versioned_call_takes_the_newest_abi_the_driver_has() {
    for v in VERSIONS {
        let r = probe(v);
        if v >= 12080 {
            expect(&r, v, "elapsed", "ok:12.5", "cuEventElapsedTime@12080");
        } else {
            expect(&r, v, "elapsed", "ok:2.0", "cuEventElapsedTime@2000");
        }
        // 12.4 would hand out its 11.4 ABI (with affinity parameters) if asked for 12.5's.
        if v >= 12050 {
            expect(&r, v, "create", "ok:2", "cuCtxCreate@12050 params_null=true flags=0 dev=2");
        } else {
            expect(&r, v, "create", "ok:2", "cuCtxCreate@3020 flags=0 dev=2");
        }
        if v >= 13000 {
            expect(&r, v, "from_raw", "ok:2", "cuCtxGetDevice@13000 ctx=0x2002");
        } else {
            expect(&r, v, "from_raw", "ok:2", "cuCtxGetDevice@2000");
        }
        if v >= 12020 {
            expect(&r, v, "advise_device", "ok:()", "cuMemAdvise@12020 advice=3 location=1:2");
            expect(&r, v, "advise_host", "ok:()", "cuMemAdvise@12020 advice=5 location=2:0");
            expect(&r, v, "advise_numa", "ok:()", "cuMemAdvise@12020 advice=3 location=3:0");
            expect(&r, v, "prefetch_device", "ok:()", "cuMemPrefetchAsync@12020 location=1:2 flags=0");
            expect(&r, v, "prefetch_host", "ok:()", "cuMemPrefetchAsync@12020 location=2:0 flags=0");
            expect(&r, v, "prefetch_numa", "ok:()", "cuMemPrefetchAsync@12020 location=4:0 flags=0");
        } else {
            expect(&r, v, "advise_device", "ok:()", "cuMemAdvise@8000 advice=3 device=2");
            expect(&r, v, "advise_host", "ok:()", "cuMemAdvise@8000 advice=5 device=-1");
            expect(&r, v, "advise_numa", &too_old("cuMemAdvise", 12020, v), "");
            expect(&r, v, "prefetch_device", "ok:()", "cuMemPrefetchAsync@8000 device=2");
            expect(&r, v, "prefetch_host", "ok:()", "cuMemPrefetchAsync@8000 device=-1");
            expect(&r, v, "prefetch_numa", &too_old("cuMemPrefetchAsync", 12020, v), "");
        }
    }
}

#[test]
fn calls_with_one_abi_are_refused_on_older_drivers_and_name_the_versions() {
    for v in VERSIONS {
        let r = probe(v);
        single(&r, v, "set_flags", "cuCtxSetFlags", 12010, "ok:()", "cuCtxSetFlags@12010 flags=0");
        let enumerate = "cuModuleGetFunctionCount@12040;cuModuleEnumerateFunctions@12040;\
                         cuFuncGetParamInfo@12040 index=0;cuFuncGetParamInfo@12040 index=1";
        single(&r, v, "module_functions", "cuModuleGetFunctionCount", 12040, "ok:1", enumerate);
        single(&r, v, "function_name", "cuFuncGetName", 12030, "ok:\"fake_function\"", "cuFuncGetName@12030");
        let param = "cuFuncGetParamInfo@12040 index=0";
        single(&r, v, "function_param_info", "cuFuncGetParamInfo", 12040, "ok:Some((0, 8))", param);
        single(&r, v, "function_load", "cuFuncLoad", 12040, "ok:()", "cuFuncLoad@12040");
        single(&r, v, "function_is_loaded", "cuFuncIsLoaded", 12040, "ok:true", "cuFuncIsLoaded@12040");
        let kernels = "cuLibraryGetKernelCount@12040;cuLibraryEnumerateKernels@12040";
        single(&r, v, "library_kernels", "cuLibraryGetKernelCount", 12040, "ok:1", kernels);
        single(&r, v, "kernel_name", "cuKernelGetName", 12030, "ok:\"fake_kernel\"", "cuKernelGetName@12030");
        let param = "cuKernelGetParamInfo@12040 index=0";
        single(&r, v, "kernel_param_info", "cuKernelGetParamInfo", 12040, "ok:Some((0, 8))", param);
    }
}

#[test]
fn multicast_objects_bind_keep_and_release_memory_on_the_fake_driver() {
    for v in VERSIONS {
        let r = probe(v);
        if v < 12010 {
            expect(&r, v, "multicast_granularity", &too_old("cuMulticastGetGranularity", 12010, v), "");
            expect(&r, v, "multicast_create", &too_old("cuMulticastCreate", 12010, v), "");
            continue;
        }
        expect(&r, v, "multicast_granularity", "ok:2097152", "cuMulticastGetGranularity@12010 option=1");
        expect(&r, v, "multicast_create", "ok:()", "cuMulticastCreate@12010 devices=2 size=0x400000");
        expect(&r, v, "multicast_add_device", "ok:()", "cuMulticastAddDevice@12010 dev=2");
        let bind = "cuMulticastBindMem@12010 offset=0x200000 mem_offset=0x0 size=0x200000 flags=0";
        expect(&r, v, "multicast_bind_mem", "ok:()", bind);
        let refused = &r["multicast_bind_outside"];
        assert!(refused.contains("do not fit a multicast object of 4194304 bytes"), "{refused}");
        assert_eq!(r["multicast_bind_outside.abi"], "", "a refused binding called the driver");
        expect(&r, v, "multicast_memory_kept", "ok:()", "");
        let unbind = "cuMulticastUnbind@12010 dev=2 offset=0x200000 size=0x200000";
        expect(&r, v, "multicast_unbind", "ok:()", unbind);
        let released = &r["multicast_release.abi"];
        assert_eq!(
            released.matches("cuMemRelease@10020").count(),
            2,
            "object and memory released: {released}"
        );
    }
}
