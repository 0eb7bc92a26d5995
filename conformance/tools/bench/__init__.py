"""``kvpool bench``: our BlockPool against a released vLLM's, on the same pool calls."""

from .command import bench

__all__ = ["bench"]
