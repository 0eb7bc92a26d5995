"""Test vectors: the conformance contract as data. Fixed traces with the spec's expected
observations, generated deterministically from the spec, checked into the repository, and
replayable by any pool in any language (the format is the trace format, ITF JSON)."""
