"""The weights announcement of a LoRA adapter: the ``adapter`` field is
backward-compatible both ways, and an adapter announcement must carry the
adapter's config and tensors."""

from __future__ import annotations

import msgspec
import pytest

from rlvr.protocol import MessageInvalidError, WeightFile, WeightsAnnouncement, check_message, decode, encode


def _announcement(names: list[str], adapter: bool) -> WeightsAnnouncement:
    return WeightsAnnouncement(
        run="t", version=2, step=20, transport="object_store", location="rlvr-t-weights",
        files=[WeightFile(n, "ab" * 32, 10) for n in names], dtype="fp32", bytes=10 * len(names),
        created_at=1.0, adapter=adapter,
    )


def test_adapter_announcement_round_trips_and_passes():
    ann = _announcement(["v2/adapter_model.safetensors", "v2/adapter_config.json"], adapter=True)
    assert decode(encode(ann), WeightsAnnouncement) == ann
    check_message(ann)


def test_old_form_without_adapter_decodes_as_full_weights():
    old = msgspec.to_builtins(_announcement(["v2/model.safetensors"], adapter=False))
    old.pop("adapter", None)
    ann = decode(msgspec.msgpack.encode(old), WeightsAnnouncement)
    assert ann.adapter is False and ann.version == 2


def test_full_weights_announcement_does_not_carry_the_field():
    # omit_defaults: a full-weight announcement is byte-identical to the old form.
    raw = msgspec.msgpack.decode(encode(_announcement(["v2/model.safetensors"], adapter=False)))
    assert "adapter" not in raw


@pytest.mark.parametrize(
    ("names", "reason"),
    [
        (["v2/adapter_model.safetensors"], "exactly one adapter_config.json"),
        (["v2/adapter_config.json"], "needs a .safetensors file"),
        (["v2/adapter_config.json", "v2/x/adapter_config.json", "v2/a.safetensors"], "exactly one"),
    ],
)
def test_adapter_announcement_without_its_files_is_invalid_naming_files(names, reason):
    with pytest.raises(MessageInvalidError, match=f"files: .*{reason}"):
        check_message(_announcement(names, adapter=True))
