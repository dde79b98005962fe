"""The fair-share tournament compares nodes by ``order_key`` (floats first, exact fractions on a
tie) instead of the exact ``ShareKey``: the two must order any shares the same way."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.queues.order import ShareKey, order_key

# Shares as the tournament makes them: usage / capacity * 1000 / weight, often equal or nearly so.
fractions = st.one_of(
    st.builds(Fraction, st.integers(0, 10**12), st.integers(1, 10**12)),
    st.builds(
        lambda n, d, w: Fraction(n, d) * 1000 / w,
        st.integers(0, 50),
        st.integers(1, 50),
        st.integers(1, 4000),
    ),
    st.builds(lambda n: Fraction(10**17 + n, 10**17), st.integers(0, 3)),  # equal as floats
)
keys = st.tuples(st.booleans(), fractions, st.sampled_from(["a", "b", "team-001"]))


@given(st.lists(keys, min_size=2, max_size=12))
def test_order_key_sorts_like_the_exact_share(shares: list[ShareKey]) -> None:
    exact = sorted(range(len(shares)), key=lambda i: (shares[i], i))
    fast = sorted(range(len(shares)), key=lambda i: (order_key(shares[i]), i))
    assert fast == exact
    assert min(shares) == shares[min(range(len(shares)), key=lambda i: (order_key(shares[i]), i))]
