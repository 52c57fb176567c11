"""The audit's output tables as the findings pass's tasks write them (spark_audit.output),
without Spark: rows in, Parquet out, read back with pyarrow; the driver's commit."""

from __future__ import annotations

from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from spark_audit import findings, output, schema  # noqa: E402


def finding(i: int) -> tuple:
    return ("h1", "/d", "t", i % 7, f"{i:020d}.log", i * 100, i, i + 1 if i % 2 else None,
            "bad-crc", "error", f"detail {i}")


def test_rows_come_back_as_written_in_row_groups_of_bounded_size(tmp_path: Path,
                                                                monkeypatch) -> None:
    monkeypatch.setattr(output, "ROWS_PER_GROUP", 1000)
    rows = [finding(i) for i in range(2500)]
    writer = output.TableWriter(tmp_path / "part.parquet", schema.FINDINGS)
    for row in rows:
        writer.add(row)
    writer.close()
    f = pq.ParquetFile(tmp_path / "part.parquet")
    assert [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)] == [1000, 1000, 500]
    table = f.read()
    assert table.schema.names == schema.FINDINGS.fieldNames()
    assert str(table.schema.field("partition").type) == "int32"  # Spark's IntegerType
    assert [tuple(r.values()) for r in table.to_pylist()] == rows


def test_a_table_without_rows_still_has_its_columns(tmp_path: Path) -> None:
    output.write_table([], schema.HEALTH, tmp_path / "health.parquet")
    (part,) = (tmp_path / "health.parquet").iterdir()
    table = pq.read_table(part)
    assert table.num_rows == 0 and table.schema.names == schema.HEALTH.fieldNames()


def test_a_row_that_does_not_fit_its_column_is_refused(tmp_path: Path) -> None:
    writer = output.TableWriter(tmp_path / "part.parquet", schema.FINDINGS)
    writer.add(("h1", "/d", "t", "not a number", None, None, None, None, "k", "error", "x"))
    with pytest.raises(Exception, match="int"):
        writer.close()


def test_commit_moves_the_counted_attempts_and_drops_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "findings.parquet").mkdir(parents=True)
    (out / "findings.parquet" / "part-00000-old.parquet").write_bytes(b"an older audit's")
    staging = output.new_staging(out)
    written = []
    for index in (0, 1):
        tally = findings.Tally()
        tagged = iter([(findings.FINDING, finding(index)), (findings.TALLY, tally)])
        ((got, files),) = output.write_task(index, tagged, str(staging))
        assert got is tally
        written.append(files)
    # A failed attempt's leftovers, which the driver was not told of.
    (staging / "findings" / "part-00001-3.parquet").write_bytes(b"torn")
    output.commit(staging, out, written)
    assert sorted(p.name for p in out.iterdir()) == ["findings.parquet", "segments.parquet"]
    parts = sorted((out / "findings.parquet").iterdir())
    assert [p.name for p in parts] == [w["findings"] for w in written]
    got = [tuple(r.values()) for p in parts for r in pq.read_table(p).to_pylist()]
    assert got == [finding(0), finding(1)]
    assert all(pq.read_table(p).num_rows == 0 for p in (out / "segments.parquet").iterdir())
