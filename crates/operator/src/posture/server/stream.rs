//! A watch's stream: each event as the watch sees it, as JSON lines (objects or Table rows),
//! bookmarks, and the error that makes a client relist.

use super::super::openapi;
use super::super::store::{Change, Event};
use super::super::table::{Printed, table};
use super::response::{Form, status_body};
use bytes::Bytes;
use http::StatusCode;
use k8s_openapi::jiff::Timestamp;
use nimbus_api::posture::PostureKind;
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

/// Sends `event` as this watch sees it (an object entering or leaving a selection is added
/// or deleted); `false` when the client is gone.
pub(super) async fn send<T: Printed + Serialize>(
    tx: &mpsc::Sender<Bytes>,
    encoder: &mut Encoder,
    event: &Event<T>,
    in_scope: &impl Fn(&T) -> bool,
) -> bool {
    let was = event.previous.as_deref().is_some_and(in_scope);
    let is = event.change != Change::Deleted && in_scope(&event.object.object);
    let change = match (was, is) {
        (false, false) => return true,
        (false, true) => Change::Added,
        (true, true) => Change::Modified,
        (true, false) => Change::Deleted,
    };
    tx.send(encoder.event(change, event)).await.is_ok()
}

pub(super) struct Encoder {
    pub(super) form: Form,
    pub(super) headers_sent: bool,
}

impl Encoder {
    pub(super) fn event<T: Printed + Serialize>(
        &mut self,
        change: Change,
        event: &Event<T>,
    ) -> Bytes {
        /// A watch event as JSON: the object's stored JSON.
        #[derive(Serialize)]
        struct Line<'a> {
            #[serde(rename = "type")]
            change: &'a str,
            object: &'a RawValue,
        }
        let change = change.as_str();
        let serialized = &event.object.serialized;
        match self.form {
            Form::Json => line(&Line {
                change,
                object: &serialized.json,
            }),
            Form::Table(include) => {
                let headers = !std::mem::replace(&mut self.headers_sent, true);
                table_line(
                    change,
                    table::<T>(
                        [serialized.table_row()],
                        &json!({"resourceVersion": event.version.to_string()}),
                        include,
                        headers,
                        Timestamp::now(),
                    ),
                )
            }
        }
    }

    pub(super) fn bookmark<T: PostureKind>(&self, version: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": version.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(&json!({"type": "BOOKMARK", "object": {
            "apiVersion": openapi::group_version(),
            "kind": T::KIND,
            "metadata": metadata,
        }}))
    }
}

/// A watch event of a Table assembled as bytes (see [`table`]), spliced in as its object.
fn table_line(change: &str, table: serde_json::Result<Vec<u8>>) -> Bytes {
    match table {
        Ok(table) => {
            let mut bytes = Vec::with_capacity(table.len() + 32);
            bytes.extend_from_slice(br#"{"type":""#);
            bytes.extend_from_slice(change.as_bytes());
            bytes.extend_from_slice(br#"","object":"#);
            bytes.extend_from_slice(&table);
            bytes.extend_from_slice(b"}\n");
            Bytes::from(bytes)
        }
        Err(error) => line(&json!({"type": "ERROR", "object": status_body(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &format!("encoding a watch event: {error}"),
        )})),
    }
}

pub(super) fn expired(version: u64) -> Bytes {
    line(&json!({"type": "ERROR", "object": status_body(
        StatusCode::GONE,
        "Expired",
        &format!("too old resource version: {version} (it was not handed out by this server, or is no longer kept)"),
    )}))
}

pub(super) fn line(value: &impl Serialize) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}
