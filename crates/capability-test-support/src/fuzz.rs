//! The configuration of the workspace's property-based fuzz tests (the `fuzz` modules of the
//! integration tests): no fork, no timeouts, no failure files, a fixed seed.

use proptest::test_runner::{Config, RngSeed};

/// `cases` cases per property from the fixed `seed`, unless `PROPTEST_CASES` or
/// `PROPTEST_RNG_SEED` say otherwise (for longer runs by hand).
pub fn config(cases: u32, seed: u64) -> Config {
    let mut c = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(seed);
    }
    c.failure_persistence = None;
    c
}
