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

from . import operations as table


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

    Only where the profile says ``refuses_by_return``: there a return value the operation's
    :attr:`~.operations.PoolOperation.refused_by_returning` lists (a ``False`` where the
    taken call returns nothing, no list where it returns blocks) is a refusal. Elsewhere
    the return value of those calls is not read (the contract gives them none).
    """
    if not profile.refuses_by_return:
        return None
    try:
        statuses = table.named(operation).refused_by_returning
    except KeyError:  # not a pool operation: nothing it returns is a refusal
        return None
    refused = any(returned is status for status in statuses)
    return RefusedByReturn(operation, returned) if refused else None
