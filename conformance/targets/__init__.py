"""The framework every target is found and loaded through: the registry of ``kvpool.engines``
entries, target descriptions (``NAME[==VERSION][@PATH]``, ``module:factory``, ``exec:``),
loading an engine's files in isolation, release wheels (:mod:`.releases`), the readers of a
pool's free list and index, and ``kvpool targets``."""
