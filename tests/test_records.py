"""Record batches we encode parse in kafka-python's reader, with crc32c's checksum."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords

from logstore import CorruptRecordError
from logstore.records import Codec, LegacyMessage, Record, build_batch, iter_batches

keys = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))),
                   max_size=3)
records = st.lists(
    st.builds(Record, key=keys, value=keys, headers=headers,
              timestamp=st.integers(min_value=0, max_value=2**41)),
    min_size=1, max_size=20)


def kafka_python_records(data: bytes) -> list[tuple]:
    out = []
    mr = MemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]))
    return out


@settings(max_examples=60, deadline=None)
@given(records, st.integers(min_value=0, max_value=2**40),
       st.sampled_from([Codec.NONE, Codec.GZIP]))
def test_batches_round_trip_and_parse_in_kafka_python(recs, base_offset, codec):
    data = build_batch(recs, base_offset=base_offset, codec=codec)
    ours = [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for b in iter_batches(data) for r in b.records()]
    expected = [(base_offset + i, r.timestamp, r.key, r.value, list(r.headers))
                for i, r in enumerate(recs)]
    assert ours == expected
    assert kafka_python_records(data) == [(o, t, k, v, [(hk, hv) for hk, hv in h])
                                          for o, t, k, v, h in expected]
    (stored,) = struct.unpack_from(">I", data, 17)
    assert stored == crc32c.crc32c(data[21:])


@pytest.mark.parametrize("codec", [Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_other_codecs_decode_in_kafka_python(codec):
    recs = [Record(b"k%d" % i, b"v" * i, [("h", b"x")], 1_700_000_000_000 + i) for i in range(50)]
    data = build_batch(recs, codec=codec)
    assert [r[3] for r in kafka_python_records(data)] == [r.value for r in recs]
    assert [r.value for b in iter_batches(data) for r in b.records()] == [r.value for r in recs]


def test_kafka_python_batches_decode_here():
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i in range(10):
        builder.append(i, timestamp=1000 + i, key=b"key%d" % i, value=b"val%d" % i,
                       headers=[("a", b"b")])
    data = bytes(builder.build())
    (batch,) = list(iter_batches(data))
    assert batch.codec is Codec.GZIP and batch.crc_valid()
    assert [(r.offset, r.key, r.value, r.headers) for r in batch.records()] == [
        (i, b"key%d" % i, b"val%d" % i, [("a", b"b")]) for i in range(10)]


def test_flipped_byte_is_a_crc_error_at_its_batch():
    one = build_batch([(b"a", b"b")], base_offset=0)
    two = bytearray(build_batch([(b"c", b"d")], base_offset=1))
    two[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batches(one + bytes(two)))
    assert info.value.position == len(one)


def test_legacy_magic_messages_are_recognised_not_a_crash():
    # A magic 1 message: offset, size, crc, magic, attributes, timestamp, key, value.
    body = struct.pack(">bbq", 1, 0, 1234) + struct.pack(">i", 1) + b"k" + struct.pack(">i", 2) + b"vv"
    msg = struct.pack(">qiI", 7, len(body) + 4, 0) + body
    (item,) = list(iter_batches(msg))
    assert isinstance(item, LegacyMessage)
    assert (item.offset, item.magic, item.key, item.value) == (7, 1, b"k", b"vv")
    with pytest.raises(CorruptRecordError):
        list(iter_batches(msg[:-3]))
