//! `cuhost::interop::ipc` and VMM handles across processes: this binary starts itself as a
//! child (with `CHILD_ENV` naming the child's part), hands it handles through its stdin and
//! reads answers from its stdout. Memory is written and read both ways — a plain buffer, a
//! block inside a larger `MemoryPool` allocation (the handle carries the offset), VMM memory
//! whose POSIX descriptor crosses a Unix socket — and an IPC event orders the child's work
//! before the parent's. A Python process with CuPy reads and writes a pooled block too, where
//! one is installed (reported ignored otherwise).

use cuda_tests::child::Child;
use cuda_tests::fd_passing::{receive_fd, send_fd};
use cuda_tests::{Failed, TestResult, device_zero, ensure, ensure_eq, gpu, gpu_needing};
use cuhost::alloc::{Allocator, DeviceAllocator};
use cuhost::interop::ipc::{IpcEventHandle, IpcMemHandle};
use cuhost::memory::address_range;
use cuhost::mempool::Access;
use cuhost::pool::MemoryPool;
use cuhost::vmm::{
    AccessGrant, AddressRange, AllocationProperties, Granularity, HandleTypes, PhysicalMemory,
};
use cuhost::{Context, Device, DeviceBuffer, Error, Event, EventFlags, Stream};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Set in the environment of a child process; its value names the child's part.
const CHILD_ENV: &str = "CUDA_CORE_IPC_CHILD";

/// Elements of the shared buffers.
const N: usize = 1 << 18;

fn main() {
    if let Ok(role) = std::env::var(CHILD_ENV) {
        let outcome = child::run(&role);
        cuda_tests::release_default_pools();
        let code = match outcome {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("ipc child ({role}): {e}");
                1
            }
        };
        std::process::exit(code);
    }
    cuda_tests::run(&[
        gpu("a_buffer_is_written_and_read_both_ways", a_buffer_is_written_and_read_both_ways),
        gpu("a_pooled_block_travels_with_its_offset", a_pooled_block_travels_with_its_offset),
        gpu("an_ipc_event_orders_the_childs_work", an_ipc_event_orders_the_childs_work),
        gpu("vmm_memory_is_shared_through_a_posix_fd", vmm_memory_is_shared_through_a_posix_fd),
        gpu("bad_handles_are_refused_with_typed_errors", bad_handles_are_refused_with_typed_errors),
        gpu_needing("cupy_reads_and_writes_a_pooled_block", python::available, python::cupy_reads_and_writes),
    ]);
}

/// The values a side writes first: small enough that `transform` does not overflow.
fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i * 7 + seed).collect()
}

/// What the other side writes over what it read.
fn transform(values: &[u32]) -> Vec<u32> {
    values.iter().map(|v| v * 3 + 1).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The parent's side of the `memory` exchange over `shared` (holding `pattern(N, seed)`):
/// the child checks and transforms it, then shares a buffer of its own, which the parent
/// checks and transforms for the child to check.
fn exchange(shared: &DeviceBuffer<u32>, seed: u32, stream: &Stream) -> TestResult {
    let handle = IpcMemHandle::export(&shared.view())?;
    let (_, allocation) = address_range(shared.as_raw())?;
    let past_end = IpcMemHandle::from_parts(handle.handle(), allocation as u64 - 4, handle.size_in_bytes());
    let mut child = Child::spawn(CHILD_ENV, "memory")?;
    child.send(&format!("{} {} {seed}", handle.to_hex(), past_end.to_hex()))?;
    let answer = child.receive()?;
    let Some(theirs) = answer.strip_prefix("ok ") else {
        return Err(format!("the child answered {answer:?}").into());
    };
    ensure!(
        shared.to_vec()? == transform(&pattern(N, seed)),
        "the child's writes are not in the shared buffer"
    );
    let theirs = IpcMemHandle::from_hex(theirs)?;
    {
        // SAFETY: the child keeps its buffer until it reads "written", after this is dropped.
        let mut opened = unsafe { theirs.open::<u32>(stream)? };
        ensure_eq!(opened.len(), N);
        ensure!(opened.to_vec()? == pattern(N, seed + 1), "the child's buffer reads other values");
        opened.copy_from(&transform(&pattern(N, seed + 1)))?;
    }
    child.send("written")?;
    ensure_eq!(child.receive()?, "ok");
    child.finish()
}

fn a_buffer_is_written_and_read_both_ways() -> TestResult {
    let (_, ctx, stream) = device_zero()?;
    let mut shared = DeviceBuffer::<u32>::new_in(&stream, N, Arc::new(DeviceAllocator::new(&ctx)))?;
    shared.copy_from(&pattern(N, 11))?;
    exchange(&shared, 11, &stream)?;
    drop(shared);
    let deferred = ctx.take_deferred_errors();
    ensure!(deferred.is_empty(), "{deferred:?}");
    Ok(())
}

/// `n` zeroed elements from `allocator`.
fn zeroed_in(stream: &Stream, n: usize, allocator: Arc<dyn Allocator>) -> Result<DeviceBuffer<u32>, Error> {
    let mut buffer = DeviceBuffer::new_in(stream, n, allocator)?;
    buffer.view_mut().memset_d32(0)?;
    Ok(buffer)
}

/// A pool whose second block of `N` elements lies inside one larger upstream allocation.
fn pooled_pair(ctx: &Context, stream: &Stream) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u32>), Failed> {
    let pool = Arc::new(MemoryPool::new(ctx)?);
    drop(DeviceBuffer::<u32>::new_in(stream, 4 * N, pool.clone())?);
    let first = zeroed_in(stream, N, pool.clone())?;
    let second = DeviceBuffer::<u32>::new_in(stream, N, pool)?;
    let (base, size) = address_range(second.as_raw())?;
    ensure!(second.as_raw() > base, "the pool did not split its block: {:#x} is the base", base);
    ensure!(size >= 2 * N * 4, "the base allocation has {size} bytes");
    Ok((first, second))
}

fn a_pooled_block_travels_with_its_offset() -> TestResult {
    let (_, ctx, stream) = device_zero()?;
    let (first, mut second) = pooled_pair(&ctx, &stream)?;
    second.copy_from(&pattern(N, 23))?;
    let handle = IpcMemHandle::export(&second.view())?;
    let (base, _) = address_range(second.as_raw())?;
    ensure_eq!(handle.offset(), second.as_raw() - base);
    ensure_eq!(handle.size_in_bytes(), (N * 4) as u64);
    ensure_eq!(address_range(first.as_raw())?.0, base, "both blocks lie in one allocation");
    exchange(&second, 23, &stream)?;
    ensure!(first.to_vec()?.iter().all(|&v| v == 0), "the block next to the shared one was written");
    Ok(())
}

fn an_ipc_event_orders_the_childs_work() -> TestResult {
    let (_, ctx, stream) = device_zero()?;
    let elements = 16 << 20;
    let shared = zeroed_in(&stream, elements, Arc::new(DeviceAllocator::new(&ctx)))?;
    stream.synchronize()?;
    let memory = IpcMemHandle::export(&shared.view())?;
    let mut child = Child::spawn(CHILD_ENV, "event")?;
    child.send(&memory.to_hex())?;
    let answer = child.receive()?;
    let Some(event) = answer.strip_prefix("recorded ") else {
        return Err(format!("the child answered {answer:?}").into());
    };
    // The child has queued its memset and recorded its event after it; it has not waited.
    let event = IpcEventHandle::from_hex(event)?.open(&ctx)?;
    ensure!(event.flags().contains(EventFlags::INTERPROCESS), "{:?}", event.flags());
    stream.wait_event(&event)?;
    let got = shared.to_vec()?;
    ensure!(got.iter().all(|&v| v == 0xe7e7), "the parent read before the child's memset was done");
    drop(event);
    child.send("done")?;
    child.finish()
}

fn vmm_memory_is_shared_through_a_posix_fd() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let gran = props.granularity(Granularity::Recommended)?;
    let physical = PhysicalMemory::new(&ctx, gran, &props)?;
    let range = AddressRange::reserve(&ctx, gran, 0)?;
    let mut mapping = range.map(0, &physical)?;
    mapping.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    let n = gran / 4;
    mapping.view_mut::<u32>(&stream)?.copy_from_host(&pattern(n, 5))?;

    let path = std::env::temp_dir().join(format!("cuda-core-ipc-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut child = Child::spawn(CHILD_ENV, "vmm")?;
    child.send(&format!("{} {gran}", path.display()))?;
    let socket = accept(&listener, &mut child);
    let _ = std::fs::remove_file(&path);
    let socket = socket?;
    let fd = physical.export_fd()?;
    send_fd(&socket, fd.as_fd()).map_err(|e| format!("sending the descriptor: {e}"))?;
    drop(fd);
    ensure_eq!(child.receive()?, "ok");
    child.finish()?;
    ensure!(
        mapping.view::<u32>(&stream)?.to_vec()? == transform(&pattern(n, 5)),
        "the child's writes through its import are not in the exporter's mapping"
    );
    Ok(())
}

/// The child's connection, or an error once the child has ended or a minute has passed.
fn accept(listener: &UnixListener, child: &mut Child) -> Result<UnixStream, Failed> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let start = std::time::Instant::now();
    loop {
        match listener.accept() {
            Ok((socket, _)) => {
                socket.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok(socket);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(status) = child.exited()? {
                    return Err(format!("the child ended before connecting ({status})").into());
                }
                ensure!(start.elapsed() < std::time::Duration::from_secs(60), "the child did not connect");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return Err(format!("accept: {e}").into()),
        }
    }
}

fn bad_handles_are_refused_with_typed_errors() -> TestResult {
    let (_, ctx, stream) = device_zero()?;
    let timed = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    match IpcEventHandle::export(&timed) {
        Err(e @ Error::InvalidArgument { .. }) => ensure!(e.to_string().contains("INTERPROCESS"), "{e}"),
        other => return Err(format!("exported an event without INTERPROCESS: {other:?}").into()),
    }
    let garbage: Vec<u8> = (0..IpcMemHandle::ENCODED_LEN).map(|i| (i * 37) as u8).collect();
    ensure!(
        matches!(IpcMemHandle::from_bytes(&garbage), Err(Error::InvalidArgument { .. })),
        "garbage bytes"
    );
    ensure!(
        matches!(IpcEventHandle::from_bytes(&garbage), Err(Error::InvalidArgument { .. })),
        "garbage bytes"
    );
    // Well-formed bytes around a driver handle that names nothing.
    let forged = IpcMemHandle::from_parts([0x5a; 64], 0, 64);
    // SAFETY: the handle names no memory; opening it must fail before anything is read.
    let opened = unsafe { forged.open::<u32>(&stream) };
    ensure!(matches!(opened, Err(Error::Driver { .. })), "opened a forged handle: {opened:?}");
    let buffer = DeviceBuffer::<u32>::new_in(&stream, 64, Arc::new(DeviceAllocator::new(&ctx)))?;
    let own = IpcMemHandle::export(&buffer.view())?;
    // Exported bytes that are not a whole number of elements.
    let odd = IpcMemHandle::from_parts(own.handle(), 0, 6);
    // SAFETY: refused before any call.
    let opened = unsafe { odd.open::<u32>(&stream) };
    ensure!(matches!(opened, Err(Error::InvalidArgument { .. })), "6 bytes as u32s: {opened:?}");
    Ok(())
}

/// The child's parts.
mod child {
    use super::*;

    fn lines() -> impl Iterator<Item = Result<String, String>> {
        std::io::stdin().lines().map(|l| l.map_err(|e| e.to_string()))
    }

    fn next(lines: &mut impl Iterator<Item = Result<String, String>>) -> Result<String, String> {
        lines.next().unwrap_or_else(|| Err("the parent closed stdin".into()))
    }

    fn say(line: &str) -> Result<(), String> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| e.to_string())
    }

    pub fn run(role: &str) -> Result<(), String> {
        let (device, ctx, stream) = device_zero().map_err(|e| e.to_string())?;
        let result = match role {
            "memory" => memory(&stream),
            "event" => event(&ctx, &stream),
            "vmm" => vmm(device, &ctx, &stream),
            other => Err(format!("unknown part {other}")),
        };
        let deferred = ctx.take_deferred_errors();
        if result.is_ok() && !deferred.is_empty() {
            return Err(format!("errors kept from drops: {deferred:?}"));
        }
        result
    }

    fn handle(text: &str) -> Result<IpcMemHandle, String> {
        IpcMemHandle::from_hex(text).map_err(|e| e.to_string())
    }

    fn memory(stream: &Stream) -> Result<(), String> {
        let mut lines = lines();
        let line = next(&mut lines)?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [shared, past_end, seed] = fields[..] else { return Err(format!("bad request {line:?}")) };
        let seed: u32 = seed.parse().map_err(|e| format!("seed: {e}"))?;
        // An offset that runs past the allocation is refused, and the handle closed again.
        // SAFETY: refused before the memory is used.
        match unsafe { handle(past_end)?.open::<u32>(stream) } {
            Err(Error::InvalidArgument { .. }) => {}
            other => return Err(format!("a handle past the allocation's end gave {other:?}")),
        }
        {
            // SAFETY: the parent keeps the buffer until this child has answered.
            let mut opened = unsafe { handle(shared)?.open::<u32>(stream) }.map_err(|e| e.to_string())?;
            let got = opened.to_vec().map_err(|e| e.to_string())?;
            if got != pattern(N, seed) {
                return Err("the shared buffer reads other values than the parent wrote".into());
            }
            opened.copy_from(&transform(&got)).map_err(|e| e.to_string())?;
        }
        let mine = DeviceBuffer::from_slice(stream, &pattern(N, seed + 1)).map_err(|e| e.to_string())?;
        let exported = IpcMemHandle::export(&mine.view()).map_err(|e| e.to_string())?;
        say(&format!("ok {}", exported.to_hex()))?;
        let written = next(&mut lines)?;
        if written != "written" {
            return Err(format!("expected \"written\", got {written:?}"));
        }
        if mine.to_vec().map_err(|e| e.to_string())? != transform(&pattern(N, seed + 1)) {
            return Err("the parent's writes are not in the child's buffer".into());
        }
        say("ok")
    }

    fn event(ctx: &Context, stream: &Stream) -> Result<(), String> {
        let mut lines = lines();
        let line = next(&mut lines)?;
        let err = |e: Error| e.to_string();
        // SAFETY: the parent keeps the buffer until this child has read "done".
        let mut opened = unsafe { handle(line.trim())?.open::<u32>(stream) }.map_err(err)?;
        let event = Event::new(ctx, EventFlags::INTERPROCESS | EventFlags::DISABLE_TIMING).map_err(err)?;
        let exported = IpcEventHandle::export(&event).map_err(err)?;
        opened.view_mut().memset_d32_async(0xe7e7, stream).map_err(err)?;
        event.record(stream).map_err(err)?;
        say(&format!("recorded {}", exported.to_hex()))?;
        let done = next(&mut lines)?;
        if done != "done" {
            return Err(format!("expected \"done\", got {done:?}"));
        }
        drop(opened);
        Ok(())
    }

    fn vmm(device: Device, ctx: &Context, stream: &Stream) -> Result<(), String> {
        let mut lines = lines();
        let line = next(&mut lines)?;
        let (path, size) = line.rsplit_once(' ').ok_or_else(|| format!("bad request {line:?}"))?;
        let size: usize = size.parse().map_err(|e| format!("size: {e}"))?;
        let socket = UnixStream::connect(path).map_err(|e| format!("{path}: {e}"))?;
        let fd = receive_fd(&socket).map_err(|e| format!("receiving the descriptor: {e}"))?;
        let err = |e: Error| e.to_string();
        // SAFETY: nothing else uses the exported memory while this mapping of it is used.
        let physical = unsafe { PhysicalMemory::import_fd(ctx, fd.as_fd(), size) }.map_err(err)?;
        drop(fd);
        let range = AddressRange::reserve(ctx, size, 0).map_err(err)?;
        let mut mapping = range.map(0, &physical).map_err(err)?;
        mapping.set_access(&[AccessGrant::device(device, Access::ReadWrite)]).map_err(err)?;
        let n = size / 4;
        let got = mapping.view::<u32>(stream).and_then(|v| v.to_vec()).map_err(err)?;
        if got != pattern(n, 5) {
            return Err("the imported VMM memory reads other values than the parent wrote".into());
        }
        mapping.view_mut::<u32>(stream).and_then(|mut v| v.copy_from_host(&transform(&got))).map_err(err)?;
        drop(mapping);
        say("ok")
    }
}

/// CuPy as the consumer: a Python process opens the handle with
/// `cupy.cuda.runtime.ipcOpenMemHandle`, checks and transforms the block at the offset.
mod python {
    use super::*;
    use std::sync::OnceLock;

    /// Reads `<handle hex> <offset> <n> <seed>`, checks `i * 7 + seed` at the offset, writes
    /// `v * 3 + 1`, and prints `ok`.
    const CONSUMER: &str = r#"
import sys
import numpy
import cupy
fields = sys.stdin.readline().split()
handle, offset, n, seed = bytes.fromhex(fields[0]), int(fields[1]), int(fields[2]), int(fields[3])
base = cupy.cuda.runtime.ipcOpenMemHandle(handle)
memory = cupy.cuda.UnownedMemory(base + offset, n * 4, None)
values = cupy.ndarray((n,), dtype=cupy.uint32, memptr=cupy.cuda.MemoryPointer(memory, 0))
expected = numpy.arange(n, dtype=numpy.uint32) * 7 + seed
same = bool((cupy.asnumpy(values) == expected).all())
values *= 3
values += 1
cupy.cuda.runtime.deviceSynchronize()
del values, memory
cupy.cuda.runtime.ipcCloseMemHandle(base)
print("ok" if same else "mismatch")
"#;

    const VENV_PYTHON: &str = "/opt/torch/.venv/bin/python3";

    fn interpreter() -> &'static Result<String, String> {
        static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
        FOUND.get_or_init(|| {
            let mut candidates: Vec<String> = std::env::var("CUDA_TEST_PYTHON").into_iter().collect();
            candidates.extend(["python3".to_string(), VENV_PYTHON.to_string()]);
            let mut reasons = Vec::new();
            for python in candidates {
                let probe = Command::new(&python)
                    .args(["-c", "import cupy, numpy; cupy.cuda.runtime.getDeviceCount()"])
                    .env("NCCL_NVLS_ENABLE", "0")
                    .output();
                match probe {
                    Ok(out) if out.status.success() => return Ok(python),
                    Ok(out) => {
                        reasons.push(format!("{python}: {}", String::from_utf8_lossy(&out.stderr).trim()))
                    }
                    Err(e) => reasons.push(format!("{python}: {e}")),
                }
            }
            Err(format!("no Python with CuPy: {}", reasons.join("; ")))
        })
    }

    /// Whether a Python with CuPy (and a device it sees) was found.
    pub fn available() -> Result<(), String> {
        interpreter().as_ref().map(|_| ()).map_err(Clone::clone)
    }

    pub fn cupy_reads_and_writes() -> TestResult {
        let python = interpreter().as_ref().map_err(Clone::clone)?;
        let (_, ctx, stream) = device_zero()?;
        let (first, mut second) = pooled_pair(&ctx, &stream)?;
        second.copy_from(&pattern(N, 41))?;
        let handle = IpcMemHandle::export(&second.view())?;
        ensure!(handle.offset() > 0, "the shared block is at the start of its allocation");
        let mut consumer = Command::new(python)
            .args(["-c", CONSUMER])
            .env("NCCL_NVLS_ENABLE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{python}: {e}"))?;
        let request = format!("{} {} {N} 41\n", hex(&handle.handle()), handle.offset());
        consumer
            .stdin
            .take()
            .ok_or("no stdin")?
            .write_all(request.as_bytes())
            .map_err(|e| format!("writing to Python: {e}"))?;
        let out = consumer.wait_with_output().map_err(|e| e.to_string())?;
        ensure!(out.status.success(), "the CuPy consumer failed: {}", out.status);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer = stdout.lines().last().unwrap_or_default().trim().to_string();
        ensure_eq!(answer, "ok", "CuPy's check of the block");
        ensure!(second.to_vec()? == transform(&pattern(N, 41)), "CuPy's writes are not in the block");
        ensure!(first.to_vec()?.iter().all(|&v| v == 0), "the neighbouring block was written");
        Ok(())
    }
}
