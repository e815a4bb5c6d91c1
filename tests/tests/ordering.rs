//! `StreamOrdering::Implicit`: the crate orders a use of a buffer on one stream after the last
//! write on another, and a write after the reads since (cudarc's semantics), where the default
//! leaves that order to the program. The writer (or reader) is held back by a host function
//! that sleeps, so a missing order shows as wrong values; without the mode the same program is
//! a race of its own, which the checking driver reports as category (d).

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, device_zero, ensure, ensure_eq, gpu, gpu_needing, hold};
use cuhost::stream::set_stream_ordering;
use cuhost::{DeviceBuffer, Stream, StreamFlags, StreamOrdering};
use std::process::Command;

/// The child's role: `implicit` or `explicit`; it runs the write-then-read program and exits.
const CHILD_ENV: &str = "CUHOST_ORDERING_CHILD";
/// The checking driver of the bundle (`.gpu/run` sets it).
const CHECKER_ENV: &str = "CUDA_TEST_CHECKING_DRIVER";
/// How long the host function holds the first stream back.
const HOLD_MS: u64 = 300;

fn main() {
    if let Ok(role) = std::env::var(CHILD_ENV) {
        let code = match child(&role) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("the child failed: {e:?}");
                1
            }
        };
        std::process::exit(code);
    }
    cuda_tests::run(&[
        gpu("a_read_on_a_third_stream_waits_for_the_write_held_back", read_waits_for_the_write),
        gpu("a_write_waits_for_the_reads_on_other_streams_held_back", write_waits_for_the_reads),
        gpu("a_kernel_argument_by_exclusive_borrow_is_a_write", exclusive_kernel_argument_is_a_write),
        gpu("uses_on_the_own_stream_only_queue_nothing_more", own_stream_only_is_unchanged),
        gpu_needing(
            "the_checker_reports_the_race_without_the_mode_and_nothing_with_it",
            checking_driver,
            checker_sees_what_the_mode_orders,
        ),
    ]);
}

/// Sets the process's ordering for the test, and back to the default when dropped; one test at
/// a time holds it (the ordering is the whole process's, and a harness may run tests on
/// several threads).
struct Mode(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Mode {
    fn set(ordering: StreamOrdering) -> Mode {
        let guard = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        set_stream_ordering(ordering);
        Mode(guard)
    }
}

impl Drop for Mode {
    fn drop(&mut self) {
        set_stream_ordering(StreamOrdering::Explicit);
    }
}

/// A buffer of `n` zeros on `owner`, written with 7 on `writer` (held back first), then read on
/// `reader` into a buffer of its own and, synchronously, on the owner's stream: the two reads.
fn write_then_read(
    owner: &Stream,
    writer: &Stream,
    reader: &Stream,
    n: usize,
) -> cuhost::Result<[Vec<u32>; 2]> {
    let mut buffer = DeviceBuffer::<u32>::zeroed(owner, n)?;
    owner.synchronize()?;
    hold(writer, HOLD_MS)?;
    buffer.view_mut().memset_d32_async(7, writer)?;
    let mut copy = DeviceBuffer::<u32>::zeroed(reader, n)?;
    copy.view_mut().copy_from_device_async(&buffer.view(), reader)?;
    let on_reader = copy.to_vec()?;
    let on_owner = buffer.to_vec()?;
    Ok([on_reader, on_owner])
}

fn three_streams() -> cuhost::Result<(cuhost::Context, [Stream; 3])> {
    let (_, ctx, owner) = device_zero()?;
    let s = || Stream::new(&ctx, StreamFlags::NON_BLOCKING);
    Ok((ctx.clone(), [owner, s()?, s()?]))
}

fn read_waits_for_the_write() -> TestResult {
    let _mode = Mode::set(StreamOrdering::Implicit);
    let (_ctx, [owner, writer, reader]) = three_streams()?;
    let [on_reader, on_owner] = write_then_read(&owner, &writer, &reader, 1 << 20)?;
    ensure!(
        on_reader.iter().all(|&v| v == 7),
        "the reader's copy ran before the write: {:?}",
        &on_reader[..4]
    );
    ensure!(on_owner.iter().all(|&v| v == 7), "the owner's read ran before the write: {:?}", &on_owner[..4]);
    Ok(())
}

fn write_waits_for_the_reads() -> TestResult {
    let _mode = Mode::set(StreamOrdering::Implicit);
    let (_ctx, [owner, reader, writer]) = three_streams()?;
    let n = 1 << 20;
    let mut buffer = DeviceBuffer::from_slice(&owner, &vec![1u32; n])?;
    // The read is held back; the write on a third stream must wait for it.
    let mut copy = DeviceBuffer::<u32>::zeroed(&reader, n)?;
    reader.synchronize()?;
    hold(&reader, HOLD_MS)?;
    copy.view_mut().copy_from_device_async(&buffer.view(), &reader)?;
    buffer.view_mut().memset_d32_async(9, &writer)?;
    let read = copy.to_vec()?;
    ensure!(read.iter().all(|&v| v == 1), "the write ran before the read it follows: {:?}", &read[..4]);
    writer.synchronize()?;
    ensure!(buffer.to_vec()?.iter().all(|&v| v == 9), "the write was lost");
    Ok(())
}

fn exclusive_kernel_argument_is_a_write() -> TestResult {
    let _mode = Mode::set(StreamOrdering::Implicit);
    let (ctx, [owner, writer, reader]) = three_streams()?;
    let module = cuhost::Module::from_ptx(&ctx, kernels::SPIN_PTX)?;
    let fill = module.function("spin_fill")?;
    let n = 1u32 << 20;
    let mut buffer = DeviceBuffer::<u32>::zeroed(&owner, n as usize)?;
    owner.synchronize()?;
    hold(&writer, HOLD_MS)?;
    let config = cuhost::LaunchConfig::for_elements(n, 256);
    // SAFETY: spin_fill takes (u32*, u32, u32, u64) and writes `n` elements from the pointer
    // (after 0 ns); the buffer holds `n`.
    unsafe { fill.launch(&writer, &config, (&mut buffer, &n, &5u32, &0u64)) }?;
    let mut copy = DeviceBuffer::<u32>::zeroed(&reader, n as usize)?;
    copy.view_mut().copy_from_device_async(&buffer.view(), &reader)?;
    let read = copy.to_vec()?;
    ensure!(read.iter().all(|&v| v == 5), "the read ran before the kernel that wrote: {:?}", &read[..4]);
    Ok(())
}

fn own_stream_only_is_unchanged() -> TestResult {
    let _mode = Mode::set(StreamOrdering::Implicit);
    ensure_eq!(cuhost::stream::stream_ordering(), StreamOrdering::Implicit);
    let (_ctx, [owner, ..]) = three_streams()?;
    let mut buffer = DeviceBuffer::<u32>::zeroed(&owner, 1024)?;
    for v in 0..4 {
        buffer.view_mut().memset_d32_async(v, &owner)?;
    }
    ensure!(buffer.to_vec()?.iter().all(|&v| v == 3), "stream order was not kept");
    drop(_mode);
    ensure_eq!(cuhost::stream::stream_ordering(), StreamOrdering::Explicit);
    Ok(())
}

fn checking_driver() -> Result<(), String> {
    match std::env::var(CHECKER_ENV) {
        Ok(path) if std::path::Path::new(&path).exists() => Ok(()),
        Ok(path) => Err(format!("{CHECKER_ENV} names {path}, which does not exist")),
        Err(_) => Err(format!("needs the checking driver: {CHECKER_ENV} (set by .gpu/run)")),
    }
}

/// The count of category (d) in the summary a child under the checking driver printed.
fn races_reported(role: &str) -> Result<u64, cuda_tests::Failed> {
    let driver = std::env::var(CHECKER_ENV)?;
    let out = Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, role)
        .env("CUDA_DRIVER_LIBRARY_PATH", driver)
        .env("NCCL_NVLS_ENABLE", "0")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "the {role} child failed ({}):\n{stderr}", out.status);
    // The summary line: `cuda-check:      2  (d) race in the program: ...`.
    let count = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("cuda-check:"))
        .filter(|l| l.contains("(d) race in the program"))
        .find_map(|l| l.split_whitespace().next().and_then(|n| n.parse().ok()));
    let count = count.ok_or_else(|| format!("no summary of category (d) from the checker:\n{stderr}"))?;
    println!("{role}: {count} reports of (d)");
    Ok(count)
}

fn checker_sees_what_the_mode_orders() -> TestResult {
    let explicit = races_reported("explicit")?;
    ensure!(explicit > 0, "the checker saw no race in the program without the mode");
    ensure_eq!(races_reported("implicit")?, 0);
    Ok(())
}

/// The write-then-read program in the child, under the checking driver; the explicit child's
/// values are whatever the race gives, and not looked at.
fn child(role: &str) -> cuhost::Result<()> {
    let ordering = match role {
        "implicit" => StreamOrdering::Implicit,
        _ => StreamOrdering::Explicit,
    };
    let _mode = Mode::set(ordering);
    let (_ctx, [owner, writer, reader]) = three_streams()?;
    let [on_reader, on_owner] = write_then_read(&owner, &writer, &reader, 1 << 16)?;
    if ordering == StreamOrdering::Implicit && !(on_reader.iter().chain(&on_owner).all(|&v| v == 7)) {
        return Err(cuhost::Error::invalid(
            "child",
            "the implicit child read values the write did not leave",
        ));
    }
    Ok(())
}
