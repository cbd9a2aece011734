//! Any other program a test runs beside the control plane (e.g. operator replicas), with the
//! same lifetime guarantees as the control plane's processes.

use crate::Error;
use crate::process::Processes;
use std::ffi::OsStr;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A child process: stopped when dropped, killed when the test process dies. Its output goes
/// to `<dir>/<name>.log`.
pub struct Child {
    name: &'static str,
    processes: Processes,
}

impl Child {
    pub fn spawn(
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, &OsStr)],
        dir: &Path,
    ) -> Result<Self, Error> {
        let mut processes = Processes::new(dir, false);
        processes.spawn_with_env(name, binary, args, env)?;
        Ok(Self { name, processes })
    }

    pub fn pid(&self) -> u32 {
        self.processes.pids()[0]
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub fn kill(&mut self) {
        self.processes.signal(libc::SIGKILL);
    }

    /// SIGTERM: a graceful shutdown request.
    pub fn terminate(&mut self) {
        self.processes.signal(libc::SIGTERM);
    }

    /// Everything the process wrote so far.
    pub fn output(&self) -> String {
        self.processes
            .log()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    pub fn has_exited(&mut self) -> bool {
        self.processes.exited()
    }
}

/// How often a supervisor looks at its child, and the first wait before a restart.
const SUPERVISE_POLL: Duration = Duration::from_secs(1);
/// The longest wait before a restart, as the kubelet's back-off caps at 5 min (shorter here:
/// a test waits minutes at most).
const SUPERVISE_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A run this long resets the back-off.
const SUPERVISE_STABLE: Duration = Duration::from_secs(60);

/// A [`Child`] started again whenever it exits, as a kubelet restarts a pod's container: for a
/// process that a whole test binary shares (an engine's controller), whose exit would otherwise
/// fail every later test with a refused connection. Each restart is written to stderr
/// (uncaptured: it happens between tests too) with the last lines the process wrote.
pub struct Supervised {
    stop: Arc<AtomicBool>,
    restarts: Arc<AtomicU64>,
    watcher: Option<JoinHandle<()>>,
    // Dropped after the watcher stops: then the child is stopped like any other.
    _child: Arc<Mutex<Child>>,
}

impl Child {
    /// Hands the child to a supervisor thread that restarts it whenever it exits.
    pub fn supervise(self) -> Supervised {
        let stop = Arc::new(AtomicBool::new(false));
        let restarts = Arc::new(AtomicU64::new(0));
        let child = Arc::new(Mutex::new(self));
        let watcher = {
            let (stop, restarts, child) = (stop.clone(), restarts.clone(), child.clone());
            std::thread::spawn(move || {
                let mut backoff = SUPERVISE_POLL;
                let mut started = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(SUPERVISE_POLL);
                    let mut running = child_lock(&child);
                    let Err(Error::Exited { status, log, .. }) = running.processes.check_alive()
                    else {
                        continue;
                    };
                    if started.elapsed() >= SUPERVISE_STABLE {
                        backoff = SUPERVISE_POLL;
                    }
                    let _ = writeln!(
                        std::io::stderr(),
                        "nimbus-testenv: {} exited ({status}); starting it again in {backoff:?}{log}",
                        running.name
                    );
                    drop(running);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(SUPERVISE_BACKOFF_MAX);
                    let mut restarting = child_lock(&child);
                    let name = restarting.name;
                    if let Err(e) = restarting.processes.restart(name) {
                        let _ = writeln!(std::io::stderr(), "nimbus-testenv: {e}");
                    }
                    restarts.fetch_add(1, Ordering::Relaxed);
                    started = Instant::now();
                }
            })
        };
        Supervised {
            stop,
            restarts,
            watcher: Some(watcher),
            _child: child,
        }
    }
}

fn child_lock(child: &Mutex<Child>) -> std::sync::MutexGuard<'_, Child> {
    child.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Supervised {
    /// How many times the child was started again.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}
