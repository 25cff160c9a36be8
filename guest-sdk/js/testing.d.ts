// Types of the Windlass JavaScript SDK's test harness (testing.js).
import type { Context, KubeObject, Output, Phase, Reconciler, WitRequest } from "./windlass.js";

/** The time a harness gives plugins unless told otherwise. */
export const NOW: string;

/** One run's inputs; all but `parent` optional. */
export interface HarnessInput {
  parent: KubeObject;
  observed?: KubeObject[];
  desired?: KubeObject[];
  config?: unknown;
  now?: string;
  phase?: Phase;
}

export interface Harness {
  /** The WIT request the host would send. */
  request(): WitRequest;
  /** The Context the plugin will see. */
  context(): Context;
  /**
   * Runs the plugin's phase natively.
   * @throws {import("./windlass.js").PluginError} what the host would see.
   */
  run(reconciler: Reconciler): Output;
}

/** A harness for one run of a plugin. */
export function harness(input: HarnessInput): Harness;
