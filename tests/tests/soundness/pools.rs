//! Soundness regressions (see the parent module).

use cuda_tests::Test;

/// The tests of this module.
pub const TESTS: &[Test] = &[];
