"""The machines: lockstep runs that drive a target and the spec side by side, compare what
they show, and shrink what differs.

One per ``--machine``: :mod:`.pool` (pool operations), :mod:`.requests` (request actions
through a KV cache manager), :mod:`.engine` (an engine through its own scheduler); and
:mod:`.events`, the events level the pool machine runs."""
