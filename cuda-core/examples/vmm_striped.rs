//! One buffer from several physical allocations, the striping of NVIDIA's vectorAddMMAP sample
//! on one GPU: per vector, reserve one virtual range, map a separate `PhysicalMemory` at each
//! stripe of it, and own the mappings as one `MappedSpan`. A kernel then runs over both spans
//! as plain arrays, across the seams between stripes; the result is checked whole, and stripe by
//! stripe through each stripe's own mapping.
//!
//! ```sh
//! cargo run --example vmm_striped -- 4   # stripes per vector
//! ```

use cuhost::mempool::Access;
use cuhost::module::Module;
use cuhost::vmm::{
    AccessGrant, AddressRange, AllocationProperties, Granularity, MappedSpan, PhysicalMemory, VmmSupport,
};
use cuhost::{Context, Device, Error, LaunchConfig, Stream, StreamFlags};
use std::process::ExitCode;

/// `saxpy(u32 n, f32 a, const f32* x, f32* y)`, shared by the examples that launch it.
const PTX: &str = include_str!("kernels/saxpy.ptx");

/// The scale of `y = A * x + y`.
const A: f32 = 2.0;

fn main() -> ExitCode {
    let stripes = std::env::args().nth(1).and_then(|s| s.parse::<usize>().ok()).unwrap_or(4).clamp(1, 64);
    // The default pools' cache goes back at the end, so that a leak checker sees only real leaks.
    match run(stripes).and_then(|()| cuhost::pool::release_default_pools()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmm_striped: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("vmm_striped example", message)) }
}

/// `stripes` physical allocations of `stripe` bytes each, mapped end to end in one reserved
/// range, with `access` granted on all of them.
fn striped(
    ctx: &Context,
    stripes: usize,
    stripe: usize,
    props: &AllocationProperties,
    access: &[AccessGrant],
) -> cuhost::Result<MappedSpan> {
    let range = AddressRange::reserve(ctx, stripes * stripe, 0)?;
    let mappings = (0..stripes)
        .map(|k| range.map(k * stripe, &PhysicalMemory::new(ctx, stripe, props)?))
        .collect::<cuhost::Result<Vec<_>>>()?;
    let span = MappedSpan::new(mappings)?;
    // Mapped memory may not be touched before its access is set: stripe by stripe, per device.
    span.set_access(access)?;
    // `range` and each `PhysicalMemory` handle go here; the mappings hold their own.
    Ok(span)
}

fn run(stripes: usize) -> cuhost::Result<()> {
    let device = Device::get(0)?;
    if !VmmSupport::of(&device)?.virtual_memory_management {
        println!("{} does not support virtual memory management; nothing to show", device.name()?);
        return Ok(());
    }
    let ctx = Context::primary(&device)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let module = Module::from_ptx(&ctx, PTX)?;
    let saxpy = module.function("saxpy")?;

    // Every size and offset in a range is a multiple of the granularity (2 MiB on current
    // GPUs): one granule per stripe.
    let props = AllocationProperties::device(device);
    let stripe = props.granularity(Granularity::Minimum)?;
    let access = [AccessGrant::device(device, Access::ReadWrite)];
    let mut x = striped(&ctx, stripes, stripe, &props, &access)?;
    let mut y = striped(&ctx, stripes, stripe, &props, &access)?;
    for (name, span) in [("x", &x), ("y", &y)] {
        let at: Vec<String> = span
            .mappings()
            .iter()
            .map(|m| format!("{:#x} ({:#x})", m.as_raw(), m.physical().as_raw()))
            .collect();
        println!(
            "{name}: {} KiB as {stripes} stripes (address, allocation): {}",
            span.size() >> 10,
            at.join(", ")
        );
    }

    let n = stripes * stripe / size_of::<f32>();
    let n32 = u32::try_from(n).map_err(|_| Error::invalid("vmm_striped example", "too many stripes"))?;
    let hx: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let hy: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    // Views of a span are views of one array: the copies and the kernel do not see the stripes.
    x.view_mut::<f32>(&stream)?.copy_from_host(&hx)?;
    y.view_mut::<f32>(&stream)?.copy_from_host(&hy)?;
    let config = LaunchConfig::for_elements(n32, 256);
    let (xs, mut ys) = (x.view::<f32>(&stream)?, y.view_mut::<f32>(&stream)?);
    // SAFETY: saxpy takes (u32, f32, const f32*, f32*) and touches n floats of x and y, which
    // both views cover.
    unsafe { saxpy.launch(&stream, &config, (&n32, &A, &xs, &mut ys))? };

    let expected: Vec<f32> = hx.iter().zip(&hy).map(|(x, y)| A.mul_add(*x, *y)).collect();
    let whole = y.view::<f32>(&stream)?.to_vec()?;
    let wrong = whole.iter().zip(&expected).filter(|(g, e)| g != e).count();
    check(wrong == 0, format!("{wrong} of {n} elements of y differ from the host"))?;
    // Each stripe's own mapping sees its part of the array, and nothing else.
    let per_stripe = stripe / size_of::<f32>();
    for (k, mapping) in y.mappings().iter().enumerate() {
        let part = mapping.view::<f32>(&stream)?.to_vec()?;
        check(part == expected[k * per_stripe..(k + 1) * per_stripe], format!("stripe {k} of y differs"))?;
    }
    println!("saxpy over {n} floats across {} seams: all right, whole and stripe by stripe", stripes - 1);

    // The driver wants the steps undone in order: unmap, release the physical memory, free the
    // addresses. Dropping a span does that: it waits for the work queued through its views
    // (unmapping is not stream-ordered), unmaps each stripe, which releases its allocation
    // (the mapping held the last handle), and the range is freed with its last mapping.
    drop((x, y));
    Ok(())
}
