//! The Grafana dashboard in `docs/grafana/strata-dashboard.json` queries only metrics the server
//! serves: every PromQL expression of every panel is read by a small tokenizer, and each metric
//! name it uses must be a series of `/metrics` after a few requests (a create, gets, a 404, a
//! list and an open watch, on a server that audits them, so that every family has a series).
//! The dashboard also keeps its shape: a Prometheus data source variable, an `instance`
//! variable every query filters on.
//!
//! On etcd every request goes to one replica, whose `/metrics` is scraped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{within, Http, TestServer, WatchOptions, WatchStream};

const LIMIT: Duration = Duration::from_secs(90);

/// The dashboard, parsed.
fn dashboard() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/grafana/strata-dashboard.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every panel, those inside collapsed rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        if let Some(inner) = panel["panels"].as_array() {
            all.extend(inner);
        }
    }
    all
}

/// PromQL words that are not metric names: binary operators, aggregation modifiers and the
/// offset keyword. Those followed by a label list are [`LABEL_LISTS`].
const KEYWORDS: [&str; 6] = ["and", "or", "unless", "bool", "offset", "atan2"];

/// Modifiers whose parenthesized list holds label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression reads: identifiers that are not functions or
/// aggregations (followed by `(`, or by `by`/`without`), keywords, label names (in `{...}` matchers or after `by`,
/// `without`, `on`, `ignoring`, `group_left`, `group_right`), Grafana variables (`$x`,
/// `${x}`), numbers, strings or durations (`[5m]`).
fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    // Skips from an opening delimiter at `i` to just past its closing one, strings inside
    // skipped whole.
    let skip_group = |mut i: usize, open: char, close: char| -> usize {
        let mut depth = 0;
        while i < chars.len() {
            match chars[i] {
                '"' | '\'' | '`' => i = skip_string(&chars, i) - 1,
                c if c == open => depth += 1,
                c if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    };
    let next_non_space = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '{' {
            i = skip_group(i, '{', '}');
        } else if c == '[' {
            i = skip_group(i, '[', ']');
        } else if c == '$' {
            i += 1;
            if i < chars.len() && chars[i] == '{' {
                i = skip_group(i, '{', '}');
            } else {
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let after = next_non_space(i);
            // A function or an aggregation is followed by `(`, or (an aggregation) by its
            // modifier before the `(`: `sum by (verb) (...)`.
            let modifier = ["by", "without"].iter().any(|m| {
                let m: Vec<char> = m.chars().collect();
                chars[after..].starts_with(&m)
                    && chars
                        .get(after + m.len())
                        .is_none_or(|c| !(c.is_alphanumeric() || *c == '_'))
            });
            let call = chars.get(after) == Some(&'(') || modifier;
            if LABEL_LISTS.contains(&word.as_str()) {
                if call {
                    i = skip_group(after, '(', ')');
                }
            } else if !call && !KEYWORDS.contains(&word.as_str()) {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Where the string starting at `i` (its quote) ends, just past its closing quote.
fn skip_string(chars: &[char], i: usize) -> usize {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() {
        if chars[j] == '\\' && quote != '`' {
            j += 2;
            continue;
        }
        if chars[j] == quote {
            return j + 1;
        }
        j += 1;
    }
    j
}

/// What a scrape serves: each family's type (from `# TYPE`) and the names of the samples.
struct Exposition {
    types: BTreeMap<String, String>,
    samples: BTreeSet<String>,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut types = BTreeMap::new();
        let mut samples = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                    types.insert(name.to_string(), kind.to_string());
                }
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                samples.insert(line[..end].to_string());
            }
        }
        Exposition { types, samples }
    }

    /// Whether a query of `name` finds series: `name` is a sample name served now, and one
    /// ending in `_bucket`, `_sum` or `_count` belongs to a histogram (the family it names).
    fn serves(&self, name: &str) -> bool {
        if !self.samples.contains(name) {
            return false;
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(family) = name.strip_suffix(suffix) {
                if self.types.contains_key(family) {
                    return self.types[family] == "histogram";
                }
            }
        }
        true
    }
}

/// Each query of the dashboard and the metric names in it, with its panel's title.
fn queries(dashboard: &Value) -> Vec<(String, String, Vec<String>)> {
    let mut all = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has an expr");
            let title = panel["title"].as_str().unwrap_or("").to_string();
            all.push((title, expr.to_string(), metric_names(expr)));
        }
    }
    all
}

/// The tokenizer finds metric names and nothing else, and a query of an unknown metric is
/// caught: the check below would fail on a dashboard with such a panel.
#[test]
fn the_tokenizer_finds_metric_names() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (verb, le) (rate(apiserver_request_duration_seconds_bucket{instance=~"$instance",verb!~"WATCH|CONNECT"}[$__rate_interval])))"#
        ),
        ["apiserver_request_duration_seconds_bucket"]
    );
    assert_eq!(
        metric_names(
            r#"sum(rate(a_total{code=~"5.."}[5m])) by (code) / on (instance) group_left sum(b) offset 1h > bool 0.5 or vector(1e3)"#
        ),
        ["a_total", "b"]
    );
    assert_eq!(
        metric_names(r#"process_open_fds{instance=~"${instance}"} / process_max_fds"#),
        ["process_open_fds", "process_max_fds"]
    );
    assert_eq!(metric_names(r#"time() - max(x{l="a(b) c"})"#), ["x"]);
    let exposition = Exposition::parse(
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n\
         # TYPE c_total counter\nc_total{code=\"200\"} 3\n",
    );
    for name in ["h_bucket", "h_sum", "h_count", "c_total"] {
        assert!(exposition.serves(name), "{name}");
    }
    for name in ["h", "c", "c_total_bucket", "no_such_metric_total"] {
        assert!(!exposition.serves(name), "{name}");
    }
}

/// Every metric the dashboard queries is on `/metrics` of a server that has served a few
/// requests; the dashboard has its variables and panels for what the issue names.
#[tokio::test]
async fn every_metric_the_dashboard_queries_exists() {
    let board = dashboard();
    assert_eq!(board["schemaVersion"], 39);
    let variables = board["templating"]["list"].as_array().expect("variables");
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no {name} variable"))
    };
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], "prometheus");
    assert_eq!(variable("instance")["type"], "query");
    let queries = queries(&board);
    assert!(queries.len() >= 20, "{queries:?}");
    for panel in panels(&board).into_iter().filter(|p| p["type"] != "row") {
        assert_eq!(
            panel["datasource"],
            json!({"type": "prometheus", "uid": "${datasource}"}),
            "{panel}"
        );
    }
    for (title, expr, names) in &queries {
        assert!(!names.is_empty(), "{title}: no metric in {expr}");
        assert!(
            expr.contains("$instance"),
            "{title}: {expr} ignores $instance"
        );
    }
    let used: BTreeSet<&str> = queries
        .iter()
        .flat_map(|(_, _, names)| names.iter().map(String::as_str))
        .collect();
    for wanted in [
        "apiserver_request_total",
        "apiserver_request_duration_seconds_bucket",
        "apiserver_current_inflight_requests",
        "apiserver_longrunning_requests",
        "apiserver_registered_watchers",
        "apiserver_watch_events_total",
        "etcd_request_duration_seconds_bucket",
        "apiserver_storage_objects",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "apiserver_audit_event_total",
    ] {
        assert!(
            used.contains(wanted),
            "the dashboard has no panel on {wanted}"
        );
    }

    // A server that audits (Metadata for every request) and has served a create, gets, a 404,
    // a list and a watch, every request to one replica: each family then has series.
    let audit = tempfile::tempdir().unwrap();
    let policy = audit.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let log = audit.path().join("audit.log");
    let s = TestServer::start_with(&[
        "--audit-policy-file",
        policy.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
    ]);
    let h = Http::to(&s.addr);
    let exposition = within(LIMIT, async {
        let cms = "/api/v1/namespaces/default/configmaps";
        let cm = json!({"metadata": {"name": "dashboard"}, "data": {"k": "v"}});
        assert_eq!(h.post_json(cms, &cm).await.code(), 201);
        assert_eq!(h.get(&format!("{cms}/dashboard")).await.code(), 200);
        assert_eq!(h.get(&format!("{cms}/missing")).await.code(), 404);
        let list = h.get(cms).await;
        assert_eq!(list.code(), 200);
        let rv = list.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let mut watch = WatchStream::open(
            &s.addr,
            &format!("{cms}?watch=1&resourceVersion={rv}"),
            WatchOptions::default(),
        )
        .await;
        assert_eq!(watch.status.as_u16(), 200);
        let cm = json!({"metadata": {"name": "watched"}});
        assert_eq!(h.post_json(cms, &cm).await.code(), 201);
        assert_eq!(watch.next_event().await["type"], "ADDED");
        let r = h.get("/metrics").await;
        assert_eq!(r.code(), 200);
        Exposition::parse(std::str::from_utf8(&r.body).expect("utf-8"))
    })
    .await;
    let missing: Vec<String> = queries
        .iter()
        .flat_map(|(title, _, names)| {
            names
                .iter()
                .filter(|name| !exposition.serves(name))
                .map(move |name| format!("{title}: {name}"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics /metrics does not serve: {missing:#?}\nserved: {:#?}",
        exposition.samples
    );
}
