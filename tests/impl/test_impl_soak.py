"""Seeded random runs against a plain list-based model of the order rules."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from kvpool.impl import BlockPool, BlockPoolError, KVCacheBlock, Request

Check = Callable[[BlockPool], None]


class Model:
    """The order rules written plainly: lists and dicts, no links."""

    def __init__(self, n: int) -> None:
        self.ref = dict.fromkeys(range(1, n), 0)
        self.free = list(range(1, n))
        self.key: dict[int, bytes] = {}
        self.table: dict[bytes, list[int]] = {}

    def strip(self, bid: int) -> None:
        k = self.key.pop(bid, None)
        if k is not None:
            self.table[k].remove(bid)
            if not self.table[k]:
                del self.table[k]

    def get_new(self, n: int) -> list[int]:
        out, self.free = self.free[:n], self.free[n:]
        for bid in out:
            self.strip(bid)
            self.ref[bid] = 1
        return out

    def release(self, bids: list[int], evict_first: bool, unpin: bool) -> None:
        front, back = [], []
        for bid in bids:
            self.ref[bid] -= 1
            if self.ref[bid] == 0:
                if not unpin and (bid not in self.key or evict_first):
                    front.append(bid)
                else:
                    back.append(bid)
        self.free = front + self.free + back

    def touch(self, bids: list[int]) -> None:
        for bid in bids:
            if self.ref[bid] == 0:
                self.free.remove(bid)
            self.ref[bid] += 1

    def cache(self, bid: int, k: bytes) -> None:
        self.key[bid] = k
        self.table.setdefault(k, []).append(bid)


@pytest.mark.parametrize("seed", range(12))
def test_random_runs_match_the_model_and_keep_invariants(seed: int, check: Check) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 12)
    pool = BlockPool(n, enable_caching=True, hash_block_size=1, enable_kv_cache_events=True)
    model = Model(n)
    # A few prompts sharing prefixes, so keys collide and duplicates appear.
    reqs = [
        Request.from_tokens(f"r{i}", [rng.randint(0, 2) for _ in range(4)], 1) for i in range(5)
    ]
    fired: list[int] = []
    for _ in range(300):
        held = [bid for bid, r in model.ref.items() for _ in range(r)]
        op = rng.randrange(7)
        blocks = pool.blocks
        if op == 0:
            k = rng.randint(0, len(model.free) + 1)
            if k > len(model.free):
                with pytest.raises(BlockPoolError):
                    pool.get_new_blocks(k)
            else:
                got = pool.get_new_blocks(k)
                assert [b.block_id for b in got] == model.get_new(k)
        elif op == 1 and held:
            rng.shuffle(held)
            bids = held[: rng.randint(1, len(held))]
            ef = rng.random() < 0.3
            pool.free_blocks([blocks[b] for b in bids], evict_first=ef)
            model.release(bids, ef, unpin=False)
        elif op == 2:
            hits = [b for b in model.ref if model.ref[b] > 0 or b in model.key]
            if hits:
                bids = [rng.choice(hits) for _ in range(rng.randint(1, 3))]
                pool.touch([blocks[b] for b in bids])
                model.touch(bids)
        elif op == 3 and held:
            rng.shuffle(held)
            bids = held[: rng.randint(1, len(held))]
            pool.unpin_blocks([blocks[b] for b in bids], lambda blk: fired.append(blk.block_id))
            model.release(bids, False, unpin=True)
        elif op == 4:
            cands = [b for b in model.ref if model.ref[b] > 0 and b not in model.key]
            if cands:
                bid = rng.choice(cands)
                req = rng.choice(reqs)
                j = rng.randrange(4)
                row: list[KVCacheBlock] = [pool.null_block] * j + [blocks[bid]]
                pool.cache_full_blocks(req, row, j, j + 1, 1, 0)
                model.cache(bid, req.block_hashes[j] + b"\x00\x00\x00\x00")
        elif op == 5:
            bids = rng.sample(range(n), rng.randint(0, n))
            pool.evict_blocks(bids)
            for bid in bids:
                if bid:
                    model.strip(bid)
        elif op == 6:
            ok = pool.reset_prefix_cache()
            assert ok == all(r == 0 for r in model.ref.values())
            if ok:
                model.key.clear()
                model.table.clear()
        check(pool)
        assert [b.block_id for b in pool.free_block_queue.get_all_free_blocks()] == model.free
        assert {b.block_id: b.ref_cnt for b in pool.blocks[1:]} == model.ref
        for k, bids in model.table.items():
            assert [b.block_id for b in pool.cached_block_hash_to_block.get_all_blocks(k)] == bids
        assert len(pool.cached_block_hash_to_block) == len(model.table)
    pool.take_events()
