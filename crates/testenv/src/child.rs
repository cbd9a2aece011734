//! Any other program a test runs beside the control plane (e.g. operator replicas), with the
//! same lifetime guarantees as the control plane's processes.

use crate::Error;
use crate::process::Processes;
use std::ffi::OsStr;
use std::path::Path;

/// A child process: stopped when dropped, killed when the test process dies. Its output goes
/// to `<dir>/<name>.log`.
pub struct Child {
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
        Ok(Self { processes })
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
