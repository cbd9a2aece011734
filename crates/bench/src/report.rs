//! The figures of a run: a table on stdout and JSON for machines.

use crate::requests::{Counts, Key, VerbCounts};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The scenarios, as the results name them.
pub const COLD: &str = "A cold convergence";
pub const STEADY: &str = "B steady state";
pub const CHURN: &str = "C churn";
pub const NARROWING: &str = "D narrowing";
pub const REMOVAL: &str = "E removal";

/// How operator requests are attributed (also written into the JSON).
pub const ATTRIBUTION: &str = "Operator requests = increase of kube-apiserver's \
apiserver_request_total (GET /metrics with the admin client) over the window, minus the \
requests the bench itself sent in that window (the bench counts each of its requests under the \
same verb/group/resource/subresource key), restricted to the resources the operator uses (the \
Nimbus group, every engine's native kinds, namespaces, nodes, CRDs, events). \
apiserver_request_total has no user or user-agent label, so requests cannot be attributed by \
the server itself. Requests on other resources (e.g. kube-apiserver's identity Lease renewals, \
kube-controller-manager watch renewals) are the control plane's and listed apart, as are \
non-resource requests (discovery, /metrics). Bench namespaces are created, and \
kube-controller-manager's per-namespace ServiceAccount and CA ConfigMap awaited, before \
scenario A; and before the operator starts, the bench waits until kube-controller-manager's \
garbage collector watches every Nimbus and native kind (it discovers new CRDs every 30 s and \
until then looks owners up with one GET each). Not separable: the garbage collector's \
remaining owner lookups and watch renewals on the operator's own resources count as the \
operator's. The apiserver counts a WATCH when it ends, so WATCH = watches closed in the \
window.";

#[derive(Debug, Serialize)]
pub struct Results {
    pub config: Config,
    pub attribution: &'static str,
    pub startup: Startup,
    pub expected: Expected,
    pub scenarios: Vec<Scenario>,
    pub latency: crate::latency::Latency,
    pub floor: Floor,
    pub versus: Vec<Versus>,
}

/// What the operator wrote in A, C and D, written directly (see `floor.rs`), on the same
/// control plane after the operator stopped, in namespaces of their own; and L's bindings'
/// native objects, created directly.
#[derive(Debug, Serialize)]
pub struct Floor {
    /// Requests in flight.
    pub concurrency: usize,
    pub runs: Vec<FloorRun>,
    pub latency: crate::latency::Latency,
    /// What a Nimbus-compatible operator must write besides (see `compatible.rs`).
    pub compatible: CompatibleFloor,
}

/// The compatible floor: the same NimbusPolicies, native objects with controller owner
/// references, and the statuses of bindings, policies and intents, written directly by chains
/// that start as each binding is created (A, C), and for single bindings (L).
#[derive(Debug, Serialize)]
pub struct CompatibleFloor {
    /// Requests in flight.
    pub concurrency: usize,
    pub runs: Vec<FloorRun>,
    pub latency: crate::latency::Latency,
}

#[derive(Debug, Serialize)]
pub struct FloorRun {
    pub scenario: &'static str,
    /// Creates, replaces, patches and deletes.
    pub writes: usize,
    /// The same by verb (the compatible floor's: POST, PATCH, DELETE).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub writes_by_verb: BTreeMap<String, u64>,
    pub wall_secs: f64,
    /// CPU time of kube-apiserver and etcd while it wrote.
    pub api_cpu_secs: f64,
    /// GETs on the operator's resources while the compatible floor wrote, which reads nothing:
    /// the garbage collector's lookups of owners it has not seen yet.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub others_gets: Vec<(String, u64)>,
}

/// One figure of the operator beside its floor's.
#[derive(Debug, Serialize)]
pub struct Versus {
    /// Which floor: `natives-only` or `compatible`.
    pub against: &'static str,
    pub figure: String,
    pub operator: f64,
    pub floor: f64,
    pub ratio: f64,
    /// The ratio the operator aims to stay within, where it has one.
    pub goal: Option<f64>,
}

/// Floors' names in [`Versus::against`].
pub const NATIVES_ONLY: &str = "natives-only";
pub const COMPATIBLE: &str = "compatible";

/// The operator's figures beside the floors'. The scenarios' CPU is counted less the idle
/// rate of B over their settling time: the floor's is counted while it writes only.
pub fn versus(
    scenarios: &[Scenario],
    latency: &crate::latency::Latency,
    floor: &Floor,
) -> Vec<Versus> {
    let mut out = Vec::new();
    // The natives-only floor: the goals of the last round (issue #43).
    let goals = |name: &str| (name != NARROWING).then_some([1.15, 1.3, 1.3, 1.3]);
    compare(&mut out, NATIVES_ONLY, scenarios, &floor.runs, goals);
    compare_latency(&mut out, NATIVES_ONLY, latency, &floor.latency, 1.3);
    // The compatible floor: issue #47's acceptance (wall and CPU within 1.10x, the same
    // writes, a new binding within 1.2x).
    let compatible = &floor.compatible;
    compare(&mut out, COMPATIBLE, scenarios, &compatible.runs, |_| {
        Some([1.1, 1.1, 1.0, 1.2])
    });
    compare_latency(&mut out, COMPATIBLE, latency, &compatible.latency, 1.2);
    out
}

/// Rows of each scenario against its run of the floor `against`; `goals` per scenario: wall,
/// CPU, writes (and the new binding's, unused here).
fn compare(
    out: &mut Vec<Versus>,
    against: &'static str,
    scenarios: &[Scenario],
    runs: &[FloorRun],
    goals: impl Fn(&str) -> Option<[f64; 4]>,
) {
    let idle_per_sec = scenarios
        .iter()
        .find(|s| s.name == STEADY)
        .map_or(0.0, |s| s.control_plane_cpu_secs / s.window_secs.max(1e-9));
    let mut add = |figure: String, operator: f64, floor: f64, goal: Option<f64>| {
        out.push(Versus {
            against,
            figure,
            operator,
            floor,
            ratio: operator / floor.max(1e-9),
            goal,
        });
    };
    for run in runs {
        let Some(s) = scenarios.iter().find(|s| s.name == run.scenario) else {
            continue;
        };
        let name = run.scenario;
        // D counts what removing intents costs (DELETEs above all); its floor writes no status.
        let goal = goals(name);
        add(
            format!("{name}: wall time (s)"),
            s.wall_time_secs,
            run.wall_secs,
            goal.map(|g| g[0]),
        );
        let cpu = s.control_plane_cpu_secs - idle_per_sec * (s.window_secs - s.wall_time_secs);
        add(
            format!("{name}: API server + etcd CPU (s)"),
            cpu,
            run.api_cpu_secs,
            goal.map(|g| g[1]),
        );
        add(
            format!("{name}: writes"),
            s.operator_requests.writes as f64,
            run.writes as f64,
            goal.map(|g| g[2]),
        );
    }
}

/// The new binding's p50 and p99 against the floor `against`'s.
fn compare_latency(
    out: &mut Vec<Versus>,
    against: &'static str,
    latency: &crate::latency::Latency,
    direct: &crate::latency::Latency,
    goal: f64,
) {
    for (figure, operator, floor) in [
        ("L new binding p50 (ms)", latency.p50_ms, direct.p50_ms),
        ("L new binding p99 (ms)", latency.p99_ms, direct.p99_ms),
    ] {
        out.push(Versus {
            against,
            figure: figure.into(),
            operator,
            floor,
            ratio: operator / floor.max(1e-9),
            goal: Some(goal),
        });
    }
}

#[derive(Debug, Serialize)]
pub struct Config {
    pub namespaces: usize,
    pub security_intent_bindings: usize,
    pub cluster_binding_intents: Vec<&'static str>,
    pub security_intents: usize,
    pub cluster_security_intent_bindings: usize,
    pub steady_state_secs: f64,
    pub settle_secs: f64,
    pub operator_resync: Option<String>,
    pub operator_reconcile_concurrency: Option<u16>,
    pub operator_binary: String,
    pub bench_release_build: bool,
    pub cpus: usize,
    pub unix_time: u64,
}

#[derive(Debug, Serialize)]
pub struct Startup {
    /// From spawning `nimbus run` until `/readyz` answered 200.
    pub ready_secs: f64,
    pub cpu_secs: f64,
    pub rss_mib: f64,
}

#[derive(Debug, Serialize)]
pub struct Expected {
    /// NimbusPolicies + ClusterNimbusPolicies.
    pub policies: usize,
    /// Sum of their `status.numberOfAdapterPolicies`.
    pub native_policies: u64,
    /// `numberOfAdapterPolicies` of one policy of each shape.
    pub adapter_policies_per_policy: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Serialize)]
pub struct Scenario {
    pub name: &'static str,
    pub description: String,
    /// Convergence time (A, C: first write until a watch shows every policy done) or the
    /// length of the quiet period (B).
    pub wall_time_secs: f64,
    /// Requests, CPU and memory are measured over this window (A, C: until `settle` after
    /// convergence, so trailing work is included).
    pub window_secs: f64,
    /// Policies done / expected at the end (`None` for B, which waits for nothing).
    pub policies_done: Option<(usize, usize)>,
    pub operator_requests: VerbCounts,
    /// Operator requests by `VERB resource.group/subresource`, most first.
    pub operator_requests_by_kind: Vec<(String, u64)>,
    /// Requests on the operator's resources answered outside 2xx, by `VERB code
    /// resource.group/subresource` (a status write to an object already deleted: `APPLY 404`).
    pub failed_requests_by_kind: Vec<(String, u64)>,
    /// The bench's own requests in the window (subtracted).
    pub bench_requests: u64,
    /// Resource requests on resources the operator does not use (kube-apiserver's and
    /// kube-controller-manager's own work), not attributed to the operator.
    pub background_requests: u64,
    pub background_requests_by_kind: Vec<(String, u64)>,
    /// Non-resource requests in the window, from anyone (not attributed).
    pub non_resource_requests: u64,
    /// Requests the bench counted that the apiserver did not (should be empty).
    pub attribution_mismatch: Vec<(String, u64)>,
    pub operator_cpu_secs: f64,
    /// CPU time of kube-apiserver and etcd over the window.
    pub control_plane_cpu_secs: f64,
    pub operator_peak_rss_mib: f64,
    /// Whether the peak is over this scenario alone or since the operator started.
    pub operator_peak_rss_scope: &'static str,
    pub operator_rss_mib: f64,
}

/// A window's requests, attributed.
pub struct Attributed {
    pub operator: VerbCounts,
    pub operator_by_kind: Vec<(String, u64)>,
    pub bench: u64,
    pub background: u64,
    pub background_by_kind: Vec<(String, u64)>,
    pub non_resource: u64,
    pub mismatch: Vec<(String, u64)>,
}

impl Attributed {
    /// Splits the apiserver's counts of a window into the bench's own requests, the operator's
    /// (resource requests on `operator_resource`s), the control plane's background (other
    /// resources) and non-resource requests.
    pub fn of(apiserver: &Counts, own: &Counts, operator_resource: impl Fn(&Key) -> bool) -> Self {
        let resource = |c: &Counts| c.filter(|k| k.is_resource());
        let (others, mismatch) = resource(apiserver).minus(&resource(own));
        let operator = others.filter(&operator_resource);
        let background = others.filter(|k| !operator_resource(k));
        Self {
            operator: VerbCounts::of(&operator),
            operator_by_kind: operator.breakdown(),
            bench: own.total(),
            background: background.total(),
            background_by_kind: background.breakdown(),
            non_resource: apiserver.filter(|k| !k.is_resource()).total(),
            mismatch: mismatch.breakdown(),
        }
    }
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The human-readable table.
pub fn table(results: &Results) -> String {
    let mut out = String::new();
    write_setup(&mut out, results);
    write_grid(
        &mut out,
        &results.scenarios,
        &scenario_rows(&results.scenarios),
    );
    write_details(&mut out, &results.scenarios);
    write_versus(&mut out, results);
    let _ = writeln!(out, "\nAttribution: {ATTRIBUTION}");
    out
}

/// What was measured, and the operator's start-up.
fn write_setup(out: &mut String, results: &Results) {
    let c = &results.config;
    let e = &results.expected;
    let _ = writeln!(
        out,
        "\nNimbus operator benchmark: {} namespaces, {} SecurityIntentBindings (4 intents \
         each), {} SecurityIntents, {} ClusterSecurityIntentBinding ({}; all namespaces)",
        c.namespaces,
        c.security_intent_bindings,
        c.security_intents,
        c.cluster_security_intent_bindings,
        c.cluster_binding_intents.join(", "),
    );
    let shapes: Vec<String> = e
        .adapter_policies_per_policy
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let _ = writeln!(
        out,
        "Expected: {} policies (NimbusPolicy + ClusterNimbusPolicy) reporting {} native policies \
         ({})",
        e.policies,
        e.native_policies,
        shapes.join(", ")
    );
    let _ = writeln!(
        out,
        "Operator: {} (release), ready after {:.2} s, {:.2} s CPU, {:.1} MiB RSS at ready; {} CPUs",
        c.operator_binary,
        results.startup.ready_secs,
        results.startup.cpu_secs,
        results.startup.rss_mib,
        c.cpus
    );
    let _ = writeln!(out);
}

/// The scenarios' figures, one row per figure and one cell per scenario.
fn scenario_rows(scenarios: &[Scenario]) -> Vec<(String, Vec<String>)> {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&Scenario) -> String| {
        rows.push((label.to_owned(), scenarios.iter().map(f).collect()));
    };
    row("wall time (s)", &|x| format!("{:.2}", x.wall_time_secs));
    row("counting window (s)", &|x| format!("{:.2}", x.window_secs));
    row("policies done", &|x| match x.policies_done {
        Some((done, expected)) => format!("{done}/{expected}"),
        None => "-".to_owned(),
    });
    row("operator reads: GET", &|x| {
        x.operator_requests.get.to_string()
    });
    row("                LIST", &|x| {
        x.operator_requests.list.to_string()
    });
    row("                WATCH", &|x| {
        x.operator_requests.watch.to_string()
    });
    row("                = reads", &|x| {
        x.operator_requests.reads.to_string()
    });
    row("operator writes: POST", &|x| {
        x.operator_requests.post.to_string()
    });
    row("                 PUT", &|x| {
        x.operator_requests.put.to_string()
    });
    row("                 PATCH", &|x| {
        x.operator_requests.patch.to_string()
    });
    row("                 APPLY", &|x| {
        x.operator_requests.apply.to_string()
    });
    row("                 DELETE", &|x| {
        x.operator_requests.delete.to_string()
    });
    row("                 = writes", &|x| {
        x.operator_requests.writes.to_string()
    });
    row("operator requests total", &|x| {
        x.operator_requests.total.to_string()
    });
    row("bench's own requests (subtracted)", &|x| {
        x.bench_requests.to_string()
    });
    row("other resources (control plane)", &|x| {
        x.background_requests.to_string()
    });
    row("non-resource requests (not attributed)", &|x| {
        x.non_resource_requests.to_string()
    });
    row("operator CPU time (s)", &|x| {
        format!("{:.2}", x.operator_cpu_secs)
    });
    row("API server + etcd CPU time (s)", &|x| {
        format!("{:.2}", x.control_plane_cpu_secs)
    });
    row("operator peak RSS (MiB)", &|x| {
        format!("{:.1}", x.operator_peak_rss_mib)
    });
    row("operator RSS at end (MiB)", &|x| {
        format!("{:.1}", x.operator_rss_mib)
    });
    rows
}

/// `rows` as a grid under the scenarios' names.
fn write_grid(out: &mut String, scenarios: &[Scenario], rows: &[(String, Vec<String>)]) {
    let label_width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let headers: Vec<String> = scenarios.iter().map(|x| x.name.to_owned()).collect();
    let widths: Vec<usize> = (0..scenarios.len())
        .map(|i| {
            rows.iter()
                .map(|(_, cells)| cells[i].len())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let _ = write!(out, "{:label_width$}", "");
    for (h, w) in headers.iter().zip(&widths) {
        let _ = write!(out, "  {h:>w$}");
    }
    let _ = writeln!(out);
    let total_width = label_width + widths.iter().map(|w| w + 2).sum::<usize>();
    let _ = writeln!(out, "{}", "-".repeat(total_width));
    for (label, cells) in rows {
        let _ = write!(out, "{label:label_width$}");
        for (cell, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "  {cell:>w$}");
        }
        let _ = writeln!(out);
    }
}

/// Each scenario's description and its requests by kind.
fn write_details(out: &mut String, scenarios: &[Scenario]) {
    for x in scenarios {
        let _ = writeln!(out, "\n{}: {}", x.name, x.description);
        if x.operator_requests_by_kind.is_empty() {
            let _ = writeln!(out, "  no operator requests");
        }
        for (kind, n) in x.operator_requests_by_kind.iter().take(12) {
            let _ = writeln!(out, "  {n:>7}  {kind}");
        }
        let more = x.operator_requests_by_kind.len().saturating_sub(12);
        if more > 0 {
            let _ = writeln!(out, "  ... {more} more kinds (see the JSON)");
        }
        for (kind, n) in &x.failed_requests_by_kind {
            let _ = writeln!(out, "  {n:>7}  {kind}  (failed)");
        }
        for (kind, n) in &x.background_requests_by_kind {
            let _ = writeln!(out, "  {n:>7}  {kind}  (control plane, not counted)");
        }
        if x.operator_peak_rss_scope != "scenario" {
            let _ = writeln!(out, "  peak RSS is since operator start");
        }
        for (kind, n) in &x.attribution_mismatch {
            let _ = writeln!(
                out,
                "  warning: the bench counted {n} more `{kind}` than the apiserver did"
            );
        }
    }
}

/// L's latency, and the operator beside the floor.
fn write_versus(out: &mut String, results: &Results) {
    let l = &results.latency;
    let _ = writeln!(
        out,
        "\nL single binding (dnsManipulation) → its NetworkPolicy and KubeArmorPolicy exist, one \
         binding at a time on the quiet cluster: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} \
         bindings",
        l.p50_ms, l.p99_ms, l.max_ms, l.samples
    );
    let f = &results.floor;
    let _ = writeln!(
        out,
        "\nNatives-only floor: what the operator wrote in A, C and D without owner references \
         or statuses, written directly ({} in flight: creates, replaces at the version the last \
         write produced, deletes), and L's native objects created directly ({:.1} / {:.1} ms p50 \
         / p99). The operator's CPU less the idle rate of B over its settling time.",
        f.concurrency, f.latency.p50_ms, f.latency.p99_ms
    );
    write_ratios(out, &results.versus, NATIVES_ONLY);
    let c = &f.compatible;
    let _ = writeln!(
        out,
        "\nCompatible floor: what a Nimbus-compatible operator must write in A and C, written \
         directly ({} in flight), each binding's chain starting as its create returns: its \
         NimbusPolicy (POST), its native objects owned by it (POST), the policy's and the \
         binding's statuses and the intents' (merge patch); in C the policies' specs and the \
         native objects that change (merge patch). L: binding, policy, native objects ({:.1} / \
         {:.1} ms p50 / p99), statuses after.",
        c.concurrency, c.latency.p50_ms, c.latency.p99_ms
    );
    for run in &c.runs {
        let operator = results.scenarios.iter().find(|s| s.name == run.scenario);
        let verbs = |by_verb: Vec<(String, u64)>| {
            let cells: Vec<String> = by_verb.iter().map(|(v, n)| format!("{v} {n}")).collect();
            cells.join(", ")
        };
        let theirs = verbs(run.writes_by_verb.clone().into_iter().collect());
        let ours = operator.map(|s| {
            let r = &s.operator_requests;
            let all = [
                ("POST", r.post),
                ("PUT", r.put),
                ("PATCH", r.patch),
                ("APPLY", r.apply),
                ("DELETE", r.delete),
            ];
            verbs(
                all.iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(v, n)| ((*v).to_owned(), *n))
                    .collect(),
            )
        });
        let _ = writeln!(
            out,
            "  {} writes by verb: operator {}; compatible floor {}",
            run.scenario,
            ours.unwrap_or_default(),
            theirs
        );
        let gets: u64 = run.others_gets.iter().map(|(_, n)| n).sum();
        let kinds: Vec<String> = (run.others_gets.iter())
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        let _ = writeln!(
            out,
            "  {} GETs by others while the compatible floor wrote (it reads nothing): {gets}{}",
            run.scenario,
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        );
    }
    write_ratios(out, &results.versus, COMPATIBLE);
}

/// The rows of `versus` against the floor `against`.
fn write_ratios(out: &mut String, versus: &[Versus], against: &str) {
    let rows: Vec<&Versus> = versus.iter().filter(|v| v.against == against).collect();
    let width = rows.iter().map(|v| v.figure.len()).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "{:width$}  {:>10}  {:>10}  {:>6}  {:>5}",
        "", "operator", "floor", "ratio", "goal"
    );
    for v in rows {
        let goal = match v.goal {
            Some(goal) if v.ratio <= goal => format!("{goal:.2}x"),
            Some(goal) => format!("{goal:.2}x  over"),
            None => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:width$}  {:>10.2}  {:>10.2}  {:>5.2}x  {goal:>5}",
            v.figure, v.operator, v.floor, v.ratio
        );
    }
}
