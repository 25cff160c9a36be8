#!/usr/bin/env bash
# Tests of the JavaScript SDK: the unit tests (node --test), then a type check of windlass.d.ts
# and testing.d.ts against typecheck.ts with TypeScript 5 through npx (fetched once into npm's
# cache; set WINDLASS_SKIP_TSC=1 where there is no registry).
set -euo pipefail
cd "$(dirname "$0")"
node --test --test-reporter=dot windlass.test.js
if [ -n "${WINDLASS_SKIP_TSC:-}" ]; then
    echo "test.sh: type check skipped (WINDLASS_SKIP_TSC)"
else
    npx --yes -p typescript@5 tsc --noEmit --strict --target es2022 --module nodenext \
        --moduleResolution nodenext typecheck.ts
    echo "types: ok"
fi
