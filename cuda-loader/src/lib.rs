//! Run-time loading shared by the CUDA `-sys` crates.
//!
//! Nothing here panics or aborts. A library that cannot be opened, a symbol it lacks, or a
//! function newer than the installed library becomes a [`LoadError`]: the generated function
//! that needed it returns its library's own error status, and the full reason can be read back
//! with [`load_error`] (by symbol) or [`last_load_error`] (the calling thread's latest).
//!
//! * [`Library`] finds a shared library on first use: an environment variable naming the file
//!   wins, then a list of standard names is tried in order.
//! * [`Slot`] holds one lazily resolved function address. Once resolved, reading it is one
//!   atomic load; resolution itself runs once per symbol, under a lock, on first use.

mod error;
mod library;
mod per_thread;
mod slot;

pub use error::{LoadError, LoadErrorKind, last_load_error, load_error};
pub use library::{Library, Loaded, symbol_address};
pub use per_thread::{AlreadyChosen, DefaultStreamChoice};
pub use slot::{Failure, Slot};
