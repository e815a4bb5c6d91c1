//! The choice between the legacy and the per-thread default stream, fixed on first use.

use std::sync::atomic::{AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const LEGACY: u8 = 1;
const PER_THREAD: u8 = 2;

/// Which default stream a library's functions use; fixed by the first resolution.
pub struct DefaultStreamChoice {
    mode: AtomicU8,
    env_var: &'static str,
}

/// The default stream was already fixed, to another choice than the one asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlreadyChosen {
    /// Whether the per-thread default stream is the one in effect.
    pub per_thread: bool,
}

impl std::fmt::Display for AlreadyChosen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let which = if self.per_thread { "per-thread" } else { "legacy" };
        write!(f, "the default stream is already fixed to the {which} stream; choose before the first call")
    }
}

impl std::error::Error for AlreadyChosen {}

impl DefaultStreamChoice {
    /// Undecided; `env_var` set to `1` selects the per-thread stream when nothing else does.
    pub const fn new(env_var: &'static str) -> Self {
        DefaultStreamChoice { mode: AtomicU8::new(UNDECIDED), env_var }
    }

    /// Fixes the choice. Fails, changing nothing, if another choice is already fixed.
    pub fn set(&self, per_thread: bool) -> Result<(), AlreadyChosen> {
        let want = if per_thread { PER_THREAD } else { LEGACY };
        match self.mode.compare_exchange(UNDECIDED, want, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(current) if current == want => Ok(()),
            Err(current) => Err(AlreadyChosen { per_thread: current == PER_THREAD }),
        }
    }

    /// Whether the per-thread default stream is in effect, fixing the choice from the
    /// environment if it was not made yet.
    pub fn per_thread(&self) -> bool {
        let mode = self.mode.load(Ordering::Acquire);
        if mode != UNDECIDED {
            return mode == PER_THREAD;
        }
        let from_env = std::env::var(self.env_var).is_ok_and(|v| v == "1");
        // Losing a race here is fine: the winner's choice is read back below.
        let _ = self.set(from_env);
        self.mode.load(Ordering::Acquire) == PER_THREAD
    }
}
