"""Unit tests of {{name}}, natively (no WebAssembly): `python3 -m unittest` (./build.sh runs
them first). The harness needs PyYAML."""

import unittest

from plugin import Greeter
from windlass import InvalidParent
from windlass.testing import Harness

PARENT = """
apiVersion: example.windlass.dev/v1alpha1
kind: Greeting
metadata: {name: hello, namespace: demo}
spec: {message: Hello}
"""


class Greeting(unittest.TestCase):
    def test_publishes_the_message_in_a_config_map(self):
        out = Harness.from_yaml(PARENT).run(Greeter)
        config_map = out.find("v1/ConfigMap", "hello-greeting")
        self.assertEqual(config_map["data"], {"message": "Hello"})
        self.assertEqual(out.status_fragment, {"message": "Hello"})
        greeted = out.condition_of("Greeted")
        self.assertEqual((greeted.status, greeted.reason), (True, "Published"))
        self.assertEqual(greeted.message, "hello-greeting holds the message")
        self.assertEqual((out.events, out.requeue), ([], None))

    def test_keeps_what_earlier_plugins_produced(self):
        earlier = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hello-settings"}, "data": {"colour": "blue"}}
        out = Harness.from_yaml(PARENT).desired([earlier]).run(Greeter)
        self.assertEqual([o["metadata"]["name"] for o in out.desired], ["hello-settings", "hello-greeting"])

    def test_refuses_an_empty_message_naming_the_field(self):
        with self.assertRaises(InvalidParent) as caught:
            Harness.from_yaml(PARENT.replace("{message: Hello}", '{message: ""}')).run(Greeter)
        self.assertEqual(str(caught.exception), "spec.message: must be a non-empty string")

    def test_finalize_has_nothing_to_clean_up(self):
        out = Harness.from_yaml(PARENT).finalizing().run(Greeter)
        self.assertTrue(out.is_finalized)
        self.assertEqual(out.desired, [])


if __name__ == "__main__":
    unittest.main()
