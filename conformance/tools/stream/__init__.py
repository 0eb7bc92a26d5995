"""A pool's KV events on the wire: vLLM's ZMQ stream, published (``kvpool publish``) and
watched (``kvpool monitor``).

``wire`` decodes vLLM's frames without vLLM; ``recording`` is the saved-stream format;
``subscriber`` holds the sockets (live, replay, snapshot); ``watch`` feeds a consumer model
(:mod:`kvpool.spec.consumer`) and reports violations, gaps and restarts; ``publisher`` loads
vLLM's own ``ZmqEventPublisher`` from a release wheel and translates a target's events
into that release's event classes. The two commands live in ``publish_command`` and
``monitor_command``.
"""
