//! Debug output: a graph in Graphviz DOT, to a file or a string.

use super::Graph;
use crate::error::{Error, Result};
use crate::flags::flags;
use std::ffi::CString;
use std::path::{Path, PathBuf};

flags! {
    /// What the DOT output shows besides nodes and edges (`CUgraphDebugDot_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
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
        unsafe { driver!(cuGraphDebugDotPrint(self.raw, c_path.as_ptr(), flags.bits())) }
    }

    /// The graph in Graphviz DOT, as [`write_dot`](Self::write_dot) writes it, through a
    /// file in a directory made for this call alone (`mkdtemp`: a random name in the
    /// temporary directory, readable by this user only) and removed afterwards, so another
    /// user of a shared temporary directory can neither redirect nor read the output.
    ///
    /// Fails as [`write_dot`](Self::write_dot) does, and with an [`Error::InvalidArgument`]
    /// naming the path when the directory cannot be made or the file cannot be read back.
    pub fn to_dot(&self, flags: DotFlags) -> Result<String> {
        let dir = PrivateDir::new()?;
        let path = dir.path().join("graph.dot");
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

/// A directory only this user can use, with a name no one can guess (mode 0700, made where no
/// file of that name exists), in the temporary directory and removed (when empty) on drop.
#[derive(Debug)]
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    const OP: &'static str = "Graph::to_dot";

    fn new() -> Result<PrivateDir> {
        use std::hash::{BuildHasher, RandomState};
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = None;
        for attempt in 0..16u32 {
            // A name from the process's random hash keys: unguessable by other users.
            let tag =
                RandomState::new().hash_one((std::process::id(), attempt, std::time::SystemTime::now()));
            let path = base.join(format!("cuda-core-graph-{tag:016x}"));
            // `mkdir` fails on any existing name (a link planted there included).
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(PrivateDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        let why = last.map(|e| e.to_string()).unwrap_or_default();
        Err(Error::invalid(
            Self::OP,
            format!(
                "could not make a private directory in {}: {why}; set TMPDIR to a writable directory",
                base.display()
            ),
        ))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        // Only an empty directory is removed; nothing else is ever put there.
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// G10 of the soundness review: `to_dot` used `$TMPDIR/cuda-core-graph-<pid>-<n>.dot`, a
    /// name another user could guess and plant a symlink at. Its directory is now made fresh,
    /// private and unguessable.
    #[test]
    fn to_dot_writes_in_a_fresh_private_directory() -> std::result::Result<(), Box<dyn std::error::Error>> {
        use std::os::unix::fs::PermissionsExt;
        let (a, b) = (PrivateDir::new()?, PrivateDir::new()?);
        assert_ne!(a.path(), b.path(), "two calls share a directory");
        for dir in [&a, &b] {
            let meta = std::fs::symlink_metadata(dir.path())?;
            assert!(meta.is_dir() && !meta.file_type().is_symlink(), "{}", dir.path().display());
            assert_eq!(meta.permissions().mode() & 0o777, 0o700, "{}", dir.path().display());
            let name = dir.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let suffix = name.trim_start_matches("cuda-core-graph-");
            let random = suffix.len() == 16 && suffix.chars().all(|c| c.is_ascii_hexdigit());
            assert!(random, "the name is not randomised: {name}");
        }
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists(), "{} is left behind", path.display());
        Ok(())
    }

    #[test]
    fn flags_have_the_header_values() {
        use cuhost_driver_sys::CUgraphDebugDot_flags as F;
        assert_eq!(DotFlags::VERBOSE.bits(), F::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE.0);
        assert_eq!(DotFlags::EVENT_NODE_PARAMS.bits(), F::CU_GRAPH_DEBUG_DOT_FLAGS_EVENT_NODE_PARAMS.0);
        assert_eq!(
            DotFlags::CONDITIONAL_NODE_PARAMS.bits(),
            F::CU_GRAPH_DEBUG_DOT_FLAGS_CONDITIONAL_NODE_PARAMS.0
        );
    }
}
