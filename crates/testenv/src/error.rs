use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Everything that can go wrong while providing a control plane.
///
/// Messages name the process, file or missing tool involved, and start-up failures carry the
/// tail of the failing process's log, so a failed test explains itself without a rerun.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `NIMBUS_CONTROL_PLANE_DIR` or the build script's output directory lacks binaries.
    #[error(
        "control-plane binaries missing in {dir}: {missing}; run hack/build-control-plane.sh \
         (needs Go >= 1.26) or point NIMBUS_CONTROL_PLANE_DIR at a directory holding them"
    )]
    MissingBinaries { dir: PathBuf, missing: String },

    /// The output directory of `hack/build-ocm.sh` lacks a controller.
    #[error(
        "Open Cluster Management's controllers missing in {dir}: {missing}; run hack/build-ocm.sh"
    )]
    MissingOcm { dir: PathBuf, missing: String },

    /// A build script (`hack/build-control-plane.sh`, `hack/build-ocm.sh`) could not be run or
    /// did not produce a directory; `hint` says what it needs.
    #[error("{script}: {reason}. {hint}")]
    BuildScript {
        script: PathBuf,
        reason: String,
        hint: &'static str,
    },

    #[error(
        "fake node {name} not marked Ready by kwok within {waited:?} (kwok stalled or not \
         running?)"
    )]
    FakeNodeNotReady { name: String, waited: Duration },

    #[error("no process named {0} in this control plane")]
    UnknownProcess(String),

    #[error("kube-apiserver not ready after restarting {component}: {last_error}")]
    RestartTimeout {
        component: String,
        last_error: String,
    },

    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    #[error("generating {what}: {source}")]
    Certificate {
        what: &'static str,
        source: rcgen::Error,
    },

    #[error("spawning {process} ({binary}): {source}")]
    Spawn {
        process: &'static str,
        binary: PathBuf,
        source: io::Error,
    },

    /// A child exited while the control plane was starting.
    #[error("{process} exited during start-up ({status}){log}")]
    Exited {
        process: &'static str,
        status: ExitStatus,
        /// Pre-rendered tail of the process's log, or a note that output went to stderr.
        log: String,
    },

    /// A readiness check kept failing until its deadline.
    #[error("{process} not ready after {timeout:?} ({check}); last error: {last_error}{log}")]
    NotReady {
        process: &'static str,
        check: &'static str,
        timeout: Duration,
        last_error: String,
        log: String,
    },

    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },

    #[error("{context}: {source}")]
    Kube {
        context: String,
        source: kube::Error,
    },

    /// A YAML document handed to [`apply_yaml`](crate::apply_yaml) is not a usable object.
    #[error("manifest document #{index}: {reason}")]
    Manifest { index: usize, reason: String },

    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },

    /// A wait that ended with what it saw instead (see [`wait_until`](crate::wait_until)).
    #[error("timed out after {timeout:?} waiting for {what}; last seen: {seen}")]
    StillWaiting {
        what: String,
        timeout: Duration,
        seen: String,
    },
}

impl Error {
    pub(crate) fn io(context: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            context,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn kube(context: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            context: context.into(),
            source,
        }
    }

    /// Free ports are only reserved until we close our probe socket, so another process can grab
    /// one before the child binds it; such failures are worth a retry with fresh ports.
    pub(crate) fn is_port_conflict(&self) -> bool {
        matches!(self, Self::Exited { log, .. } if log.contains("address already in use"))
    }
}
