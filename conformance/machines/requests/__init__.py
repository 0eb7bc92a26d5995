"""The requests machine (``--machine requests``): request actions in lockstep with the spec's
manager.

Two runs share one machine: a manager under test against the spec's manager
(:mod:`.manager_run`), and the spec's manager driving a plain pool under test through
realistic request sequences (:mod:`.pool_run`). Both check the request-level properties of
:mod:`kvpool.spec.manager.properties` after every step (:mod:`.checks`).
"""
