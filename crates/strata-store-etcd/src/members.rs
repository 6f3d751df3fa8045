//! Which members the client sends requests to. etcd-client balances requests over every
//! endpoint at random and checks none of them: a member that is frozen or cut off keeps its
//! connection open and never answers, so a third of the requests would wait for the deadline.
//! Here each endpoint is asked for its status every [`PROBE_EVERY`] on a connection of its own;
//! one that does not answer within [`PROBE_TIMEOUT`] leaves the balanced channel, and comes
//! back once it answers again. The last endpoint in the channel never leaves it (with every
//! member gone, requests fail at their deadline as before).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

/// How often each endpoint is probed.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long a probe may take before its endpoint counts as not answering.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Probes `endpoints` until dropped (aborting the task that runs this aborts every probe),
/// removing those that do not answer from `client`'s balanced channel and adding them back
/// when they do. Nothing to do for a single endpoint.
pub(crate) async fn monitor(client: Client, endpoints: Vec<String>, options: ConnectOptions) {
    if endpoints.len() < 2 {
        return;
    }
    // Which endpoints are out of the channel.
    let out = Arc::new(Mutex::new(vec![false; endpoints.len()]));
    let mut probes = tokio::task::JoinSet::new();
    for (i, endpoint) in endpoints.into_iter().enumerate() {
        probes.spawn(probe(
            client.clone(),
            endpoint,
            i,
            options.clone(),
            out.clone(),
        ));
    }
    // The probes run until this future is dropped, which drops the set and aborts them.
    while probes.join_next().await.is_some() {}
}

/// Probes endpoint `i` forever.
async fn probe(
    client: Client,
    endpoint: String,
    i: usize,
    options: ConnectOptions,
    out: Arc<Mutex<Vec<bool>>>,
) {
    // The channel knows an endpoint by its URI: one given without a scheme is left alone.
    if !endpoint.contains("://") {
        return;
    }
    let mut own: Option<Client> = None;
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let answered = tokio::time::timeout(PROBE_TIMEOUT, async {
            if own.is_none() {
                own = Some(
                    Client::connect(std::slice::from_ref(&endpoint), Some(options.clone()))
                        .await
                        .ok()?,
                );
            }
            own.as_mut()?.status().await.ok()
        })
        .await
        .ok()
        .flatten()
        .is_some();
        if !answered {
            // A fresh connection next time: this one may be stuck.
            own = None;
        }
        let change = {
            let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
            let is_out = out[i];
            let others_in = out.iter().enumerate().any(|(j, o)| j != i && !o);
            if answered && is_out {
                out[i] = false;
                Some(true)
            } else if !answered && !is_out && others_in {
                out[i] = true;
                Some(false)
            } else {
                None
            }
        };
        let result = match change {
            Some(true) => {
                tracing::info!(
                    endpoint,
                    "etcd member answers again; sending requests to it"
                );
                client.add_endpoint(&endpoint).await
            }
            Some(false) => {
                tracing::warn!(
                    endpoint,
                    "etcd member does not answer; sending requests to the others"
                );
                client.remove_endpoint(&endpoint).await
            }
            None => Ok(()),
        };
        if let Err(e) = result {
            tracing::warn!(endpoint, %e, "cannot change the endpoints of the etcd client");
        }
    }
}
