"""The mutant corpus: each mutant is a textual patch of one impl source file.

A patch replaces one exact snippet (it must occur exactly once) by a faulty one, so each
mutant is a real bug a person could write, kept as data and checked to still apply. Each
also says what its kill must show (``shows``): the observable, rule or property the
nonconformance names; a kill by anything else is a wrong kill.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    #: The bug, in the words of a real bug of this family where it is one.
    bug: str
    #: The impl file patched (in ``impl/``).
    file: str
    old: str
    new: str
    #: What its kill must show: the observable, rule or property the nonconformance names
    #: (a phrase of the message, e.g. ``free queue order``, ``rule 'free-held'``); never
    #: what any crash would show (an operation's name alone, "was refused").
    shows: str


def m(name: str, bug: str, file: str, old: str, new: str, shows: str) -> Mutant:
    return Mutant(name, bug, file, old, new, shows)


FREE_TEST = "                    if blk._key_hash is None or not keep_cached:\n"

MUTANTS: tuple[Mutant, ...] = (
    m(
        "free-ends-swapped",
        "keyed frees to the front, unkeyed to the back",
        "block_pool.py",
        FREE_TEST,
        "                    if blk._key_hash is not None or not keep_cached:\n",
        "free queue order",
    ),
    m(
        "unkeyed-free-to-back",
        "a freed unkeyed block goes to the back (LIFO reuse lost)",
        "block_pool.py",
        FREE_TEST,
        "                    if not keep_cached:\n",
        "free queue order",
    ),
    m(
        "evict-first-ignored",
        "evict_first does not send cached blocks to the front",
        "block_pool.py",
        "keep_cached = self.enable_caching and not evict_first",
        "keep_cached = self.enable_caching",
        "free queue order",
    ),
    m(
        "unpinned-to-front",
        "an unpinned block goes to the front, not the back",
        "block_pool.py",
        "        self.free_block_queue.append_n(released)",
        "        self.free_block_queue.prepend_n(released)",
        "free queue order",
    ),
    m(
        "back-batch-reversed",
        "blocks freed to the back lose the batch's order",
        "block_pool.py",
        "                self.free_block_queue.append_n(to_back)",
        "                self.free_block_queue.append_n(to_back[::-1])",
        "free queue order",
    ),
    m(
        "front-batch-reversed",
        "blocks freed to the front lose the batch's order",
        "block_pool.py",
        "                self.free_block_queue.prepend_n(to_front)",
        "                self.free_block_queue.prepend_n(to_front[::-1])",
        "free queue order",
    ),
    m(
        "stale-key-on-reuse",
        "a stale key left on an evicted block (not removed on reuse)",
        "block_pool.py",
        "                self._remove_all_keys(blk)\n            blk.ref_cnt = 1",
        "                pass\n            blk.ref_cnt = 1",
        "keys expected",
    ),
    m(
        "duplicate-replaces",
        "a duplicate key replaces the cached block instead of joining it",
        "hash_map.py",
        "                table[block_hash] = {entry.block_id: entry, block.block_id: block}",
        "                table[block_hash] = block",
        "index: key",
    ),
    m(
        "newest-duplicate-hit",
        "a lookup returns the newest duplicate, not the earliest",
        "hash_map.py",
        "        return next(iter(entry.values()))",
        "        return list(entry.values())[-1]",
        "get_cached_block: expected blocks",
    ),
    m(
        "touch-adds-two",
        "touch takes two references (ref count off by one)",
        "block_pool.py",
        "                blk.ref_cnt = rc + 1\n",
        "                blk.ref_cnt = rc + 2\n",
        "ref_cnt",
    ),
    m(
        "free-releases-two",
        "free releases two references (ref count off by one)",
        "block_pool.py",
        "                rc = blk.ref_cnt - 1\n",
        "                rc = max(blk.ref_cnt - 2, 0)\n",
        "ref_cnt expected | rule 'queue-membership'",
    ),
    m(
        "touch-leaves-queue",
        "touch takes a free hit but leaves it in the free queue",
        "block_pool.py",
        "                    before = blk.prev_free_block\n"
        "                    after = blk.next_free_block\n"
        "                    before.next_free_block = after  # type: ignore[union-attr]\n"
        "                    after.prev_free_block = before  # type: ignore[union-attr]\n"
        "                    taken.append(blk)\n",
        "                    pass\n",
        "free count",
    ),
    m(
        "watcher-never-fires",
        "a reuse watcher never fires",
        "block_pool.py",
        "                    watcher(blk)\n",
        "                    pass\n",
        "reuse watchers fired",
    ),
    m(
        "watcher-fires-twice",
        "a reuse watcher fires twice on one reuse",
        "block_pool.py",
        "                    watcher(blk)\n",
        "                    watcher(blk)\n                    watcher(blk)\n",
        "reuse watchers fired",
    ),
    m(
        "watcher-kept-after-firing",
        "a reuse watcher is not dropped when it fires",
        "block_pool.py",
        "watcher = watchers.pop(blk.block_id, None)",
        "watcher = watchers.get(blk.block_id)",
        "reuse watchers fired",
    ),
    m(
        "reset-skips-watchers",
        "a reset forgets the reuse watchers without firing them",
        "block_pool.py",
        "            watcher(self.blocks[bid])",
        "            pass",
        "reuse watchers fired",
    ),
    m(
        "reset-while-held",
        "reset_prefix_cache succeeds while blocks are held",
        "block_pool.py",
        "        if self.free_block_queue.num_free_blocks != self.num_gpu_blocks - 1:",
        "        if self.free_block_queue.num_free_blocks == 0:",
        "reset_prefix_cache: expected False, got True",
    ),
    m(
        "promotion-keeps-old-key",
        "a partial entry promoted to full keeps its old key",
        "block_pool.py",
        "                self._remove_all_keys(blk)  # partial -> full promotion",
        "                pass",
        "index: key",
    ),
    m(
        "move-loses-extra-keys",
        "move_block_hashes loses the source's extra keys",
        "block_pool.py",
        "            self.cached_block_hashes_by_block[dst_id] = extras",
        "            pass",
        "keys expected",
    ),
    m(
        "lookup-not-all-or-nothing",
        "a multi-group lookup returns the groups that hit",
        "block_pool.py",
        "            if blk is None:\n                return None\n",
        "            if blk is None:\n                continue\n",
        "get_cached_block: expected None",
    ),
    m(
        "removal-event-missing",
        "evicting a block publishes no BlockRemoved for its primary",
        "block_pool.py",
        "            self._emit_removed(primary, group)",
        "            pass",
        "events differ",
    ),
    m(
        "stored-event-doubled",
        "BlockStored lists every hash twice",
        "block_pool.py",
        "                stored.append(block_hash)",
        "                stored.append(block_hash)\n                stored.append(block_hash)",
        "events differ",
    ),
    m(
        "usage-counts-null",
        "usage counts the null block as a usable block",
        "block_pool.py",
        "        usable = self.num_gpu_blocks - 1",
        "        usable = self.num_gpu_blocks",
        "get_usage: expected",
    ),
    m(
        "null-block-cached",
        "the null block is cached (counted as evictable) instead of skipped",
        "block_pool.py",
        "            if blk.pool is not mine or (\n"
        "                block_mask is not None and not block_mask[j - num_cached_blocks]\n"
        "            ):\n"
        "                continue\n"
        "            block_hash = hashes[",
        "            if block_mask is not None and not block_mask[j - num_cached_blocks]:\n"
        "                continue\n"
        "            block_hash = hashes[",
        "block 0: keys expected",
    ),
    m(
        "null-block-handed-out",
        "the null block is never taken out of the free queue",
        "block_pool.py",
        "        self.null_block = self.free_block_queue.popleft()",
        "        self.null_block = self.blocks[0]",
        "free count",
    ),
    m(
        "double-free-accepted",
        "a double free is accepted (ref_cnt goes negative)",
        "block_pool.py",
        "                if rc < 0:\n                    break\n",
        "                if rc < -1:\n                    break\n",
        "rule 'free-held'",
    ),
    m(
        "evict-keeps-extra-keys",
        "evicting a block leaves its extra keys behind",
        "block_pool.py",
        "        extras = self.cached_block_hashes_by_block.pop(bid, None)",
        "        extras = self.cached_block_hashes_by_block.get(bid)",
        "keys expected",
    ),
    m(
        "caching-while-off",
        "caching while caching is off is accepted",
        "block_pool.py",
        "        if not self.enable_caching:\n",
        "        if False:\n",
        "rule 'caching-enabled'",
    ),
    m(
        "touch-without-key-accepted",
        "touch of a free block with no key is accepted",
        "block_pool.py",
        "                    if blk._key_hash is None:\n"
        "                        break  # a free block without a key is no cache hit\n",
        "                    if False:\n                        break\n",
        "rule 'touch-identity'",
    ),
    m(
        "popleft-count-off",
        "the free count drops one too few per allocation",
        "free_queue.py",
        "        self.num_free_blocks -= n  # L3",
        "        self.num_free_blocks -= max(n - 1, 0)",
        "free count",
    ),
    m(
        "remove-keeps-back-link",
        "removing a block from the queue leaves its successor's link",
        "block_pool.py",
        "                    after.prev_free_block = before  # type: ignore[union-attr]\n",
        "                    pass\n",
        "free list corrupted",
    ),
    m(
        "extra-key-left-in-index",
        "a block's extra keys are dropped from the block but left in the index",
        "block_pool.py",
        "                table.pop(key, bid)\n",
        "                pass\n",
        "index: key",
    ),
    m(
        "evicted-entry-left-in-index",
        "a block's only entry in group 0 stays in the index when its key is removed",
        "block_pool.py",
        "            del group0[primary]  # the common entry: the key's only block, in group 0",
        "            pass",
        "index: key",
    ),
    m(
        "duplicate-kept-on-eviction",
        "a duplicate's entry is not dropped from its key when the block is evicted",
        "hash_map.py",
        "        del entry[block.block_id]\n",
        "        pass\n",
        "index: key",
    ),
    m(
        "index-kept-across-reset",
        "reset_prefix_cache clears every block's keys but keeps the index",
        "block_pool.py",
        "        self.cached_block_hash_to_block.clear()\n",
        "        pass\n",
        "index: key",
    ),
    m(
        "moved-key-left-under-source",
        "move_block_hashes leaves the source block under the moved primary key",
        "block_pool.py",
        "        table.discard(primary, group, src_block)\n",
        "        pass\n",
        "index: key",
    ),
    m(
        "moved-extra-left-under-source",
        "move_block_hashes leaves the source block under the moved extra keys",
        "block_pool.py",
        "                table.pop(key, src_id)\n",
        "                pass\n",
        "index: key",
    ),
    m(
        "entry-under-wrong-group",
        "cache_full_blocks files a new key's entry in group 0's table, whatever the group",
        "block_pool.py",
        "        group_table = table.by_group.get(group)\n",
        "        group_table = table.by_group.get(0)\n",
        "index: key",
    ),
    m(
        "lookup-served-from-dropped-entry",
        "a memo of lookups in front of the index is never invalidated: a hit is served "
        "after its key was evicted, reset or moved",
        "block_pool.py",
        "                blk = self._group0.get(block_hash)\n"
        "                if blk is None:\n"
        "                    return None\n",
        '                hits = vars(self).setdefault("_hits", {})\n'
        "                blk = hits.get(block_hash) or self._group0.get(block_hash)\n"
        "                if blk is None:\n"
        "                    return None\n"
        "                hits[block_hash] = blk\n",
        "get_cached_block",
    ),
)

MUTANTS_BY_NAME: dict[str, Mutant] = {mutant.name: mutant for mutant in MUTANTS}
