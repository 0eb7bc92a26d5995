"""The wire protocol: a pool in any language, driven over JSON lines on a child process's
stdin and stdout (``--target exec:CMD ARGS...``; the docs' "The wire protocol" page)."""
