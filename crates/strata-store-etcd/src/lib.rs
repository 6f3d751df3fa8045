//! The Strata storage engine on etcd v3: the [`Store`] trait over an etcd cluster, under a key
//! prefix (`/registry` by default, as kube-apiserver lays its keys out), so that several
//! stateless Strata replicas share one store. The only crate that links the etcd client.
//!
//! The mapping follows kube-apiserver's:
//! - a revision is etcd's revision; a create is `Txn(If create_revision(key) == 0 → Put)`, an
//!   update or a conditional delete `Txn(If mod_revision(key) == expected → Put/Delete; else
//!   Get)`, so a failed write leaves no trace;
//! - reads name etcd revisions; etcd's "required revision has been compacted" and "is a future
//!   revision" become [`StoreError::Compacted`] and [`StoreError::FutureRevision`]; a value over
//!   etcd's request limit becomes [`StoreError::TooLarge`];
//! - the change feed is one long-lived watch of the prefix (see [`feed`]), complete through its
//!   last event or progress notification. Progress is requested only from etcd versions that
//!   deliver it in order ([`Store::request_progress`]); on older ones a prefix that is idle
//!   while other keys move the shared revision cannot be proven current, and consistent reads
//!   go to etcd;
//! - compaction is etcd's, physical, and coordinated between replicas like kube-apiserver's:
//!   a compare-and-swap on the version of a key (`<prefix>/compact_rev_key`) elects the one
//!   replica that compacts in an interval;
//! - every request has a deadline: an unreachable etcd gives [`StoreError::Unavailable`]
//!   promptly, never a hung call. Reads are retried on another member within it.
//!
//! Keys in the [`Store`] API are the part after the prefix.

mod feed;
pub mod load;
mod members;
mod quorum;
pub mod testing;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions,
    PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use strata_store::{
    Changes, KeyValue, RangeRequest, RangeResponse, Result, Revision, Store, StoreError,
};
use tokio::sync::watch;

use crate::feed::{Feed, Read};
use crate::quorum::QuorumReads;

/// How long one request to etcd may take, retries included, before it fails as unavailable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The key (under the prefix) whose version elects the replica that compacts, as
/// kube-apiserver's `compact_rev_key`. Hidden from the [`Store`] API.
const COMPACT_KEY: &str = "/compact_rev_key";

/// How long [`Store::changes`] waits for the watch to deliver this store's own acknowledged
/// writes before it answers with what has arrived (and says how far that is complete).
const OWN_WRITES_WAIT: Duration = Duration::from_secs(2);

/// TLS material for talking to etcd (kube-apiserver's `--etcd-cafile`, `--etcd-certfile`,
/// `--etcd-keyfile`).
#[derive(Clone, Debug, Default)]
pub struct EtcdTls {
    /// The CA that signed the members' serving certificates.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key, for members that check clients.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl EtcdTls {
    fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some()
    }

    fn options(&self) -> Result<etcd_client::TlsOptions> {
        let read = |path: &PathBuf| {
            std::fs::read(path)
                .map_err(|e| StoreError::Invalid(format!("cannot read {}: {e}", path.display())))
        };
        let mut tls = etcd_client::TlsOptions::new();
        if let Some(ca) = &self.ca_file {
            tls = tls.ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
        }
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => {
                return Err(StoreError::Invalid(
                    "--etcd-certfile and --etcd-keyfile go together".into(),
                ))
            }
        }
        Ok(tls)
    }
}

/// How the store names its keys in etcd.
///
/// Plainly, a Store key `k` is `<prefix>k`. With a `root` (`/registry`, the server's), Store
/// keys under the root drop it: `/registry/<rest>` is `<prefix>/<rest>`, kube-apiserver's
/// layout under any `--etcd-prefix`; the other Store keys (Strata's own, all under `/strata/`)
/// are `<prefix>/strata/...`, a name no resource collection takes (CRD groups hold a dot).
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
    root: String,
}

impl Keys {
    fn full(&self, key: &str) -> String {
        let rest = match key.strip_prefix(self.root.as_str()) {
            Some(rest) if !self.root.is_empty() && (rest.is_empty() || rest.starts_with('/')) => {
                rest
            }
            _ => key,
        };
        format!("{}{rest}", self.prefix)
    }

    /// The Store key of a full etcd key under the prefix.
    fn store_key(&self, full: &str) -> String {
        let rest = full.strip_prefix(self.prefix.as_str()).unwrap_or(full);
        if self.root.is_empty() || rest.starts_with("/strata/") {
            rest.to_string()
        } else {
            format!("{}{rest}", self.root)
        }
    }

    fn kv(&self, kv: &etcd_client::KeyValue) -> KeyValue {
        KeyValue {
            key: self.store_key(&String::from_utf8_lossy(kv.key())),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: Revision(kv.create_revision() as u64),
            mod_revision: Revision(kv.mod_revision() as u64),
        }
    }

    /// Whether a full etcd key is this store's own bookkeeping, not a Store key.
    fn is_internal(&self, key: &[u8]) -> bool {
        key.strip_prefix(self.prefix.as_bytes()) == Some(COMPACT_KEY.as_bytes())
    }

    /// The key range of everything under the prefix, as etcd takes it: the first key and the
    /// range end. An empty prefix is the whole keyspace (`"\0"` to `"\0"`).
    fn scope(&self) -> (Vec<u8>, Vec<u8>) {
        let start = if self.prefix.is_empty() {
            vec![0]
        } else {
            self.prefix.as_bytes().to_vec()
        };
        (start, prefix_end(self.prefix.as_bytes()))
    }
}

/// Where and how an [`EtcdStore`] keeps its keys, and how it reaches etcd.
#[derive(Clone, Debug, Default)]
pub struct EtcdOptions {
    /// The etcd key prefix (no trailing slash), e.g. `/registry`.
    pub prefix: String,
    /// A Store key prefix that the etcd prefix replaces (see the crate docs): `/registry` for
    /// kube-apiserver's layout under any prefix; empty to put every key under the prefix as is.
    pub root: String,
    pub tls: EtcdTls,
}

/// An etcd cluster as a [`Store`], under one key prefix.
pub struct EtcdStore {
    client: Client,
    keys: Keys,
    current: AtomicU64,
    /// The revision of this store's latest acknowledged write under the prefix.
    written: AtomicU64,
    compacted: Arc<AtomicU64>,
    /// The version of the compaction key when this store last looked.
    compact_version: AtomicI64,
    feed: Arc<Feed>,
    quorum: Arc<QuorumReads>,
    follower: tokio::task::JoinHandle<()>,
    /// Takes members that do not answer out of the client's rotation ([`members`]).
    members: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.keys.prefix)
            .field("feed", &self.feed)
            .finish_non_exhaustive()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.follower.abort();
        self.members.abort();
    }
}

pub(crate) fn unavailable(e: etcd_client::Error) -> StoreError {
    let text = e.to_string();
    // etcd's own refusal, and gRPC's when the message is over the member's receive limit.
    if text.contains("request is too large") || text.contains("larger than max") {
        StoreError::TooLarge(format!(
            "etcdserver: {}",
            text.trim_start_matches("etcdserver: ")
        ))
    } else {
        StoreError::Unavailable(text)
    }
}

/// Runs `call` under [`REQUEST_TIMEOUT`].
async fn bounded<T>(what: &str, call: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Unavailable(format!(
            "etcd did not answer {what} within {}s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}

/// Whether a failed request certainly never reached etcd, so repeating it cannot apply it
/// twice (a connection that could not be made).
fn never_sent(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    text.contains("error trying to connect")
        || text.contains("Connection refused")
        || text.contains("tcp connect error")
}

/// Whether etcd answered that a proposal may or may not have been committed.
fn outcome_unknown(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    text.contains("request timed out") || text.contains("leader changed")
}

/// Whether a failed read is worth repeating (on another member): anything but an answer.
fn transient(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(_))
}

/// The first key after every key that starts with `prefix` (etcd's range end of a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only 0xff bytes: to the end of the keyspace.
    vec![0]
}

/// How long a read may go unanswered before another attempt races it: a member that is
/// frozen or cut off keeps its connection open and never answers, and the balanced channel may
/// have sent the read there. (A linearizable read takes milliseconds; etcd itself calls a
/// request slow at 100 ms.)
const HEDGE_AFTER: Duration = Duration::from_millis(500);

/// At most this many attempts of one read run at once (a read that is merely slow, such as a
/// large range, is not multiplied further).
const HEDGE_LIMIT: usize = 3;

/// Repeats a read while it fails transiently, pausing a little between attempts; the caller
/// bounds the whole. While no attempt has answered, another one starts every [`HEDGE_AFTER`]
/// (each likely on another member), up to [`HEDGE_LIMIT`], and the first answer counts: a slow
/// read is never abandoned, and a member that never answers costs half a second, not the
/// deadline.
async fn retrying<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(20);
    loop {
        let mut running = vec![Box::pin(attempt())];
        let mut hedge = Box::pin(tokio::time::sleep(HEDGE_AFTER));
        let outcome = std::future::poll_fn(|cx| {
            for pending in running.iter_mut() {
                if let std::task::Poll::Ready(outcome) = pending.as_mut().poll(cx) {
                    return std::task::Poll::Ready(outcome);
                }
            }
            while running.len() < HEDGE_LIMIT && hedge.as_mut().poll(cx).is_ready() {
                let mut another = Box::pin(attempt());
                if let std::task::Poll::Ready(outcome) = another.as_mut().poll(cx) {
                    return std::task::Poll::Ready(outcome);
                }
                running.push(another);
                hedge
                    .as_mut()
                    .reset(tokio::time::Instant::now() + HEDGE_AFTER);
            }
            std::task::Poll::Pending
        })
        .await;
        match outcome {
            Err(e) if transient(&e) => {
                tracing::debug!(%e, "etcd read failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

impl EtcdStore {
    /// Connects to `endpoints` over plain HTTP and serves the keys under `prefix` (no trailing
    /// slash), each Store key `k` at `<prefix>k`.
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<EtcdStore> {
        let options = EtcdOptions {
            prefix: prefix.into(),
            ..EtcdOptions::default()
        };
        Self::connect_with(endpoints, &options).await
    }

    /// Connects to `endpoints` (`https://` ones with TLS options) as `options` say.
    pub async fn connect_with(endpoints: &[String], options: &EtcdOptions) -> Result<EtcdStore> {
        let tls = &options.tls;
        // HTTP/2 pings every 2 s, given up after 2 s: a connection to a member that froze or
        // was cut off (it stays open, silent) breaks within ~4 s, and the feed's watch moves to
        // another member.
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        if tls.is_set() {
            connect = connect.with_tls(tls.options()?);
        }
        let client = bounded("a connection", async {
            Client::connect(endpoints, Some(connect.clone()))
                .await
                .map_err(unavailable)
        })
        .await?;
        let keys = Keys {
            prefix: options.prefix.trim_end_matches('/').to_string(),
            root: options.root.trim_end_matches('/').to_string(),
        };
        // These reads are retried like every other: the balanced channel may first send one to
        // a member that is down, and a replica must start while a member is down.
        let (version, header) = bounded(
            "the status request",
            retrying(|| async {
                let mut c = client.clone();
                let status = c.status().await.map_err(unavailable)?;
                let header = quorum::revision(&mut c, &keys).await?;
                Ok((status.version().to_string(), header))
            }),
        )
        .await?;
        let compacted = bounded(
            "the compaction probe",
            retrying(|| compaction_point(&client, &keys)),
        )
        .await?;
        let compact_version = bounded(
            "the compaction key",
            retrying(|| async {
                let mut c = client.clone();
                let resp = c
                    .get(keys.full(COMPACT_KEY), None)
                    .await
                    .map_err(unavailable)?;
                Ok(resp.kvs().first().map_or(0, |kv| kv.version()))
            }),
        )
        .await?;
        let compacted = Arc::new(AtomicU64::new(compacted));
        let start = Revision(compacted.load(Ordering::SeqCst));
        let feed = Arc::new(Feed::new(
            start,
            feed::progress_safe(&version),
            compacted.clone(),
        ));
        tracing::info!(
            version,
            prefix = keys.prefix,
            progress_requests = feed.progress_safe,
            "connected to etcd"
        );
        let follower = tokio::spawn(feed::follow(client.clone(), keys.clone(), feed.clone()));
        let members = tokio::spawn(members::monitor(
            client.clone(),
            endpoints.to_vec(),
            connect,
        ));
        Ok(EtcdStore {
            quorum: Arc::new(QuorumReads::new(client.clone(), keys.clone())),
            client,
            keys,
            current: AtomicU64::new(header.max(1) as u64),
            written: AtomicU64::new(0),
            compacted,
            compact_version: AtomicI64::new(compact_version),
            feed,
            follower,
            members,
        })
    }

    /// Records a revision etcd reported; returns it.
    fn saw(&self, revision: i64) -> Revision {
        let r = revision.max(0) as u64;
        self.current.fetch_max(r, Ordering::SeqCst);
        Revision(r)
    }

    fn header_revision(&self, header: Option<&etcd_client::ResponseHeader>) -> Revision {
        self.saw(header.map_or(0, |h| h.revision()))
    }

    /// etcd's revision errors as the store's.
    fn read_error(&self, e: etcd_client::Error, requested: Revision) -> StoreError {
        let text = e.to_string();
        if text.contains("required revision has been compacted") {
            let compacted = self.compacted.load(Ordering::SeqCst).max(requested.0 + 1);
            self.compacted.fetch_max(compacted, Ordering::SeqCst);
            StoreError::Compacted {
                requested,
                compacted: Revision(compacted),
            }
        } else if text.contains("required revision is a future revision") {
            StoreError::FutureRevision {
                requested,
                current: Revision(self.current.load(Ordering::SeqCst)),
            }
        } else {
            unavailable(e)
        }
    }

    /// Checks a read revision against what this store knows before asking etcd (revision 0
    /// means "latest" to etcd, and "before everything" here).
    fn check_read(&self, revision: Option<Revision>) -> Result<i64> {
        let Some(r) = revision else {
            return Ok(0);
        };
        let compacted = self.compacted.load(Ordering::SeqCst);
        if r.0 < compacted {
            return Err(StoreError::Compacted {
                requested: r,
                compacted: Revision(compacted),
            });
        }
        Ok(r.0 as i64)
    }

    /// A write transaction, repeated only when it certainly never reached etcd.
    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse> {
        let attempts = async {
            let mut pause = Duration::from_millis(20);
            loop {
                let mut client = self.client.clone();
                match client.txn(txn.clone()).await {
                    Ok(resp) => return Ok(resp),
                    Err(e) if never_sent(&e) => {
                        tracing::debug!(%e, "etcd write not sent; retrying");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(500));
                    }
                    // etcd's words for a proposal whose fate it does not know.
                    Err(e) if outcome_unknown(&e) => {
                        return Err(StoreError::Timeout(format!("etcd: {e}")))
                    }
                    Err(e) => return Err(unavailable(e)),
                }
            }
        };
        let resp = match tokio::time::timeout(REQUEST_TIMEOUT, attempts).await {
            Ok(result) => result?,
            // Sent, maybe applied (a member that thaws can still commit it): unknown, not
            // refused.
            Err(_) => {
                return Err(StoreError::Timeout(format!(
                    "etcd did not confirm the write within {}s; it may still be applied",
                    REQUEST_TIMEOUT.as_secs()
                )))
            }
        };
        let revision = self.header_revision(resp.header());
        if resp.succeeded() {
            self.written.fetch_max(revision.0, Ordering::SeqCst);
        }
        Ok(resp)
    }

    /// The current value of `key` in a failed transaction's `Get`.
    fn fetched(&self, resp: &etcd_client::TxnResponse) -> Option<etcd_client::KeyValue> {
        resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        })
    }

    /// The Store keys' compaction key, for tests of the coordination.
    #[doc(hidden)]
    pub fn compaction_key(&self) -> String {
        self.keys.full(COMPACT_KEY)
    }
}

/// etcd's compaction point: a watch from revision 1 is cancelled with it when history was
/// compacted (1 when it never was).
async fn compaction_point(client: &Client, keys: &Keys) -> Result<u64> {
    let (start, end) = keys.scope();
    let mut client = client.clone();
    let mut probe = client
        .watch(
            start,
            Some(WatchOptions::new().with_range(end).with_start_revision(1)),
        )
        .await
        .map_err(unavailable)?;
    loop {
        match tokio::time::timeout(Duration::from_millis(200), probe.message()).await {
            Ok(Ok(Some(resp))) if resp.compact_revision() > 0 => {
                return Ok(resp.compact_revision() as u64)
            }
            // The creation message, or events from revision 1 on: nothing was compacted.
            Ok(Ok(Some(resp))) if resp.created() => continue,
            _ => return Ok(1),
        }
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let full = self.keys.full(key);
        let txn = Txn::new()
            .when([Compare::create_revision(full.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(full.clone(), value.to_vec(), None)])
            .or_else([TxnOp::get(full, None)]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err(StoreError::Exists(key.into()));
        }
        let rev = self.header_revision(resp.header());
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: rev,
            mod_revision: rev,
        })
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let full = self.keys.full(key);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                full.clone(),
                CompareOp::Equal,
                expected.0 as i64,
            )])
            .and_then([TxnOp::put(
                full.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err(match self.fetched(&resp) {
                None => StoreError::NotFound(key.into()),
                Some(current) => StoreError::Conflict {
                    key: key.into(),
                    expected,
                    actual: Revision(current.mod_revision() as u64),
                },
            });
        }
        let rev = self.header_revision(resp.header());
        let created = resp
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Put(put) => put.prev_key().map(|kv| kv.create_revision()),
                _ => None,
            })
            .map_or(rev, |r| Revision(r as u64));
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: created,
            mod_revision: rev,
        })
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let full = self.keys.full(key);
        let condition = match expected {
            Some(r) => Compare::mod_revision(full.clone(), CompareOp::Equal, r.0 as i64),
            None => Compare::create_revision(full.clone(), CompareOp::Greater, 0),
        };
        let txn = Txn::new()
            .when([condition])
            .and_then([TxnOp::delete(
                full.clone(),
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err(match (self.fetched(&resp), expected) {
                (Some(current), Some(expected)) => StoreError::Conflict {
                    key: key.into(),
                    expected,
                    actual: Revision(current.mod_revision() as u64),
                },
                _ => StoreError::NotFound(key.into()),
            });
        }
        let rev = self.header_revision(resp.header());
        let prev = resp
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Delete(d) => d.prev_kvs().first().map(|kv| self.keys.kv(kv)),
                _ => None,
            })
            .ok_or_else(|| StoreError::NotFound(key.into()))?;
        Ok((prev, rev))
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> Result<(Option<KeyValue>, Revision)> {
        let at = self.check_read(revision)?;
        let full = self.keys.full(key);
        let resp = bounded(
            "a read",
            retrying(|| async {
                let mut client = self.client.clone();
                client
                    .get(full.clone(), Some(GetOptions::new().with_revision(at)))
                    .await
                    .map_err(|e| self.read_error(e, revision.unwrap_or_default()))
            }),
        )
        .await?;
        let header = self.header_revision(resp.header());
        let read_at = revision.unwrap_or(header);
        let kv = resp
            .kvs()
            .first()
            .filter(|kv| !self.keys.is_internal(kv.key()))
            .map(|kv| self.keys.kv(kv));
        Ok((kv, read_at))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        if !req.start.is_empty() && !req.start.starts_with(&req.prefix) {
            return Err(StoreError::Invalid(format!(
                "start key {:?} is outside prefix {:?}",
                req.start, req.prefix
            )));
        }
        let mut at = self.check_read(req.revision)?;
        let full_prefix = self.keys.full(&req.prefix);
        let end = prefix_end(full_prefix.as_bytes());
        let mut cursor = if req.start.is_empty() {
            full_prefix.clone().into_bytes()
        } else {
            self.keys.full(&req.start).into_bytes()
        };
        let mut kvs = Vec::new();
        let mut read_at = req.revision;
        // Keys the Store API does not show (the compaction key; Strata's own keys beside the
        // root's) may take places in a page: read on until the page is full or the range ends.
        let remaining = loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_revision(at);
            if req.limit > 0 {
                options = options.with_limit((req.limit - kvs.len()) as i64);
            }
            let resp = bounded(
                "a range read",
                retrying(|| async {
                    let mut client = self.client.clone();
                    client
                        .get(cursor.clone(), Some(options.clone()))
                        .await
                        .map_err(|e| self.read_error(e, req.revision.unwrap_or_default()))
                }),
            )
            .await?;
            let header = self.header_revision(resp.header());
            // Later pages read at the first one's revision.
            let revision = *read_at.get_or_insert(header);
            at = revision.0 as i64;
            for kv in resp.kvs() {
                if self.keys.is_internal(kv.key()) {
                    continue;
                }
                let kv = self.keys.kv(kv);
                if kv.key.starts_with(&req.prefix) {
                    kvs.push(kv);
                }
            }
            let fetched = resp.kvs().len() as u64;
            let left = (resp.count().max(0) as u64).saturating_sub(fetched);
            match resp.kvs().last() {
                Some(last) if req.limit > 0 && kvs.len() < req.limit && left > 0 => {
                    cursor = last.key().to_vec();
                    cursor.push(0);
                }
                _ => break left,
            }
        };
        Ok(RangeResponse {
            kvs,
            revision: read_at.unwrap_or_default(),
            remaining,
        })
    }

    async fn changes(&self, after: Revision, limit: usize) -> Result<Changes> {
        let compacted = self.compacted.load(Ordering::SeqCst);
        if after.0 < compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted: Revision(compacted),
            });
        }
        // The feed covers this store's own acknowledged writes: wait (briefly) for the watch to
        // deliver them.
        let written = Revision(self.written.load(Ordering::SeqCst));
        if written > after {
            self.feed.wait_through(written, OWN_WRITES_WAIT).await;
        }
        match self.feed.read(after, limit) {
            Read::Buffered(events, revision) => Ok(Changes { events, revision }),
            Read::Before { base } => {
                let (events, revision) = bounded(
                    "a history read",
                    feed::history(&self.client, &self.keys, after, base, limit),
                )
                .await?;
                Ok(Changes { events, revision })
            }
        }
    }

    fn current_revision(&self) -> Revision {
        Revision(self.current.load(Ordering::SeqCst))
    }

    async fn consistent_revision(&self) -> Result<Revision> {
        let revision = bounded("a quorum read", self.quorum.read()).await?;
        Ok(self.saw(revision))
    }

    fn request_progress(&self) -> bool {
        self.feed.request_progress()
    }

    fn compacted_revision(&self) -> Revision {
        Revision(self.compacted.load(Ordering::SeqCst))
    }

    /// Compacts etcd's history, unless another replica over the same prefix compacted since
    /// this store last looked: kube-apiserver's election by compare-and-swap on the version of
    /// the compaction key, so that one replica compacts per interval however many run.
    async fn compact(&self, revision: Revision) -> Result<()> {
        let current = self.consistent_revision().await?;
        if revision > current {
            return Err(StoreError::Invalid(format!(
                "cannot compact to {revision}, beyond the current revision {current}"
            )));
        }
        if revision.0 <= self.compacted.load(Ordering::SeqCst) {
            return Ok(());
        }
        let key = self.keys.full(COMPACT_KEY);
        let seen = self.compact_version.load(Ordering::SeqCst);
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, seen)])
            .and_then([TxnOp::put(
                key.clone(),
                revision.0.to_string().into_bytes(),
                None,
            )])
            .or_else([TxnOp::get(key, None)]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            // Another replica won this interval; it compacts (to the revision it recorded).
            if let Some(kv) = self.fetched(&resp) {
                self.compact_version.store(kv.version(), Ordering::SeqCst);
                if let Some(point) = std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    tracing::debug!(point, "etcd compaction: another replica compacts");
                }
            }
            return Ok(());
        }
        self.compact_version.store(seen + 1, Ordering::SeqCst);
        bounded("a compaction", async {
            let mut client = self.client.clone();
            let options = CompactionOptions::new().with_physical();
            match client.compact(revision.0 as i64, Some(options)).await {
                Ok(_) => Ok(()),
                // Someone compacted further already: the goal is reached.
                Err(e)
                    if e.to_string()
                        .contains("required revision has been compacted") =>
                {
                    Ok(())
                }
                Err(e) => Err(unavailable(e)),
            }
        })
        .await?;
        self.compacted.fetch_max(revision.0, Ordering::SeqCst);
        Ok(())
    }

    fn subscribe(&self) -> watch::Receiver<Revision> {
        self.feed.notify.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::{prefix_end, Keys};

    #[test]
    fn keys_under_a_root_take_kube_apiservers_layout() {
        let keys = |prefix: &str, root: &str| Keys {
            prefix: prefix.into(),
            root: root.into(),
        };
        let kube = keys("/registry", "/registry");
        assert_eq!(
            kube.full("/registry/serviceaccounts/ns/a"),
            "/registry/serviceaccounts/ns/a"
        );
        assert_eq!(
            kube.full("/strata/admin-token"),
            "/registry/strata/admin-token"
        );
        let other = keys("/tenant-a", "/registry");
        assert_eq!(
            other.full("/registry/namespaces/x"),
            "/tenant-a/namespaces/x"
        );
        assert_eq!(
            other.store_key("/tenant-a/namespaces/x"),
            "/registry/namespaces/x"
        );
        assert_eq!(other.store_key("/tenant-a/strata/pki/ca"), "/strata/pki/ca");
        assert_eq!(other.full("/registryx"), "/tenant-a/registryx");
        let plain = keys("/p", "");
        assert_eq!(plain.full("/c/a"), "/p/c/a");
        assert_eq!(plain.store_key("/p/c/a"), "/c/a");
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/registry"), b"/registrz");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), [0]);
    }
}
