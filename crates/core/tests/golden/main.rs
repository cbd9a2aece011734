//! Golden tests of the engine translators: the exact objects generated for every intent, engine
//! and binding kind, and the problems reported. Each expectation is the literal JSON of the
//! objects, so a change in what the operator writes to a cluster shows up here.
//!
//! One module per engine (`kubearmor`, `netpol`, `kyverno`, `virtual_patch`, `k8tls`, `rbac`),
//! `problems` and `catalog` for what spans them; `builders` holds the inputs, runners and
//! comparisons they share. Cases of one shape are table-driven: a failure names its case.
//!
//! The expectations are written from what Nimbus (5GSEC/nimbus @67712a9f) generates, plus the
//! deliberate differences of this implementation:
//!
//! 1. every object also carries the LABEL `app.kubernetes.io/managed-by: nimbus-<engine>`;
//! 2. Kyverno matches ONE entry with the whole workload selector (AND);
//! 3. parameters come from the matching rule, not `rules[0]`;
//! 4. the cluster cocoWorkload policy honours `runtimeClass`;
//! 5. `<np>-mutateexisting` is always generated and targets Deployments by namespace + selector;
//! 6. k8tls: one CronJob per assessTLS rule, address ConfigMap `<cronjob>-addresses`, no
//!    Elasticsearch;
//! 7. excludeNames-only cluster bindings work (no `namespaces` in the match, excluded names in
//!    `exclude.any`);
//! 8. node pod CIDRs come from `Environment.node_pod_cidrs` (sorted), first as in Nimbus;
//! 9. a second rule with the same ID gets `-2` suffixed names;
//! 10. no `status: {}`, no `creationTimestamp: null`;
//! 11. the rbac engine / namespaceSandbox intent (cluster bindings only; bounded roles and
//!     groups);
//! 12. sensitive intents (assessTLS, namespaceSandbox) are enforced only with the binding's
//!     `intent.security.nimbus.com/allow-sensitive` opt-in, which the fixtures' policies carry;
//! 13. k8tls CronJobs run pinned images, restricted, with resource bounds, at most hourly;
//! 14. Kyverno ClusterPolicies exclude every protected namespace, not only kube-system.

// Helpers outside `#[test]` functions panic on broken fixtures too (clippy.toml only covers
// the test functions themselves).
#![allow(clippy::unwrap_used)]

mod audit;
mod builders;
mod catalog;
mod exceptions;
mod exceptions_left_out;
mod k8tls;
mod kubearmor;
mod kyverno;
mod netpol;
mod problems;
mod rbac;
mod virtual_patch;
