"""Consumers of a pool's KV-event stream: what a router rebuilds of one worker's cache.

:mod:`.protocol` states what a consumer offers (the public interface a router plugin
implements); :mod:`.models` wraps the spec's ``count`` and ``set`` models; :mod:`.dynamo`
is NVIDIA Dynamo's radix-tree index run in process; :mod:`.prefixes` remembers the prefixes
a stream has named; :mod:`.judge` is the one judge of a stream every caller uses (the
events level, the request machine, the monitor); :mod:`.naming` reads ``--consumer``.
"""
