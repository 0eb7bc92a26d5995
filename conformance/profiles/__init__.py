"""Profiles as files: ``kvpool profile`` derives a release's profile by probing it, explains
one, and writes it as TOML the ``--profile`` option reads."""
