//! The leader's probes of enforcement (see [`nimbus_core::probes`]): every period it observes
//! the policies in the caches, asks the core which (policy, intent, engine) to probe and with
//! what, sends each probe as a server-side dry run (`dryRun=All`: admission runs in full,
//! nothing reaches etcd), and records what the answers say. The policy controllers (status),
//! the posture and the metrics read the record; a change to it re-translates every policy,
//! which writes only the statuses that changed.
//!
//! The record lives in [`crate::liveness`], which the readers import without this runner.
//!
//! Budget: at most one request per probeable (policy, intent, engine) per period, and at most
//! `cap` per period in all (the rest come round in the next periods). No other request.

use crate::context::Context;
pub use crate::liveness::Probes;
use crate::metrics::{EngineLabels, ProbeLabels};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use nimbus_core::engines::{Engine, Generated, PolicyInput};
use nimbus_core::policy;
use nimbus_core::probes::{self, Key, Observed, Outcome, Probe, Response, Target};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often, and how many at most per period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub period: Duration,
    /// Probes sent per period at most.
    pub cap: u16,
}

/// One minute: a dead engine is seen within a minute, for one request per probed intent a
/// minute (a few hundred bytes each; the API server answers it from admission alone).
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(60);
/// Per period, at most: 100 requests a minute stays far below any API server's
/// max-mutating-requests-inflight.
pub const DEFAULT_CAP: u16 = 100;

impl Default for Config {
    fn default() -> Self {
        Self {
            period: DEFAULT_PERIOD,
            cap: DEFAULT_CAP,
        }
    }
}

/// Probes every `config.period` while this replica leads, until `shutdown`.
pub async fn run(ctx: Arc<Context>, probes: Probes, config: Config, shutdown: CancellationToken) {
    let mut started = ctx.started.clone();
    tokio::select! {
        _ = started.wait_for(|s| *s) => {}
        () = shutdown.cancelled() => return,
    }
    let mut ticks = tokio::time::interval(config.period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut round = 0usize;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.cancelled() => return,
        }
        // A standby sends nothing: the leader's record is what counts.
        if !*ctx.leading.borrow() {
            continue;
        }
        let (due, unprobeable) = plan(&ctx);
        let keys: Vec<Key> = due.iter().map(|d| d.probe.key.clone()).collect();
        let mut answered = Vec::new();
        for Due1 {
            probe,
            generated,
            seen,
        } in probes::schedule(&due, usize::from(config.cap), round)
        {
            let observed = send(&ctx, &probe).await;
            // The objects changed while the probe was out (deleted, rewritten): its answer is
            // about a moment the drift repair is undoing, not about the engine.
            if observed.outcome == Outcome::Admitted && versions(&ctx, &generated) != seen {
                continue;
            }
            let labels = ProbeLabels {
                engine: probe.key.engine.name(),
                outcome: outcome_label(&observed.outcome),
            };
            ctx.metrics.probes.get_or_create(&labels).inc();
            if observed.outcome != Outcome::DeniedByEngine {
                tracing::info!(probe = ?probe.key, namespace = %probe.namespace, outcome = ?observed.outcome, "enforcement probe");
            }
            answered.push((probe.key, observed));
        }
        round = round.wrapping_add(1);
        probes.record(&keys, answered, unprobeable);
        let counts = probes.not_live_counts();
        for engine in Engine::ALL {
            let labels = EngineLabels {
                engine: engine.name(),
            };
            let count = counts.get(&engine).copied().unwrap_or(0);
            ctx.metrics.not_live.get_or_create(&labels).set(count);
        }
    }
}

/// The probes due now, from the caches: each policy judged by the plan its controller executes.
fn plan(ctx: &Context) -> (Vec<Due1>, BTreeMap<Key, String>) {
    let mut due = Due {
        ctx,
        engines: ctx.engine_set(),
        namespaces: (ctx.namespaces.state().iter())
            .filter(|ns| ns.metadata.deletion_timestamp.is_none())
            .map(|ns| ns.name_any())
            .collect(),
        probes: Vec::new(),
        unprobeable: BTreeMap::new(),
    };
    // With the exceptions in force, as the policies are translated.
    let now = jiff::Timestamp::now();
    let excepted = |input: &mut PolicyInput| {
        input.exceptions = ctx
            .exceptions_in_force(input.binding.as_ref(), input.namespace.as_deref(), now)
            .0;
    };
    for np in ctx.policies.state() {
        let Some(uid) = np.uid() else { continue };
        let mut input = PolicyInput::namespaced(&np, &uid);
        excepted(&mut input);
        due.add(&input, np.status.as_ref(), ctx.claim(&np));
    }
    for cnp in ctx.cluster_policies.state() {
        let Some(uid) = cnp.uid() else { continue };
        let claim = ctx.cluster_claim(&cnp);
        let mut input = PolicyInput::cluster(&cnp, &uid);
        excepted(&mut input);
        due.add(&input, cnp.status.as_ref(), claim);
    }
    due.probes.sort_by(|a, b| a.probe.key.cmp(&b.probe.key));
    (due.probes, due.unprobeable)
}

/// The probes of the policies seen so far.
struct Due<'c> {
    ctx: &'c Context,
    engines: nimbus_core::engines::EngineSet,
    namespaces: Vec<String>,
    probes: Vec<Due1>,
    unprobeable: BTreeMap<Key, String>,
}

/// A probe due, with the engine's objects it judges and their versions when it was planned.
#[derive(Clone)]
struct Due1 {
    probe: Probe,
    generated: Vec<Generated>,
    seen: Vec<Option<String>>,
}

/// The uid and resourceVersion of each of `generated` as cached.
fn versions(ctx: &Context, generated: &[Generated]) -> Vec<Option<String>> {
    (generated.iter())
        .map(|g| {
            let o = ctx.natives.cached(g)?;
            Some(format!(
                "{}/{}",
                o.metadata.uid.as_deref().unwrap_or_default(),
                o.metadata.resource_version.as_deref().unwrap_or_default()
            ))
        })
        .collect()
}

impl Due<'_> {
    fn add(
        &mut self,
        input: &PolicyInput<'_>,
        status: Option<&nimbus_api::NimbusPolicyStatus>,
        claim: policy::Claim,
    ) {
        let ctx = self.ctx;
        let env = ctx.environment(input.rules);
        let reported = policy::reported(status);
        let plan = policy::plan(input, &env, self.engines.clone(), claim, reported);
        if !plan.executes() {
            return;
        }
        let target = Target {
            uid: &input.owner.uid,
            namespace: input.namespace.as_deref(),
            namespaces: input.namespaces.as_ref(),
            selector: &input.selector,
            rules: input.rules,
            translation: &plan.translation,
            exceptions: &input.exceptions,
        };
        let planned = probes::plan(&target, &self.namespaces, &ctx.protected_namespaces);
        // Only what the engine has in force (its objects in the cluster, controlled by the
        // policy) is probed: missing objects are reported as such already.
        // An object just (re)written is not judged until its engine has loaded it (see
        // [`probes::SETTLE`]): the drift repair of a deleted object is never taken for a
        // dead engine.
        let now = jiff::Timestamp::now();
        for probe in planned.probes {
            let generated: Vec<Generated> = (plan.translation.objects.iter())
                .filter(|g| {
                    g.engine == probe.key.engine
                        && input.rules.get(g.rule).map(|r| &r.id) == Some(&probe.key.intent)
                })
                .cloned()
                .collect();
            let settled = generated.iter().all(|g| {
                ctx.natives.cached(g).is_some_and(|o| {
                    crate::write::object::is_controlled_by(&*o, &input.owner.uid)
                        && probes::settled(o.metadata.creation_timestamp.as_ref(), o.acts, now)
                })
            });
            if !generated.is_empty() && settled {
                let seen = versions(ctx, &generated);
                self.probes.push(Due1 {
                    probe,
                    generated,
                    seen,
                });
            }
        }
        self.unprobeable.extend(planned.not_probed);
    }
}

/// Sends `probe` as a dry-run create and reads the answer.
async fn send(ctx: &Context, probe: &Probe) -> Observed {
    let at = Some(Time(jiff::Timestamp::now()));
    let response = match serde_json::from_value::<Pod>(probe.pod.clone()) {
        Err(e) => Response::Unsent(format!("probe pod: {e}")),
        Ok(pod) => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &probe.namespace);
            let params = PostParams {
                dry_run: true,
                field_manager: Some(crate::write::FIELD_MANAGER.to_owned()),
            };
            match api.create(&params, &pod).await {
                Ok(_) => Response::Admitted,
                Err(kube::Error::Api(status)) => Response::Refused {
                    code: status.code,
                    reason: status.reason.clone(),
                    message: status.message.clone(),
                },
                Err(e) => Response::Unsent(e.to_string()),
            }
        }
    };
    let outcome = probes::classify(probe.key.engine, &probe.natives, &response);
    Observed { outcome, at }
}

fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::DeniedByEngine => probes::reason::DENIED_BY_ENGINE,
        Outcome::Admitted => probes::reason::NOT_LIVE,
        Outcome::WebhookCallFailed(_) => probes::reason::WEBHOOK_CALL_FAILED,
        Outcome::DeniedElsewhere(_) => probes::reason::DENIED_ELSEWHERE,
        Outcome::Failed(_) => probes::reason::PROBE_FAILED,
    }
}
