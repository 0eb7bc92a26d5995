"""Mutants: named faulty variants of kvpool.impl, each a line or a few away from correct,
that score the suite: how many it kills, how fast, and which check catches each."""
