// The host's conformance cases for this plugin (host/tests/cases/conventions/*), run natively
// through the SDK's harness: node --test. The host runs the same cases on the component.
import assert from "node:assert/strict";
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { test } from "node:test";
import { harness } from "../../guest-sdk/js/testing.js";
import { reconciler } from "./conventions.js";

const CASES = new URL("../../host/tests/cases/conventions/", import.meta.url);

// What the host does around the plugin: it withholds Secrets from plugins not granted them and
// passes them on after the plugin's own output (see labels-and-resources/expected.yaml), and puts
// the objects a plugin adds into the parent's namespace.
const withheld = (o) => o.apiVersion === "v1" && o.kind === "Secret";
const namespaced = (namespace) => (o) => ({ ...o, metadata: { namespace, ...o.metadata } });

/** WIT `plugin-error` cases as the host prints them. */
const KIND = { "invalid-parent": "invalid parent", "invalid-config": "invalid config", failed: "failed" };

for (const name of readdirSync(CASES).sort()) {
  const file = (f) => new URL(`${name}/${f}`, CASES);
  const load = (f, fallback) => (existsSync(file(f)) ? yamlDocs(readFileSync(file(f), "utf8")) : fallback);
  test(`conformance case ${name}`, () => {
    const [parent] = load("parent.yaml");
    const desired = load("desired.yaml", []);
    const [config] = load("config.yaml", [{}]);
    const run = () => harness({ parent, desired: desired.filter((o) => !withheld(o)), config }).run(reconciler);
    if (existsSync(file("error.txt"))) {
      const want = readFileSync(file("error.txt"), "utf8").trim();
      assert.throws(run, (e) => {
        assert.equal(`plugin sampledb-conventions: ${KIND[e.tag]}: ${e.message}`, want);
        return true;
      });
      return;
    }
    const out = run();
    const [expected] = load("expected.yaml");
    const objects = out.desired.map(namespaced(parent.metadata.namespace));
    assert.deepEqual([...objects, ...desired.filter(withheld)], expected.desired);
    assert.deepEqual(out.statusFragment, expected.status);
    assert.deepEqual(out.conditions, expected.conditions);
    assert.deepEqual(out.events, expected.events);
  });
}

test("the yaml loader reads what the cases use", () => {
  const docs = yamlDocs(
    "# c\na: 1\nb: '16.4'\nc: \"x\"\nd:\n- e: f\n  g: [ ]\n- h\ni: {}\nj: 0 3 * * *\nk: true\n---\nl: null\n",
  );
  assert.deepEqual(docs, [{ a: 1, b: "16.4", c: "x", d: [{ e: "f", g: [] }, "h"], i: {}, j: "0 3 * * *", k: true }, { l: null }]);
});

/**
 * The block YAML the case files are written in: mappings, sequences (also at the indentation of
 * their key), plain, quoted and empty-flow scalars, full-line comments and `---`. Test code only.
 */
function yamlDocs(text) {
  const docs = [[]];
  for (const raw of text.split("\n")) {
    if (/^---\s*$/.test(raw)) docs.push([]);
    else if (raw.trim() !== "" && !/^\s*#/.test(raw)) docs.at(-1).push(raw.replace(/\s+$/, ""));
  }
  return docs.filter((d) => d.length > 0).map((lines) => block(lines, 0, indentOf(lines[0]))[0]);
}

const indentOf = (line) => line.length - line.trimStart().length;
const isItem = (line, indent) => indentOf(line) === indent && /^-( |$)/.test(line.trimStart());

function block(lines, i, indent) {
  return isItem(lines[i], indent) ? sequence(lines, i, indent) : mapping(lines, i, indent);
}

function sequence(lines, i, indent) {
  const out = [];
  while (i < lines.length && isItem(lines[i], indent)) {
    const rest = lines[i].trimStart().slice(2);
    if (rest.trim() === "") {
      const [v, next] = block(lines, i + 1, indentOf(lines[i + 1]));
      out.push(v);
      i = next;
    } else if (/^[^'"{[][^:]*:( |$)/.test(rest)) {
      // `- key: value` opens a mapping at the item's content column.
      const copy = [...lines];
      copy[i] = " ".repeat(indent + 2) + rest;
      const [v, next] = mapping(copy, i, indent + 2);
      out.push(v);
      i = next;
    } else {
      out.push(scalar(rest));
      i += 1;
    }
  }
  return [out, i];
}

function mapping(lines, i, indent) {
  const out = {};
  while (i < lines.length && indentOf(lines[i]) === indent && !isItem(lines[i], indent)) {
    const line = lines[i].trimStart();
    const colon = line.search(/:( |$)/);
    assert.ok(colon > 0, `not a mapping entry: ${line}`);
    const key = line.slice(0, colon);
    const rest = line.slice(colon + 1).trim();
    i += 1;
    if (rest !== "") {
      out[key] = scalar(rest);
    } else if (i < lines.length && (indentOf(lines[i]) > indent || isItem(lines[i], indent))) {
      [out[key], i] = block(lines, i, indentOf(lines[i]));
    } else {
      out[key] = null;
    }
  }
  return [out, i];
}

function scalar(s) {
  if (s.startsWith("'")) return s.slice(1, -1).replaceAll("''", "'");
  if (s.startsWith('"')) return JSON.parse(s);
  if (/^\{\s*\}$/.test(s)) return {};
  if (/^\[\s*\]$/.test(s)) return [];
  if (s === "true" || s === "false") return s === "true";
  if (s === "null" || s === "~") return null;
  if (/^-?\d+$/.test(s)) return Number(s);
  return s;
}
