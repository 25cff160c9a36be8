// Types of the Windlass JavaScript SDK (windlass.js). Kubernetes objects are plain JSON objects.

/** A Kubernetes object as JSON: apiVersion, kind and metadata, and anything else. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: {
    name?: string;
    namespace?: string;
    uid?: string;
    generation?: number;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    [field: string]: unknown;
  };
  [field: string]: any;
}

/** Which part of the parent's life the host is running. */
export type Phase = "reconcile" | "finalize";

/** What a plugin declares about itself; the host refuses output beyond it. */
export interface Info {
  /** A short DNS-1123 label naming the plugin. */
  name: string;
  /** The plugin's version (semver). */
  version: string;
  /** Parent kinds, as `group/version/Kind` (`v1/Kind` for core). */
  parents?: string[];
  /** Kinds the plugin produces. */
  children?: string[];
  /** Further kinds the plugin observes without producing them. */
  reads?: string[];
  /** True when the plugin has cleanup to do in the finalize phase. */
  finalizes?: boolean;
}

/** Why a plugin refused to produce an output. */
export class PluginError extends Error {
  constructor(message: string, options?: { cause?: unknown });
  /** The WIT `plugin-error` case. */
  readonly tag: "invalid-parent" | "invalid-config" | "failed";
}
/** The parent's spec cannot be acted on; the message names the field. */
export class InvalidParent extends PluginError {
  readonly tag: "invalid-parent";
}
/** The plugin's config cannot be used; the message names the key. */
export class InvalidConfig extends PluginError {
  readonly tag: "invalid-config";
}
/** Anything else; the host retries with backoff. */
export class Failed extends PluginError {
  readonly tag: "failed";
}

/** Lines into the host's log, tagged with the plugin's name; natively, to stderr. */
export const log: Readonly<{
  debug(message: unknown): void;
  info(message: unknown): void;
  warn(message: unknown): void;
  error(message: unknown): void;
}>;

/** Everything the host gave a plugin for one run. */
export class Context {
  constructor(init: {
    phase?: Phase;
    parent: KubeObject;
    observed?: KubeObject[];
    desired?: KubeObject[];
    config?: any;
    now?: string;
  });
  readonly phase: Phase;
  /** The parent custom resource, with metadata, spec and status as the host last read them. */
  readonly parent: KubeObject;
  /** Objects the host observed: the parent's children and the kinds declared in `reads`. */
  readonly observed: KubeObject[];
  /** The desired set the plugins before this one produced. */
  readonly desired: KubeObject[];
  /** This plugin's config (`{}` when none). */
  readonly config: any;
  /** The time of the run (RFC 3339). */
  readonly now: string;
  /** The parent's `metadata.name`. */
  readonly name: string;
  /** The parent's namespace; undefined for a cluster-scoped parent. */
  readonly namespace: string | undefined;
  /** The parent's `metadata.uid`. */
  readonly uid: string;
  /** The parent's `metadata.generation` (0 when absent). */
  readonly generation: number;
  /** The parent's `spec` (`{}` when absent). */
  readonly spec: any;
  /** The parent's current `status` (`{}` when absent). */
  readonly status: any;
  /** Observed objects of one kind (`group/version/Kind`). */
  observedOf(kind: string): KubeObject[];
  /** The observed object of `kind` with this name. */
  findObserved(kind: string, name: string): KubeObject | undefined;
  /** An output starting from the earlier plugins' desired set. */
  output(): Output;
}

/** A condition to set on the parent. */
export interface Condition {
  kind: string;
  status: boolean;
  reason: string;
  message: string;
}

/** An event to record on the parent. */
export interface Event {
  warning: boolean;
  reason: string;
  message: string;
}

/** A requeue delay in units, added up: `{ minutes: 5 }`, `{ seconds: 1, milliseconds: 500 }`. */
export interface Duration {
  hours?: number;
  minutes?: number;
  seconds?: number;
  milliseconds?: number;
}

/** What a plugin returns: the whole desired set and what to report on the parent. */
export class Output {
  constructor(desired?: KubeObject[]);
  /** The whole desired set after this plugin: add, edit or remove objects freely. */
  desired: KubeObject[];
  /**
   * Adds an object, replacing the one of the same `apiVersion/kind` and name.
   * @throws {Failed} when it lacks apiVersion, kind or metadata.name.
   */
  apply(obj: KubeObject): this;
  /** Removes the object of `kind` (`group/version/Kind`) and name; returns it. */
  remove(kind: string, name: string): KubeObject | undefined;
  /** The desired object of `kind` and name. */
  find(kind: string, name: string): KubeObject | undefined;
  /** Sets a top-level field of the status fragment (any JSON value). */
  status(key: string, value: unknown): this;
  /** Sets a condition, replacing an earlier one of the same kind. */
  condition(kind: string, status: boolean, reason: string, message: string): this;
  /** Records an event: Normal, or Warning with `{ warning: true }`. */
  event(reason: string, message: string, options?: { warning?: boolean }): this;
  /**
   * Asks to run again after a delay: seconds, or a duration such as `{ minutes: 5 }` (the
   * units added up). Rounded up to whole seconds; the earliest request wins.
   */
  requeueAfter(delay: number | Duration): this;
  /** Finalize phase: whether this plugin's cleanup is complete (default true). */
  finalized(done?: boolean): this;
  readonly statusFragment: Record<string, unknown>;
  readonly conditions: readonly Condition[];
  readonly events: readonly Event[];
  readonly requeueAfterSecs: number | null;
  readonly isFinalized: boolean;
}

/** What `plugin` takes. */
export interface Definition {
  info: Info;
  reconcile(ctx: Context): Output;
  /** Defaults to nothing to clean up: the desired set unchanged, finalized. */
  finalize?(ctx: Context): Output;
}

// The WIT shapes (windlass:plugin/types@0.1.0) as jco's QuickJS backend passes them.

export interface WitRequest {
  phase: Phase;
  parent: string;
  observed: string[];
  desired: string[];
  config: string;
  now: string;
}
export interface WitResponse {
  desired: string[];
  status: string | null;
  conditions: Condition[];
  events: Event[];
  requeueAfterSecs: number | null;
  finalized: boolean;
}
export interface WitPluginInfo {
  name: string;
  version: string;
  parentKinds: string[];
  childKinds: string[];
  readsKinds: string[];
  finalizes: boolean;
}
export type WitPluginError = { tag: "invalid-parent" | "invalid-config" | "failed"; val: string };

/** The component's `reconciler` export. */
export interface Reconciler {
  info(): WitPluginInfo;
  /** @throws {WitPluginError} */
  reconcile(req: WitRequest): WitResponse;
}

/** A plugin, ready to export: `export const reconciler = plugin({ info, reconcile })`. */
export function plugin(definition: Definition): Reconciler;

/** Routes `log` to the host's import (component.js calls it). */
export function bindHostLog(hostLog: { log(level: "debug" | "info" | "warn" | "error", message: string): void }): void;

// Used by testing.js and component builds; plugins need not call them.
export function contextFromRequest(req: WitRequest): { ctx: Context; sent: WeakMap<object, unknown> };
export function toResponse(out: Output, sent?: WeakMap<object, unknown>): WitResponse;
export function toWitError(e: unknown): WitPluginError;
export function definitionOf(reconciler: Reconciler): Readonly<Required<Definition>> & { info: WitPluginInfo };
export function runPhase(definition: Readonly<Required<Definition>>, ctx: Context): Output;
