//! The aggregated API's HTTP surface: authenticate (front proxy), authorize (SubjectAccessReview),
//! then discovery, OpenAPI, and get / list / watch of the posture kinds, as JSON or as the Table
//! `kubectl get` asks for, with errors as `Status` objects.

mod response;
mod stream;

use super::auth::{Attributes, Authorizer, RequestHeader, User};
use super::openapi::{self, Documents};
use super::postures::Postures;
use super::request::{ListQuery, Resource, Target, target};
use super::store::{Gone, Store, Stored, Watch, key_of};
use super::table::{Printed, table};
use crate::error::Error;
use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use k8s_openapi::jiff::Timestamp;
use nimbus_api::posture::GROUP;
use response::{
    Form, accepts_gzip, document, gzipped, json_bytes, json_response, not_found, respond, status,
};
use rustls::ServerConfig;
use serde_json::json;
use serde_json::value::RawValue;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use stream::{Encoder, expired, send};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// A watch without `timeoutSeconds` ends after this long (clients re-watch).
const WATCH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

pub struct Server {
    pub postures: Arc<Postures>,
    pub authorizer: Authorizer,
    pub documents: Documents,
    pub shutdown: CancellationToken,
}

/// Binds `addr` now (so a taken port fails start-up) and returns the future that serves TLS
/// connections until `shutdown`. Connections arriving before the TLS configuration is known
/// are closed.
pub async fn serve(
    addr: SocketAddr,
    tls: watch::Receiver<Option<(Arc<ServerConfig>, RequestHeader)>>,
    server: Arc<Server>,
) -> Result<Pin<Box<dyn Future<Output = ()> + Send>>, Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    let shutdown = server.shutdown.clone();
    Ok(Box::pin(async move {
        loop {
            let tcp = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(error) => {
                        tracing::warn!(%error, "posture API: accepting a connection failed");
                        continue;
                    }
                },
                () = shutdown.cancelled() => break,
            };
            let Some((config, front_proxy)) = tls.borrow().clone() else {
                tracing::debug!("posture API: TLS not configured yet; connection closed");
                continue;
            };
            tokio::spawn(connection(tcp, config, front_proxy, server.clone()));
        }
    }))
}

async fn connection(
    tcp: tokio::net::TcpStream,
    config: Arc<ServerConfig>,
    front_proxy: RequestHeader,
    server: Arc<Server>,
) {
    let stream = match TlsAcceptor::from(config).accept(tcp).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::debug!(%error, "posture API: TLS handshake failed");
            return;
        }
    };
    // The certificate (if any) is verified against the front-proxy CA by now; its CN decides.
    let peer_cn = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(super::tls::common_name);
    let proxy = match peer_cn {
        Some(cn) if front_proxy.allows(cn.as_deref()) => Some(Arc::new(front_proxy)),
        _ => None,
    };
    let shutdown = server.shutdown.clone();
    let service = hyper::service::service_fn(move |request| {
        let (server, proxy) = (server.clone(), proxy.clone());
        async move {
            let gzip = accepts_gzip(request.headers());
            let response = server.handle(request, proxy.as_deref()).await;
            Ok::<_, Infallible>(if gzip {
                gzipped(response).await
            } else {
                response
            })
        }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => if let Err(error) = served {
            tracing::debug!(%error, "posture API: connection ended");
        },
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

impl Server {
    async fn handle<B>(
        &self,
        request: Request<B>,
        proxy: Option<&RequestHeader>,
    ) -> Response<Body> {
        let target = target(request.uri().path());
        if target == Target::Health {
            return respond(StatusCode::OK, "text/plain", "ok");
        }
        // Only the front proxy may call; it authenticated the user.
        let Some(proxy) = proxy else {
            return status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "Unauthorized: only kube-apiserver's front proxy (a client certificate from the \
                 request-header CA) may call this server",
            );
        };
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                &format!(
                    "the posture API is read-only: {} is not supported",
                    request.method()
                ),
            );
        }
        let headers = request.headers();
        match target {
            Target::Groups => json_response(&openapi::group_list()),
            Target::Group => json_response(&openapi::group()),
            Target::Resources => json_response(&openapi::resource_list()),
            Target::OpenApiV2 => document(headers, &self.documents.v2, &self.documents.v2_etag),
            Target::OpenApiV3 => document(headers, &self.documents.v3, &self.documents.v3_etag),
            Target::OpenApiV3Index => respond(
                StatusCode::OK,
                "application/json",
                self.documents.v3_index.clone(),
            ),
            Target::NotFound | Target::Health => status(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            ),
            Target::Object {
                resource,
                namespace,
                name,
            } => {
                let object = Object {
                    resource,
                    namespace,
                    name,
                };
                self.object(&request, proxy, object).await
            }
        }
    }

    /// Reads postures, as the user the front proxy names may.
    async fn object<B>(
        &self,
        request: &Request<B>,
        proxy: &RequestHeader,
        object: Object,
    ) -> Response<Body> {
        let Object {
            resource,
            namespace,
            name,
        } = object;
        let headers = request.headers();
        let Some(user) = proxy.user(headers) else {
            return status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "Unauthorized: the front proxy named no user",
            );
        };
        let query = match ListQuery::parse(request.uri().query()) {
            Ok(query) => query,
            Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message),
        };
        let attributes = Attributes {
            verb: match (&name, query.watch) {
                (_, true) => "watch",
                (Some(_), false) => "get",
                (None, false) => "list",
            },
            resource: resource.plural(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        if let Some(denied) = self.authorize(&user, &attributes).await {
            return denied;
        }
        if !self.postures.is_ready() {
            return status(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "the posture is not computed yet (caches syncing)",
            );
        }
        let form = Form::of(headers, query.include_object.as_deref());
        let request = Read {
            namespace,
            name,
            query,
            form,
        };
        match resource {
            Resource::Workloads => self.read(&self.postures.workloads, request),
            Resource::Namespaces => self.read(&self.postures.namespaces, request),
        }
    }

    /// `None` when allowed; else the response saying why not.
    async fn authorize(&self, user: &User, attributes: &Attributes) -> Option<Response<Body>> {
        match self.authorizer.allowed(user, attributes).await {
            Ok(true) => None,
            Ok(false) => {
                let scope = match &attributes.namespace {
                    Some(ns) => format!(" in the namespace \"{ns}\""),
                    None if attributes.resource == Resource::Namespaces.plural() => String::new(),
                    None => " at the cluster scope".to_owned(),
                };
                Some(status(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    &format!(
                        "{}.{GROUP} is forbidden: User \"{}\" cannot {} resource \"{}\" in API \
                         group \"{GROUP}\"{scope}",
                        attributes.resource, user.name, attributes.verb, attributes.resource
                    ),
                ))
            }
            Err(error) => {
                tracing::warn!(%error, "posture API: SubjectAccessReview failed");
                Some(status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    &format!("authorizing the request: {error}"),
                ))
            }
        }
    }

    fn read<T>(&self, store: &Store<T>, request: Read) -> Response<Body>
    where
        T: Printed + Clone + PartialEq + Send + Sync + 'static,
    {
        let Read {
            namespace,
            name,
            query,
            form,
        } = request;
        if let Some(name) = name {
            return one(store, namespace, &name, form);
        }
        let (limit, continue_after) = (query.limit, query.continue_after.clone());
        let watch = query.watch.then(|| query_watch(&query));
        let in_scope = move |object: &T| {
            let meta = object.metadata();
            namespace
                .as_deref()
                .is_none_or(|ns| meta.namespace.as_deref() == Some(ns))
                && query.selects(
                    meta.namespace.as_deref(),
                    meta.name.as_deref(),
                    meta.labels.as_ref(),
                )
        };
        if let Some(from) = watch {
            return self.watch(store, from, form, in_scope);
        }
        page(store, in_scope, limit, continue_after.as_deref(), form)
    }

    /// Streams changes as newline-delimited watch events until the timeout, shutdown, or the
    /// client leaving.
    fn watch<T>(
        &self,
        store: &Store<T>,
        from: Result<WatchFrom, String>,
        form: Form,
        in_scope: impl Fn(&T) -> bool + Send + Sync + 'static,
    ) -> Response<Body>
    where
        T: Printed + Clone + PartialEq + Send + Sync + 'static,
    {
        let from = match from {
            Ok(from) => from,
            Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", &message),
        };
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        let started = match from.version {
            Some(version) => store.watch(Some(version)),
            None => store.watch(None),
        };
        let encoder = Encoder {
            form,
            headers_sent: false,
        };
        let current = store.version();
        let shutdown = self.shutdown.clone();
        tokio::spawn(stream_changes(
            Watching {
                from,
                current,
                encoder,
                tx,
                shutdown,
            },
            started,
            in_scope,
        ));
        let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<_, Infallible>));
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .unwrap_or_else(|_| Response::new(Body::empty()))
    }
}

/// A list of objects already serialized.
#[derive(serde::Serialize)]
struct List<'a> {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: serde_json::Value,
    items: Vec<&'a RawValue>,
}

/// One posture, as JSON or as a Table row.
fn one<T>(store: &Store<T>, namespace: Option<String>, name: &str, form: Form) -> Response<Body>
where
    T: Printed + Clone + PartialEq + Send + Sync + 'static,
{
    let key = (namespace.unwrap_or_default(), name.to_owned());
    match store.get(&key) {
        Some(stored) => match form {
            Form::Table(include) => json_bytes(table::<T>(
                [stored.serialized.table_row()],
                &json!({"resourceVersion": stored.object.metadata().resource_version}),
                include,
                true,
                Timestamp::now(),
            )),
            Form::Json => respond(
                StatusCode::OK,
                "application/json",
                stored.serialized.json.get().to_owned(),
            ),
        },
        None => not_found::<T>(name),
    }
}

/// One page of the postures `in_scope`, after `continue_after`, as a List or a Table.
fn page<T>(
    store: &Store<T>,
    in_scope: impl Fn(&T) -> bool,
    limit: Option<usize>,
    continue_after: Option<&str>,
    form: Form,
) -> Response<Body>
where
    T: Printed + Clone + PartialEq + Send + Sync + 'static,
{
    let (version, objects) = store.list();
    let mut selected = objects.iter().filter(|o| in_scope(&o.object)).filter(|o| {
        continue_after.is_none_or(|after| continue_token(&key_of(&*o.object)).as_str() > after)
    });
    let page: Vec<&Stored<T>> = match limit {
        Some(limit) => selected.by_ref().take(limit).collect(),
        None => selected.by_ref().collect(),
    };
    let more = selected.next().is_some();
    let mut list_meta = json!({"resourceVersion": version.to_string()});
    if more && let Some(last) = page.last() {
        list_meta["continue"] = json!(continue_token(&key_of(&*last.object)));
    }
    match form {
        Form::Table(include) => json_bytes(table::<T>(
            page.iter().map(|o| o.serialized.table_row()),
            &list_meta,
            include,
            true,
            Timestamp::now(),
        )),
        Form::Json => json_response(&List {
            api_version: openapi::group_version(),
            kind: format!("{}List", T::KIND),
            metadata: list_meta,
            items: page.iter().map(|o| &*o.serialized.json).collect(),
        }),
    }
}

/// One watch's stream: where it starts, and where it sends.
struct Watching {
    from: WatchFrom,
    current: u64,
    encoder: Encoder,
    tx: mpsc::Sender<Bytes>,
    shutdown: CancellationToken,
}

/// Sends the backlog then each change in scope, with bookmarks, until the timeout, shutdown,
/// or the client leaving; a client too slow to keep up is told to relist.
async fn stream_changes<T>(
    watching: Watching,
    started: Result<Watch<T>, Gone>,
    in_scope: impl Fn(&T) -> bool + Send + Sync + 'static,
) where
    T: Printed + Clone + PartialEq + Send + Sync + 'static,
{
    let Watching {
        from,
        current,
        mut encoder,
        tx,
        shutdown,
    } = watching;
    let (backlog, mut changes) = match started {
        Ok(started) => started,
        Err(gone) => {
            let _ = tx.send(expired(gone.version)).await;
            return;
        }
    };
    for event in backlog {
        if !send(&tx, &mut encoder, &event, &in_scope).await {
            return;
        }
    }
    if from.initial_events_end {
        let _ = tx.send(encoder.bookmark::<T>(current, true)).await;
    }
    let deadline = tokio::time::sleep(from.timeout);
    tokio::pin!(deadline);
    let mut bookmarks = tokio::time::interval(from.bookmark_every);
    bookmarks.tick().await;
    let mut last = current;
    loop {
        tokio::select! {
            received = changes.recv() => match received {
                Ok(event) => {
                    last = event.version;
                    if !send(&tx, &mut encoder, &event, &in_scope).await {
                        return;
                    }
                }
                // Too slow to keep up: the client must relist.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let _ = tx.send(expired(last)).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = bookmarks.tick(), if from.bookmarks => {
                if tx.send(encoder.bookmark::<T>(last, false)).await.is_err() {
                    return;
                }
            }
            () = &mut deadline => return,
            () = shutdown.cancelled() => return,
            () = tx.closed() => return,
        }
    }
}

/// The postures a request names: a collection when `name` is `None`.
struct Object {
    resource: Resource,
    namespace: Option<String>,
    name: Option<String>,
}

struct Read {
    namespace: Option<String>,
    name: Option<String>,
    query: ListQuery,
    form: Form,
}

struct WatchFrom {
    version: Option<u64>,
    initial_events_end: bool,
    bookmarks: bool,
    /// How often a watch with `bookmarks` gets one ([`BOOKMARK_EVERY`]).
    bookmark_every: Duration,
    timeout: Duration,
}

/// Where a watch starts. No version (or `0`): with every current object as ADDED, like
/// kube-apiserver's "any" semantics; a version this server handed out: after it.
fn query_watch(query: &ListQuery) -> Result<WatchFrom, String> {
    let version = match query.resource_version.as_deref() {
        None | Some("0") => None,
        Some(v) if query.send_initial_events => {
            return Err(format!(
                "sendInitialEvents with resourceVersion {v} is not supported: use an empty \
                 resourceVersion"
            ));
        }
        // A version we cannot read was not ours: the client must relist (410), which `u64::MAX`
        // guarantees.
        Some(v) => Some(v.parse().unwrap_or(u64::MAX)),
    };
    Ok(WatchFrom {
        version,
        initial_events_end: query.send_initial_events,
        bookmarks: query.allow_bookmarks,
        bookmark_every: BOOKMARK_EVERY,
        timeout: query
            .timeout_seconds
            .map_or(WATCH_TIMEOUT, Duration::from_secs),
    })
}

fn continue_token(key: &(String, String)) -> String {
    format!("{}/{}", key.0, key.1)
}

#[cfg(test)]
mod tests {
    use super::super::Postures;
    use super::*;

    fn server() -> Server {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        Server {
            postures: Arc::new(Postures::new()),
            authorizer: Authorizer::new(client),
            documents: Documents::build(),
            shutdown: CancellationToken::new(),
        }
    }

    /// The book's (docs/src/posture-api.md) "with `allowWatchBookmarks`, a bookmark every 60 s": what a watch query
    /// asks for is what the watch below runs with.
    #[test]
    fn a_watch_asking_for_bookmarks_gets_one_every_60_seconds() {
        let asked = ListQuery {
            allow_bookmarks: true,
            ..ListQuery::default()
        };
        let from = query_watch(&asked).expect("a watch");
        assert!(from.bookmarks);
        assert_eq!(from.bookmark_every, Duration::from_secs(60));
        let from = query_watch(&ListQuery::default()).expect("a watch");
        assert!(!from.bookmarks);
    }

    /// A watch's bookmarks come one interval apart (none at once, no more than the interval
    /// allows), carry the last version, and come only when asked for.
    #[tokio::test]
    async fn bookmarks_come_at_the_interval_and_only_when_asked() {
        const EVERY: Duration = Duration::from_millis(200);
        const TIMEOUT: Duration = Duration::from_millis(2_000);
        let server = server();
        for asked in [true, false] {
            let from = WatchFrom {
                version: None,
                initial_events_end: false,
                bookmarks: asked,
                bookmark_every: EVERY,
                timeout: TIMEOUT,
            };
            let started = std::time::Instant::now();
            let response = server.watch(&server.postures.workloads, Ok(from), Form::Json, |_| true);
            let mut body = response.into_body().into_data_stream();
            let mut at = Vec::new();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.expect("a chunk of the watch");
                for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    let event: serde_json::Value =
                        serde_json::from_slice(line).expect("a JSON watch event");
                    assert_eq!(event["type"], "BOOKMARK", "{event}");
                    assert_eq!(event["object"]["kind"], "WorkloadPosture", "{event}");
                    at.push(started.elapsed());
                }
            }
            if asked {
                assert!(at.len() >= 2, "bookmarks at {at:?}");
                assert!(at.len() <= 10, "more than one per {EVERY:?}: {at:?}");
                assert!(
                    at[0] >= EVERY,
                    "a bookmark before the first interval: {at:?}"
                );
            } else {
                assert_eq!(at, Vec::<Duration>::new(), "bookmarks not asked for");
            }
        }
    }
}
