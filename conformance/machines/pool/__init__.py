"""The pool machine (``--machine pool``) and the lockstep run the other machines build on:
the table of pool operations, drawing, the pool target protocol, comparing a target's view
with the spec's, the levels, and running and reporting a level."""
