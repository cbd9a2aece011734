//! Child processes that cannot outlive the process that started them.
//!
//! Dropping [`Processes`] stops its children (SIGTERM to each process group, a short grace
//! period, then SIGKILL), which also covers panics that unwind. Destructors do not run for
//! statics, on `std::process::exit` or when the test binary is killed, so every child
//! additionally gets `PR_SET_PDEATHSIG(SIGKILL)`.
//!
//! The parent-death signal fires when the *thread* that forked the child exits, not the process.
//! `#[tokio::test]` threads, Tokio's blocking pool and the thread that starts the shared control
//! plane all exit long before the children should, so every child is forked by one dedicated
//! spawner thread that lives until the process ends.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tracing::instrument::WithSubscriber as _;

use crate::Error;

/// How long a readiness check may keep failing. Generous because two shared cores also run the
/// tests (and sometimes a Go build); kube-apiserver alone needs 5-20 s there.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(90);
const READY_POLL: Duration = Duration::from_millis(100);
const STOP_GRACE: Duration = Duration::from_secs(5);
const LOG_TAIL_LINES: usize = 30;

struct Process {
    name: &'static str,
    child: Child,
    /// `None` when the output goes to our stderr.
    log: Option<PathBuf>,
    /// How it was started, to start it again.
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<(String, std::ffi::OsString)>,
}

impl Process {
    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn signal_group(&mut self, signal: libc::c_int) {
        // Only while the child is unreaped: until then its pid, which is also the id of the
        // process group it leads, cannot be reused by an unrelated process.
        if !self.running() {
            return;
        }
        let Ok(pgid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        #[allow(unsafe_code)]
        // SAFETY: kill(2) has no memory-safety preconditions; it only takes integers.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// A set of running children that are stopped together on drop.
pub(crate) struct Processes {
    children: Vec<Process>,
    dir: PathBuf,
    attach_output: bool,
}

impl Processes {
    /// Children run in `dir` (so stray relative-path files land there) and log to
    /// `dir/<name>.log`, or to our stderr if `attach_output`.
    pub(crate) fn new(dir: &Path, attach_output: bool) -> Self {
        Self {
            children: Vec::new(),
            dir: dir.to_owned(),
            attach_output,
        }
    }

    pub(crate) fn spawn(
        &mut self,
        name: &'static str,
        binary: &Path,
        args: &[String],
    ) -> Result<(), Error> {
        self.spawn_with_env(name, binary, args, &[])
    }

    pub(crate) fn spawn_with_env(
        &mut self,
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<(), Error> {
        let env: Vec<(String, std::ffi::OsString)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let (child, log) = self.start(name, binary, args, &env, false)?;
        self.children.push(Process {
            name,
            child,
            log,
            binary: binary.to_owned(),
            args: args.to_vec(),
            env,
        });
        Ok(())
    }

    fn start(
        &self,
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(String, std::ffi::OsString)],
        append_log: bool,
    ) -> Result<(Child, Option<PathBuf>), Error> {
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            // Own process group, so that stopping also reaches anything the child forks.
            .process_group(0);
        let log = if self.attach_output {
            let dup = || {
                io::stderr()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| Error::io("duplicating", "stderr", e))
            };
            cmd.stdout(dup()?).stderr(dup()?);
            None
        } else {
            let path = self.dir.join(format!("{name}.log"));
            let file = File::options()
                .create(true)
                .write(true)
                .append(append_log)
                .truncate(!append_log)
                .open(&path)
                .map_err(|e| Error::io("creating", &path, e))?;
            let file2 = file
                .try_clone()
                .map_err(|e| Error::io("duplicating", &path, e))?;
            cmd.stdout(file).stderr(file2);
            Some(path)
        };
        die_with_parent(&mut cmd);
        let child = spawn_on_spawner_thread(cmd).map_err(|source| Error::Spawn {
            process: name,
            binary: binary.to_owned(),
            source,
        })?;
        tracing::debug!(process = name, pid = child.id(), "started");
        Ok((child, log))
    }

    /// Kills the child `name` (SIGKILL, no chance to clean up) and starts it again with the
    /// same command line, its output appended to the same log.
    pub(crate) fn restart(&mut self, name: &str) -> Result<(), Error> {
        let index = self
            .children
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| Error::UnknownProcess(name.to_owned()))?;
        let p = &mut self.children[index];
        p.signal_group(libc::SIGKILL);
        let _ = p.child.wait();
        let (name, binary, args, env) = (p.name, p.binary.clone(), p.args.clone(), p.env.clone());
        let (child, _) = self.start(name, &binary, &args, &env, true)?;
        self.children[index].child = child;
        Ok(())
    }

    /// Sends `signal` to every child's process group.
    pub(crate) fn signal(&mut self, signal: libc::c_int) {
        for p in &mut self.children {
            p.signal_group(signal);
        }
    }

    /// The log of the first child, if it logs to a file.
    pub(crate) fn log(&self) -> Option<&Path> {
        self.children.first().and_then(|p| p.log.as_deref())
    }

    /// Whether every child has exited.
    pub(crate) fn exited(&mut self) -> bool {
        self.children.iter_mut().all(|p| !p.running())
    }

    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|p| p.child.id()).collect()
    }

    /// Fails with the process's log tail if any child has exited.
    pub(crate) fn check_alive(&mut self) -> Result<(), Error> {
        for p in &mut self.children {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(Error::Exited {
                    process: p.name,
                    status,
                    log: log_tail(p),
                });
            }
        }
        Ok(())
    }

    /// Polls `probe` until it succeeds, failing early if any child exits and after
    /// [`READY_TIMEOUT`] otherwise.
    pub(crate) async fn wait_ready(
        &mut self,
        process: &'static str,
        check: &'static str,
        mut probe: impl AsyncFnMut() -> Result<(), String>,
    ) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            self.check_alive()?;
            // kube-client logs every failed request (refused connections, 5xx while the
            // apiserver starts) at ERROR level; failing is what a probe does until the server is
            // up, so its events are dropped. The outcome is still reported through the result.
            let last_error = match probe().with_subscriber(tracing::Dispatch::none()).await {
                Ok(()) => {
                    tracing::debug!(process, check, elapsed = ?started.elapsed(), "ready");
                    return Ok(());
                }
                Err(e) => e,
            };
            if started.elapsed() >= READY_TIMEOUT {
                let log = self
                    .children
                    .iter()
                    .find(|p| p.name == process)
                    .map(log_tail)
                    .unwrap_or_default();
                return Err(Error::NotReady {
                    process,
                    check,
                    timeout: READY_TIMEOUT,
                    last_error,
                    log,
                });
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        // In reverse start order: clients first, etcd last. Stopped all at once, kube-apiserver
        // keeps retrying the vanished etcd instead of exiting (seconds instead of ~1 s).
        for p in self.children.iter_mut().rev() {
            p.signal_group(libc::SIGTERM);
            let deadline = Instant::now() + STOP_GRACE;
            while p.running() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            if p.running() {
                tracing::debug!(process = p.name, "did not stop after SIGTERM; killing");
                p.signal_group(libc::SIGKILL);
            }
            // Reap, so no zombie is left behind.
            let _ = p.child.wait();
        }
    }
}

fn log_tail(p: &Process) -> String {
    let Some(path) = &p.log else {
        return "\n(its output went to stderr)".to_owned();
    };
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines = text.lines().collect::<Vec<_>>();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            format!(
                "\n--- last {} lines of {} ---\n{}",
                tail.len(),
                path.display(),
                tail.join("\n")
            )
        }
        Err(e) => format!("\n(could not read {}: {e})", path.display()),
    }
}

#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed; prctl(2) and getppid(2) are, and nothing here allocates or locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // If we died between fork and prctl, the signal will never come: give up.
            if u32::try_from(libc::getppid()) != Ok(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

type SpawnJob = (Command, mpsc::Sender<io::Result<Child>>);

/// The spawner thread's job queue. The sender lives in a static and is never dropped, so the
/// thread never leaves its loop and stays alive until the process exits.
static SPAWNER: Mutex<Option<mpsc::Sender<SpawnJob>>> = Mutex::new(None);

fn spawn_on_spawner_thread(cmd: Command) -> io::Result<Child> {
    let jobs = {
        let mut spawner = SPAWNER.lock().unwrap_or_else(PoisonError::into_inner);
        match &*spawner {
            Some(jobs) => jobs.clone(),
            None => {
                let (jobs, queue) = mpsc::channel::<SpawnJob>();
                thread::Builder::new()
                    .name("nimbus-testenv-spawner".to_owned())
                    .spawn(move || {
                        for (mut cmd, reply) in queue {
                            if let Err(mpsc::SendError(Ok(mut orphan))) = reply.send(cmd.spawn()) {
                                let _ = orphan.kill();
                                let _ = orphan.wait();
                            }
                        }
                    })?;
                spawner.insert(jobs).clone()
            }
        }
    };
    let gone = || io::Error::other("the nimbus-testenv spawner thread is gone");
    let (reply, answer) = mpsc::channel();
    jobs.send((cmd, reply)).map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}
