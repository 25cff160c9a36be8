//! What a simulated Pod does through the API it does as its own ServiceAccount, so RBAC
//! decides — as it does for the SampleDB chaos CronJob's `kubectl delete pod`. The workload
//! simulator gets the Pod a token with a TokenRequest and runs kubectl's requests (a list by
//! the selector, then a delete per Pod) with it; a refusal fails the Pod with kubectl's message.
//!
//! Real control plane only (the devcluster has no RBAC): `#[ignore]`d in the devcluster pass and
//! run by `cargo xtask ci`'s real pass with `--include-ignored`. That the chaos Role is *enough*
//! is shown by `sampledb::chaos_kills_the_primary_and_a_new_one_serves_without_losing_a_volume`
//! in the same pass; that each of its two verbs is *needed*, here.

use k8s_openapi::api::{
    authorization::v1::SubjectAccessReview,
    batch::v1::Job,
    core::v1::{Pod, ServiceAccount},
    rbac::v1::{Role, RoleBinding},
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::support::*;

const NS: &str = "shop";
const ACCOUNT: &str = "chaos";

/// Whether the API server lets the account `verb` Pods in `NS` now.
async fn may(client: &kube::Client, verb: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {"user": format!("system:serviceaccount:{NS}:{ACCOUNT}"),
                 "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{NS}"), "system:authenticated"],
                 "resourceAttributes": {"namespace": NS, "verb": verb, "resource": "pods"}}
    }))
    .expect("a SubjectAccessReview");
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("the review")
        .status
        .is_some_and(|s| s.allowed)
}

/// Sets the Role's verbs on Pods and waits until the authorizer answers accordingly.
async fn role_allows(client: &kube::Client, verbs: &[&str]) {
    let role: Role = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": ACCOUNT, "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}],
    }))
    .expect("a Role");
    Api::<Role>::namespaced(client.clone(), NS)
        .patch(
            ACCOUNT,
            &PatchParams::apply("accounts-test").force(),
            &Patch::Apply(&role),
        )
        .await
        .expect("the Role applied");
    for verb in ["list", "delete"] {
        let want = verbs.contains(&verb);
        eventually(&format!("RBAC to answer {want} for {verb}"), || async {
            (may(client, verb).await == want).then_some(())
        })
        .await;
    }
}

/// Runs the chaos command (the SampleDB chaos CronJob's, aimed at the victim) in a Job's Pod
/// as the account; returns the Pod once it terminated.
async fn run_kubectl(client: &kube::Client, job: &str) -> Pod {
    let job_object: Job = serde_json::from_value(json!({
        "metadata": {"name": job, "namespace": NS},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "serviceAccountName": ACCOUNT,
            "automountServiceAccountToken": true,
            "restartPolicy": "Never",
            "containers": [{"name": "kubectl", "image": "registry.k8s.io/kubectl:v1.36.3",
                            "command": ["kubectl", "delete", "pod", "--namespace", NS,
                                        "--selector", "app=victim", "--wait=false"]}]}}}
    }))
    .expect("a Job");
    Api::<Job>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &job_object)
        .await
        .expect("the Job created");
    terminated_pod_of_job(&Api::namespaced(client.clone(), NS), job).await
}

fn phase_and_message(pod: &Pod) -> (String, String) {
    let status = pod.status.clone().unwrap_or_default();
    let message = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| c.state?.terminated?.message)
        .collect::<Vec<_>>()
        .join("\n");
    (status.phase.unwrap_or_default(), message)
}

/// (uid, labels, owner references) of the victim, which must not change while it stands.
async fn victim(client: &kube::Client) -> Option<(String, Value, Value)> {
    let pod = Api::<Pod>::namespaced(client.clone(), NS)
        .get_opt("victim")
        .await
        .expect("get the victim")?;
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    Some((
        pod.uid().unwrap_or_default(),
        json!(pod.labels()),
        json!(pod.owner_references()),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real control plane only (its RBAC decides): cargo xtask ci runs it in the real pass"]
async fn a_pods_kubectl_runs_as_its_service_account_and_the_chaos_role_needs_both_its_verbs() {
    assert!(
        real_cluster(),
        "run with WINDLASS_TEST_CLUSTER=real: kube-apiserver's RBAC is what decides here"
    );
    let env = Env::start().await;
    let client = env.client.clone();
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": ACCOUNT, "namespace": NS}}))
            .expect("a ServiceAccount");
    Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &account)
        .await
        .expect("the ServiceAccount");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": ACCOUNT, "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NS}],
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &binding)
        .await
        .expect("the RoleBinding");
    let victim_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "victim", "namespace": NS, "labels": {"app": "victim"}},
        "spec": {"containers": [{"name": "db", "image": "sampledb:16.4"}]},
    }))
    .expect("a Pod");
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &victim_pod)
        .await
        .expect("the victim Pod");
    let before = victim(&client).await.expect("the victim stands");
    let user = format!("system:serviceaccount:{NS}:{ACCOUNT}");

    // The Role without `delete`: the list passes, the delete is refused (403), the Pod fails.
    role_allows(&client, &["list"]).await;
    let pod = run_kubectl(&client, "without-delete").await;
    let (phase, message) = phase_and_message(&pod);
    assert_eq!(phase, "Failed", "{message}");
    assert!(
        message.starts_with("Error from server (Forbidden): ")
            && message.contains(&user)
            && message.contains("cannot delete resource \"pods\""),
        "{message}"
    );
    assert_eq!(victim(&client).await.as_ref(), Some(&before));

    // Without `list`: kubectl cannot find the Pods its selector names.
    role_allows(&client, &["delete"]).await;
    let pod = run_kubectl(&client, "without-list").await;
    let (phase, message) = phase_and_message(&pod);
    assert_eq!(phase, "Failed", "{message}");
    assert!(
        message.contains(&user) && message.contains("cannot list resource \"pods\""),
        "{message}"
    );
    assert_eq!(victim(&client).await.as_ref(), Some(&before));

    // The chaos Role as the plugin writes it (list, delete): the command succeeds and the
    // victim goes.
    role_allows(&client, &["list", "delete"]).await;
    let pod = run_kubectl(&client, "with-both").await;
    let (phase, message) = phase_and_message(&pod);
    assert_eq!(phase, "Succeeded", "{message}");
    eventually("the victim deleted", || async {
        victim(&client).await.is_none().then_some(())
    })
    .await;
}
