"""Aphrodite, a fork of vLLM whose v1 block pool lives under its own package name."""
