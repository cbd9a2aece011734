//! One task at a time per key, across controllers: a policy is translated by its own
//! controller, and by its binding's reconcile right after writing it (see
//! [`crate::controllers::policy::translate_written`]); the two must not write the same
//! native objects at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::OwnedMutexGuard;

/// Async locks by key, each kept only while held or awaited.
#[derive(Default)]
pub struct Serial(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// Holds the lock of one key until dropped.
pub struct Turn<'a> {
    serial: &'a Serial,
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Serial {
    /// Waits until no one else holds `key`, then holds it.
    pub async fn turn(&self, key: String) -> Turn<'_> {
        let lock = self.locks().entry(key.clone()).or_default().clone();
        let guard = lock.lock_owned().await;
        Turn {
            serial: self,
            key,
            guard: Some(guard),
        }
    }

    fn locks(&self) -> MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks().len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut locks = self.serial.locks();
        drop(self.guard.take());
        // No one else holds or awaits it (each of those holds a clone): forget it.
        if locks
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            locks.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_turn_at_a_time_per_key_and_nothing_kept_after() {
        let serial = Arc::new(Serial::default());
        let first = serial.turn("a".into()).await;
        // Another key is free.
        drop(serial.turn("b".into()).await);
        let waiting = tokio::spawn({
            let serial = serial.clone();
            async move {
                let _turn = serial.turn("a".into()).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a second turn of a held key began");
        drop(first);
        waiting.await.expect("the waiting turn");
        assert_eq!(serial.len(), 0);
    }
}
