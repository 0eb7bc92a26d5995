"""The one error type the pool raises when a caller breaks its contract."""

from __future__ import annotations


class BlockPoolError(ValueError):
    """A refused operation.

    Raised before anything is changed: a refusal leaves the pool exactly as it
    was. The message and the attributes name the operation, the block (when one
    block is to blame) and the id of the broken rule, e.g.
    ``free_blocks: block 7: rule 'free-held': block 7 is freed 2 times ...``.
    """

    rule: str
    operation: str
    block_id: int | None

    def __init__(self, operation: str, rule: str, detail: str, block_id: int | None = None) -> None:
        self.operation = operation
        self.rule = rule
        self.block_id = block_id
        self.detail = detail
        where = "" if block_id is None else f" block {block_id}:"
        super().__init__(f"{operation}:{where} rule '{rule}': {detail}")

    def __reduce__(self) -> tuple[type[BlockPoolError], tuple[str, str, str, int | None]]:
        # Keep the error picklable (it crosses process boundaries in fuzzing runs).
        return (type(self), (self.operation, self.rule, self.detail, self.block_id))
