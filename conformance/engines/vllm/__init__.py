"""Checking released vLLM block pools: the wheel cache, isolated loading, the adapter."""
