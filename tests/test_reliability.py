"""Nothing lost, nothing let in: concurrent writers, crashes at every write step,
hostile bundle files and head records, poison texts and resource caps."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import write_jsonl

import manyheads
from manyheads import Bundle, BundleConflictError, BundleError, DataError, HashingTrunk
from manyheads.bundle import BUNDLE_JSON, HEADS_FILE
from manyheads.cli import main
from manyheads.errors import ManyheadsError

pytestmark = pytest.mark.heavy  # left out of scripts/test.sh --quick

TEXTS = ["Python 3 library for parsing XML", "TrueType fonts for the web", "disk partition tool"]


def _rows(debian_rows: list[dict[str, Any]], n: int = 200) -> tuple[list[str], list[Any]]:
    rows = debian_rows[:n]
    return [r["text"] for r in rows], [r["section"] for r in rows]


@pytest.fixture
def folder(tmp_path: Path, debian_rows) -> Path:
    """A saved hashing bundle with two heads and their kept training data."""
    texts, labels = _rows(debian_rows)
    b = Bundle(trunk=HashingTrunk(dim=256), cache=None)
    b.fit_head("section", texts, labels)
    b.fit_head("library", texts, [r["library"] for r in debian_rows[:200]], kind="binary")
    return b.save(tmp_path / "b")


_HEAVY = pytest.mark.heavy


def _doc(folder: Path) -> dict[str, Any]:
    return json.loads((folder / BUNDLE_JSON).read_text(encoding="utf-8"))


def _edit(folder: Path, fn: Any) -> None:
    """Change bundle.json in place (its generation kept, so it stays the document)."""
    doc = _doc(folder)
    fn(doc)
    (folder / BUNDLE_JSON).write_text(json.dumps(doc), encoding="utf-8")


def _one_line_error(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def _kept_data_readable(folder: Path) -> None:
    b = Bundle.load(folder, cache=None)
    for name in b.heads:
        assert b.training_data(name) is not None, name


# -- concurrent writers ----------------------------------------------------------------


def test_two_writers_from_one_generation_keep_both_changes(folder, debian_rows):
    texts, labels = _rows(debian_rows)
    first = Bundle.load(folder, cache=None)
    second = Bundle.load(folder, cache=None)
    first.fit_head("h2", texts, labels)
    second.fit_head("h3", texts, labels)
    second.remove_head("library")
    first.save(folder)
    second.save(folder)  # merged onto what `first` saved
    loaded = Bundle.load(folder, cache=None)
    assert sorted(loaded.heads) == ["h2", "h3", "section"]
    assert sorted(second.heads) == ["h2", "h3", "section"]  # the writer holds the merge
    _kept_data_readable(folder)
    assert loaded.predict(TEXTS) == second.predict(TEXTS)


def test_a_writer_on_another_trunk_conflicts_and_writes_nothing(folder, debian_rows):
    texts, labels = _rows(debian_rows)
    stale = Bundle.load(folder, cache=None)
    other = Bundle(trunk=HashingTrunk(dim=128), cache=None)
    other.fit_head("x", texts, labels)
    other.save(folder, overwrite=True)
    before = sorted(p.name for p in folder.rglob("*"))
    stale.fit_head("h2", texts, labels)
    with pytest.raises(BundleConflictError, match="another writer saved it meanwhile") as exc:
        stale.save(folder)
    _one_line_error(exc)
    assert sorted(p.name for p in folder.rglob("*")) == before
    # saving a bundle on another trunk over a folder it did not come from: refused too
    with pytest.raises(BundleConflictError, match=r"save it elsewhere, or replace that bundle"):
        Bundle(trunk=HashingTrunk(dim=64), cache=None).save(folder)


def _cli_train(bundle: Path, data: Path, task: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "manyheads.cli", "train", str(data), "-b", str(bundle)]
    cmd += ["--task", f"{task}=section", "--trunk", "hashing", "--no-cache"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _concurrent_train_rounds(tmp_path: Path, debian_rows, rounds: int) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", debian_rows[:150])
    base = tmp_path / "base"
    assert (
        main(["train", str(data), "-b", str(base), "--task", "section", "--trunk", "hashing"]) == 0
    )
    for i in range(rounds):
        bundle = tmp_path / f"r{i}"
        subprocess.run(["cp", "-r", str(base), str(bundle)], check=True)
        procs = [_cli_train(bundle, data, "h2"), _cli_train(bundle, data, "h3")]
        outcomes = [(p.wait(120), p.stderr.read().decode()) for p in procs if p.stderr]
        heads = set(Bundle.load(bundle, cache=None).heads)
        for (code, err), head in zip(outcomes, ("h2", "h3"), strict=True):
            # acknowledged (exit 0) means on disk; a failure says why in one line
            assert (code == 0 and head in heads) or (code == 1 and err.count("\n") == 1), err
        assert {"section", "h2", "h3"} <= heads, f"round {i}: {heads}"


def test_two_concurrent_cli_trains_keep_both_heads(tmp_path, debian_rows, capsys):
    _concurrent_train_rounds(tmp_path, debian_rows, rounds=1)


@pytest.mark.slow
def test_twenty_rounds_of_concurrent_cli_trains(tmp_path, debian_rows, capsys):
    _concurrent_train_rounds(tmp_path, debian_rows, rounds=20)


# -- crashes at every write step -----------------------------------------------------


def _snapshot(top: Path, skip: Path) -> dict[str, bytes]:
    """Every file under ``top`` outside ``skip`` (the bundle), with its bytes."""
    return {
        str(p.relative_to(top)): p.read_bytes()
        for p in top.rglob("*")
        if p.is_file() and skip not in p.parents and p != skip
    }


def _dies_at(step: int, action: str, folder: str, extra: str) -> None:
    """In a forked child: run ``action``, dying (as kill -9 does) at its ``step``-th
    rename or delete; step -1: an ENOSPC from the first rename instead."""
    import shutil

    calls = {"n": 0}
    real_replace, real_unlink, real_rmtree = os.replace, os.unlink, shutil.rmtree

    def hit() -> None:
        calls["n"] += 1
        if calls["n"] == step:
            os._exit(9)

    def replace(src: Any, dst: Any, *a: Any, **k: Any) -> None:
        if step == -1:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        hit()
        real_replace(src, dst, *a, **k)

    def unlink(path: Any, *a: Any, **k: Any) -> None:
        hit()
        real_unlink(path, *a, **k)

    def rmtree(path: Any, *a: Any, **k: Any) -> None:
        hit()
        real_rmtree(path, *a, **k)

    os.replace, os.unlink, shutil.rmtree = replace, unlink, rmtree  # type: ignore[assignment]
    try:
        if action == "train":
            b = Bundle.load(folder, cache=None)
            rows = json.loads(extra)
            b.fit_head("section", [r[0] for r in rows], [r[1] for r in rows])  # replaced
            b.fit_head("new", [r[0] for r in rows], [r[1] for r in rows])
            b.save(folder)
        elif action == "new":  # a new bundle's first save, with its kept data
            from manyheads.jobs import train_file

            train_file(extra, folder, ["section"], trunk="hashing", no_cache=True)
        elif action == "rm":
            b = Bundle.load(folder, cache=None)
            b.remove_head("library")
            b.save(folder)
        else:
            from manyheads.export import export_bundle

            export_bundle(Bundle.load(folder, cache=None), extra)
    except ManyheadsError as exc:
        assert "\n" not in str(exc)
        os._exit(3)
    os._exit(0)


def _run_dying(step: int, action: str, folder: Path, extra: str) -> int:
    """``_dies_at`` in a child process: forked for the hashing bundles, a fresh
    interpreter for an export (a forked child of a process that ran torch can hang
    in its thread pool)."""
    if action != "export":
        import multiprocessing as mp

        child = mp.get_context("fork").Process(
            target=_dies_at, args=(step, action, str(folder), extra)
        )
        child.start()
        child.join(120)
        assert child.exitcode in (0, 3, 9), child.exitcode
        return int(child.exitcode)
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "from test_reliability import _dies_at; _dies_at(int(sys.argv[1]), *sys.argv[2:])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(step), action, str(folder), extra],
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode in (0, 3, 9), proc.stderr.decode()[-2000:]
    return proc.returncode


def _crash_every_step(
    tmp_path: Path,
    folder: Path,
    action: str,
    extra: str,
    out: Path | None,
    steps: list[int] | None = None,
) -> int:
    """Kill the writer at its 1st, 2nd, ... rename/delete until it completes; after
    each: the bundle loads with its kept data, nothing outside changed, and the
    next write leaves no temp file."""
    pristine = tmp_path / "pristine"
    subprocess.run(["cp", "-r", str(folder), str(pristine)], check=True)
    outside = _snapshot(tmp_path, folder)
    step, completed = 1, False
    for step in steps or [-1, *range(1, 40)]:
        subprocess.run(["rm", "-rf", str(folder)], check=True)
        subprocess.run(["cp", "-r", str(pristine), str(folder)], check=True)
        code = _run_dying(step, action, folder, extra)
        _kept_data_readable(folder)
        now = _snapshot(tmp_path, folder)
        if out is not None:  # the export's folder appears whole or not at all
            made = {k for k in now if k.startswith(out.name + "/")}
            if made:
                Bundle.load(out, cache=None)
            now = {k: v for k, v in now.items() if not k.startswith(out.name + "/")}
        assert {k: v for k, v in now.items() if not k.startswith(".")} == outside
        # the next write (under the lock) clears what the dead writer left
        again = Bundle.load(folder, cache=None)
        again.save(folder)
        temps = [p for p in folder.rglob("*") if p.name.startswith(".") and p.name != ".lock"]
        assert temps == [], temps
        if code == 0 and step > 0:
            completed = True
            break
        if out is not None:
            subprocess.run(["rm", "-rf", str(out)], check=True)
    assert completed or steps, "the writer never completed"
    if out is not None:  # the next export clears the staged folders of the dead ones
        subprocess.run(["rm", "-rf", str(out)], check=True)
        assert _run_dying(0, action, folder, extra) == 0
        assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    return step


@pytest.mark.parametrize("action", ["train", "rm"])
def test_a_writer_killed_at_any_step_leaves_a_whole_bundle(tmp_path, folder, debian_rows, action):
    extra = json.dumps([[r["text"], r["section"]] for r in debian_rows[200:320]])
    steps = _crash_every_step(tmp_path, folder, action, extra, None)
    assert steps >= 3  # the writer renamed / deleted at least a few files on its way


def _export_source(tmp_path: Path, model: Path, debian_rows: list[dict[str, Any]]) -> Path:
    from manyheads.trunks import TransformerTrunk

    texts, labels = _rows(debian_rows, 60)
    b = Bundle(trunk=TransformerTrunk(model, max_length=32), cache=None)
    b.fit_head("section", texts, labels)
    return b.save(tmp_path / "b")


def test_an_export_that_fails_or_dies_leaves_no_half_folder(tmp_path, tiny_model_dir, debian_rows):
    """ENOSPC, then a kill at the first rename; the next export clears the leftovers."""
    folder = _export_source(tmp_path, tiny_model_dir, debian_rows)
    _crash_every_step(tmp_path, folder, "export", str(tmp_path / "EX"), tmp_path / "EX", [-1, 1])


@pytest.mark.slow
def test_an_export_killed_at_any_step_leaves_no_half_folder(tmp_path, tiny_model_dir, debian_rows):
    folder = _export_source(tmp_path, tiny_model_dir, debian_rows)
    _crash_every_step(tmp_path, folder, "export", str(tmp_path / "EX"), tmp_path / "EX")


def test_enospc_on_save_is_one_line_and_keeps_everything(folder, debian_rows, monkeypatch):
    texts, labels = _rows(debian_rows)
    b = Bundle.load(folder, cache=None)
    b.fit_head("section", texts[:100], labels[:100])

    def full(src: Any, dst: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(manyheads._io.os, "replace", full)
    with pytest.raises(BundleError, match="cannot save the bundle to .*: No space left") as exc:
        b.save(folder)
    _one_line_error(exc)
    monkeypatch.undo()
    _kept_data_readable(folder)


def test_a_new_bundle_stopped_before_its_bundle_json_loads_and_takes_a_retrain(
    folder, tmp_path, debian_rows, capsys
):
    (folder / BUNDLE_JSON).unlink()
    assert sorted(Bundle.load(folder, cache=None).heads) == ["library", "section"]
    data = write_jsonl(tmp_path / "d.jsonl", debian_rows[:150])
    code = main(["train", str(data), "-b", str(folder), "--task", "h2=section"])
    assert code == 0, capsys.readouterr().err
    assert (folder / BUNDLE_JSON).is_file()
    assert sorted(Bundle.load(folder, cache=None).heads) == ["h2", "library", "section"]


def test_the_service_reads_the_generation_the_store_reads(folder, debian_rows):
    """A save stopped after its weights file and before its bundle.json leaves the newer
    generation in the weights file: the service's watcher sees that one, as a load does."""
    from manyheads.serve.state import _read_generation

    old_doc = (folder / BUNDLE_JSON).read_bytes()
    first = _read_generation(folder)
    assert first == Bundle.load(folder, cache=None).generation
    b = Bundle.load(folder, cache=None)
    texts, labels = _rows(debian_rows)
    b.fit_head("again", texts[:100], labels[:100])
    b.save(folder)
    (folder / BUNDLE_JSON).write_bytes(old_doc)  # as if stopped before this rename
    newer = Bundle.load(folder, cache=None).generation
    assert newer != first and _read_generation(folder) == newer
    (folder / BUNDLE_JSON).write_text("{oops", encoding="utf-8")
    (folder / HEADS_FILE).unlink()
    assert _read_generation(folder) is None  # unreadable: keep serving what is loaded


@pytest.mark.heavy
def test_a_new_bundle_killed_at_any_step_of_its_first_save_takes_the_same_command_again(
    tmp_path, debian_rows, capsys
):
    """Killed at each rename / delete of its first save, a new bundle's folder holds what
    the save had written (kept data, temp files): the same train command again takes it
    as empty, clears it and writes the bundle."""
    data = write_jsonl(tmp_path / "d.jsonl", debian_rows[:150])
    command = ["train", str(data), "-b", "", "--trunk", "hashing", "--task", "section"]
    steps = 0
    for step in range(1, 10):
        folder = tmp_path / f"new{step}"
        code = _run_dying(step, "new", folder, str(data))
        if code == 0:
            break
        steps += 1
        left = sorted(p.name for p in folder.iterdir())
        assert left and BUNDLE_JSON not in left, left
        command[3] = str(folder)
        assert main(command) == 0, capsys.readouterr().err
        assert sorted(Bundle.load(folder, cache=None).heads) == ["section"]
        assert [
            p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != ".lock"
        ] == []
    assert steps >= 1
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    command[3] = str(foreign)
    assert main(command) == 1
    assert "foreign exists and is not a bundle (no bundle.json)" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("how", ["save", "rm", "train", pytest.param("delete", marks=_HEAVY)])
def test_a_data_folder_linking_outside_is_never_written_or_emptied(
    folder, tmp_path, debian_rows, capsys, how, request
):
    victim = tmp_path / "victim"
    victim.mkdir()
    planted = {"a.jsonl.gz": b"keep", "0123456789abcdef01234567.jsonl.gz": b"keep too"}
    for name, body in planted.items():
        (victim / name).write_bytes(body)
    for kept in (folder / "data").iterdir():
        kept.rename(victim / kept.name)
        planted[kept.name] = (victim / kept.name).read_bytes()
    (folder / "data").rmdir()
    (folder / "data").symlink_to(victim)
    before = _doc(folder)
    if how == "save":
        b = Bundle.load(folder, cache=None)
        b.remove_head("library")
        with pytest.raises(BundleError, match=r"b/data leads outside the bundle folder \(to "):
            b.save(folder)
        with pytest.raises(BundleError, match=r"b/data/\w+.jsonl.gz leads outside the bundle"):
            b.training_data("section")
    elif how == "delete":  # the service's DELETE: a 409 naming the link, nothing removed
        import httpx

        keys = tmp_path / "keys.txt"
        keys.write_text("k3y-for-tests-0123456789abcdef\n")
        start = request.getfixturevalue("start_server")
        srv = start(folder, "--api-key-file", str(keys))
        res = httpx.delete(srv.url + "/v1/heads/library", headers=AUTH, timeout=60)
        assert res.status_code == 409 and "b/data leads outside the bundle folder" in res.text
        res = httpx.get(srv.url + "/v1/heads", headers=AUTH, timeout=60)
        assert [h["name"] for h in res.json()["heads"]] == ["section", "library"]
    else:
        data = write_jsonl(tmp_path / "d.jsonl", debian_rows[:150])
        args = ["heads", "rm", "library", "-b", str(folder)]
        if how == "train":
            args = ["train", str(data), "-b", str(folder), "--task", "h2=section"]
        assert main(args) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "b/data leads outside the bundle folder" in err, err
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == planted
    assert _doc(folder) == before


def test_a_lock_file_that_is_a_link_is_refused(folder, tmp_path):
    target = tmp_path / "elsewhere.txt"
    (folder / ".lock").unlink(missing_ok=True)
    (folder / ".lock").symlink_to(target)
    b = Bundle.load(folder, cache=None)
    with pytest.raises(
        BundleError, match=r"\.lock is a link; a bundle folder's lock file is its own"
    ):
        b.save(folder)
    assert not target.exists()


@pytest.mark.parametrize("name", [HEADS_FILE, BUNDLE_JSON])
def test_a_bundle_file_linking_outside_is_never_read(folder, tmp_path, capsys, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / name).rename(outside / name)
    (folder / name).symlink_to(outside / name)
    with pytest.raises(BundleError, match=rf"b/{re.escape(name)} leads outside the bundle folder"):
        Bundle.load(folder, cache=None)
    assert main(["predict", "-b", str(folder), "a text"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"b/{name} leads outside the bundle folder" in err, err


def test_stale_temp_files_go_on_the_next_write_and_live_ones_stay(folder):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    pid = int(dead.stdout)
    stale = [
        folder / f".{HEADS_FILE}.{pid}-0123456789abcdef.tmp",
        folder / ".bundle.json.0123456789abcdef.tmp",  # an older writer's name, no pid
        folder / "data" / f".x.jsonl.gz.{pid}-0123456789abcdef.tmp",
    ]
    live = folder / f".{BUNDLE_JSON}.{os.getppid()}-0123456789abcdef.tmp"
    for p in [*stale, live]:
        p.write_bytes(b"half")
    Bundle.load(folder, cache=None).save(folder)
    assert [p for p in stale if p.exists()] == []
    assert live.exists()


# -- hostile bundle files ---------------------------------------------------------


def _set_head(field: str, value: Any) -> Any:
    def fn(doc: dict[str, Any]) -> None:
        doc["heads"]["library"][field] = value

    return fn


def _set_trunk(**changes: Any) -> Any:
    def fn(doc: dict[str, Any]) -> None:
        doc["trunk"]["spec"].update(changes)

    return fn


def _rename_head(doc: dict[str, Any]) -> None:
    doc["heads"]["section/x"] = doc["heads"]["section"]


def _trunk_weights(doc: dict[str, Any]) -> None:
    doc["trunk_weights"] = "../elsewhere/heads.safetensors"


def _onnx_trunk(sha: Any, file: str = "model.onnx") -> Any:
    def fn(doc: dict[str, Any]) -> None:
        doc["trunk"]["spec"] = {"type": "onnx", "file": file, "sha256": sha}

    return fn


def _byte_graph(doc: dict[str, Any]) -> None:  # as earlier versions wrote it
    doc["trunk"]["spec"] = {"type": "byte", "graph": "../g.onnx", "graph_sha256": "0" * 64}


def _byte_file(doc: dict[str, Any]) -> None:
    doc["trunk"]["spec"] = {"type": "byte", "file": "../g.onnx", "sha256": "0" * 64}


def _onnx_recheck(doc: dict[str, Any]) -> None:
    twin = {"file": "../f.onnx", "sha256": "0" * 64, "quantile": 0.99, "heads": {}}
    doc["trunk"]["spec"] = {"type": "onnx", "file": "m.onnx", "sha256": "0" * 64, "recheck": twin}


def _static_table(file: str, sha: Any) -> Any:
    def fn(doc: dict[str, Any]) -> None:
        doc["trunk"]["spec"] = {"type": "static", "source": "minilm", "file": file, "sha256": sha}

    return fn


HOSTILE_FILES = {
    "labels-dicts": (_set_head("labels", [{"a": 1}, {"b": 2}]), r"label #0 .* is a dict"),
    "tiny-temperature": (_set_head("temperature", 1e-300), r"temperature must be a number in"),
    "nan-threshold": (_set_head("thresholds", [float("nan")]), r"thresholds must be numbers"),
    "text-threshold": (_set_head("thresholds", ["x"]), r"thresholds must be numbers in \[0, 1\]"),
    "data-outside": (_set_head("data", "../planted.jsonl.gz"), r"expected data/HASH.jsonl.gz"),
    "name-with-slash": (_rename_head, r"head name"),
    "unknown-spec-key": (_set_trunk(colour="red"), r"unknown setting\(s\) 'colour'"),
    "non-integer-dim": (_set_trunk(dim="x"), r"dim='x'; expected an integer"),
    "trunk-weights-outside": (_trunk_weights, r"'trunk_weights' .* leads outside the bundle"),
    "onnx-without-sha": (_onnx_trunk(None), r"needs its SHA-256"),
    "onnx-outside": (_onnx_trunk("0" * 64, "../../etc/passwd"), r"leads outside the bundle"),
    "byte-graph-outside": (_byte_graph, r"byte trunk's 'graph' .* leads outside"),
    "byte-file-outside": (_byte_file, r"byte trunk's 'file' .* leads outside"),
    "onnx-recheck-outside": (_onnx_recheck, r"'recheck.file' .* leads outside"),
    "static-outside": (_static_table("../t.safetensors", "0" * 64), r"static .* leads outside"),
    "static-without-sha": (_static_table("static-a.safetensors", None), r"needs its SHA-256"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_FILES))
def test_a_hostile_bundle_json_is_refused_in_one_line(folder, tmp_path, capsys, case):
    fn, message = HOSTILE_FILES[case]
    _edit(folder, fn)
    with pytest.raises(ManyheadsError, match=message) as exc:
        Bundle.load(folder, cache=None)
    _one_line_error(exc)
    outside = _snapshot(tmp_path, folder)
    for argv in (
        ["predict", "some text", "-b", str(folder)],
        ["export", "-b", str(folder), "--out", str(tmp_path / "o" / "EX")],
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("manyheads: error: ") and err.count("\n") == 1, err
    assert _snapshot(tmp_path, folder) == outside  # nothing written outside the bundle


def test_a_garbage_bundle_json_copy_in_the_weights_file_is_one_line(folder):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(folder / HEADS_FILE))
    save_file(
        tensors, str(folder / HEADS_FILE), metadata={"generation": "g2", "bundle_json": "{oops"}
    )
    with pytest.raises(BundleError, match=r"copy of bundle.json inside .*not JSON") as exc:
        Bundle.load(folder, cache=None)
    _one_line_error(exc)


def test_a_damaged_embedding_cache_names_its_file_and_the_fix(tmp_path, debian_rows):
    cache_file = tmp_path / "c" / "embeddings.sqlite"
    cache = manyheads.EmbeddingCache(cache_file)
    b = Bundle(trunk=HashingTrunk(dim=64), cache=cache)
    texts, labels = _rows(debian_rows, 300)
    b.fit_head("section", texts, labels)
    cache.close()
    raw = bytearray(cache_file.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 4096] = os.urandom(4096)
    raw[100:4096] = os.urandom(3996)
    cache_file.write_bytes(bytes(raw))
    with pytest.raises(
        ManyheadsError, match=r"embedding cache .*embeddings.sqlite is damaged.*delete it"
    ) as exc:
        b2 = Bundle(trunk=HashingTrunk(dim=64), cache=manyheads.EmbeddingCache(cache_file))
        b2.fit_head("section", texts, labels)
    _one_line_error(exc)


# -- poison texts and caps (library and CLI) -------------------------------------------


def test_a_lone_surrogate_is_refused_with_its_place(folder, tmp_path, capsys):
    b = Bundle.load(folder, cache=None)
    with pytest.raises(
        DataError, match=r"text #1 holds a lone surrogate \(U\+D800\) at character 2"
    ):
        b.predict(["fine", "ab\ud800"])
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"text": "fine"}\n{"text": "x\\ud800"}\n', encoding="utf-8")
    assert main(["predict", "--input", str(lines), "-b", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "line 2" in err and "lone surrogate" in err and err.count("\n") == 1, err


def test_labels_cap_is_checked_before_any_trunk_work(counting_trunk, tmp_path, capsys):
    b = Bundle(trunk=counting_trunk, cache=None)
    texts = [f"text {i}" for i in range(100_000)]
    with pytest.raises(
        DataError, match=r"100000 labels; a head takes at most 1000 \(the max_labels limit\)"
    ):
        b.fit_head("many", texts, [f"l{i}" for i in range(100_000)])
    with pytest.raises(DataError, match=r"the max_label_chars limit"):
        b.fit_head("long", texts[:4], ["x" * 300, "y", "x" * 300, "y"])
    assert counting_trunk.calls == 0
    data = write_jsonl(
        tmp_path / "many.jsonl", [{"text": t, "y": f"l{i}"} for i, t in enumerate(texts)]
    )
    code = main(
        ["train", str(data), "-b", str(tmp_path / "m"), "--task", "y", "--trunk", "hashing"]
    )
    err = capsys.readouterr().err
    assert code == 1 and "the max_labels limit" in err and err.count("\n") == 1, err
    assert not (tmp_path / "m" / BUNDLE_JSON).exists()
    few = manyheads.HeadLimits(max_heads=1)
    small = Bundle(trunk=HashingTrunk(dim=64), cache=None, limits=few)
    small.fit_head("a", texts[:40], ["p", "q"] * 20)
    with pytest.raises(DataError, match=r"at most 1 \(the max_heads limit\)"):
        small.fit_head("b", texts[:40], ["p", "q"] * 20)


def test_cli_predict_refuses_or_windows_a_long_text(folder, tmp_path, capsys):
    lines = tmp_path / "in.txt"
    lines.write_text("short text\n" + "word " * 5000 + "\n", encoding="utf-8")
    args = ["predict", "--input", str(lines), "-b", str(folder), "--max-chars", "1000"]
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert "line 2 has 25000 characters, over the limit of 1000" in err and err.count("\n") == 1, (
        err
    )
    assert len(out.splitlines()) == 1  # the text before it was answered
    assert main([*args, "--long-texts", "window"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


# -- the micro-batcher: poison isolated, big requests interleaved --------------------


def test_a_poison_text_fails_only_its_own_request():
    import asyncio

    from manyheads.serve import MicroBatcher

    passes: list[int] = []

    def predict(texts: list[str]) -> list[dict[str, Any]]:
        passes.append(len(texts))
        if "poison" in texts:
            raise TypeError("cannot encode")
        return [{"h": {"label": t}} for t in texts]

    async def main_() -> tuple[list[Any], int]:
        batcher = MicroBatcher(predict, max_batch=64, max_wait_ms=50)
        batcher.start()
        try:
            # let the batcher see a crowd first, so these calls share one pass
            await asyncio.gather(*(batcher.submit([f"warm{i}"]) for i in range(10)))
            calls = [[f"a{i}", f"b{i}"] for i in range(8)]
            calls.insert(3, ["ok", "poison"])
            got = await asyncio.gather(*(batcher.submit(c) for c in calls), return_exceptions=True)
            return got, batcher.retried
        finally:
            await batcher.stop()

    got, retried = asyncio.run(main_())
    assert isinstance(got[3], TypeError)
    for i, answer in enumerate(got[:3] + got[4:]):
        assert [a["h"]["label"] for a in answer] == [f"a{i}", f"b{i}"]
    assert retried >= 1


def test_a_big_request_does_not_hold_small_ones_up():
    import asyncio

    from manyheads.serve import MicroBatcher

    def predict(texts: list[str]) -> list[dict[str, Any]]:
        time.sleep(0.002 * sum(len(t) for t in texts) / 1000)
        return [{"h": {"label": len(t)}} for t in texts]

    async def main_() -> list[str]:
        batcher = MicroBatcher(predict, max_batch=64, max_wait_ms=0, max_pass_chars=10_000)
        batcher.start()
        done: list[str] = []

        async def call(name: str, texts: list[str]) -> None:
            await batcher.submit(texts)
            done.append(name)

        try:
            big = asyncio.create_task(call("big", ["x" * 5000] * 100))
            await asyncio.sleep(0.01)
            await asyncio.gather(*(call(f"small{i}", ["tiny"]) for i in range(5)), big)
            return done
        finally:
            await batcher.stop()

    done = asyncio.run(main_())
    assert done[-1] == "big" and len(done) == 6


# -- the service ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory, debian_rows, start_server):
    """A server without --watch, its writes keyed, on a two-head hashing bundle."""
    pytest.importorskip("httpx")
    work = tmp_path_factory.mktemp("reliable")
    texts, labels = _rows(debian_rows)
    b = Bundle(trunk="hashing", cache=None)
    b.fit_head("section", texts, labels)
    folder = b.save(work / "b")
    keys = work / "keys.txt"
    keys.write_text("k3y-for-tests-0123456789abcdef\n")
    srv = start_server(folder, "--api-key-file", str(keys), "--max-body-mb", "8")
    return srv, folder


AUTH = {"Authorization": "Bearer k3y-for-tests-0123456789abcdef"}


def _put_body(debian_rows, name: str, change: Any = None) -> dict[str, Any]:
    from manyheads.serve import head_to_json

    texts, labels = _rows(debian_rows, 80)
    b = Bundle(trunk="hashing", cache=None)
    kind = "binary" if name.startswith("bin") else "multiclass"
    b.fit_head(
        name,
        texts,
        [r["library"] for r in debian_rows[:80]] if kind == "binary" else labels,
        kind=kind,
    )
    record, tensors = b.export_head(name)
    if change is not None:
        change(record)
    return head_to_json(record, tensors)


def _set(field: str, value: Any) -> Any:
    return lambda record: record.__setitem__(field, value)


HOSTILE_RECORDS = {
    "labels-dicts": ("multi", _set("labels", [{"a": i} for i in range(40)])),
    "tiny-temperature": ("multi", _set("temperature", 1e-300)),
    "nan-threshold": ("bin", _set("thresholds", [float("nan")])),
    "text-threshold": ("bin", _set("thresholds", ["x"])),
    "data-outside": ("multi", _set("data", "../planted.jsonl.gz")),
    "metrics-null": ("multi", _set("metrics", None)),
    "metrics-text": ("multi", _set("metrics", "great")),
    "metrics-list": ("multi", _set("metrics", [0.9])),
    "metrics-number": ("multi", _set("metrics", 0.9)),
    "metrics-deep": ("multi", _set("metrics", json.loads("[" * 40 + "]" * 40))),
    "field-surrogate": ("multi", _set("field", "a\ud800")),
    "created-surrogate": ("multi", _set("created", "\udfff2026")),
    "n-train-text": ("multi", _set("n_train", "many")),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_RECORDS))
def test_put_of_a_hostile_record_is_a_422_and_changes_nothing(service, debian_rows, case):
    import httpx

    srv, folder = service
    prefix, change = HOSTILE_RECORDS[case]
    before = Bundle.load(folder, cache=None).generation
    body = json.dumps(_put_body(debian_rows, f"{prefix}_{case.replace('-', '_')}", change))
    res = httpx.put(srv.url + f"/v1/heads/{prefix}x", content=body, headers=AUTH, timeout=60)
    if case == "data-outside":  # a client's record names no file of ours: dropped
        assert res.status_code == 200, res.text
        assert "data" not in _doc(folder)["heads"][f"{prefix}x"]
        assert httpx.delete(srv.url + f"/v1/heads/{prefix}x", headers=AUTH).status_code == 200
    else:
        assert res.status_code == 422, res.text
        assert Bundle.load(folder, cache=None).generation == before
    ok = httpx.post(srv.url + "/v1/predict", json={"texts": TEXTS}, headers=AUTH, timeout=30)
    assert ok.status_code == 200 and json.loads(ok.text)  # valid JSON, no NaN


@pytest.mark.heavy
def test_a_bad_record_on_disk_never_stops_a_listing(folder, capsys, start_server):
    """A bundle saved by an older version with a head whose metrics are text: it loads,
    the CLI lists it, the service lists it (its bad field left out), and it answers."""
    import httpx

    _edit(folder, lambda doc: doc["heads"]["section"].update(metrics="great", created=5))
    assert Bundle.load(folder, cache=None).head_info["section"].get("metrics") is None
    assert main(["heads", "list", "-b", str(folder)]) == 0
    listed = capsys.readouterr().out
    assert "section" in listed and "library" in listed
    srv = start_server(folder)
    res = httpx.get(srv.url + "/v1/heads", timeout=30)
    assert res.status_code == 200 and [h["name"] for h in res.json()["heads"]] == [
        "section", "library",
    ]  # fmt: skip
    _edit(folder, lambda doc: doc["heads"]["section"].update(field=["not", "text"]))
    with pytest.raises(BundleError, match=r"head 'section': 'field' must be text, got list"):
        Bundle.load(folder, cache=None)


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/v1/predict", {"texts": ["fine", "\ud800"]}, "bad_texts"),
        ("/v1/heads/t/train", {"texts": ["a\ud800", "b"], "labels": ["x", "y"]}, "bad_texts"),
        ("/v1/heads/t/train", {"texts": ["a", "b"], "labels": ["x\udfff", "y"]}, "bad_data"),
        (
            "/v1/heads/t/train",
            {"texts": ["a", "b"], "labels": ["x", "y"], "groups": [{}, {}]},
            "bad_groups",
        ),
    ],
)
def test_poison_in_a_body_is_a_422(service, path, body, code):
    import httpx

    srv, _ = service
    res = httpx.post(srv.url + path, content=json.dumps(body), headers=AUTH, timeout=30)
    assert res.status_code == 422, res.text
    assert res.json()["error"]["code"] == code


def test_service_caps_labels_fast_with_the_limit_named(service):
    import httpx

    srv, _ = service
    n = 100_000
    body = {"texts": [f"t{i}" for i in range(n)], "labels": [f"l{i}" for i in range(n)]}
    res = httpx.post(srv.url + "/v1/heads/many/train", json=body, headers=AUTH, timeout=60)
    assert res.status_code == 422, res.text
    assert "the max_labels limit" in res.json()["error"]["message"]
    long = {"texts": ["a", "b", "c", "d"], "labels": ["x" * 10_000, "y", "x" * 10_000, "y"]}
    res = httpx.post(srv.url + "/v1/heads/long/train", json=long, headers=AUTH, timeout=60)
    assert res.status_code == 422 and "max_label_chars" in res.text


def test_metric_series_of_a_deleted_head_go(service, debian_rows):
    import httpx

    srv, _ = service
    body = _put_body(debian_rows, "gone")
    assert (
        httpx.put(srv.url + "/v1/heads/gone", json=body, headers=AUTH, timeout=60).status_code
        == 200
    )
    assert (
        httpx.post(srv.url + "/v1/predict", json={"texts": TEXTS}, headers=AUTH).status_code == 200
    )
    assert 'head="gone"' in httpx.get(srv.url + "/metrics", headers=AUTH).text
    assert httpx.delete(srv.url + "/v1/heads/gone", headers=AUTH).status_code == 200
    assert 'head="gone"' not in httpx.get(srv.url + "/metrics", headers=AUTH).text


def test_cli_writes_and_service_writes_keep_each_other(service, tmp_path, debian_rows, capsys):
    """The service saves by merging onto what the CLI saved since it loaded, and a
    CLI / library writer loaded before a PUT merges onto it: no head vanishes."""
    import httpx

    srv, folder = service
    data = write_jsonl(tmp_path / "d.jsonl", debian_rows[:150])
    train = ["train", str(data), "-b", str(folder), "--trunk", "hashing", "--no-cache"]
    assert main([*train, "--task", "cli1=section"]) == 0, capsys.readouterr().err
    res = httpx.put(
        srv.url + "/v1/heads/put1", json=_put_body(debian_rows, "put1"), headers=AUTH, timeout=60
    )
    assert res.status_code == 200, res.text
    assert {"cli1", "put1"} <= set(Bundle.load(folder, cache=None).heads)
    assert {"cli1", "put1"} <= set(res.json()["heads"])  # the service serves the merge
    loaded_before = Bundle.load(folder, cache=None)
    res = httpx.put(
        srv.url + "/v1/heads/put2", json=_put_body(debian_rows, "put2"), headers=AUTH, timeout=60
    )
    assert res.status_code == 200
    texts, labels = _rows(debian_rows, 100)
    loaded_before.fit_head("lib1", texts, labels)
    loaded_before.save(folder)
    assert {"cli1", "put1", "put2", "lib1"} <= set(Bundle.load(folder, cache=None).heads)
    # and racing: a CLI train and a PUT at the same time
    proc = _cli_train(folder, data, "cli2")
    res = httpx.put(
        srv.url + "/v1/heads/put3", json=_put_body(debian_rows, "put3"), headers=AUTH, timeout=60
    )
    assert proc.wait(120) == 0 and res.status_code == 200
    assert {"cli1", "cli2", "put1", "put2", "put3", "lib1"} <= set(
        Bundle.load(folder, cache=None).heads
    )


def test_a_request_that_fits_no_shared_pass_is_not_starved_by_a_stream():
    import asyncio

    from manyheads.serve import MicroBatcher

    passes: list[list[int]] = []

    def predict(texts: list[str]) -> list[dict[str, Any]]:
        passes.append([len(t) for t in texts])
        time.sleep(0.005)
        return [{"h": {"label": len(t)}} for t in texts]

    async def main_() -> int:
        batcher = MicroBatcher(predict, max_batch=64, max_wait_ms=1, max_pass_chars=1000)
        batcher.start()
        stop = asyncio.Event()

        async def stream(i: int) -> None:
            while not stop.is_set():  # back while the next pass runs
                await batcher.submit(["x" * 100])
                await asyncio.sleep(0.001 * (i % 4))

        try:
            clients = [asyncio.create_task(stream(i)) for i in range(8)]
            await asyncio.sleep(0.05)
            start = len(passes)
            await asyncio.wait_for(batcher.submit(["y" * 900, "z" * 900]), timeout=10)
            waited = len(passes) - start
            stop.set()
            await asyncio.gather(*clients)
            return waited
        finally:
            await batcher.stop()

    waited = asyncio.run(main_())
    assert waited <= 4, waited  # its two texts, each in a pass of its own, soon
    assert [900] in passes
