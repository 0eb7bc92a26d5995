"""The distribution ships every package folder, under kvpool.*, and nothing bare."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"spec": "kvpool.spec", "impl": "kvpool.impl", "conformance": "kvpool.conformance"}


def test_every_package_folder_is_listed_for_a_normal_install() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join((name, *relative)))
    assert listed == on_disk
    assert all(p.startswith("kvpool.") for p in listed)
    assert config["package-dir"] == {name: folder for folder, name in FOLDERS.items()}
