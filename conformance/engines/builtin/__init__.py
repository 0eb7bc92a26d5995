"""kvpool's own targets: ``impl`` (the linked-list pool and its KV cache manager, the default)
and ``spec`` (the spec itself, the suite's self-check)."""
