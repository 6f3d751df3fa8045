//! Strata's HTTP integration tests, one module per area, in one test binary (one link instead
//! of one per file). Each test starts its own server on 127.0.0.1 with a temporary data
//! directory and speaks to it over HTTP or through a real client.

mod common;

mod audit;
mod authn;
mod cbor;
mod cli;
mod conformance;
mod controller_kinds;
mod crash;
mod crd_clients;
mod crd_validation;
mod crds;
mod dashboard;
mod deletion;
mod encryption;
mod etcd;
mod etcd_faults;
mod etcd_replicas;
mod health;
mod http_api;
mod kube_client;
mod kube_watch;
mod kubectl;
mod kubectl_defaults;
mod limits;
mod lists;
mod media;
mod metrics;
mod namespace_defaults;
mod one_process;
mod overload;
mod protobuf;
mod python_client;
mod rbac;
mod rbac_types;
mod review_apis;
mod runtime_types;
mod shared_pki;
mod snapshot;
mod tables;
mod tls;
mod tokens;
mod updates;
mod watch;
