"""Exported (ONNX) bundles: parity with the torch path, head changes, no torch, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import assert_same_answers, in_forked_child

from manyheads import (
    Bundle,
    BundleError,
    ConfigError,
    FingerprintMismatchError,
    ManyheadsError,
)
from manyheads.cli import main
from manyheads.trunks.graph_spec import GraphSpec
from manyheads.trunks.onnxrt import cpu_threads, length_batches

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from manyheads.export import export_bundle

pytestmark = pytest.mark.heavy  # left out of scripts/test.sh --quick

LONG = " ".join(["the library provides python bindings for the parser and tools"] * 12)


def _rows(debian_rows, n=240):
    return debian_rows[:n]


def _fit_all_kinds(bundle: Bundle, rows) -> None:
    """Linear and MLP heads of every kind on the same texts."""
    texts = [r["text"] for r in rows]
    section = [r["section"] for r in rows]
    library = [r["library"] for r in rows]
    role = [r["role"] for r in rows]
    bundle.fit_head("section", texts, section, seed=0)
    bundle.fit_head("library", texts, library, kind="binary", seed=0)
    bundle.fit_head("role", texts, role, kind="multilabel", seed=0)
    bundle.fit_head("section_mlp", texts, section, head="mlp", seed=0)
    bundle.fit_head("library_mlp", texts, library, kind="binary", head="mlp", seed=0)
    bundle.fit_head("role_mlp", texts, role, kind="multilabel", head="mlp", seed=0)
    tree = [[f"{lib}::{sec}"] for lib, sec in zip(library, section, strict=True)]
    bundle.fit_head("tree", texts, tree, kind="hierarchical", seed=0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_st_dir, debian_rows):
    """A bundle on the tiny sentence-transformers model (CLS pooling, 16-token windows)
    with linear and MLP heads of every kind, and its fp32 export."""
    root = tmp_path_factory.mktemp("onnx")
    bundle = Bundle(trunk=str(tiny_st_dir), cache=None)
    _fit_all_kinds(bundle, _rows(debian_rows))
    bundle.save(root / "source")
    export_bundle(bundle, root / "exported")
    return bundle, root


def _check_parity(source: Bundle, exported: Bundle, texts: list[str]) -> None:
    want = source.predict_proba(texts)
    got = exported.predict_proba(texts)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-4, err_msg=name)
    a, b = source.predict(texts), exported.predict(texts)
    for x, y in zip(a, b, strict=True):
        for name in x:
            assert x[name].get("label") == y[name].get("label"), name
            assert x[name].get("labels") == y[name].get("labels"), name


def test_fp32_export_matches_the_torch_path_for_every_head_kind(trained, debian_test_rows):
    source, root = trained
    exported = Bundle.load(root / "exported", cache=None)
    assert type(exported.trunk).__name__ == "OnnxTrunk"
    # every head is inside the graph
    assert set(exported.trunk.graph_heads()) == set(source.heads)
    texts = [r["text"] for r in debian_test_rows[:120]] + [LONG, "x", ""]
    _check_parity(source, exported, texts)
    # the embedding too, long texts (several windows) included
    np.testing.assert_allclose(exported.embed(texts), source.embed(texts), atol=1e-5)


def test_exported_folder_is_a_bundle(trained):
    _, root = trained
    folder = root / "exported"
    names = sorted(p.name for p in folder.iterdir())
    graphs = [n for n in names if n.startswith("model-") and n.endswith(".onnx")]
    assert len(graphs) == 1
    assert {"bundle.json", "heads.safetensors", "tokenizer.json"} <= set(names)
    doc = json.loads((folder / "bundle.json").read_text())
    assert doc["trunk"]["spec"]["type"] == "onnx"
    assert doc["trunk"]["spec"]["file"] == graphs[0]
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no work folders left


def test_adding_and_removing_heads_rewrites_the_graph(trained, tmp_path, debian_rows):
    source, root = trained
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(root / "exported", folder)
    exported = Bundle.load(folder, cache=None)
    old_graph = exported.trunk.file
    rows = debian_rows[300:500]
    texts = [r["text"] for r in rows]
    exported.fit_head("interface", texts, [r["interface"] for r in rows], kind="multilabel")
    # not in the graph yet: applied to the graph's embedding
    assert "interface" not in exported.trunk.graph_heads()
    probe = [r["text"] for r in debian_rows[600:640]]
    before = exported.predict_proba(probe, heads=["interface"])["interface"]
    exported.remove_head("library_mlp")
    exported.save(folder)
    graphs = sorted(p.name for p in folder.glob("model-*.onnx"))
    assert len(graphs) == 1 and graphs[0] != old_graph  # the old graph is gone
    again = Bundle.load(folder, cache=None)
    inside = again.trunk.graph_heads()
    assert "interface" in inside and "library_mlp" not in inside
    np.testing.assert_allclose(
        again.predict_proba(probe, heads=["interface"])["interface"], before, atol=1e-5
    )
    # the other heads still match the source bundle
    rest = [n for n in source.heads if n != "library_mlp"]
    want = source.predict_proba(probe, heads=rest)
    got = again.predict_proba(probe, heads=rest)
    for name in rest:
        np.testing.assert_allclose(got[name], want[name], atol=1e-4)


def test_graph_rewrites_while_predicting_never_break_a_call(trained, tmp_path, debian_rows):
    """A service changes a copy, saves it (the graph is rewritten and reloaded) and swaps;
    calls running meanwhile finish on the graph they started with."""
    import shutil
    import threading

    source, root = trained
    folder = tmp_path / "live"
    shutil.copytree(root / "exported", folder)
    live = [Bundle.load(folder, cache=None)]
    probe = [r["text"] for r in debian_rows[600:616]] + [LONG]
    want = source.predict_proba(probe, heads=["section", "role"])
    rows = debian_rows[300:420]
    texts = [r["text"] for r in rows]
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                got = live[0].predict_proba(probe)  # every head of that snapshot
                for name in want:
                    np.testing.assert_allclose(got[name], want[name], atol=1e-4)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(3):
            new = live[0].copy()
            new.fit_head(f"extra{i}", texts, [r["section"] for r in rows])
            if i:
                new.remove_head(f"extra{i - 1}")
            new.save(folder)
            live[0] = new
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert set(live[0].trunk.graph_heads()) == set(live[0].heads)
    assert len(list(folder.glob("model-*.onnx"))) == 1


def test_composite_trunk_exports_transformer_part_and_keeps_heads_fused(
    tmp_path, tiny_model_dir, debian_rows, debian_test_rows
):
    rows = _rows(debian_rows)
    source = Bundle(trunk=f"{tiny_model_dir}+tfidf", cache=None)
    texts = [r["text"] for r in rows]
    source.fit_head("section", texts, [r["section"] for r in rows])
    source.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel", head="mlp")
    export_bundle(source, tmp_path / "x")
    exported = Bundle.load(tmp_path / "x", cache=None)
    spec = json.loads((tmp_path / "x" / "bundle.json").read_text())["trunk"]["spec"]
    assert spec["type"] == "composite"
    assert [p["type"] for p in spec["parts"]] == ["onnx", "hashing"]
    assert exported.trunk_fingerprint == source.trunk_fingerprint
    probe = [r["text"] for r in debian_test_rows[:60]] + [LONG]
    _check_parity(source, exported, probe)


def test_int8_export_answers_and_is_cached_apart(trained, tmp_path, debian_test_rows):
    source, _ = trained
    export_bundle(source, tmp_path / "q", int8=True)
    q = Bundle.load(tmp_path / "q", cache=None)
    assert q.trunk.quantization == "int8"
    assert q.trunk.cache_key != q.trunk.fingerprint  # int8 vectors never mix with fp32 ones
    assert q.trunk_fingerprint == source.trunk_fingerprint  # the heads still belong to it
    texts = [r["text"] for r in debian_test_rows[:50]]
    got = q.predict_proba(texts)
    for name, p in got.items():
        assert np.isfinite(p).all() and p.shape[0] == 50, name


@pytest.mark.minilm
def test_int8_minilm_agrees_with_fp32_on_real_texts(tmp_path, debian_rows, debian_test_rows):
    """Label agreement with the torch path on real held-out texts: int8 alone (the old
    export) and int8 with its unsure answers rechecked by the float graph (the default)."""
    rows = debian_rows[:1000]
    source = Bundle(trunk="minilm", cache=None)
    texts = [r["text"] for r in rows]
    source.fit_head("library", texts, [r["library"] for r in rows], kind="binary")
    source.fit_head("section", texts, [r["section"] for r in rows])
    export_bundle(source, tmp_path / "old", int8=True, recheck=False)
    export_bundle(source, tmp_path / "new", int8=True)
    test = [r["text"] for r in debian_test_rows[:300]]
    want = source.predict_proba(test)
    agree = {}
    for variant in ("old", "new"):
        got = Bundle.load(tmp_path / variant, cache=None).predict_proba(test)
        agree[variant] = {n: float((want[n].argmax(1) == got[n].argmax(1)).mean()) for n in want}
    # measured (bench/RESULTS.md): int8 alone ~0.95-0.97 on a 50-way section head; with
    # the recheck 0.983 here (0.990 when the twin kept float32 weights)
    assert agree["old"]["section"] >= 0.93, agree
    assert agree["new"]["section"] >= 0.975, agree
    assert agree["new"]["library"] >= 0.99, agree
    # the twin is stored at about the int8 graph's size, not the fp32 graph's
    spec = json.loads((tmp_path / "new" / "bundle.json").read_text())["trunk"]["spec"]
    twin_mb = (tmp_path / "new" / spec["recheck"]["file"]).stat().st_size / 1e6
    int8_mb = (tmp_path / "new" / spec["file"]).stat().st_size / 1e6
    assert twin_mb < 1.2 * int8_mb and twin_mb < 30, (twin_mb, int8_mb)
    print("int8 label agreement", agree)


def test_int8_recheck_format_round_trip(trained, tmp_path, debian_test_rows):
    """bundle.json names the float twin and each head's margin; the folder loads, saves
    elsewhere with its twin, and answers as the float graph where it rechecks."""
    source, root = trained
    export_bundle(source, tmp_path / "q", int8=True)
    spec = json.loads((tmp_path / "q" / "bundle.json").read_text())["trunk"]["spec"]
    recheck = spec["recheck"]
    assert set(recheck) == {"file", "sha256", "quantile", "heads"}
    assert (tmp_path / "q" / recheck["file"]).is_file() and recheck["file"] != spec["file"]
    assert set(recheck["heads"]) == set(source.heads)
    assert all(h["margin"] >= 0 for h in recheck["heads"].values())
    q = Bundle.load(tmp_path / "q", cache=None)
    q.save(tmp_path / "copy")
    copy = Bundle.load(tmp_path / "copy", cache=None)
    assert copy.trunk.recheck == recheck and (tmp_path / "copy" / recheck["file"]).is_file()
    texts = [r["text"] for r in debian_test_rows[:40]]
    got = copy.predict_proba(texts)
    # margins of infinity: every text is rechecked, so the answers are the twin's; the
    # tiny model's weight matrices are all below SMALL_WEIGHTS, so its twin computes as
    # the fp32 graph (one text per call there, batches here: the fp32 parity tolerance)
    for entry in copy.trunk.recheck["heads"].values():
        entry["margin"] = float("inf")
    fp32 = Bundle.load(root / "exported", cache=None).predict_proba(texts)
    for name, p in copy.predict_proba(texts).items():
        np.testing.assert_allclose(p, fp32[name], atol=1e-4, err_msg=name)
        assert np.isfinite(got[name]).all()


def test_an_int8_bundle_without_recheck_answers_as_before(trained, tmp_path, debian_test_rows):
    """The old format (no ``recheck`` in the trunk spec) loads and answers from int8 alone."""
    source, _ = trained
    export_bundle(source, tmp_path / "old", int8=True, recheck=False)
    spec = json.loads((tmp_path / "old" / "bundle.json").read_text())["trunk"]["spec"]
    assert "recheck" not in spec and len(list((tmp_path / "old").glob("model-*.onnx"))) == 1
    old = Bundle.load(tmp_path / "old", cache=None)
    texts = [r["text"] for r in debian_test_rows[:30]]
    want = old.trunk.run(texts, list(old.heads))
    for name, p in old.predict_proba(texts).items():
        np.testing.assert_allclose(p, want[name], atol=1e-6, err_msg=name)


def test_int8_recheck_refuses_bad_options_and_specs(trained, tmp_path, capsys):
    source, root = trained
    with pytest.raises(ConfigError, match="calibration texts are for an int8 export with"):
        export_bundle(source, tmp_path / "a", calibration=["x"])
    with pytest.raises(ConfigError, match="recheck_quantile must be between 0 and 1, got 1.5"):
        export_bundle(source, tmp_path / "a", int8=True, recheck_quantile=1.5)
    with pytest.raises(ConfigError, match="recheck_quantile must be a number"):
        export_bundle(source, tmp_path / "a", int8=True, recheck_quantile="high")
    with pytest.raises(ConfigError, match="calibration must be a list of texts"):
        export_bundle(source, tmp_path / "a", int8=True, calibration="one text")
    with pytest.raises(ConfigError, match="calibrates its recheck on the calibration texts, an"):
        export_bundle(source, tmp_path / "a", int8=True, calibration=["  "])
    bare = Bundle(trunk=source.trunk, cache=None)
    texts = [f"text number {i}" for i in range(20)]
    bare.fit_head("t", texts, ["x", "y"] * 10, keep_data=False)
    with pytest.raises(ConfigError, match="on the heads' kept training texts, and there are"):
        export_bundle(bare, tmp_path / "a", int8=True)
    assert not (tmp_path / "a").exists()
    assert (
        main(["export", "-b", str(root / "source"), "-o", str(tmp_path / "b"), "--no-recheck"]) == 1
    )
    assert "--no-recheck applies to an int8 export (--int8) only" in capsys.readouterr().err
    from manyheads.trunks.onnxrt import OnnxTrunk

    folder = root / "exported"
    spec = json.loads((folder / "bundle.json").read_text())["trunk"]["spec"]
    base = {k: v for k, v in spec.items() if k != "type"}
    good = {"file": spec["file"], "sha256": "0" * 64, "quantile": 0.8, "heads": {}}
    cases = [
        (None, good, "belongs to an int8 graph, this one is None"),
        ("int8", {"file": "x"}, "must be an object with file, sha256, quantile and heads"),
        ("int8", {**good, "file": ""}, "file must be a non-empty string"),
        ("int8", {**good, "quantile": 2}, "quantile must be a number from 0 to 1, got 2"),
        ("int8", {**good, "heads": []}, "heads must be an object"),
        ("int8", {**good, "heads": {"t": {"digest": "d", "margin": -1}}}, "of head 't' must be"),
        ("int8", {**good, "file": "gone.onnx"}, "the exported trunk lacks"),
    ]
    for quantization, recheck, message in cases:
        with pytest.raises(ManyheadsError, match=message):
            OnnxTrunk.from_spec({**base, "quantization": quantization, "recheck": recheck}, folder)


def test_predicting_with_an_exported_bundle_never_imports_torch(trained, tmp_path):
    _, root = trained
    script = textwrap.dedent(
        f"""
        import sys
        for banned in ("torch", "transformers", "sklearn"):
            sys.modules[banned] = None  # any import of them fails
        import manyheads
        b = manyheads.Bundle.load({str(root / "exported")!r})
        out = b.predict(["python bindings for the xml parser", {LONG!r}])
        assert set(out[0]) == set(b.heads), out[0]
        loaded = sorted(m for m in ("torch", "transformers", "sklearn", "scipy.optimize")
                        if sys.modules.get(m) is not None)
        print("LOADED", loaded)
        """
    )
    env = {**os.environ, "MANYHEADS_CACHE_DIR": str(tmp_path / "cache")}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert "LOADED []" in res.stdout


def test_cli_export_then_predict_eval_and_list(tmp_path, trained, debian_test_rows, capsys):
    _, root = trained
    out = tmp_path / "cli-export"
    assert main(["export", "-b", str(root / "source"), "--out", str(out), "--int8"]) == 0
    said = capsys.readouterr().out
    assert (
        "int8, with a float-arithmetic twin kept beside" in said and "--no-recheck writes" in said
    )
    assert main(["predict", "-b", str(out), "python bindings for libxml2"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert {"section", "library", "role"} <= set(answer)
    data = tmp_path / "test.jsonl"
    data.write_text(
        "".join(
            json.dumps({k: r[k] for k in ("text", "section", "library")}) + "\n"
            for r in debian_test_rows[:40]
        )
    )
    assert main(["eval", str(data), "-b", str(out), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["heads"]
    assert metrics["section"]["n"] == 40
    assert main(["heads", "list", "-b", str(out), "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["role"]["kind"] == "multilabel"
    assert main(["heads", "rm", "role", "-b", str(out)]) == 0
    capsys.readouterr()
    assert "role" not in Bundle.load(out, cache=None).trunk.graph_heads()


def test_export_refuses_bad_targets_and_trunks(trained, tmp_path):
    source, root = trained
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    with pytest.raises(BundleError, match="not an empty folder"):
        export_bundle(source, busy)
    assert (busy / "keep.txt").read_text() == "x"
    with pytest.raises(BundleError, match="no heads"):
        export_bundle(Bundle(trunk=source.trunk, cache=None), tmp_path / "empty")
    hashing = Bundle(trunk="hashing", cache=None)
    hashing.fit_head("t", ["a b", "c d", "a c", "b d"] * 5, ["x", "y"] * 10)
    with pytest.raises(ConfigError, match="one transformer part"):
        export_bundle(hashing, tmp_path / "h")
    with pytest.raises(ConfigError, match="already exported"):
        export_bundle(Bundle.load(root / "exported", cache=None), tmp_path / "again")
    assert main(["export", "-b", str(root / "source"), "--out", str(busy)]) == 1
    assert not (tmp_path / "h").exists() and not (tmp_path / "again").exists()


def test_a_failed_export_leaves_nothing(trained, tmp_path, monkeypatch):
    source, _ = trained
    import manyheads.export.onnx as ex

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ex, "_quantize", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        export_bundle(source, tmp_path / "out", int8=True)
    assert list(tmp_path.iterdir()) == []


def test_changed_or_missing_graph_is_refused(trained, tmp_path):
    import shutil

    _, root = trained
    folder = tmp_path / "tampered"
    shutil.copytree(root / "exported", folder)
    graph = next(folder.glob("model-*.onnx"))
    blob = bytearray(graph.read_bytes())
    blob[-1] ^= 0xFF
    graph.write_bytes(bytes(blob))
    with pytest.raises(FingerprintMismatchError, match="SHA-256 differs"):
        Bundle.load(folder, cache=None).predict(["text"])
    graph.unlink()
    with pytest.raises(ManyheadsError, match="lacks"):
        Bundle.load(folder, cache=None).predict(["text"])


def test_an_empty_tokenizer_file_is_one_line_on_every_command(trained, tmp_path, capsys):
    import shutil

    from manyheads.cli import main

    _, root = trained
    folder = tmp_path / "no-tokenizer"
    shutil.copytree(root / "exported", folder)
    (folder / "tokenizer.json").write_text("")
    for argv in (["predict", "text", "-b", str(folder)], ["serve", "-b", str(folder)]):
        assert main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("manyheads: error: cannot read the tokenizer ") and (
            len([line for line in err if "error" in line]) == 1
        ), err


def test_exported_bundle_cannot_be_finetuned(trained):
    _, root = trained
    exported = Bundle.load(root / "exported", cache=None)
    with pytest.raises(ConfigError, match="exported"):
        exported.finetune(["a", "b"], {"t": ("multiclass", ["x", "y"])}, root / "ft")


def test_thread_count_from_environment(monkeypatch):
    monkeypatch.setenv("MANYHEADS_THREADS", "3")
    assert cpu_threads() == 3
    monkeypatch.setenv("MANYHEADS_THREADS", "many")
    with pytest.raises(ConfigError, match="MANYHEADS_THREADS"):
        cpu_threads()
    monkeypatch.setenv("MANYHEADS_THREADS", "0")
    with pytest.raises(ConfigError, match="at least 1"):
        cpu_threads()


def test_graph_spec_refuses_bad_settings_when_made():
    base = {"fingerprint": "f", "dim": 8, "max_length": 16}
    with pytest.raises(ConfigError, match=r"^max_length must be an integer >= 4, got 3$"):
        GraphSpec(**{**base, "max_length": 3})
    with pytest.raises(ConfigError, match=r"^quantization must be None or 'int8', got 'int4'$"):
        GraphSpec(**base, quantization="int4")
    with pytest.raises(ConfigError, match="recheck belongs to an int8 graph, this one is None"):
        GraphSpec(**base, recheck={"file": "x"})
    spec = GraphSpec(**base, quantization="int8")
    assert spec.replace(quantization=None).values() == {**spec.values(), "quantization": None}


def test_length_batches_cover_every_row_once_under_the_budget():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=500)
    lengths[7] = 5000  # longer than the budget: a batch of its own
    batches = length_batches(lengths, max_tokens=1024, max_rows=16)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(500))
    for b in batches:
        assert len(b) <= 16
        assert len(b) == 1 or len(b) * lengths[b].max() <= 1024
    assert np.all(np.diff(lengths[flat]) >= 0)  # sorted by length: little padding


def test_an_int8_graph_answers_a_text_the_same_whatever_its_batch(
    trained, tmp_path, debian_test_rows
):
    """Dynamic quantisation scales a whole call's activations: run in batches, a text's
    vector moves with the texts beside it; one text per call ("auto" for int8) it never does."""
    source, _ = trained
    export_bundle(source, tmp_path / "q", int8=True)
    q = Bundle.load(tmp_path / "q", cache=None)
    trunk = q.trunk
    assert trunk.resolved_spread() == "texts"
    texts = [r["text"] for r in debian_test_rows[:40]] + [LONG, "x"]
    together = q.predict_proba(texts)
    alone = [q.predict_proba([t]) for t in texts]
    for name, p in together.items():
        np.testing.assert_array_equal(p, np.concatenate([a[name] for a in alone]), err_msg=name)
    shuffled = q.predict_proba(texts[::-1])
    for name, p in together.items():
        np.testing.assert_array_equal(p, shuffled[name][::-1], err_msg=name)
    assert trunk.graph().session.get_session_options().intra_op_num_threads == 1
    # in batches the vectors are close to, but not all the same as, one text per call
    trunk.spread = "batches"
    batched = trunk.encode(texts)
    assert trunk.graph().spread == "batches"
    assert trunk.graph().session.get_session_options().intra_op_num_threads == cpu_threads()
    single = np.concatenate([trunk.encode([t]) for t in texts])
    assert not np.array_equal(batched, single)  # the reason for "texts"
    assert float(np.min(np.sum(batched * single, axis=1))) > 0.9
    trunk.spread = "auto"
    np.testing.assert_array_equal(trunk.encode(texts), single)


def test_a_float_graph_runs_batches_and_texts_alike(trained):
    _, root = trained
    b = Bundle.load(root / "exported", cache=None)
    texts = ["python bindings for the xml parser", LONG, "a", "tools for the gnu toolchain"]
    assert b.trunk.resolved_spread() == "batches"
    want = b.predict_proba(texts)
    b.trunk.spread = "texts"
    got = b.predict_proba(texts)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-4, err_msg=name)
    b.trunk.spread = "batch"
    with pytest.raises(
        ConfigError, match="ONNX trunk spread must be one of auto, batches, texts, got 'batch'"
    ):
        b.predict(texts[:1])


def test_a_float_graph_reads_a_long_text_a_few_windows_at_a_time(trained, tmp_path):
    """Each window a row of the graph, averaged outside it: the vectors and answers of a
    whole call. An int8 graph reads a text in one call (its quantisation scales a
    call's activations together), so in one step."""
    source, root = trained
    exported = Bundle.load(root / "exported", cache=None)
    trunk = exported.trunk
    texts = [LONG, "python bindings for the xml parser", LONG[::-1]]
    assert trunk.work_unit == "tokens" and trunk.work(texts) == source.trunk.work(texts)
    encoding = trunk.encoding(texts)
    assert encoding.divisible
    n = 0
    while not encoding.done:
        assert encoding.step(32) <= 32
        n += 1
    assert n > 10
    np.testing.assert_allclose(encoding.result(), trunk.encode(texts), atol=1e-5)
    steps = exported.predict_steps(texts)
    while not steps.done:
        steps.step(32)
    # the heads apply here, not in the graph: within the export's parity tolerance
    assert_same_answers(steps.answers(), exported.predict(texts), atol=1e-4)

    export_bundle(source, tmp_path / "q", int8=True, recheck=False)
    q = Bundle.load(tmp_path / "q", cache=None)
    assert not q.trunk.encoding([LONG]).divisible
    steps = q.predict_steps([LONG])
    assert not steps.divisible
    steps.step(32)
    assert steps.done and steps.answers() == q.predict([LONG])


def test_a_forked_child_runs_texts_side_by_side_with_threads_of_its_own(trained):
    _, root = trained
    b = Bundle.load(root / "exported", cache=None)
    b.trunk.spread = "texts"
    texts = [f"python bindings number {i} for the xml parser" for i in range(30)]
    want = b.trunk.encode(texts)  # the parent's threads exist now
    got = in_forked_child(lambda: b.trunk.encode(texts))  # the parent's threads are not there
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_updating_an_exported_bundle_rewrites_its_graph(trained, tmp_path, debian_rows):
    _, root = trained
    import shutil

    folder = tmp_path / "learning"
    shutil.copytree(root / "exported", folder)
    exported = Bundle.load(folder, cache=None)
    rows = debian_rows[300:460]
    exported.add_feedback(
        [r["text"] for r in rows],
        {"section": [r["section"] for r in rows], "role": [r["role"] for r in rows]},
    )
    report = {h.head: h for h in exported.update_heads(["section", "role"], margin=50.0).heads}
    assert report["section"].promoted and report["role"].promoted  # a wide margin: promoted
    again = Bundle.load(folder, cache=None)
    assert {"section", "role"} <= set(again.trunk.graph_heads())
    assert again.head_info["section"]["generation"] == 2
    probe = [r["text"] for r in debian_rows[600:640]]
    want = exported.predict_proba(probe, heads=["section", "role"])
    got = again.predict_proba(probe, heads=["section", "role"])
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5)
    # and back: the graph holds the first generation again
    before = Bundle.load(root / "exported", cache=None).predict_proba(probe, heads=["section"])
    again.rollback_head("section")
    rolled = Bundle.load(folder, cache=None).predict_proba(probe, heads=["section"])
    np.testing.assert_allclose(rolled["section"], before["section"], atol=1e-6)


def test_a_truncating_trunk_exports_truncating(tmp_path, tiny_st_dir, debian_rows):
    """An exported graph reads long texts as its source did: the first window only."""
    from manyheads.trunks import truncating

    bundle = Bundle(trunk=truncating(str(tiny_st_dir), 10), cache=None)
    rows = _rows(debian_rows, 120)
    bundle.fit_head("section", [r["text"] for r in rows], [r["section"] for r in rows], seed=0)
    exported = Bundle.load(export_bundle(bundle, tmp_path / "exported"), cache=None)
    spec = exported.trunk.spec()
    assert spec["type"] == "onnx" and spec["overflow"] == "truncate" and spec["max_length"] == 10
    texts = [LONG, LONG + " and a tail no window of ten tokens reaches", "short"]
    _check_parity(bundle, exported, texts)
    got = exported.predict_proba(texts)["section"]
    np.testing.assert_allclose(got[0], got[1], atol=1e-6)  # the tail is not read
