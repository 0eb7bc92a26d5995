"""``sglang`` / ``sglang==X.Y.Z`` / ``sglang@PATH``, each optionally ``,page=N``: SGLang's
``RadixCache`` over its token allocator, a token-granular manager with no pool API of its
own (the request machine's manager run checks it). ``sglang`` alone is 0.4.6.post5."""

from __future__ import annotations

from types import MappingProxyType

from ...manager.target import ManagerTargetFactory
from ..description import Form, TargetDescription
from ..errors import TargetUsageError
from ..registry import EngineEntry
from ..releases.forms import load_form, release_name


def page_size(described: TargetDescription) -> int | None:
    """The page size ``described`` names: 1 when it names none, ``None`` for
    ``page=drawn``."""
    value = described.option("page")
    if value is None or value == "drawn":
        return 1 if value is None else None
    return int(value)


class SglangEntry(EngineEntry):
    name = "sglang"
    summary = (
        "SGLang 0.4.6.post5's RadixCache over its TokenToKVPoolAllocator, a token-granular "
        "manager (--machine requests only; needs the sglang extra: torch)"
    )
    manager_summary = summary
    forms = MappingProxyType(
        {
            "sglang": summary,
            "sglang,page=N": "the same over its PagedTokenToKVPoolAllocator with pages of N "
            "tokens, a power of two (blocks are pages; hits cut to whole pages); 'page=drawn' "
            "takes the largest power of two up to the drawn block size",
            "sglang==X.Y.Z": "the same from another SGLang release (a pure wheel; ',page=N' too)",
            "sglang@PATH": "an SGLang checkout's python/ folder or unpacked wheel at PATH",
        }
    )
    extra = "sglang"
    project = "sglang"
    has_pool = False
    auto_manager = True
    accepted = frozenset({Form.BUILT_IN, Form.RELEASE, Form.PATH})

    def parse(self, described: TargetDescription) -> TargetDescription:
        from .release import DEFAULT_VERSION

        if described.form not in self.accepted:
            raise TargetUsageError(f"{described.text!r}: sglang takes {self.forms_line()}")
        for key, value in described.options:
            drawn = key == "page" and value == "drawn"
            if not drawn and not (key == "page" and value.isdigit() and _power_of_two(int(value))):
                option = f"{key}={value}" if value else key
                raise TargetUsageError(
                    f"{described.text}: after the comma SGLang takes 'page=N' (N tokens a "
                    "page, a power of two: its paged allocation kernels need one) or "
                    f"'page=drawn', not {option!r}"
                )
        if described.form is Form.BUILT_IN:
            return described.with_changes(form=Form.RELEASE, version=DEFAULT_VERSION)
        return described

    def versions(self) -> tuple[str, ...]:
        from .release import DEFAULT_VERSION

        return (DEFAULT_VERSION,)

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        from .manager import sglang_managers
        from .release import SglangUnavailable, load_release, load_tree, version_label

        size = page_size(described)
        pages = "" if size == 1 else f",page={size or 'drawn'}"
        release = load_form(
            described,
            lambda root: load_tree(root, version_label(root)),
            load_release,
            SglangUnavailable,
        )
        name = release_name(described, pages)
        return sglang_managers(release, f"{name} ({release.label})", size), name


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


ENTRY = SglangEntry()
