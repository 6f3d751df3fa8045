//! The watch cache (not built yet): a sliding window of recent events per resource type, fed by
//! the store's change feed, serving lists and watches from memory with one encoding per event.
//!
//! Today lists are read from the store directly by `strata-registry`; this crate fills in with
//! the watch issue. It depends only on `strata-object` and `strata-store`.
