"""Unit tests of sampledb-primary, run natively through windlass.testing: `./test.sh`.

`Cases` runs every conformance case of host/tests/cases/primary/ (one test each) and compares
with what the host recorded in its expected.yaml, less what the host adds itself.
"""

import os
import unittest

import primary
from primary import Primary
from windlass import InvalidParent
from windlass.testing import Harness, yaml_docs

NAME = "orders"
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "tests", "cases", "primary")


def parent(current=None, name=NAME, uid=None):
    obj = {"apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB", "metadata": {"name": name}}
    if current is not None:
        obj["status"] = {"primary": current}
        if uid is not None:
            obj["status"]["primaryUID"] = uid
    return obj


def pod(ordinal, ready=True, instance=NAME, deleting=False, statefulset=True, made=1):
    """A database Pod; `made` counts how often a Pod of its name has been made (its uid)."""
    name = f"{instance}-{ordinal}"
    labels = {"app.kubernetes.io/instance": instance}
    if statefulset:
        labels["statefulset.kubernetes.io/pod-name"] = name
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "uid": uid(ordinal, made), "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def uid(ordinal, made=1):
    return f"uid-{NAME}-{ordinal}-{made}"


def client_service():
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME},
        "spec": {"selector": {"app.kubernetes.io/instance": NAME}},
    }


SWITCHOVER = {
    "samples.windlass.dev/switchover-to": "orders-1",
    "samples.windlass.dev/switchover-from": "orders-0",
    "samples.windlass.dev/switchover-for": "the upgrade to 17.0",
}


def statefulset(annotations=None):
    """The desired StatefulSet an earlier plugin produced, with `annotations`."""
    meta = {"name": NAME}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta, "spec": {"replicas": 3}}


HEADLESS = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{NAME}-headless"}}


def run(current=None, observed=(), desired=(), current_uid=None):
    return Harness(parent(current, uid=current_uid)).observed(list(observed)).desired(list(desired)).run(Primary)


def roles(out):
    return {
        obj["metadata"]["name"]: obj["metadata"]["labels"][primary.ROLE_LABEL]
        for obj in out.desired
        if obj["kind"] == "Pod"
    }


def events(out):
    return [(e.warning, e.reason, e.message) for e in out.events]


class ChoosePrimary(unittest.TestCase):
    def test_keeps_the_ready_current_primary(self):
        self.assertEqual(primary.choose_primary(NAME, "orders-2", ["orders-0", "orders-2"]), "orders-2")

    def test_lowest_ordinal_numerically(self):
        self.assertEqual(primary.choose_primary(NAME, None, ["orders-10", "orders-9"]), "orders-9")

    def test_none_without_ready_pods(self):
        self.assertIsNone(primary.choose_primary(NAME, "orders-0", []))

    def test_unexpected_names_sort_last(self):
        self.assertEqual(primary.choose_primary(NAME, None, ["orders-x", "orders-3"]), "orders-3")

    def test_a_primary_made_again_gives_way_to_a_ready_replica(self):
        self.assertEqual(primary.choose_primary(NAME, "orders-0", ["orders-0", "orders-2"], True), "orders-2")

    def test_a_primary_made_again_is_kept_when_no_other_pod_is_ready(self):
        self.assertEqual(primary.choose_primary(NAME, "orders-0", ["orders-0"], True), "orders-0")

    def test_made_again_only_when_both_uids_are_known_and_differ(self):
        uids = {"orders-0": "b"}
        self.assertTrue(primary.made_again("orders-0", "a", uids))
        self.assertFalse(primary.made_again("orders-0", "b", uids))
        self.assertFalse(primary.made_again("orders-0", None, uids))
        self.assertFalse(primary.made_again("orders-0", "a", {"orders-0": None}))
        self.assertFalse(primary.made_again("orders-1", "a", uids))


class Reconcile(unittest.TestCase):
    def test_first_election(self):
        out = run(observed=[pod(1), pod(0), pod(2, ready=False)], desired=[HEADLESS, client_service()])
        self.assertEqual(out.status_fragment, {"primary": "orders-0", "primaryUID": uid(0)})
        self.assertEqual(roles(out), {"orders-0": "primary", "orders-1": "replica", "orders-2": "replica"})
        self.assertEqual(events(out), [(False, "Elected", "orders-0 is the primary")])
        condition = out.condition_of("PrimaryElected")
        self.assertEqual((condition.status, condition.reason), (True, "Elected"))
        self.assertIsNone(out.requeue)

    def test_role_patches_hold_only_the_label_in_ordinal_order(self):
        out = run(observed=[pod(1), pod(0)])
        self.assertEqual(
            out.desired,
            [
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-0", "labels": {primary.ROLE_LABEL: "primary"}}},
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-1", "labels": {primary.ROLE_LABEL: "replica"}}},
            ],
        )

    def test_points_only_the_client_service_at_the_primary(self):
        out = run(observed=[pod(0)], desired=[HEADLESS, client_service()])
        self.assertEqual(out.desired[0], HEADLESS)
        self.assertEqual(
            out.find("v1/Service", NAME)["spec"]["selector"],
            {"app.kubernetes.io/instance": NAME, primary.ROLE_LABEL: "primary"},
        )

    def test_does_not_invent_the_service(self):
        out = run(observed=[pod(0)], desired=[HEADLESS])
        self.assertEqual([obj["kind"] for obj in out.desired], ["Service", "Pod"])

    def test_keeps_a_ready_primary_quietly(self):
        out = run("orders-1", observed=[pod(0), pod(1)], current_uid=uid(1))
        self.assertEqual(out.status_fragment, {"primary": "orders-1", "primaryUID": uid(1)})
        self.assertEqual(out.events, [])

    def test_a_status_without_a_uid_keeps_the_primary_by_name_and_records_its_uid(self):
        out = run("orders-1", observed=[pod(0), pod(1, made=2)])
        self.assertEqual(out.status_fragment, {"primary": "orders-1", "primaryUID": uid(1, 2)})
        self.assertEqual(out.events, [])

    def test_fails_over_from_a_primary_made_again_even_once_it_is_ready(self):
        # The primary's Pod was deleted and the StatefulSet's new one is Ready already: no
        # reconcile saw it gone, and still a replica takes over.
        out = run("orders-1", observed=[pod(0), pod(1, made=2), pod(2)], current_uid=uid(1))
        self.assertEqual(out.status_fragment, {"primary": "orders-0", "primaryUID": uid(0)})
        self.assertEqual(roles(out), {"orders-0": "primary", "orders-1": "replica", "orders-2": "replica"})
        self.assertEqual(events(out), [(True, "FailedOver", "primary moved from orders-1 to orders-0")])

    def test_a_primary_made_again_is_elected_again_when_no_other_pod_is_ready(self):
        out = run("orders-1", observed=[pod(0, ready=False), pod(1, made=2)], current_uid=uid(1))
        self.assertEqual(out.status_fragment, {"primary": "orders-1", "primaryUID": uid(1, 2)})
        self.assertEqual(roles(out), {"orders-0": "replica", "orders-1": "primary"})
        self.assertEqual(out.events, [])

    def test_fails_over_when_the_primary_is_not_ready(self):
        out = run("orders-0", observed=[pod(0, ready=False), pod(1), pod(2)])
        self.assertEqual(out.status_fragment, {"primary": "orders-1", "primaryUID": uid(1)})
        self.assertEqual(roles(out)["orders-0"], "replica")
        self.assertEqual(events(out), [(True, "FailedOver", "primary moved from orders-0 to orders-1")])

    def test_fails_over_when_the_primary_is_gone_or_deleting(self):
        out = run("orders-0", observed=[pod(0, deleting=True), pod(1)])
        self.assertEqual(out.status_fragment, {"primary": "orders-1", "primaryUID": uid(1)})
        self.assertNotIn("orders-0", roles(out))

    def test_a_planned_switchover_moves_the_primary_to_the_ready_pod_asked_for(self):
        sts = statefulset(SWITCHOVER)
        out = run("orders-0", observed=[pod(0), pod(1), pod(2)], desired=[sts, client_service()], current_uid=uid(0))
        self.assertEqual(out.status_fragment, {"primary": "orders-1", "primaryUID": uid(1)})
        self.assertEqual(roles(out), {"orders-0": "replica", "orders-1": "primary", "orders-2": "replica"})
        self.assertEqual(
            events(out),
            [(False, "Switchover", "planned switchover from orders-0 to orders-1 for the upgrade to 17.0")],
        )
        self.assertEqual(out.find("apps/v1/StatefulSet", NAME), sts, "passed on unchanged")
        # Asked again once it is done: nothing more happens.
        again = run("orders-1", observed=[pod(0), pod(1), pod(2)], desired=[statefulset(SWITCHOVER)], current_uid=uid(1))
        self.assertEqual(again.status_fragment, {"primary": "orders-1", "primaryUID": uid(1)})
        self.assertEqual(again.events, [])

    def test_a_switchover_to_a_pod_not_ready_or_not_there_keeps_the_primary(self):
        for observed in ([pod(0), pod(1, ready=False), pod(2)], [pod(0), pod(1, deleting=True)], [pod(0)]):
            out = run("orders-0", observed=observed, desired=[statefulset(SWITCHOVER)], current_uid=uid(0))
            self.assertEqual(out.status_fragment, {"primary": "orders-0", "primaryUID": uid(0)})
            self.assertEqual(out.events, [])

    def test_a_switchover_asked_of_another_primary_is_not_carried_out(self):
        # Asked from orders-0 on a stale status; orders-2 is the primary now.
        out = run("orders-2", observed=[pod(0), pod(1), pod(2)], desired=[statefulset(SWITCHOVER)], current_uid=uid(2))
        self.assertEqual(out.status_fragment, {"primary": "orders-2", "primaryUID": uid(2)})
        self.assertEqual(out.events, [])

    def test_a_switchover_request_does_not_stop_a_failover(self):
        # The primary went unready while a switchover to orders-2 was asked: orders-2 (Ready)
        # takes over, and the event says it was a failover, not a planned change.
        out = run("orders-0", observed=[pod(0, ready=False), pod(1), pod(2)], desired=[statefulset({**SWITCHOVER, primary.SWITCHOVER_TO: "orders-2"})], current_uid=uid(0))
        self.assertEqual(out.status_fragment, {"primary": "orders-2", "primaryUID": uid(2)})
        self.assertEqual(events(out), [(True, "FailedOver", "primary moved from orders-0 to orders-2")])
        # Without a reason annotation the event says where the request came from.
        out = run("orders-0", observed=[pod(0), pod(1)], desired=[statefulset({primary.SWITCHOVER_TO: "orders-1"})])
        self.assertEqual(events(out), [(False, "Switchover", "planned switchover from orders-0 to orders-1 for a request on the StatefulSet")])

    def test_no_ready_pod_keeps_the_last_primary_and_requeues(self):
        out = run("orders-0", observed=[pod(0, ready=False)], desired=[client_service()], current_uid=uid(0))
        self.assertEqual(out.status_fragment, {})
        self.assertEqual(roles(out), {"orders-0": "replica"})
        condition = out.condition_of("PrimaryElected")
        self.assertEqual((condition.status, condition.reason), (False, "NoReadyReplica"))
        self.assertEqual(out.events, [])
        self.assertEqual(out.requeue, 10)

    def test_with_no_ready_pod_the_last_primary_is_kept_as_the_pod_now_of_its_name(self):
        # Every Pod went down and was made again: the last primary's new Pod is the one to keep
        # when it comes back, rather than a replica that may lag behind it.
        out = run("orders-1", observed=[pod(0, ready=False, made=2), pod(1, ready=False, made=2)], current_uid=uid(1))
        self.assertEqual(out.status_fragment, {"primaryUID": uid(1, 2)})
        back = run("orders-1", observed=[pod(0, made=2), pod(1, made=2)], current_uid=uid(1, 2))
        self.assertEqual(back.status_fragment, {"primary": "orders-1", "primaryUID": uid(1, 2)})
        self.assertEqual(back.events, [])

    def test_ignores_other_pods_and_kinds(self):
        observed = [
            pod(0, instance="billing"),
            pod(0, statefulset=False),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orders-0"}},
        ]
        out = run(observed=observed)
        self.assertEqual(out.status_fragment, {})
        self.assertEqual(roles(out), {})

    def test_missing_name_is_an_invalid_parent(self):
        with self.assertRaises(InvalidParent) as caught:
            Harness({"metadata": {}}).run(Primary)
        self.assertEqual(str(caught.exception), "metadata.name: missing")

    def test_finalize_returns_the_desired_set_unchanged(self):
        out = Harness(parent("orders-0")).desired([HEADLESS, client_service()]).finalizing().run(Primary)
        self.assertTrue(out.is_finalized)
        self.assertEqual(out.desired, [HEADLESS, client_service()])
        self.assertEqual((out.status_fragment, out.conditions, out.events), ({}, [], []))


def read_yaml(case, file):
    path = os.path.join(case, file)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return yaml_docs(f.read())


def without_namespace(obj):
    """The object less metadata.namespace, which the host fills in."""
    obj = {**obj, "metadata": dict(obj.get("metadata") or {})}
    obj["metadata"].pop("namespace", None)
    return obj


def check_case(test, case):
    """Runs a conformance case through the harness and compares with its expected.yaml, less
    the host's additions: each condition's and event's `plugin`, and metadata.namespace."""
    out = (
        Harness(read_yaml(case, "parent.yaml")[0])
        .observed(read_yaml(case, "observed.yaml"))
        .desired(read_yaml(case, "desired.yaml"))
        .run(Primary)
    )
    expected = read_yaml(case, "expected.yaml")[0]
    test.assertEqual(
        [without_namespace(o) for o in out.desired],
        [without_namespace(o) for o in expected["desired"]],
    )
    test.assertEqual(out.status_fragment, expected["status"])
    test.assertEqual(
        [
            {"type": c.kind, "status": "True" if c.status else "False", "reason": c.reason, "message": c.message}
            for c in out.conditions
        ],
        [{k: v for k, v in c.items() if k != "plugin"} for c in expected["conditions"]],
    )
    test.assertEqual(
        [{"type": "Warning" if e.warning else "Normal", "reason": e.reason, "message": e.message} for e in out.events],
        [{k: v for k, v in e.items() if k != "plugin"} for e in expected["events"]],
    )
    test.assertNotIn("finalized", expected)
    test.assertFalse(out.is_finalized)


class Cases(unittest.TestCase):
    """One test per directory of host/tests/cases/primary/, named after it."""

    def test_every_case_directory_has_a_test(self):
        self.assertGreaterEqual(len(CASE_DIRS), 4)


CASE_DIRS = sorted(d for d in os.listdir(CASES) if os.path.isdir(os.path.join(CASES, d)))
for _dir in CASE_DIRS:
    setattr(
        Cases,
        "test_case_" + _dir.replace("-", "_"),
        lambda self, case=os.path.join(CASES, _dir): check_case(self, case),
    )


if __name__ == "__main__":
    unittest.main()
