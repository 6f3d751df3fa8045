//! The shared store conformance suite against a real etcd: each test starts its own
//! `/usr/bin/etcd` ([`TestEtcd`]) on loopback ports with a temporary data directory, so
//! compactions and revisions of one test never meet another's. etcd numbers from 1 and writes
//! from 2, which the suite must not notice.

use std::sync::Arc;

use strata_store::conformance::Subject;
use strata_store_etcd::testing::{TestEtcd, ETCD};

async fn subject() -> Subject {
    let etcd = TestEtcd::start()
        .unwrap_or_else(|e| panic!("cannot start {ETCD} (Debian's etcd-server): {e}"));
    let store = etcd.store("/registry").await;
    Subject::with_guard(Arc::new(store), etcd)
}

strata_store::store_conformance_tests!(subject());
