//! The crate's one error type.
//!
//! Every failure says which call failed and why, by the library's own status name
//! (`cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)`), or, for mistakes caught
//! before any call, what was wrong with the arguments.

#[cfg(feature = "runtime")]
use cuhost_cudart_sys as rt;
use cuhost_driver_sys as sys;
#[cfg(feature = "nccl")]
use cuhost_nccl_sys as nccl;
#[cfg(feature = "compile")]
use cuhost_nvjitlink_sys as nvjitlink;
#[cfg(feature = "compile")]
use cuhost_nvrtc_sys as nvrtc;
use std::fmt;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in this crate.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A CUDA driver call returned an error status.
    Driver {
        /// The C function that failed, e.g. `cuMemAlloc`.
        call: &'static str,
        /// The status it returned.
        status: sys::CUresult,
    },
    /// A CUDA runtime call returned an error status.
    #[cfg(feature = "runtime")]
    Runtime {
        /// The C function that failed, e.g. `cudaMalloc`.
        call: &'static str,
        /// The status it returned.
        status: rt::cudaError_t,
    },
    /// An NCCL call returned an error status.
    #[cfg(feature = "nccl")]
    Nccl {
        /// The C function that failed, e.g. `ncclAllReduce`.
        call: &'static str,
        /// The status it returned.
        status: nccl::ncclResult_t,
    },
    /// A library, or one of its functions, could not be loaded.
    Load {
        /// The C function that was being called.
        call: &'static str,
        /// Why it could not be loaded: files tried, symbol, versions.
        source: sys::LoadError,
    },
    /// An argument was rejected before any call was made (sizes, bounds, alignment, ranges).
    /// Made with [`Error::invalid`] or [`Error::refused`]; matched with `..`, as more fields
    /// may come.
    #[non_exhaustive]
    InvalidArgument {
        /// The operation that rejected it, e.g. `DeviceBuffer::copy_from`.
        operation: &'static str,
        /// What was wrong, in words that say how to fix it.
        message: String,
        /// The kind of refusal, for a caller that branches on it.
        reason: Reason,
    },
    /// What was asked does not exist on this platform (a Windows handle on Linux, say); nothing
    /// was called.
    Unsupported {
        /// The operation that refused it, e.g. `ExternalMemory::import`.
        operation: &'static str,
        /// What is missing, and what to use instead.
        message: String,
    },
    /// A wait that has a deadline ran past it: a peer that never came, work that never ended.
    /// What was waited for was given up (an NCCL communicator aborted, say); `message` says what
    /// was still missing and what to check.
    Timeout {
        /// The operation that gave up, e.g. `Communicator::init_rank_within`.
        operation: &'static str,
        /// How long it waited.
        waited: std::time::Duration,
        /// What did not happen in time, and what to check.
        message: String,
    },
    /// Ranks could not exchange what they need to form an NCCL communicator (the unique id,
    /// over TCP): a connection failed, or a peer of another job, protocol or rank count
    /// answered and was refused. `message` names the peer and what to fix.
    #[cfg(feature = "nccl")]
    Rendezvous {
        /// The operation that failed, e.g. `Bootstrap::unique_id`.
        operation: &'static str,
        /// What went wrong, with the address and the rank concerned.
        message: String,
    },
    /// A memory pool or allocator could not satisfy a request, even after releasing its cache.
    OutOfMemory {
        /// The bytes asked for.
        requested: usize,
        /// The bytes the allocator held when it gave up.
        held: usize,
        /// The allocator's limit, if one is set.
        limit: Option<usize>,
    },
    /// An error met while a value was dropped: a `Drop` cannot return it, so it was kept in the
    /// value's context and is reported by the next call there (or read with
    /// [`Context::take_deferred_errors`](crate::Context::take_deferred_errors)). It names the
    /// value and, where the crate knows it, the line of the program that made it, so that a
    /// part of an application is not blamed for another's drop.
    /// [`call`](Error::call) and [`driver_status`](Error::driver_status) look through it.
    Dropped {
        /// The type of the value dropped, e.g. `DeviceBuffer`.
        what: &'static str,
        /// Where the program made the value (its constructor's caller), where known.
        made_at: Option<&'static std::panic::Location<'static>>,
        /// What went wrong while it was dropped.
        error: Box<Error>,
    },
    /// A host function run by the GPU (a stream callback) panicked; the panic was caught.
    CallbackPanicked {
        /// The panic's message.
        message: String,
    },
    /// The driver refused to make an executable graph of a graph
    /// (`cuGraphInstantiateWithParams`).
    GraphInstantiate {
        /// Why, as the driver says: `CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE` (a cycle or a
        /// node that does not belong), `..._NODE_OPERATION_NOT_SUPPORTED`,
        /// `..._MULTIPLE_CTXS_NOT_SUPPORTED`, `..._CONDITIONAL_HANDLE_UNUSED`, or `..._ERROR`.
        result: sys::CUgraphInstantiateResult,
        /// The status the call returned.
        status: sys::CUresult,
        /// The node the driver blames, as the address of its handle (compare with
        /// [`GraphNode::id`](crate::graph::GraphNode::id)), when it names one.
        node: Option<usize>,
    },
    /// The driver refused to update an executable graph from another graph
    /// (`cuGraphExecUpdate`); the executable graph is unchanged and can still be launched.
    GraphUpdate {
        /// Why, as the driver says: `CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED`,
        /// `..._NODE_TYPE_CHANGED`, `..._FUNCTION_CHANGED`, `..._PARAMETERS_CHANGED`,
        /// `..._NOT_SUPPORTED`, `..._UNSUPPORTED_FUNCTION_CHANGE`, `..._ATTRIBUTES_CHANGED`.
        result: sys::CUgraphExecUpdateResult,
        /// The node of the new graph the driver blames, as the address of its handle
        /// (compare with [`GraphNode::id`](crate::graph::GraphNode::id)), when it names one.
        node: Option<usize>,
    },
    /// The JIT compiler or linker rejected its input (PTX, cubin, fat binary, linker input).
    Jit {
        /// The C function that failed, e.g. `cuModuleLoadDataEx`.
        call: &'static str,
        /// The status it returned.
        status: sys::CUresult,
        /// The compiler's error log: what is wrong with the input, and where.
        log: String,
    },
    /// NVRTC refused a program or a call ([`compile`](crate::compile)): for a compile error,
    /// `log` is NVRTC's whole log, each diagnostic as `file(line): error: message`
    /// ([`compile::diagnostics`](crate::compile::diagnostics) splits it).
    #[cfg(feature = "compile")]
    Nvrtc {
        /// The C function that failed, e.g. `nvrtcCompileProgram`.
        call: &'static str,
        /// The status it returned.
        status: nvrtc::nvrtcResult,
        /// The compiler's log; empty for failures that are not about the source.
        log: String,
    },
    /// nvJitLink refused to link ([`compile::Linker`](crate::compile::Linker)); `log` is its
    /// error log.
    #[cfg(feature = "compile")]
    NvJitLink {
        /// The C function that failed, e.g. `nvJitLinkComplete`.
        call: &'static str,
        /// The status it returned.
        status: nvjitlink::nvJitLinkResult,
        /// The linker's error log.
        log: String,
    },
}

/// The kind of an [`Error::InvalidArgument`], beside its message: what a caller that handles
/// some refusals and passes the others on compares with (`e.reason() ==
/// Some(Reason::OUT_OF_BOUNDS)`, or in a pattern). Named constants, as the flag types are,
/// so more kinds may come without breaking a match; prints as its name.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(u8);

impl Reason {
    /// Two lengths that must match do not (a copy's source and destination, say).
    pub const LENGTH_MISMATCH: Reason = Reason(1);
    /// An index, range or region reaches past the end of what it names.
    pub const OUT_OF_BOUNDS: Reason = Reason(2);
    /// The memory, stream or handle belongs to another context than the one the call needs.
    pub const WRONG_CONTEXT: Reason = Reason(3);
    /// A stream that cannot name the stream meant here: another thread's per-thread default
    /// stream, or a default stream of another context.
    pub const WRONG_STREAM: Reason = Reason(4);
    /// Refused because of a stream capture: work that a graph could not hold, memory that
    /// exists only inside a capture used outside it, or a wait a capture would break.
    pub const DURING_CAPTURE: Reason = Reason(5);
    /// Any other refusal; the message says what.
    pub const OTHER: Reason = Reason(0);

    /// The kind's name, as written above.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "LENGTH_MISMATCH",
            2 => "OUT_OF_BOUNDS",
            3 => "WRONG_CONTEXT",
            4 => "WRONG_STREAM",
            5 => "DURING_CAPTURE",
            _ => "OTHER",
        }
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Reason::{}", self.name())
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Error {
    /// An [`Error::InvalidArgument`] of [`Reason::OTHER`].
    #[cold]
    #[inline(never)]
    pub fn invalid(operation: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument { operation, message: message.into(), reason: Reason::OTHER }
    }

    /// An [`Error::InvalidArgument`] for `reason`.
    #[cold]
    #[inline(never)]
    pub fn refused(reason: Reason, operation: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument { operation, message: message.into(), reason }
    }

    /// Why an argument was refused, for an [`Error::InvalidArgument`] (or one met while a
    /// value was dropped, as [`call`](Error::call) looks through [`Error::Dropped`]).
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Error::InvalidArgument { reason, .. } => Some(*reason),
            Error::Dropped { error, .. } => error.reason(),
            _ => None,
        }
    }

    /// This error as met while dropping a `what` made at `made_at`; an error already so
    /// marked is left as it is.
    #[cold]
    pub(crate) fn dropping(
        self,
        what: &'static str,
        made_at: Option<&'static std::panic::Location<'static>>,
    ) -> Self {
        match self {
            Error::Dropped { .. } => self,
            error => Error::Dropped { what, made_at, error: Box::new(error) },
        }
    }

    /// The driver status, when this is a driver error (or one met while a value was dropped).
    pub fn driver_status(&self) -> Option<sys::CUresult> {
        match self {
            Error::Driver { status, .. } | Error::Jit { status, .. } => Some(*status),
            Error::Dropped { error, .. } => error.driver_status(),
            _ => None,
        }
    }

    /// The C function that failed, when the error came from a call.
    pub fn call(&self) -> Option<&'static str> {
        match self {
            Error::Driver { call, .. } | Error::Load { call, .. } | Error::Jit { call, .. } => Some(call),
            #[cfg(feature = "runtime")]
            Error::Runtime { call, .. } => Some(call),
            #[cfg(feature = "nccl")]
            Error::Nccl { call, .. } => Some(call),
            #[cfg(feature = "compile")]
            Error::Nvrtc { call, .. } | Error::NvJitLink { call, .. } => Some(call),
            Error::Dropped { error, .. } => error.call(),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Error::Driver { call, status } => driver_text(call, *status),
            #[cfg(feature = "runtime")]
            Error::Runtime { call, status } => runtime_text(call, *status),
            #[cfg(feature = "nccl")]
            Error::Nccl { call, status } => nccl_text(call, *status),
            Error::Load { call, source } => return write!(f, "{call} could not be loaded: {source}"),
            Error::InvalidArgument { operation, message, .. } | Error::Unsupported { operation, message } => {
                return write!(f, "{operation}: {message}");
            }
            Error::Timeout { operation, waited, message } => {
                return write!(f, "{operation} gave up after {:.1} s: {message}", waited.as_secs_f64());
            }
            #[cfg(feature = "nccl")]
            Error::Rendezvous { operation, message } => return write!(f, "{operation}: {message}"),
            Error::OutOfMemory { requested, held, limit } => out_of_memory_text(*requested, *held, *limit),
            Error::CallbackPanicked { message } => return write!(f, "a stream callback panicked: {message}"),
            Error::Dropped { what, made_at, error } => {
                write!(f, "{error} (met while dropping the {what}")?;
                if let Some(at) = made_at {
                    write!(f, " made at {}:{}:{}", at.file(), at.line(), at.column())?;
                }
                return f.write_str("; kept, and reported by the next call in its context)");
            }
            Error::GraphInstantiate { result, status, node } => {
                graph_instantiate_text(*result, *status, *node)
            }
            Error::GraphUpdate { result, node } => graph_update_text(*result, *node),
            Error::Jit { call, status, log } => jit_text(call, *status, log),
            #[cfg(feature = "compile")]
            Error::Nvrtc { call, status, log } => {
                compiler_text(call, status.name(), i64::from(status.0), log)
            }
            #[cfg(feature = "compile")]
            Error::NvJitLink { call, status, log } => {
                compiler_text(call, status.name(), i64::from(status.0), log)
            }
        };
        f.write_str(&text)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Load { source, .. } => Some(source),
            Error::Dropped { error, .. } => Some(&**error),
            _ => None,
        }
    }
}

fn driver_description(status: sys::CUresult) -> Option<String> {
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: the out-pointer is a live local; the driver writes a static string or nothing.
    let r = unsafe { sys::cuGetErrorString(status, &mut text) };
    if r != sys::CUresult::CUDA_SUCCESS || text.is_null() {
        return None;
    }
    // SAFETY: the driver returned a NUL-terminated static string.
    Some(unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().into_owned())
}

#[cfg(feature = "runtime")]
fn runtime_description(status: rt::cudaError_t) -> Option<String> {
    // SAFETY: cudaGetErrorString takes any value and returns a static string (or, unloaded, ours).
    let text = unsafe { rt::cudaGetErrorString(status) };
    if text.is_null() || rt::library_error().is_some() {
        return None;
    }
    // SAFETY: a NUL-terminated static string.
    Some(unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().into_owned())
}

#[cfg(feature = "nccl")]
fn nccl_description(status: nccl::ncclResult_t) -> Option<String> {
    if nccl::library_error().is_some() {
        return None;
    }
    // SAFETY: ncclGetErrorString takes any value and returns a static string.
    let text = unsafe { nccl::ncclGetErrorString(status) };
    if text.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated static string.
    Some(unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().into_owned())
}

/// `<call> failed: <status name> (<description>)`, or `unknown status <n>` for a status the
/// headers do not name.
fn status_text(call: &str, name: Option<&str>, raw: i64, description: Option<String>) -> String {
    let name = name.map_or_else(|| format!("unknown status {raw}"), str::to_string);
    match description {
        Some(d) => format!("{call} failed: {name} ({d})"),
        None => format!("{call} failed: {name}"),
    }
}

fn driver_text(call: &str, status: sys::CUresult) -> String {
    match status.name() {
        Some(name) => status_text(call, Some(name), i64::from(status.0), driver_description(status)),
        // A status newer than the headers: the installed driver may know its name.
        None => {
            let name = driver_name(status);
            status_text(call, name.as_deref(), i64::from(status.0), driver_description(status))
        }
    }
}

/// The driver's own name for `status`
/// ([`cuGetErrorName`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__ERROR.html)),
/// for statuses the headers this crate was built with do not name.
fn driver_name(status: sys::CUresult) -> Option<String> {
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: the out-pointer is a live local; the driver writes a static string or nothing.
    let r = unsafe { sys::cuGetErrorName(status, &mut text) };
    if r != sys::CUresult::CUDA_SUCCESS || text.is_null() {
        return None;
    }
    // SAFETY: the driver returned a NUL-terminated static string.
    Some(unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().into_owned())
}

#[cfg(feature = "runtime")]
fn runtime_text(call: &str, status: rt::cudaError_t) -> String {
    status_text(call, status.name(), i64::from(status.0), runtime_description(status))
}

#[cfg(feature = "nccl")]
fn nccl_text(call: &str, status: nccl::ncclResult_t) -> String {
    status_text(call, status.name(), i64::from(status.0), nccl_description(status))
}

#[cfg(feature = "compile")]
fn compiler_text(call: &str, name: Option<&str>, raw: i64, log: &str) -> String {
    let text = status_text(call, name, raw, None);
    let log = log.trim_end();
    if log.is_empty() { text } else { format!("{text}; log:\n{log}") }
}

fn jit_text(call: &str, status: sys::CUresult, log: &str) -> String {
    let text = driver_text(call, status);
    if log.is_empty() { text } else { format!("{text}; compiler log:\n{log}") }
}

fn out_of_memory_text(requested: usize, held: usize, limit: Option<usize>) -> String {
    let head = format!("out of memory: {requested} bytes requested while {held} bytes are held");
    match limit {
        Some(l) => format!("{head} under a limit of {l} bytes; raise the limit or free memory"),
        None => format!("{head}; free memory or lower the request"),
    }
}

fn graph_instantiate_text(
    result: sys::CUgraphInstantiateResult,
    status: sys::CUresult,
    node: Option<usize>,
) -> String {
    let why = result.name().unwrap_or("an unknown instantiation result");
    let status = status.name().unwrap_or("an unknown status");
    let at = node.map(|n| format!(" at node {n:#x}")).unwrap_or_default();
    format!(
        "cuGraphInstantiateWithParams failed: {status}, {why}{at}; fix the graph's structure or the node named"
    )
}

fn graph_update_text(result: sys::CUgraphExecUpdateResult, node: Option<usize>) -> String {
    let why = result.name().unwrap_or("an unknown update result");
    let at = node.map(|n| format!(" at node {n:#x}")).unwrap_or_default();
    format!(
        "cuGraphExecUpdate refused the update: {why}{at}; the executable graph is unchanged: instantiate \
         the new graph instead, or change only node parameters"
    )
}

/// What a driver call returned, with the function's name: from `driver!(status: cuX(..))`, for
/// callers that look at the status before they turn it into a `Result`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Status {
    /// The function called.
    pub(crate) call: &'static str,
    /// What it returned.
    pub(crate) code: sys::CUresult,
}

impl Status {
    /// `Ok(())` for `CUDA_SUCCESS`, else the error naming the function.
    #[inline]
    pub(crate) fn check(self) -> Result<()> {
        check(self.call, self.code)
    }

    /// Whether the call returned `code`.
    #[inline]
    pub(crate) fn is(self, code: sys::CUresult) -> bool {
        self.code == code
    }
}

/// Turns a driver status into a `Result`; a status that means "could not be loaded" becomes
/// [`Error::Load`] with the loader's reason.
#[inline]
pub(crate) fn check(call: &'static str, status: sys::CUresult) -> Result<()> {
    if status == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(driver_error(call, status)) }
}

#[cold]
pub(crate) fn driver_error(call: &'static str, status: sys::CUresult) -> Error {
    if status == sys::CUresult::CUDA_ERROR_NOT_FOUND || status == sys::CUresult::CUDA_ERROR_NOT_SUPPORTED {
        if let Some(source) = sys::load_error(call).or_else(sys::library_error) {
            return Error::Load { call, source };
        }
    }
    Error::Driver { call, status }
}

/// Reports `e`, met in a `Drop` of a value tied to no context, on standard error as
/// `cuda-core: {what}: {e}`: `what` names the value and what became of it. Errors met in a
/// `Drop` with a context are kept in it instead, for the next call through it to return
/// ([`Context::take_deferred_errors`](crate::context::Context::take_deferred_errors)).
#[cold]
pub(crate) fn report_from_drop(what: &str, e: &Error) {
    let line = format!("cuda-core: {what}: {e}");
    #[cfg(test)]
    reported::push(&line);
    eprintln!("{line}");
}

/// The message of a panic caught where it must not unwind (in a function the driver calls,
/// or one a C caller called), with its payload leaked: dropping the payload may panic in turn,
/// and that unwind would leave the function.
#[cold]
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let message = match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (None, Some(s)) => s.clone(),
        (None, None) => "a panic without a message".to_owned(),
    };
    std::mem::forget(payload);
    message
}

/// A panic payload whose own drop panics, for the tests of the functions the driver calls:
/// dropped inside one, it would unwind out of it (and abort the process).
#[cfg(test)]
pub(crate) struct PanicsOnDrop;

#[cfg(test)]
impl Drop for PanicsOnDrop {
    #[allow(clippy::panic)]
    fn drop(&mut self) {
        panic!("a panic payload that panics when dropped");
    }
}

/// What [`report_from_drop`] printed on this thread, for the unit tests of the drops that use it.
#[cfg(test)]
pub(crate) mod reported {
    use std::cell::RefCell;

    thread_local! {
        static LINES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn push(line: &str) {
        LINES.with_borrow_mut(|lines| lines.push(line.to_string()));
    }

    /// The lines printed on this thread since the last call.
    pub(crate) fn take() -> Vec<String> {
        LINES.with_borrow_mut(std::mem::take)
    }
}

#[cfg(feature = "runtime")]
/// Turns a runtime status into a `Result`, like [`check`].
#[inline]
pub(crate) fn check_runtime(call: &'static str, status: rt::cudaError_t) -> Result<()> {
    if status == rt::cudaError_t::cudaSuccess { Ok(()) } else { Err(runtime_error(call, status)) }
}

#[cfg(feature = "runtime")]
#[cold]
pub(crate) fn runtime_error(call: &'static str, status: rt::cudaError_t) -> Error {
    if status == rt::cudaError_t::cudaErrorSymbolNotFound {
        if let Some(source) = rt::load_error(call).or_else(rt::library_error) {
            return Error::Load { call, source };
        }
    }
    Error::Runtime { call, status }
}

#[cfg(feature = "nccl")]
/// Turns an NCCL status into a `Result`, like [`check`]; `ncclSystemError` from a function that
/// could not be loaded becomes [`Error::Load`].
#[inline]
pub(crate) fn check_nccl(call: &'static str, status: nccl::ncclResult_t) -> Result<()> {
    if status == nccl::ncclResult_t::ncclSuccess { Ok(()) } else { Err(nccl_error(call, status)) }
}

#[cfg(feature = "nccl")]
#[cold]
pub(crate) fn nccl_error(call: &'static str, status: nccl::ncclResult_t) -> Error {
    if status == nccl::ncclResult_t::ncclSystemError {
        if let Some(source) = nccl::load_error(call).or_else(nccl::library_error) {
            return Error::Load { call, source };
        }
    }
    Error::Nccl { call, status }
}

/// The guide's error chapter against the errors the crate makes (a test of the whole crate, with
/// the tests of the pools in `pool/tests/`).
#[cfg(test)]
#[path = "error/tests/guide.rs"]
mod guide;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_from_drops_without_a_context_are_printed_with_what_became_of_the_value() {
        reported::take();
        report_from_drop("Thing kept", &Error::invalid("Thing::drop", "it was busy"));
        let lines = reported::take();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("cuda-core: Thing kept: "), "{lines:?}");
        assert!(lines[0].contains("it was busy"), "{lines:?}");
    }

    #[test]
    fn driver_errors_print_the_call_and_status_name() {
        let e = Error::Driver { call: "cuMemAlloc", status: sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY };
        let text = e.to_string();
        assert!(text.starts_with("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"), "{text}");
        assert_eq!(e.call(), Some("cuMemAlloc"));
        assert_eq!(e.driver_status(), Some(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY));
    }

    #[test]
    fn errors_kept_from_drops_name_the_value_and_where_it_was_made_and_look_through() {
        let at = std::panic::Location::caller();
        let cause =
            Error::Driver { call: "cuMemFreeAsync", status: sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS };
        let kept = cause.clone().dropping("DeviceBuffer", Some(at));
        let text = kept.to_string();
        assert!(text.starts_with("cuMemFreeAsync failed: CUDA_ERROR_ILLEGAL_ADDRESS"), "{text}");
        let place = format!("dropping the DeviceBuffer made at {}:{}:", at.file(), at.line());
        assert!(text.contains(&place), "{text}");
        assert_eq!(kept.call(), Some("cuMemFreeAsync"));
        assert_eq!(kept.driver_status(), Some(sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
        let source = std::error::Error::source(&kept).map(ToString::to_string);
        assert_eq!(source, Some(cause.to_string()));
        // Marked once: a second drop path leaves the first name.
        assert_eq!(kept.clone().dropping("Stream", None), kept);
        let unplaced = Error::invalid("Event::drop", "busy").dropping("Event", None).to_string();
        assert!(
            unplaced.ends_with(
                "(met while dropping the Event; kept, and reported by the next call in its context)"
            )
        );
    }

    #[test]
    fn refusals_say_their_reason_beside_the_message() {
        let mismatch = crate::memory::same_len("copy", 4, 5).unwrap_err();
        assert_eq!(mismatch.reason(), Some(Reason::LENGTH_MISMATCH));
        let bounds = crate::memory::view::range_of("slice", 2..9, 4).unwrap_err();
        assert_eq!(bounds.reason(), Some(Reason::OUT_OF_BOUNDS));
        assert_eq!(Error::invalid("x", "y").reason(), Some(Reason::OTHER));
        let refused = Error::refused(Reason::WRONG_CONTEXT, "op", "another context");
        assert_eq!(refused.to_string(), "op: another context", "the reason does not change the text");
        assert_eq!(Reason::WRONG_CONTEXT.to_string(), "WRONG_CONTEXT");
        let dropped = Error::refused(Reason::DURING_CAPTURE, "op", "captured").dropping("DeviceBuffer", None);
        assert_eq!(dropped.reason(), Some(Reason::DURING_CAPTURE), "looked for through Dropped");
        assert_eq!(
            Error::Driver { call: "cuInit", status: sys::CUresult::CUDA_ERROR_UNKNOWN }.reason(),
            None
        );
    }

    #[test]
    fn unknown_statuses_print_their_number() {
        let e = Error::Driver { call: "cuInit", status: sys::CUresult(123_456) };
        assert!(e.to_string().contains("unknown status 123456"), "{e}");
    }

    #[test]
    #[cfg(all(feature = "runtime", feature = "nccl"))]
    fn runtime_and_nccl_statuses_have_names() {
        let e = Error::Runtime { call: "cudaMalloc", status: rt::cudaError_t::cudaErrorMemoryAllocation };
        assert!(e.to_string().starts_with("cudaMalloc failed: cudaErrorMemoryAllocation"), "{e}");
        let e = Error::Nccl { call: "ncclAllReduce", status: nccl::ncclResult_t::ncclInvalidArgument };
        assert!(e.to_string().starts_with("ncclAllReduce failed: ncclInvalidArgument"), "{e}");
    }

    #[test]
    fn load_and_jit_errors_keep_their_messages() {
        let source = sys::LoadError {
            library: "libcuda.so.1",
            kind: sys::LoadErrorKind::VersionTooOld {
                symbol: "cuFuncLoad".into(),
                needed: 12040,
                installed: 12020,
            },
        };
        let e = Error::Load { call: "cuFuncLoad", source: source.clone() };
        assert_eq!(
            e.to_string(),
            "cuFuncLoad could not be loaded: cuFuncLoad needs libcuda.so.1 12.4 or newer, but 12.2 is installed; upgrade it"
        );
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(cause, Some(source.to_string()));
        let e = Error::Jit {
            call: "cuModuleLoadData",
            status: sys::CUresult(123_456),
            log: "line 3: bad".into(),
        };
        assert_eq!(
            e.to_string(),
            "cuModuleLoadData failed: unknown status 123456; compiler log:\nline 3: bad"
        );
        let e = Error::invalid("DeviceBuffer::copy_from", "lengths differ");
        assert_eq!(e.to_string(), "DeviceBuffer::copy_from: lengths differ");
        let e = Error::CallbackPanicked { message: "boom".into() };
        assert_eq!(e.to_string(), "a stream callback panicked: boom");
    }

    #[test]
    fn out_of_memory_states_size_held_and_limit() {
        let e = Error::OutOfMemory { requested: 1024, held: 4096, limit: Some(8192) };
        let text = e.to_string();
        assert_eq!(
            text,
            "out of memory: 1024 bytes requested while 4096 bytes are held under a limit of 8192 bytes; \
             raise the limit or free memory"
        );
        let e = Error::OutOfMemory { requested: 1024, held: 4096, limit: None };
        assert_eq!(
            e.to_string(),
            "out of memory: 1024 bytes requested while 4096 bytes are held; free memory or lower the request"
        );
    }
}
