"""DAPO overlong penalty: exact values at and around the boundaries."""

import msgspec
import pytest

from rlvr.verify.shaping import OverlongParams, overlong_penalty


@pytest.mark.parametrize(
    ("length", "penalty"),
    [
        (0, 0.0),
        (3000, 0.0),
        (3072, 0.0),  # exactly L_max - L_cache: still free
        (3073, -1 / 1024),
        (3584, -0.5),  # half way through the cache zone
        (4095, -1023 / 1024),
        (4096, -1.0),  # exactly L_max
        (4097, -1.0),
        (100_000, -1.0),
    ],
)
def test_soft_penalty_l_max_4096_l_cache_1024(length, penalty):
    assert overlong_penalty(length, max_len=4096, cache_len=1024) == pytest.approx(penalty, abs=1e-12)


def test_zero_cache_is_a_hard_cut():
    assert overlong_penalty(10, max_len=10, cache_len=0) == 0.0
    assert overlong_penalty(11, max_len=10, cache_len=0) == -1.0


def test_cache_equal_to_max_penalises_from_the_first_token():
    assert overlong_penalty(0, max_len=4, cache_len=4) == 0.0
    assert overlong_penalty(1, max_len=4, cache_len=4) == -0.25


def test_params_validated():
    with pytest.raises(msgspec.ValidationError, match="cache_len .5. must not exceed max_len .4."):
        msgspec.convert({"max_len": 4, "cache_len": 5}, OverlongParams)
    with pytest.raises(msgspec.ValidationError, match=r"at `\$.max_len`"):
        msgspec.convert({"max_len": 0, "cache_len": 0}, OverlongParams)
