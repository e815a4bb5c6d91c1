//! Host nodes: Rust closures the driver runs on one of its threads when the node's
//! dependencies are done.

use super::{Graph, GraphNode};
use crate::context::ContextInner;
use crate::error::Result;
use crate::stream::report_panic;
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};

/// What a host node's user data points at: the closure and where to report its panics.
pub(crate) struct HostFunction {
    f: Box<dyn Fn() + Send + Sync>,
    ctx: Weak<ContextInner>,
}

/// The function the driver calls for every host node of this crate.
unsafe extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` points at a `HostFunction` that the graph's keep-alive list holds for as
    // long as the node can run.
    let host = unsafe { &*data.cast::<HostFunction>() };
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (host.f)())) {
        report_panic(panic, &host.ctx);
    }
}

impl HostFunction {
    /// The closure, boxed where the driver can reach it, and the raw parameters naming it.
    pub(crate) fn params(
        ctx: &crate::context::Context,
        f: impl Fn() + Send + Sync + 'static,
    ) -> (Arc<HostFunction>, sys::CUDA_HOST_NODE_PARAMS) {
        let host = Arc::new(HostFunction { f: Box::new(f), ctx: Arc::downgrade(ctx.inner()) });
        let params = sys::CUDA_HOST_NODE_PARAMS {
            fn_: Some(trampoline),
            userData: Arc::as_ptr(&host).cast_mut().cast(),
            ..Default::default()
        };
        (host, params)
    }
}

impl Graph {
    /// Adds a node that runs `f` on a driver thread once its dependencies are done
    /// ([`cuGraphAddHostNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// `f` runs at every launch, possibly from several executable graphs at once; the graph
    /// keeps it alive. It must not call CUDA (the driver forbids it in host functions). A panic
    /// in `f` is caught and reported as [`Error::CallbackPanicked`](crate::error::Error::CallbackPanicked)
    /// by the next call through the graph's context (for instance a stream synchronize).
    pub fn add_host_node(
        &self,
        dependencies: &[GraphNode<'_>],
        f: impl Fn() + Send + Sync + 'static,
    ) -> Result<GraphNode<'_>> {
        let (host, params) = HostFunction::params(&self.ctx, f);
        let graph = self.raw;
        // SAFETY: the graph is live; the user data stays alive in the keep-alive list.
        let node = self.add_with("cuGraphAddHostNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddHostNode(out, graph, deps, n, &params)
        })?;
        self.keep.push(host);
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn the_trampoline_runs_the_closure_and_reports_panics_to_the_context() {
        let ctx = crate::context::Context::detached_for_tests();
        let count = Arc::new(AtomicU32::new(0));
        let seen = count.clone();
        let (host, params) = HostFunction::params(&ctx, move || {
            if seen.fetch_add(1, Ordering::SeqCst) == 1 {
                panic!("second run fails");
            }
        });
        let run = || {
            // SAFETY: the user data points at `host`, alive for the whole test.
            unsafe { params.fn_.map(|f| f(params.userData)) }
        };
        run();
        assert!(ctx.deferred_error().is_none());
        run();
        assert_eq!(count.load(Ordering::SeqCst), 2);
        let errors = ctx.take_deferred_errors();
        assert!(
            matches!(&errors[..], [crate::error::Error::CallbackPanicked { message }] if message == "second run fails"),
            "{errors:?}"
        );
        drop(host);
    }
}
