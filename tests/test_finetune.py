"""Fine-tuning a transformer trunk (LP-FT) on the tiny random BERT from conftest."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import _WORDS

from manyheads import (
    ConfigError,
    DataError,
    LinearHead,
    MissingDependencyError,
    TransformerTrunk,
)
from manyheads.train.lpft import (
    FinetuneReport,
    finetune_transformer,
    training_embeddings,
)

pytestmark = pytest.mark.heavy  # left out of scripts/test.sh --quick

_KEYS = ["python", "rust", "java", "perl"]
_EXTRAS = ["game", "audio"]
_FILLER = [w for w in _WORDS if w not in {*_KEYS, *_EXTRAS, "server"}]
# small, fast settings for the tiny model (its random weights need a larger trunk lr)
_FAST: dict[str, Any] = {
    "epochs": 5,
    "lr": 3e-3,
    "head_lr": 1e-2,
    "batch_size": 8,
    "max_length": 32,
}


def _dataset(n: int = 60) -> tuple[list[str], dict[str, tuple[str, list[Any]]]]:
    """Texts of six filler words plus a language keyword (multiclass), optional topic
    words (multilabel) and an optional 'server' (binary); the keyword's position varies."""
    rng = random.Random(0)
    texts, lang, topics, server = [], [], [], []
    for i in range(n):
        words = rng.sample(_FILLER, 6)
        found = [w for w in _EXTRAS if rng.random() < 0.5]
        words += found
        key = _KEYS[i % len(_KEYS)]
        words.insert(rng.randrange(len(words) + 1), key)
        if i % 3 == 0:
            words.append("server")
        texts.append(" ".join(words))
        lang.append(key)
        topics.append(found)
        server.append("server" if i % 3 == 0 else "other")
    tasks = {
        "lang": ("multiclass", lang),
        "topics": ("multilabel", topics),
        "server": ("binary", server),
    }
    return texts, tasks


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """The tiny model is fastest single-threaded (and immune to busy CPUs)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def finetuned(
    _one_thread: None, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[FinetuneReport, list[str], dict[str, tuple[str, list[Any]]]]:
    texts, tasks = _dataset()
    out = tmp_path_factory.mktemp("finetune") / "tiny-ft"
    report = finetune_transformer(tiny_model_dir, texts, tasks, out, **_FAST)
    return report, texts, tasks


def test_report_and_losses_decrease(finetuned: Any) -> None:
    report, _, _ = finetuned
    assert report.epochs == 5 and len(report.losses) == 5
    assert report.steps == 5 * 8  # ceil(60 / 8) steps per epoch
    assert len(report.probe_losses) == 20
    assert report.probe_losses[-1] < report.probe_losses[0]
    assert all(b < a for a, b in zip(report.losses, report.losses[1:], strict=False))
    assert report.losses[-1] < 0.7 * report.losses[0]
    assert report.seconds > 0


def test_output_folder_loads_with_new_fingerprint(finetuned: Any, tiny_model_dir: Path) -> None:
    report, _, _ = finetuned
    out = report.out_dir
    trunk = TransformerTrunk(out)
    source = TransformerTrunk(tiny_model_dir)
    assert trunk.fingerprint == report.fingerprint
    assert trunk.fingerprint != source.fingerprint
    assert trunk.pooling == source.pooling == "mean"
    assert trunk.max_length == source.max_length and trunk.dim == source.dim
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "tokenizer.json", "model.safetensors", "finetune.json"} <= names
    assert not any(p.suffix in {".bin", ".pt", ".pth", ".pkl"} for p in out.rglob("*"))
    info = json.loads((out / "finetune.json").read_text())
    assert info["tasks"]["lang"] == {
        "kind": "multiclass",
        "classes": 4,
        "weight": 1.0,
        "teacher": False,
    }
    assert info["losses"] == report.losses
    # only the output folder in its parent: no temporary folder left over
    assert [p.name for p in out.parent.iterdir()] == [out.name]


def test_training_and_inference_embeddings_agree(finetuned: Any, tiny_model_dir: Path) -> None:
    report, texts, _ = finetuned
    for folder in (tiny_model_dir, report.out_dir):
        ours = training_embeddings(folder, texts, max_length=32)
        theirs = TransformerTrunk(folder).encode(texts)
        assert ours.shape == theirs.shape == (60, 32)
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
    before = training_embeddings(tiny_model_dir, texts[:5], max_length=32)
    after = training_embeddings(report.out_dir, texts[:5], max_length=32)
    assert not np.allclose(before, after, atol=1e-3)


def test_finetuned_embeddings_help_a_linear_head(finetuned: Any, tiny_model_dir: Path) -> None:
    report, texts, tasks = finetuned
    y = np.asarray(tasks["lang"][1])
    train, held = np.arange(40), np.arange(40, 60)
    accuracy = {}
    for label, folder in (("source", tiny_model_dir), ("tuned", report.out_dir)):
        X = TransformerTrunk(folder).encode(texts)
        head = LinearHead("multiclass").fit(X[train], y[train])
        accuracy[label] = float(np.mean(head.predict(X[held]) == y[held]))
    assert accuracy["tuned"] >= accuracy["source"]
    assert accuracy["tuned"] >= 0.8, accuracy


def _weights(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def test_same_seed_same_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    import torch

    texts, tasks = _dataset(24)
    quick = {**_FAST, "epochs": 1, "probe_epochs": 3}
    state = torch.random.get_rng_state()
    (tmp_path / "a").mkdir()  # an existing empty folder is fine
    a = finetune_transformer(tiny_model_dir, texts, tasks, tmp_path / "a", seed=1, **quick)
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    b = finetune_transformer(tiny_model_dir, texts, tasks, tmp_path / "b", seed=1, **quick)
    c = finetune_transformer(tiny_model_dir, texts, tasks, tmp_path / "c", seed=2, **quick)
    wa, wb, wc = _weights(a.out_dir), _weights(b.out_dir), _weights(c.out_dir)
    assert wa.keys() == wb.keys()
    for key in wa:
        np.testing.assert_array_equal(wa[key], wb[key], err_msg=key)
    assert a.losses == b.losses and a.fingerprint == b.fingerprint
    assert any(not np.array_equal(wa[k], wc[k]) for k in wa)
    assert a.fingerprint != c.fingerprint


def test_sentence_transformers_folder_keeps_pooling_and_window(
    tiny_st_dir: Path, tmp_path: Path
) -> None:
    texts, tasks = _dataset(24)
    out = tmp_path / "st-ft"
    finetune_transformer(tiny_st_dir, texts, {"lang": tasks["lang"]}, out, epochs=1, max_length=16)
    assert (out / "modules.json").read_text() == (tiny_st_dir / "modules.json").read_text()
    assert json.loads((out / "sentence_bert_config.json").read_text())["max_seq_length"] == 16
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode_cls_token"]
    trunk = TransformerTrunk(out)
    assert trunk.pooling == "cls" and trunk.max_length == 16
    np.testing.assert_allclose(
        training_embeddings(out, texts, max_length=16), trunk.encode(texts), atol=1e-5
    )


def test_pooling_override_is_written_to_the_folder(tiny_model_dir: Path, tmp_path: Path) -> None:
    texts, tasks = _dataset(24)
    out = tmp_path / "max-ft"
    finetune_transformer(
        tiny_model_dir, texts, {"lang": tasks["lang"]}, out, epochs=1, probe_epochs=0, pooling="max"
    )
    trunk = TransformerTrunk(out)
    assert trunk.pooling == "max"
    assert trunk.max_length == TransformerTrunk(tiny_model_dir).max_length
    np.testing.assert_allclose(
        training_embeddings(out, texts, max_length=64, pooling="max"),
        trunk.encode(texts),
        atol=1e-5,
    )


def _bad(**changes: Any) -> dict[str, Any]:
    texts, tasks = _dataset(12)
    args: dict[str, Any] = {"texts": texts, "tasks": tasks}
    args.update(changes)
    return args


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (_bad(tasks={}), DataError, "no tasks"),
        (
            _bad(tasks={"lang": ("multiclass", ["python"] * 11)}),
            DataError,
            r"task 'lang' has 11 labels but there are 12 texts",
        ),
        (
            _bad(tasks={"lang": ("multiclass", ["python"] * 12)}),
            DataError,
            r"task 'lang': labels have a single class \('python'\)",
        ),
        (
            _bad(tasks={"srv": ("binary", ["a", "b", "c"] * 4)}),
            DataError,
            r"task 'srv': a binary head needs exactly 2 classes, got 3",
        ),
        (
            _bad(tasks={"tags": ("multilabel", ["game"] * 12)}),
            DataError,
            r"task 'tags': multilabel target #0 must be a list",
        ),
        (
            _bad(tasks={"lang": ("regression", [1.0] * 12)}),
            ConfigError,
            r"task 'lang': kind must be one of",
        ),
        (_bad(epochs=0), ConfigError, r"epochs must be a positive integer, got 0"),
        (_bad(max_length=-5), ConfigError, r"max_length must be a positive integer, got -5"),
        (_bad(batch_size=0), ConfigError, r"batch_size must be a positive integer, got 0"),
        (_bad(lr=0.0), ConfigError, r"lr must be a positive number, got 0.0"),
        (
            _bad(task_weights={"nope": 1.0}),
            ConfigError,
            r"task_weights names unknown task\(s\) \['nope'\]",
        ),
        (_bad(texts=[]), DataError, "no texts"),
    ],
)
def test_bad_inputs(
    args: dict[str, Any], error: type[Exception], match: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(error, match=match):
        finetune_transformer(tiny_model_dir, out_dir=tmp_path / "out", **args)
    assert not (tmp_path / "out").exists()


def test_non_empty_out_dir_is_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    texts, tasks = _dataset(12)
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already exists and is not an empty folder"):
        finetune_transformer(tiny_model_dir, texts, tasks, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_failed_save_leaves_nothing_behind(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", broken)
    texts, tasks = _dataset(12)
    parent = tmp_path / "models"
    parent.mkdir()
    with pytest.raises(OSError, match="disk full"):
        finetune_transformer(tiny_model_dir, texts, tasks, parent / "out", epochs=1, probe_epochs=1)
    assert list(parent.iterdir()) == []


def test_missing_torch_is_reported(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    texts, tasks = _dataset(12)
    with pytest.raises(MissingDependencyError, match=r"manyheads\[transformers\]"):
        finetune_transformer(tiny_model_dir, texts, tasks, tmp_path / "out")
