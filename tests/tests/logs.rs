//! The driver's error log: calls that fail are logged; a cursor reads the messages written
//! since it was made and moves past them; the whole buffer and a file dump hold them too; a
//! subscription receives them as they are written, and no more once dropped.

use cuda_tests::{TestResult, device_zero, ensure, ensure_eq, gpu};
use cuhost::driver_sys as sys;
use cuhost::logs::{self, Cursor, LogLevel};
use std::sync::{Arc, Mutex};

/// Makes calls that the driver refuses (wrong values, no memory touched) until the log grows;
/// returns the text the cursor read.
fn provoke(cursor: &mut Cursor) -> Result<String, Box<dyn std::error::Error>> {
    let attempts: [fn() -> sys::CUresult; 3] = [
        || {
            let mut ptr = 0;
            // SAFETY: a valid out-pointer; 0 bytes, which the driver refuses.
            unsafe { sys::cuMemAlloc(&mut ptr, 0) }
        },
        || {
            let mut value = 0;
            // SAFETY: a valid out-pointer; an attribute that does not exist.
            unsafe { sys::cuDeviceGetAttribute(&mut value, sys::CUdevice_attribute(99_999), 0) }
        },
        || {
            // SAFETY: a limit that does not exist; nothing is changed.
            unsafe { sys::cuCtxSetLimit(sys::CUlimit(99_999), 0) }
        },
    ];
    for attempt in attempts {
        ensure!(attempt() != sys::CUresult::CUDA_SUCCESS, "a call meant to fail succeeded");
        let text = cursor.read()?;
        if !text.trim().is_empty() {
            return Ok(text);
        }
    }
    Err("none of the refused calls was logged".into())
}

fn failed_calls_are_logged_read_back_and_delivered() -> TestResult {
    let (_device, _ctx, _stream) = device_zero()?;
    let seen: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let keep = seen.clone();
    let subscription = logs::subscribe(move |level, text| {
        if let Ok(mut s) = keep.lock() {
            s.push((level, text.to_string()));
        }
    })?;
    let mut cursor = Cursor::now()?;
    let text = provoke(&mut cursor)?;
    let after = cursor.read()?;
    ensure!(after.trim().is_empty(), "the cursor moved past what it read: {after:?}");
    let delivered = seen.lock().map_err(|_| "poisoned")?.clone();
    ensure!(!delivered.is_empty(), "the subscription received nothing; the log holds:\n{text}");
    let (_, first) = &delivered[0];
    ensure!(text.contains(first.as_str()), "the delivered message {first:?} is in the log:\n{text}");
    ensure!(logs::all()?.contains(first.as_str()), "the whole buffer holds it too");
    // A dump to a file, from a cursor made before another refused call.
    let mut before = Cursor::now()?;
    let dropped_count = delivered.len();
    drop(subscription);
    provoke(&mut Cursor::now()?)?;
    let path = std::env::temp_dir().join(format!("cuda-core-logs-{}.txt", std::process::id()));
    before.dump_to_file(&path)?;
    let file = std::fs::read_to_string(&path)?;
    let _ = std::fs::remove_file(&path);
    ensure!(!file.trim().is_empty(), "the file dump holds the new message");
    ensure_eq!(seen.lock().map_err(|_| "poisoned")?.len(), dropped_count, "nothing delivered after the drop");
    // H8: the closure was kept for the rest of the process; it is freed by the drop now.
    ensure_eq!(Arc::strong_count(&seen), 1, "the closure, and what it captured, was freed by the drop");
    Ok(())
}

fn main() {
    cuda_tests::run(&[gpu(
        "failed_calls_are_logged_read_back_and_delivered",
        failed_calls_are_logged_read_back_and_delivered,
    )]);
}
