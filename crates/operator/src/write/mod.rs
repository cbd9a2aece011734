//! Every write of the operator: objects (the Nimbus policies bindings generate, and the native
//! objects engines generate, see [`natives`]) and statuses ([`status`]), each made only when
//! what is stored differs from what is wanted ([`drift`] decides which write, [`Written`]
//! remembers the last ones). [`Executed`] keeps a reconcile's first failed write.

pub mod drift;
pub(crate) mod natives;
pub mod object;
pub(crate) mod status;
pub(crate) mod written;

pub use object::{
    FIELD_MANAGER, Seen, describe, is_controlled_by, left_by_predecessor, predates_write,
};
pub use status::{Status, predates_status_write};
pub use written::Written;

use crate::cache::Creations;
use crate::error::Error;
use kube::Resource;
use kube::runtime::controller::Action;
use std::fmt::Debug;
use std::sync::Arc;

/// The first failure of a reconcile's writes, returned once its status is written (so that it
/// is retried). A write that lost a race with another writer (409 Conflict: the object changed
/// since it was read) is not a failure to report: the change that beat it triggers the next
/// reconcile, which starts from what is stored.
#[derive(Default)]
pub struct Executed {
    failure: Option<Error>,
}

impl Executed {
    /// `result` for the status (the failure's message), keeping the first failure; a lost race
    /// ends the reconcile at once.
    pub fn record<T>(&mut self, result: Result<T, Error>) -> Result<Result<T, String>, Error> {
        match result {
            Ok(value) => Ok(Ok(value)),
            Err(error) if error.is_lost_race() => Err(error),
            Err(error) => {
                let message = error.to_string();
                self.failure.get_or_insert(error);
                Ok(Err(message))
            }
        }
    }

    /// `action`, or the first failure.
    pub fn result(self, action: Action) -> Result<Action, Error> {
        self.failure.map_or(Ok(action), Err)
    }
}

/// A policy a binding generates (a NimbusPolicy or a ClusterNimbusPolicy), as the operator
/// writes it.
pub trait Policy:
    Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned + Clone + Debug + Sync
{
}

impl<P> Policy for P where
    P: Resource<DynamicType = ()>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + Debug
        + Sync
{
}

/// What writing one policy a binding generates changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    Created,
    Updated,
    Deleted,
}

/// What writing one policy a binding generates did.
#[derive(Debug)]
pub struct PolicyWrite<P> {
    pub change: Change,
    /// The policy as stored (its uid, resourceVersion and generation from the write's response),
    /// unless deleted.
    pub stored: Option<P>,
}

/// Keeps one policy a binding generates: applies `desired`, or deletes the one the binding owns
/// (`ours`) when nothing is desired. `created`: the policies of that kind this process created
/// and the cache does not show yet. Returns what changed, if anything.
pub async fn write_policy<P>(
    written: &Written,
    api: &kube::Api<P>,
    desired: Option<&P>,
    ours: Option<&P>,
    created: &Creations,
) -> Result<Option<PolicyWrite<P>>, Error>
where
    P: Policy,
{
    Ok(match (desired, ours) {
        (Some(desired), _) => {
            let observed = ours.map(Seen::of);
            let stored =
                object::apply(api, FIELD_MANAGER, desired, observed, written, created).await?;
            stored.map(|stored| PolicyWrite {
                change: if ours.is_some() {
                    Change::Updated
                } else {
                    Change::Created
                },
                stored: Some(stored.onto(desired.clone())),
            })
        }
        (None, Some(stale)) => object::delete(api, stale, || describe(stale))
            .await?
            .then_some(PolicyWrite {
                change: Change::Deleted,
                stored: None,
            }),
        (None, None) => None,
    })
}

/// The cached policy `observed` unless an earlier incarnation of `binding` left it behind, in
/// which case it is deleted (see [`left_by_predecessor`]) and counts as absent.
pub async fn unless_left_behind<B, P>(
    api: &kube::Api<P>,
    binding: &B,
    observed: Option<Arc<P>>,
) -> Result<Option<Arc<P>>, Error>
where
    B: Resource<DynamicType = ()>,
    P: Resource + serde::Serialize + serde::de::DeserializeOwned + Clone + std::fmt::Debug,
{
    let Some(owner) = binding.controller_owner_ref(&()) else {
        return Ok(observed);
    };
    match observed {
        Some(p) if left_by_predecessor(&*p, &owner) => {
            object::delete(api, &*p, || describe(&*p)).await?;
            Ok(None)
        }
        observed => Ok(observed),
    }
}
