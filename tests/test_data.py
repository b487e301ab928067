from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl

from manyheads import ConfigError, DataError, LabelSpec, load_dataset, read_texts, split_indices

ROWS = [
    {"text": "a python library", "topic": "python", "tags": ["lib", "py"], "g": "1"},
    {"text": "fonts for the web", "topic": "fonts", "tags": ["font"], "g": "2"},
    {"text": "network server", "topic": "net", "tags": [], "g": "3"},
]


def _csv(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_with_labels_and_groups(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    ds = load_dataset(
        path,
        labels=[LabelSpec("topic", "topic"), LabelSpec("tags", "tags", "multilabel")],
        group_field="g",
    )
    assert ds.texts[0] == "a python library"
    assert ds.labels["topic"] == ["python", "fonts", "net"]
    assert ds.labels["tags"] == [["lib", "py"], ["font"], []]
    assert ds.groups == ["1", "2", "3"]


def test_gzipped_jsonl(tmp_path):
    path = tmp_path / "d.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for r in ROWS:
            fh.write(json.dumps(r) + "\n")
    assert len(load_dataset(path, labels=[LabelSpec("topic", "topic")])) == 3


def test_csv_multilabel_as_json_list_or_separated_string(tmp_path):
    path = _csv(
        tmp_path / "d.csv", 'text,tags\n"a, b",python|lib\nsecond,"[""x"", ""y""]"\nthird,\n'
    )
    ds = load_dataset(path, labels=[LabelSpec("tags", "tags", "multilabel")], label_sep="|")
    assert ds.texts == ["a, b", "second", "third"]
    assert ds.labels["tags"] == [["python", "lib"], ["x", "y"], []]


def test_tsv(tmp_path):
    path = _csv(tmp_path / "d.tsv", "text\tlabel\nhello world\tgreeting\nbye\tfarewell\n")
    ds = load_dataset(path, labels=[LabelSpec("label", "label")])
    assert ds.labels["label"] == ["greeting", "farewell"]


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    ds = load_dataset(
        path, labels=[LabelSpec("topic", "topic"), LabelSpec("tags", "tags", "multilabel")]
    )
    assert ds.labels["tags"][0] == ["lib", "py"]


def test_name_field_mapping(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    ds = load_dataset(path, labels=[LabelSpec("subject", "topic")])
    assert ds.labels["subject"][1] == "fonts"


def test_scalar_labels_become_strings(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [{"text": "a", "y": 1}, {"text": "b", "y": True}, {"text": "c", "y": 2.0}],
    )
    assert load_dataset(path, labels=[LabelSpec("y", "y")]).labels["y"] == ["1", "true", "2"]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [{"txt": "a", "topic": "x"}],
            r"d.jsonl line 1: missing text field 'text' \(fields: txt, topic\)",
        ),
        ([{"text": "", "topic": "x"}], "d.jsonl line 1: field 'text' is empty"),
        ([{"text": "  ", "topic": "x"}], "d.jsonl line 1: field 'text' is empty"),
        ([{"text": 5, "topic": "x"}], "d.jsonl line 1: field 'text' is int, expected a string"),
        ([{"text": None, "topic": "x"}], "d.jsonl line 1: field 'text' is null, expected a string"),
        (
            [{"text": "a", "topic": "x"}, {"text": "b"}],
            "d.jsonl line 2: missing field 'topic' for head 'topic'",
        ),
        ([{"text": "a"}], r"d.jsonl line 1: no field 'topic' for head 'topic' \(fields: text\)"),
        ([{"text": "a", "topic": ""}], "d.jsonl line 1: field 'topic' is empty"),
        ([{"text": "a", "topic": None}], "d.jsonl line 1: field 'topic' is empty"),
        (
            [{"text": "a", "topic": ["x"]}],
            "d.jsonl line 1: field 'topic' must be a single label, got list",
        ),
    ],
)
def test_row_errors_name_file_line_and_field(tmp_path, rows, message):
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataError, match=message):
        load_dataset(path, labels=[LabelSpec("topic", "topic")])


def test_multilabel_field_type_error(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "tags": 3}])
    with pytest.raises(DataError, match="line 1: field 'tags' must be a list of labels"):
        load_dataset(path, labels=[LabelSpec("tags", "tags", "multilabel")])


def test_malformed_json_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "topic": "x"}\n{"text": "b", \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"d.jsonl line 2: malformed JSON \("):
        load_dataset(path, labels=[LabelSpec("topic", "topic")])


def test_json_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('["a", "b"]\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 1: expected a JSON object, got list"):
        load_dataset(path)


def test_csv_row_errors_name_the_row(tmp_path):
    path = _csv(tmp_path / "d.csv", "text,topic\nfine,x\n,y\n")
    with pytest.raises(DataError, match="d.csv line 3: field 'text' is empty"):
        load_dataset(path, labels=[LabelSpec("topic", "topic")])


def test_csv_with_extra_cells(tmp_path):
    path = _csv(tmp_path / "d.csv", "text,topic\nfine,x,extra\n")
    with pytest.raises(DataError, match="d.csv line 2: more cells than the header has columns"):
        load_dataset(path)


def test_unreadable_files(tmp_path):
    with pytest.raises(DataError, match="cannot read .*missing.jsonl: no such file or folder"):
        load_dataset(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="holds no .jsonl, .jsonl.gz, .csv, .tsv or .parquet file"):
        load_dataset(tmp_path)
    bad = tmp_path / "d.xlsx"
    bad.write_bytes(b"PK")
    with pytest.raises(DataError, match=r"d.xlsx: unknown table format; use .csv, .tsv"):
        load_dataset(bad)
    latin = tmp_path / "l.csv"
    latin.write_bytes("text\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(
        DataError, match=r"l.csv line 2: not valid UTF-8 \(byte 0xE9 at character 3\)"
    ):
        load_dataset(latin)
    notgz = tmp_path / "n.jsonl.gz"
    notgz.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="n.jsonl.gz: its name ends in .gz but it is not gzip"):
        load_dataset(notgz)


def test_not_a_parquet_file(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "d.parquet"
    path.write_bytes(b"garbage")
    with pytest.raises(DataError, match="not a Parquet file"):
        load_dataset(path)


def test_empty_files(tmp_path):
    with pytest.raises(DataError, match="e.csv: no rows"):
        load_dataset(_csv(tmp_path / "e.csv", ""))
    with pytest.raises(DataError, match="no rows"):
        load_dataset(_csv(tmp_path / "e.jsonl", "\n"))


def test_missing_fields_can_be_skipped_for_eval(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    ds = load_dataset(
        path,
        labels=[LabelSpec("topic", "topic"), LabelSpec("mood", "mood")],
        skip_missing_fields=True,
    )
    assert ds.missing == ["mood"] and list(ds.labels) == ["topic"]


def test_group_field_missing(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "topic": "x"}])
    with pytest.raises(DataError, match="line 1: missing group field 'g'"):
        load_dataset(path, labels=[LabelSpec("topic", "topic")], group_field="g")


def test_read_texts_plain_and_table(tmp_path):
    plain = _csv(tmp_path / "t.txt", "first text\nsecond text\n")
    assert read_texts(plain) == ["first text", "second text"]
    table = write_jsonl(tmp_path / "t.jsonl", [{"body": "x"}, {"body": "y"}])
    assert read_texts(table, text_field="body") == ["x", "y"]
    blank = _csv(tmp_path / "b.txt", "one\n\nthree\n")
    with pytest.raises(DataError, match="b.txt line 2: empty text"):
        read_texts(blank)


def test_grouped_split_keeps_groups_apart():
    groups = [f"g{i // 3}" for i in range(300)]
    tr, va = split_indices(300, groups=groups, val_fraction=0.2, seed=1)
    assert len(tr) + len(va) == 300
    assert not {groups[i] for i in tr} & {groups[i] for i in va}


def test_stratified_split_keeps_class_shares():
    y = ["a"] * 80 + ["b"] * 20
    _, va = split_indices(100, stratify=y, val_fraction=0.2)
    assert sorted(np.array(y)[va].tolist()).count("b") == 4


def test_split_errors():
    with pytest.raises(DataError, match="a grouped split needs at least two groups"):
        split_indices(10, groups=["g"] * 10)
    with pytest.raises(ConfigError, match="val_fraction must be between 0 and 1, got 1.5"):
        split_indices(10, val_fraction=1.5)
    with pytest.raises(DataError, match="need at least 2 rows"):
        split_indices(1)


def test_partial_rows_label_some_heads_only(tmp_path):
    from conftest import write_jsonl

    from manyheads.data import LabelSpec, load_dataset

    path = write_jsonl(
        tmp_path / "gold.jsonl",
        [{"text": "a", "x": "1"}, {"text": "b", "y": ["p", "q"]}, {"text": "c", "x": None}],
    )
    specs = [LabelSpec("x", "x"), LabelSpec("y", "y", "multilabel"), LabelSpec("z", "z")]
    data = load_dataset(path, labels=specs, partial=True)
    assert data.labels == {"x": ["1", None, None], "y": [None, ["p", "q"], None]}
    assert data.missing == ["z"]


# -- the one reader: bad bytes, broken files, deep JSON, folders ------------------------


def test_a_line_that_is_not_utf8_is_named_with_its_byte(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(
        b'{"text": "fine", "topic": "x"}\n{"text": "bad \xff\xf0 byte", "topic": "y"}\n'
    )
    with pytest.raises(
        DataError, match=r"d.jsonl line 2: not valid UTF-8 \(byte 0xFF at character 14\)"
    ):
        load_dataset(path, labels=[LabelSpec("topic", "topic")])
    plain = tmp_path / "t.txt"
    plain.write_bytes(b"one\ntw\xc3o\n")
    with pytest.raises(
        DataError, match=r"t.txt line 2: not valid UTF-8 \(byte 0xC3 at character 2\)"
    ):
        read_texts(plain)


def test_json_nested_too_deep_is_a_bad_line_not_a_crash(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "topic": ' + "[" * 5000 + "]" * 5000 + "}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"d.jsonl line 1: malformed JSON \(JSON nested too deep"):
        load_dataset(path, labels=[LabelSpec("topic", "topic")])
    listed = tmp_path / "l.jsonl"
    listed.write_text(json.dumps({"text": "a", "tags": "[" * 5000}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="field 'tags' looks like a JSON list but is malformed"):
        load_dataset(listed, labels=[LabelSpec("tags", "tags", "multilabel")])


def test_files_that_are_not_their_format_are_one_line(tmp_path):
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(DataError, match="b.jsonl: it holds NUL bytes, so it is not JSONL text"):
        load_dataset(binary)
    zipped = tmp_path / "z.jsonl"
    zipped.write_bytes(gzip.compress(b'{"text": "a"}\n'))
    with pytest.raises(DataError, match="z.jsonl: it is gzip-compressed; name it z.jsonl.gz"):
        load_dataset(zipped)
    cut = tmp_path / "c.jsonl.gz"
    rows = "".join(json.dumps({"text": f"text {i * 7919 % 100003}"}) + "\n" for i in range(20000))
    whole = gzip.compress(rows.encode())
    cut.write_bytes(whole[:40])  # its first bytes are cut short
    with pytest.raises(DataError, match=r"cannot read .*c.jsonl.gz: broken gzip \("):
        load_dataset(cut)
    cut.write_bytes(whole[: len(whole) // 2])  # its start reads, its end is missing
    with pytest.raises(DataError, match=r"cannot read .*c.jsonl.gz: broken after line \d+ \("):
        load_dataset(cut)


def test_a_folder_of_tables_is_read_file_after_file(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", ROWS[:2])
    _csv(folder / "b.csv", "text,topic\nnetwork server,net\n")
    (folder / ".hidden.jsonl").write_text("not read\n")
    (folder / "notes.txt").write_text("not a table\n")
    ds = load_dataset(folder, labels=[LabelSpec("topic", "topic")])
    assert ds.texts == [r["text"] for r in ROWS] and ds.labels["topic"] == [
        "python",
        "fonts",
        "net",
    ]


def test_blank_lines_can_be_kept_as_empty_texts(tmp_path):
    from manyheads.data import iter_texts

    plain = _csv(tmp_path / "t.txt", "one\n\nthree\n")
    assert [t for _, t in iter_texts(plain, empty=True)] == ["one", "", "three"]
    table = write_jsonl(tmp_path / "t.jsonl", [{"text": "a"}, {"text": ""}])
    assert [t for _, t in iter_texts(table, empty=True)] == ["a", ""]
