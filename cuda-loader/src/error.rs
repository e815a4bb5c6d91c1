//! Load errors and where they are kept for later reading.

use std::cell::RefCell;
use std::fmt;
use std::sync::Mutex;

/// Why a library or one of its functions could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The library concerned, by its usual name (`libcuda.so.1`, `libcudart.so.13`, ...).
    pub library: &'static str,
    /// What went wrong.
    pub kind: LoadErrorKind,
}

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

fn version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            LoadErrorKind::LibraryNotFound { tried, env_var, install_hint } => {
                write!(
                    f,
                    "could not load {}: {install_hint}, or set {env_var} to the library's path (tried ",
                    self.library
                )?;
                for (i, (file, why)) in tried.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    // The system loader's message usually starts with the file name already.
                    if why.starts_with(file.as_str()) {
                        f.write_str(why)?;
                    } else {
                        write!(f, "{file}: {why}")?;
                    }
                }
                f.write_str(")")
            }
            LoadErrorKind::SymbolNotFound { symbol, file, installed } => {
                write!(f, "{symbol} is not provided by {}", self.library)?;
                if let Some(v) = installed {
                    write!(f, " {v}")?;
                }
                write!(f, " (loaded from {file}); install a newer {}", self.library)
            }
            LoadErrorKind::VersionTooOld { symbol, needed, installed } => write!(
                f,
                "{symbol} needs {} {} or newer, but {} is installed; upgrade it",
                self.library,
                version_text(*needed),
                version_text(*installed)
            ),
            LoadErrorKind::Unusable { file, reason } => {
                write!(f, "{} (loaded from {file}) cannot be used: {reason}", self.library)
            }
        }
    }
}

impl std::error::Error for LoadError {}

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
