//! Drives every call of `cuda-core` whose driver ABI depends on the driver version, against
//! the fake driver emulating the version in `FAKE_CUDA_DRIVER_VERSION`, and prints per step
//! `step=ok:<value>` or `step=err:<error>` and `step.abi=<entry points reached>`.
//!
//! `cuda-core` chooses an ABI once per process, so `tests/abi_versions.rs` runs this probe
//! once per emulated version.

use cuhost::alloc::MemAttach;
use cuhost::driver_sys as sys;
use cuhost::memory::{ManagedBuffer, MemAdvice, MemLocation};
use cuhost::module::{Function, JitOptions, Library, Module};
use cuhost::vmm::{
    AllocationProperties, Granularity, HandleTypes, MulticastObject, MulticastProperties, PhysicalMemory,
};
use cuhost::{Context, ContextFlags, Device, Error, Event, EventFlags, Stream, StreamFlags};
use std::ffi::{CStr, c_char};
use std::fmt::Debug;

/// The fake driver's call record, read through its test-only export.
struct Calls {
    read: Option<unsafe extern "C" fn() -> *const c_char>,
    seen: usize,
    _lib: Option<libloading::Library>,
}

impl Calls {
    fn open() -> Calls {
        let Some(path) = sys::library_path() else { return Calls { read: None, seen: 0, _lib: None } };
        // SAFETY: the fake driver is already loaded; this opens the same file again to reach its
        // test-only record, whose signature is known.
        let lib = unsafe { libloading::Library::new(path) }.ok();
        let read = lib.as_ref().and_then(|l| {
            // SAFETY: as above.
            unsafe { l.get::<unsafe extern "C" fn() -> *const c_char>(b"fake_cuda_calls\0") }.ok().map(|f| *f)
        });
        Calls { read, seen: 0, _lib: lib }
    }

    /// The calls recorded since the last time this was asked.
    fn new_calls(&mut self) -> String {
        let Some(read) = self.read else { return String::new() };
        // SAFETY: the fake returns a NUL-terminated string it never frees.
        let text = unsafe { CStr::from_ptr(read()) }.to_string_lossy().into_owned();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("cuCtxPushCurrent")).collect();
        let fresh = lines.get(self.seen..).unwrap_or_default().join(";");
        self.seen = lines.len();
        fresh
    }
}

fn describe(e: &Error) -> String {
    match e {
        Error::Load { call, source } => match &source.kind {
            sys::LoadErrorKind::VersionTooOld { symbol, needed, installed } => {
                format!("too-old call={call} symbol={symbol} needed={needed} installed={installed}")
            }
            other => format!("load call={call} {other:?}"),
        },
        other => format!("{other}"),
    }
}

fn step<T: Debug>(calls: &mut Calls, key: &str, result: Result<T, Error>) -> Option<T> {
    match &result {
        Ok(v) => println!("{key}=ok:{v:?}"),
        Err(e) => println!("{key}=err:{}", describe(e)),
    }
    println!("{key}.abi={}", calls.new_calls());
    result.ok()
}

fn main() {
    if let Err(e) = run() {
        println!("setup=err:{}", describe(&e));
    }
}

fn run() -> Result<(), Error> {
    let dev0 = Device::get(0)?;
    let dev2 = Device::get(2)?;
    let mut calls = Calls::open();
    calls.new_calls();
    let ctx = Context::primary(&dev0)?;

    let (start, end) = (Event::new(&ctx, EventFlags::empty())?, Event::new(&ctx, EventFlags::empty())?);
    step(&mut calls, "elapsed", Event::elapsed_time(&start, &end));

    let created = Context::create(&dev2, ContextFlags::empty());
    step(&mut calls, "create", created.as_ref().map(|c| c.device().ordinal()).map_err(Clone::clone));
    if let Ok(created) = created {
        // SAFETY: the context is alive for the whole call.
        let adopted = unsafe { Context::from_raw(created.as_raw()) };
        step(&mut calls, "from_raw", adopted.map(|c| c.device().ordinal()));
    }
    step(&mut calls, "set_flags", ctx.set_flags(ContextFlags::empty()));

    let stream = Stream::new(&ctx, StreamFlags::empty())?;
    let buffer = ManagedBuffer::<u32>::new_managed(&stream, 16, MemAttach::Global)?;
    calls.new_calls();
    let advise = |advice, location| buffer.advise(advice, location);
    step(&mut calls, "advise_device", advise(MemAdvice::SetPreferredLocation, MemLocation::Device(dev2)));
    step(&mut calls, "advise_host", advise(MemAdvice::SetAccessedBy, MemLocation::Host));
    step(&mut calls, "advise_numa", advise(MemAdvice::SetPreferredLocation, MemLocation::HostNuma(0)));
    step(&mut calls, "prefetch_device", buffer.prefetch_async(MemLocation::Device(dev2), &stream));
    step(&mut calls, "prefetch_host", buffer.prefetch_async(MemLocation::Host, &stream));
    step(&mut calls, "prefetch_numa", buffer.prefetch_async(MemLocation::HostNumaCurrent, &stream));

    // SAFETY: the fake driver takes any module handle; nothing else owns this one.
    let module = unsafe { Module::from_raw(&ctx, 0x5000 as sys::CUmodule) };
    step(&mut calls, "module_functions", module.functions().map(|f| f.len()));
    // SAFETY: the fake driver's function handle, valid for the whole process.
    let function = unsafe { Function::from_raw(0x3000 as sys::CUfunction) }?;
    calls.new_calls();
    step(&mut calls, "function_name", function.name());
    step(&mut calls, "function_param_info", function.param_info(0));
    step(&mut calls, "function_load", function.load());
    step(&mut calls, "function_is_loaded", function.is_loaded());

    let library =
        Library::from_ptx(".version 8.0\n.target sm_80\n.address_size 64\n", &JitOptions::default())?;
    calls.new_calls();
    step(&mut calls, "library_kernels", library.kernels().map(|k| k.len()));
    let kernel = library.kernel("fake_kernel")?;
    calls.new_calls();
    step(&mut calls, "kernel_name", kernel.name());
    step(&mut calls, "kernel_param_info", kernel.param_info(&ctx, 0));
    multicast(&mut calls, &ctx, dev2)
}

/// Multicast objects, only ever against this fake: granularity, creation, a device, memory
/// bound and kept until the object is released, a range refused before any call.
fn multicast(calls: &mut Calls, ctx: &Context, dev2: Device) -> Result<(), Error> {
    const MIB2: usize = 2 << 20;
    let props = MulticastProperties { devices: 2, size: 2 * MIB2, handle_types: HandleTypes::empty() };
    step(calls, "multicast_granularity", props.granularity(ctx, Granularity::Recommended));
    let created = MulticastObject::new(ctx, props);
    step(calls, "multicast_create", created.as_ref().map(|_| ()).map_err(Clone::clone));
    let Ok(object) = created else {
        return Ok(());
    };
    step(calls, "multicast_add_device", object.add_device(dev2));
    let physical = PhysicalMemory::new(ctx, MIB2, &AllocationProperties::device(ctx.device()))?;
    calls.new_calls();
    step(calls, "multicast_bind_mem", object.bind_memory(MIB2, &physical, 0, MIB2));
    step(calls, "multicast_bind_outside", object.bind_memory(2 * MIB2, &physical, 0, MIB2));
    drop(physical);
    step(calls, "multicast_memory_kept", Ok::<(), Error>(()));
    step(calls, "multicast_unbind", object.unbind(dev2, MIB2, MIB2));
    drop(object);
    step(calls, "multicast_release", Ok::<(), Error>(()));
    Ok(())
}
