//! Green contexts: split device 0's SMs into groups, make a green context of each group and of
//! the SMs left over, and run on a stream of each a kernel whose blocks write down the SM they
//! ran on. Each green context's blocks stay within as many SMs as it was given, and no two
//! green contexts share an SM.
//!
//! ```sh
//! cargo run --example green_contexts -- 32   # SMs asked for per group
//! ```

use cuhost::driver_sys::CUresult;
use cuhost::green::{GreenContext, SmResource, SplitFlags};
use cuhost::module::Module;
use cuhost::{Context, Device, DeviceBuffer, Error, LaunchConfig};
use std::collections::BTreeSet;
use std::process::ExitCode;

/// `record_smid(u32* out)`: block `b` writes the id of its SM to `out[b]`.
const PTX: &str = include_str!("kernels/record_smid.ptx");

fn main() -> ExitCode {
    let per_group = std::env::args().nth(1).and_then(|s| s.parse::<u32>().ok()).unwrap_or(32);
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run(per_group).and_then(|()| cuhost::pool::release_default_pools()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("green_contexts: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `Ok(None)`, after saying why, where the driver or the device offers no green contexts: a
/// driver older than the call (12.4 for splits and green contexts, 12.5 for their streams) or
/// a device the driver refuses them on.
fn supported<T>(result: cuhost::Result<T>) -> cuhost::Result<Option<T>> {
    match result {
        Err(e @ Error::Load { .. }) => {
            println!("green contexts are not available with this driver ({e}); nothing to show");
            Ok(None)
        }
        Err(e) if e.driver_status() == Some(CUresult::CUDA_ERROR_NOT_SUPPORTED) => {
            println!("this device does not support green contexts ({e}); nothing to show");
            Ok(None)
        }
        other => other.map(Some),
    }
}

fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("green_contexts example", message)) }
}

/// One green context's share of the run: its SM count and what the kernel's blocks wrote, in a
/// buffer that holds the stream they ran on, which holds the green context.
struct Part {
    name: String,
    sm_count: u32,
    out: DeviceBuffer<u32>,
}

fn run(per_group: u32) -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let Some(all) = supported(SmResource::of_device(&device))? else { return Ok(()) };
    // The driver rounds each group up to SMs the hardware schedules together (at least
    // `min_partition_size`, in multiples of `coscheduled_alignment`), so groups may hold more
    // SMs than asked for.
    let per_group = per_group.clamp(1, all.sm_count());
    let split = all.split_by_count(per_group, SplitFlags::empty())?;
    println!(
        "{}: {} SMs (groups of at least {}, in multiples of {}); asked for groups of {per_group}, got {} \
         group(s) and {} SM(s) left over",
        device.name()?,
        all.sm_count(),
        all.min_partition_size(),
        all.coscheduled_alignment(),
        split.groups.len(),
        split.remainder.map_or(0, |r| r.sm_count())
    );

    // Modules and memory of the primary context are used on green contexts' streams directly.
    let module = Module::from_ptx(&Context::primary(&device)?, PTX)?;
    let record_smid = module.function("record_smid")?;
    // More blocks than the whole device has SMs: left free, they would spread over all of them.
    let blocks = all.sm_count() * 8;
    let groups = split.groups.iter().enumerate().map(|(i, g)| (format!("group {i}"), g));
    let mut parts = Vec::new();
    for (name, sms) in groups.chain(split.remainder.iter().map(|r| ("remainder".to_string(), r))) {
        let Some(green) = supported(GreenContext::from_sms(sms))? else { return Ok(()) };
        let Some(stream) = supported(green.stream())? else { return Ok(()) };
        // u32::MAX marks a block that never ran.
        let mut out = DeviceBuffer::from_slice(&stream, &vec![u32::MAX; blocks as usize])?;
        // SAFETY: record_smid takes (u32*) and block b writes out[b]; `out` holds one word per
        // block.
        unsafe { record_smid.launch(&stream, &LaunchConfig::new(blocks, 1), (&mut out,))? };
        parts.push(Part { name, sm_count: green.sm_resource()?.sm_count(), out });
    }

    // All the kernels were queued before any is read back, so they may run side by side.
    let mut taken = BTreeSet::new(); // the SMs that earlier green contexts ran on
    for part in &parts {
        let ids = part.out.to_vec()?; // waits for the kernel: same stream
        check(!ids.contains(&u32::MAX), format!("a block of {} did not run", part.name))?;
        let sms: BTreeSet<u32> = ids.into_iter().collect();
        println!(
            "{:>10}: {:>3} SMs; its {blocks} blocks ran on {:>3} distinct SMs: {}",
            part.name,
            part.sm_count,
            sms.len(),
            ranges(&sms)
        );
        check(
            sms.len() <= part.sm_count as usize,
            format!("{} has {} SMs but ran blocks on {}", part.name, part.sm_count, sms.len()),
        )?;
        check(sms.is_disjoint(&taken), format!("{} ran blocks on SMs of another green context", part.name))?;
        taken.extend(sms);
    }
    println!("every green context stayed within its own SMs, and no SM served two of them");
    // Each buffer goes back in its stream's order; the stream, then its green context, go
    // with it.
    drop(parts);
    Ok(())
}

/// The SM ids as runs: `0-7, 16-23`.
fn ranges(ids: &BTreeSet<u32>) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == id => *end = id,
            _ => runs.push((id, id)),
        }
    }
    let text: Vec<String> =
        runs.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    text.join(", ")
}
