"""`logkeeper dump-log`: logstore's segment dump (logstore/dump.py), with the group
coordinator's record decoder for `--offsets-decoder` (docs/formats.md, "Group records"),
which logstore cannot know of."""

from __future__ import annotations

from typing import Any

from logstore import dump


def _decode_group_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    from ..coordinator import records  # kafka-python's generator: only when asked

    return records.describe(records.decode(key, value))


def main(argv: list[str] | None = None) -> int:
    return dump.main(argv, offsets_decoder=_decode_group_record)
