#!/usr/bin/env bash
# Unit tests of the conventions (plain Node.js, no WebAssembly needed).
set -euo pipefail
cd "$(dirname "$0")"
node --test transform.test.js
