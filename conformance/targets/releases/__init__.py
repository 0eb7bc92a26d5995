"""Engine releases: the one downloader, cache and wheel reader every engine target uses.

:mod:`.files` names the files a target takes from a release and keeps them in the cache,
:mod:`.download` fetches one wheel with pip, :mod:`.index` asks the package index for a
project's newest release (``kvpool targets --latest``) and :mod:`.forms` turns a
``NAME==X.Y.Z`` or ``NAME@PATH`` target into the loaded release for an engine's entry.
"""
