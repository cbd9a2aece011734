//! What the leader's enforcement probes found ([`crate::probes`] sends them): shared by the
//! prober, which records each period, and its readers: the policy controllers (statuses), the
//! posture, the metrics.

use futures::StreamExt;
use futures::stream::BoxStream;
use nimbus_core::engines::Engine;
use nimbus_core::probes::{self, Key, Observed, Probed};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;

#[derive(Default)]
struct State {
    observed: BTreeMap<Key, Observed>,
    /// Those that cannot be probed, and why.
    unprobeable: BTreeMap<Key, String>,
}

/// What the probes found, shared by the prober, the controllers and the posture.
#[derive(Clone)]
pub struct Probes {
    state: Arc<Mutex<State>>,
    /// Bumped when a liveness changes: statuses follow.
    changed: Arc<watch::Sender<u64>>,
    /// Bumped with every period's answers: the posture shows when each was probed.
    answered: Arc<watch::Sender<u64>>,
}

impl Default for Probes {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
            answered: Arc::new(watch::channel(0).0),
        }
    }
}

impl Probes {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What is known of `engine` enforcing `intent` for the policy `uid`.
    pub fn probed(&self, uid: &str, intent: &str, engine: Engine) -> Probed {
        let key = Key {
            policy_uid: uid.to_owned(),
            intent: intent.to_owned(),
            engine,
        };
        let state = self.state();
        if let Some(why) = state.unprobeable.get(&key) {
            return Probed::NoProbe(why.clone());
        }
        match state.observed.get(&key) {
            Some(observed) => Probed::Answered(observed.clone()),
            None => Probed::Due,
        }
    }

    /// Whether the last probe of it was admitted.
    pub fn not_live(&self, uid: &str, intent: &str, engine: Engine) -> bool {
        matches!(self.probed(uid, intent, engine), Probed::Answered(o) if probes::not_live(Some(&o)))
    }

    /// Fires whenever what a probe says of liveness changes.
    pub fn changes(&self) -> BoxStream<'static, ()> {
        WatchStream::from_changes(self.changed.subscribe())
            .map(|_| ())
            .boxed()
    }

    /// Fires with every period's answers (once a period while probes are sent).
    pub fn answers(&self) -> BoxStream<'static, ()> {
        WatchStream::from_changes(self.answered.subscribe())
            .map(|_| ())
            .boxed()
    }

    /// Records a period: what was answered (`answered`), what cannot be probed, and forgets
    /// what is no longer planned (`planned`). Signals when a liveness changed.
    pub(crate) fn record(
        &self,
        planned: &[Key],
        answered: Vec<(Key, Observed)>,
        unprobeable: BTreeMap<Key, String>,
    ) {
        let answers = !answered.is_empty();
        let mut state = self.state();
        let live = |o: Option<&Observed>| o.map(|o| std::mem::discriminant(&o.outcome));
        let before: BTreeMap<Key, _> = (state.observed.iter())
            .map(|(k, o)| (k.clone(), live(Some(o))))
            .collect();
        state.observed.retain(|k, _| planned.contains(k));
        for (key, observed) in answered {
            state.observed.insert(key, observed);
        }
        let moved = state.unprobeable != unprobeable
            || state.observed.len() != before.len()
            || (state.observed.iter())
                .any(|(k, o)| before.get(k).copied().flatten() != live(Some(o)));
        state.unprobeable = unprobeable;
        drop(state);
        if moved {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
        if answers {
            self.answered.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// How many recorded (policy, intent) pairs each engine does not enforce live.
    pub(crate) fn not_live_counts(&self) -> BTreeMap<Engine, i64> {
        let mut counts = BTreeMap::new();
        for (key, observed) in &self.state().observed {
            if probes::not_live(Some(observed)) {
                *counts.entry(key.engine).or_default() += 1;
            }
        }
        counts
    }
}
