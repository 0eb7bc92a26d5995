"""The engines: one folder per engine plugin (an entry of ``kvpool.engines``), each the adapters
that load an engine's release or checkout and drive its pool, manager or scheduler.

kvpool's own pools (:mod:`.builtin`) register here exactly as third parties do."""
