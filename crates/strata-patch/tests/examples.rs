//! Runs the crate's examples under `cargo test`, so they cannot rot: each asserts what
//! Kubernetes would store at every step.

#[path = "../examples/apply_offline.rs"]
mod apply_offline;

#[test]
fn apply_offline_example_runs() {
    apply_offline::main().expect("the example runs to its end");
}
