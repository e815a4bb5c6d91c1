//! Finding and opening one shared library, once.

use crate::error::{LoadError, LoadErrorKind};
use std::sync::OnceLock;

/// A shared library opened on first use and kept open for the life of the process.
///
/// `T` is whatever the owning crate derives from the opened library (function addresses it
/// needs for its own resolution, the library's version); `init` builds it once.
pub struct Library<T: 'static> {
    name: &'static str,
    env_var: &'static str,
    candidates: &'static [&'static str],
    install_hint: &'static str,
    init: fn(&'static libloading::Library, &str) -> Result<T, LoadError>,
    state: OnceLock<Result<Loaded<T>, LoadError>>,
}

/// An opened library with the data its owner derived from it.
pub struct Loaded<T> {
    /// The opened library.
    pub library: &'static libloading::Library,
    /// The file it was opened from.
    pub file: String,
    /// What the owning crate derived from it.
    pub data: T,
}

impl<T: Send + Sync + 'static> Library<T> {
    /// Describes a library: its usual name (for messages), the environment variable that names a
    /// file to load instead, the names to try in order, what to tell a user who lacks it, and
    /// the function that prepares the owner's data once the file is open.
    pub const fn new(
        name: &'static str,
        env_var: &'static str,
        candidates: &'static [&'static str],
        install_hint: &'static str,
        init: fn(&'static libloading::Library, &str) -> Result<T, LoadError>,
    ) -> Self {
        Library { name, env_var, candidates, install_hint, init, state: OnceLock::new() }
    }

    /// The library's usual name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Opens the library on the first call; later calls return the same result.
    pub fn get(&self) -> Result<&Loaded<T>, &LoadError> {
        self.state.get_or_init(|| self.open()).as_ref()
    }

    /// The library and its data, if it was opened already (opens nothing).
    #[inline]
    pub fn loaded(&self) -> Option<&Loaded<T>> {
        self.state.get().and_then(|r| r.as_ref().ok())
    }

    /// Whether the library has been opened (or its opening has failed) already.
    pub fn is_initialized(&self) -> bool {
        self.state.get().is_some()
    }

    fn open(&self) -> Result<Loaded<T>, LoadError> {
        let from_env = std::env::var_os(self.env_var).filter(|v| !v.is_empty());
        let mut tried = Vec::new();
        let names: Vec<std::ffi::OsString> = match from_env {
            Some(path) => vec![path],
            None => self.candidates.iter().map(Into::into).collect(),
        };
        for file in names {
            // SAFETY: opening a library runs its initialisers. The libraries named here are the
            // vendor's own (or the one the user pointed the environment variable at), whose
            // initialisers are what every C program that links them runs too.
            match unsafe { libloading::Library::new(&file) } {
                Ok(lib) => {
                    let file = file.to_string_lossy().into_owned();
                    // The library stays open for the life of the process: resolved function
                    // addresses point into it.
                    let library: &'static libloading::Library = Box::leak(Box::new(lib));
                    let data = (self.init)(library, &file)?;
                    return Ok(Loaded { library, file, data });
                }
                Err(e) => tried.push((file.to_string_lossy().into_owned(), e.to_string())),
            }
        }
        Err(LoadError {
            library: self.name,
            kind: LoadErrorKind::LibraryNotFound {
                tried,
                env_var: self.env_var,
                install_hint: self.install_hint,
            },
        })
    }
}

/// Looks a symbol up by its exported name; `None` when the library lacks it.
pub fn symbol_address(library: &libloading::Library, name: &std::ffi::CStr) -> Option<usize> {
    // SAFETY: the address is only read as an integer here; callers cast it to the function
    // type the header declares for this exact name.
    let sym = unsafe { library.get::<*mut std::ffi::c_void>(name.to_bytes_with_nul()) };
    match sym {
        Ok(s) if !s.is_null() => Some(*s as usize),
        _ => None,
    }
}

impl<T: Send + Sync + 'static> Library<T> {
    /// Resolves a slot by its exported name (its per-thread variant's name when `per_thread` is
    /// set and the slot has one), for libraries whose functions are plain exports. `installed`
    /// is the library's version, for the error when the symbol is missing.
    pub fn resolve_exported(
        &self,
        slot: &crate::Slot,
        per_thread: bool,
        installed: Option<String>,
    ) -> Result<usize, LoadError> {
        let loaded = self.get().map_err(Clone::clone)?;
        let name =
            if per_thread && !slot.per_thread_name.is_empty() { slot.per_thread_name } else { slot.name };
        symbol_address(loaded.library, name).ok_or_else(|| LoadError {
            library: self.name,
            kind: LoadErrorKind::SymbolNotFound {
                symbol: name.to_string_lossy().into_owned(),
                file: loaded.file.clone(),
                installed,
            },
        })
    }
}
