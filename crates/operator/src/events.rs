//! Kubernetes Events, written off the reconcile path (as client-go's broadcaster does): a
//! reconcile queues its event and goes on, one task writes them in order. Events are for
//! people and best effort: when the queue is full (the events API is slow or failing), a new
//! event is dropped and counted rather than delaying what the operator enforces.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Longest object name an event can be recorded for (253 minus `.<16 hex digits>`).
const MAX_EVENT_SUBJECT_NAME: usize = 253 - 17;
/// Longest event note the API server accepts, in bytes.
const MAX_EVENT_NOTE: usize = 1024;

/// Events waiting to be written, at most.
const QUEUE: usize = 1024;

enum Item {
    Event(Box<Event>, ObjectReference),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// Where reconciles publish events.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<Item>,
    dropped: Counter,
    /// Events queued and not yet written (or given up on).
    queued: Gauge,
}

impl Events {
    /// The queue, and the task that writes it through `recorder` (it ends once every
    /// [`Events`] is dropped).
    pub fn start(
        recorder: Recorder,
        dropped: Counter,
        queued: Gauge,
    ) -> (Self, impl Future<Output = ()>) {
        let (queue, mut items) = mpsc::channel(QUEUE);
        let writing = queued.clone();
        let writer = async move {
            while let Some(item) = items.recv().await {
                match item {
                    Item::Event(event, subject) => {
                        if let Err(error) = recorder.publish(&event, &subject).await {
                            tracing::warn!(%error, name = ?subject.name, reason = %event.reason, "recording event failed");
                        }
                        writing.dec();
                    }
                    Item::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        };
        let events = Self {
            queue,
            dropped,
            queued,
        };
        (events, writer)
    }

    /// Queues an event on `obj`; it never fails nor delays the reconcile.
    pub fn about<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        // The recorder names an event `<object>.<16 hex digits>`, which must stay a valid name.
        if obj.name_any().len() > MAX_EVENT_SUBJECT_NAME {
            tracing::debug!(name = %obj.name_any(), reason, "name too long for an event; not recorded");
            return;
        }
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(nimbus_core::status::bounded(note, MAX_EVENT_NOTE)),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        self.publish(event, obj.object_ref(&()));
    }

    /// Queues `event` about `subject`; never waits.
    pub fn publish(&self, event: Event, subject: ObjectReference) {
        // Counted before it is sent: the writer may take it at once.
        self.queued.inc();
        if self
            .queue
            .try_send(Item::Event(Box::new(event), subject))
            .is_err()
        {
            self.queued.dec();
            self.dropped.inc();
            tracing::debug!("event queue full or closed; event dropped");
        }
    }

    /// Waits (at most `limit`) until the events queued so far are written.
    pub async fn flush(&self, limit: Duration) {
        let (done, written) = oneshot::channel();
        let flushed = async {
            if self.queue.send(Item::Flush(done)).await.is_ok() {
                let _ = written.await;
            }
        };
        if tokio::time::timeout(limit, flushed).await.is_err() {
            tracing::warn!(?limit, "events not all written before shutdown");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::{EventType, Reporter};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: None,
            action: "Test".into(),
            secondary: None,
        }
    }

    /// A client whose API server takes `delay` to answer each request, counting the Events
    /// created.
    fn slow_api_server(delay: Duration) -> (kube::Client, Arc<AtomicUsize>) {
        let created = Arc::new(AtomicUsize::new(0));
        let counted = created.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let counted = counted.clone();
            async move {
                tokio::time::sleep(delay).await;
                if request.method() == http::Method::POST {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                let stored = serde_json::json!({
                    "apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": "e", "namespace": "default"},
                    "eventTime": "2026-01-01T00:00:00.000000Z"
                });
                http::Response::builder()
                    .status(201)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(stored.to_string().into_bytes()))
            }
        });
        (kube::Client::new(service, "default"), created)
    }

    /// The book's (docs/src/cli.md) "on SIGTERM the leader … flushes its queued Events": the shutdown's
    /// `flush` returns once every Event queued before it is written, and, when the events API
    /// is too slow, after its limit rather than never.
    #[tokio::test]
    async fn flush_waits_for_the_queued_events_and_no_longer_than_its_limit() {
        let reporter = || Reporter {
            controller: "test".into(),
            instance: None,
        };
        let (client, created) = slow_api_server(Duration::from_millis(50));
        let queued = Gauge::default();
        let (events, writer) = Events::start(
            Recorder::new(client, reporter()),
            Counter::default(),
            queued.clone(),
        );
        tokio::spawn(writer);
        for i in 0..5 {
            events.publish(event(&format!("Test{i}")), ObjectReference::default());
        }
        events.flush(Duration::from_secs(30)).await;
        assert_eq!(
            created.load(Ordering::SeqCst),
            5,
            "Events written at the flush's end"
        );
        assert_eq!(queued.get(), 0);

        let (client, created) = slow_api_server(Duration::from_secs(3600));
        let (events, writer) = Events::start(
            Recorder::new(client, reporter()),
            Counter::default(),
            Gauge::default(),
        );
        tokio::spawn(writer);
        events.publish(event("Stuck"), ObjectReference::default());
        let started = std::time::Instant::now();
        events.flush(Duration::from_millis(300)).await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(30),
            "waited {waited:?}"
        );
        assert_eq!(created.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_instead_of_waiting() {
        // Nothing listens there, and nothing is sent: the writer is never run.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        let reporter = Reporter {
            controller: "test".into(),
            instance: None,
        };
        let (dropped, queued) = (Counter::default(), Gauge::default());
        let (events, _writer) = Events::start(
            Recorder::new(client, reporter),
            dropped.clone(),
            queued.clone(),
        );
        for _ in 0..QUEUE + 3 {
            events.publish(
                Event {
                    type_: EventType::Normal,
                    reason: "Test".into(),
                    note: None,
                    action: "Test".into(),
                    secondary: None,
                },
                ObjectReference::default(),
            );
        }
        assert_eq!(dropped.get(), 3);
        assert_eq!(queued.get(), i64::try_from(QUEUE).expect("a small number"));
    }
}
