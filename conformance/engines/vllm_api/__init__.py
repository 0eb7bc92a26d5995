"""The adapter for any pool with vLLM's ``BlockPool`` API, by job: the request fields a pool
reads, the calling conventions read off its signatures, the adapter itself, the events read
back into the spec's vocabulary, and the view of its state."""
