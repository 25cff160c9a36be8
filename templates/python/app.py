"""The component's entry module: exports the plugin (see plugin.py) as the WIT `reconciler`."""

import windlass
from plugin import Greeter

Reconciler = windlass.export(Greeter)
