"""The tools: the commands built on the machines (``conform``, ``diff``, ``fuzz``, ``bench``,
``mutants``, ``prove``, ``crosshair``, ``route-check``, ``publish`` and ``monitor``,
``validate``, ``vectors``) and the documentation generator (``docs``)."""
