// A plugin served natively, outside WebAssembly: `node serve.js ENTRY.js`, ENTRY.js exporting
// `reconciler` (windlass.plugin({...})).
//
// Reads one request per line on stdin and writes one answer per line on stdout, until stdin
// ends; before the first, it writes `reconciler.info()`, the WIT `plugin-info`, as a line. It is how the host benchmark's native variants (host/examples/common/sampledb_native.rs) run a
// JavaScript plugin beside its component, to measure what the sandbox costs; nothing in a
// deployed host uses it. Each request goes through `reconciler.reconcile`, the function the
// component exports: the same JSON texts in and out.
//
// A request is the WIT `request` as a JSON object (`phase`, `parent`, `observed`, `desired`,
// `config`, `now`; the objects as JSON texts); the answer is `{"ok": RESPONSE}` with the WIT
// `response` as the component returns it, or `{"err": {"tag", "val"}}` with the plugin-error.
// The plugin's log lines go to stderr (natively, windlass.js logs with console.error).

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";

/** The answer line to one request line. */
export function answer(reconciler, line) {
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    return JSON.stringify({ err: { tag: "failed", val: `request is not JSON: ${e.message}` } });
  }
  try {
    return JSON.stringify({ ok: reconciler.reconcile(req) });
  } catch (e) {
    const err = typeof e?.tag === "string" ? e : { tag: "failed", val: String(e?.message ?? e) };
    return JSON.stringify({ err: { tag: err.tag, val: err.val } });
  }
}

async function main(entry) {
  if (!entry) {
    console.error("usage: node serve.js ENTRY.js");
    process.exit(2);
  }
  const { reconciler } = await import(pathToFileURL(resolve(entry)).href);
  process.stdout.write(JSON.stringify(reconciler.info()) + "\n");
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (line.trim() !== "") {
      process.stdout.write(answer(reconciler, line) + "\n");
    }
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  await main(process.argv[2]);
}
