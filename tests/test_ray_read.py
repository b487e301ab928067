"""How the Ray engine reads, without Ray: the one reader of tables on an open input
(``read_chunks_from``: a pyarrow file system's file reads the same rows, numbers,
problems and digests as the path does), and the blocks made of its chunks."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from manyheads import DataError
from manyheads.data.tables import check_stream, read_chunks, read_chunks_from

pafs = pytest.importorskip("pyarrow.fs")

LINES = (
    b'{"id": 1, "text": "one"}\n'
    b'{"id": 2, "text": "bad \xff byte"}\n'
    b"\n"
    b'{"id": 3, "text": \n'
    b"[1, 2]\n"
    b'{"id": 4, "text": "four"}'  # no line break at the end
)


def _same(path: Path, fmt: str, size: int = 2) -> list:
    with pafs.LocalFileSystem().open_input_file(str(path)) as fh:
        chunks = list(read_chunks_from(fh, fmt, str(path), size))
    assert chunks == list(read_chunks(path, fmt, size))
    return chunks


def test_a_pyarrow_file_reads_as_the_path_does(tmp_path):
    plain = tmp_path / "in.jsonl"
    plain.write_bytes(LINES)
    chunks = _same(plain, "jsonl")
    assert [n for c in chunks for n in c.numbers] == [1, 2, 4, 5, 6]
    assert chunks[0].problems == {1: "not valid UTF-8 (byte 0xFF at character 23)"}
    assert chunks[1].problems[0].startswith("malformed JSON")
    assert chunks[1].problems[1] == "expected a JSON object, got list"
    packed = tmp_path / "in.jsonl.gz"
    packed.write_bytes(gzip.compress(LINES))
    assert [c.rows for c in _same(packed, "jsonl")] == [c.rows for c in chunks]
    table = tmp_path / "in.csv"
    table.write_bytes(b'id,text\n1,one\n2,"two\nlines"\n3,caf\xe9\n')
    rows = _same(table, "csv", 4)[0]
    assert rows.numbers == [2, 3, 5] and rows.rows[0] == {"id": "1", "text": "one"}
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["a", "b", "c"]}), tmp_path / "in.parquet")
    assert [c.numbers for c in _same(tmp_path / "in.parquet", "parquet")] == [[1, 2], [3]]


def test_an_input_that_is_not_its_format_is_one_line_naming_it(tmp_path):
    cut = tmp_path / "c.jsonl.gz"
    rows = "".join(f'{{"text": "text {i * 7919 % 100003}"}}\n' for i in range(20000))
    whole = gzip.compress(rows.encode())
    cut.write_bytes(whole[: len(whole) // 2])  # its start reads, its end is missing
    local = pafs.LocalFileSystem()
    with pytest.raises(DataError, match=r"cannot read s3://b/c.jsonl.gz: broken after line"):
        list(read_chunks_from(local.open_input_file(str(cut)), "jsonl", "s3://b/c.jsonl.gz", 99))
    zipped = tmp_path / "z.jsonl"
    zipped.write_bytes(gzip.compress(b'{"text": "a"}\n'))
    with pytest.raises(DataError, match=r"s3://b/z.jsonl: it is gzip-compressed; name it z.js"):
        check_stream(local.open_input_file(str(zipped)), "jsonl", "s3://b/z.jsonl")
    with pytest.raises(DataError, match=r"s3://b/z.parquet: not a Parquet file \(it does not"):
        check_stream(local.open_input_file(str(zipped)), "parquet", "s3://b/z.parquet")


def test_the_ray_blocks_carry_each_rows_number_and_problem_without_ray():
    pa = pytest.importorskip("pyarrow")
    from manyheads.data.tables import Chunk
    from manyheads.label.batch import ERROR_COLUMN, ROW_COLUMN, LabelBatch, chunk_block

    rows = [{"id": 1, "text": "SELECT 1;"}, None, {"id": 3, "text": "caf\udce9"}]
    rows.append({"id": 4, "text": "lone \ud800", "n": 1.5})
    chunk = Chunk(rows, [2, 3, 5, 6], {1: "malformed JSON (x)", 2: "not valid UTF-8 (y)"})
    block = chunk_block(chunk, "in.jsonl")
    assert block.column_names == ["id", "text", "n", ROW_COLUMN, ERROR_COLUMN]
    got = block.to_pylist()
    assert [r[ROW_COLUMN] for r in got] == [2, 3, 5, 6]
    assert got[1] == {"id": None, "text": None, "n": None, ROW_COLUMN: 3,
                      ERROR_COLUMN: "malformed JSON (x)"}  # fmt: skip
    assert got[2]["text"] == "caf\ufffd" and got[2][ERROR_COLUMN] == "not valid UTF-8 (y)"
    assert got[3]["text"] == "lone \ufffd" and got[3][ERROR_COLUMN].startswith(
        "holds a lone surrogate (U+D800) at character 5"
    )
    out = LabelBatch("content", heads=["kind"], output_format="csv")(block).to_pylist()
    assert [r["kind"] is None for r in out] == [False, True, True, True]
    assert [r[ERROR_COLUMN] for r in out][1:3] == ["malformed JSON (x)", "not valid UTF-8 (y)"]
    assert list(out[0]) == ["id", "text", "n", "kind", "kind_score", ERROR_COLUMN, ROW_COLUMN]
    mixed = Chunk([{"id": 1, "text": "a"}, {"id": "two", "text": "b"}], [1, 2], {})
    with pytest.raises(DataError, match=r"cannot label in.jsonl on Ray: its rows 1 to 2 mix typ"):
        chunk_block(mixed, "in.jsonl")
    assert pa  # the blocks are pyarrow tables


def test_the_blocks_of_one_file_are_given_one_schema():
    pa = pytest.importorskip("pyarrow")
    from manyheads.label.batch import conform, one_schema

    a = pa.table({"id": [1], "n": pa.array([None], pa.null()), "kind": ["code"]})
    b = pa.table({"id": [2], "n": [1.5], "extra": ["x"], "kind": ["prose"]})
    schema = one_schema([a.schema, b.schema], ["kind"], "in.jsonl")
    assert schema.names == ["id", "n", "extra", "kind"]
    assert conform(a, schema).to_pylist() == [{"id": 1, "n": None, "extra": None, "kind": "code"}]
    assert one_schema([a.schema], [], "x").field("n").type == pa.string()  # null: text
    c = pa.table({"id": ["three"]})
    with pytest.raises(DataError, match=r"cannot label in.jsonl on Ray: its rows mix types one"):
        one_schema([a.schema, c.schema], [], "in.jsonl")
