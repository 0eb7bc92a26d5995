"""A weighted draw is the draw of one of a list where each value stands as often as its
weight: the same value from the same choices, so a seed's runs are the same as when the
drawers built that list themselves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kvpool.conformance.search.choices import RandomChoices, expanded

weights = st.lists(
    st.tuples(st.sampled_from("abcdefg"), st.integers(0, 6)), min_size=1, max_size=8
).filter(lambda options: any(w for _, w in options))


@given(options=weights, seed=st.integers(0, 2**32), draws=st.integers(1, 30))
def test_weighted_is_choice_of_the_expanded_list(
    options: list[tuple[str, int]], seed: int, draws: int
) -> None:
    by_weight, by_list = RandomChoices(str(seed)), RandomChoices(str(seed))
    listed = expanded(options)
    for _ in range(draws):
        assert by_weight.weighted(options, "x") == by_list.choice(listed, "x")
    # the same choices were used up: what either draws next is the same
    assert by_weight.rng.getstate() == by_list.rng.getstate()


def test_a_zero_weight_is_never_drawn() -> None:
    choices = RandomChoices("0")
    drawn = {
        choices.weighted([("never", 0), ("a", 1), ("also never", 0), ("b", 2)], "x")
        for _ in range(200)
    }
    assert drawn == {"a", "b"}


def test_expanded_keeps_the_order_and_the_counts() -> None:
    assert expanded([("a", 2), ("b", 0), ("c", 1)]) == ["a", "a", "c"]


def test_no_positive_weight_is_refused() -> None:
    with pytest.raises(ValueError):
        RandomChoices("0").weighted([("a", 0)], "x")
