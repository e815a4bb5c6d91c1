//! Debug output: a graph in Graphviz DOT, to a file or a string.

use super::Graph;
use crate::error::{Error, Result, check};
use bitflags::bitflags;
use cuda_driver_sys as sys;
use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

bitflags! {
    /// What the DOT output shows besides nodes and edges (`CUgraphDebugDot_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct DotFlags: u32 {
        /// `CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE`: every parameter of every node.
        const VERBOSE = 1 << 0;
        /// `CU_GRAPH_DEBUG_DOT_FLAGS_RUNTIME_TYPES`: the runtime API's type names.
        const RUNTIME_TYPES = 1 << 1;
        /// `CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_PARAMS`: kernel parameters.
        const KERNEL_NODE_PARAMS = 1 << 2;
        /// `CU_GRAPH_DEBUG_DOT_FLAGS_MEMCPY_NODE_PARAMS`: memcpy parameters.
        const MEMCPY_NODE_PARAMS = 1 << 3;
        /// `CU_GRAPH_DEBUG_DOT_FLAGS_MEMSET_NODE_PARAMS`: memset parameters.
        const MEMSET_NODE_PARAMS = 1 << 4;
        /// `CU_GRAPH_DEBUG_DOT_FLAGS_HOST_NODE_PARAMS`: host node parameters.
        const HOST_NODE_PARAMS = 1 << 5;
        /// `CU_GRAPH_DEBUG_DOT_FLAGS_EVENT_NODE_PARAMS`: event node parameters.
        const EVENT_NODE_PARAMS = 1 << 6;
        /// `CU_GRAPH_DEBUG_DOT_FLAGS_CONDITIONAL_NODE_PARAMS`: conditional node parameters.
        const CONDITIONAL_NODE_PARAMS = 1 << 15;
    }
}

impl Graph {
    /// Writes the graph in Graphviz DOT to `path`
    /// ([`cuGraphDebugDotPrint`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// A path that is not UTF-8 or holds a NUL byte is an [`Error::InvalidArgument`]; a file
    /// the driver cannot write fails with its status (`CUDA_ERROR_OPERATING_SYSTEM`).
    pub fn write_dot(&self, path: impl AsRef<Path>, flags: DotFlags) -> Result<()> {
        let path = path.as_ref();
        let text = path.to_str().ok_or_else(|| {
            Error::invalid(
                "Graph::write_dot",
                format!("{} is not valid UTF-8; give a UTF-8 path", path.display()),
            )
        })?;
        let c_path = CString::new(text).map_err(|_| {
            Error::invalid("Graph::write_dot", format!("{text:?} holds a NUL byte; give a path without one"))
        })?;
        // SAFETY: the graph is live; the path is NUL-terminated.
        check("cuGraphDebugDotPrint", unsafe {
            sys::cuGraphDebugDotPrint(self.raw, c_path.as_ptr(), flags.bits())
        })
    }

    /// The graph in Graphviz DOT, as [`write_dot`](Self::write_dot) writes it (through a
    /// file in the temporary directory, removed afterwards).
    ///
    /// Fails as [`write_dot`](Self::write_dot) does, and with an [`Error::InvalidArgument`]
    /// naming the file when it cannot be read back.
    pub fn to_dot(&self, flags: DotFlags) -> Result<String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name =
            format!("cuda-core-graph-{}-{}.dot", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(name);
        let written = self.write_dot(&path, flags);
        let read = written.and_then(|()| {
            std::fs::read_to_string(&path).map_err(|e| {
                Error::invalid("Graph::to_dot", format!("could not read back {}: {e}", path.display()))
            })
        });
        // The file may not exist when the driver failed; nothing to report then.
        let _ = std::fs::remove_file(&path);
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_have_the_header_values() {
        use sys::CUgraphDebugDot_flags as F;
        assert_eq!(DotFlags::VERBOSE.bits(), F::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE.0);
        assert_eq!(DotFlags::EVENT_NODE_PARAMS.bits(), F::CU_GRAPH_DEBUG_DOT_FLAGS_EVENT_NODE_PARAMS.0);
        assert_eq!(
            DotFlags::CONDITIONAL_NODE_PARAMS.bits(),
            F::CU_GRAPH_DEBUG_DOT_FLAGS_CONDITIONAL_NODE_PARAMS.0
        );
    }
}
