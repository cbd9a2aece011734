//! A continuous watch on what the operator keeps in force, for what an end state cannot show:
//! an object deleted and re-created (a gap in protection, however short), a uid that changed,
//! a Warning Event, a `Ready=False` status for a moment. It shares no code with the operator:
//! plain watches, compared with what was there when it started.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `Kind namespace/name`.
pub type Key = String;

fn key(kind: &str, obj: &DynamicObject) -> Key {
    match obj.namespace() {
        Some(ns) => format!("{kind} {ns}/{}", obj.name_any()),
        None => format!("{kind} {}", obj.name_any()),
    }
}

/// An object deleted while the monitor watched, and for how long it was absent (`None`: it
/// still is).
#[derive(Clone, Debug)]
pub struct Gap {
    pub key: Key,
    pub absent: Option<Duration>,
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.absent {
            Some(absent) => write!(
                f,
                "{} deleted and re-created {} ms later",
                self.key,
                absent.as_millis()
            ),
            None => write!(f, "{} deleted (not re-created)", self.key),
        }
    }
}

/// Everything the monitor saw go wrong since it started.
#[derive(Clone, Debug, Default)]
pub struct Findings {
    pub gaps: Vec<Gap>,
    /// Objects that came back (or were replaced) under another uid.
    pub uid_changes: Vec<Key>,
    /// Warning Events written: `reason on object: note`.
    pub warnings: Vec<String>,
    /// `Ready=False` statuses written: `Kind namespace/name: reason: message`.
    pub not_ready: Vec<String>,
}

impl Findings {
    pub fn is_clean(&self) -> bool {
        self.gaps.is_empty()
            && self.uid_changes.is_empty()
            && self.warnings.is_empty()
            && self.not_ready.is_empty()
    }
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for gap in &self.gaps {
            writeln!(f, "gap: {gap}")?;
        }
        for key in &self.uid_changes {
            writeln!(f, "uid changed: {key}")?;
        }
        for warning in &self.warnings {
            writeln!(f, "warning event: {warning}")?;
        }
        for status in &self.not_ready {
            writeln!(f, "Ready=False: {status}")?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct State {
    /// The uid of every watched object now present, by key.
    uids: HashMap<Key, String>,
    /// Objects deleted and not back yet, and when.
    deleted: HashMap<Key, Instant>,
    /// Each Warning Event's resourceVersion as last seen (a repeat updates the Event).
    events: HashMap<String, String>,
    findings: Findings,
}

/// A running monitor; its watches stop when it is dropped.
pub struct Monitor {
    state: Arc<Mutex<State>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What to watch: kinds whose deletions and uid changes count (`objects`), kinds whose
/// `Ready` condition counts (`statuses`, which may repeat the former), and Warning Events.
pub struct Watched {
    pub objects: Vec<ApiResource>,
    pub statuses: Vec<ApiResource>,
}

impl Monitor {
    /// Starts watching; returns once every watch has listed, which is the baseline: objects
    /// present then are the ones that must stay, Events and statuses written before do not
    /// count.
    pub async fn start(client: &Client, watched: Watched) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let mut tasks = Vec::new();
        let mut listed = Vec::new();
        for resource in watched.objects {
            let (tx, rx) = tokio::sync::oneshot::channel();
            listed.push(rx);
            tasks.push(tokio::spawn(watch_objects(
                client.clone(),
                resource,
                state.clone(),
                tx,
            )));
        }
        for resource in watched.statuses {
            let (tx, rx) = tokio::sync::oneshot::channel();
            listed.push(rx);
            tasks.push(tokio::spawn(watch_statuses(
                client.clone(),
                resource,
                state.clone(),
                tx,
            )));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        listed.push(rx);
        tasks.push(tokio::spawn(watch_warnings(
            client.clone(),
            state.clone(),
            tx,
        )));
        for rx in listed {
            rx.await.expect("a monitor watch ended before listing");
        }
        Self { state, tasks }
    }

    /// What went wrong so far.
    pub fn findings(&self) -> Findings {
        let state = lock(&self.state);
        let mut findings = state.findings.clone();
        findings.gaps.extend(state.deleted.keys().map(|key| Gap {
            key: key.clone(),
            absent: None,
        }));
        findings
    }

    /// The objects present now, with their uids.
    pub fn present(&self) -> HashMap<Key, String> {
        lock(&self.state).uids.clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn watch_objects(
    client: Client,
    resource: ApiResource,
    state: Arc<Mutex<State>>,
    listed: tokio::sync::oneshot::Sender<()>,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let kind = resource.kind.clone();
    let mut listed = Some(listed);
    // The initial list is the baseline; a relist (after a watch expired) is compared with it.
    let mut relisted: Option<HashMap<Key, String>> = None;
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        let now = Instant::now();
        match event {
            Ok(watcher::Event::Init) => relisted = Some(HashMap::new()),
            Ok(watcher::Event::InitApply(obj)) => {
                if let Some(seen) = &mut relisted {
                    seen.insert(key(&kind, &obj), obj.uid().unwrap_or_default());
                }
            }
            Ok(watcher::Event::InitDone) => {
                let seen = relisted.take().unwrap_or_default();
                let mut state = lock(&state);
                if let Some(tx) = listed.take() {
                    state.uids.extend(seen);
                    let _ = tx.send(());
                    continue;
                }
                // What vanished while the watch was down.
                let gone: Vec<Key> = state
                    .uids
                    .keys()
                    .filter(|k| k.starts_with(&format!("{kind} ")) && !seen.contains_key(*k))
                    .cloned()
                    .collect();
                for key in gone {
                    state.uids.remove(&key);
                    state.deleted.insert(key, now);
                }
                for (key, uid) in seen {
                    state.applied(key, uid, now);
                }
            }
            Ok(watcher::Event::Apply(obj)) => {
                lock(&state).applied(key(&kind, &obj), obj.uid().unwrap_or_default(), now);
            }
            Ok(watcher::Event::Delete(obj)) => {
                let key = key(&kind, &obj);
                let mut state = lock(&state);
                state.uids.remove(&key);
                state.deleted.insert(key, now);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

impl State {
    fn applied(&mut self, key: Key, uid: String, now: Instant) {
        if let Some(deleted) = self.deleted.remove(&key) {
            self.findings.gaps.push(Gap {
                key: key.clone(),
                absent: Some(now - deleted),
            });
        }
        match self.uids.insert(key.clone(), uid.clone()) {
            Some(before) if before != uid => self.findings.uid_changes.push(key),
            _ => {}
        }
    }
}

async fn watch_statuses(
    client: Client,
    resource: ApiResource,
    state: Arc<Mutex<State>>,
    listed: tokio::sync::oneshot::Sender<()>,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut listed = Some(listed);
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::InitDone) => {
                if let Some(tx) = listed.take() {
                    let _ = tx.send(());
                }
            }
            Ok(watcher::Event::Apply(obj)) => {
                let ready = obj
                    .data
                    .pointer("/status/conditions")
                    .and_then(|c| c.as_array()?.iter().find(|c| c["type"] == "Ready").cloned());
                if let Some(ready) = ready.filter(|c| c["status"] == "False") {
                    let key = key(&resource.kind, &obj);
                    lock(&state).findings.not_ready.push(format!(
                        "{key}: {}: {}",
                        ready["reason"].as_str().unwrap_or_default(),
                        ready["message"].as_str().unwrap_or_default()
                    ));
                }
            }
            Ok(_) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn watch_warnings(
    client: Client,
    state: Arc<Mutex<State>>,
    listed: tokio::sync::oneshot::Sender<()>,
) {
    let api: Api<Event> = Api::all(client);
    let mut listed = Some(listed);
    let config = watcher::Config::default().fields("type=Warning");
    let mut stream = watcher(api, config).boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::InitApply(event)) if listed.is_some() => {
                let mut state = lock(&state);
                state.events.insert(
                    event.name_any(),
                    event.resource_version().unwrap_or_default(),
                );
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(tx) = listed.take() {
                    let _ = tx.send(());
                }
            }
            Ok(watcher::Event::Apply(event) | watcher::Event::InitApply(event)) => {
                let mut state = lock(&state);
                let version = event.resource_version().unwrap_or_default();
                if state.events.insert(event.name_any(), version.clone()) == Some(version) {
                    continue;
                }
                let subject = &event.involved_object;
                state.findings.warnings.push(format!(
                    "{} on {} {}/{}: {}",
                    event.reason.as_deref().unwrap_or_default(),
                    subject.kind.as_deref().unwrap_or_default(),
                    subject.namespace.as_deref().unwrap_or_default(),
                    subject.name.as_deref().unwrap_or_default(),
                    event.message.as_deref().unwrap_or_default()
                ));
            }
            Ok(_) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
