"""Length shaping: DAPO's soft overlong penalty.

The penalty is 0 for completions up to ``max_len - cache_len`` tokens, falls
linearly to -1 at ``max_len``, and stays -1 beyond. It is a pure function of
the completion's token count; ``rlvr.verify.composite`` adds it as the
component ``overlong`` when a composite spec configures it. Counting tokens is
not done here: the count comes from the sample (``VerifyContext``).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct


class OverlongParams(Struct, frozen=True, forbid_unknown_fields=True):
    # L_max: completions longer than this get the full penalty -1.
    max_len: Annotated[int, Meta(gt=0)]
    # L_cache: the soft zone, the last cache_len tokens before max_len (0: a hard cut).
    cache_len: Annotated[int, Meta(ge=0)]

    def __post_init__(self) -> None:
        if self.cache_len > self.max_len:
            raise ValueError(f"cache_len ({self.cache_len}) must not exceed max_len ({self.max_len})")


def overlong_penalty(length: int, max_len: int, cache_len: int) -> float:
    """DAPO's soft overlong punishment for a completion of ``length`` tokens.

    0 for length <= max_len - cache_len; ((max_len - cache_len) - length) / cache_len
    up to max_len (reaching -1 exactly at max_len); -1 beyond max_len.
    """
    free = max_len - cache_len
    if length <= free:
        return 0.0
    if length > max_len:
        return -1.0
    return (free - length) / cache_len  # cache_len > 0 here: free < length <= max_len


__all__ = ["OverlongParams", "overlong_penalty"]
