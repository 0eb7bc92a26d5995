"""``kvpool route-check``: a router's index fed a live stream, measured against the pool.

:mod:`.indexer` runs Dynamo's standalone indexer as a process and asks it over HTTP;
:mod:`.isolation` keeps every server the check starts on loopback; :mod:`.scenarios`
publishes the serving workload through vLLM's own publisher and measures each consumer;
:mod:`.recording` writes a run as data and renders the contract page's table from it;
:mod:`.command` is the command.
"""
