"""Built-in filter and score plugins; importing this package registers them."""

import reconciler.core.plugins.affinity
import reconciler.core.plugins.capacity
import reconciler.core.plugins.health
import reconciler.core.plugins.locality
import reconciler.core.plugins.pinning
import reconciler.core.plugins.selector
import reconciler.core.plugins.taints  # noqa: F401
