//! Security: what the operator's objects let people do, on the real control plane. The operator
//! runs as the Helm chart installs it (authenticated only as the chart's ServiceAccount, under
//! the chart's default RBAC, in the release namespace), and people are played by impersonation
//! (the admin kubeconfig is `system:masters`, which may impersonate anyone).
//!
//! A binary of its own: one operator runs for every test here, and a cluster binding over `*`
//! reaches every namespace, so the tests tell their objects apart by unique group and user
//! names rather than by namespace.

mod common;

use common::{CONVERGE, RELEASE_NAMESPACE, apply, delete, get, object_kind, rendered, unique};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use nimbus_api::{
    ALLOW_SENSITIVE_ANNOTATION, ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy,
    SecurityIntent, SecurityIntentBinding, condition,
};
use nimbus_testenv::eventually;
use serde_json::{Value, json};
use std::sync::OnceLock;

/// The k8tls namespace of the chart's default values.
const K8TLS_NAMESPACE: &str = "nimbus-k8tls-env";

/// What the tests need to know about the running operator.
struct Operator {
    /// The admin (system:masters) configuration, for impersonating clients.
    admin: kube::Config,
    /// `system:serviceaccount:<ns>:<name>` of the operator.
    user: String,
    /// The operator's own ClusterRole (the chart's).
    cluster_role: String,
}

/// Installs what `helm install` would (CRDs, ServiceAccount, RBAC, k8tls environment; not the
/// Deployment) and starts the operator once, in-process, authenticated only by a token of the
/// chart's ServiceAccount and configured from the rendered Deployment's flags. The chart is
/// rendered with `exceptionApproval=required`, the stricter choice, which the exception tests
/// here exercise.
fn operator() -> &'static Operator {
    static OPERATOR: OnceLock<Operator> = OnceLock::new();
    OPERATOR.get_or_init(|| {
        let cp = nimbus_testenv::shared();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("operator runtime");
            runtime.block_on(async move {
                let admin = cp.client().expect("client");
                let objects =
                    common::install_chart_without_workload(&admin, &["exceptionApproval=required"])
                        .await;
                let deployment = rendered(&objects, "Deployment", common::RELEASE);
                let (client, service_account) =
                    common::service_account_client(cp, deployment).await;
                let config = common::operator_config_from(deployment, "nimbus-security-test");
                let cluster_role = objects
                    .iter()
                    .find(|o| object_kind(o) == "ClusterRoleBinding")
                    .map(|b| b["roleRef"]["name"].as_str().expect("roleRef").to_owned())
                    .expect("the chart's ClusterRoleBinding");
                ready_tx
                    .send(Operator {
                        admin: cp.config().clone(),
                        user: format!(
                            "system:serviceaccount:{RELEASE_NAMESPACE}:{service_account}"
                        ),
                        cluster_role,
                    })
                    .expect("handing over");
                if let Err(e) = nimbus_operator::run(client, config, Default::default()).await {
                    panic!("operator failed: {e}");
                }
            });
        });
        ready_rx
            .recv_timeout(CONVERGE * 4)
            .expect("installing the chart's objects and starting the operator")
    })
}

fn admin() -> Client {
    Client::try_from(operator().admin.clone()).expect("admin client")
}

/// A client acting as `user` in `groups` (Kubernetes adds `system:authenticated`).
fn impersonating(user: &str, groups: &[&str]) -> Client {
    let mut config = operator().admin.clone();
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
    Client::try_from(config).expect("impersonating client")
}

/// `group/resource[/subresource]` as `ResourceAttributes`.
fn attributes(verb: &str, resource: &str, namespace: Option<&str>) -> ResourceAttributes {
    let (group, rest) = match resource.split_once(':') {
        Some((g, r)) => (g, r),
        None => ("", resource),
    };
    let (resource, subresource) = match rest.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (rest, None),
    };
    ResourceAttributes {
        verb: Some(verb.to_owned()),
        group: Some(group.to_owned()),
        resource: Some(resource.to_owned()),
        subresource,
        namespace: namespace.map(str::to_owned),
        ..ResourceAttributes::default()
    }
}

/// Whether the client's own user may `verb` `resource` (`group:resource/subresource`) in
/// `namespace` (SelfSubjectAccessReview, answered by the apiserver's authorizer).
async fn can_i(client: &Client, verb: &str, resource: &str, namespace: Option<&str>) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(attributes(verb, resource, namespace)),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview")
        .status
        .expect("a review status")
        .allowed
}

/// Whether `user` may `verb` `resource` (as in [`can_i`]) or, with `name`, that one object
/// (SubjectAccessReview, asked by the admin).
async fn may(
    user: &str,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let mut attributes = attributes(verb, resource, namespace);
    attributes.name = name.map(str::to_owned);
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(attributes),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    Api::<SubjectAccessReview>::all(admin())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview")
        .status
        .expect("a review status")
        .allowed
}

/// A namespace of the test's own, removed when the test ends.
async fn namespace(prefix: &str) -> nimbus_testenv::TestNamespace {
    operator();
    nimbus_testenv::shared()
        .test_namespace(prefix)
        .await
        .expect("namespace")
}

/// Every RoleBinding (in `namespace`, or anywhere) with a subject named `subject`.
async fn role_bindings_for(namespace: Option<&str>, subject: &str) -> Vec<RoleBinding> {
    let api: Api<RoleBinding> = match namespace {
        Some(ns) => Api::namespaced(admin(), ns),
        None => Api::all(admin()),
    };
    api.list(&ListParams::default())
        .await
        .expect("listing RoleBindings")
        .items
        .into_iter()
        .filter(|rb| {
            rb.subjects
                .iter()
                .flatten()
                .any(|s| s.name == subject || s.name.starts_with(&format!("{subject}-")))
        })
        .collect()
}

/// The `Ready` condition of an object's status, as JSON (`Null` without one).
fn ready_condition<K: serde::Serialize>(obj: &K) -> Value {
    let value = serde_json::to_value(obj).expect("json");
    value["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or(Value::Null)
}

/// Waits until `name` reports `Ready=False` with `reason`, and returns the condition.
async fn not_ready_because<K>(api: &Api<K>, name: &str, reason: &str) -> Value
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + serde::Serialize,
{
    let last = std::sync::Mutex::new(Value::Null);
    let what = format!("{name}: Ready=False, reason {reason} (conditions seen are printed)");
    eventually(&what, CONVERGE, async |_| {
        let ready = ready_condition(&get(api, name).await?);
        let mut last = last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *last != ready {
            eprintln!("{name}: {ready}");
            last.clone_from(&ready);
        }
        (ready["status"] == "False" && ready["reason"] == reason).then_some(ready)
    })
    .await
}

fn sandbox_intent(name: &str, group: &str, cluster_role: &str) -> Value {
    let mut intent = common::intent(name, "namespaceSandbox", "Block");
    intent["spec"]["intent"]["params"] = json!({"group": [group], "clusterRole": [cluster_role]});
    intent
}

fn cluster_binding(name: &str, intents: &[&str], names: &[&str], allow: Option<&str>) -> Value {
    let mut binding = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": name},
        "spec": {
            "intents": intents.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
            "selector": {"nsSelector": {"matchNames": names}}
        }
    });
    if let Some(allow) = allow {
        binding["metadata"]["annotations"] = json!({ALLOW_SENSITIVE_ANNOTATION: allow});
    }
    binding
}

/// The RoleBinding a sandbox of cluster binding `csib` keeps in each namespace.
fn sandbox_role_binding(csib: &str, role: &str) -> String {
    format!("nimbus-ctlr-gen-{csib}-namespacesandbox-role-{role}")
}

/// A ClusterRoleBinding `name` of `role` to the user `user`.
fn cluster_role_binding(name: &str, role: &str, user: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    })
}

/// 1. A sandbox over every namespace grants its group in ordinary namespaces, never in the
///    operator's, the k8tls or kube-system namespace: the group cannot mint tokens for the
///    operator's ServiceAccount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_over_every_namespace_stays_out_of_protected_namespaces() {
    let (a, b) = (namespace("sec-team").await, namespace("sec-team").await);
    let intents: Api<SecurityIntent> = Api::all(admin());
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin());
    let si = unique("sandbox-all");
    apply(
        &intents,
        &si,
        &sandbox_intent(&si, "team-{namespace}", "edit"),
    )
    .await;
    let csib = unique("sandbox-all");
    apply(
        &csibs,
        &csib,
        &cluster_binding(&csib, &[&si], &["*"], Some("namespaceSandbox")),
    )
    .await;

    let rb_name = sandbox_role_binding(&csib, "edit");
    for ns in [a.name(), b.name()] {
        let rbs: Api<RoleBinding> = Api::namespaced(admin(), ns);
        let rb = eventually(
            &format!("the sandbox RoleBinding in {ns}"),
            CONVERGE,
            async |_| get(&rbs, &rb_name).await,
        )
        .await;
        let subjects: Vec<&str> = rb.subjects.iter().flatten().map(|s| &*s.name).collect();
        assert_eq!(subjects, [format!("team-{ns}")]);
        assert_eq!(rb.role_ref.name, "edit");
    }
    // A namespace created afterwards is reached too, so by then the fan-out has been through
    // every namespace, the protected ones included.
    let c = namespace("sec-team").await;
    eventually(
        "the sandbox RoleBinding in a new namespace",
        CONVERGE,
        async |_| get(&Api::<RoleBinding>::namespaced(admin(), c.name()), &rb_name).await,
    )
    .await;
    for protected in [RELEASE_NAMESPACE, K8TLS_NAMESPACE, "kube-system"] {
        let granted = role_bindings_for(Some(protected), "team").await;
        assert!(
            granted.is_empty(),
            "a sandbox RoleBinding in protected namespace {protected}: {granted:#?}"
        );
        let policy = get(
            &Api::<NimbusPolicy>::namespaced(admin(), protected),
            &format!("nimbus-ctlr-gen-{csib}"),
        )
        .await;
        assert!(policy.is_none(), "a policy in {protected}: {policy:#?}");
    }

    // The group of namespace `a` got `edit` there (it may mint tokens there: the check below
    // can tell yes from no), and nothing in the operator's namespace.
    let member = impersonating(&unique("member"), &[&format!("team-{}", a.name())]);
    assert!(
        can_i(&member, "create", "serviceaccounts/token", Some(a.name())).await,
        "the sandbox grants `edit` in its own namespace"
    );
    for protected in [RELEASE_NAMESPACE, K8TLS_NAMESPACE, "kube-system"] {
        for (verb, resource) in [
            ("create", "serviceaccounts/token"),
            ("get", "secrets"),
            ("create", "pods"),
            ("create", "batch:cronjobs"),
        ] {
            assert!(
                !can_i(&member, verb, resource, Some(protected)).await,
                "the sandbox group may {verb} {resource} in {protected}"
            );
        }
    }

    delete(&csibs, &csib).await;
    delete(&intents, &si).await;
}

/// 2. A sandbox may grant only the allowlisted ClusterRoles, and never to a `system:` group:
///    anything else gets no RoleBinding and is reported as an invalid parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_grants_only_allowlisted_roles_to_ordinary_groups() {
    let ns = namespace("sec-allow").await;
    let intents: Api<SecurityIntent> = Api::all(admin());
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin());
    let policies: Api<NimbusPolicy> = Api::namespaced(admin(), ns.name());
    let own_role = operator().cluster_role.clone();
    let prefix = unique("escalate");
    let cases = [
        (
            format!("{prefix}-own"),
            own_role.as_str(),
            "may not be granted",
        ),
        (
            format!("{prefix}-admin"),
            "cluster-admin",
            "may not be granted",
        ),
        ("system:authenticated".to_owned(), "view", "system group"),
    ];
    for (group, role, complaint) in &cases {
        let si = unique("escalate");
        apply(&intents, &si, &sandbox_intent(&si, group, role)).await;
        let csib = unique("escalate");
        apply(
            &csibs,
            &csib,
            &cluster_binding(&csib, &[&si], &[ns.name()], Some("namespaceSandbox")),
        )
        .await;
        let policy = format!("nimbus-ctlr-gen-{csib}");
        let ready =
            not_ready_because(&policies, &policy, condition::REASON_INVALID_PARAMETER).await;
        assert!(
            ready["message"]
                .as_str()
                .is_some_and(|m| m.contains(complaint)),
            "{group} / {role}: {ready:#}"
        );
        not_ready_because(&csibs, &csib, condition::REASON_INVALID_PARAMETER).await;
        let granted = role_bindings_for(Some(ns.name()), group).await;
        assert!(granted.is_empty(), "{group} got {role}: {granted:#?}");
        let to_role: Vec<String> = Api::<RoleBinding>::namespaced(admin(), ns.name())
            .list(&ListParams::default())
            .await
            .expect("RoleBindings")
            .items
            .into_iter()
            .filter(|rb| rb.role_ref.name == *role && rb.name_any().contains(&csib))
            .map(|rb| rb.name_any())
            .collect();
        assert!(to_role.is_empty(), "RoleBindings to {role}: {to_role:?}");
        let status = get(&policies, &policy).await.and_then(|p| p.status);
        assert!(
            status
                .as_ref()
                .is_some_and(|s| s.adapter_policies.iter().flatten().next().is_none()),
            "{group}: the policy lists generated objects: {status:#?}"
        );
        delete(&csibs, &csib).await;
        delete(&intents, &si).await;
    }
}

/// 3. A namespace tenant who may create SecurityIntentBindings cannot bind a sandbox: a
///    namespaced binding of namespaceSandbox is unsupported, even with the annotation, and the
///    tenant gains nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_bind_a_sandbox() {
    let ns = namespace("team-a").await;
    let tenant = unique("tenant");
    let group = unique("tenants");
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(admin(), ns.name());
    apply(
        &roles,
        "binding-author",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "binding-author"},
            "rules": [{
                "apiGroups": ["intent.security.nimbus.com"],
                "resources": ["securityintentbindings"],
                "verbs": ["create", "get", "list"]
            }]
        }),
    )
    .await;
    apply(
        &Api::<RoleBinding>::namespaced(admin(), ns.name()),
        "binding-author",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "binding-author"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binding-author"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": tenant}]
        }),
    )
    .await;
    let intents: Api<SecurityIntent> = Api::all(admin());
    let si = unique("admins-sandbox");
    apply(&intents, &si, &sandbox_intent(&si, &group, "edit")).await;

    let as_tenant = impersonating(&tenant, &[&group]);
    assert!(!can_i(&as_tenant, "create", "apps:deployments", Some(ns.name())).await);
    let binding: SecurityIntentBinding = serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": {"name": "grab", "annotations": {ALLOW_SENSITIVE_ANNOTATION: "namespaceSandbox"}},
        "spec": {"intents": [{"name": si}], "selector": {"workloadSelector": {"matchLabels": {}}}}
    }))
    .expect("a binding");
    Api::<SecurityIntentBinding>::namespaced(as_tenant.clone(), ns.name())
        .create(&PostParams::default(), &binding)
        .await
        .expect("the tenant may create bindings in its namespace");

    let policies: Api<NimbusPolicy> = Api::namespaced(admin(), ns.name());
    not_ready_because(&policies, "grab", condition::REASON_UNSUPPORTED_INTENT).await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(admin(), ns.name());
    not_ready_because(&bindings, "grab", condition::REASON_UNSUPPORTED_INTENT).await;
    let granted = role_bindings_for(None, &group).await;
    assert!(granted.is_empty(), "the tenant's group got {granted:#?}");
    for (verb, resource) in [
        ("create", "apps:deployments"),
        ("create", "pods"),
        ("create", "serviceaccounts/token"),
        ("get", "secrets"),
    ] {
        assert!(
            !can_i(&as_tenant, verb, resource, Some(ns.name())).await,
            "the tenant may {verb} {resource}"
        );
    }
    delete(&intents, &si).await;
}

/// 4. A dangling reference is not a blank cheque. Admins' cluster bindings name intents that do
///    not exist yet, one of them opting in to sensitive intents with `allow-sensitive`. Someone
///    allowed only to create intents cannot fill the names in with a sandbox or a scanner: the
///    chart's admission policy refuses sensitive intents to whoever may not create cluster
///    bindings, at creation and by update of an intent he wrote. Only a trusted author's
///    intent is granted, and only through the annotated binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangling_reference_cannot_be_completed_into_a_sensitive_intent() {
    let ns = namespace("sec-dangle").await;
    let group = unique("authors");
    let author = unique("intent-author");
    let binder = unique("binder");
    let cluster_roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(admin());
    let crbs: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin());
    let grants = [
        (
            &author,
            json!([{"apiGroups": ["intent.security.nimbus.com"],
                          "resources": ["securityintents"], "verbs": ["create", "patch", "get"]}]),
        ),
        (
            &binder,
            json!([{"apiGroups": ["intent.security.nimbus.com"],
                          "resources": ["securityintents", "clustersecurityintentbindings"],
                          "verbs": ["create"]}]),
        ),
    ];
    for (user, rules) in &grants {
        let role = format!("{user}-role");
        apply(
            &cluster_roles,
            &role,
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": role}, "rules": rules}),
        )
        .await;
        apply(&crbs, &role, &cluster_role_binding(&role, &role, user)).await;
    }

    let (later, later_tls) = (unique("later"), unique("later-tls"));
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin());
    let (plain, annotated) = (unique("dangling"), unique("dangling-allowed"));
    apply(
        &csibs,
        &plain,
        &cluster_binding(&plain, &[&later, &later_tls], &["*"], None),
    )
    .await;
    apply(
        &csibs,
        &annotated,
        &cluster_binding(
            &annotated,
            &[&later, &later_tls],
            &[ns.name()],
            Some("namespaceSandbox,assessTLS"),
        ),
    )
    .await;

    let mut tls = common::intent(&later_tls, "assessTLS", "Audit");
    tls["spec"]["intent"]["params"] = json!({"schedule": ["0 * * * *"]});
    let sensitive = [sandbox_intent(&later, &group, "edit"), tls];
    let create = async |client: &Client, intent: &Value| {
        let intent: SecurityIntent = serde_json::from_value(intent.clone()).expect("an intent");
        Api::<SecurityIntent>::all(client.clone())
            .create(&PostParams::default(), &intent)
            .await
    };
    let refused = |what: &str, result: Result<SecurityIntent, kube::Error>| match result {
        Err(kube::Error::Api(status)) if status.code == 403 => assert!(
            status
                .message
                .contains("only who may create ClusterSecurityIntentBindings"),
            "{what}: {}",
            status.message
        ),
        other => panic!("{what} must be refused at admission: {other:?}"),
    };
    // The admission policy takes effect once the API server has compiled it.
    let as_author = impersonating(&author, &[&group]);
    eventually(
        "the author's sandbox refused",
        CONVERGE,
        async |seen| match create(&as_author, &sensitive[0]).await {
            Err(kube::Error::Api(status)) if status.code == 403 => Some(()),
            other => {
                if let Ok(created) = other {
                    delete(&Api::<SecurityIntent>::all(admin()), &created.name_any()).await;
                }
                *seen = "admitted".to_owned();
                None
            }
        },
    )
    .await;
    for intent in &sensitive {
        refused(
            "the author's sensitive intent",
            create(&as_author, intent).await,
        );
    }
    // Nor can the author write the name as a harmless intent and turn it into a sandbox.
    let intents_as_author: Api<SecurityIntent> = Api::all(as_author.clone());
    create(
        &as_author,
        &common::intent(&later, "dnsManipulation", "Block"),
    )
    .await
    .expect("the author may create ordinary intents");
    // A merge patch carries no resourceVersion: the operator's status writes cannot make it
    // conflict, so only the admission policy can refuse it.
    let turn = json!({"spec": sensitive[0]["spec"]});
    refused(
        "turning the author's intent into a sandbox",
        intents_as_author
            .patch(&later, &PatchParams::default(), &Patch::Merge(&turn))
            .await,
    );
    let harmless = get(&intents_as_author, &later).await.expect("the intent");
    assert_eq!(harmless.spec.intent.id, "dnsManipulation");
    delete(&Api::<SecurityIntent>::all(admin()), &later).await;
    eventually("the author's intent gone", CONVERGE, async |_| {
        get(&intents_as_author, &later)
            .await
            .is_none()
            .then_some(())
    })
    .await;

    let policies: Api<NimbusPolicy> = Api::namespaced(admin(), ns.name());
    let granted = role_bindings_for(None, &group).await;
    assert!(granted.is_empty(), "the author's group got {granted:#?}");

    // Someone trusted to grant (who may create cluster bindings) may write them: the annotated
    // binding then grants exactly that, the other one still nothing.
    let as_binder = impersonating(&binder, &[]);
    for intent in &sensitive {
        create(&as_binder, intent)
            .await
            .expect("who may create cluster bindings may create sensitive intents");
    }
    eventually("the annotated binding's sandbox", CONVERGE, async |_| {
        let granted = role_bindings_for(Some(ns.name()), &group).await;
        granted
            .iter()
            .any(|rb| rb.name_any() == sandbox_role_binding(&annotated, "edit"))
            .then_some(())
    })
    .await;
    not_ready_because(
        &policies,
        &format!("nimbus-ctlr-gen-{plain}"),
        condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED,
    )
    .await;
    not_ready_because(
        &Api::<ClusterNimbusPolicy>::all(admin()),
        &plain,
        condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED,
    )
    .await;
    not_ready_because(
        &csibs,
        &plain,
        condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED,
    )
    .await;
    let scanners: Vec<String> = Api::<CronJob>::namespaced(admin(), K8TLS_NAMESPACE)
        .list(&ListParams::default())
        .await
        .expect("CronJobs")
        .items
        .iter()
        .filter(|c| {
            c.name_any().starts_with(&plain) || c.owner_references().iter().any(|o| o.name == plain)
        })
        .map(ResourceExt::name_any)
        .collect();
    assert!(
        scanners.is_empty(),
        "the plain binding scheduled scanners: {scanners:?}"
    );
    let granted: Vec<String> = role_bindings_for(None, &group)
        .await
        .iter()
        .map(|rb| format!("{}/{}", rb.namespace().unwrap_or_default(), rb.name_any()))
        .collect();
    assert_eq!(
        granted,
        [format!(
            "{}/{}",
            ns.name(),
            sandbox_role_binding(&annotated, "edit")
        )],
        "only the annotated binding grants"
    );
    // Outside the namespace the trusted binder chose, the author gained nothing (the plain
    // binding selects every namespace).
    for (verb, resource, namespace) in [
        ("create", "apps:deployments", "default"),
        ("get", "secrets", "default"),
        ("create", "batch:cronjobs", K8TLS_NAMESPACE),
        ("get", "secrets", RELEASE_NAMESPACE),
    ] {
        assert!(
            !can_i(&as_author, verb, resource, Some(namespace)).await,
            "the intent author may {verb} {resource} in {namespace}"
        );
    }

    delete(&csibs, &plain).await;
    delete(&csibs, &annotated).await;
    let intents: Api<SecurityIntent> = Api::all(admin());
    delete(&intents, &later).await;
    delete(&intents, &later_tls).await;
    for (user, _) in &grants {
        delete(&crbs, &format!("{user}-role")).await;
        delete(&cluster_roles, &format!("{user}-role")).await;
    }
}

/// 5. The names of cluster bindings' per-namespace policies cannot be taken by a namespaced
///    binding (which would make its policy look like a cluster binding's), not even by an admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_cannot_take_a_cluster_bindings_policy_name() {
    let ns = namespace("sec-names").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(admin(), ns.name());
    let name = format!("nimbus-ctlr-gen-{}", unique("csib"));
    let binding: SecurityIntentBinding =
        serde_json::from_value(common::binding(&name, &["anything"], json!({"app": "x"})))
            .expect("a binding");
    let created = bindings.create(&PostParams::default(), &binding).await;
    assert!(
        matches!(&created, Err(kube::Error::Api(s))
            if s.code == 422 && s.message.contains("reserved")),
        "a binding named {name} must be refused at admission: {created:?}"
    );
    // The same binding under another name is accepted: the refusal is about the name.
    let mut binding = binding;
    binding.metadata.name = Some("not-reserved".to_owned());
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("an ordinary name is accepted");
}

/// A NimbusPolicy written directly (not generated from a binding) with a sandbox rule and the
/// annotation, controlled by `owner` (`None`: no ownerReferences).
fn direct_policy(name: &str, group: &str, owner: Option<Value>) -> NimbusPolicy {
    let mut policy = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
        "metadata": {"name": name, "annotations": {ALLOW_SENSITIVE_ANNOTATION: "namespaceSandbox"}},
        "spec": {
            "selector": {},
            "rules": [{"id": "namespaceSandbox", "rule": {
                "action": "Block", "params": {"group": [group], "clusterRole": ["edit"]}
            }}]
        }
    });
    if let Some(owner) = owner {
        policy["metadata"]["ownerReferences"] = json!([owner]);
    }
    serde_json::from_value(policy).expect("a policy")
}

/// 6. A NimbusPolicy no binding generated is not translated: without an owner, or claiming a
///    binding that does not exist, it reports NotBound and nothing is generated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_no_binding_generated_enforces_nothing() {
    let ns = namespace("sec-direct").await;
    let policies: Api<NimbusPolicy> = Api::namespaced(admin(), ns.name());
    let group = unique("direct");
    let fake_owner = |kind: &str| {
        json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": kind,
            "name": unique("gone"), "uid": "0b8f2f3c-1111-4222-8333-944455556666",
            "controller": true, "blockOwnerDeletion": true
        })
    };
    let cases = [
        ("orphan", None),
        ("fake-binding", Some(fake_owner("SecurityIntentBinding"))),
        (
            "nimbus-ctlr-gen-fake",
            Some(fake_owner("ClusterSecurityIntentBinding")),
        ),
    ];
    for (name, owner) in &cases {
        policies
            .create(
                &PostParams::default(),
                &direct_policy(name, &group, owner.clone()),
            )
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    for (name, _) in &cases {
        not_ready_because(&policies, name, condition::REASON_NOT_BOUND).await;
    }
    let granted = role_bindings_for(None, &group).await;
    assert!(granted.is_empty(), "unbound policies granted {granted:#?}");
}

/// 6b. Claiming a cluster binding that exists (its name and uid are readable) does not bind a
///     policy either: only the policies a binding generated are translated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_claiming_an_existing_cluster_binding_enforces_nothing() {
    let ns = namespace("sec-claim").await;
    let other = namespace("sec-other").await;
    let intents: Api<SecurityIntent> = Api::all(admin());
    let si = unique("harmless");
    apply(
        &intents,
        &si,
        &common::intent(&si, "dnsManipulation", "Block"),
    )
    .await;
    // Someone else's cluster binding, selecting another namespace and naming no sensitive
    // intent.
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin());
    let csib = unique("someone-elses");
    let real = apply(
        &csibs,
        &csib,
        &cluster_binding(&csib, &[&si], &[other.name()], None),
    )
    .await;
    let group = unique("claimer");
    let owner = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1",
        "kind": "ClusterSecurityIntentBinding",
        "name": csib, "uid": real.uid().expect("uid"),
        "controller": true, "blockOwnerDeletion": true
    });
    let policies: Api<NimbusPolicy> = Api::namespaced(admin(), ns.name());
    for name in ["claimer".to_owned(), format!("nimbus-ctlr-gen-{csib}")] {
        policies
            .create(
                &PostParams::default(),
                &direct_policy(&name, &group, Some(owner.clone())),
            )
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    // Give the operator time to act on them, then nothing may have been granted.
    let mut reasons = Vec::new();
    for name in ["claimer".to_owned(), format!("nimbus-ctlr-gen-{csib}")] {
        // Removed (by the binding that does not select this namespace) or decided.
        let found = eventually(
            &format!("{name} removed, translated or refused"),
            CONVERGE,
            async |_| match get(&policies, &name).await {
                None => Some(json!({"reason": "removed"})),
                Some(policy) => {
                    let ready = ready_condition(&policy);
                    (!ready.is_null()).then_some(ready)
                }
            },
        )
        .await;
        reasons.push((name, found));
    }
    let granted = role_bindings_for(None, &group).await;
    assert!(
        granted.is_empty(),
        "a policy claiming cluster binding {csib} granted {:?}; conditions: {reasons:#?}",
        granted
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>()
    );
    // Either reported as not bound, or (named like the cluster binding's own policy in a
    // namespace it does not select, with its uid) deleted by that binding as its leftover.
    for (name, ready) in &reasons {
        assert!(
            ready["reason"] == condition::REASON_NOT_BOUND || ready["reason"] == "removed",
            "{name}: {ready:#}"
        );
    }
    delete(&csibs, &csib).await;
    delete(&intents, &si).await;
}

/// 7. The operator's ServiceAccount is no administrator: no Secrets, `bind` only on the
///    allowlisted ClusterRoles, and native objects of the k8tls engine only in its namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_service_account_holds_only_what_it_needs() {
    let sa = &operator().user;
    let own_role = operator().cluster_role.clone();
    let ns = namespace("sec-sa").await;
    // The check can say yes: the operator writes RoleBindings and binds `edit`.
    assert!(
        may(
            sa,
            "create",
            "rbac.authorization.k8s.io:rolebindings",
            Some(ns.name()),
            None
        )
        .await
    );
    for role in ["edit", "view"] {
        assert!(
            may(
                sa,
                "bind",
                "rbac.authorization.k8s.io:clusterroles",
                None,
                Some(role)
            )
            .await,
            "the operator may bind {role}"
        );
    }
    for role in ["cluster-admin", "admin", own_role.as_str(), "system:node"] {
        assert!(
            !may(
                sa,
                "bind",
                "rbac.authorization.k8s.io:clusterroles",
                None,
                Some(role)
            )
            .await,
            "the operator may bind {role}"
        );
        assert!(
            !may(
                sa,
                "escalate",
                "rbac.authorization.k8s.io:clusterroles",
                None,
                Some(role)
            )
            .await,
            "the operator may escalate {role}"
        );
    }
    for (verb, resource, namespace) in [
        ("get", "secrets", None),
        ("list", "secrets", None),
        ("get", "secrets", Some(RELEASE_NAMESPACE)),
        ("list", "secrets", Some(K8TLS_NAMESPACE)),
        ("create", "serviceaccounts/token", Some(RELEASE_NAMESPACE)),
        ("create", "serviceaccounts/token", Some(K8TLS_NAMESPACE)),
        ("create", "pods", Some(ns.name())),
        ("create", "batch:jobs", Some(ns.name())),
        (
            "create",
            "rbac.authorization.k8s.io:clusterrolebindings",
            None,
        ),
        ("create", "rbac.authorization.k8s.io:roles", Some(ns.name())),
        ("impersonate", "users", None),
        ("impersonate", "groups", None),
        ("impersonate", "serviceaccounts", Some(K8TLS_NAMESPACE)),
        ("create", "apps:deployments", Some(ns.name())),
        ("update", "rbac.authorization.k8s.io:clusterroles", None),
    ] {
        assert!(
            !may(sa, verb, resource, namespace, None).await,
            "the operator may {verb} {resource} in {namespace:?}"
        );
    }
    // CronJobs run pods as any ServiceAccount of their namespace: the operator writes them,
    // and its ConfigMaps, only in the k8tls namespace.
    for verb in ["create", "update", "patch", "delete"] {
        for resource in ["batch:cronjobs", "configmaps"] {
            assert!(
                may(sa, verb, resource, Some(K8TLS_NAMESPACE), None).await,
                "the operator must {verb} {resource} in {K8TLS_NAMESPACE}"
            );
            for namespace in [ns.name(), "kube-system", RELEASE_NAMESPACE] {
                assert!(
                    !may(sa, verb, resource, Some(namespace), None).await,
                    "the operator may {verb} {resource} in {namespace}"
                );
            }
        }
    }
}

/// With a virtual-patch database configured, the chart lets the operator watch that one
/// ConfigMap by name, and read no other ConfigMap anywhere.
#[tokio::test]
async fn the_virtual_patch_database_is_the_only_config_map_the_operator_reads() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let user = &operator().user;
    let admin = admin();
    let objects = common::helm_template(&[
        "engines.kyverno.virtualPatchDb=kube-public/nimbus-virtual-patches",
    ]);
    let grants: Vec<Value> = objects
        .iter()
        .filter(|o| o["metadata"]["name"] == "nimbus-virtual-patch-db")
        .cloned()
        .collect();
    assert_eq!(grants.len(), 2, "the Role and its RoleBinding");
    common::apply_rendered(&admin, &grants, true, "virtual-patch-db RBAC").await;

    let operator = impersonating(user, &["system:serviceaccounts"]);
    let config_maps: Api<ConfigMap> = Api::namespaced(operator.clone(), "kube-public");
    let by_name = ListParams::default().fields("metadata.name=nimbus-virtual-patches");
    // kube-apiserver's RBAC authorizer learns of the new Role from its own watch: allowed once
    // it has (a clean `make test` on a loaded machine once listed before it had).
    eventually(
        "the operator to list the database by name",
        CONVERGE,
        async |seen| {
            let listed = config_maps.list(&by_name).await;
            *seen = format!("{listed:?}");
            listed.ok().map(|_| ())
        },
    )
    .await;
    let _events = config_maps
        .watch(
            &kube::api::WatchParams::default().fields("metadata.name=nimbus-virtual-patches"),
            "0",
        )
        .await
        .expect("watching the database by name");
    let refused = |result: Result<_, kube::Error>| matches!(result, Err(kube::Error::Api(s)) if s.code == 403);
    assert!(refused(
        config_maps.list(&ListParams::default()).await.map(drop)
    ));
    assert!(refused(config_maps.get("cluster-info").await.map(drop)));
    let elsewhere: Api<ConfigMap> = Api::all(operator);
    assert!(refused(elsewhere.list(&by_name).await.map(drop)));
    let roles: Api<k8s_openapi::api::rbac::v1::Role> =
        Api::namespaced(admin.clone(), "kube-public");
    let bindings: Api<RoleBinding> = Api::namespaced(admin, "kube-public");
    delete(&bindings, "nimbus-virtual-patch-db").await;
    delete(&roles, "nimbus-virtual-patch-db").await;
}

/// Grants `user` (cluster-wide) only what `rules` say, through a ClusterRole and its binding
/// both named after the user, and waits until the authorizer says so (of the first rule's
/// first verb and resource); returns that name, for [`revoke`].
async fn grant(user: &str, rules: Value) -> String {
    let role = format!("{user}-role");
    apply(
        &Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(admin()),
        &role,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role}, "rules": rules}),
    )
    .await;
    apply(
        &Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin()),
        &role,
        &cluster_role_binding(&role, &role, user),
    )
    .await;
    let first = &rules[0];
    let resource = format!(
        "{}:{}",
        first["apiGroups"][0].as_str().unwrap_or_default(),
        first["resources"][0].as_str().unwrap_or_default()
    );
    let verb = first["verbs"][0].as_str().unwrap_or_default();
    eventually(
        &format!("{user} may {verb} {resource}"),
        CONVERGE,
        async |_| may(user, verb, &resource, None, None).await.then_some(()),
    )
    .await;
    role
}

/// Removes what [`grant`] created.
async fn revoke(role: &str) {
    delete(
        &Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin()),
        role,
    )
    .await;
    delete(
        &Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(admin()),
        role,
    )
    .await;
}

/// 8. A namespace label cannot weaken an administrator's cluster binding. Someone who may only
///    create and label namespaces (self-service namespaces) creates one labelled
///    `intent.security.nimbus.com/mode=shadow`: the admin's cluster binding over every
///    namespace still enforces there (its NetworkPolicy is written, its policy blocks, its mode
///    stays `Enforce`). Only a cluster binding annotated `follow-namespace-mode: "true"` lets
///    the label shadow it there (`Mixed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_label_cannot_shadow_an_admins_cluster_binding() {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    operator();
    let tenant = unique("ns-tenant");
    let role = grant(
        &tenant,
        json!([{"apiGroups": [""], "resources": ["namespaces"],
                "verbs": ["create", "patch", "update", "get"]}]),
    )
    .await;
    let intents: Api<SecurityIntent> = Api::all(admin());
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin());
    let si = unique("no-exfil");
    apply(
        &intents,
        &si,
        &common::intent(&si, "denyExternalNetworkAccess", "Block"),
    )
    .await;
    let (no_exfil, following) = (unique("no-exfil"), unique("no-exfil-follows"));
    apply(
        &csibs,
        &no_exfil,
        &cluster_binding(&no_exfil, &[&si], &["*"], None),
    )
    .await;
    let mut opted_in = cluster_binding(&following, &[&si], &["*"], None);
    opted_in["metadata"]["annotations"] =
        json!({"intent.security.nimbus.com/follow-namespace-mode": "true"});
    apply(&csibs, &following, &opted_in).await;

    let sneaky = unique("sneaky");
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": sneaky, "labels": {nimbus_api::MODE_LABEL: nimbus_api::MODE_SHADOW}}
    }))
    .expect("a namespace");
    Api::<Namespace>::all(impersonating(&tenant, &[]))
        .create(&PostParams::default(), &namespace)
        .await
        .expect("the tenant may create namespaces");

    let policies: Api<NimbusPolicy> = Api::namespaced(admin(), &sneaky);
    let netpols: Api<NetworkPolicy> = Api::namespaced(admin(), &sneaky);
    let actions = |p: &NimbusPolicy| -> Vec<String> {
        p.spec.rules.iter().map(|r| r.rule.action.clone()).collect()
    };
    eventually(
        "the admin's binding enforcing in the labelled namespace",
        CONVERGE,
        async |seen| {
            let policy = get(&policies, &format!("nimbus-ctlr-gen-{no_exfil}")).await?;
            let mode = get(&csibs, &no_exfil).await?.status?.mode;
            let written: Vec<String> = netpols
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .map(ResourceExt::name_any)
                .filter(|n| n.starts_with(&format!("nimbus-ctlr-gen-{no_exfil}-")))
                .collect();
            *seen = format!(
                "actions {:?}, mode {mode:?}, NetworkPolicies {written:?}",
                actions(&policy)
            );
            (actions(&policy) == ["Block"]
                && mode.as_deref() == Some("Enforce")
                && !written.is_empty())
            .then_some(())
        },
    )
    .await;
    // The binding that opted in follows the label there.
    eventually("the opted-in binding Mixed", CONVERGE, async |seen| {
        let policy = get(&policies, &format!("nimbus-ctlr-gen-{following}")).await?;
        let mode = get(&csibs, &following).await?.status?.mode;
        *seen = format!("actions {:?}, mode {mode:?}", actions(&policy));
        (actions(&policy) == ["Audit"] && mode.as_deref() == Some("Mixed")).then_some(())
    })
    .await;

    delete(&Api::<Namespace>::all(admin()), &sneaky).await;
    delete(&csibs, &no_exfil).await;
    delete(&csibs, &following).await;
    delete(&intents, &si).await;
    revoke(&role).await;
}

/// Runs the `nimbus` binary with the admin kubeconfig.
fn nimbus_cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_nimbus"))
        .args(args)
        .env("KUBECONFIG", nimbus_testenv::shared().kubeconfig_path())
        .output()
        .expect("running nimbus")
}

/// 9. A squatted bundle name keeps nothing. Someone who may only create SecurityIntents
///    creates one under a name `nimbus bundle` will print, with a target of their choosing. The
///    admin's `nimbus bundle --check` says it differs and exits non-zero; applying the bundle
///    over it as a client-side `kubectl apply` does (a JSON merge patch, which keeps what the
///    patch does not mention) leaves none of the squatter's parameters, since the bundle
///    writes every parameter its intents take; `--check` then passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_applied_over_a_squatted_intent_keeps_none_of_its_params() {
    operator();
    let squatter = unique("squatter");
    let role = grant(
        &squatter,
        json!([{"apiGroups": ["intent.security.nimbus.com"],
                "resources": ["securityintents"], "verbs": ["create"]}]),
    )
    .await;
    let name = "oran-5g-assess-t-l-s";
    let mut squat = common::intent(name, "dnsManipulation", "Block");
    squat["spec"]["intent"]["params"] =
        json!({"external_addresses": ["db.internal:443"], "schedule": ["0 * * * *"]});
    Api::<SecurityIntent>::all(impersonating(&squatter, &[]))
        .create(
            &PostParams::default(),
            &serde_json::from_value(squat).expect("an intent"),
        )
        .await
        .expect("the squatter may create ordinary intents");

    let scope = ["bundle", "oran-5g", "--cluster", "*"];
    let check = nimbus_cli(&[&scope[..], &["--check"]].concat());
    let said = String::from_utf8_lossy(&check.stdout).into_owned();
    assert_ne!(check.status.code(), Some(0), "--check passed: {said}");
    assert!(
        said.contains(&format!("SecurityIntent {name}: differs"))
            && said.contains("id is dnsManipulation")
            && said.contains("params.external_addresses"),
        "{said}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // `nimbus bundle … | kubectl apply -f -` over existing objects: a merge patch of each.
    let printed = nimbus_cli(&scope);
    assert_eq!(printed.status.code(), Some(0));
    let intents: Api<SecurityIntent> = Api::all(admin());
    let mut names = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_slice(&printed.stdout) {
        let object: Value = serde::Deserialize::deserialize(doc).expect("a YAML document");
        if object["kind"] != "SecurityIntent" {
            continue;
        }
        let n = object["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_owned();
        match get(&intents, &n).await {
            Some(_) => {
                intents
                    .patch(&n, &PatchParams::default(), &Patch::Merge(&object))
                    .await
                    .unwrap_or_else(|e| panic!("merging {n}: {e}"));
            }
            None => {
                intents
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(object).expect("an intent"),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("creating {n}: {e}"));
            }
        }
        names.push(n);
    }
    let merged = get(&intents, name).await.expect("the intent");
    assert_eq!(merged.spec.intent.id, "assessTLS");
    assert_eq!(
        serde_json::to_value(&merged.spec.intent.params).expect("json"),
        json!({"external_addresses": [], "schedule": ["@weekly"]}),
        "the squatter's parameters survived the bundle"
    );
    let check = nimbus_cli(&[&scope[..], &["--check"]].concat());
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    for n in &names {
        delete(&intents, n).await;
    }
    revoke(&role).await;
}

/// 10. A dangling name filled by someone else does not change in silence. An admin's cluster
///     binding names an intent that does not exist yet; a user who may only create
///     SecurityIntents creates it. The binding's status (`intentWriters`) and an
///     `IntentChanged` Event on it name the intent, the user (stamped by the chart's
///     `nimbus-intent-author` MutatingAdmissionPolicy, whatever the request claimed) and when.
///     Read as JSON, so that the test builds, and fails, without the feature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filled_dangling_intent_names_its_author_on_the_binding() {
    use k8s_openapi::api::core::v1::Event;
    let ns = namespace("sec-author").await;
    let mallory = unique("mallory");
    let role = grant(
        &mallory,
        json!([{"apiGroups": ["intent.security.nimbus.com"],
                "resources": ["securityintents"], "verbs": ["create"]}]),
    )
    .await;
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin());
    let (platform, hardening) = (unique("platform"), unique("hardening"));
    apply(
        &csibs,
        &platform,
        &cluster_binding(&platform, &[&hardening], &[ns.name()], None),
    )
    .await;
    not_ready_because(&csibs, &platform, condition::REASON_INTENT_NOT_FOUND).await;

    // Mallory claims someone else wrote it: the admission policy overwrites the claim.
    let mut intent = common::intent(&hardening, "dnsManipulation", "Block");
    intent["metadata"]["annotations"] =
        json!({"intent.security.nimbus.com/last-written-by": "admin"});
    Api::<SecurityIntent>::all(impersonating(&mallory, &[]))
        .create(
            &PostParams::default(),
            &serde_json::from_value(intent).expect("an intent"),
        )
        .await
        .expect("mallory may create ordinary intents");

    let writer = eventually(
        "the binding's status names the intent's author",
        CONVERGE,
        async |seen| {
            let status =
                serde_json::to_value(get(&csibs, &platform).await?).ok()?["status"].clone();
            *seen = status.to_string();
            status["intentWriters"]
                .as_array()?
                .iter()
                .find(|w| w["name"] == hardening.as_str() && w["writtenBy"] == mallory.as_str())
                .cloned()
        },
    )
    .await;
    assert!(writer["writtenAt"].is_string(), "{writer}");
    let events: Api<Event> = Api::namespaced(admin(), "default");
    let note = eventually(
        "an IntentChanged Event on the binding",
        CONVERGE,
        async |seen| {
            let list = events
                .list(&ListParams::default().fields(&format!(
                    "involvedObject.name={platform},reason=IntentChanged"
                )))
                .await
                .ok()?;
            *seen = format!(
                "{:?}",
                list.items.iter().map(|e| &e.message).collect::<Vec<_>>()
            );
            list.items.into_iter().find_map(|e| e.message)
        },
    )
    .await;
    assert!(
        note.contains(&hardening) && note.contains(&mallory),
        "the Event must name the intent and its author: {note}"
    );

    delete(&csibs, &platform).await;
    delete(&Api::<SecurityIntent>::all(admin()), &hardening).await;
    revoke(&role).await;
}

/// 11. Who may write SecurityIntents is the chart's rule, as the API server's authorizer
///     answers it: not whoever holds the built-in `view`, `edit` or `admin` role, even
///     cluster-wide (no role the chart aggregates into them grants a write of the intent
///     API); whoever is bound to the chart's `<release>-intent-author` role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_cluster_admins_and_intent_authors_may_write_intents() {
    operator();
    let crbs: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin());
    let author_role = format!("{}-intent-author", common::RELEASE);
    let mut bound = Vec::new();
    for role in ["view", "edit", "admin", author_role.as_str()] {
        let user = unique(&format!("holder-of-{role}"));
        apply(&crbs, &user, &cluster_role_binding(&user, role, &user)).await;
        bound.push((role.to_owned(), user));
    }
    for (role, user) in &bound {
        for verb in ["create", "update", "patch"] {
            for resource in [
                "intent.security.nimbus.com:securityintents",
                "intent.security.nimbus.com:clustersecurityintentbindings",
            ] {
                let allowed = may(user, verb, resource, None, None).await;
                assert_eq!(
                    allowed,
                    *role == author_role,
                    "a holder of {role} (cluster-wide) may {verb} {resource}: {allowed}"
                );
            }
        }
        assert!(
            !may(
                user,
                "create",
                "intent.security.nimbus.com:nimbuspolicies",
                Some("default"),
                None
            )
            .await,
            "a holder of {role} may write NimbusPolicies"
        );
    }
    for (_, user) in &bound {
        delete(&crbs, user).await;
    }
}

/// Letting workloads out of a binding's intents is a permission apart from writing bindings:
/// no built-in role (`edit` and `admin` hold namespace tenants) nor the intent authors' role may
/// write SecurityIntentExceptions, so a tenant cannot let their workloads out of an
/// administrator's cluster binding; the chart's exception-author role may. Approving them is a
/// permission apart again: only the chart's exception-approver role holds `approve`, with
/// `patch` to write the approval and no other write.
#[tokio::test]
async fn only_exception_authors_may_let_workloads_out_of_a_binding() {
    operator();
    let crbs: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin());
    let exception_author = format!("{}-exception-author", common::RELEASE);
    let exception_approver = format!("{}-exception-approver", common::RELEASE);
    let intent_author = format!("{}-intent-author", common::RELEASE);
    let mut bound = Vec::new();
    for role in [
        "view",
        "edit",
        "admin",
        &intent_author,
        &exception_author,
        &exception_approver,
    ] {
        let user = unique(&format!("holder-of-{role}"));
        apply(&crbs, &user, &cluster_role_binding(&user, role, &user)).await;
        bound.push((role.to_owned(), user));
    }
    for (role, user) in &bound {
        for verb in ["create", "update", "patch", "delete", "approve"] {
            let allowed = may(user, verb, EXCEPTIONS, Some("default"), None).await;
            let want = match verb {
                "approve" => *role == exception_approver,
                "patch" => *role == exception_author || *role == exception_approver,
                _ => *role == exception_author,
            };
            assert_eq!(
                allowed, want,
                "a holder of {role} (cluster-wide) may {verb} SecurityIntentExceptions: {allowed}"
            );
        }
    }
    for (_, user) in &bound {
        delete(&crbs, user).await;
    }
}

/// Binds the ClusterRole `role` to `user` in `namespace` (a tenant's RoleBinding, named after
/// both) and waits until the authorizer lets them `verb` SecurityIntentExceptions there.
async fn bind_in(namespace: &str, role: &str, user: &str, verb: &str) {
    let name = format!("{user}-{role}");
    let mut binding = cluster_role_binding(&name, role, user);
    binding["kind"] = json!("RoleBinding");
    binding["metadata"]["namespace"] = json!(namespace);
    apply(
        &Api::<RoleBinding>::namespaced(admin(), namespace),
        &name,
        &binding,
    )
    .await;
    eventually(
        &format!("{user} may {verb} SecurityIntentExceptions in {namespace}"),
        CONVERGE,
        async |_| {
            may(user, verb, EXCEPTIONS, Some(namespace), None)
                .await
                .then_some(())
        },
    )
    .await;
}

/// SecurityIntentExceptions, as [`may`] names a resource.
const EXCEPTIONS: &str = "exceptions.security.nimbus.com:securityintentexceptions";

/// The exception `name` of `namespace`, as JSON.
async fn exception_json(namespace: &str, name: &str) -> Value {
    let api: Api<nimbus_api::SecurityIntentException> = Api::namespaced(admin(), namespace);
    serde_json::to_value(get(&api, name).await.expect("the exception")).expect("json")
}

/// An annotation of the exception `name` of `namespace`.
async fn exception_annotation(namespace: &str, name: &str, key: &str) -> Value {
    exception_json(namespace, name).await["metadata"]["annotations"][key].clone()
}

/// Merge-patches the exception `name` of `namespace` as `client`.
async fn patch_exception(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: Value,
) -> Result<nimbus_api::SecurityIntentException, kube::Error> {
    Api::<nimbus_api::SecurityIntentException>::namespaced(client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// 12. Who asked for an exception is the API server's word, not the request's. A tenant bound
///     to the chart's exception-author role in their namespace creates an exception claiming
///     someone else asked for it: the chart's `nimbus-exception-requester`
///     MutatingAdmissionPolicy stamps `exceptions.security.nimbus.com/requested-by` with the
///     tenant's own name, and no update, theirs or anyone's, rewrites or removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exception_names_who_asked_for_it_and_nobody_can_rewrite_that() {
    use nimbus_api::REQUESTED_BY_ANNOTATION as REQUESTED_BY;
    let ns = namespace("sec-requester").await;
    let alice = unique("alice");
    let author = format!("{}-exception-author", common::RELEASE);
    bind_in(ns.name(), &author, &alice, "create").await;
    let exception = unique("vendor-agent");
    let as_alice = impersonating(&alice, &[]);
    let forged: nimbus_api::SecurityIntentException = serde_json::from_value(json!({
        "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
        "kind": "SecurityIntentException",
        "metadata": {"name": exception, "annotations": {REQUESTED_BY: "platform-lead"}},
        "spec": {
            "binding": {"kind": "ClusterSecurityIntentBinding", "name": "no-escape"},
            "intents": ["escape"],
            "reason": "the vendor's agent needs host access until 2.4",
            "expiresAt": (k8s_openapi::jiff::Timestamp::now()
                + k8s_openapi::jiff::SignedDuration::from_hours(24)).to_string(),
        },
    }))
    .expect("an exception");
    Api::<nimbus_api::SecurityIntentException>::namespaced(as_alice.clone(), ns.name())
        .create(&PostParams::default(), &forged)
        .await
        .expect("an exception author may create exceptions");
    let requested_by = || exception_annotation(ns.name(), &exception, REQUESTED_BY);
    assert_eq!(requested_by().await, json!(alice), "stamped on creation");

    for (who, client) in [("alice", &as_alice), ("the admin", &admin())] {
        for rewrite in [json!("platform-lead"), Value::Null] {
            patch_exception(
                client,
                ns.name(),
                &exception,
                json!({"metadata": {"annotations": {REQUESTED_BY: rewrite}}}),
            )
            .await
            .unwrap_or_else(|e| panic!("{who}'s update is admitted, unstamped: {e}"));
            assert_eq!(
                requested_by().await,
                json!(alice),
                "{who} set requested-by to {rewrite}"
            );
        }
    }
}

/// The `Active` condition of the exception `name` of `namespace`, with its status's
/// `requestedBy` and `approvedBy`: `(status, reason, requestedBy, approvedBy)`.
async fn exception_standing(namespace: &str, name: &str) -> (Value, Value, Value, Value) {
    standing_of(&exception_json(namespace, name).await)
}

/// An exception's `Active` condition, with its status's `requestedBy` and `approvedBy`.
fn standing_of(exception: &Value) -> (Value, Value, Value, Value) {
    let status = &exception["status"];
    let active = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Active").cloned())
        .unwrap_or(Value::Null);
    (
        active["status"].clone(),
        active["reason"].clone(),
        status["requestedBy"].clone(),
        status["approvedBy"].clone(),
    )
}

/// Waits until the exception `name` of `namespace` stands as `want`
/// ([`exception_standing`]).
async fn exception_stands(namespace: &str, name: &str, want: (Value, Value, Value, Value)) {
    eventually(
        &format!("{namespace}/{name} to stand as {want:?} (the last seen is printed)"),
        CONVERGE,
        async |seen| {
            let got = exception_standing(namespace, name).await;
            *seen = format!("{got:?}");
            (got == want).then_some(())
        },
    )
    .await;
}

/// A dnsManipulation SecurityIntent bound by an administrator's cluster binding to
/// `namespace`: `(binding, intent)` names.
async fn hardened(namespace: &str) -> (String, String) {
    let (platform, hardening) = (unique("platform"), unique("hardening"));
    apply(
        &Api::<SecurityIntent>::all(admin()),
        &hardening,
        &common::intent(&hardening, "dnsManipulation", "Block"),
    )
    .await;
    apply(
        &Api::<ClusterSecurityIntentBinding>::all(admin()),
        &platform,
        &cluster_binding(&platform, &[&hardening], &[namespace], None),
    )
    .await;
    (platform, hardening)
}

/// Why the API server refused `result`, which it must have refused at admission.
fn refused_because<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => e.message,
        other => panic!("{what} must be refused at admission: {other:?}"),
    }
}

/// 13. Approving an exception is a permission apart, and takes two people. The operator runs
///     with `--exception-approval=required` (chart value `exceptionApproval`). A tenant bound
///     to both the exception-author and the exception-approver role in their namespace cannot
///     create an exception approved by themselves; they create one to an admin's cluster
///     binding: it stands `Active=False`, `NotApproved`, and they cannot approve it. A holder of the exception-author role alone
///     cannot approve it, in their own name or another's. A holder of the exception-approver
///     role approves it in their own name (not in someone else's): it stands `Active=True`,
///     its status naming who asked and who approved. The approver cannot change its spec;
///     its author can, and that withdraws the approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exception_is_honoured_once_someone_else_who_may_approve_it_does() {
    use nimbus_api::APPROVED_BY_ANNOTATION as APPROVED_BY;
    let ns = namespace("sec-approval").await;
    let (author, approver) = (
        format!("{}-exception-author", common::RELEASE),
        format!("{}-exception-approver", common::RELEASE),
    );
    let (alice, bob, carol) = (unique("alice"), unique("bob"), unique("carol"));
    bind_in(ns.name(), &author, &alice, "create").await;
    bind_in(ns.name(), &approver, &alice, "approve").await;
    bind_in(ns.name(), &approver, &bob, "approve").await;
    bind_in(ns.name(), &author, &carol, "create").await;

    let (platform, hardening) = hardened(ns.name()).await;
    let intents: Api<SecurityIntent> = Api::all(admin());
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin());
    let exception = unique("dns-agent");
    let request: nimbus_api::SecurityIntentException = serde_json::from_value(json!({
        "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
        "kind": "SecurityIntentException",
        "metadata": {"name": exception},
        "spec": {
            "binding": {"kind": "ClusterSecurityIntentBinding", "name": platform},
            "intents": [hardening],
            "reason": "the agent resolves through its own server until 2.4",
            "expiresAt": (k8s_openapi::jiff::Timestamp::now()
                + k8s_openapi::jiff::SignedDuration::from_hours(24)).to_string(),
        },
    }))
    .expect("an exception");
    let as_alice = impersonating(&alice, &[]);
    let created =
        Api::<nimbus_api::SecurityIntentException>::namespaced(as_alice.clone(), ns.name());
    // Created approved by its requester: refused, whoever's name it carries.
    let mut self_approved = request.clone();
    self_approved.metadata.annotations = Some([(APPROVED_BY.to_owned(), alice.clone())].into());
    let why = refused_because(
        "alice creating her exception approved",
        created.create(&PostParams::default(), &self_approved).await,
    );
    assert!(why.contains("someone else must approve it"), "{why}");
    created
        .create(&PostParams::default(), &request)
        .await
        .expect("an exception author may create exceptions");
    let unapproved = (
        json!("False"),
        json!("NotApproved"),
        json!(alice),
        Value::Null,
    );
    exception_stands(ns.name(), &exception, unapproved.clone()).await;

    let approve = |client: Client, user: String| {
        let (ns, exception) = (ns.name().to_owned(), exception.clone());
        async move {
            patch_exception(
                &client,
                &ns,
                &exception,
                json!({"metadata": {"annotations": {APPROVED_BY: user}}}),
            )
            .await
        }
    };
    // The requester, though an approver, cannot approve what they asked for.
    let why = refused_because(
        "alice approving her own exception",
        approve(as_alice.clone(), alice.clone()).await,
    );
    assert!(why.contains("someone else must approve it"), "{why}");
    // An exception author without `approve` cannot approve it, in any name.
    let as_carol = impersonating(&carol, &[]);
    let why = refused_because(
        "carol approving without approve",
        approve(as_carol.clone(), carol.clone()).await,
    );
    assert!(why.contains("may not approve"), "{why}");
    refused_because(
        "carol writing bob's approval",
        approve(as_carol, bob.clone()).await,
    );
    // An approver approves in their own name only.
    let as_bob = impersonating(&bob, &[]);
    refused_because(
        "bob writing carol's approval",
        approve(as_bob.clone(), carol.clone()).await,
    );
    exception_stands(ns.name(), &exception, unapproved.clone()).await;
    approve(as_bob.clone(), bob.clone())
        .await
        .expect("an approver approves someone else's exception");
    assert_eq!(
        exception_annotation(ns.name(), &exception, APPROVED_BY).await,
        json!(bob)
    );
    exception_stands(
        ns.name(),
        &exception,
        (json!("True"), json!("Active"), json!(alice), json!(bob)),
    )
    .await;

    // The approver cannot change what they approved; its author can, withdrawing the approval.
    let longer = json!({"spec": {"reason": "the agent resolves through its own server until 2.5"}});
    let why = refused_because(
        "bob changing the spec",
        patch_exception(&as_bob, ns.name(), &exception, longer.clone()).await,
    );
    assert!(why.contains("not change the spec"), "{why}");
    patch_exception(&as_alice, ns.name(), &exception, longer)
        .await
        .expect("the author may change the spec");
    assert_eq!(
        exception_annotation(ns.name(), &exception, APPROVED_BY).await,
        Value::Null,
        "a change to the spec withdraws the approval"
    );
    exception_stands(ns.name(), &exception, unapproved).await;

    delete(&csibs, &platform).await;
    delete(&intents, &hardening).await;
}

/// ClusterSecurityIntentExceptions, as [`may`] names a resource.
const CLUSTER_EXCEPTIONS: &str = "exceptions.security.nimbus.com:clustersecurityintentexceptions";

/// Binds the ClusterRole `role` to `user` cluster-wide (a ClusterRoleBinding named after both)
/// and waits until the authorizer lets them `verb` ClusterSecurityIntentExceptions; returns the
/// binding's name.
async fn bind_cluster_wide(role: &str, user: &str, verb: &str) -> String {
    let name = format!("{user}-{role}");
    let crbs: Api<ClusterRoleBinding> = Api::all(admin());
    apply(&crbs, &name, &cluster_role_binding(&name, role, user)).await;
    eventually(
        &format!("{user} may {verb} ClusterSecurityIntentExceptions"),
        CONVERGE,
        async |_| {
            may(user, verb, CLUSTER_EXCEPTIONS, None, None)
                .await
                .then_some(())
        },
    )
    .await;
    name
}

/// The `Active` condition of the cluster exception `name`, with its status's `requestedBy`
/// and `approvedBy` (as [`exception_standing`]).
async fn cluster_exception_standing(name: &str) -> (Value, Value, Value, Value) {
    let api: Api<nimbus_api::ClusterSecurityIntentException> = Api::all(admin());
    let exception = get(&api, name).await.expect("the exception");
    standing_of(&serde_json::to_value(exception).expect("json"))
}

/// 14. Excepting workloads of several namespaces at once is for whoever holds the
///     exception-author role cluster-wide. A tenant holding the exception-author and
///     exception-approver roles in their namespace can neither create a
///     ClusterSecurityIntentException (even one naming only their namespace) nor approve one.
///     A holder of the exception-author role through a ClusterRoleBinding creates one: the
///     requester policy stamps their name, and, approval being required, it stands
///     `NotApproved` until a cluster-wide approver approves it in their own name; then it stands
///     `Active`, naming both. A cluster-wide exception author who is no approver cannot approve
///     it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_exception_takes_the_exception_roles_cluster_wide() {
    use nimbus_api::APPROVED_BY_ANNOTATION as APPROVED_BY;
    let ns = namespace("sec-cluster-exc").await;
    let (author, approver) = (
        format!("{}-exception-author", common::RELEASE),
        format!("{}-exception-approver", common::RELEASE),
    );
    let (tenant, dave, erin, frank) = (
        unique("tenant"),
        unique("dave"),
        unique("erin"),
        unique("frank"),
    );
    bind_in(ns.name(), &author, &tenant, "create").await;
    bind_in(ns.name(), &approver, &tenant, "approve").await;
    let granted = [
        bind_cluster_wide(&author, &dave, "create").await,
        bind_cluster_wide(&approver, &erin, "approve").await,
        bind_cluster_wide(&author, &frank, "patch").await,
    ];

    let (platform, hardening) = hardened(ns.name()).await;
    let intents: Api<SecurityIntent> = Api::all(admin());
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(admin());
    let name = unique("dns-agents");
    let request: nimbus_api::ClusterSecurityIntentException = serde_json::from_value(json!({
        "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
        "kind": "ClusterSecurityIntentException",
        "metadata": {"name": name},
        "spec": {
            "binding": {"kind": "ClusterSecurityIntentBinding", "name": platform},
            "intents": [hardening],
            "namespaces": [ns.name()],
            "reason": "the agents resolve through their own server until 2.4",
            "expiresAt": (k8s_openapi::jiff::Timestamp::now()
                + k8s_openapi::jiff::SignedDuration::from_hours(24)).to_string(),
        },
    }))
    .expect("a cluster exception");
    let as_tenant = impersonating(&tenant, &[]);
    let refused = Api::<nimbus_api::ClusterSecurityIntentException>::all(as_tenant.clone())
        .create(&PostParams::default(), &request)
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 403),
        "a namespace's exception author creating a cluster exception: {refused:?}"
    );
    let as_dave = impersonating(&dave, &[]);
    Api::<nimbus_api::ClusterSecurityIntentException>::all(as_dave)
        .create(&PostParams::default(), &request)
        .await
        .expect("a cluster-wide exception author may create cluster exceptions");
    let stands = async |want: (Value, Value, Value, Value)| {
        eventually(
            &format!("{name} to stand as {want:?} (the last seen is printed)"),
            CONVERGE,
            async |seen| {
                let got = cluster_exception_standing(&name).await;
                *seen = format!("{got:?}");
                (got == want).then_some(())
            },
        )
        .await;
    };
    stands((
        json!("False"),
        json!("NotApproved"),
        json!(dave),
        Value::Null,
    ))
    .await;

    let approve = async |client: Client, user: &str| {
        Api::<nimbus_api::ClusterSecurityIntentException>::all(client)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {APPROVED_BY: user}}})),
            )
            .await
    };
    // The tenant's approver role holds in their namespace only: RBAC refuses.
    let why = refused_because(
        "a namespace's approver approving a cluster exception",
        approve(as_tenant, &tenant).await,
    );
    assert!(why.contains("cannot patch"), "{why}");
    // A cluster-wide exception author may patch it, but not approve it: the approval policy
    // asks the authorizer for `approve` on the cluster-scoped resource.
    let why = refused_because(
        "a cluster-wide exception author approving",
        approve(impersonating(&frank, &[]), &frank).await,
    );
    assert!(
        why.contains("may not approve clustersecurityintentexceptions (the verb approve"),
        "{why}"
    );
    approve(impersonating(&erin, &[]), &erin)
        .await
        .expect("a cluster-wide approver approves a cluster exception");
    stands((json!("True"), json!("Active"), json!(dave), json!(erin))).await;

    let exceptions: Api<nimbus_api::ClusterSecurityIntentException> = Api::all(admin());
    delete(&exceptions, &name).await;
    delete(&csibs, &platform).await;
    delete(&intents, &hardening).await;
    let crbs: Api<ClusterRoleBinding> = Api::all(admin());
    for binding in granted {
        delete(&crbs, &binding).await;
    }
}
