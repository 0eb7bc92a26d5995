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


def test_the_docs_extra_alone_builds_every_page_with_its_content() -> None:
    # the Proofs page runs kvpool prove at build time: without z3 it is a "Not run" warning
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = {requirement.split(">")[0].split("=")[0] for requirement in extras["docs"]}
    assert {"mkdocs-material", "z3-solver"} <= names
