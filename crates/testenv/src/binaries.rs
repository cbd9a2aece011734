//! Finding (or building) the control-plane binaries, and Open Cluster Management's.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};

use crate::Error;

/// Overrides binary discovery; must hold every binary the requested control plane runs.
const CONTROL_PLANE_DIR_ENV: &str = "NIMBUS_CONTROL_PLANE_DIR";

const CORE: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];
const FAKE_NODES: [&str; 2] = ["kube-scheduler", "kwok"];

/// The build scripts' answers, remembered so that each runs at most once per process: besides
/// saving time, running a script again only repeats its cache lookup.
static CONTROL_PLANE_BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
static OCM_BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Returns the directory holding the binaries, building them first if needed.
///
/// Blocking: a cold build takes 10-30 minutes, with the script's progress on stderr.
pub(crate) fn locate(fake_nodes: bool) -> Result<PathBuf, Error> {
    let dir = match std::env::var_os(CONTROL_PLANE_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => built_once(&CONTROL_PLANE_BUILT, &CONTROL_PLANE_BUILD)?,
    };
    let mut wanted = CORE.to_vec();
    if fake_nodes {
        wanted.extend(FAKE_NODES);
    }
    holding(dir, wanted).map_err(|(dir, missing)| Error::MissingBinaries { dir, missing })
}

/// The Open Cluster Management controllers [`crate::ocm`] runs.
const OCM: [&str; 2] = [
    "governance-policy-propagator",
    "governance-policy-framework-addon",
];

/// Returns the directory holding OCM's policy propagator and framework addon, with their CRDs
/// in `crds/`, building them first if needed (`hack/build-ocm.sh`, once per process).
///
/// Blocking: a cold build takes about 5 minutes of CPU, with the script's progress on stderr.
pub(crate) fn locate_ocm() -> Result<PathBuf, Error> {
    let dir = built_once(&OCM_BUILT, &OCM_BUILD)?;
    holding(dir, OCM).map_err(|(dir, missing)| Error::MissingOcm { dir, missing })
}

/// `dir`, when it holds each of `names` as an executable; else `dir` and the missing ones.
fn holding(
    dir: PathBuf,
    names: impl IntoIterator<Item = &'static str>,
) -> Result<PathBuf, (PathBuf, String)> {
    let missing: Vec<&str> = (names.into_iter())
        .filter(|name| !is_executable(&dir.join(name)))
        .collect();
    if missing.is_empty() {
        Ok(dir)
    } else {
        Err((dir, missing.join(", ")))
    }
}

/// A build script and the pinned modules it builds from, compiled in so that a binary built
/// from this crate (`nimbus dev`) needs no source tree. Each script keys its cache by this
/// content, so a copy finds what `make` built from the repository, and vice versa.
struct BuildScript {
    /// The script first, then the files it reads, by their paths in the repository.
    inputs: &'static [(&'static str, &'static str)],
    /// What to tell the user when it fails: what it needs, or how to do without it.
    hint: &'static str,
}

const CONTROL_PLANE_BUILD: BuildScript = BuildScript {
    inputs: &CONTROL_PLANE_INPUTS,
    hint: "Building the control plane needs Go >= 1.26 on PATH (https://go.dev/dl) and the Go \
           module proxy; alternatively set NIMBUS_CONTROL_PLANE_DIR to a directory holding \
           etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok",
};

const OCM_BUILD: BuildScript = BuildScript {
    inputs: &OCM_INPUTS,
    hint: "Building Open Cluster Management's controllers needs Go >= 1.25.7 on PATH \
           (https://go.dev/dl) and the Go module proxy (`make ocm` runs the same script)",
};

const OCM_INPUTS: [(&str, &str); 3] = [
    (
        "hack/build-ocm.sh",
        include_str!("../../../hack/build-ocm.sh"),
    ),
    (
        "tools/ocm/go.mod",
        include_str!("../../../tools/ocm/go.mod"),
    ),
    (
        "tools/ocm/go.sum",
        include_str!("../../../tools/ocm/go.sum"),
    ),
];

const CONTROL_PLANE_INPUTS: [(&str, &str); 7] = [
    (
        "hack/build-control-plane.sh",
        include_str!("../../../hack/build-control-plane.sh"),
    ),
    (
        "tools/etcd/go.mod",
        include_str!("../../../tools/etcd/go.mod"),
    ),
    (
        "tools/etcd/go.sum",
        include_str!("../../../tools/etcd/go.sum"),
    ),
    (
        "tools/k8s/go.mod",
        include_str!("../../../tools/k8s/go.mod"),
    ),
    (
        "tools/k8s/go.sum",
        include_str!("../../../tools/k8s/go.sum"),
    ),
    (
        "tools/kwok/go.mod",
        include_str!("../../../tools/kwok/go.mod"),
    ),
    (
        "tools/kwok/go.sum",
        include_str!("../../../tools/kwok/go.sum"),
    ),
];

/// What `script` printed when it last ran in this process (`built`), or runs it now.
fn built_once(built: &Mutex<Option<PathBuf>>, script: &BuildScript) -> Result<PathBuf, Error> {
    let mut built = built.lock().unwrap_or_else(PoisonError::into_inner);
    match &*built {
        Some(dir) => Ok(dir.clone()),
        None => Ok(built.insert(run_build_script(script)?).clone()),
    }
}

/// Runs `script` from a copy of its inputs and returns the directory it prints last.
fn run_build_script(script: &BuildScript) -> Result<PathBuf, Error> {
    let (script_path, _) = script.inputs[0];
    let inputs = tempfile::Builder::new()
        .prefix("nimbus-build-")
        .tempdir()
        .map_err(|e| Error::io("creating", std::env::temp_dir(), e))?;
    for &(path, content) in script.inputs {
        let path = inputs.path().join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
        }
        std::fs::write(&path, content).map_err(|e| Error::io("writing", &path, e))?;
    }
    let copy = inputs.path().join(script_path);
    let failed = |reason: String| Error::BuildScript {
        script: PathBuf::from(script_path),
        reason,
        hint: script.hint,
    };
    tracing::info!(script = %copy.display(), "locating binaries");
    // stderr stays attached so that a cold build shows its progress instead of appearing hung.
    let output = Command::new("bash")
        .arg(&copy)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| failed(format!("could not run it with bash: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!(
            "failed ({}); its error output is above",
            output.status
        )));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().map(str::trim).rfind(|l| !l.is_empty()) {
        Some(last) => Ok(PathBuf::from(last)),
        None => Err(failed("printed no directory".to_owned())),
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The kwok stage configs the build script copies next to the binaries; kwok has no built-in
/// stages and refuses to start without any.
pub(crate) fn kwok_stages(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let stages = dir.join("kwok-stages");
    let entries = std::fs::read_dir(&stages).map_err(|e| Error::io("reading", &stages, e))?;
    let mut files = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect::<Vec<_>>();
    if files.is_empty() {
        return Err(Error::MissingBinaries {
            dir: dir.to_owned(),
            missing: "kwok-stages/*.yaml".to_owned(),
        });
    }
    files.sort();
    Ok(files)
}
