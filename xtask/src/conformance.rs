//! `cargo xtask conformance --server URL …`: runs the black-box checks of `strata-conformance`
//! against any Kubernetes-compatible server. The flags are the library's; see its usage text.

use std::process::ExitCode;

/// Runs the checker with `args` (everything after `conformance`); its exit status is ours.
pub fn conformance(args: &[String]) -> ExitCode {
    let code = strata_conformance::main_with_args(args);
    ExitCode::from(u8::try_from(code).unwrap_or(2))
}
