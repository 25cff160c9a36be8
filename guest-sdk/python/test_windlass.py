"""Unit tests of the Python SDK, natively: `./test.sh` (needs PyYAML for the harness)."""

import json
import unittest

import windlass
from windlass import Failed, Info, InvalidConfig, InvalidParent, Output, Plugin
from windlass.context import Context
from windlass.plugin import run_json
from windlass.testing import Harness, yaml_docs

PARENT = """
apiVersion: example.windlass.dev/v1alpha1
kind: Greeting
metadata: {name: hi, namespace: demo, uid: u-1, generation: 3, labels: {team: a}}
spec: {message: hello}
status: {seen: true}
"""


def config_map(name, **data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


class Greeter(Plugin):
    def info(self):
        return Info("greeter", "0.1.0", parents=["example.windlass.dev/v1alpha1/Greeting"], children=["v1/ConfigMap"])

    def reconcile(self, ctx):
        message = ctx.spec.get("message")
        if not isinstance(message, str) or not message:
            raise InvalidParent("spec.message: must be a non-empty string")
        if "prefix" in ctx.config and not isinstance(ctx.config["prefix"], str):
            raise InvalidConfig("prefix: must be a string")
        out = ctx.output()
        out.apply(config_map(f"{ctx.name}-greeting", message=ctx.config.get("prefix", "") + message))
        out.status("message", message)
        out.condition("Greeted", True, "Published", "done")
        return out


class Raising(Plugin):
    """Raises what the parent's spec.raise names."""

    def info(self):
        return Info("raising", "0.1.0", parents=["example.windlass.dev/v1alpha1/Greeting"])

    def reconcile(self, ctx):
        what = ctx.spec.get("raise")
        if what == "key":
            return ctx.spec["missing"]
        if what == "failed":
            raise Failed("the backend is down")
        if what == "none":
            return None
        if what == "not-json":
            out = ctx.output()
            out.status("when", object())
            return out
        return ctx.output()


class Finalizing(Greeter):
    def finalize(self, ctx):
        out = ctx.output()
        out.remove("v1/ConfigMap", f"{ctx.name}-greeting")
        out.finalized(ctx.find_observed("v1/ConfigMap", f"{ctx.name}-greeting") is None)
        return out


class ContextReadsTheParent(unittest.TestCase):
    def test_fields_of_the_parent(self):
        ctx = Harness.from_yaml(PARENT).now("2026-02-03T04:05:06Z").context()
        self.assertEqual((ctx.phase, ctx.name, ctx.namespace, ctx.uid, ctx.generation), ("reconcile", "hi", "demo", "u-1", 3))
        self.assertEqual((ctx.spec, ctx.status, ctx.config, ctx.now), ({"message": "hello"}, {"seen": True}, {}, "2026-02-03T04:05:06Z"))
        self.assertEqual(ctx.label("team"), "a")
        self.assertIsNone(ctx.label("nope"))

    def test_absent_fields_have_empty_values(self):
        ctx = Harness({"apiVersion": "x/v1", "kind": "X"}).context()
        self.assertEqual((ctx.name, ctx.namespace, ctx.uid, ctx.generation, ctx.spec, ctx.status), ("", None, "", 0, {}, {}))

    def test_a_spec_that_is_no_object_is_an_invalid_parent(self):
        with self.assertRaisesRegex(InvalidParent, "^spec: must be an object$"):
            Harness({"spec": [1]}).context().spec

    def test_observed_of_a_kind_and_by_name(self):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hi-0"}}
        ctx = Harness.from_yaml(PARENT).observed([config_map("a"), pod, config_map("b")]).context()
        self.assertEqual([o["metadata"]["name"] for o in ctx.observed_of("v1/ConfigMap")], ["a", "b"])
        self.assertEqual(ctx.find_observed("v1/Pod", "hi-0"), pod)
        self.assertIsNone(ctx.find_observed("v1/Pod", "a"))
        self.assertIsNone(ctx.find_observed("apps/v1/Pod", "hi-0"))

    def test_output_starts_from_a_copy_of_the_desired_set(self):
        ctx = Harness.from_yaml(PARENT).desired([config_map("a", k="v")]).context()
        out = ctx.output()
        out.find("v1/ConfigMap", "a")["data"]["k"] = "changed"
        self.assertEqual(ctx.desired, [config_map("a", k="v")])


class FromJson(unittest.TestCase):
    """The host's JSON texts are read as the Rust SDK reads them."""

    def parse(self, parent='{"metadata":{"name":"a"}}', observed=(), desired=(), config="{}"):
        return Context.from_json("reconcile", parent, list(observed), list(desired), config, "now")

    def test_an_unreadable_parent_is_an_invalid_parent(self):
        with self.assertRaisesRegex(InvalidParent, "^not valid JSON: "):
            self.parse(parent="{")
        with self.assertRaisesRegex(InvalidParent, "^not a JSON object$"):
            self.parse(parent="[]")

    def test_an_unreadable_config_is_an_invalid_config(self):
        with self.assertRaisesRegex(InvalidConfig, "^not valid JSON: "):
            self.parse(config="{")
        with self.assertRaisesRegex(InvalidConfig, "^not a JSON object$"):
            self.parse(config="[]")

    def test_an_empty_config_is_an_empty_object(self):
        self.assertEqual(self.parse(config=" ").config, {})

    def test_unreadable_objects_fail_naming_their_place(self):
        with self.assertRaisesRegex(Failed, r"^observed\[1\] is not valid JSON: "):
            self.parse(observed=["{}", "nope"])
        with self.assertRaisesRegex(Failed, r"^desired\[0\] is not valid JSON: "):
            self.parse(desired=["nope"])


class OutputEditsTheDesiredSet(unittest.TestCase):
    def test_apply_adds_or_replaces_by_kind_and_name(self):
        out = Output([config_map("a", k="1"), config_map("b")])
        out.apply(config_map("a", k="2"))
        out.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}})
        self.assertEqual(out.desired, [config_map("a", k="2"), config_map("b"), {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}])

    def test_apply_holds_a_copy(self):
        out, cm = Output(), config_map("a", k="1")
        out.apply(cm)
        cm["data"]["k"] = "2"
        self.assertEqual(out.find("v1/ConfigMap", "a")["data"], {"k": "1"})

    def test_apply_copies_nested_values_and_keeps_other_types_as_deepcopy_did(self):
        class Tag(dict):
            pass

        stamp = Tag(at="noon")
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"list": [{"n": 1}, [2, 3.5, True, None]], "tag": stamp}}
        held = Output().apply(obj)
        self.assertEqual(held, obj)
        obj["metadata"]["labels"]["x"] = "2"
        obj["data"]["list"][0]["n"] = 9
        obj["data"]["list"][1].append(4)
        stamp["at"] = "dusk"
        self.assertEqual(held["metadata"]["labels"], {"x": "1"})
        self.assertEqual(held["data"]["list"], [{"n": 1}, [2, 3.5, True, None]])
        self.assertIs(type(held["data"]["tag"]), Tag)
        self.assertEqual(held["data"]["tag"], {"at": "noon"})

    def test_apply_needs_api_version_kind_and_name(self):
        for obj in ({"kind": "ConfigMap", "metadata": {"name": "a"}}, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}, "text"):
            with self.assertRaisesRegex(Failed, "^a child needs apiVersion, kind and metadata.name: "):
                Output().apply(obj)

    def test_find_returns_the_object_held_to_edit_in_place(self):
        out = Output([config_map("a")])
        out.find("v1/ConfigMap", "a")["data"]["k"] = "v"
        self.assertEqual(out.desired, [config_map("a", k="v")])
        self.assertIsNone(out.find("v1/ConfigMap", "b"))
        self.assertIsNone(out.find("v1/Secret", "a"))

    def test_remove_returns_the_object(self):
        out = Output([config_map("a"), config_map("b")])
        self.assertEqual(out.remove("v1/ConfigMap", "a"), config_map("a"))
        self.assertIsNone(out.remove("v1/ConfigMap", "a"))
        self.assertEqual(out.desired, [config_map("b")])

    def test_kinds_of_groups_match_whole(self):
        deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}}
        out = Output([deploy])
        self.assertIs(out.find("apps/v1/Deployment", "a"), out.desired[0])
        self.assertIsNone(out.find("v1/Deployment", "a"))
        self.assertEqual(windlass.kind_of(deploy), "apps/v1/Deployment")


class OutputReports(unittest.TestCase):
    def test_status_by_key_or_merged_from_a_dict(self):
        out = Output()
        out.status("a", 1)
        out.status({"b": 2, "a": 3})
        self.assertEqual(out.status_fragment, {"a": 3, "b": 2})
        self.assertEqual(json.loads(out.to_parts().status), {"a": 3, "b": 2})

    def test_no_status_is_none(self):
        self.assertIsNone(Output().to_parts().status)

    def test_a_condition_replaces_one_of_its_kind(self):
        out = Output()
        out.condition("Ready", False, "Waiting", "not yet")
        out.condition("Synced", True, "Applied", "ok")
        out.condition("Ready", True, "Done", "ready")
        self.assertEqual([(c.kind, c.status, c.reason) for c in out.conditions], [("Synced", True, "Applied"), ("Ready", True, "Done")])
        self.assertEqual(out.condition_of("Ready").message, "ready")

    def test_events_normal_or_warning(self):
        out = Output()
        out.event("Created", "made it")
        out.event("Lost", "gone", warning=True)
        self.assertEqual([(e.warning, e.reason, e.message) for e in out.events], [(False, "Created", "made it"), (True, "Lost", "gone")])

    def test_the_earliest_requeue_wins(self):
        out = Output()
        self.assertIsNone(out.requeue)
        out.requeue_after(30)
        out.requeue_after(10)
        out.requeue_after(20)
        self.assertEqual(out.to_parts().requeue_after_secs, 10)

    def test_a_requeue_may_be_a_timedelta_as_in_the_rust_and_go_sdks(self):
        import datetime

        out = Output()
        out.requeue_after(datetime.timedelta(minutes=2, milliseconds=500))
        out.requeue_after(300)
        self.assertEqual(out.to_parts().requeue_after_secs, 120)

    def test_a_huge_requeue_is_clamped_to_u32(self):
        out = Output()
        out.requeue_after(2**40)
        self.assertEqual(out.to_parts().requeue_after_secs, 2**32 - 1)

    def test_finalized(self):
        out = Output()
        self.assertFalse(out.is_finalized)
        out.finalized()
        self.assertTrue(out.to_parts().finalized)
        out.finalized(False)
        self.assertFalse(out.is_finalized)

    def test_parts_hold_compact_json(self):
        out = Output([config_map("é")])
        self.assertEqual(out.to_parts().desired, ['{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"é"},"data":{}}'])


class Running(unittest.TestCase):
    def test_reconcile_through_the_harness(self):
        out = Harness.from_yaml(PARENT).desired(config_map("earlier")).config({"prefix": "> "}).run(Greeter)
        self.assertEqual(out.desired, [config_map("earlier"), config_map("hi-greeting", message="> hello")])
        self.assertEqual(out.status_fragment, {"message": "hello"})

    def test_the_plugins_errors_come_through(self):
        with self.assertRaisesRegex(InvalidParent, "^spec.message: must be a non-empty string$"):
            Harness.from_yaml(PARENT).with_parent(lambda p: p["spec"].clear()).run(Greeter)
        with self.assertRaisesRegex(InvalidConfig, "^prefix: must be a string$"):
            Harness.from_yaml(PARENT).config({"prefix": 1}).run(Greeter)

    def test_other_exceptions_fail_with_their_type(self):
        def run(what):
            return Harness.from_yaml(PARENT).with_parent(lambda p: p["spec"].update({"raise": what})).run(Raising)

        with self.assertRaisesRegex(Failed, "^KeyError: 'missing'$"):
            run("key")
        with self.assertRaisesRegex(Failed, "^the backend is down$"):
            run("failed")
        with self.assertRaisesRegex(Failed, r"^Raising.reconcile returned NoneType, not windlass.Output$"):
            run("none")
        with self.assertRaisesRegex(Failed, "^output is not JSON: "):
            run("not-json")

    def test_the_default_finalize_keeps_the_desired_set(self):
        out = Harness.from_yaml(PARENT).desired([config_map("earlier")]).finalizing().run(Greeter)
        self.assertEqual((out.desired, out.is_finalized, out.status_fragment, out.conditions), ([config_map("earlier")], True, {}, []))

    def test_a_plugin_may_finalize_itself(self):
        harness = Harness.from_yaml(PARENT).phase("finalize").desired([config_map("hi-greeting")])
        self.assertEqual(harness.run(Finalizing).desired, [])
        self.assertTrue(harness.run(Finalizing).is_finalized)
        self.assertFalse(harness.observed(config_map("hi-greeting")).run(Finalizing).is_finalized)

    def test_the_plugin_sees_only_the_kinds_it_declares(self):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
        harness = Harness.from_yaml(PARENT).observed([pod, config_map("c")])
        self.assertEqual([o["kind"] for o in harness.context(Greeter).observed], ["ConfigMap"])
        self.assertEqual(len(harness.context().observed), 2)

    def test_run_json_is_what_the_component_runs(self):
        parts = run_json(Greeter, "reconcile", json.dumps(yaml_docs(PARENT)[0]), [], [json.dumps(config_map("x"))], "{}", "now")
        self.assertEqual([json.loads(d)["metadata"]["name"] for d in parts.desired], ["x", "hi-greeting"])
        self.assertEqual(json.loads(parts.status), {"message": "hello"})
        with self.assertRaisesRegex(InvalidParent, "^not valid JSON"):
            run_json(Greeter, "reconcile", "{", [], [], "{}", "now")
        with self.assertRaisesRegex(Failed, "^KeyError: 'missing'$"):
            run_json(Raising, "reconcile", '{"spec":{"raise":"key"}}', [], [], "{}", "now")

    def test_serve_answers_each_line_as_the_component_would(self):
        import io

        from windlass.serve import serve

        lines = [
            json.dumps({"phase": "reconcile", "parent": json.dumps(yaml_docs(PARENT)[0]), "observed": [],
                        "desired": [json.dumps(config_map("x"))], "config": "{}", "now": "now"}),
            "",
            json.dumps({"phase": "reconcile", "parent": '{"spec":{"raise":"failed"}}', "observed": [],
                        "desired": [], "config": "{}", "now": "now"}),
            json.dumps({"phase": "reconcile", "parent": "{", "observed": [], "desired": [], "config": "{}", "now": "now"}),
        ]
        out = io.StringIO()
        serve(Greeter, [lines[0], lines[1], lines[3]], out)
        info, *greeter = [json.loads(line) for line in out.getvalue().splitlines()]
        self.assertEqual(
            info,
            {"name": "greeter", "version": "0.1.0", "parentKinds": ["example.windlass.dev/v1alpha1/Greeting"],
             "childKinds": ["v1/ConfigMap"], "readsKinds": [], "finalizes": False},
        )
        self.assertEqual(len(greeter), 2)
        ok = greeter[0]["ok"]
        self.assertEqual([json.loads(d)["metadata"]["name"] for d in ok["desired"]], ["x", "hi-greeting"])
        self.assertEqual(json.loads(ok["status"]), {"message": "hello"})
        self.assertEqual((ok["requeueAfterSecs"], ok["finalized"], ok["events"]), (None, False, []))
        self.assertEqual(greeter[1]["err"]["tag"], "invalid-parent")
        self.assertRegex(greeter[1]["err"]["val"], "^not valid JSON")
        out = io.StringIO()
        serve(Raising, [lines[2]], out)
        self.assertEqual(json.loads(out.getvalue().splitlines()[1]), {"err": {"tag": "failed", "val": "the backend is down"}})

    def test_info_is_checked(self):
        class Bad(Plugin):
            def info(self):
                return {"name": "bad"}

        with self.assertRaisesRegex(TypeError, "not windlass.Info"):
            windlass.plugin.info_of(Bad)
        with self.assertRaisesRegex(TypeError, "list of kinds"):
            Info("x", "0.1.0", parents="v1/Pod")
        with self.assertRaisesRegex(TypeError, "is not a windlass.Plugin"):
            windlass.plugin.instance(object)


class Fixtures(unittest.TestCase):
    def test_yaml_reads_as_the_host_does(self):
        docs = yaml_docs("a: 2026-01-01T00:00:00Z\nb: yes\nc: true\nd: 1.5\n---\n---\nkind: List\nitems: [{x: 1}, {x: 2}]\n")
        self.assertEqual(docs, [{"a": "2026-01-01T00:00:00Z", "b": "yes", "c": True, "d": 1.5}, {"x": 1}, {"x": 2}])

    def test_the_parent_is_one_document(self):
        with self.assertRaisesRegex(ValueError, "one YAML document, not 2"):
            Harness.from_yaml("a: 1\n---\nb: 2\n")

    def test_the_harness_copies_its_inputs(self):
        parent = yaml_docs(PARENT)[0]
        Harness(parent).with_parent(lambda p: p["spec"].clear())
        self.assertEqual(parent["spec"], {"message": "hello"})

    def test_an_unknown_phase_is_refused(self):
        with self.assertRaises(ValueError):
            Harness({}).phase("delete")


class Logging(unittest.TestCase):
    def test_natively_lines_go_to_stderr(self):
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            windlass.log.debug("d")
            windlass.log.warn("w")
        self.assertEqual(err.getvalue(), "[debug] d\n[warn] w\n")


class Exporting(unittest.TestCase):
    def test_the_package_imports_without_the_bindings(self):
        import sys

        self.assertNotIn("wit_world", sys.modules)
        with self.assertRaises(ImportError):
            windlass.export(Greeter)  # natively there are no bindings to export through


if __name__ == "__main__":
    unittest.main()
