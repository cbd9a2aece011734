//! Responses: JSON or a Table, as the client accepts; discovery and OpenAPI documents with their
//! ETag; errors as `Status` objects.

use super::super::table::Include;
use axum::body::Body;
use http::{HeaderMap, Response, StatusCode, header};
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
    match serde_json::to_vec(value) {
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
