// Binds the SDK's log to the host's `windlass:plugin/log` import. Only the component build loads
// this module (componentize.sh imports it ahead of the plugin): Node cannot resolve the
// `windlass:` import, and the plugin's own modules never name it, so `node --test` runs them as
// they are.
import hostLog from "windlass:plugin/log@0.1.0";
import { bindHostLog } from "./windlass.js";

bindHostLog(hostLog);
