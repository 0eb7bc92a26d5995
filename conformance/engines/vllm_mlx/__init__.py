"""vllm-mlx's ``PagedCacheManager`` as a target (:mod:`.pool`) and its registry entry."""
