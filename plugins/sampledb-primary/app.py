"""The component's entry module: exports the sampledb-primary plugin (see primary.py)."""

import windlass
from primary import Primary

Reconciler = windlass.export(Primary)
