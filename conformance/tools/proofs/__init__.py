"""Proofs of the pool over an unbounded number of blocks (Z3), and bounded model checking
of planted faults: ``kvpool prove``. Importing the package loads nothing heavy; the
modules import Z3 when they are used."""
