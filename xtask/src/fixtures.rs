//! `cargo xtask fixtures`: regenerates the golden fixtures in `testdata/HEAD` from their one
//! source, the objects in `crates/strata-codec/tests/fixtures.rs`, then checks them. It does not
//! decide what the fixtures contain.

use crate::{cargo, run_step, Result};

/// Runs the fixture test with `STRATA_BLESS=1` (it writes the files instead of comparing), then
/// once more without, so the new files are known to round-trip.
pub fn fixtures() -> Result<()> {
    let test = ["test", "-p", "strata-codec", "--test", "fixtures"];
    let mut bless = cargo(test);
    bless.env("STRATA_BLESS", "1");
    crate::step("STRATA_BLESS=1: the fixture test writes testdata/HEAD");
    run_step(bless)?;
    run_step(cargo(test))
}
