"""Search bounds: how large an input ``kvpool crosshair`` builds. Not part of the contract.

The ``pre:`` lines of the flat rules state two different things: what a caller must
ensure (the contract: ``0 <= b``, a block held before it is released, a block size that is
a multiple of the hash block size, ...) and how far CrossHair's search may reach, so that
it covers the interesting shapes in seconds instead of wandering through huge tuples. The
second kind lives here, one predicate per shape, every one named ``search_...`` and
called as the whole of its ``pre:`` line; the docs list those lines apart, as search
bounds, and nothing else reads them. The spec's transitions never check them: a pool of
4,096 blocks or a block of 16 tokens is as much inside the contract as one of six.
"""

from __future__ import annotations

#: The most blocks a searched pool has (block ids ``0 .. MAX_SEARCH_BLOCKS - 1``), and
#: the longest list of blocks or block table a searched call takes.
MAX_SEARCH_BLOCKS = 6
#: The largest hash block size and block size searched (tokens).
MAX_SEARCH_HASH_BLOCK_SIZE, MAX_SEARCH_BLOCK_SIZE = 8, 32
#: The most chained hashes (and, at the request level, tokens) a searched request has.
MAX_SEARCH_HASHES, MAX_SEARCH_TOKENS = 64, 256
#: The longest block hash searched (bytes; vLLM's are 32).
MAX_SEARCH_HASH_BYTES = 40
#: The most KV-cache groups, the largest block size and the most blocks kept cached that
#: the request-level rules search.
MAX_SEARCH_GROUPS, MAX_SEARCH_MANAGER_BLOCK_SIZE, MAX_SEARCH_KEPT = 3, 16, 16
#: The usage fraction is searched on larger pools (it is arithmetic only).
MAX_SEARCH_USAGE_BLOCKS = 1024
#: The hash chain's index arithmetic is searched on larger numbers (it is arithmetic only).
MAX_SEARCH_CHAIN_HASH_BLOCK_SIZE, MAX_SEARCH_CHAIN_BLOCK_SIZE, MAX_SEARCH_CHAIN_COUNT = 64, 256, 256


def search_blocks(*lists: tuple[int, ...]) -> bool:
    """Each list of blocks (a pool's counts, a call's blocks, a table) is small."""
    return all(len(x) <= MAX_SEARCH_BLOCKS for x in lists)


def search_count(*counts: int) -> bool:
    """Each count of blocks (a window, a position, blocks kept) is small."""
    return all(c <= MAX_SEARCH_BLOCKS for c in counts)


def search_sizes(hash_block_size: int, block_size: int) -> bool:
    """The hash block size and the block size are small."""
    return hash_block_size <= MAX_SEARCH_HASH_BLOCK_SIZE and block_size <= MAX_SEARCH_BLOCK_SIZE


def search_hashes(num_hashes: int) -> bool:
    """A request has few chained hashes."""
    return num_hashes <= MAX_SEARCH_HASHES


def search_hash_bytes(length: int) -> bool:
    """A block hash (or a key, less its group suffix) is short."""
    return length <= MAX_SEARCH_HASH_BYTES


def search_request(num_tokens: int, num_groups: int, block_size: int, kept: int = 0) -> bool:
    """A request at the manager level is short, in few groups, with small blocks, and keeps
    few blocks cached."""
    return (
        num_tokens <= MAX_SEARCH_TOKENS
        and num_groups <= MAX_SEARCH_GROUPS
        and block_size <= MAX_SEARCH_MANAGER_BLOCK_SIZE
        and kept <= MAX_SEARCH_KEPT
    )


def search_usage(num_blocks: int) -> bool:
    """The usage arithmetic is searched on pools of up to ``MAX_SEARCH_USAGE_BLOCKS``."""
    return num_blocks <= MAX_SEARCH_USAGE_BLOCKS


def search_chain(hash_block_size: int, block_size: int, count: int) -> bool:
    """The hash chain's sizes and an index or count into it are within the search."""
    return (
        hash_block_size <= MAX_SEARCH_CHAIN_HASH_BLOCK_SIZE
        and block_size <= MAX_SEARCH_CHAIN_BLOCK_SIZE
        and count <= MAX_SEARCH_CHAIN_COUNT
    )
