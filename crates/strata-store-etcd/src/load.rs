//! A closed-loop write load on etcd through this crate's client, the baseline that
//! `cargo xtask bench --only etcd` compares Strata's creates with: `strata debug etcd-put-load`.
//!
//! `clients` tasks each write a new key after the last write was answered, for a warm-up and
//! then a measured window; only writes that start after the warm-up and end inside the window
//! count. The clients share `connections` etcd clients (one gRPC channel each, round-robin), one
//! by default, as a Strata server does. Two operations: a plain `Put`, etcd's own write rate,
//! and `create`, the transaction a Strata create sends (`If create_revision(key) == 0 → Put`),
//! so the difference between the two isolates what Strata adds around it.

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, Txn, TxnOp};

/// `strata debug etcd-put-load` flags.
pub const USAGE: &str = "\
usage: strata debug etcd-put-load --etcd-servers URL[,URL...] [--clients N] [--connections N]
           [--seconds S] [--warmup S] [--value-bytes N] [--op put|create] [--prefix KEY]

Writes new keys under PREFIX (default /bench-put) as fast as etcd answers, from N clients
(default 64) over N gRPC connections (default 1), for WARMUP (default 1) + S seconds (default
5), values of N bytes (default 1024); prints one JSON line with the writes/s and latencies.
--op create writes with Strata's create transaction instead of a plain put.
";

/// A write taking longer than this counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take while etcd is still starting.
const CONNECT_LIMIT: Duration = Duration::from_secs(20);

/// How each write is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A plain `Put`.
    Put,
    /// `Txn(If create_revision(key) == 0 → Put; else Get)`: a Strata create.
    Create,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Create => "create",
        }
    }
}

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub endpoints: Vec<String>,
    pub clients: usize,
    pub connections: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub value_bytes: usize,
    pub op: Op,
    pub prefix: String,
}

impl Options {
    /// Parses the flags of [`USAGE`]; the message says what is wrong.
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            endpoints: Vec::new(),
            clients: 64,
            connections: 1,
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(5),
            value_bytes: 1024,
            op: Op::Put,
            prefix: "/bench-put".into(),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) => (flag, Some(value.to_string())),
                None => (arg.as_str(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next().cloned())
                    .ok_or(format!("{flag} needs a value"))
            };
            match flag {
                "--etcd-servers" => {
                    options.endpoints = value()?
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect();
                }
                "--clients" => options.clients = count(flag, &value()?)?,
                "--connections" => options.connections = count(flag, &value()?)?,
                "--seconds" => options.measure = seconds(flag, &value()?, false)?,
                "--warmup" => options.warmup = seconds(flag, &value()?, true)?,
                "--value-bytes" => options.value_bytes = count(flag, &value()?)?,
                "--op" => {
                    options.op = match value()?.as_str() {
                        "put" => Op::Put,
                        "create" => Op::Create,
                        other => return Err(format!("--op: {other:?} is neither put nor create")),
                    }
                }
                "--prefix" => options.prefix = value()?,
                other => return Err(format!("unknown flag {other}")),
            }
        }
        if options.endpoints.is_empty() {
            return Err("--etcd-servers is required".into());
        }
        options.connections = options.connections.min(options.clients);
        Ok(options)
    }
}

fn count(flag: &str, value: &str) -> Result<usize, String> {
    value
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{flag}: not a positive whole number: {value}"))
}

fn seconds(flag: &str, value: &str, zero_ok: bool) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (*s > 0.0 || (zero_ok && *s == 0.0)) && *s < 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{flag}: not a number of seconds: {value}"))
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub op: Option<Op>,
    pub clients: usize,
    pub connections: usize,
    pub value_bytes: usize,
    pub measured: Duration,
    /// Writes answered successfully inside the window.
    pub writes: u64,
    /// Their latencies, in microseconds, sorted.
    pub latencies_us: Vec<u64>,
    /// Failed or timed-out writes inside the window, and the first failure's text.
    pub errors: u64,
    pub error_sample: String,
}

impl Report {
    pub fn per_second(&self) -> f64 {
        self.writes as f64 / self.measured.as_secs_f64().max(f64::EPSILON)
    }

    /// The nearest-rank percentile `p` (0–100) of successful latencies, in microseconds.
    pub fn percentile_us(&self, p: f64) -> Option<u64> {
        if self.latencies_us.is_empty() {
            return None;
        }
        let n = self.latencies_us.len();
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        Some(self.latencies_us[rank.clamp(1, n) - 1])
    }

    /// The report as one JSON object on one line.
    pub fn to_json(&self) -> String {
        let p = |q: f64| {
            self.percentile_us(q)
                .map_or("null".into(), |v| v.to_string())
        };
        format!(
            "{{\"op\":\"{}\",\"clients\":{},\"connections\":{},\"value_bytes\":{},\
             \"seconds\":{:.3},\"writes\":{},\"writes_per_second\":{:.1},\"p50_us\":{},\
             \"p99_us\":{},\"errors\":{},\"error_sample\":{}}}",
            self.op.map_or("", Op::name),
            self.clients,
            self.connections,
            self.value_bytes,
            self.measured.as_secs_f64(),
            self.writes,
            self.per_second(),
            p(50.0),
            p(99.0),
            self.errors,
            json_string(&self.error_sample),
        )
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Connects, retrying while etcd starts, then runs the load. Fails only when etcd cannot be
/// reached at all; failed writes are counted in the report.
pub async fn run(options: &Options) -> Result<Report, String> {
    let mut clients = Vec::with_capacity(options.connections);
    for _ in 0..options.connections {
        clients.push(connect(&options.endpoints).await?);
    }
    let value = vec![b'x'; options.value_bytes];
    let start = Instant::now();
    let warm_end = start + options.warmup;
    let end = warm_end + options.measure;
    let tasks: Vec<_> = (0..options.clients)
        .map(|n| {
            let client = clients[n % clients.len()].clone();
            let (value, op) = (value.clone(), options.op);
            let prefix = format!("{}/{n}/", options.prefix.trim_end_matches('/'));
            tokio::spawn(writer(client, op, prefix, value, warm_end, end))
        })
        .collect();
    let mut report = Report {
        op: Some(options.op),
        clients: options.clients,
        connections: clients.len(),
        value_bytes: options.value_bytes,
        measured: options.measure,
        ..Report::default()
    };
    for task in tasks {
        match task.await {
            Ok(one) => {
                report.writes += one.writes;
                report.latencies_us.extend(one.latencies_us);
                report.errors += one.errors;
                if report.error_sample.is_empty() {
                    report.error_sample = one.error_sample;
                }
            }
            Err(e) => {
                report.errors += 1;
                report.error_sample = format!("writer task failed: {e}");
            }
        }
    }
    report.latencies_us.sort_unstable();
    Ok(report)
}

async fn connect(endpoints: &[String]) -> Result<Client, String> {
    let deadline = Instant::now() + CONNECT_LIMIT;
    let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(5));
    loop {
        let error = match Client::connect(endpoints, Some(options.clone())).await {
            Ok(mut client) => match client.status().await {
                Ok(_) => return Ok(client),
                Err(e) => e,
            },
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "etcd at {} did not answer within {CONNECT_LIMIT:?}: {error}",
                endpoints.join(",")
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One client: new keys `<prefix><seq>`, one write at a time, until `end`.
async fn writer(
    client: Client,
    op: Op,
    prefix: String,
    value: Vec<u8>,
    warm_end: Instant,
    end: Instant,
) -> Report {
    let mut kv = client.kv_client();
    let mut out = Report::default();
    let mut seq: u64 = 0;
    while Instant::now() < end {
        let key = format!("{prefix}{seq}");
        seq += 1;
        let started = Instant::now();
        let result = match op {
            Op::Put => tokio::time::timeout(REQUEST_TIMEOUT, kv.put(key, value.clone(), None))
                .await
                .map(|r| r.map(|_| true)),
            Op::Create => {
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key.clone(), value.clone(), None)])
                    .or_else([TxnOp::get(key, None)]);
                tokio::time::timeout(REQUEST_TIMEOUT, kv.txn(txn))
                    .await
                    .map(|r| r.map(|resp| resp.succeeded()))
            }
        };
        let done = Instant::now();
        if started < warm_end || done > end {
            continue;
        }
        let failure = match result {
            Ok(Ok(true)) => {
                out.writes += 1;
                out.latencies_us
                    .push(u64::try_from((done - started).as_micros()).unwrap_or(u64::MAX));
                continue;
            }
            Ok(Ok(false)) => "the key existed already".to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {REQUEST_TIMEOUT:?}"),
        };
        out.errors += 1;
        if out.error_sample.is_empty() {
            out.error_sample = failure;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options() {
        let o = Options::parse(&args("--etcd-servers http://a:1,http://b:2")).unwrap();
        assert_eq!(o.endpoints, ["http://a:1", "http://b:2"]);
        assert_eq!(
            (o.clients, o.connections, o.value_bytes, o.op),
            (64, 1, 1024, Op::Put)
        );
        assert_eq!(
            (o.warmup, o.measure),
            (Duration::from_secs(1), Duration::from_secs(5))
        );
        let o = Options::parse(&args(
            "--etcd-servers=http://a:1 --clients 8 --connections 16 --seconds 0.5 --warmup 0 \
             --value-bytes 10 --op create --prefix /p",
        ))
        .unwrap();
        assert_eq!((o.clients, o.connections, o.value_bytes), (8, 8, 10));
        assert_eq!(
            (o.warmup, o.measure),
            (Duration::ZERO, Duration::from_millis(500))
        );
        assert_eq!((o.op, o.prefix.as_str()), (Op::Create, "/p"));
        for bad in [
            "",
            "--clients 4",
            "--etcd-servers",
            "--etcd-servers u --clients 0",
            "--etcd-servers u --seconds 0",
            "--etcd-servers u --seconds x",
            "--etcd-servers u --op get",
            "--etcd-servers u --fast",
        ] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn report_json() {
        let report = Report {
            op: Some(Op::Create),
            clients: 2,
            connections: 1,
            value_bytes: 3,
            measured: Duration::from_secs(2),
            writes: 5,
            latencies_us: vec![1, 2, 3, 4, 100],
            errors: 1,
            error_sample: "bad \"x\"\n".into(),
        };
        assert_eq!(
            report.to_json(),
            "{\"op\":\"create\",\"clients\":2,\"connections\":1,\"value_bytes\":3,\
             \"seconds\":2.000,\"writes\":5,\"writes_per_second\":2.5,\"p50_us\":3,\
             \"p99_us\":100,\"errors\":1,\"error_sample\":\"bad \\\"x\\\"\\n\"}"
        );
        assert!(Report::default().to_json().contains("\"p50_us\":null"));
    }

    /// Both operations against a real etcd: writes succeed, every counted one is a new key
    /// that is there afterwards with the asked size, and nothing fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_new_keys_to_a_real_etcd() {
        let etcd = crate::testing::TestEtcd::start().expect("start /usr/bin/etcd");
        for (op, prefix) in [(Op::Put, "/load-put"), (Op::Create, "/load-create")] {
            let options = Options {
                endpoints: vec![etcd.url.clone()],
                clients: 4,
                connections: 2,
                warmup: Duration::from_millis(100),
                measure: Duration::from_millis(400),
                value_bytes: 100,
                op,
                prefix: prefix.into(),
            };
            let report = run(&options).await.unwrap();
            assert_eq!(report.errors, 0, "{}", report.error_sample);
            assert!(report.writes > 0);
            assert_eq!(report.latencies_us.len() as u64, report.writes);
            let mut client = Client::connect([&etcd.url], None).await.unwrap();
            let stored = client
                .get(
                    prefix,
                    Some(etcd_client::GetOptions::new().with_prefix().with_limit(1)),
                )
                .await
                .unwrap();
            // Writes outside the window are stored but not counted.
            assert!(stored.count() as u64 >= report.writes, "{op:?}");
            assert_eq!(stored.kvs()[0].value().len(), 100);
        }
    }
}
