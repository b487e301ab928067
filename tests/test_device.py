"""Where a trunk runs: device names checked in one line, and the GPU code path (batches
within a token budget, tokenising overlapped, pooling / joining windows / the heads'
first layer on the device) run on the CPU, where CI runs it. Tests that need a GPU
skip where torch sees none."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import free_port

from manyheads import Bundle, ConfigError, TransformerTrunk
from manyheads.cli import main
from manyheads.trunks import CompositeTrunk, load_trunk
from manyheads.trunks import device as device_module
from manyheads.trunks.device import CPU, Device, overlapped, resolve_device
from manyheads.trunks.static import StaticTrunk
from manyheads.trunks.transformer import minilm_path
from manyheads.trunks.windows import length_batches

torch = pytest.importorskip("torch")
HAS_GPU = bool(torch.cuda.is_available())
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="torch sees no CUDA GPU on this machine")
without_gpu = pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")

TEXTS = [
    "python library for xml files",
    "Ein Werkzeug für Dateien",
    "x",
    "shared library for image decoding " * 3,
    "network tools and a daemon",
]
LONG = "documentation of the command line tool " * 40  # several windows at max_length 16


@pytest.fixture(scope="module")
def static() -> StaticTrunk:
    """A static trunk on MiniLM's tokenizer with a small random table (none distilled)."""
    tokenizer_json = (minilm_path() / "tokenizer.json").read_text("utf-8")
    rows = len(json.loads(tokenizer_json)["model"]["vocab"])
    table = np.random.default_rng(0).normal(size=(rows, 8)).astype(np.float32)
    return StaticTrunk(table, tokenizer_json, source="test")


# -- naming a device ---------------------------------------------------------------


def test_cpu_none_and_a_device_object_resolve_without_torch_being_asked():
    assert resolve_device("cpu") == resolve_device(None) == resolve_device(" CPU ") == CPU
    gpu = Device("cuda", 3)
    assert resolve_device(gpu) is gpu and gpu.torch_name == "cuda:3" and gpu.accelerated


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cuda:-1", "", 3, "mps"])
def test_a_device_name_that_is_none_of_the_choices_is_refused_in_one_line(bad: Any):
    with pytest.raises(ConfigError) as info:
        resolve_device(bad)
    assert str(info.value) == f"device must be one of cpu, cuda, cuda:N or auto, got {bad!r}"


@without_gpu
def test_auto_is_the_cpu_and_cuda_is_refused_where_torch_sees_no_gpu():
    assert resolve_device("auto") == CPU
    with pytest.raises(ConfigError, match=r"^device cuda:1: torch .* sees no CUDA GPU"):
        resolve_device("cuda:1")


def test_auto_does_not_import_torch_on_a_machine_without_a_gpu_driver(monkeypatch):
    monkeypatch.setattr(device_module, "_DRIVER_SIGNS", ("/nonexistent/nvidia",))
    monkeypatch.setattr(device_module, "_cuda_count", lambda: pytest.fail("torch was asked"))
    assert resolve_device("auto") == CPU


def test_a_gpu_index_past_the_gpus_torch_sees_is_refused(monkeypatch):
    monkeypatch.setattr(device_module, "_cuda_count", lambda: (2, "2.13.0+cu130"))
    assert resolve_device("cuda:1") == Device("cuda", 1)
    with pytest.raises(
        ConfigError, match=r"^device cuda:2: torch sees 2 GPU\(s\), numbered 0 to 1$"
    ):
        resolve_device("cuda:2")


@without_gpu
def test_cli_device_cuda_without_a_gpu_is_one_line_naming_the_flag(capsys):
    assert main(["predict", "hello", "--device", "cuda"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("manyheads: error: --device cuda: torch ") and "\n" not in err
    assert main(["predict", "hello", "--device", "tpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "manyheads: error: --device must be one of cpu, cuda, cuda:N or auto, got 'tpu'"


def test_bundle_and_load_take_a_device_and_refuse_a_bad_one(tmp_path: Path):
    bundle = Bundle("hashing", cache=None, device="cpu")
    assert bundle.device == CPU and bundle.trunk.device == CPU
    with pytest.raises(ConfigError, match="device must be one of"):
        Bundle("hashing", cache=None, device="gpu")
    loaded = Bundle.load("content", device="cpu")
    assert loaded.device == CPU and loaded.trunk.device == CPU
    with pytest.raises(ConfigError, match="device must be one of"):
        Bundle.load("content", device="gpu:0")


def test_a_trunk_that_runs_only_on_the_cpu_stays_there_and_a_composite_asks_each_part(static):
    gpu = Device("cuda", 0)  # not resolved: no trunk here touches a GPU
    hashing = load_trunk("hashing")
    assert hashing.runs_on == ("cpu",) and hashing.on_device(gpu) is hashing
    moved = static.on_device(gpu)
    assert moved is not static and moved.device == gpu and static.device == CPU
    assert moved.fingerprint == static.fingerprint
    composite = CompositeTrunk([static, hashing])
    assert composite.on_device(CPU) is composite
    on_gpu = composite.on_device(gpu)
    assert on_gpu.device == gpu and [p.device for p in on_gpu.parts] == [gpu, CPU]
    assert on_gpu.fingerprint == composite.fingerprint


# -- batches and overlap -------------------------------------------------------------


@pytest.mark.parametrize(("rows", "tokens"), [(4, 10**9), (100, 40), (3, 25), (1, 1)])
def test_batches_cover_every_row_once_within_rows_and_token_budget(rows: int, tokens: int):
    lengths = np.random.default_rng(0).integers(1, 30, size=97)
    cuts = length_batches(lengths, max_tokens=tokens, max_rows=rows)
    covered = np.concatenate(cuts)
    np.testing.assert_array_equal(np.sort(covered), np.arange(len(lengths)))
    for cut in cuts:
        n = len(cut)
        assert 1 <= n <= rows
        assert n == 1 or n * lengths[cut].max() <= tokens


def test_overlapped_keeps_order_and_prepares_the_next_item_while_the_caller_works():
    ready = {i: threading.Event() for i in range(4)}

    def prepare(i: int) -> int:
        ready[i].set()
        return i * 10

    got = []
    for value in overlapped(range(4), prepare):
        i = value // 10
        if i < 3:  # the next item is prepared while this one is still in the caller's hands
            assert ready[i + 1].wait(5)
        got.append(value)
    assert got == [0, 10, 20, 30]


# -- the transformer's device path, on the CPU ---------------------------------------------


def test_the_device_pipeline_matches_window_by_window_encoding(tiny_model_dir, monkeypatch):
    from manyheads.trunks import transformer

    monkeypatch.setattr(transformer, "CHUNK_BATCHES", 1)  # chunks of two texts: overlap runs
    trunk = TransformerTrunk(tiny_model_dir, max_length=16, batch_size=2)
    texts = [*TEXTS, LONG, *TEXTS[::-1]]
    got = trunk.encode(texts)
    want = trunk.encoding(texts).finish()
    assert got.shape == (len(texts), trunk.dim)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    W = np.random.default_rng(1).normal(size=(trunk.dim, 7)).astype(np.float32)
    b = np.arange(7, dtype=np.float32)
    np.testing.assert_allclose(trunk.encode_projected(texts, W, b), got @ W + b, atol=1e-4)
    assert trunk.encode([]).shape == (0, trunk.dim)


def test_half_precision_agrees_with_float32_and_is_cached_apart(tiny_model_dir):
    fp32 = TransformerTrunk(tiny_model_dir, max_length=16)
    bf16 = TransformerTrunk(tiny_model_dir, max_length=16, precision="bf16")
    assert fp32.computes_in == "fp32" and bf16.computes_in == "bf16"
    assert bf16.fingerprint == fp32.fingerprint
    assert bf16.cache_key == f"{fp32.fingerprint}-bf16" and fp32.cache_key == fp32.fingerprint
    a, b = fp32.encode([*TEXTS, LONG]), bf16.encode([*TEXTS, LONG])
    assert float(np.min(np.sum(a * b, axis=1))) > 0.99  # cosine of each text's two vectors
    with pytest.raises(ConfigError, match="precision must be one of auto, fp32, bf16, fp16"):
        TransformerTrunk(tiny_model_dir, precision="half")


def test_device_and_precision_are_not_stored_in_the_spec(tiny_model_dir):
    trunk = TransformerTrunk(tiny_model_dir, precision="bf16", device="cpu")
    assert "device" not in trunk.spec() and "precision" not in trunk.spec()
    with pytest.raises(ConfigError, match="unknown setting"):
        load_trunk({**trunk.spec(), "device": "cuda"})


def test_answers_through_the_heads_first_layer_on_the_device_equal_the_cpu_ones(
    tiny_model_dir, monkeypatch
):
    rng = np.random.default_rng(0)
    words = ["python", "library", "image", "network", "daemon", "tools", "files", "xml"]
    texts = [" ".join(rng.choice(words, size=6)) for _ in range(60)]
    labels = ["a" if "python" in t else "b" for t in texts]
    bundle = Bundle(TransformerTrunk(tiny_model_dir, max_length=16), cache=None, device="cpu")
    bundle.fit_head("topic", texts, labels, C=1.0)
    bundle.fit_head(
        "tags", texts, [["x"] if "xml" in t else ["y"] for t in texts], kind="multilabel", C=1.0
    )
    want = bundle.predict_proba(texts)
    # as on a GPU: the trunk computes the fused first layer itself
    monkeypatch.setattr(TransformerTrunk, "projects", property(lambda self: True))
    got = bundle.predict_proba(texts)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5)


def test_the_static_trunk_as_an_embedding_bag_equals_its_sparse_product(static):
    texts = [*TEXTS, "", "zzqqxx unknownword", LONG]
    np.testing.assert_allclose(static.bag_encode(texts, 3, CPU), static.encode(texts), atol=1e-6)


def test_fine_tuning_refuses_a_device_it_cannot_use():
    from manyheads.train.lpft import Finetuning

    assert Finetuning(device="cpu").device == "cpu"
    with pytest.raises(ConfigError, match="device must be one of"):
        Finetuning(device="gpu")


# -- where the jobs and the service put a GPU ------------------------------------------


def test_ray_actors_ask_for_the_clusters_gpus_only_when_the_device_allows():
    from manyheads.label.ray_engine import _gpus_for

    assert _gpus_for("cpu", 4) == 0
    assert _gpus_for("auto", 0) == 0 and _gpus_for("auto", 2) == 2
    assert _gpus_for("cuda", 1) == 1
    with pytest.raises(ConfigError, match="^device cuda: the Ray cluster has no GPU$"):
        _gpus_for("cuda", 0)
    with pytest.raises(ConfigError, match="device must be one of"):
        _gpus_for("tpu", 2)
    with pytest.raises(ConfigError, match="device must be one of"):
        _gpus_for("cuda:x", 2)


def test_the_service_sends_bigger_passes_to_a_gpu():
    from manyheads.serve import ServeConfig

    config = ServeConfig(max_batch=64, max_pass_chars=100_000, max_pass_tokens=512)
    assert config.pass_limits(False) == (64, 100_000, 512)
    assert config.pass_limits(True) == (1024, 1_600_000, 8192)
    with pytest.raises(ConfigError, match="gpu_batch"):
        ServeConfig(gpu_batch=0)


def test_labelling_on_the_cpu_keeps_its_batch_size_and_checks_the_gpu_one(tmp_path):
    from manyheads.label import LabelSettings
    from manyheads.label.rows import Labeller

    bundle = Bundle.load("content", cache=None, device="cpu")
    names = tuple(bundle.heads)
    assert Labeller.of(bundle, names, LabelSettings(batch_size=32)).batch_size == 32
    with pytest.raises(ConfigError, match="gpu_batch_size must be a positive integer"):
        Labeller.of(bundle, names, LabelSettings(gpu_batch_size=0))


# -- on a GPU --------------------------------------------------------------------------------


@needs_gpu
def test_on_a_gpu_the_answers_agree_with_the_cpu_float32_ones(tiny_model_dir, static):
    cpu = TransformerTrunk(tiny_model_dir, max_length=16)
    gpu = cpu.on_device("cuda")
    assert gpu.projects and gpu.computes_in in ("bf16", "fp16")
    texts = [*TEXTS, LONG] * 20
    a, b = cpu.encode(texts), gpu.encode(texts)
    assert float(np.min(np.sum(a * b, axis=1))) > 0.99
    np.testing.assert_allclose(
        static.on_device("cuda").encode(texts), static.encode(texts), atol=1e-5
    )


@needs_gpu
def test_a_bundle_on_a_gpu_answers_like_on_the_cpu():
    bundle = Bundle.load("content", device="cuda")
    cpu = Bundle.load("content", device="cpu")
    assert bundle.predict(TEXTS, scores="none") == cpu.predict(TEXTS, scores="none")


def test_serve_and_label_refuse_bad_device_options_in_one_line(capsys, tmp_path):
    port = free_port()
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"text": "hello"}\n', encoding="utf-8")
    cases = [
        (["serve", "--device", "tpu", "--port", str(port)], "--device must be one of"),
        (["serve", "--gpu-batch", "0", "--port", str(port)], "--gpu-batch must be a positive integer, got 0"),
        (["label", str(rows), "-o", str(tmp_path / "out.jsonl"), "--gpu-batch-size", "0"],
         "--gpu-batch-size must be a positive integer, got 0"),
    ]  # fmt: skip
    for argv, said in cases:
        assert main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("manyheads: error: ") and said in err and "\n" not in err
    assert not (tmp_path / "out.jsonl").exists()


class _GpuOnTheCpu(Device):
    """A device that takes the GPU branches (accelerated) while torch computes on the
    CPU: the GPU path's batching, chunking and projection run here."""

    @property
    def torch_name(self) -> str:
        return "cpu"


def test_the_gpu_branches_run_end_to_end_on_a_stand_in_device(tiny_model_dir, monkeypatch):
    from manyheads.trunks import transformer

    monkeypatch.setattr(transformer, "token_budget", lambda torch, device, per_token: 40)
    monkeypatch.setattr(transformer, "GPU_ROWS", 3)
    monkeypatch.setattr(TransformerTrunk, "_to_device", lambda self, tensor: tensor)
    cpu = TransformerTrunk(tiny_model_dir, max_length=16)
    gpu = cpu.on_device(_GpuOnTheCpu("cuda", 0))
    gpu.precision = "fp32"  # a stand-in has no half precision to ask torch about
    assert gpu.projects and gpu.device.accelerated and not cpu.projects
    texts = [*TEXTS, LONG, *TEXTS]
    assert gpu._batch_limits(None) == (3, 40)  # GPU rows, the memory's token budget
    np.testing.assert_allclose(gpu.encode(texts), cpu.encode(texts), atol=1e-5)
    # a bundle on it answers through the heads' first layer computed by the trunk
    rng = np.random.default_rng(0)
    words = ["python", "library", "image", "network", "daemon", "tools"]
    train = [" ".join(rng.choice(words, size=5)) for _ in range(40)]
    labels = ["a" if "python" in t else "b" for t in train]
    on_cpu = Bundle(cpu, cache=None, device="cpu")
    on_cpu.fit_head("topic", train, labels, C=1.0)
    on_gpu = Bundle(gpu, cache=None, device=gpu.device)
    on_gpu.import_head("topic", *on_cpu.export_head("topic"))
    got, want = on_gpu.predict_proba(texts), on_cpu.predict_proba(texts)
    np.testing.assert_allclose(got["topic"], want["topic"], atol=1e-5)


def test_the_static_trunks_gpu_branch_runs_on_a_stand_in_device(static):
    moved = static.on_device(_GpuOnTheCpu("cuda", 0))
    texts = [*TEXTS, "", LONG]
    np.testing.assert_allclose(moved.encode(texts), static.encode(texts), atol=1e-6)
