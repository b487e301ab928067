"""Labelling big files: formats and columns, bad rows, resuming after a kill, the
command line, other processes, Ray Data."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from manyheads import Bundle, ConfigError, DataError
from manyheads.label import label_file, label_rows

pytest.importorskip("onnxruntime")  # the built-in bundle answers with onnxruntime

TEXTS = [
    "def f():\n    return 1",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "SELECT * FROM users;",
    'db_password = "hunter2-Prod!"',
    "Le renard brun saute par-dessus le chien.",
]


def _write_jsonl(path: Path, rows: list, extra_lines: list[str] = ()) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        for line in extra_lines:
            fh.write(line + "\n")
    return path


def _rows(n: int) -> list[dict]:
    return [{"id": i, "text": TEXTS[i % len(TEXTS)] + f" #{i}", "n": i * 1.5} for i in range(n)]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def content() -> Bundle:
    return Bundle.load("content", cache=None)


def test_jsonl_keeps_every_column_and_adds_each_heads_answer(tmp_path, content):
    source = _write_jsonl(tmp_path / "in.jsonl", _rows(23))
    summary = label_file(source, "content", tmp_path / "out.jsonl", part_rows=5)
    assert (summary.rows, summary.bad_rows, summary.parts, summary.errors) == (23, 0, 5, None)
    got = _read_jsonl(tmp_path / "out.jsonl")
    want = content.predict([r["text"] for r in _rows(23)])
    assert [r["id"] for r in got] == list(range(23)) and got[3]["n"] == 4.5
    for row, answer in zip(got, want, strict=True):
        for head in ("code_language", "language", "kind"):
            assert row[head]["label"] == answer[head]["label"]
            assert len(row[head]["scores"]) <= 5  # --scores top, the default
        assert row["risk"]["labels"] == answer["risk"]["labels"]
    assert not (tmp_path / "out.jsonl.parts").exists()


@pytest.mark.parametrize("fmt", ["csv", "tsv", "parquet"])
def test_flat_formats_have_a_label_and_a_score_column_per_head(tmp_path, fmt, content):
    source = _write_jsonl(tmp_path / "in.jsonl", _rows(12))
    label_file(source, "content", tmp_path / f"out.{fmt}", part_rows=5, heads=["kind", "risk"])
    if fmt == "parquet":
        pq = pytest.importorskip("pyarrow.parquet")
        table = pq.read_table(tmp_path / "out.parquet")
        assert table.column_names == ["id", "text", "n", "kind", "kind_score", "risk", "risk_score"]
        types = {f.name: str(f.type) for f in table.schema}
        assert types["kind"] == "string" and types["kind_score"] == "float"
        assert types["risk"] == "list<element: string>"
        rows = table.to_pylist()
    else:
        import csv

        with open(tmp_path / f"out.{fmt}", encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="," if fmt == "csv" else "\t"))
        assert list(rows[0]) == ["id", "text", "n", "kind", "kind_score", "risk", "risk_score"]
        for r in rows:
            r["risk"] = json.loads(r["risk"])
    want = content.predict([r["text"] for r in _rows(12)], heads=["kind", "risk"])
    assert [r["kind"] for r in rows] == [a["kind"]["label"] for a in want]
    assert [r["risk"] for r in rows] == [a["risk"]["labels"] for a in want]
    assert float(rows[0]["kind_score"]) == pytest.approx(want[0]["kind"]["score"], abs=1e-6)


def test_every_bad_row_is_kept_aside_with_its_reason_and_none_stops_the_job(tmp_path):
    rows = [
        {"id": "a", "text": "fine text here"},
        {"id": "b"},
        {"id": "c", "text": 12},
        {"id": "d", "text": ""},
        {"id": "e", "text": "   \n"},
        {"id": "f", "text": "x" * 60},
        {"id": "g", "text": "another fine one"},
        {"id": "i", "text": None},
    ]
    lines = ['{"id": "h", "text": "\\ud800 lone"}', "not json at all", "[1, 2]"]
    source = _write_jsonl(tmp_path / "in.jsonl", rows, lines)
    summary = label_file(source, "content", tmp_path / "out.jsonl", id_field="id", max_chars=50)
    assert (summary.rows, summary.bad_rows) == (11, 9)
    bad = _read_jsonl(tmp_path / "out.jsonl.errors.jsonl")
    assert [(b["row"], b.get("id")) for b in bad] == [
        (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, "f"), (8, "i"), (9, "h"), (10, None),
        (11, None),
    ]  # fmt: skip
    reasons = [b["reason"] for b in bad]
    assert reasons[0] == reasons[5] == "no field 'text'"  # missing, or null
    assert reasons[1] == "field 'text' is int, not text"
    assert reasons[2] == reasons[3] == "field 'text' is empty"
    assert reasons[4] == "field 'text' has 60 characters, over the limit of 50"
    assert "lone surrogate" in reasons[6]
    assert (
        reasons[7].startswith("malformed JSON (")
        and reasons[8] == "expected a JSON object, got list"
    )
    out = _read_jsonl(tmp_path / "out.jsonl")
    assert len(out) == 11 and out[1]["kind"] is None and out[0]["kind"]["label"]
    # read in pieces instead, the long text is answered
    label_file(source, "content", tmp_path / "w.jsonl", max_chars=50, long_texts="window")
    assert _read_jsonl(tmp_path / "w.jsonl")[5]["kind"]["label"]


def test_a_hierarchical_heads_labels_are_a_list_in_flat_formats(tmp_path):
    import pyarrow.parquet as pq

    texts = [f"{w} {i}" for i in range(40) for w in ("purr whiskers", "bark fetch")]
    paths = [["animal::cat"] if t.startswith("purr") else ["animal::dog"] for t in texts]
    b = Bundle(trunk="hashing", cache=None)
    b.fit_head("tree", texts, paths, kind="hierarchical")
    b.save(tmp_path / "b")
    source = _write_jsonl(tmp_path / "in.jsonl", [{"text": "purr whiskers now"}])
    label_file(source, tmp_path / "b", tmp_path / "out.csv")
    row = (tmp_path / "out.csv").read_text(encoding="utf-8").splitlines()[1]
    assert '"[""animal"", ""animal::cat""]"' in row
    label_file(source, tmp_path / "b", tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("tree").to_pylist() == [["animal", "animal::cat"]]
    assert str(table.schema.field("tree_score").type.value_type) == "float"


def test_a_csv_row_with_more_cells_than_the_header_is_a_bad_row(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text('id,text\n1,"SELECT 1;"\n2,"two",extra\n3,"def f(): pass"\n', "utf-8")
    summary = label_file(source, "content", tmp_path / "out.csv", id_field="id")
    assert (summary.rows, summary.bad_rows) == (3, 1)
    assert _read_jsonl(tmp_path / "out.csv.errors.jsonl") == [
        {"file": "in.csv", "row": 3, "id": "2", "reason": "more cells than the header has columns"}
    ]


def test_a_folder_is_read_file_after_file_into_one_output(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _write_jsonl(folder / "a.jsonl", _rows(7))
    _write_jsonl(folder / "b.jsonl", [*_rows(4), {"id": 99}])
    (folder / "notes.txt").write_text("ignored")
    summary = label_file(folder, "content", tmp_path / "out.jsonl", part_rows=3)
    assert (summary.rows, summary.bad_rows) == (12, 1)
    assert [r["id"] for r in _read_jsonl(tmp_path / "out.jsonl")] == [*range(7), *range(4), 99]
    assert _read_jsonl(tmp_path / "out.jsonl.errors.jsonl") == [
        {"file": "b.jsonl", "row": 5, "reason": "no field 'text'"}
    ]


KILLED = """
import os, sys
from manyheads.label import label_file
stop = int(sys.argv[4])
label_file(sys.argv[1], "content", sys.argv[2], part_rows=int(sys.argv[3]),
           on_part=lambda n: os.kill(os.getpid(), 9) if n == stop else None)
"""


def _label_in_a_child(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KILLED, *args], capture_output=True, text=True)


@pytest.mark.heavy
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_killed_job_run_again_gives_the_same_bytes(tmp_path, fmt):
    source = _write_jsonl(tmp_path / "in.jsonl", [*_rows(60), {"id": 1000}])
    whole = tmp_path / f"whole.{fmt}"
    label_file(source, "content", whole, part_rows=7)
    out = tmp_path / f"out.{fmt}"
    for stop in (0, 4):  # killed after its first part, then after a later one
        done = _label_in_a_child([str(source), str(out), "7", str(stop)])
        assert done.returncode == -signal.SIGKILL
        assert not out.exists() and (tmp_path / f"out.{fmt}.parts").is_dir()
    summary = label_file(source, "content", out, part_rows=7)
    assert summary.resumed_parts == 5 and summary.parts == 4
    assert out.read_bytes() == whole.read_bytes()
    assert (tmp_path / f"out.{fmt}.errors.jsonl").read_bytes() == (
        tmp_path / f"whole.{fmt}.errors.jsonl"
    ).read_bytes()
    assert not (tmp_path / f"out.{fmt}.parts").exists()


@pytest.mark.heavy
def test_killed_at_a_random_moment_the_command_again_gives_the_same_bytes(tmp_path):
    source = _write_jsonl(tmp_path / "in.jsonl", _rows(20000))  # some seconds of work
    whole = tmp_path / "whole.csv"
    command = [sys.executable, "-m", "manyheads.cli", "label", str(source), "-b", "content"]
    started = time.monotonic()
    subprocess.run([*command, "-o", str(whole)], check=True, capture_output=True)
    took = time.monotonic() - started  # the moments are fractions of a whole run here
    out = tmp_path / "out.csv"
    rng = random.Random(7)
    landed = 0  # kills that stopped a job before its end
    for _ in range(3):  # each run takes up what the one before left
        child = subprocess.Popen([*command, "-o", str(out)], stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 0.8) * took)
        child.send_signal(signal.SIGKILL)
        child.wait()
        if out.exists():  # what was left took less than the pause
            break
        landed += 1
    assert landed >= 1
    if not out.exists():
        done = subprocess.run([*command, "-o", str(out)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert out.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.jsonl", "out.csv", "out.csv.job.json", "whole.csv", "whole.csv.job.json"
    ]  # fmt: skip


def test_another_job_is_refused_and_restart_starts_over(tmp_path):
    source = _write_jsonl(tmp_path / "in.jsonl", _rows(10))
    out = tmp_path / "out.jsonl"
    parts = tmp_path / "out.jsonl.parts"
    parts.mkdir()
    (parts / "job.json").write_text('{"heads": ["kind"]}')
    with pytest.raises(ConfigError, match=r"holds the parts of another job \(its bundle, heads"):
        label_file(source, "content", out)
    label_file(source, "content", out, restart=True)
    again = label_file(source, "content", out)  # done: nothing read or written
    assert again.already_done and (again.rows, again.parts, again.answered_rows) == (10, 0, 0)
    with pytest.raises(ConfigError, match=r"out.jsonl was written by another job \(its heads "):
        label_file(source, "content", out, heads=["kind"])
    summary = label_file(source, "content", out, heads=["kind"], restart=True)
    assert summary.rows == 10 and list(_read_jsonl(out)[0]) == ["id", "text", "n", "kind"]


def test_a_gz_output_is_gzipped_the_same_bytes_each_run(tmp_path):
    import gzip

    source = _write_jsonl(tmp_path / "in.jsonl", _rows(9))
    label_file(source, "content", tmp_path / "plain.jsonl", part_rows=4)
    label_file(source, "content", tmp_path / "a.jsonl.gz", part_rows=4)
    time.sleep(1.1)  # a gzip header with a time in it would differ now
    label_file(source, "content", tmp_path / "b.jsonl.gz", part_rows=4)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
    unzipped = gzip.decompress((tmp_path / "a.jsonl.gz").read_bytes())
    assert unzipped == (tmp_path / "plain.jsonl").read_bytes()
    with pytest.raises(ConfigError, match="Parquet is compressed inside; name it .parquet"):
        label_file(source, "content", tmp_path / "c.parquet.gz")


def test_the_engine_and_its_options_are_checked(tmp_path):
    from manyheads.label import label

    source = _write_jsonl(tmp_path / "in.jsonl", _rows(3))
    with pytest.raises(ConfigError, match="engine must be one of local, ray, got 'spark'"):
        label(source, "content", tmp_path / "o.jsonl", engine="spark")
    with pytest.raises(ConfigError, match="address is for the ray engine"):
        label(source, "content", tmp_path / "o.jsonl", address="ray://head:10001")
    pytest.importorskip("ray")
    with pytest.raises(ConfigError, match="the ray engine writes plain files; drop the .gz"):
        label(source, "content", tmp_path / "o.jsonl.gz", engine="ray")
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "o.jsonl.gz").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"output": "out.txt"}, "cannot tell the format of"),
        ({"output_format": "xml"}, "format must be one of jsonl, csv, tsv, parquet"),
        ({"scores": "best"}, "scores must be one of all, top, none"),
        ({"long_texts": "cut"}, "long_texts must be one of refuse, window"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"workers": 0}, "workers must be a positive integer"),
        ({"heads": ["nope"]}, "unknown head 'nope'"),
    ],
)
def test_bad_options_are_refused_before_any_row_is_read(tmp_path, options, message):
    source = _write_jsonl(tmp_path / "in.jsonl", _rows(3))
    output = tmp_path / options.pop("output", "out.jsonl")
    with pytest.raises(Exception, match=message):
        label_file(source, "content", output, **options)
    assert not output.exists() and not (tmp_path / "out.jsonl.parts").exists()


def test_label_rows_answers_an_iterable_and_says_why_a_row_is_bad(content):
    got = list(label_rows(content, ["def f(): pass", "", {"text": "Hallo Welt"}, {}], batch_size=2))
    assert [reason for _, _, reason in got] == [
        None,
        "field 'text' is empty",
        None,
        "no field 'text'",
    ]
    assert got[0][1]["code_language"]["label"] == "python" and got[1][1] is None


@pytest.mark.heavy
def test_worker_processes_give_the_same_bytes(tmp_path):
    source = _write_jsonl(tmp_path / "in.jsonl", _rows(40))
    label_file(source, "content", tmp_path / "one.jsonl", part_rows=6)
    label_file(source, "content", tmp_path / "two.jsonl", part_rows=6, workers=2)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()


def test_the_command_prints_one_summary_line(tmp_path, capsys):
    from manyheads.cli import main

    source = _write_jsonl(tmp_path / "in.jsonl", [*_rows(5), {"id": 5, "text": ""}])
    out = tmp_path / "out.parquet"
    assert main(["label", str(source), "-o", str(out), "--id-field", "id"]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("labelled 6 rows, 1 bad (in ") and str(out) in printed.out
    code = main(["label", str(source), "-o", str(out), "--restart", "--fail-on-bad-rows"])
    assert code == 1
    assert capsys.readouterr().err.strip() == ("manyheads: error: 1 bad rows (--fail-on-bad-rows)")
    assert main(["label", str(source), "-o", str(out)]) == 0  # a rerun in a pipeline
    assert capsys.readouterr().out.startswith(f"already done: {out} holds 6 rows, 1 bad")


def test_the_ray_callable_labels_a_batch_without_ray():
    pa = pytest.importorskip("pyarrow")
    from manyheads.label.batch import ERROR_COLUMN, LabelBatch

    labeller = LabelBatch("content", heads=["kind", "risk"], output_format="csv")
    out = labeller(pa.Table.from_pylist([{"id": 1, "text": "SELECT 1;"}, {"id": 2, "text": ""}]))
    rows = out.to_pylist()
    assert list(rows[0]) == ["id", "text", "kind", "kind_score", "risk", "risk_score", ERROR_COLUMN]
    assert rows[0]["kind"] == "code" and rows[0][ERROR_COLUMN] is None
    assert rows[1]["kind"] is None and rows[1][ERROR_COLUMN] == "field 'text' is empty"


@pytest.fixture(scope="module")
def ray_here():
    """One local Ray (2 CPUs) for the module's Ray tests."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.heavy
def test_ray_labels_the_same_rows_as_the_local_engine(tmp_path, ray_here):
    from manyheads.label.formats import writable
    from manyheads.label.ray_engine import label_with_ray

    lines = [json.dumps(row).encode() for row in _rows(50)]
    lines[21:21] = [b'{"id": 100, "text": "bad \xff\xf0 byte"}']  # line 22
    lines[32:32] = [b'{"id": 101, "text": ']  # line 33
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join([*lines, b'{"id": 102, "text": ""}']) + b"\n")
    label_file(source, "content", tmp_path / "local.jsonl", id_field="id")
    summary = label_with_ray(source, "content", tmp_path / "ray.jsonl", id_field="id", workers=1)
    assert (summary.rows, summary.bad_rows) == (53, 3)
    written = sorted((tmp_path / "ray.jsonl" / "in.jsonl").glob("*.jsonl"))
    got = [row for path in written for row in _read_jsonl(path)]
    # Arrow: every field in every row (null where a row lacks it), and UTF-8 only
    fields = {"id": None, "text": None, "n": None}
    want = [fields | writable(row) for row in _read_jsonl(tmp_path / "local.jsonl")]
    assert sorted(got, key=str) == sorted(want, key=str)
    assert [r["text"] for r in got if r["id"] == 100] == ["bad \ufffd\ufffd byte"]
    errors = _read_jsonl(tmp_path / "ray.jsonl" / "errors.jsonl")
    assert errors == _read_jsonl(tmp_path / "local.jsonl.errors.jsonl")
    assert [(e["row"], e["id"], e["reason"][:15]) for e in errors] == [
        (22, 100, "not valid UTF-8"), (33, None, "malformed JSON "), (53, 102, "field 'text' is"),
    ]  # fmt: skip
    assert os.path.isfile(tmp_path / "ray.jsonl" / ".done-in.jsonl")


@pytest.mark.heavy
def test_ray_reads_and_writes_uris_and_skips_the_files_done(tmp_path, ray_here):
    import gzip

    import pyarrow.parquet as pq

    from manyheads.label.ray_engine import label_with_ray

    folder = tmp_path / "in"
    folder.mkdir()
    rows = _rows(12)
    with gzip.open(folder / "a.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows[:7])
    (folder / "b.csv").write_text(
        "id,text\n" + "".join(f'{r["id"]},"{r["text"]}"\n' for r in rows[7:]), encoding="utf-8"
    )
    (folder / ".hidden.jsonl").write_text("{}\n")
    out = f"file://{tmp_path}/out.parquet"
    summary = label_with_ray(f"file://{folder}", "content", out, heads=["kind"])
    assert (summary.rows, summary.parts, summary.resumed_parts) == (12, 2, 0)
    assert summary.output == out
    csv_ids = [str(r["id"]) for r in rows[7:]]  # CSV cells are text, as the local engine's
    for name, ids in (("a.jsonl.gz", [r["id"] for r in rows[:7]]), ("b.csv", csv_ids)):
        table = pq.read_table(tmp_path / "out.parquet" / name)
        assert table.column("id").to_pylist() == ids
        assert table.schema.field("kind").type == "string"
        assert table.schema.field("kind_score").type == "float"
    again = label_with_ray(f"file://{folder}", "content", out, heads=["kind"])
    assert (again.rows, again.parts, again.resumed_parts, again.answered_rows) == (12, 0, 2, 0)
    with pytest.raises(ConfigError, match=r"holds the parts of another job \(its heads differs"):
        label_with_ray(f"file://{folder}", "content", out, heads=["risk"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty holds no .jsonl, .jsonl.gz, .csv, .tsv or .parq"):
        label_with_ray(f"file://{tmp_path}/empty", "content", out)
    with pytest.raises(DataError, match="no such file or folder: file://"):
        label_with_ray(f"file://{tmp_path}/nothing.jsonl", "content", out)


@pytest.mark.heavy
def test_ray_a_file_that_breaks_off_or_mixes_types_is_one_line(tmp_path, ray_here):
    import gzip

    from manyheads.label.ray_engine import label_with_ray

    cut = tmp_path / "cut.jsonl.gz"
    whole = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in _rows(20000)))
    cut.write_bytes(whole[: len(whole) // 2])  # its start reads, its end is missing
    with pytest.raises(
        DataError, match=r"cannot read .*cut.jsonl.gz: broken after line \d+ \("
    ) as e:
        label_with_ray(cut, "content", tmp_path / "a.jsonl", workers=1)
    assert "\n" not in str(e.value)
    mixed = _write_jsonl(
        tmp_path / "mixed.jsonl", [{"id": 1, "text": "a"}, {"id": "b", "text": "b"}]
    )
    with pytest.raises(DataError, match=r"cannot label .*mixed.jsonl on Ray: its rows 1 to 2 mix"):
        label_with_ray(mixed, "content", tmp_path / "b.jsonl", workers=1)


@pytest.mark.heavy
def test_ray_refuses_an_unknown_scheme_and_a_folder_of_something_else(tmp_path, ray_here):
    from manyheads.label.ray_engine import label_with_ray

    source = _write_jsonl(tmp_path / "in.jsonl", _rows(3))
    with pytest.raises(ConfigError, match="cannot open nope://bucket/x.jsonl: "):
        label_with_ray("nope://bucket/x.jsonl", "content", tmp_path / "out.jsonl")
    (tmp_path / "out.jsonl").mkdir()
    (tmp_path / "out.jsonl" / "mine.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="out.jsonl exists and is not this job's folder"):
        label_with_ray(source, "content", tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl" / "mine.txt").read_text() == "keep me"


def test_a_parquet_row_that_does_not_fit_the_first_parts_types_is_one_line(tmp_path):
    rows = [{"id": i, "text": f"text {i}"} for i in range(4)] + [{"id": "x", "text": "t"}]
    source = _write_jsonl(tmp_path / "in.jsonl", rows)
    with pytest.raises(DataError, match="a row does not fit the output's column types"):
        label_file(source, "content", tmp_path / "out.parquet", part_rows=4)
    assert not (tmp_path / "out.parquet").exists()


# -- the input's edge: bad bytes, files that cannot be read, outputs that cannot be written


def test_a_row_that_is_not_utf8_is_a_bad_row_and_the_job_finishes(tmp_path):
    source = tmp_path / "in.jsonl"
    with open(source, "wb") as fh:
        for i in range(12):
            fh.write(json.dumps({"id": i, "text": f"line {i}"}).encode() + b"\n")
            if i == 7:
                fh.write(b'{"id": "x", "text": "bad \xff\xf0 byte"}\n')
        fh.write(b'{"id": "deep", "text": ' + b"[" * 5000 + b"]" * 5000 + b"}\n")
    csv_in = tmp_path / "in.csv"
    csv_in.write_bytes(b"id,text\n1,fine\n2,caf\xe9\n3,also fine\n")
    summary = label_file(source, "content", tmp_path / "out.jsonl", id_field="id", part_rows=5)
    assert (summary.rows, summary.bad_rows) == (14, 2)
    bad = _read_jsonl(tmp_path / "out.jsonl.errors.jsonl")
    assert bad[0] == {
        "file": "in.jsonl", "row": 9, "id": "x",
        "reason": "not valid UTF-8 (byte 0xFF at character 25)",
    }  # fmt: skip
    assert bad[1]["row"] == 14 and bad[1]["reason"].startswith("malformed JSON (JSON nested too")
    out = _read_jsonl(tmp_path / "out.jsonl")
    assert out[8]["id"] == "x" and out[8]["kind"] is None and out[9]["kind"]["label"]
    summary = label_file(csv_in, "content", tmp_path / "out.csv", id_field="id")
    assert (summary.rows, summary.bad_rows) == (3, 1)
    assert _read_jsonl(tmp_path / "out.csv.errors.jsonl") == [
        {
            "file": "in.csv",
            "row": 3,
            "id": "2",
            "reason": "not valid UTF-8 (byte 0xE9 at character 3)",
        }
    ]
    assert "2,caf\ufffd," in (tmp_path / "out.csv").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        ("in.jsonl.gz", b'{"text": "a"}\n', "its name ends in .gz but it is not gzip-compressed"),
        ("in.jsonl", bytes(range(256)) * 4, "it holds NUL bytes, so it is not JSONL text"),
        ("in.parquet", b"PAR1garbagePAR1", "not a Parquet file"),
        ("in.csv", b"PAR1" + b"x" * 40, "it is a Parquet file; name it .parquet"),
    ],
)
def test_a_file_that_cannot_be_read_is_one_line_and_leaves_nothing(tmp_path, name, body, message):
    source = tmp_path / name
    source.write_bytes(body)
    with pytest.raises(DataError, match=f"cannot read .*{name}: {message}"):
        label_file(source, "content", tmp_path / "out.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_lone_surrogate_row_with_a_parquet_output(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    source = _write_jsonl(tmp_path / "in.jsonl", _rows(3), ['{"id": 3, "text": "x \\ud800 y"}'])
    summary = label_file(source, "content", tmp_path / "out.parquet", id_field="id")
    assert (summary.rows, summary.bad_rows) == (4, 1)
    table = pq.read_table(tmp_path / "out.parquet")
    assert (
        table.column("text").to_pylist()[3] == "x \ufffd y"
        and table.column("kind")[3].is_valid is False
    )


def test_an_output_that_cannot_be_written_is_one_line(tmp_path, capsys):
    from manyheads.cli import main

    source = _write_jsonl(tmp_path / "in.jsonl", _rows(3))
    blocked = tmp_path / "in.jsonl" / "sub" / "out.jsonl"  # under a file
    assert main(["label", str(source), "-o", str(blocked)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"manyheads: error: cannot label into {blocked}: Not a directory")
    assert err.count("\n") == 1


@pytest.mark.heavy
def test_a_resumed_job_says_so_and_counts_only_the_rows_it_answered(tmp_path):
    from manyheads.cli.label import summary_line

    source = _write_jsonl(tmp_path / "in.jsonl", _rows(30))
    out = tmp_path / "out.jsonl"
    done = _label_in_a_child([str(source), str(out), "10", "1"])  # killed after 2 of 3 parts
    assert done.returncode == -signal.SIGKILL
    summary = label_file(source, "content", out, part_rows=10)
    assert (summary.resumed_parts, summary.parts, summary.answered_rows) == (2, 1, 10)
    assert summary.rows_per_second == pytest.approx(10 / summary.seconds)
    lines = summary_line(summary).splitlines()
    assert lines[0] == "resumed: 2 of 3 parts were done by an earlier run"
    assert lines[1].startswith(f"labelled 30 rows, none bad into {out} (10 rows now, ")


@pytest.mark.heavy
def test_an_input_edited_in_place_is_answered_again_where_it_changed(tmp_path):
    source = _write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": "x" * 40} for i in range(3000)])
    out = tmp_path / "out.jsonl"
    done = _label_in_a_child([str(source), str(out), "1000", "2"])  # every part done, not joined
    assert done.returncode == -signal.SIGKILL
    before = os.stat(source)
    edited = source.read_bytes().replace(b'{"id": 2500, "text": "x', b'{"id": 2500, "text": "y')
    source.write_bytes(edited)  # past the first 64 KiB, same size, same time
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    summary = label_file(source, "content", out, part_rows=1000)
    assert (summary.resumed_parts, summary.stale_parts, summary.answered_rows) == (2, 1, 1000)
    label_file(source, "content", tmp_path / "fresh.jsonl", part_rows=1000)
    assert out.read_bytes() == (tmp_path / "fresh.jsonl").read_bytes()


def test_the_input_format_can_be_given(tmp_path, capsys):
    from manyheads.cli import main

    source = tmp_path / "rows.txt"
    source.write_text(json.dumps({"text": "def f(): pass"}) + "\n", encoding="utf-8")
    assert main(["label", str(source), "-o", str(tmp_path / "out.jsonl")]) == 1
    assert "rows.txt from its name: name it .jsonl" in capsys.readouterr().err
    assert main(["label", str(source), "-o", str(tmp_path / "o.x"), "--input-format", "jsonl"]) == 1
    assert (
        "o.x from its name: name it .jsonl, .jsonl.gz, .csv, .tsv or .parquet, or give --format"
        in (capsys.readouterr().err)
    )
    assert (
        main(["label", str(source), "-o", str(tmp_path / "out.jsonl"), "--input-format", "jsonl"])
        == 0
    )


def test_a_ray_folder_output_is_jsonl_unless_named_or_given():
    from manyheads.label.ray_engine import output_format_of

    assert output_format_of("labelled/", None) == "jsonl"
    assert output_format_of("labelled.parquet/", None) == "parquet"
    assert output_format_of("labelled", "csv") == "csv"
    with pytest.raises(ConfigError, match="output_format must be one of jsonl, csv, tsv, parquet"):
        output_format_of("labelled", "xml")
