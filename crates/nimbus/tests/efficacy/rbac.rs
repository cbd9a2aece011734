//! namespaceSandbox: the RoleBindings the operator wrote, judged by the API server's own RBAC
//! authorizer (SubjectAccessReviews) for members of the sandbox group of a namespace the
//! cluster binding selects, and of one it does not.

use crate::common::CONVERGE;
use crate::matrix::{Matrix, verdict};
use crate::{Selecting, bind_cluster, cluster, intent, namespace, unbind_cluster};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use nimbus_testenv::eventually;
use serde_json::json;

/// What a user asks to do: verb, group/resource, and where ("selected", "unselected" or cluster).
struct Case {
    name: &'static str,
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    namespace: Where,
    /// Granted by the `edit` ClusterRole the sandbox binds, in the selected namespace.
    by_edit: bool,
}

#[derive(Clone, Copy)]
enum Where {
    Selected,
    Unselected,
    Cluster,
}

const CASES: &[Case] = &[
    Case {
        name: "create Deployments in the selected namespace",
        verb: "create",
        group: "apps",
        resource: "deployments",
        namespace: Where::Selected,
        by_edit: true,
    },
    Case {
        name: "delete Pods in the selected namespace",
        verb: "delete",
        group: "",
        resource: "pods",
        namespace: Where::Selected,
        by_edit: true,
    },
    Case {
        name: "create RoleBindings in the selected namespace",
        verb: "create",
        group: "rbac.authorization.k8s.io",
        resource: "rolebindings",
        namespace: Where::Selected,
        by_edit: false,
    },
    Case {
        name: "create Deployments in an unselected namespace",
        verb: "create",
        group: "apps",
        resource: "deployments",
        namespace: Where::Unselected,
        by_edit: false,
    },
    Case {
        name: "list Namespaces",
        verb: "list",
        group: "",
        resource: "namespaces",
        namespace: Where::Cluster,
        by_edit: false,
    },
];

#[tokio::test]
async fn namespace_sandbox_grants_its_role_in_selected_namespaces_only() {
    let client = cluster();
    let si = intent(
        &client,
        "namespaceSandbox",
        "Block",
        json!({"group": ["team-{namespace}"], "clusterRole": ["edit"]}),
    )
    .await;
    let (selected, unselected) = (
        namespace("eff-sandbox").await,
        namespace("eff-sandbox-not").await,
    );
    let selecting = Selecting {
        labels: json!({}),
        allow_sensitive: Some("namespaceSandbox"),
        shadow: false,
    };
    let csib = bind_cluster(&client, selected.name(), &si, &selecting).await;

    let subjects = [
        (
            "member of team-{selected namespace}",
            format!("team-{}", selected.name()),
            true,
        ),
        (
            "member of team-{unselected namespace}",
            format!("team-{}", unselected.name()),
            false,
        ),
    ];
    let expected: Vec<(String, Vec<String>)> = CASES
        .iter()
        .map(|case| {
            let cells = subjects
                .iter()
                .map(|(_, _, sandboxed)| verdict(*sandboxed && case.by_edit))
                .collect();
            (case.name.to_owned(), cells)
        })
        .collect();
    // The authorizer reads RoleBindings from its own cache: wait for the grants to show, then
    // hold the measurement to the promise.
    let rows = eventually(
        "the sandbox grants to reach the authorizer",
        CONVERGE,
        async |seen| {
            let mut rows = Vec::new();
            for case in CASES {
                let ns = match case.namespace {
                    Where::Selected => Some(selected.name()),
                    Where::Unselected => Some(unselected.name()),
                    Where::Cluster => None,
                };
                let mut cells = Vec::new();
                for (_, group, _) in &subjects {
                    cells.push(verdict(allowed(&client, group, case, ns).await));
                }
                rows.push((case.name.to_owned(), cells));
            }
            *seen = format!("{rows:?}");
            (rows == expected).then_some(rows)
        },
    )
    .await;
    let matrix = Matrix {
        id: "rbac-namespaceSandbox".into(),
        title: "namespaceSandbox with clusterRole edit (RoleBinding, decided by the API server's RBAC authorizer)".to_owned(),
        case_header: "request",
        subjects: subjects.iter().map(|(s, ..)| (*s).to_owned()).collect(),
        rows,
        expected,
    };
    unbind_cluster(&client, &csib).await;
    matrix.assert();
}

async fn allowed(client: &Client, group: &str, case: &Case, namespace: Option<&str>) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("sandbox-efficacy-user".to_owned()),
            groups: Some(vec![group.to_owned(), "system:authenticated".to_owned()]),
            resource_attributes: Some(ResourceAttributes {
                namespace: namespace.map(str::to_owned),
                verb: Some(case.verb.to_owned()),
                group: Some(case.group.to_owned()),
                resource: Some(case.resource.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api = Api::<SubjectAccessReview>::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}
