"""The byte trunk: byte windows, multi-task training, nested tiers, bundles."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import in_forked_child

from manyheads import Bundle
from manyheads.errors import ConfigError, DataError, ManyheadsError

pytest.importorskip("torch")

from manyheads.train.byte import train_byte_trunk
from manyheads.trunks.byte import SEP, ByteConfig, ByteTrunk, byte_ids

pytestmark = pytest.mark.heavy  # left out of scripts/test.sh --quick

SMALL = ByteConfig(
    max_bytes=128, embed=16, channels=32, dilations=(1, 2), heads=2, dims=(8, 16, 32)
)


@pytest.fixture(scope="module")
def trained(debian_rows):
    rows = debian_rows[:300]
    texts = [r["text"] for r in rows]
    tasks = {
        "library": ([r["library"] for r in rows], "binary"),
        "role": ([r["role"] for r in rows], "multilabel"),
        "section": ([r["section"] for r in rows], "multiclass"),
    }
    trunk, summary = train_byte_trunk(texts, tasks, config=SMALL, epochs=3, batch_size=32)
    return trunk, summary, rows


def test_long_texts_are_read_as_head_and_tail():
    text = "A" * 100 + "B" * 100
    ids, lengths = byte_ids([text, "é", ""], max_bytes=21)
    assert lengths.tolist() == [21, 2, 1]
    row = ids[0, :21]
    assert (row[:10] == ord("A") + 1).all() and row[10] == SEP and (row[11:] == ord("B") + 1).all()
    assert ids[1, :2].tolist() == [0xC3 + 1, 0xA9 + 1]  # UTF-8 bytes of "é"
    assert ids[2, 0] == SEP  # an empty text keeps one position


def test_config_is_checked():
    for bad in (
        {"kernel": 4},
        {"dims": (64, 32)},
        {"channels": 30, "heads": 4},
        {"stride": 8, "stem": 4},
        {"stride": 8, "stem": 11},
        {"heads": -1},
        {"max_bytes": 8},
        {"embed": 0},
        {"grams": 1},
        {"grams": 6},
        {"bag": -1},
        {"bag": True},
        {"bag_dim": 0},
        {"int8": 1},
    ):
        with pytest.raises(ConfigError):
            ByteConfig(**bad)
    with pytest.raises(ConfigError, match="grams must be an integer from 2 to 5, got 7"):
        ByteConfig(grams=7)
    with pytest.raises(ConfigError, match="bag must be a non-negative integer"):
        ByteConfig(bag=-5)
    with pytest.raises(ConfigError, match="bag_dim must be a positive integer, got 0"):
        ByteConfig(bag_dim=0)
    with pytest.raises(ConfigError, match="int8 must be true or false, got 1"):
        ByteConfig(int8=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown byte trunk settings"):
        ByteConfig.from_json({"width": 3})
    assert ByteConfig.from_json(SMALL.to_json()) == SMALL


def test_training_lowers_the_loss_and_weights_tasks(trained):
    trunk, summary, _ = trained
    assert summary.steps == 3 * 10
    assert summary.losses[-1] < summary.losses[0]
    assert set(summary.task_weights) == {"library", "role", "section"}
    assert trunk.dim == 32 and len(trunk.fingerprint) == 16


def test_tiers_are_slices_of_one_embedding(trained):
    trunk, _, rows = trained
    texts = [r["text"] for r in rows[:20]]
    full = trunk.encode(texts)
    assert full.shape == (20, 32)
    np.testing.assert_allclose(np.linalg.norm(full, axis=1), 1.0, atol=1e-5)
    small = trunk.with_tier(8)
    assert small.dim == 8 and small.fingerprint != trunk.fingerprint
    part = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(small.encode(texts), part, atol=1e-5)
    with pytest.raises(ConfigError, match="tier must be one of"):
        trunk.with_tier(12)


def test_another_tier_keeps_batch_size_and_spread(trained):
    trunk, _, _ = trained
    tuned = ByteTrunk(trunk.config, state=trunk._weights(), batch_size=7)
    tuned.spread = "ops"
    small = tuned.with_tier(8)
    assert small.batch_size == 7 and small.spread == "ops"
    assert trunk.with_tier(8).spread == ByteTrunk.spread  # not set: the class default


def test_a_bundle_on_the_byte_trunk_saves_and_loads(trained, tmp_path, debian_test_rows):
    trunk, _, rows = trained
    b = Bundle(trunk=trunk.with_tier(16), cache=None)
    b.fit_head("library", [r["text"] for r in rows], [r["library"] for r in rows], kind="binary")
    probe = [r["text"] for r in debian_test_rows[:30]]
    want = b.predict_proba(probe)["library"]
    b.save(tmp_path / "b")
    again = Bundle.load(tmp_path / "b", cache=None)
    assert again.trunk_reference["spec"]["type"] == "byte"
    assert again.trunk.fingerprint == b.trunk.fingerprint and again.dim == 16
    np.testing.assert_allclose(again.predict_proba(probe)["library"], want, atol=1e-5)


def test_weights_must_match_the_config(trained):
    trunk, _, _ = trained
    state = trunk.state()
    state.pop(next(iter(state)))
    with pytest.raises(ManyheadsError, match="do not match its config"):
        ByteTrunk(SMALL, state=state)
    with pytest.raises(ManyheadsError, match="no weights yet"):
        ByteTrunk(SMALL).encode(["x"])


def test_bad_tasks_are_refused(debian_rows):
    texts = [r["text"] for r in debian_rows[:10]]
    with pytest.raises(DataError, match="at least one task"):
        train_byte_trunk(texts, {}, config=SMALL)
    with pytest.raises(DataError, match="9 labels for 10 texts"):
        train_byte_trunk(texts, {"t": (["a"] * 9, "multiclass")}, config=SMALL)
    with pytest.raises(DataError, match="a classifier needs at least two"):
        train_byte_trunk(texts, {"t": (["a"] * 10, "multiclass")}, config=SMALL)
    with pytest.raises(DataError, match="must be a list of labels"):
        train_byte_trunk(texts, {"t": (["a"] * 10, "multilabel")}, config=SMALL)
    with pytest.raises(ConfigError, match="kind must be one of"):
        train_byte_trunk(texts, {"t": (["a", "b"] * 5, "ordinal")}, config=SMALL)


def test_weight_shapes_are_known_without_torch():
    import torch  # noqa: F401

    from manyheads.trunks.byte import expected_shapes
    from manyheads.trunks.byte.model import build_module

    bagged = ByteConfig(heads=0, ngrams=64, grams=5, bag=100, bag_dim=8)
    for config in (
        SMALL,
        ByteConfig(),
        ByteConfig(heads=0, stride=4, stem=4),
        bagged,
        ByteConfig.from_json({**bagged.to_json(), "int8": True}),
    ):
        module = build_module(config)
        assert expected_shapes(config) == {
            k: tuple(v.shape) for k, v in module.state_dict().items()
        }


def test_a_saved_byte_bundle_carries_its_graph_and_predicts_without_torch(
    trained, tmp_path, debian_test_rows
):
    import json
    import subprocess
    import sys

    pytest.importorskip("onnxruntime")
    trunk, _, rows = trained
    b = Bundle(trunk=trunk.with_tier(16), cache=None)
    b.fit_head("library", [r["text"] for r in rows], [r["library"] for r in rows], kind="binary")
    probe = [r["text"] for r in debian_test_rows[:30]] + ["x" * 5000, ""]
    want = b.predict_proba(probe)["library"]  # torch path
    folder = b.save(tmp_path / "b")
    spec = json.loads((folder / "bundle.json").read_text())["trunk"]["spec"]
    assert spec["file"].startswith("model-") and (folder / spec["file"]).is_file()
    # the weights are stored once: in the graph, not again beside the heads
    from safetensors.numpy import load_file

    assert not [k for k in load_file(folder / "heads.safetensors") if k.startswith("trunk/")]
    again = Bundle.load(folder, cache=None)
    np.testing.assert_allclose(again.predict_proba(probe)["library"], want, atol=1e-4)
    code = (
        "import sys, json\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import manyheads\n"
        f"b = manyheads.Bundle.load({str(folder)!r}, cache=None)\n"
        f"p = b.predict_proba(json.loads({json.dumps(json.dumps(probe))}))['library']\n"
        "print(json.dumps(p.tolist()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    np.testing.assert_allclose(np.array(json.loads(out.stdout)), want, atol=1e-4)
    # saved elsewhere: the graph travels with the bundle
    moved = again.save(tmp_path / "moved")
    assert (moved / spec["file"]).is_file()
    (folder / spec["file"]).write_bytes(b"tampered")
    with pytest.raises(ManyheadsError, match="not the graph"):
        Bundle.load(folder, cache=None).predict(["x"])


def test_a_trunk_without_attention_trains_on_partly_labelled_tasks_and_exports(
    debian_rows, tmp_path
):
    pytest.importorskip("onnxruntime")
    rows = debian_rows[:120]
    texts = [r["text"] for r in rows]
    config = ByteConfig(
        max_bytes=128, embed=16, channels=32, dilations=(1,), heads=0, dims=(8, 16), stride=4
    )
    lib = [r["library"] if i % 2 else None for i, r in enumerate(rows)]  # half unlabelled
    role = [r["role"] if i % 3 else None for i, r in enumerate(rows)]
    tasks = {"lib": (lib, "binary"), "role": (role, "multilabel")}
    trunk, summary = train_byte_trunk(texts, tasks, config=config, epochs=2)
    assert np.isfinite(summary.losses).all()
    assert "attn.in_proj_weight" not in trunk.state()
    ids, lengths = byte_ids(["abcde"], 128, multiple=4)
    assert lengths.tolist() == [8] and ids.shape == (1, 8)
    want = trunk.encode([*texts[:10], "x"])  # torch
    trunk.save_files(tmp_path)
    np.testing.assert_allclose(trunk.encode([*texts[:10], "x"]), want, atol=1e-4)  # onnxruntime
    with pytest.raises(DataError, match="no text has a label"):
        train_byte_trunk(texts, {"lib": ([None] * len(texts), "binary")}, config=config)


def test_a_loaded_byte_bundle_saved_elsewhere_untouched_keeps_its_graph(trained, tmp_path):
    pytest.importorskip("onnxruntime")
    trunk, _, rows = trained
    b = Bundle(trunk=trunk.with_tier(16), cache=None)
    b.fit_head("library", [r["text"] for r in rows], [r["library"] for r in rows], kind="binary")
    b.fit_head("lib2", [r["text"] for r in rows[:60]], ["x", "y", "z"] * 20)
    b.save(tmp_path / "a")
    loaded = Bundle.load(tmp_path / "a", cache=None)  # trunk not built: nothing encoded
    loaded.remove_head("library")
    loaded.save(tmp_path / "b")
    graph = loaded.trunk_reference["spec"]["file"]
    assert (tmp_path / "b" / graph).is_file()
    assert set(Bundle.load(tmp_path / "b", cache=None).predict(["some text"])[0]) == {"lib2"}


def test_task_weighting_is_chance_by_default_or_learned(debian_rows):
    rows = debian_rows[:64]
    texts = [r["text"] for r in rows]
    tasks = {
        "library": ([r["library"] for r in rows], "binary"),
        "section": ([r["section"] for r in rows], "multiclass"),
    }
    config = ByteConfig(max_bytes=64, embed=8, channels=16, dilations=(1,), heads=0, dims=(8,))
    _, chance = train_byte_trunk(texts, tasks, config=config, epochs=1)
    k = len({r["section"] for r in rows})
    assert chance.task_weights["library"] == pytest.approx(1 / np.log(2))
    assert chance.task_weights["section"] == pytest.approx(1 / np.log(k))
    _, learned = train_byte_trunk(texts, tasks, config=config, epochs=2, weighting="uncertainty")
    assert learned.task_weights["library"] != pytest.approx(1.0)  # learned, moved from exp(0)
    with pytest.raises(ConfigError, match="weighting must be"):
        train_byte_trunk(texts, tasks, config=config, weighting="equal")


def test_a_task_can_weigh_more_and_training_can_go_on_from_a_trunk(debian_rows):
    rows = debian_rows[:64]
    texts = [r["text"] for r in rows]
    tasks = {
        "library": ([r["library"] for r in rows], "binary"),
        "section": ([r["section"] for r in rows], "multiclass"),
    }
    config = ByteConfig(max_bytes=64, embed=8, channels=16, dilations=(1,), heads=0, dims=(8,),
                        bag=64, bag_dim=8, int8=True)  # fmt: skip
    first, plain = train_byte_trunk(texts, tasks, config=config, epochs=1)
    _, heavy = train_byte_trunk(texts, tasks, config=config, epochs=1, task_weights={"library": 4})
    assert heavy.task_weights["library"] == pytest.approx(4 * plain.task_weights["library"])
    assert heavy.task_weights["section"] == pytest.approx(plain.task_weights["section"])
    # going on from a trunk starts from its weights (the int8 bag read back as floats)
    again, summary = train_byte_trunk(texts, tasks, config=config, epochs=1, start=first)
    assert summary.losses[0] < plain.losses[0]
    assert not np.array_equal(again.state()["stem.weight"], first.state()["stem.weight"])
    for bad, message in (
        ({"nope": 2.0}, "task_weights names a task not trained: 'nope'"),
        ({"library": 0}, r"task_weights\['library'\] must be a positive number, got 0"),
        ({"library": True}, "must be a positive number"),
    ):
        with pytest.raises(ConfigError, match=message):
            train_byte_trunk(texts, tasks, config=config, task_weights=bad)
    other = ByteConfig(max_bytes=64, embed=8, channels=16, dilations=(1,), heads=0, dims=(16,))
    with pytest.raises(ConfigError, match="start: the trunk to go on from has another config"):
        train_byte_trunk(texts, tasks, config=other, start=first)


def test_settings_added_later_leave_older_configs_and_fingerprints_alone():
    legacy = ByteConfig(heads=2, ngrams=64, grams=3, bag=0, bag_dim=64, int8=False)
    saved = legacy.to_json()
    assert not {"grams", "bag", "bag_dim", "int8"} & set(saved)  # as the first bundles wrote
    assert ByteConfig.from_json(saved) == legacy  # read back without a bag, as trained
    # settings a person gives take today's defaults for what they leave out
    assert ByteConfig.from_settings({"heads": 2}) == ByteConfig(heads=2)
    assert ByteConfig().bag > 0 and ByteConfig.from_json(ByteConfig().to_json()) == ByteConfig()
    with pytest.raises(ConfigError, match="unknown byte trunk settings: width"):
        ByteConfig.from_settings({"width": 3})


def test_the_bag_trains_with_path_dropout_and_int8_matches_between_torch_and_onnx(
    debian_rows, tmp_path
):
    pytest.importorskip("onnxruntime")
    rows = debian_rows[:160]
    texts = [r["text"] for r in rows]
    config = ByteConfig(
        max_bytes=128, embed=16, channels=32, dilations=(1,), heads=0, dims=(8, 16),
        grams=4, bag=256, bag_dim=12, int8=True,
    )  # fmt: skip
    tasks = {"section": ([r["section"] for r in rows], "multiclass")}
    trunk, summary = train_byte_trunk(texts, tasks, config=config, epochs=3, path_dropout=0.5)
    assert summary.losses[-1] < summary.losses[0]
    state = trunk.state()
    assert "bag.weight" not in state
    assert state["bag.q"].dtype == np.int8 and state["bag.q"].shape == (258 + 256, 12)
    assert state["bag.scale"].shape == (258 + 256,) and (state["bag.scale"] > 0).all()
    want = trunk.encode(texts[:20])  # torch, the int8 table dequantised row by row
    trunk.save_files(tmp_path)
    np.testing.assert_allclose(trunk.encode(texts[:20]), want, atol=1e-4)  # onnxruntime
    onnx = pytest.importorskip("onnx")
    graph = onnx.load(str(tmp_path / trunk.graph))
    tables = {i.name: i for i in graph.graph.initializer if list(i.dims) == [258 + 256, 12]}
    # the table stays int8 in the graph: no float copy of it folded in
    assert [t.data_type for t in tables.values()] == [onnx.TensorProto.INT8]
    # int8 rows: each number within half a step (its row's scale / 2) of the float one
    from manyheads.trunks.byte import quantize_rows

    table = np.random.default_rng(0).normal(size=(50, 12)).astype(np.float32)
    q, scale = quantize_rows(table)
    assert np.abs(q.astype(np.float32) * scale[:, None] - table).max() <= scale.max() / 2 + 1e-6
    for bad in (-0.1, 1.0, "x"):
        with pytest.raises(ConfigError, match="path_dropout must be in"):
            train_byte_trunk(texts, tasks, config=config, path_dropout=bad)


@pytest.mark.parametrize("norm", ["mean", "l2log"])
def test_the_bag_weighs_each_row_by_its_count_as_its_norm_says(norm):
    import torch

    from manyheads.trunks.byte.model import build_module

    config = ByteConfig(
        max_bytes=64, embed=8, channels=16, dilations=(1,), dims=(8,), bag=50, int8=False,
        bag_norm=norm,
    )  # fmt: skip
    module = build_module(config).eval()
    texts = ["ab ab ab", "é x", "", "zzzzzzzzzz"]
    ids = torch.from_numpy(byte_ids(texts, 64, 8)[0])
    with torch.no_grad():
        bag = module._bag(ids).numpy()
        table = module.bag.weight.numpy()
        rows = [ids[:, :, None]] + [g[:, :, None] + 258 for g in module._grams(ids, 50)]
        every = torch.cat(rows, 2).numpy()  # text x byte x (byte, its 2-, 3-, 4-gram)
    for i, text in enumerate(texts):
        n = max(len(text.encode()), 1)  # an empty text is its separator alone
        used = every[i, :n].ravel()
        counts = np.bincount(used, minlength=table.shape[0]).astype(np.float64)
        if norm == "mean":
            weights = counts / n
        else:
            weights = np.log1p(counts) / np.linalg.norm(np.log1p(counts))
        np.testing.assert_allclose(bag[i], weights @ table, atol=1e-5)
    assert np.abs(bag[2]).sum() > 0
    with pytest.raises(ConfigError, match="bag_norm must be one of l2log, mean"):
        ByteConfig(bag_norm="sum")


def test_trunk_weights_stay_beside_the_graph_when_it_does_not_hold_them_all(
    trained, tmp_path, monkeypatch
):
    import sys

    from safetensors.numpy import load_file

    from manyheads.trunks.byte import ByteTrunk

    pytest.importorskip("onnxruntime")
    trunk, _, rows = trained
    texts = [r["text"] for r in rows[:40]]
    b = Bundle(trunk=trunk.with_tier(16), cache=None)
    b.fit_head("library", texts, [r["library"] for r in rows[:40]], kind="binary")
    want = b.predict_proba(texts)["library"]
    with monkeypatch.context() as m:  # as if the exporter had merged two equal tensors
        m.setattr(ByteTrunk, "weights_in_graph", lambda self: False)
        kept = b.save(tmp_path / "kept")
    assert {k for k in load_file(kept / "heads.safetensors") if k.startswith("trunk/")}
    once = b.save(tmp_path / "once")
    assert not [k for k in load_file(once / "heads.safetensors") if k.startswith("trunk/")]
    for folder in (kept, once):
        got = Bundle.load(folder, cache=None).predict_proba(texts)["library"]
        np.testing.assert_allclose(got, want, atol=1e-4)
    # reading weights from the graph needs the onnx package: said so, not a bare ImportError
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ManyheadsError, match=r"pip install 'manyheads\[onnx\]'"):
        Bundle.load(once, cache=None).trunk.fingerprint  # noqa: B018
    assert Bundle.load(kept, cache=None).trunk.fingerprint == b.trunk_fingerprint


def _byte_ids_one_by_one(texts, max_bytes, multiple=1):
    """The plain per-text reading of ``byte_ids`` (what it must equal)."""
    half = (max_bytes - 1) // 2
    rows = []
    for t in texts:
        arr = np.frombuffer(t.encode("utf-8", "replace"), dtype=np.uint8).astype(np.int64) + 1
        if len(arr) > max_bytes:
            arr = np.concatenate([arr[:half], [SEP], arr[-half:]])
        rows.append(arr if len(arr) else np.array([SEP]))
    lengths = np.array([-(-len(r) // multiple) * multiple for r in rows], dtype=np.int64)
    ids = np.zeros((len(rows), int(lengths.max())), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    return ids, lengths


@pytest.mark.parametrize(("max_bytes", "multiple"), [(21, 1), (64, 8), (1024, 8), (16, 4)])
def test_byte_ids_read_every_text_as_one_by_one(max_bytes, multiple):
    rng = np.random.default_rng(0)
    alphabet = ["a", " ", "\n", "é", "日", "\U0001f600", "\x00", "\udc80"]  # a lone surrogate
    texts = ["", "x" * 5000, "日本語" * 400] + [
        "".join(rng.choice(alphabet, size=int(rng.integers(0, 300)))) for _ in range(200)
    ]
    ids, lengths = byte_ids(texts, max_bytes, multiple)
    want_ids, want_lengths = _byte_ids_one_by_one(texts, max_bytes, multiple)
    assert np.array_equal(ids, want_ids) and np.array_equal(lengths, want_lengths)
    assert byte_ids([], max_bytes)[0].shape == (0, 1)


@pytest.mark.parametrize(
    "shape", [{}, {"stride": 4, "stem": 6}, {"stride": 3, "stem": 7}, {"stride": 1, "stem": 1}]
)
def test_the_stem_as_table_lookups_equals_the_convolution(shape, monkeypatch):
    import torch

    from manyheads.trunks.byte import model as byte

    config = ByteConfig(max_bytes=256, embed=8, channels=16, dilations=(1, 2), bag=512, **shape)
    module = byte.build_module(config).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
        module.embed.weight[0] = 1.0  # a padding row that is not zero: edges still exact
    texts = ["def f(): return 1", "é" * 200, "", "x" * 900]
    ids = torch.from_numpy(byte_ids(texts, config.max_bytes, config.stride)[0])
    with torch.no_grad():
        looked_up = module(ids)
        monkeypatch.setattr(byte, "STEM", "conv")
        convolved = module(ids)
    assert looked_up.shape == convolved.shape == (4, config.dims[-1])
    assert torch.allclose(looked_up, convolved, rtol=1e-4, atol=1e-3)
    assert not torch.allclose(looked_up[0], looked_up[1])


def test_a_dropped_graph_is_exported_anew_at_the_next_save(trained, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from manyheads.trunks.byte import model as byte

    trunk, _, rows = trained
    texts = [r["text"] for r in rows[:40]]
    monkeypatch.setattr(byte, "STEM", "conv")  # as an older version exported it
    b = Bundle(trunk=trunk.with_tier(32), cache=None)
    b.fit_head("library", [r["text"] for r in rows], [r["library"] for r in rows], kind="binary")
    b.save(tmp_path / "old")
    monkeypatch.setattr(byte, "STEM", "lookup")
    loaded = Bundle.load(tmp_path / "old", cache=None)
    old_graph = loaded.trunk.graph
    loaded.trunk.drop_graph()
    loaded.save(tmp_path / "new")
    new_graph = loaded.trunk_reference["spec"]["file"]
    assert new_graph != old_graph and sorted(p.name for p in (tmp_path / "new").glob("*.onnx")) == [
        new_graph
    ]
    again = Bundle.load(tmp_path / "new", cache=None)
    assert again.trunk_fingerprint == Bundle.load(tmp_path / "old", cache=None).trunk_fingerprint
    assert np.allclose(
        again.trunk.encode(texts), Bundle.load(tmp_path / "old").trunk.encode(texts), atol=1e-5
    )
    labels = [a["library"]["label"] for a in again.predict(texts)]
    assert labels == [a["library"]["label"] for a in loaded.predict(texts)]


def test_the_bag_table_starts_small_unless_asked_otherwise(debian_rows):
    from manyheads.trunks.byte.model import build_module

    config = ByteConfig(max_bytes=64, embed=8, channels=16, dilations=(1,), bag=1024, bag_dim=32)
    small = build_module(config, train=True).bag.weight.detach()
    assert float(small.abs().max()) <= 1 / 32 and float(small[0].abs().max()) == 0.0
    assert float(small.std()) > 0.005  # not all zero: rows differ from the start
    normal = build_module(config, train=True, bag_init="normal").bag.weight.detach()
    assert 0.8 < float(normal[1:].std()) < 1.2
    texts = [r["text"] for r in debian_rows[:20]]
    with pytest.raises(ConfigError, match="bag_init must be one of small, normal"):
        train_byte_trunk(texts, {"s": ([r["section"] for r in debian_rows[:20]], "multiclass")},
                         config=config, bag_init="zero")  # fmt: skip


def test_crop_reads_random_pieces_cut_at_character_boundaries():
    from manyheads.train.byte import _crop

    texts = ["Grüße aus Köln, 東京からこんにちは! " * 4, "tiny", "def f():\n    return 1\n" * 9]
    ids, _ = byte_ids(texts, 512, 8)
    raw = [t.encode() for t in texts]
    rng = np.random.default_rng(0)
    seen_short = False
    for _ in range(100):
        out, cut = _crop(ids, 0.6, 16, 8, rng)
        assert out.shape[1] % 8 == 0 and not cut[1]  # 4 bytes: never cut
        for i, row in enumerate(out):
            piece = bytes(int(v) - 1 for v in row[row != 0])
            piece.decode("utf-8")  # whole characters only
            if cut[i]:
                assert piece in raw[i] and 13 <= len(piece) < len(raw[i])
                seen_short |= len(piece) < 40
            else:
                assert piece == raw[i]
    assert seen_short  # lengths spread on a log scale: short pieces are common
    none, cut = _crop(ids, 0.0, 16, 8, rng)
    assert not cut.any() and np.array_equal(none, ids)


def test_cropped_texts_count_only_for_the_tasks_that_keep_their_labels(debian_rows, monkeypatch):
    import torch

    import manyheads.train.byte as byte

    rows = debian_rows[:64]
    texts = [r["text"] for r in rows]
    tasks = {
        "section": ([r["section"] for r in rows], "multiclass"),
        "role": ([r["role"] for r in rows], "multilabel"),
    }
    config = ByteConfig(max_bytes=64, embed=8, channels=16, dilations=(1,), dims=(8, 16), bag=256)
    monkeypatch.setattr(byte, "_crop", lambda ids, *a: (ids, np.ones(len(ids), dtype=bool)))
    calls = []
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    monkeypatch.setattr(
        torch.nn.functional,
        "binary_cross_entropy_with_logits",
        lambda *a, **k: calls.append(1) or bce(*a, **k),
    )
    train_byte_trunk(texts, tasks, config=config, epochs=1, batch_size=32, crop=0.5)
    assert calls  # every task keeps its labels by default
    calls.clear()
    train_byte_trunk(texts, tasks, config=config, epochs=1, batch_size=32, crop=0.5,
                     crop_tasks=["section"])  # fmt: skip
    assert not calls  # every text was cut: none counts for role
    _, summary = train_byte_trunk(texts, tasks, config=config, epochs=1, batch_size=32,
                                  crop=0.5, crop_tasks=[])  # fmt: skip
    assert summary.steps == 0  # no text counts for any task: no step, no error


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"crop": 1.0}, r"crop must be in \[0, 1\)"),
        ({"crop": -0.1}, r"crop must be in \[0, 1\)"),
        ({"crop": 0.3, "crop_min": 0}, "crop_min must be a positive integer"),
        (
            {"crop": 0.3, "crop_tasks": ["section", "nope"]},
            "crop_tasks names tasks not trained: nope",
        ),
    ],
)
def test_bad_crop_settings_are_refused(debian_rows, setting, message):
    texts = [r["text"] for r in debian_rows[:20]]
    with pytest.raises(ConfigError, match=message):
        train_byte_trunk(texts, {"section": ([r["section"] for r in debian_rows[:20]], "multiclass")},
                         config=SMALL, **setting)  # fmt: skip


def test_batches_run_side_by_side_give_the_vectors_of_one_at_a_time(trained, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    trunk, _, rows = trained
    folder = Bundle(trunk=trunk, cache=None).save(tmp_path / "b")
    texts = [r["text"] for r in rows[:150]] + ["x" * 5000, "", "é"]
    monkeypatch.setenv("MANYHEADS_THREADS", "3")
    side = Bundle.load(folder, cache=None).trunk
    side.batch_size = 8
    seen: list[int] = []
    session = side._onnx()
    real_run = session.run

    class Spy:  # records each batch's rows and the thread it ran on
        def run(self, names, feeds):
            import threading

            seen.append((len(feeds["ids"]), threading.get_ident()))
            return real_run(names, feeds)

    side._session = Spy()
    got = side.encode(texts)
    ops = Bundle.load(folder, cache=None).trunk
    ops.spread = "ops"
    want = ops.encode(texts)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert sum(n for n, _ in seen) == len(texts) and max(n for n, _ in seen) <= 8
    assert side._side.size == 3 and len({t for _, t in seen}) > 1
    # a few texts are split so that every thread has a batch
    seen.clear()
    side.batch_size = 64
    np.testing.assert_allclose(side.encode(texts[:9]), want[:9], atol=1e-5)
    assert sorted(n for n, _ in seen) == [3, 3, 3]
    seen.clear()
    side.encode(texts[:1])
    assert [n for n, _ in seen] == [1]
    # spread changed after the first encode: the session is opened again for it
    ops_session = ops._session
    ops.spread = "batches"
    np.testing.assert_allclose(ops.encode(texts), want, atol=1e-5)
    assert ops._session is not ops_session and ops._side._pool is not None
    ops.spread = "batch"
    with pytest.raises(
        ConfigError, match="byte trunk spread must be one of batches, ops, got 'batch'"
    ):
        ops.encode(texts[:2])


def test_a_forked_child_encodes_with_threads_of_its_own(trained, tmp_path):
    pytest.importorskip("onnxruntime")
    trunk, _, rows = trained
    folder = Bundle(trunk=trunk, cache=None).save(tmp_path / "b")
    loaded = Bundle.load(folder, cache=None).trunk
    texts = [r["text"] for r in rows[:100]]
    want = loaded.encode(texts)  # the parent's threads exist now
    got = in_forked_child(lambda: loaded.encode(texts))  # the parent's threads are not there
    np.testing.assert_allclose(got, want, atol=1e-5)
