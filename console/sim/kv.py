"""The paged KV cache of one replica, counted in blocks of `block_size` tokens.

vLLM's usage gauge is allocated blocks over all blocks; blocks kept only for the
prefix cache count as free, so the simulator needs counts, not block ids.
"""

from __future__ import annotations


class BlockPool:
    def __init__(self, num_blocks: int):
        if num_blocks <= 0:
            raise ValueError(f"a KV cache needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.used = 0

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    @property
    def usage(self) -> float:
        """0-1, like vllm:kv_cache_usage_perc."""
        return self.used / self.num_blocks

    def take(self, blocks: int) -> bool:
        if blocks > self.free:
            return False
        self.used += blocks
        return True

    def release(self, blocks: int) -> None:
        if blocks > self.used:
            raise ValueError(f"releasing {blocks} blocks with only {self.used} in use")
        self.used -= blocks
