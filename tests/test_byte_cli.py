"""Byte bundles from the command line: a trunk trained by `train --trunk byte`, heads at
every tier (BUNDLE/tiers/<dim>/), `--tier` when answering, built-in bundles by name."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl

import manyheads.bundle.builtin as bundle_module
from manyheads import Bundle, EmbeddingCache
from manyheads.cli import main
from manyheads.errors import BundleError, ConfigError, ManyheadsError

pytestmark = pytest.mark.heavy  # left out of scripts/test.sh --quick

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

SMALL = {"max_bytes": 128, "embed": 16, "channels": 32, "dilations": [1, 2], "dims": [8, 16, 32]}
FIELDS = ("text", "section", "library", "role", "interface", "group")


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _rows(debian_rows, start: int, n: int) -> list[dict]:
    return [{k: r[k] for k in FIELDS} for r in debian_rows[start : start + n]]


def _train_args(data: Path, bundle: Path, cache: Path, *extra) -> list[str]:
    return [
        "train", str(data), "-b", str(bundle), "--trunk", "byte",
        "--byte-config", json.dumps(SMALL), "--trunk-epochs", "2", "--C", "1",
        "--group-field", "group", "--cache-dir", str(cache),
        "--task", "section", "--task", "library:binary", "--task", "role:multilabel",
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory, debian_rows):
    """A byte bundle trained from the command line (tier 16 of 8 / 16 / 32), and what
    `train` printed."""
    work = tmp_path_factory.mktemp("byte-cli")
    data = write_jsonl(work / "train.jsonl", _rows(debian_rows, 0, 300))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(_train_args(data, work / "b", work / "cache", "--tier", "16"))
    assert code == 0, err.getvalue()
    return work / "b", out.getvalue(), data


@pytest.fixture
def bundle_copy(trained, tmp_path) -> Path:
    """A private copy of the trained bundle a test may change."""
    return Path(shutil.copytree(trained[0], tmp_path / "b"))


def _spec(folder: Path) -> dict:
    return json.loads((folder / "bundle.json").read_text())["trunk"]["spec"]


def test_train_byte_prints_the_trunk_summary_and_fits_heads_at_every_tier(trained):
    folder, out, _ = trained
    lines = out.splitlines()
    trunk_line = lines[0]
    assert trunk_line.startswith("trained byte trunk in ") and "2 epochs" in trunk_line
    assert "loss per epoch: " in trunk_line
    assert "task weights: section " in trunk_line and "role " in trunk_line
    assert lines[1].split()[:5] == ["head", "kind", "classes", "train", "val"]
    assert [line.split()[0] for line in lines[2:5]] == ["section", "library", "role"]
    assert "other tiers (the bundle answers at tier 16" in out
    assert lines[-1] == f"saved {folder}"

    parent = Bundle.load(folder, cache=None)
    assert parent.tier == 16 and parent.dim == 16 and parent.tiers == [8, 16, 32]
    # one split for the trunk and every head: the trunk saw the heads' train rows only
    n_train = {parent.head_info[h]["n_train"] for h in parent.heads}
    assert len(n_train) == 1
    (n,) = n_train
    assert n + parent.head_info["role"]["n_val"] == 300 and 0 < n < 300
    steps = int(trunk_line.split(" steps")[0].rsplit(" ", 1)[1])
    assert steps == 2 * math.ceil(n / 64)
    # the validation rows are the same at every tier
    for tier in (8, 32):
        sub = Bundle.load(folder, tier=tier, cache=None)
        assert sub.path == folder / "tiers" / str(tier)
        assert set(sub.heads) == {"section", "library", "role"}
        assert {sub.head_info[h]["n_train"] for h in sub.heads} == {n}
        assert "data" not in sub.head_info["section"]  # the parent keeps the data


def test_tier_bundles_share_the_parent_graph_and_weights(trained, tmp_path):
    from safetensors.numpy import load_file

    folder, _, _ = trained
    graph = _spec(folder)["file"]
    assert (folder / graph).is_file()
    assert [p.name for p in folder.rglob("*.onnx")] == [graph]  # one graph file in all
    # the graph holds the trunk's weights: they are not stored a second time
    assert not any(k.startswith("trunk/") for k in load_file(folder / "heads.safetensors"))
    for tier in (8, 32):
        sub = folder / "tiers" / str(tier)
        spec = _spec(sub)
        assert spec["file"] == f"../../{graph}" and spec["tier"] == tier
        assert spec["sha256"] == _spec(folder)["sha256"]
        assert json.loads((sub / "bundle.json").read_text())["trunk_weights"] == (
            "../../heads.safetensors"
        )
        assert not any(k.startswith("trunk/") for k in load_file(sub / "heads.safetensors"))
    alone = shutil.copytree(folder / "tiers" / "8", tmp_path / "alone")
    with pytest.raises(
        BundleError, match="leads outside the bundle folder .*copy the parent whole"
    ):
        Bundle.load(alone)


def test_predictions_at_every_tier_answer_with_their_own_embedding_size(
    trained, capsys, debian_test_rows
):
    folder, _, data = trained
    probe = [r["text"] for r in debian_test_rows[:20]]
    probs = {}
    for tier in (8, 16, 32):
        b = Bundle.load(folder, tier=tier, cache=None)
        assert b.trunk.dim == tier and b.embed(probe[:3]).shape == (3, tier)
        probs[tier] = b.predict_proba(probe)["section"]
        code, out, err = run(capsys, "predict", "-b", folder, "--tier", tier, probe[0], probe[1])
        assert code == 0, err
        answers = [json.loads(line) for line in out.splitlines()]
        assert len(answers) == 2 and set(answers[0]) == {"section", "library", "role"}
        code, out, err = run(capsys, "eval", data, "-b", folder, "--tier", tier, "--json")
        assert code == 0, err
        assert set(json.loads(out)["heads"]) == {"section", "library", "role"}
    assert not np.allclose(probs[8], probs[32])
    assert Bundle.load(folder, cache=None).trunk.dim == 16  # no tier: the bundle's own


def test_unknown_tiers_and_tiers_of_other_trunks_are_refused(trained, capsys, tmp_path):
    folder, _, data = trained
    with pytest.raises(ConfigError, match=r"has no tier 12; its tiers: 8, 16, 32"):
        Bundle.load(folder, tier=12)
    hashing = tmp_path / "h"
    b = Bundle(trunk="hashing", cache=None)
    b.fit_head("t", ["a b", "c d", "e f", "g h"] * 5, ["x", "y"] * 10)
    b.save(hashing)
    with pytest.raises(ConfigError, match="only a byte trunk has tiers"):
        Bundle.load(hashing, tier=8)
    cases = [
        (["predict", "x", "-b", folder, "--tier", "12"], "has no tier 12; its tiers: 8, 16, 32"),
        (["eval", data, "-b", folder, "--tier", "64"], "has no tier 64"),
        (["predict", "x", "-b", hashing, "--tier", "8"], "only a byte trunk has tiers"),
        (["serve", "-b", folder, "--tier", "12"], "has no tier 12"),
        (["serve", "-b", hashing, "--tier", "8"], "only a byte trunk has tiers"),
    ]
    for args, message in cases:
        code, _, err = run(capsys, *args)
        assert code == 1, args
        assert err.startswith("manyheads: error: ") and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1


def test_a_later_head_is_fitted_at_every_tier_on_the_frozen_trunk(
    bundle_copy, capsys, tmp_path, debian_rows
):
    folder = bundle_copy
    before = {t: Bundle.load(folder, tier=t, cache=None).trunk_fingerprint for t in (8, 16, 32)}
    graph_before = _spec(folder)["file"]
    rows = _rows(debian_rows, 300, 200)
    data = write_jsonl(tmp_path / "more.jsonl", rows)
    cache = tmp_path / "cache"
    code, out, err = run(
        capsys, "train", data, "-b", folder, "--task", "interface:multilabel", "--C", "1",
        "--cache-dir", cache,
    )  # fmt: skip
    assert code == 0, err
    assert "trained byte trunk" not in out and "other tiers" in out
    code, _, err = run(
        capsys, "train", data, "-b", folder, "--trunk", "byte", "--task", "lib2=library:binary",
        "--C", "1", "--cache-dir", cache,
    )  # fmt: skip
    assert code == 0, err
    store = EmbeddingCache(cache / "embeddings.sqlite")
    texts = {r["text"] for r in rows}
    for tier in (8, 16, 32):
        b = Bundle.load(folder, tier=tier, cache=None)
        assert b.trunk_fingerprint == before[tier]  # the trunk is frozen
        assert {"interface", "lib2", "section"} <= set(b.heads)
        assert b.head_info["interface"]["n_train"] + b.head_info["interface"]["n_val"] == 200
        assert store.count(before[tier]) == len(texts)  # every tier's vectors were cached
    assert _spec(folder)["file"] == graph_before
    assert [p.name for p in folder.rglob("*.onnx")] == [graph_before]
    answers = Bundle.load(folder, tier=8, cache=None).predict(["a python library"])
    assert set(answers[0]) == {"section", "library", "role", "interface", "lib2"}
    # heads rm removes a head at every tier
    code, _, err = run(capsys, "heads", "rm", "lib2", "-b", folder)
    assert code == 0, err
    for tier in (8, 16, 32):
        assert "lib2" not in Bundle.load(folder, tier=tier, cache=None).heads


def test_a_later_head_without_the_cache_is_fitted_at_every_tier(
    bundle_copy, capsys, tmp_path, debian_rows
):
    data = write_jsonl(tmp_path / "more.jsonl", _rows(debian_rows, 300, 120))
    code, _, err = run(
        capsys, "train", data, "-b", bundle_copy, "--task", "lib3=library:binary", "--C", "1",
        "--no-cache",
    )  # fmt: skip
    assert code == 0, err
    assert not (tmp_path / "default-cache").exists()  # no persistent cache was written
    for tier in (8, 16, 32):
        assert "lib3" in Bundle.load(bundle_copy, tier=tier, cache=None).heads


def test_a_byte_bundle_trains_without_the_cache_and_without_validation(
    capsys, tmp_path, debian_rows
):
    data = write_jsonl(tmp_path / "d.jsonl", _rows(debian_rows, 0, 80))
    bundle = tmp_path / "b"
    args = _train_args(data, bundle, tmp_path / "cache")
    code, out, err = run(capsys, *args, "--no-cache", "--val-fraction", "0", "--trunk-epochs", "1")
    assert code == 0, err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "default-cache").exists()
    assert "1 epochs, 2 steps" in out  # all 80 rows, in batches of 64
    for tier in (8, 16, 32):
        b = Bundle.load(bundle, tier=tier, cache=None)
        assert {b.head_info[h]["n_train"] for h in b.heads} == {80}
        assert {b.head_info[h]["n_val"] for h in b.heads} == {0}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tier", "12"], "--tier must be one of the byte trunk's dims [8, 16, 32], got 12"),
        (["--trunk-epochs", "0"], "--trunk-epochs must be a positive integer, got 0"),
        (["--byte-config", "{nope"], "--byte-config is not valid JSON"),
        (["--byte-config", "[8, 16]"], "--byte-config must be a JSON object"),
        (["--byte-config", '{"width": 3}'], "--byte-config: unknown byte trunk settings: width"),
        (["--byte-config", '{"dims": "ab"}'], "--byte-config: dims must be a list of integers"),
        (["--byte-config", '{"kernel": 4}'], "--byte-config: byte trunk kernel must be odd"),
    ],
)
def test_bad_byte_options_exit_1_with_one_line(capsys, tmp_path, debian_rows, extra, message):
    data = write_jsonl(tmp_path / "d.jsonl", _rows(debian_rows, 0, 40))
    bundle = tmp_path / "b"
    args = _train_args(data, bundle, tmp_path / "cache")
    # the option given last wins: the bad value replaces the good one
    code, _, err = run(capsys, *args, *extra)
    assert code == 1
    assert err.startswith("manyheads: error: ") and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not bundle.exists()


def test_byte_options_for_other_trunks_and_existing_bundles_are_refused(
    capsys, tmp_path, debian_rows, trained
):
    data = write_jsonl(tmp_path / "d.jsonl", _rows(debian_rows, 0, 60))
    hashing = tmp_path / "h"
    base = ["train", data, "--task", "section", "--C", "1"]
    code, _, err = run(capsys, *base, "-b", hashing, "--trunk", "hashing")
    assert code == 0, err
    cases = [
        (["-b", tmp_path / "n", "--trunk", "hashing", "--tier", "8"], "--tier is for byte trunks"),
        (["-b", tmp_path / "n", "--byte-config", "{}"], "are for --trunk byte"),
        (["-b", tmp_path / "n", "--trunk-epochs", "2"], "are for --trunk byte"),
        (["-b", hashing, "--trunk", "byte"], "uses trunk 'hashing', not a byte trunk"),
        (["-b", hashing, "--tier", "8"], "--tier is for byte trunks"),
        (["-b", trained[0], "--trunk-epochs", "2"], "already has a trained trunk"),
        (["-b", trained[0], "--tier", "8"], "answers at tier 16, chosen when it was created"),
        (["-b", trained[0], "--trunk", "hashing"], "uses trunk 'byte'"),
    ]
    for args, message in cases:
        code, _, err = run(capsys, *base, *args)
        assert code == 1, args
        assert message in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (tmp_path / "n").exists()
    with pytest.raises(ManyheadsError, match="not loaded by name"):
        Bundle(trunk="byte")


def test_a_tier_bundle_saved_elsewhere_takes_a_copy_of_the_graph(trained, tmp_path):
    folder, _, _ = trained
    sub = Bundle.load(folder, tier=8, cache=None)
    moved = sub.save(tmp_path / "deep" / "moved")
    graph = _spec(folder)["file"]
    assert _spec(moved)["file"] == graph and (moved / graph).is_file()
    assert not (tmp_path / graph).exists()  # nothing written next to the folder
    assert "trunk_weights" not in json.loads((moved / "bundle.json").read_text())
    again = Bundle.load(moved, cache=None)
    assert again.dim == 8 and again.trunk_fingerprint == sub.trunk_fingerprint
    np.testing.assert_allclose(
        again.predict_proba(["a python library"])["section"],
        sub.predict_proba(["a python library"])["section"],
        atol=1e-6,
    )


def test_bad_tier_arguments_are_refused(trained, bundle_copy, tmp_path):
    folder, _, _ = trained
    with pytest.raises(ConfigError, match="tier must be an integer, got '8'"):
        Bundle.load(folder, tier="8")  # type: ignore[arg-type]
    pytest.importorskip("fastapi")
    from manyheads.serve import ServeConfig

    with pytest.raises(ConfigError, match="tier must be a positive integer, got 0"):
        ServeConfig(tier=0)
    parent = Bundle.load(folder, cache=None)
    unsaved = Bundle(trunk=parent.trunk, cache=None)
    with pytest.raises(BundleError, match="needs a byte bundle that was saved first"):
        unsaved.save_tiers({8: Bundle.load(folder, tier=8, cache=None)})
    with pytest.raises(BundleError, match="tier 32: give a bundle on this bundle's byte trunk"):
        parent.save_tiers({32: Bundle.load(folder, tier=8, cache=None)})
    with pytest.raises(BundleError, match="tier 16: give a bundle on this bundle's byte trunk"):
        parent.save_tiers({16: Bundle.load(folder, cache=None)})  # its own tier
    # a sub-bundle naming another file for its trunk weights
    meta = bundle_copy / "tiers" / "8" / "bundle.json"
    doc = json.loads(meta.read_text())
    doc["trunk_weights"] = "../../model.bin"
    meta.write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="'trunk_weights' must name a heads.safetensors file"):
        Bundle.load(bundle_copy, tier=8)


# -- built-in bundles ------------------------------------------------------


@pytest.fixture
def builtin(trained, tmp_path, monkeypatch) -> Path:
    """The trained bundle installed as the built-in bundle 'content' (in tmp_path)."""
    root = tmp_path / "models"
    shutil.copytree(trained[0], root / "content")
    monkeypatch.setattr(bundle_module, "builtin_root", lambda: root)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return root / "content"


def test_builtin_bundles_load_by_name(builtin, capsys):
    b = Bundle.load("content", cache=None)
    assert b.path == builtin and b.dim == 16
    assert Bundle.load("content", tier=8, cache=None).path == builtin / "tiers" / "8"
    code, out, err = run(capsys, "predict", "a python library")  # no -b: the content bundle
    assert code == 0, err
    assert set(json.loads(out)) == {"section", "library", "role"}
    code, out, err = run(capsys, "predict", "-b", "content", "--tier", "8", "a python library")
    assert code == 0, err
    code, out, err = run(capsys, "heads", "list", "-b", "content", "--json")
    assert code == 0 and len(json.loads(out)) == 3
    # a bundle folder named like a built-in one is written as a path; the name stays
    # the built-in's, and a note says so
    local = Bundle(trunk="hashing", cache=None)
    local.fit_head("mine", ["a b", "c d", "e f", "g h"] * 5, ["x", "y"] * 10)
    local.save(Path("content"))
    code, out, err = run(capsys, "predict", "a python library")
    assert code == 0 and set(json.loads(out)) == {"section", "library", "role"}, err
    assert "note: 'content' is the built-in bundle; the bundle folder ./content" in err
    code, out, err = run(capsys, "predict", "-b", "./content", "a python library")
    assert code == 0 and set(json.loads(out)) == {"mine"}, err
    assert Bundle.load("content", cache=None).path == builtin
    assert Bundle.load("./content", cache=None).path == Path("content")


def test_every_write_to_a_builtin_bundle_is_refused(builtin, capsys, tmp_path):
    before = {p: p.read_bytes() for p in builtin.rglob("*") if p.is_file()}
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"text": f"t {i}", "y": "ab"[i % 2]}) + "\n" for i in range(20))
    )
    message = "the built-in bundle 'content' is read-only"
    for args in (
        ["train", data, "-b", "content", "--task", "y"],
        ["heads", "rm", "role", "-b", "content"],
        ["finetune", data, "-b", "content", "--task", "y"],
        ["export", "-b", "content", "--out", builtin / "sub"],
    ):
        code, _, err = run(capsys, *args)
        assert code == 1 and message in err and "manyheads copy content DIR" in err, (args, err)
    assert not Path("content").exists()  # no ./content made by the refused train
    b = Bundle.load("content", cache=None)
    b.remove_head("role")
    with pytest.raises(BundleError, match=message):
        b.save(b.path)
    assert {p: p.read_bytes() for p in builtin.rglob("*") if p.is_file()} == before
    code, out, err = run(capsys, "copy", "content", tmp_path / "mine")
    assert code == 0 and out.startswith("copied content to "), err
    code, _, err = run(capsys, "heads", "rm", "role", "-b", tmp_path / "mine")
    assert code == 0, err
    assert sorted(Bundle.load(tmp_path / "mine", cache=None).heads) == ["library", "section"]
    assert (
        Bundle.load(tmp_path / "mine", tier=8, cache=None).path == tmp_path / "mine" / "tiers" / "8"
    )
    code, _, err = run(capsys, "copy", "content", tmp_path / "mine")
    assert code == 1 and "it exists and is not an empty folder" in err


def test_a_missing_builtin_bundle_is_a_clear_error(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_module, "builtin_root", lambda: tmp_path / "models")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ManyheadsError, match="the built-in bundle 'content' is not installed"):
        Bundle.load("content")
    for args in (["predict", "x"], ["serve"], ["eval", "d.jsonl", "-b", "content"]):
        code, _, err = run(capsys, *args)
        assert code == 1, args
        assert "the built-in bundle 'content' is not installed" in err, (args, err)
        assert len(err.strip().splitlines()) == 1


def test_serve_without_a_bundle_serves_the_builtin_one_at_a_tier(builtin, capsys, monkeypatch):
    pytest.importorskip("fastapi")
    uvicorn = pytest.importorskip("uvicorn")
    from fastapi.testclient import TestClient

    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: apps.append(app))
    assert main(["serve", "--no-cache"]) == 0
    assert main(["serve", "--tier", "8", "--no-cache"]) == 0
    assert f"serving {builtin / 'tiers' / '8'} on" in capsys.readouterr().err
    want = {
        t: Bundle.load(builtin, tier=t, cache=None).predict(["a python library"]) for t in (16, 8)
    }
    for app, tier in zip(apps, (16, 8), strict=True):
        with TestClient(app) as client:
            assert client.get("/readyz").json()["heads"] == ["section", "library", "role"]
            got = client.post("/v1/predict", json={"texts": ["a python library"]}).json()
            assert got["results"][0]["section"]["label"] == want[tier][0]["section"]["label"]
            scores = got["results"][0]["library"]["scores"]
            assert scores == pytest.approx(want[tier][0]["library"]["scores"], abs=1e-4)


def test_builtin_bundles_are_package_data():
    import tomllib

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["manyheads"]
    models = Path(bundle_module.__file__).resolve().parent.parent / "models"
    for name in bundle_module.BUILTIN_BUNDLES:
        assert f"models/{name}/*" in data
        for sub in ("data", "tiers"):  # what the bundle's folder holds is shipped too
            if (models / name / sub).is_dir():
                wanted = f"models/{name}/{sub}/*" if sub == "data" else f"models/{name}/tiers/*/*"
                assert wanted in data, (name, sub)
