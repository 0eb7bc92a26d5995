"""The one error the spec raises: an action outside the caller's contract."""

from __future__ import annotations

from .rules import describe


class ContractViolation(Exception):
    """An action broke a rule of the caller's contract; the state is unchanged.

    ``rule`` is an id of :data:`~kvpool.spec.rules.RULES`, ``operation`` the pool
    operation, ``block`` the offending block id when there is one.
    """

    def __init__(self, rule: str, operation: str, block: int | None = None, detail: str = ""):
        self.rule = rule
        self.operation = operation
        self.block = block
        self.detail = detail
        where = f"block {block}: " if block is not None else ""
        why = detail or describe(rule)
        super().__init__(f"{operation}: {where}rule '{rule}': {why}")
