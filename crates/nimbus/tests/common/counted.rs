//! The operator's own requests, counted by verb, resource and response code on its client (a
//! layer under kube's), not by the API server: kube-apiserver's `apiserver_request_total` has no
//! user label, so there the test's own requests and kube-controller-manager's (the garbage
//! collector's owner lookups among them) would count as the operator's.

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

/// One kind of request: the verb as kube-apiserver names it (GET, LIST, WATCH, POST, PUT,
/// PATCH, APPLY, DELETE), the resource (`plural[/subresource]`, or the path of a non-resource
/// request) and the response code (0: no response).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sent {
    pub verb: String,
    pub resource: String,
    pub code: u16,
}

impl Sent {
    /// Whether it is about a resource (not discovery or another path).
    pub fn is_resource(&self) -> bool {
        !self.resource.starts_with('/')
    }
}

impl fmt::Display for Sent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.verb, self.resource, self.code)
    }
}

/// Requests sent so far, by kind.
#[derive(Clone, Default)]
pub struct Counted(Arc<Mutex<BTreeMap<Sent, u64>>>);

impl Counted {
    fn record(&self, request: Sent) {
        *self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(request)
            .or_default() += 1;
    }

    /// Everything counted so far.
    pub fn snapshot(&self) -> Requests {
        Requests(
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }

    /// A client for `config` whose every request is counted here.
    pub fn client(&self, config: kube::Config) -> kube::Client {
        let counted = self.clone();
        kube::client::ClientBuilder::try_from(config)
            .expect("a client builder")
            .with_layer(&tower::layer::layer_fn(move |inner| Counting {
                inner,
                counted: counted.clone(),
            }))
            .build()
    }
}

/// Request counts at one time; [`Requests::since`] gives a window's.
#[derive(Clone, Debug, Default)]
pub struct Requests(pub BTreeMap<Sent, u64>);

impl Requests {
    pub fn since(&self, earlier: &Requests) -> Requests {
        Requests(
            self.0
                .iter()
                .map(|(k, n)| (k.clone(), n - earlier.0.get(k).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect(),
        )
    }

    /// Those matching `keep`, one per line, for a failure message.
    pub fn matching(&self, keep: impl Fn(&Sent) -> bool) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(k, n)| format!("{n} × {k}"))
            .collect()
    }
}

impl fmt::Display for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in self.matching(|_| true) {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// Whether `verb` writes.
pub fn writes(verb: &str) -> bool {
    ["POST", "PUT", "PATCH", "APPLY", "DELETE"].contains(&verb)
}

#[derive(Clone)]
struct Counting<S> {
    inner: S,
    counted: Counted,
}

impl<S, B, R> tower::Service<Request<B>> for Counting<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (verb, resource) = classify(&request);
        let counted = self.counted.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            let code = response.as_ref().map_or(0, |r| r.status().as_u16());
            counted.record(Sent {
                verb,
                resource,
                code,
            });
            response
        })
    }
}

/// kube-apiserver's verb and the resource of `request` (`/api/v1/namespaces/n/pods/p/status`:
/// GET on `pods/status`).
fn classify<B>(request: &Request<B>) -> (String, String) {
    let path = request.uri().path();
    let query = request.uri().query().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // Non-resource requests (discovery, /version): the method and the path.
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] if !rest.is_empty() => rest,
        _ => return (request.method().to_string(), path.to_owned()),
    };
    let rest = match rest {
        ["namespaces", _, resource, more @ ..] => [&[*resource][..], more].concat(),
        other => other.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
        [] => return (request.method().to_string(), path.to_owned()),
    };
    let apply = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/apply-patch"));
    let verb = match request.method() {
        &Method::GET
            if query
                .split('&')
                .any(|p| p == "watch=true" || p == "watch=1") =>
        {
            "WATCH"
        }
        &Method::GET if named => "GET",
        &Method::GET => "LIST",
        &Method::PATCH if apply => "APPLY",
        method => method.as_str(),
    };
    (verb.to_owned(), resource)
}
