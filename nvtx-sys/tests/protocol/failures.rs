//! No tool, failing tools, and threads racing the first call.

use crate::{Outcome, calls_logged, check, check_eq, tool_init_count, wide};
use cuhost_nvtx_sys::protocol::{Injection, injection};
use cuhost_nvtx_sys::*;
use std::sync::{Arc, Barrier};

/// Calls one function of every module and checks each returns its no-tool default.
fn every_function_returns_its_default() -> Outcome {
    let ex = nvtxEventAttributes_t::default();
    let w = wide("w");
    // SAFETY: live strings and attributes; null handles are what the defaults give back.
    unsafe {
        check_eq!(nvtxRangePushA(c"a".as_ptr()), -2);
        check_eq!(nvtxRangePushW(w.as_ptr()), -2);
        check_eq!(nvtxRangePushEx(&ex), -2);
        check_eq!(nvtxRangePop(), -2);
        check_eq!(nvtxRangeStartA(c"a".as_ptr()), 0);
        check_eq!(nvtxRangeStartW(w.as_ptr()), 0);
        check_eq!(nvtxRangeStartEx(&ex), 0);
        nvtxRangeEnd(0);
        nvtxMarkA(c"a".as_ptr());
        nvtxMarkEx(&ex);
        nvtxNameCategoryA(1, c"a".as_ptr());
        nvtxNameOsThreadA(1, c"a".as_ptr());
        nvtxNameCuDeviceA(0, c"a".as_ptr());
        nvtxNameCudaStreamA(std::ptr::null_mut(), c"a".as_ptr());
        nvtxInitialize(std::ptr::null());
        let d = nvtxDomainCreateA(c"a".as_ptr());
        check!(d.is_null(), "nvtxDomainCreateA gave {d:p}");
        check!(nvtxDomainRegisterStringA(d, c"a".as_ptr()).is_null(), "registered string handle");
        check_eq!(nvtxDomainRangePushEx(d, &ex), -2);
        check_eq!(nvtxDomainRangePop(d), -2);
        check_eq!(nvtxDomainRangeStartEx(d, &ex), 0);
        check!(nvtxDomainResourceCreate(d, std::ptr::null_mut()).is_null(), "resource handle");
        let s = nvtxDomainSyncUserCreate(d, std::ptr::null());
        check!(s.is_null(), "sync user handle");
        nvtxDomainSyncUserAcquireStart(s);
        nvtxDomainDestroy(d);
    }
    Ok(())
}

pub fn defaults_without_a_tool() -> Outcome {
    check_eq!(injection(), None);
    every_function_returns_its_default()?;
    check_eq!(injection(), Some(&Injection::NoInjectionLibrary));
    check_eq!(injection().map(Injection::code), Some(NVTX_ERR_NO_INJECTION_LIBRARY_AVAILABLE));
    check_eq!(protocol::injection_nvtx_version(), None);
    Ok(())
}

pub fn tool_whose_init_returns_0() -> Outcome {
    every_function_returns_its_default()?;
    check_eq!(tool_init_count(), 1);
    // The tool wrote its functions into the slots before failing; none of them may be called.
    check_eq!(calls_logged(), Vec::<String>::new());
    check!(matches!(injection(), Some(Injection::InitFailed { .. })), "{:?}", injection());
    check_eq!(injection().map(Injection::code), Some(NVTX_ERR_INIT_FAILED_LIBRARY_ENTRY_POINT));
    Ok(())
}

pub fn path_that_does_not_exist() -> Outcome {
    every_function_returns_its_default()?;
    match injection() {
        Some(Injection::LoadFailed { path, reason }) => {
            check!(path.to_string_lossy().contains("libnvtx-tool-that-is-not-there"), "{path:?}");
            check!(!reason.is_empty(), "the loader's reason is kept");
        }
        other => return Err(format!("injection() = {other:?}")),
    }
    check_eq!(injection().map(Injection::code), Some(NVTX_ERR_INIT_LOAD_LIBRARY));
    Ok(())
}

pub fn library_without_the_entry_point() -> Outcome {
    every_function_returns_its_default()?;
    check!(matches!(injection(), Some(Injection::MissingEntryPoint { .. })), "{:?}", injection());
    check_eq!(injection().map(Injection::code), Some(NVTX_ERR_INIT_MISSING_LIBRARY_ENTRY_POINT));
    Ok(())
}

/// The tool sleeps 200 ms in its initialisation; eight threads make their first NVTX call at
/// once. Exactly one initialises; the others wait, and every call reaches the tool.
pub fn eight_threads_race_the_first_call() -> Outcome {
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                // SAFETY: a live NUL-terminated string.
                let level = unsafe { nvtxRangePushA(c"race".as_ptr()) };
                // SAFETY: no arguments.
                let popped = unsafe { nvtxRangePop() };
                (level, popped)
            })
        })
        .collect();
    let results: Vec<(i32, i32)> = threads.into_iter().map(|t| t.join().unwrap_or((-100, -100))).collect();
    // Each thread has its own nesting level in the tool: push returns 0, pop returns 0.
    check_eq!(results, vec![(0, 0); 8]);
    check_eq!(tool_init_count(), 1);
    let calls = calls_logged();
    check_eq!(calls.iter().filter(|l| *l == r#"CORE.RangePushA "race""#).count(), 8);
    check_eq!(calls.iter().filter(|l| *l == "CORE.RangePop").count(), 8);
    check!(injection().is_some_and(Injection::is_attached), "{:?}", injection());
    Ok(())
}
