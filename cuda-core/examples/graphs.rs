//! CUDA graphs three ways: capture a stream's work and replay it, build a graph node by node,
//! then change a kernel node's arguments without rebuilding; each result is checked.
//!
//! ```sh
//! cargo run --example graphs -- 100
//! ```

use cuhost::graph::{CaptureMode, Graph, GraphSlice, InstantiateFlags};
use cuhost::module::Module;
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
use std::process::ExitCode;
use std::sync::Arc;

/// `add(u32* data, u32 n, u32 value)`: `data[i] += value` for `i < n`.
const PTX: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .entry add(.param .u64 data, .param .u32 n, .param .u32 value)
{
    .reg .pred %p<2>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [data];
    ld.param.u32 %r1, [n];
    ld.param.u32 %r2, [value];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r6, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r7, [%rd4];
    add.u32 %r8, %r7, %r2;
    st.global.u32 [%rd4], %r8;
DONE:
    ret;
}
"#;

fn main() -> ExitCode {
    let launches = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100u32);
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run(launches).and_then(|r| Ok(cuhost::pool::release_default_pools().map(|()| r)?)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("graphs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(launches: u32) -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let module = Arc::new(Module::from_ptx(&ctx, PTX)?);
    let add = module.function("add")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 1 << 16;
    let config = LaunchConfig::for_elements(n, 256);

    // 1. Capture: three launches recorded once, replayed `launches` times.
    let mut data = DeviceBuffer::<u32>::zeroed(&stream, n as usize)?;
    let one = 1u32;
    // SAFETY: `add` takes (u32*, u32, u32) and `data` holds n words; the graph keeps the
    // buffer and the module alive (below) for as long as it can run.
    let graph = unsafe {
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        for _ in 0..3 {
            add.launch(&stream, &config, (&mut data, &n, &one))?;
        }
        capture.end()?
    };
    let data = Arc::new(data);
    graph.keep(data.clone());
    graph.keep(module.clone());
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.upload(&stream)?;
    let start = std::time::Instant::now();
    for _ in 0..launches {
        exec.launch(&stream)?;
    }
    stream.synchronize()?;
    let elapsed = start.elapsed();
    check("capture", &data.to_vec()?, 3 * launches)?;
    println!(
        "captured graph of 3 kernels: {launches} launches in {elapsed:?} ({:?} per launch)",
        elapsed / launches.max(1)
    );

    // 2. Explicit: a memset, then a kernel that depends on it.
    let out = Arc::new(DeviceBuffer::<u32>::zeroed(&stream, n as usize)?);
    let explicit = Graph::new(&ctx)?;
    let reset = explicit.add_memset_node(&[], &GraphSlice::whole(&out), 40u32)?;
    let two = 2u32;
    // SAFETY: as above; `out` is kept by the memset node, the module by `keep`.
    let bump = unsafe { explicit.add_kernel_node(&[reset], &add, &config, (&*out, &n, &two))? };
    explicit.keep(module.clone());
    let exec = explicit.instantiate(InstantiateFlags::empty())?;
    exec.launch(&stream)?;
    stream.synchronize()?;
    check("explicit", &out.to_vec()?, 42)?;

    // 3. Update: the same executable graph, a new argument for the kernel node.
    let five = 5u32;
    // SAFETY: as above.
    unsafe { exec.set_kernel_node_args(bump, &add, &config, (&*out, &n, &five))? };
    exec.launch(&stream)?;
    stream.synchronize()?;
    check("update", &out.to_vec()?, 45)?;
    println!("explicit graph and kernel-node update: ok");
    Ok(())
}

fn check(what: &str, values: &[u32], expected: u32) -> Result<(), String> {
    match values.iter().position(|&v| v != expected) {
        None => Ok(()),
        Some(i) => Err(format!("{what}: element {i} is {} instead of {expected}", values[i])),
    }
}
