//! When the operator has converged: every policy the plan expects is in its final state. Watches
//! on NimbusPolicies and ClusterNimbusPolicies tell the moment the last one gets there, with
//! neither the rounding up nor the apiserver load of polling with LISTs.

use crate::args::Args;
use crate::operator::tail;
use crate::progress::step;
use crate::workload::{CLUSTER_BINDING, Ops, Plan, binding_intents, cluster_intents};
use anyhow::{Context as _, bail};
use futures::TryStreamExt;
use kube::api::{ListParams, WatchEvent};
use kube::{Resource, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, NimbusPolicy, NimbusPolicyStatus, NimbusRule, condition};
use nimbus_core::engines::{self, EngineSet, Environment, PolicyInput};
use nimbus_core::names;
use nimbus_testenv::Child;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A policy: namespace ("" for a cluster-scoped one) and name.
type Name = (String, String);

/// What one of the plan's policies must look like once the operator is done with it.
struct Expected {
    /// Which of the plan's policies it is, for the report.
    shape: &'static str,
    /// Its rules' intent IDs, in order.
    ids: Vec<&'static str>,
    /// A binding's policy: the `app` label its selector must have.
    app: Option<String>,
}

/// The policies `plan` makes the operator produce at `revision` of the bindings.
fn expectations(plan: &Plan, revision: u32) -> BTreeMap<Name, Expected> {
    let binding_ids: Vec<&str> = binding_intents(revision)
        .iter()
        .map(|(_, id)| *id)
        .collect();
    let cluster_ids: Vec<&str> = cluster_intents(plan.cluster_intents)
        .iter()
        .map(|(_, id)| *id)
        .collect();
    let mut expected = BTreeMap::new();
    for b in &plan.bindings {
        let policy = Expected {
            shape: "binding NimbusPolicy",
            ids: binding_ids.clone(),
            app: Some(b.app(revision)),
        };
        expected.insert((b.namespace.clone(), b.name.clone()), policy);
    }
    let per_namespace = names::cluster_binding_policy_name(CLUSTER_BINDING);
    for ns in &plan.selected {
        let policy = Expected {
            shape: "cluster-binding NimbusPolicy",
            ids: cluster_ids.clone(),
            app: None,
        };
        expected.insert((ns.clone(), per_namespace.clone()), policy);
    }
    let policy = Expected {
        shape: "ClusterNimbusPolicy",
        ids: cluster_ids,
        app: None,
    };
    expected.insert((String::new(), CLUSTER_BINDING.to_owned()), policy);
    expected
}

/// How far the operator got.
#[derive(Debug, Default)]
pub struct Progress {
    /// Policies in their expected final state.
    pub done: usize,
    pub expected: usize,
    /// Native policies reported by the policies that are done.
    pub native_policies: u64,
    /// Adapter policies per finished policy, by shape (for the report).
    pub per_policy: BTreeMap<&'static str, u64>,
    /// A few policies that are not done yet, with the reason.
    pub pending: Vec<String>,
}

/// A policy as last seen: done (with the number of native policies it reports) or why not.
type Outcome = Result<u64, String>;

enum Update {
    Seen(Name, Outcome),
    Gone(Name),
}

/// Follows the plan's policies from a list and a watch per kind, started before the change
/// whose convergence it measures. Its requests are recorded as the bench's own.
pub struct Tracker {
    expected: Arc<BTreeMap<Name, Expected>>,
    outcomes: HashMap<Name, Outcome>,
    done: usize,
    updates: mpsc::UnboundedReceiver<anyhow::Result<Update>>,
    followers: Vec<JoinHandle<()>>,
}

impl Tracker {
    pub fn start(ops: &Ops, plan: &Plan, revision: u32) -> Self {
        let expected = Arc::new(expectations(plan, revision));
        let (tx, updates) = mpsc::unbounded_channel();
        let followers = vec![
            tokio::spawn(follow(
                ops.clone(),
                expected.clone(),
                namespaced_outcome,
                tx.clone(),
            )),
            tokio::spawn(follow(ops.clone(), expected.clone(), cluster_outcome, tx)),
        ];
        Self {
            expected,
            outcomes: HashMap::new(),
            done: 0,
            updates,
            followers,
        }
    }

    /// Waits for the next change of an expected policy; returns whether all of them are done.
    pub async fn next(&mut self) -> anyhow::Result<bool> {
        let update = self
            .updates
            .recv()
            .await
            .context("the policy watches ended")??;
        let (name, now) = match update {
            Update::Seen(name, outcome) => (name, Some(outcome)),
            Update::Gone(name) => (name, None),
        };
        let was_done = matches!(self.outcomes.get(&name), Some(Ok(_)));
        let is_done = matches!(now, Some(Ok(_)));
        match now {
            Some(outcome) => self.outcomes.insert(name, outcome),
            None => self.outcomes.remove(&name),
        };
        self.done = self.done + usize::from(is_done) - usize::from(was_done);
        Ok(self.done == self.expected.len())
    }

    pub fn progress(&self) -> Progress {
        let mut progress = Progress {
            expected: self.expected.len(),
            ..Progress::default()
        };
        for (name, want) in self.expected.iter() {
            match self.outcomes.get(name) {
                Some(Ok(n)) => {
                    progress.done += 1;
                    progress.native_policies += n;
                    progress.per_policy.insert(want.shape, *n);
                }
                _ if progress.pending.len() >= 5 => {}
                Some(Err(reason)) => progress.pending.push(format!("{name:?}: {reason}")),
                None => progress.pending.push(format!("{name:?}: not created yet")),
            }
        }
        progress
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for follower in &self.followers {
            follower.abort();
        }
    }
}

/// Sends the outcome of every expected policy of kind `K` as it changes, until the receiver
/// goes away; any failure is sent too.
async fn follow<K>(
    ops: Ops,
    expected: Arc<BTreeMap<Name, Expected>>,
    outcome: fn(&K, &Expected) -> Outcome,
    tx: mpsc::UnboundedSender<anyhow::Result<Update>>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let sent = |update| tx.send(Ok(update)).is_ok();
    if let Err(error) = watch(&ops, &expected, outcome, sent).await {
        let _ = tx.send(Err(error));
    }
}

async fn watch<K>(
    ops: &Ops,
    expected: &BTreeMap<Name, Expected>,
    outcome: fn(&K, &Expected) -> Outcome,
    sent: impl Fn(Update) -> bool,
) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let api = kube::Api::<K>::all(ops.client.clone());
    let name_of = |obj: &K| (obj.namespace().unwrap_or_default(), obj.name_any());
    let seen = |obj: &K| {
        let name = name_of(obj);
        let outcome = expected.get(&name).map(|want| outcome(obj, want));
        outcome.is_none_or(|outcome| sent(Update::Seen(name, outcome)))
    };
    let mut known: HashSet<Name> = HashSet::new();
    'list: loop {
        let list = ops.list(&api, &ListParams::default()).await?;
        let listed: HashSet<Name> = list.items.iter().map(name_of).collect();
        for name in known.difference(&listed) {
            if !sent(Update::Gone(name.clone())) {
                return Ok(());
            }
        }
        known = listed;
        for obj in &list.items {
            if !seen(obj) {
                return Ok(());
            }
        }
        let mut version = list.metadata.resource_version.unwrap_or_default();
        loop {
            let mut events = ops.watch(&api, &version).await?;
            while let Some(event) = events
                .try_next()
                .await
                .with_context(|| format!("watching {}", K::plural(&())))?
            {
                let still_wanted = match event {
                    WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                        version = obj.resource_version().unwrap_or_default();
                        known.insert(name_of(&obj));
                        seen(&obj)
                    }
                    WatchEvent::Deleted(obj) => {
                        version = obj.resource_version().unwrap_or_default();
                        known.remove(&name_of(&obj));
                        sent(Update::Gone(name_of(&obj)))
                    }
                    WatchEvent::Bookmark(bookmark) => {
                        version = bookmark.metadata.resource_version;
                        true
                    }
                    WatchEvent::Error(e) if e.code == 410 => continue 'list,
                    WatchEvent::Error(e) => bail!("watching {}: {e}", K::plural(&())),
                };
                if !still_wanted {
                    return Ok(());
                }
            }
        }
    }
}

fn namespaced_outcome(np: &NimbusPolicy, want: &Expected) -> Outcome {
    if let Some(app) = &want.app {
        let labels = np.spec.selector.match_labels.clone().unwrap_or_default();
        let want = BTreeMap::from([("app".to_owned(), app.clone())]);
        if labels != want {
            return Err(format!("selector {labels:?}, want {want:?}"));
        }
    }
    check(
        &np.spec.rules,
        &want.ids,
        np.meta().generation,
        np.status.as_ref(),
        || count(&PolicyInput::namespaced(np, "bench")),
    )
}

fn cluster_outcome(cwnp: &ClusterNimbusPolicy, want: &Expected) -> Outcome {
    check(
        &cwnp.spec.rules,
        &want.ids,
        cwnp.meta().generation,
        cwnp.status.as_ref(),
        || count(&PolicyInput::cluster(cwnp, "bench")),
    )
}

/// A policy is done when it has the expected rules, its status covers its current generation,
/// is Ready, and counts every native policy the engines generate for it.
fn check(
    rules: &[NimbusRule],
    ids: &[&str],
    generation: Option<i64>,
    status: Option<&NimbusPolicyStatus>,
    expected: impl FnOnce() -> u64,
) -> Outcome {
    let have: Vec<&str> = rules.iter().map(|r| r.id.as_str()).collect();
    if have != ids {
        return Err(format!("rules {have:?}, want {ids:?}"));
    }
    let status = status.ok_or("no status yet")?;
    if status.observed_generation != generation {
        return Err(format!(
            "status is for generation {:?}, object at {generation:?}",
            status.observed_generation
        ));
    }
    if let Some(ready) = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::READY)
        && ready.status != "True"
    {
        return Err(format!("not Ready: {} {}", ready.reason, ready.message));
    }
    let want = expected();
    let reported = u64::try_from(status.number_of_adapter_policies).unwrap_or(0);
    if reported != want {
        return Err(format!("{reported} of {want} adapter policies"));
    }
    Ok(want)
}

/// What the engines generate for a policy with every engine installed, counted the way
/// `status.numberOfAdapterPolicies` counts (ConfigMaps are not listed there).
fn count(input: &PolicyInput) -> u64 {
    // No nodes run in the bench's control plane, so the default environment (no pod CIDRs,
    // k8tls namespace present, no virtual-patch database) is the operator's.
    let translation = engines::translate(input, &Environment::default(), &EngineSet::all());
    translation.objects.iter().filter(|g| g.kind.listed).count() as u64
}

/// Waits until `tracker` sees every policy done; the time is taken the moment the last one is.
pub(crate) async fn converge(
    tracker: &mut Tracker,
    began: Instant,
    args: &Args,
    operator: &mut Child,
) -> anyhow::Result<(Duration, Progress)> {
    let mut checks = tokio::time::interval(Duration::from_secs(1));
    let mut last_report = Instant::now();
    loop {
        tokio::select! {
            converged = tracker.next() => {
                if converged? {
                    return Ok((began.elapsed(), tracker.progress()));
                }
            }
            _ = checks.tick() => {
                let elapsed = began.elapsed();
                if operator.has_exited() {
                    bail!(
                        "the operator exited; its log ends with:\n{}",
                        tail(&operator.output(), 40)
                    );
                }
                if elapsed > args.timeout {
                    let progress = tracker.progress();
                    bail!(
                        "not converged after {:?}: {} of {} policies done; for example:\n  {}\n\
                         the operator's log ends with:\n{}",
                        args.timeout,
                        progress.done,
                        progress.expected,
                        progress.pending.join("\n  "),
                        tail(&operator.output(), 40)
                    );
                }
                if last_report.elapsed() > Duration::from_secs(10) {
                    last_report = Instant::now();
                    let progress = tracker.progress();
                    step(format!(
                        "  {:.0} s: {} of {} policies done",
                        elapsed.as_secs_f64(),
                        progress.done,
                        progress.expected
                    ));
                }
            }
        }
    }
}
