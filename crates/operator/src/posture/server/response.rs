//! Responses: JSON or a Table, as the client accepts, gzip-compressed when large and the client
//! accepts that; discovery and OpenAPI documents with their ETag; errors as `Status` objects.

use super::super::table::Include;
use axum::body::Body;
use axum::body::HttpBody as _;
use flate2::Compression;
use flate2::write::GzEncoder;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use nimbus_api::posture::{GROUP, PostureKind};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Clone, Copy)]
pub(super) enum Form {
    Json,
    Table(Include),
}

impl Form {
    /// A Table when the client accepts `meta.k8s.io/v1` Tables (`kubectl get` does).
    pub(super) fn of(headers: &HeaderMap, include_object: Option<&str>) -> Self {
        let table = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|media| {
                let params: Vec<&str> = media.split(';').map(str::trim).collect();
                params.contains(&"as=Table")
                    && params.contains(&"g=meta.k8s.io")
                    && params.contains(&"v=v1")
            });
        if table {
            Form::Table(Include::parse(include_object))
        } else {
            Form::Json
        }
    }
}

pub(super) fn document(headers: &HeaderMap, body: &[u8], etag: &str) -> Response<Body> {
    let quoted = format!("\"{etag}\"");
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == quoted);
    let builder = Response::builder().header(header::ETAG, quoted);
    let response = if unchanged {
        builder.status(StatusCode::NOT_MODIFIED).body(Body::empty())
    } else {
        builder
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_vec()))
    };
    response.unwrap_or_else(|_| Response::new(Body::empty()))
}

pub(super) fn respond(
    code: StatusCode,
    content_type: &str,
    body: impl Into<Body>,
) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

pub(super) fn json_response(value: &impl Serialize) -> Response<Body> {
    json_bytes(serde_json::to_vec(value))
}

/// A JSON body already serialized (or why it could not be).
pub(super) fn json_bytes(body: serde_json::Result<Vec<u8>>) -> Response<Body> {
    match body {
        Ok(bytes) => respond(StatusCode::OK, "application/json", bytes),
        Err(error) => status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &format!("encoding the response: {error}"),
        ),
    }
}

pub(super) fn status_body(code: StatusCode, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    })
}

pub(super) fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    respond(
        code,
        "application/json",
        serde_json::to_vec(&status_body(code, reason, message)).unwrap_or_default(),
    )
}

pub(super) fn not_found<T: PostureKind>(name: &str) -> Response<Body> {
    let mut body = status_body(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{}.{GROUP} \"{name}\" not found", T::PLURAL),
    );
    body["details"] = json!({"name": name, "group": GROUP, "kind": T::PLURAL});
    respond(
        StatusCode::NOT_FOUND,
        "application/json",
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

/// kube-apiserver's own rule for its responses: gzip at level 1 above 128 KiB. kubectl and
/// client-go accept gzip, and kube-apiserver's aggregation layer passes the compressed body
/// through, so it relays a list of 10,000 WorkloadPostures as 0.54 MiB rather than 7.6.
const GZIP_ABOVE: u64 = 128 * 1024;

/// Whether the client named `gzip` in `Accept-Encoding` (as kube-apiserver reads it: a bare
/// token, so `gzip;q=0` is not).
pub(super) fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("gzip"))
}

/// `response` gzip-compressed if its body is whole (not a watch's stream) and above
/// [`GZIP_ABOVE`]. Compressing takes milliseconds per MiB, so it runs off the async workers.
pub(super) async fn gzipped(response: Response<Body>) -> Response<Body> {
    let whole_and_large = response
        .body()
        .size_hint()
        .exact()
        .is_some_and(|len| len > GZIP_ABOVE);
    if !whole_and_large || response.headers().contains_key(header::CONTENT_ENCODING) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(error) => return encoding_failed(&error),
    };
    let compressed = match tokio::task::spawn_blocking(move || gzip(&bytes)).await {
        Ok(Ok(compressed)) => compressed,
        Ok(Err(error)) => return encoding_failed(&error),
        Err(error) => return encoding_failed(&error),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    parts
        .headers
        .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    Response::from_parts(parts, Body::from(compressed))
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut encoder = GzEncoder::new(Vec::with_capacity(bytes.len() / 8), Compression::fast());
    encoder.write_all(bytes)?;
    encoder.finish()
}

fn encoding_failed(error: &dyn std::fmt::Display) -> Response<Body> {
    status(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        &format!("compressing the response: {error}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn headers(accept_encoding: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(accept_encoding).unwrap(),
        );
        headers
    }

    #[test]
    fn gzip_is_accepted_only_when_named() {
        assert!(accepts_gzip(&headers("gzip")));
        assert!(accepts_gzip(&headers("deflate, GZIP")));
        assert!(!accepts_gzip(&headers("gzip;q=0")));
        assert!(!accepts_gzip(&headers("br")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    async fn body_of(response: Response<Body>) -> Vec<u8> {
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec()
    }

    #[tokio::test]
    async fn a_large_whole_body_is_gzipped_and_the_rest_left_alone() {
        let large: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let response = gzipped(respond(StatusCode::OK, "application/json", large.clone())).await;
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(response.headers()[header::VARY], "Accept-Encoding");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&body_of(response).await[..])
            .read_to_end(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, large);

        let small = vec![b'x'; 128 * 1024];
        let response = gzipped(respond(StatusCode::OK, "application/json", small.clone())).await;
        assert!(!response.headers().contains_key(header::CONTENT_ENCODING));
        assert_eq!(body_of(response).await, small);

        let stream =
            futures::stream::iter([Ok::<_, std::convert::Infallible>(vec![b'x'; 200_000])]);
        let response = gzipped(Response::new(Body::from_stream(stream))).await;
        assert!(!response.headers().contains_key(header::CONTENT_ENCODING));
    }
}
