//! Load errors and where they are kept for later reading.

use std::cell::RefCell;
use std::sync::Mutex;

/// Why a library or one of its functions could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The library concerned, by its usual name (`libcuda.so.1`, `libcudart.so.13`, ...).
    pub library: &'static str,
    /// What went wrong.
    pub kind: LoadErrorKind,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&message(self.library, &self.kind))
    }
}

impl std::error::Error for LoadError {}

/// The reasons a load can fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadErrorKind {
    /// No candidate file could be opened. Each entry is a file tried and the loader's message.
    LibraryNotFound {
        /// `(file, reason)` for every file that was tried, in order.
        tried: Vec<(String, String)>,
        /// The environment variable that names the file to load instead.
        env_var: &'static str,
        /// What to install to get the library.
        install_hint: &'static str,
    },
    /// The library was opened but does not provide the symbol.
    SymbolNotFound {
        /// The function asked for.
        symbol: String,
        /// The file the library was loaded from.
        file: String,
        /// The loaded library's version, where it reports one (`13.0`, `2.18.3`).
        installed: Option<String>,
    },
    /// The function exists only in a newer version of the library than the one installed.
    VersionTooOld {
        /// The function asked for.
        symbol: String,
        /// The version the function's ABI needs, as the library encodes it (e.g. 12050).
        needed: i32,
        /// The version installed, in the same encoding.
        installed: i32,
    },
    /// The library was found but could not be used (for example its version query failed).
    Unusable {
        /// The file the library was loaded from.
        file: String,
        /// What failed.
        reason: String,
    },
}

/// A version as `library` numbers its releases: NCCL's `22809` is 2.28.9, CUDA's `12050` is 12.5.
/// A CUDA-style version code (`major * 1000 + minor * 10`, 13000 for 13.0) of `major.minor`;
/// `None` when it does not fit, or a part is negative.
pub fn version_code(major: i64, minor: i64) -> Option<i32> {
    if major < 0 || minor < 0 {
        return None;
    }
    i32::try_from(major.checked_mul(1000)?.checked_add(minor.checked_mul(10)?)?).ok()
}

/// `major.minor` of a CUDA-style version code (`12.5` for 12050).
pub fn cuda_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn version_text(library: &str, v: i32) -> String {
    if library.starts_with("libnccl") {
        let (major, rest) = if v >= 10000 { (v / 10000, v % 10000) } else { (v / 1000, v % 1000) };
        format!("{major}.{}.{}", rest / 100, rest % 100)
    } else {
        cuda_version_text(v)
    }
}

/// The message of a [`LoadError`]: what failed and what to do about it.
fn message(library: &str, kind: &LoadErrorKind) -> String {
    match kind {
        LoadErrorKind::LibraryNotFound { tried, env_var, install_hint } => {
            let tried: Vec<String> = tried
                .iter()
                .map(|(file, why)| {
                    // The system loader's message usually starts with the file name already.
                    if why.starts_with(file.as_str()) { why.clone() } else { format!("{file}: {why}") }
                })
                .collect();
            format!(
                "could not load {library}: {install_hint}, or set {env_var} to the library's path (tried {})",
                tried.join("; ")
            )
        }
        LoadErrorKind::SymbolNotFound { symbol, file, installed } => {
            let version = installed.as_ref().map(|v| format!(" {v}")).unwrap_or_default();
            format!(
                "{symbol} is not provided by {library}{version} (loaded from {file}); install a newer {library}"
            )
        }
        LoadErrorKind::VersionTooOld { symbol, needed, installed } => format!(
            "{symbol} needs {library} {} or newer, but {} is installed; upgrade it",
            version_text(library, *needed),
            version_text(library, *installed)
        ),
        LoadErrorKind::Unusable { file, reason } => {
            format!("{library} (loaded from {file}) cannot be used: {reason}")
        }
    }
}

/// Errors recorded per symbol, kept for the life of the process. Only the cold path touches it.
static RECORDED: Mutex<Vec<(&'static str, LoadError)>> = Mutex::new(Vec::new());

thread_local! {
    static LAST: RefCell<Option<LoadError>> = const { RefCell::new(None) };
}

pub(crate) fn record(function: &'static str, error: &LoadError) {
    if let Ok(mut all) = RECORDED.lock() {
        if !all.iter().any(|(f, _)| *f == function) {
            all.push((function, error.clone()));
        }
    }
    set_last(error);
}

pub(crate) fn set_last(error: &LoadError) {
    LAST.with(|l| *l.borrow_mut() = Some(error.clone()));
}

/// The reason the function `function` could not be resolved, if a call to it failed to load.
/// The name is the one the caller called (`cuCtxGetDevice_v2`, `cuEventElapsedTime_v2000`), so
/// each ABI version of a function has its own record.
pub fn load_error(function: &str) -> Option<LoadError> {
    let all = RECORDED.lock().ok()?;
    all.iter().find(|(f, _)| *f == function).map(|(_, e)| e.clone())
}

/// The latest load failure seen by the calling thread, if any.
pub fn last_load_error() -> Option<LoadError> {
    LAST.with(|l| l.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(library: &'static str, kind: LoadErrorKind) -> String {
        LoadError { library, kind }.to_string()
    }

    #[test]
    fn each_reason_reads_as_what_failed_and_what_to_do() {
        let tried = vec![
            ("a.so".to_string(), "a.so: cannot open shared object file".to_string()),
            ("b.so".to_string(), "no such file".to_string()),
        ];
        assert_eq!(
            text(
                "libx.so.1",
                LoadErrorKind::LibraryNotFound { tried, env_var: "X_PATH", install_hint: "install X" }
            ),
            "could not load libx.so.1: install X, or set X_PATH to the library's path \
             (tried a.so: cannot open shared object file; b.so: no such file)"
        );
        let missing = |installed: Option<&str>| LoadErrorKind::SymbolNotFound {
            symbol: "cuFoo".into(),
            file: "/lib/libcuda.so.1".into(),
            installed: installed.map(Into::into),
        };
        assert_eq!(
            text("libcuda.so.1", missing(Some("12.4"))),
            "cuFoo is not provided by libcuda.so.1 12.4 (loaded from /lib/libcuda.so.1); install a newer libcuda.so.1"
        );
        assert_eq!(
            text("libcuda.so.1", missing(None)),
            "cuFoo is not provided by libcuda.so.1 (loaded from /lib/libcuda.so.1); install a newer libcuda.so.1"
        );
        let too_old =
            LoadErrorKind::VersionTooOld { symbol: "cuCtxCreate".into(), needed: 12050, installed: 12040 };
        assert_eq!(
            text("libcuda.so.1", too_old),
            "cuCtxCreate needs libcuda.so.1 12.5 or newer, but 12.4 is installed; upgrade it"
        );
        let unusable = LoadErrorKind::Unusable { file: "/x.so".into(), reason: "it is not a driver".into() };
        assert_eq!(
            text("libcuda.so.1", unusable),
            "libcuda.so.1 (loaded from /x.so) cannot be used: it is not a driver"
        );
    }

    #[test]
    fn versions_are_written_as_each_library_numbers_them() {
        assert_eq!(version_text("libcuda.so.1", 12050), "12.5");
        assert_eq!(version_code(13, 5), Some(13050));
        assert_eq!(version_code(-1, 0), None);
        assert_eq!(version_code(i64::from(u32::MAX), 0), None);
        assert_eq!(version_text("libnccl.so.2", 22809), "2.28.9");
        assert_eq!(version_text("libnccl.so.2", 2804), "2.8.4");
        let too_old =
            LoadErrorKind::VersionTooOld { symbol: "ncclCommSplit".into(), needed: 21800, installed: 21703 };
        assert_eq!(
            text("libnccl.so.2", too_old),
            "ncclCommSplit needs libnccl.so.2 2.18.0 or newer, but 2.17.3 is installed; upgrade it"
        );
    }

    #[test]
    fn an_already_fixed_default_stream_says_which() {
        let e = crate::AlreadyChosen { per_thread: true };
        assert_eq!(
            e.to_string(),
            "the default stream is already fixed to the per-thread stream; choose before the first call"
        );
        let e = crate::AlreadyChosen { per_thread: false };
        assert!(e.to_string().contains("fixed to the legacy stream"), "{e}");
    }
}
