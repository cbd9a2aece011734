//! A real, local Kubernetes control plane for integration tests, dev mode and benchmarks; and
//! an Open Cluster Management fleet of them ([`ocm`]).
//!
//! [`ControlPlane::start`] runs etcd, kube-apiserver and kube-controller-manager (plus
//! kube-scheduler and kwok with [`Options::fake_nodes`]) as child processes on loopback ports,
//! with freshly generated certificates. Unlike controller-runtime's envtest it includes the
//! controller manager, so garbage collection, namespace deletion, ServiceAccounts, Jobs and
//! Deployments behave as in a real cluster.
//!
//! ```no_run
//! # async fn example() -> Result<(), nimbus_testenv::Error> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::Api;
//!
//! let cluster = nimbus_testenv::shared(); // one per test binary
//! let ns = cluster.test_namespace("my-test").await?; // deleted on drop
//! let client = cluster.client()?; // bound to this test's runtime
//! let config_maps = Api::<ConfigMap>::namespaced(client, ns.name());
//! # Ok(()) }
//! ```
//!
//! # Binaries
//!
//! Taken from the directory in `NIMBUS_CONTROL_PLANE_DIR` if set. Otherwise
//! `hack/build-control-plane.sh` is run (once per process) and prints the directory; it builds
//! the pinned versions with Go (>= 1.26) into `~/.cache/nimbus-rs`, which takes 10-30 minutes
//! the first time and well under a second afterwards. Missing binaries are an error, never a
//! reason to skip a test. [`ocm`] finds Open Cluster Management's controllers the same way,
//! through `hack/build-ocm.sh`.
//!
//! # Process lifetime
//!
//! Dropping a [`ControlPlane`] (also during a panic) stops its processes and removes its
//! directories. Children additionally receive SIGKILL when the process that started them dies
//! in any way, including when a test binary exits without running destructors (the [`shared`]
//! control plane is never dropped) or is killed. Directories left behind that way are removed
//! by the next start.
//!
//! # Logs
//!
//! Each process logs to `<work dir>/<process>.log`; start-up errors include the last lines of
//! the failing process's log. `NIMBUS_TESTENV_LOG=1` sends all output to stderr instead.

// Shape rule (issue #43): no function longer than clippy.toml's `too-many-lines-threshold`.
// Non-test code only: a test reads best as one table or one story, and test builds
// (`cfg(test)`, tests/) do not see this line.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod aggregation;
mod binaries;
mod certs;
mod child;
mod control_plane;
mod error;
mod manifests;
mod net;
pub mod ocm;
mod poll;
mod process;
mod shared;
pub mod upstream;
mod workdir;

pub use aggregation::LocalApiService;
pub use certs::{Ca, ServingCert, certificate_der, serving_cert};
pub use child::{Child, Supervised};
pub use control_plane::{ControlPlane, Options, create_fake_node};
pub use error::Error;
pub use manifests::{apply_yaml, wait_crds_established};
pub use net::{free_port, http_get};
pub use poll::{eventually, wait_until};
pub use shared::{TEST_NAMESPACE_LABEL, TestNamespace, shared};
