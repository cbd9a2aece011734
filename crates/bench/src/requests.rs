//! Counting API requests: kube-apiserver's own `apiserver_request_total`, and the bench's
//! own requests, so that the difference is what the operator sent.
//!
//! `apiserver_request_total` has no user or user-agent label (`component` is always
//! `apiserver`), so requests cannot be attributed by the server. The bench therefore counts
//! every request it makes itself, by the same key the apiserver uses, and subtracts them.

use anyhow::{Context as _, bail};
use kube::Client;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// What the apiserver counts a request by (codes, scope, version and dry-run summed up).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// GET, LIST, WATCH, POST, PUT, PATCH, APPLY, DELETE, DELETECOLLECTION, ...
    pub verb: String,
    pub group: String,
    /// Empty for non-resource requests (`/metrics`, discovery, `/readyz`, ...).
    pub resource: String,
    /// The subresource, or for non-resource requests the path.
    pub subresource: String,
}

impl Key {
    pub fn new(verb: &str, group: &str, resource: &str, subresource: &str) -> Self {
        Self {
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
        }
    }

    pub fn is_resource(&self) -> bool {
        !self.resource.is_empty()
    }
}

impl fmt::Display for Key {
    /// `VERB resource[.group][/subresource]`, or `VERB <path>` for non-resource requests.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_resource() {
            return write!(f, "{} {}", self.verb, self.subresource);
        }
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        Ok(())
    }
}

/// Request counts by [`Key`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts(pub BTreeMap<Key, u64>);

impl Counts {
    pub fn add(&mut self, key: Key, n: u64) {
        *self.0.entry(key).or_default() += n;
    }

    /// `self - earlier`, key by key (counters only grow; a key missing earlier counts from 0).
    pub fn since(&self, earlier: &Counts) -> Counts {
        let mut out = Counts::default();
        for (key, &n) in &self.0 {
            let before = earlier.0.get(key).copied().unwrap_or(0);
            if n > before {
                out.add(key.clone(), n - before);
            }
        }
        out
    }

    /// `self - other`, key by key; also returns what `other` has beyond `self` (which, when
    /// `other` is a subset of the requests in `self`, should be nothing).
    pub fn minus(&self, other: &Counts) -> (Counts, Counts) {
        (self.since(other), other.since(self))
    }

    pub fn filter(&self, keep: impl Fn(&Key) -> bool) -> Counts {
        Counts(
            self.0
                .iter()
                .filter(|(k, _)| keep(k))
                .map(|(k, n)| (k.clone(), *n))
                .collect(),
        )
    }

    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Totals by verb.
    pub fn by_verb(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (key, n) in &self.0 {
            *out.entry(key.verb.clone()).or_default() += n;
        }
        out
    }

    /// Every key as `VERB resource.group/subresource`, most requests first.
    pub fn breakdown(&self) -> Vec<(String, u64)> {
        let mut rows: Vec<_> = self.0.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        rows
    }
}

/// Requests by verb, split into reads (GET, LIST, WATCH) and writes (POST, PUT, PATCH, APPLY,
/// DELETE; DELETECOLLECTION counts as DELETE).
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerbCounts {
    #[serde(rename = "GET")]
    pub get: u64,
    #[serde(rename = "LIST")]
    pub list: u64,
    #[serde(rename = "WATCH")]
    pub watch: u64,
    #[serde(rename = "POST")]
    pub post: u64,
    #[serde(rename = "PUT")]
    pub put: u64,
    #[serde(rename = "PATCH")]
    pub patch: u64,
    #[serde(rename = "APPLY")]
    pub apply: u64,
    #[serde(rename = "DELETE")]
    pub delete: u64,
    /// Anything else (CONNECT, ...); never expected from the operator.
    pub other: u64,
    pub reads: u64,
    pub writes: u64,
    pub total: u64,
}

impl VerbCounts {
    pub fn of(counts: &Counts) -> Self {
        let mut out = Self::default();
        for (verb, n) in counts.by_verb() {
            match verb.as_str() {
                "GET" => out.get += n,
                "LIST" => out.list += n,
                "WATCH" => out.watch += n,
                "POST" => out.post += n,
                "PUT" => out.put += n,
                "PATCH" => out.patch += n,
                "APPLY" => out.apply += n,
                "DELETE" | "DELETECOLLECTION" => out.delete += n,
                _ => out.other += n,
            }
        }
        out.reads = out.get + out.list + out.watch;
        out.writes = out.post + out.put + out.patch + out.apply + out.delete;
        out.total = out.reads + out.writes + out.other;
        out
    }
}

/// The bench's own requests, recorded as they are sent.
#[derive(Clone, Default)]
pub struct Own(Arc<Mutex<Counts>>);

impl Own {
    pub fn record(&self, key: Key) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(key, 1);
    }

    pub fn snapshot(&self) -> Counts {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The key the apiserver files `GET /metrics` under.
pub fn metrics_key() -> Key {
    Key::new("GET", "", "", "/metrics")
}

/// kube-apiserver's `/metrics` (recorded as one of our requests).
async fn metrics_text(client: &Client, own: &Own) -> anyhow::Result<String> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building GET /metrics")?;
    own.record(metrics_key());
    client
        .request_text(request)
        .await
        .context("GET /metrics from kube-apiserver")
}

/// Scrapes `apiserver_request_total` from the apiserver: every request, and those answered
/// with a code outside 2xx (keyed with the code after the verb, e.g. `APPLY 404`).
pub async fn scrape(client: &Client, own: &Own) -> anyhow::Result<(Counts, Counts)> {
    let text = metrics_text(client, own).await?;
    let counts = parse(&text)?;
    if counts.0.is_empty() {
        bail!("kube-apiserver's /metrics has no apiserver_request_total samples");
    }
    Ok((counts, parse_failed(&text)?))
}

/// The `apiserver_request_total` samples of requests answered outside 2xx, the code after the
/// verb.
pub fn parse_failed(text: &str) -> anyhow::Result<Counts> {
    let mut failed = Counts::default();
    for (mut key, code, n) in samples(text, "apiserver_request_total")? {
        if !code.starts_with('2') {
            key.verb = format!("{} {code}", key.verb);
            failed.add(key, n);
        }
    }
    Ok(failed)
}

/// Long-running requests in progress right now (`apiserver_longrunning_requests`, i.e. open
/// watches), by key, from anyone.
pub async fn open_watches(client: &Client, own: &Own) -> anyhow::Result<Counts> {
    let text = metrics_text(client, own).await?;
    Ok(parse_metric(&text, "apiserver_longrunning_requests")?.filter(|k| k.verb == "WATCH"))
}

/// Parses the `apiserver_request_total` samples of a Prometheus text exposition.
pub fn parse(text: &str) -> anyhow::Result<Counts> {
    parse_metric(text, "apiserver_request_total")
}

/// Parses the samples of one metric with verb/group/resource/subresource labels.
fn parse_metric(text: &str, metric: &str) -> anyhow::Result<Counts> {
    let mut counts = Counts::default();
    for (key, _, n) in samples(text, metric)? {
        counts.add(key, n);
    }
    Ok(counts)
}

/// The samples of one metric: key, `code` label and value.
fn samples(text: &str, metric: &str) -> anyhow::Result<Vec<(Key, String, u64)>> {
    let prefix = format!("{metric}{{");
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let (labels, value) = rest
            .rsplit_once("} ")
            .with_context(|| format!("malformed sample: {line}"))?;
        let value: f64 = value
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .parse()
            .with_context(|| format!("malformed value in: {line}"))?;
        let labels = parse_labels(labels).with_context(|| format!("malformed labels: {line}"))?;
        let label = |name: &str| labels.get(name).map(String::as_str).unwrap_or_default();
        let key = Key::new(
            label("verb"),
            label("group"),
            label("resource"),
            label("subresource"),
        );
        out.push((key, label("code").to_owned(), value as u64));
    }
    Ok(out)
}

/// `a="x",b="y\"z"` → {a: x, b: y"z}.
fn parse_labels(mut s: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    loop {
        s = s.trim_start_matches(',');
        if s.is_empty() {
            return Ok(out);
        }
        let (name, rest) = s.split_once("=\"").context("label without =\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("dangling escape"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => bail!("unterminated label value"),
            }
        };
        out.insert(name.to_owned(), value);
        s = &rest[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_samples_and_sums_codes() -> anyhow::Result<()> {
        let text = r#"# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="intent.security.nimbus.com",resource="nimbuspolicies",scope="cluster",subresource="",verb="LIST",version="v1alpha1"} 3
apiserver_request_total{code="500",component="apiserver",dry_run="",group="intent.security.nimbus.com",resource="nimbuspolicies",scope="cluster",subresource="",verb="LIST",version="v1alpha1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="namespaces",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 2
apiserver_request_duration_seconds_count{verb="GET"} 9
"#;
        let counts = parse(text)?;
        let list = Key::new("LIST", "intent.security.nimbus.com", "nimbuspolicies", "");
        assert_eq!(counts.0.get(&list), Some(&4));
        assert_eq!(counts.0.get(&metrics_key()), Some(&2));
        assert_eq!(counts.total(), 13);
        let failed = parse_failed(text)?;
        let list_500 = Key::new(
            "LIST 500",
            "intent.security.nimbus.com",
            "nimbuspolicies",
            "",
        );
        assert_eq!(failed.0.get(&list_500), Some(&1));
        assert_eq!(failed.total(), 1);
        assert_eq!(
            list.to_string(),
            "LIST nimbuspolicies.intent.security.nimbus.com"
        );
        Ok(())
    }

    #[test]
    fn subtracts_and_reports_excess() {
        let a = Key::new("LIST", "", "pods", "");
        let b = Key::new("POST", "", "pods", "");
        let mut total = Counts::default();
        total.add(a.clone(), 5);
        let mut own = Counts::default();
        own.add(a.clone(), 2);
        own.add(b.clone(), 1);
        let (rest, excess) = total.minus(&own);
        assert_eq!(rest.0.get(&a), Some(&3));
        assert_eq!(excess.0.get(&b), Some(&1));
        let v = VerbCounts::of(&total);
        assert_eq!((v.list, v.reads, v.writes, v.total), (5, 5, 0, 5));
    }

    #[test]
    fn label_values_may_hold_escapes_and_commas() -> anyhow::Result<()> {
        let labels = parse_labels(r#"a="x,y",b="q\"z""#)?;
        assert_eq!(labels.get("a").map(String::as_str), Some("x,y"));
        assert_eq!(labels.get("b").map(String::as_str), Some("q\"z"));
        Ok(())
    }
}
