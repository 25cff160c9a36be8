#!/usr/bin/env bash
# Tests of the conventions, natively (plain Node.js, no WebAssembly needed): the pure transform
# and the host's conformance cases through the SDK's harness. Extra arguments go to node --test.
set -euo pipefail
cd "$(dirname "$0")"
node --test "$@" transform.test.js cases.test.js
