//! Work directories that are cleaned up even when their owner never runs destructors.
//!
//! The shared control plane lives in a `static` and is never dropped, and test binaries get
//! killed; their directories would pile up, which matters for etcd's data under `/dev/shm`
//! (tmpfs is RAM, and etcd preallocates 64 MB WAL files). Each directory therefore holds a lock
//! file that its owner keeps locked for as long as it lives. The kernel drops the lock when the
//! owning process dies however it dies, so any later start can tell abandoned directories apart
//! from live ones and remove them.

use std::fs::{self, File, Permissions, TryLockError};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use tempfile::TempDir;

use crate::Error;

const PREFIX: &str = "nimbus-testenv-";
const LOCK_FILE: &str = ".owner.lock";

/// A directory's owner creates the lock file and then locks it; a lock file younger than this
/// may be in between the two steps and is left alone.
const LOCK_GRACE: Duration = Duration::from_secs(10);

/// A fresh `nimbus-testenv-*` directory, removed on drop and by [`sweep`] once its owner is gone.
pub(crate) struct LockedDir {
    dir: TempDir,
    // Held only for its lock; the descriptor is close-on-exec, so children never inherit it.
    _lock: File,
}

impl LockedDir {
    pub(crate) fn create_in(parent: &Path) -> Result<Self, Error> {
        sweep(parent);
        // Owner-only: it holds the cluster's admin key.
        let dir = tempfile::Builder::new()
            .prefix(PREFIX)
            .permissions(Permissions::from_mode(0o700))
            .tempdir_in(parent)
            .map_err(|e| Error::io("creating a directory in", parent, e))?;
        let lock_path = dir.path().join(LOCK_FILE);
        let lock = File::create(&lock_path).map_err(|e| Error::io("creating", &lock_path, e))?;
        lock.try_lock().map_err(|e| {
            let source = match e {
                TryLockError::Error(e) => e,
                TryLockError::WouldBlock => std::io::ErrorKind::WouldBlock.into(),
            };
            Error::io("locking", &lock_path, source)
        })?;
        Ok(Self { dir, _lock: lock })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Best effort: removes `parent/nimbus-testenv-*` directories whose owner process has died.
fn sweep(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let dir = entry.path();
        // Directories without our lock file belong to someone else (or to an older layout).
        let Ok(lock) = File::open(dir.join(LOCK_FILE)) else {
            continue;
        };
        let settled = lock
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > LOCK_GRACE));
        if settled && lock.try_lock().is_ok() {
            tracing::debug!(dir = %dir.display(), "removing abandoned nimbus-testenv directory");
            if let Err(error) = fs::remove_dir_all(&dir) {
                tracing::debug!(dir = %dir.display(), %error, "could not remove");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn age_lock_file(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let old = SystemTime::now() - 2 * LOCK_GRACE;
        File::options()
            .write(true)
            .open(dir.join(LOCK_FILE))?
            .set_modified(old)?;
        Ok(())
    }

    #[test]
    fn sweep_removes_only_abandoned_directories() -> Result<(), Box<dyn std::error::Error>> {
        let parent = tempfile::tempdir()?;
        let abandoned = parent.path().join(format!("{PREFIX}abandoned"));
        fs::create_dir(&abandoned)?;
        File::create(abandoned.join(LOCK_FILE))?;
        age_lock_file(&abandoned)?;
        let just_created = parent.path().join(format!("{PREFIX}just-created"));
        fs::create_dir(&just_created)?;
        File::create(just_created.join(LOCK_FILE))?;
        let foreign = parent.path().join(format!("{PREFIX}without-lock-file"));
        fs::create_dir(&foreign)?;
        let live = LockedDir::create_in(parent.path())?;
        age_lock_file(live.path())?;

        let newer = LockedDir::create_in(parent.path())?;

        assert!(!abandoned.exists());
        assert!(just_created.exists());
        assert!(foreign.exists());
        assert!(live.path().exists());
        assert!(newer.path().exists());
        Ok(())
    }
}
