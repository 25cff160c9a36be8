#!/usr/bin/env bash
# Unit tests of the election logic (plain Python, no WebAssembly needed).
set -euo pipefail
cd "$(dirname "$0")"
PYTHONDONTWRITEBYTECODE=1 python3 -m unittest -v test_primary
