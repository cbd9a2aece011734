//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics: every
//! replica keeps its caches warm, only the holder reconciles. Acquire and renew are updates
//! preconditioned on the Lease's resourceVersion, so two candidates can never both succeed.
//! A holder that cannot renew within `renew_deadline` stops leading; a candidate takes over only
//! after seeing the lease unchanged for `lease_duration` (> renew_deadline), so the old holder has
//! stopped writing by then. On shutdown the holder releases the lease for an immediate handover.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct LeaderElection {
    pub namespace: String,
    pub lease_name: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// What a candidate should do about a Lease it has just read.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take or keep the lease (it is free, expired, or ours).
    Claim,
    /// Someone else holds it and was seen renewing within the lease duration.
    Wait,
}

/// The pure rule: claim a lease that is ours, free, or not seen changing for
/// `lease_duration`. `last_change` is when *this* replica last saw the lease record change
/// (local time, so clock skew between replicas does not matter, as in client-go).
pub fn decide(
    spec: Option<&LeaseSpec>,
    identity: &str,
    last_change: Instant,
    lease_duration: Duration,
    now: Instant,
) -> Decision {
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    match holder {
        None => Decision::Claim,
        Some(h) if h == identity => Decision::Claim,
        Some(_) if now.duration_since(last_change) >= lease_duration => Decision::Claim,
        Some(_) => Decision::Wait,
    }
}

/// Runs the election until `shutdown`, publishing whether this replica leads. Leadership is
/// dropped (false) as soon as a renewal deadline passes without success.
pub async fn run(
    client: Client,
    config: LeaderElection,
    leading: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut seen: Option<(String, Instant)> = None; // (resourceVersion, when it changed)
    let mut last_renew: Option<Instant> = None;
    loop {
        let now = Instant::now();
        // Past the renew deadline we lead no more: try again as a candidate.
        if last_renew.is_some_and(|t| now.duration_since(t) >= config.renew_deadline) {
            last_renew = None;
        }
        // A round may not outlive the renew deadline: an API server that stopped answering
        // (a partition, not an error) would otherwise hold the round, and the belief that we
        // lead, past the moment a standby takes the lease.
        let budget = last_renew.map_or(config.renew_deadline, |t| {
            config.renew_deadline.saturating_sub(now.duration_since(t))
        });
        match tokio::time::timeout(budget, try_claim(&api, &config, &mut seen, now)).await {
            Ok(Ok(true)) => last_renew = Some(now),
            Ok(Ok(false)) => last_renew = None,
            Ok(Err(error)) => {
                tracing::warn!(%error, lease = %config.lease_name, "lease update failed")
            }
            Err(_) => tracing::warn!(
                lease = %config.lease_name,
                "lease update unanswered until the renew deadline"
            ),
        }
        let lead = last_renew.is_some_and(|t| t.elapsed() < config.renew_deadline);
        if leading.send_if_modified(|l| std::mem::replace(l, lead) != lead) {
            tracing::info!(identity = %config.identity, leading = lead, "leadership changed");
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(config.retry_period) => {}
        }
    }
    if *leading.borrow() {
        leading.send_replace(false);
        if let Err(error) = release(&api, &config).await {
            tracing::warn!(%error, "releasing the lease failed");
        } else {
            tracing::info!("lease released");
        }
    }
}

/// One round: read the lease, and claim or renew it if allowed. Returns whether we hold it.
async fn try_claim(
    api: &Api<Lease>,
    config: &LeaderElection,
    seen: &mut Option<(String, Instant)>,
    now: Instant,
) -> Result<bool, kube::Error> {
    let Some(lease) = api.get_opt(&config.lease_name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.lease_name.clone()),
                ..Default::default()
            },
            spec: Some(claimed(config, None)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
            Err(e) => Err(e),
        };
    };
    let version = lease.metadata.resource_version.clone().unwrap_or_default();
    let changed_at = match seen {
        Some((v, at)) if *v == version => *at,
        _ => now,
    };
    *seen = Some((version, changed_at));
    if decide(
        lease.spec.as_ref(),
        &config.identity,
        changed_at,
        config.lease_duration,
        now,
    ) == Decision::Wait
    {
        return Ok(false);
    }
    let mut update = lease.clone();
    update.spec = Some(claimed(config, lease.spec.as_ref()));
    // `replace` sends our resourceVersion: a concurrent claim makes one of us fail (409).
    match api
        .replace(&config.lease_name, &PostParams::default(), &update)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}

/// The lease spec with us as holder, renewed now.
fn claimed(config: &LeaderElection, previous: Option<&LeaseSpec>) -> LeaseSpec {
    let now = MicroTime(Timestamp::now());
    let ours =
        previous.and_then(|p| p.holder_identity.as_deref()) == Some(config.identity.as_str());
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.lease_duration.as_secs().max(1) as i32),
        acquire_time: if ours {
            previous.and_then(|p| p.acquire_time.clone())
        } else {
            Some(now.clone())
        },
        renew_time: Some(now),
        lease_transitions: Some(if ours { transitions } else { transitions + 1 }),
        ..Default::default()
    }
}

/// Gives the lease up so a standby can take it at its next retry.
async fn release(api: &Api<Lease>, config: &LeaderElection) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&config.lease_name).await? else {
        return Ok(());
    };
    let spec = lease.spec.get_or_insert_default();
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    api.replace(&config.lease_name, &PostParams::default(), &lease)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(who: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(who.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_free_or_own_lease_is_claimed_at_once() {
        let now = Instant::now();
        let d = Duration::from_secs(15);
        assert_eq!(decide(None, "a", now, d, now), Decision::Claim);
        assert_eq!(
            decide(Some(&held_by("")), "a", now, d, now),
            Decision::Claim
        );
        assert_eq!(
            decide(Some(&held_by("a")), "a", now, d, now),
            Decision::Claim
        );
    }

    #[test]
    fn another_holder_is_waited_out_for_the_full_duration_since_its_last_change() {
        let seen = Instant::now();
        let d = Duration::from_secs(15);
        let b = held_by("b");
        assert_eq!(
            decide(Some(&b), "a", seen, d, seen + Duration::from_secs(14)),
            Decision::Wait
        );
        assert_eq!(decide(Some(&b), "a", seen, d, seen + d), Decision::Claim);
    }
}
