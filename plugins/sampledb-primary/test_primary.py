"""Unit tests of the election logic: python3 -m unittest test_primary"""

import json
import unittest

import primary

NAME = "orders"


def parent(current=None, name=NAME):
    obj = {"apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB", "metadata": {"name": name}}
    if current is not None:
        obj["status"] = {"primary": current}
    return obj


def pod(ordinal, ready=True, instance=NAME, deleting=False, statefulset=True):
    name = f"{instance}-{ordinal}"
    labels = {"app.kubernetes.io/instance": instance}
    if statefulset:
        labels["statefulset.kubernetes.io/pod-name"] = name
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def client_service():
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME},
            "spec": {"selector": {"app.kubernetes.io/instance": NAME}},
        }
    )


HEADLESS = json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{NAME}-headless"}})


def roles(election):
    return {
        obj["metadata"]["name"]: obj["metadata"]["labels"][primary.ROLE_LABEL]
        for obj in map(json.loads, election.desired)
        if obj["kind"] == "Pod"
    }


class ChoosePrimary(unittest.TestCase):
    def test_keeps_the_ready_current_primary(self):
        self.assertEqual(primary.choose_primary(NAME, "orders-2", ["orders-0", "orders-2"]), "orders-2")

    def test_lowest_ordinal_numerically(self):
        self.assertEqual(primary.choose_primary(NAME, None, ["orders-10", "orders-9"]), "orders-9")

    def test_none_without_ready_pods(self):
        self.assertIsNone(primary.choose_primary(NAME, "orders-0", []))

    def test_unexpected_names_sort_last(self):
        self.assertEqual(primary.choose_primary(NAME, None, ["orders-x", "orders-3"]), "orders-3")


class Elect(unittest.TestCase):
    def test_first_election(self):
        e = primary.elect(parent(), [pod(1), pod(0), pod(2, ready=False)], [HEADLESS, client_service()])
        self.assertEqual(e.primary, "orders-0")
        self.assertEqual(roles(e), {"orders-0": "primary", "orders-1": "replica", "orders-2": "replica"})
        self.assertEqual(e.events, [{"warning": False, "reason": "Elected", "message": "orders-0 is the primary"}])
        self.assertEqual(e.conditions[0]["reason"], "Elected")
        self.assertTrue(e.conditions[0]["status"])
        self.assertIsNone(e.requeue_after_secs)

    def test_role_patches_hold_only_the_label_in_ordinal_order(self):
        e = primary.elect(parent(), [pod(1), pod(0)], [])
        self.assertEqual(
            [json.loads(text) for text in e.desired],
            [
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-0", "labels": {primary.ROLE_LABEL: "primary"}}},
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-1", "labels": {primary.ROLE_LABEL: "replica"}}},
            ],
        )

    def test_points_only_the_client_service_at_the_primary(self):
        e = primary.elect(parent(), [pod(0)], [HEADLESS, client_service()])
        self.assertEqual(e.desired[0], HEADLESS)  # untouched, byte for byte
        service = json.loads(e.desired[1])
        self.assertEqual(
            service["spec"]["selector"],
            {"app.kubernetes.io/instance": NAME, primary.ROLE_LABEL: "primary"},
        )

    def test_does_not_invent_the_service(self):
        e = primary.elect(parent(), [pod(0)], [HEADLESS])
        self.assertEqual([json.loads(t)["kind"] for t in e.desired], ["Service", "Pod"])

    def test_keeps_a_ready_primary_quietly(self):
        e = primary.elect(parent("orders-1"), [pod(0), pod(1)], [])
        self.assertEqual(e.primary, "orders-1")
        self.assertEqual(e.events, [])

    def test_fails_over_when_the_primary_is_not_ready(self):
        e = primary.elect(parent("orders-0"), [pod(0, ready=False), pod(1), pod(2)], [])
        self.assertEqual(e.primary, "orders-1")
        self.assertEqual(roles(e)["orders-0"], "replica")
        self.assertEqual(
            e.events,
            [{"warning": True, "reason": "FailedOver", "message": "primary moved from orders-0 to orders-1"}],
        )

    def test_fails_over_when_the_primary_is_gone_or_deleting(self):
        e = primary.elect(parent("orders-0"), [pod(0, deleting=True), pod(1)], [])
        self.assertEqual(e.primary, "orders-1")
        self.assertNotIn("orders-0", roles(e))

    def test_no_ready_pod(self):
        e = primary.elect(parent("orders-0"), [pod(0, ready=False)], [client_service()])
        self.assertIsNone(e.primary)
        self.assertEqual(roles(e), {"orders-0": "replica"})
        self.assertFalse(e.conditions[0]["status"])
        self.assertEqual(e.conditions[0]["reason"], "NoReadyReplica")
        self.assertEqual(e.events, [])
        self.assertEqual(e.requeue_after_secs, 10)

    def test_ignores_other_pods(self):
        observed = [pod(0, instance="billing"), pod(0, statefulset=False), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orders-0"}}]
        e = primary.elect(parent(), observed, [])
        self.assertIsNone(e.primary)
        self.assertEqual(roles(e), {})

    def test_missing_name(self):
        with self.assertRaisesRegex(primary.InvalidParent, "^metadata.name: missing$"):
            primary.elect({"metadata": {}}, [], [])


if __name__ == "__main__":
    unittest.main()
