"""Whether a pool refused a call: by raising, or by what the call returned.

The lockstep run reads a refusal as an exception raised by the target. Most pools raise;
a pool whose profile says ``refuses_by_return`` refuses a call outside its contract by
returning ``False`` instead (``None`` from ``get_new_blocks``, which otherwise returns the
blocks) and changing nothing. :func:`refusal` is the one place that reads such a return
value: an adapter passes each pool call's return value through it and raises what it gives,
so the run judges a refusal by return value exactly as one by exception (a refusal of an
allowed call, a refused call that changed the pool, and a taken call the contract forbids
are all caught the same way).
"""

from __future__ import annotations

from kvpool.spec import Profile

#: The operations a pool may refuse by its return value: those whose taken call returns
#: nothing in the contract (a ``False`` there is a status, not a result), and
#: ``get_new_blocks`` (whose refusal returns no list). ``reset_prefix_cache``'s ``False`` is
#: its result (blocks are held), never a refusal.
STATUS_OPERATIONS = frozenset(
    {
        "free_blocks",
        "touch",
        "unpin_blocks",
        "cache_full_blocks",
        "evict_blocks",
        "move_block_hashes",
    }
)


class RefusedByReturn(Exception):
    """The pool refused a call by its return value (``refuses_by_return``): a refusal of
    the target's, judged like an exception its pool raised."""

    def __init__(self, operation: str, returned: object) -> None:
        super().__init__(f"{operation} returned {returned!r}: the pool refused the call")
        self.operation = operation
        self.returned = returned


def refusal(operation: str, returned: object, profile: Profile) -> RefusedByReturn | None:
    """The refusal that ``returned`` (what the pool's ``operation`` call gave back) states,
    or ``None`` when the call was taken.

    Only where the profile says ``refuses_by_return``: there a ``False`` from an operation of
    :data:`STATUS_OPERATIONS`, or ``None``/``False`` from ``get_new_blocks``, is a refusal.
    Elsewhere the return value of those calls is not read (the contract gives them none).
    """
    if not profile.refuses_by_return:
        return None
    if operation == "get_new_blocks":
        refused = returned is None or returned is False
    else:
        refused = operation in STATUS_OPERATIONS and returned is False
    return RefusedByReturn(operation, returned) if refused else None
