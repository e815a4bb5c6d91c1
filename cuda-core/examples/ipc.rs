//! Device memory and an event shared with another process. The example starts itself again as
//! a child. The parent fills a buffer that is a block inside a larger pool allocation (so the
//! handle carries an offset), queues one more write, records an interprocess event after it and
//! sends both handles, as hexadecimal text, to the child's stdin without waiting. The child
//! opens the memory, makes its stream wait on the event, checks every element, writes new
//! values, closes the memory and says so on its stdout; only then does the parent check the
//! child's values and let go of the buffer.
//!
//! ```sh
//! cargo run --example ipc
//! ```

use cuhost::interop::ipc::{IpcEventHandle, IpcMemHandle};
use cuhost::memory::address_range;
use cuhost::pool::MemoryPool;
use cuhost::{Context, Device, DeviceBuffer, Error, Event, EventFlags, Stream, StreamFlags};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;

/// The argument that makes the executable the child.
const CHILD: &str = "--child";
/// Elements of the shared buffer.
const N: usize = 1 << 20;
/// What the parent's last write, which the event follows, puts in the second half.
const MARK: u32 = 0xe7e7_e7e7;

fn main() -> ExitCode {
    let (name, result) = match std::env::args().nth(1).as_deref() {
        Some(CHILD) => ("ipc (child)", child()),
        _ => ("ipc", run()),
    };
    // As in the other examples: the default pools' cache goes back before exiting.
    match result.and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fails the example with `message` unless `ok`.
fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("ipc example", message)) }
}

fn io(e: std::io::Error) -> Error {
    Error::invalid("ipc example", e.to_string())
}

/// What the child finds: `i * 7 + 3` in the first half, `MARK` in the second.
fn parent_values() -> Vec<u32> {
    (0..N as u32).map(|i| if (i as usize) < N / 2 { i * 7 + 3 } else { MARK }).collect()
}

/// What the child writes over `values`.
fn child_values(values: &[u32]) -> Vec<u32> {
    values.iter().map(|v| v.wrapping_mul(3).wrapping_add(1)).collect()
}

fn run() -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;

    // A freed 8 MiB block, split for a zeroed neighbour and then the shared buffer.
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    drop(DeviceBuffer::<u32>::new_in(&stream, 2 * N, pool.clone())?);
    let mut neighbour = DeviceBuffer::<u32>::new_in(&stream, 1024, pool.clone())?;
    neighbour.view_mut().memset_d32(0)?;
    let mut shared = DeviceBuffer::<u32>::new_in(&stream, N, pool)?;
    shared.copy_from(&(0..N as u32).map(|i| i * 7 + 3).collect::<Vec<_>>())?;
    // Queued, not waited for: the child waits for it through the event.
    shared.slice_mut(N / 2..)?.memset_d32_async(MARK, &stream)?;
    let event = Event::new(&ctx, EventFlags::INTERPROCESS | EventFlags::DISABLE_TIMING)?;
    event.record(&stream)?;

    let memory = IpcMemHandle::export(&shared.view())?;
    let (base, _) = address_range(shared.as_raw())?;
    check(memory.offset() > 0 && memory.offset() == shared.as_raw() - base, "the handle's offset is wrong")?;
    check(
        memory.size_in_bytes() == (N * 4) as u64,
        format!("the handle shares {} bytes", memory.size_in_bytes()),
    )?;
    println!(
        "exported {} bytes at offset {} into their allocation, and an event",
        memory.size_in_bytes(),
        memory.offset()
    );

    let exe = std::env::current_exe().map_err(io)?;
    let mut process = Command::new(exe)
        .arg(CHILD)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(io)?;
    let mut stdin = process.stdin.take().ok_or_else(|| io(std::io::ErrorKind::BrokenPipe.into()))?;
    let stdout = process.stdout.take().ok_or_else(|| io(std::io::ErrorKind::BrokenPipe.into()))?;
    let line = format!("{} {}", memory.to_hex(), IpcEventHandle::export(&event)?.to_hex());
    writeln!(stdin, "{line}").and_then(|()| stdin.flush()).map_err(io)?;
    println!("sent both handles to child {} ({} bytes of hex)", process.id(), line.len());

    // `shared` stays allocated until the child has closed its mapping and said so.
    let mut answer = String::new();
    BufReader::new(stdout).read_line(&mut answer).map_err(io)?;
    drop(stdin);
    let status = process.wait().map_err(io)?;
    let Some(report) = answer.trim().strip_prefix("done ") else {
        return Err(Error::invalid(
            "ipc example",
            format!("the child answered {answer:?} and ended: {status}"),
        ));
    };
    println!("child: {report}");
    check(status.success(), format!("the child failed: {status}"))?;
    check(shared.to_vec()? == child_values(&parent_values()), "the child's writes are not in the buffer")?;
    check(neighbour.to_vec()?.iter().all(|&v| v == 0), "the block next to the shared one was written")?;
    println!("parent: all {N} elements hold the child's values; the neighbouring block is untouched");
    drop((shared, neighbour, event));
    let deferred = ctx.take_deferred_errors();
    check(deferred.is_empty(), format!("errors kept from drops: {deferred:?}"))
}

fn child() -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(io)?;
    let Some((memory, event)) = line.trim().split_once(' ') else {
        return Err(Error::invalid("ipc example", format!("expected two handles, got {line:?}")));
    };
    let memory = IpcMemHandle::from_hex(memory)?;
    let event = IpcEventHandle::from_hex(event)?.open(&ctx)?;
    stream.wait_event(&event)?; // the parent's last write comes before anything queued here
    let report = {
        // SAFETY: the parent keeps the memory until this process answers, after the buffer is
        // dropped (which closes it); the event orders the parent's writes before these reads.
        let mut shared = unsafe { memory.open::<u32>(&stream)? };
        check(shared.len() == N, format!("opened {} elements", shared.len()))?;
        let values = shared.to_vec()?;
        let wrong = values.iter().zip(parent_values()).filter(|(got, want)| **got != *want).count();
        check(wrong == 0, format!("{wrong} of {N} elements differ from what the parent wrote"))?;
        shared.copy_from(&child_values(&values))?;
        format!("opened {N} elements at offset {}, all as written, wrote new values", memory.offset())
    };
    drop(event);
    let deferred = ctx.take_deferred_errors();
    check(deferred.is_empty(), format!("errors kept from drops: {deferred:?}"))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "done {report}").and_then(|()| out.flush()).map_err(io)
}
