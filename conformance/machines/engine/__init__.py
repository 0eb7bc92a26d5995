"""The engine machine (``--machine engine``): an engine driven through its own scheduler, the
suite playing the clients and the model (:mod:`.driver` is the boundary, :mod:`.engine_run`
one test case)."""
