//! Functions that CUDA 13.1 and later headers added: where the installed driver has them, what
//! they do; where it does not, the typed error that names the version needed and the one
//! installed, from the raw layer and from the safe one. Built where the bindings come from
//! headers that declare them (`cuda_headers_13_<minor>`, set by cuda-core's build script).

use cuda_tests::{Test, gpu};
#[cfg(any(cuda_headers_13_1, cuda_headers_13_4))]
use cuhost::{Error, device::driver_version};

/// The check on a call of a function the driver lacks: a load error naming `call`, the
/// version it needs and the version installed.
#[cfg(any(cuda_headers_13_1, cuda_headers_13_4))]
fn too_old(e: &Error, call: &str, needed: &str) -> cuda_tests::TestResult {
    let installed = driver_version()?;
    let installed = format!("{}.{}", installed / 1000, (installed % 1000) / 10);
    let Error::Load { call: named, .. } = e else {
        return Err(format!("expected Error::Load for {call}, got {e:?}").into());
    };
    cuda_tests::ensure_eq!(*named, call);
    let text = e.to_string();
    cuda_tests::ensure!(
        text.contains(call) && text.contains(needed) && text.contains(&format!("{installed} is installed")),
        "the error does not name {call}, {needed} and {installed}: {text}"
    );
    Ok(())
}

#[cfg(cuda_headers_13_1)]
mod since_13_1 {
    use super::too_old;
    use cuda_tests::{TestResult, device_zero, ensure, ensure_eq};
    use cuhost::device::driver_version;
    use cuhost::driver_sys as sys;
    use cuhost::graph::{DotFlags, Graph, InstantiateFlags};
    use cuhost::stream::HostFuncSync;
    use cuhost::{Stream, StreamFlags};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The raw layer refuses a function newer than the driver before asking the driver for it,
    /// and says why.
    pub fn raw_call_of_a_newer_function_names_both_versions() -> TestResult {
        let (_device, ctx, _stream) = device_zero()?;
        let graph = Graph::new(&ctx)?;
        let mut id = 0;
        // SAFETY: a live graph and one out-parameter.
        let status = unsafe { sys::cuGraphGetId(graph.as_raw(), &mut id) };
        if driver_version()? >= 13010 {
            ensure_eq!(status, sys::CUresult::CUDA_SUCCESS);
            return Ok(());
        }
        ensure!(status != sys::CUresult::CUDA_SUCCESS, "cuGraphGetId succeeded on a driver before 13.1");
        let why = sys::load_error("cuGraphGetId").ok_or("no load error recorded for cuGraphGetId")?;
        let text = why.to_string();
        ensure!(text.contains("cuGraphGetId needs") && text.contains("13.1"), "{text}");
        Ok(())
    }

    /// Graph, executable graph and node ids; the node ids are the ones the DOT output prints.
    pub fn graph_and_node_ids() -> TestResult {
        let (_device, ctx, _stream) = device_zero()?;
        let graph = Graph::new(&ctx)?;
        let first = graph.add_empty_node(&[])?;
        let second = graph.add_empty_node(&[first])?;
        let exec = graph.instantiate(InstantiateFlags::empty())?;
        if driver_version()? < 13010 {
            too_old(&graph.graph_id().err().ok_or("graph_id succeeded")?, "cuGraphGetId", "13.1")?;
            too_old(&exec.graph_id().err().ok_or("exec graph_id succeeded")?, "cuGraphExecGetId", "13.1")?;
            too_old(&first.local_id().err().ok_or("local_id succeeded")?, "cuGraphNodeGetLocalId", "13.1")?;
            return too_old(
                &first.tools_id().err().ok_or("tools_id succeeded")?,
                "cuGraphNodeGetToolsId",
                "13.1",
            );
        }
        let (a, b) = (first.local_id()?, second.local_id()?);
        ensure!(a != b, "two nodes share the local id {a}");
        ensure!(first.tools_id()? != second.tools_id()?, "two nodes share a tools id");
        let other = Graph::new(&ctx)?;
        ensure!(graph.graph_id()? != other.graph_id()?, "two graphs share an id");
        let _ = exec.graph_id()?;
        let dot = graph.to_dot(DotFlags::VERBOSE)?;
        ensure!(
            dot.contains(&graph.graph_id()?.to_string()),
            "the DOT output does not name the graph id:\n{dot}"
        );
        Ok(())
    }

    /// A host function queued with the spin-wait mode runs in stream order, as one queued
    /// with the default mode does.
    pub fn host_function_with_a_sync_mode_runs_in_order() -> TestResult {
        let (_device, ctx, _stream) = device_zero()?;
        let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
        let order = Arc::new(AtomicU32::new(0));
        let (first, second) = (order.clone(), order.clone());
        let queued = stream.launch_host_func_with(HostFuncSync::SpinWait, move || {
            first.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).ok();
        });
        if driver_version()? < 13010 {
            return too_old(
                &queued.err().ok_or("cuLaunchHostFunc_v2 succeeded")?,
                "cuLaunchHostFunc_v2",
                "13.1",
            );
        }
        queued?;
        stream.launch_host_func_with(HostFuncSync::Blocking, move || {
            second.compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst).ok();
        })?;
        stream.synchronize()?;
        ensure_eq!(order.load(Ordering::SeqCst), 2);
        Ok(())
    }
}

#[cfg(cuda_headers_13_1)]
mod since_13_1_streams {
    use super::too_old;
    use cuda_tests::{TestResult, device_zero, ensure, ensure_eq};
    use cuhost::device::driver_version;
    use cuhost::{Stream, StreamFlags};

    /// An ordinary stream may use every SM of its device.
    pub fn a_stream_reports_the_sms_it_may_use() -> TestResult {
        let (device, ctx, _stream) = device_zero()?;
        let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
        let resource = stream.sm_resource();
        if driver_version()? < 13010 {
            return too_old(
                &resource.err().ok_or("cuStreamGetDevResource succeeded")?,
                "cuStreamGetDevResource",
                "13.1",
            );
        }
        let resource = resource?;
        ensure_eq!(i64::from(resource.sm_count), i64::from(device.multiprocessor_count()?));
        ensure!(resource.min_partition_size >= 1, "{resource:?}");
        Ok(())
    }
}

#[cfg(cuda_headers_13_4)]
mod since_13_4 {
    use super::too_old;
    use cuda_tests::{TestResult, device_zero, ensure, ensure_eq};
    use cuhost::Error;
    use cuhost::alloc::MemAttach;
    use cuhost::device::driver_version;
    use cuhost::memory::{ManagedBuffer, MemLocation};

    /// Where managed pages live: refused arguments before any call, then the device after a
    /// prefetch to it (or the typed error on an older driver).
    pub fn managed_residency_follows_a_prefetch() -> TestResult {
        let (device, _ctx, stream) = device_zero()?;
        let bytes = 4 << 20;
        let buffer = ManagedBuffer::<u8>::new_managed(&stream, bytes, MemAttach::Global)?;
        for (summary, sampling) in [(0, 0), (bytes + 1, 0), (1 << 20, 2 << 20)] {
            match buffer.residency(summary, sampling) {
                Err(Error::InvalidArgument { .. }) => {}
                other => return Err(format!("residency({summary}, {sampling}) gave {other:?}").into()),
            }
        }
        buffer.prefetch_async(MemLocation::Device(device), &stream)?;
        stream.synchronize()?;
        let regions = buffer.residency(1 << 20, 0);
        if driver_version()? < 13040 {
            return too_old(
                &regions.err().ok_or("cuMemGetLocationInfo succeeded")?,
                "cuMemGetLocationInfo",
                "13.4",
            );
        }
        let regions = regions?;
        ensure_eq!(regions.len(), 4);
        ensure!(
            regions.iter().all(|r| *r == Some(MemLocation::Device(device))),
            "after a prefetch to the device: {regions:?}"
        );
        Ok(())
    }
}

fn main() {
    #[allow(unused_mut)]
    let mut tests: Vec<Test> = Vec::new();
    #[cfg(cuda_headers_13_1)]
    tests.extend([
        gpu(
            "raw_call_of_a_newer_function_names_both_versions",
            since_13_1::raw_call_of_a_newer_function_names_both_versions,
        ),
        gpu("graph_and_node_ids", since_13_1::graph_and_node_ids),
        gpu(
            "host_function_with_a_sync_mode_runs_in_order",
            since_13_1::host_function_with_a_sync_mode_runs_in_order,
        ),
    ]);
    #[cfg(cuda_headers_13_1)]
    tests.push(gpu(
        "a_stream_reports_the_sms_it_may_use",
        since_13_1_streams::a_stream_reports_the_sms_it_may_use,
    ));
    #[cfg(cuda_headers_13_4)]
    tests.push(gpu("managed_residency_follows_a_prefetch", since_13_4::managed_residency_follows_a_prefetch));
    let _ = gpu;
    cuda_tests::run(&tests);
}
