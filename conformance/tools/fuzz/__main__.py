"""``python -m kvpool.conformance.tools.fuzz``: the same as ``kvpool fuzz``."""

from __future__ import annotations

from .command import fuzz

if __name__ == "__main__":  # a worker process imports this module too, as __mp_main__
    fuzz(prog_name="kvpool fuzz")
