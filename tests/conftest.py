"""Shared fixtures: a tiny random transformer folder, real Debian sample rows, counting
trunks, servers, a headless browser."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import manyheads
from manyheads.trunks import HashingTrunk

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TRAIN_FILE = EXAMPLES / "debian-en-train.jsonl.gz"
TEST_FILE = EXAMPLES / "debian-en-test.jsonl.gz"


def _package_models() -> dict[str, str]:
    import hashlib

    root = Path(manyheads.__file__).parent / "models"
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="session", autouse=True)
def _builtin_bundles_unchanged() -> Iterator[None]:
    """The package's built-in bundles are read-only: after the whole session, every
    file under manyheads/models/ is as it was (same names, same SHA-256)."""
    before = _package_models()
    yield
    after = _package_models()
    assert after == before, sorted(set(before.items()) ^ set(after.items()))[:5]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own default cache folder; nothing touches the user's."""
    monkeypatch.setenv("MANYHEADS_CACHE_DIR", str(tmp_path / "default-cache"))


def _read_rows(path: Path, n: int | None = None) -> list[dict[str, Any]]:
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if n is not None and len(rows) >= n:
                break
    return rows


@pytest.fixture(scope="session")
def debian_rows() -> list[dict[str, Any]]:
    """1,500 real English Debian package descriptions with section/role/interface labels."""
    return _read_rows(TRAIN_FILE, 1500)


@pytest.fixture(scope="session")
def debian_test_rows() -> list[dict[str, Any]]:
    return _read_rows(TEST_FILE, 400)


class CountingTrunk:
    """Wraps a trunk and counts calls to ``encode`` and texts encoded."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = 0
        self.texts = 0

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    @property
    def fingerprint(self) -> str:
        return str(self.inner.fingerprint)

    def spec(self) -> dict[str, Any]:
        return dict(self.inner.spec())

    def encode(self, texts: Sequence[str], **kwargs: Any) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return np.asarray(self.inner.encode(texts, **kwargs))


def assert_same_answers(got: list[dict[str, Any]], want: list[dict[str, Any]], atol: float) -> None:
    """Answers in ``Bundle.predict``'s shape (or parsed from JSON): the same heads, labels
    and score keys, every score within ``atol``."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for name, answer in w.items():
            assert g[name].get("label") == answer.get("label"), name
            assert g[name].get("labels") == answer.get("labels"), name
            assert g[name]["scores"].keys() == answer["scores"].keys(), name
            for label, score in answer["scores"].items():
                assert g[name]["scores"][label] == pytest.approx(score, abs=atol), (name, label)


@pytest.fixture
def counting_trunk() -> CountingTrunk:
    return CountingTrunk(HashingTrunk(dim=256))


@pytest.fixture
def cache(tmp_path: Path) -> manyheads.EmbeddingCache:
    return manyheads.EmbeddingCache(tmp_path / "cache" / "embeddings.sqlite")


_WORDS = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "with",
    "on",
    "library",
    "python",
    "package",
    "data",
    "file",
    "files",
    "server",
    "client",
    "tool",
    "tools",
    "program",
    "programs",
    "development",
    "headers",
    "documentation",
    "game",
    "games",
    "network",
    "web",
    "xml",
    "http",
    "font",
    "fonts",
    "image",
    "images",
    "audio",
    "video",
    "text",
    "editor",
    "shell",
    "command",
    "line",
    "perl",
    "ruby",
    "java",
    "rust",
    "go",
    "c",
    "module",
    "modules",
    "plugin",
    "plugins",
    "support",
    "this",
    "that",
    "it",
    "provides",
    "contains",
    "utility",
    "utilities",
    "system",
    "kernel",
    "driver",
    "drivers",
    "test",
    "tests",
    "from",
    "by",
    "as",
    "an",
    "be",
    "are",
]


def _build_tiny_model(folder: Path, *, sentence_transformers: bool) -> Path:
    """A randomly initialised 2-layer BERT with a real WordPiece tokenizer, saved offline."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = sorted(set("".join(_WORDS)) | set("0123456789.,-/()"))
    vocab_list = specials + _WORDS + chars + [f"##{c}" for c in chars]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(vocab_list))}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).eval().save_pretrained(str(folder), safe_serialization=True)
    if sentence_transformers:
        (folder / "modules.json").write_text(
            json.dumps(
                [
                    {
                        "idx": 0,
                        "name": "0",
                        "path": "",
                        "type": "sentence_transformers.models.Transformer",
                    },
                    {
                        "idx": 1,
                        "name": "1",
                        "path": "1_Pooling",
                        "type": "sentence_transformers.models.Pooling",
                    },
                    {
                        "idx": 2,
                        "name": "2",
                        "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize",
                    },
                ]
            )
        )
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 16}))
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(
            json.dumps({"word_embedding_dimension": 32, "pooling_mode_cls_token": True})
        )
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain Hugging Face folder (mean pooling, 64 positions)."""
    pytest.importorskip("torch")
    return _build_tiny_model(tmp_path_factory.mktemp("tiny-hf"), sentence_transformers=False)


@pytest.fixture(scope="session")
def tiny_st_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers folder: CLS pooling, max_seq_length 16."""
    pytest.importorskip("torch")
    return _build_tiny_model(tmp_path_factory.mktemp("tiny-st"), sentence_transformers=True)


@pytest.fixture
def tiny_model_copy(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny model a test may modify."""
    dst = tmp_path / "tiny-copy"
    shutil.copytree(tiny_model_dir, dst)
    return dst


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    return path


def in_forked_child(fn: Callable[[], Any], timeout: float = 120) -> Any:
    """What ``fn`` returns when run in a process forked from this one (a child that
    waited on its parent's threads would never answer: the wait ends in ``timeout``)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=lambda: queue.put(fn()))
    child.start()
    try:
        return queue.get(timeout=timeout)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()


@dataclass
class Server:
    """A real ``manyheads serve`` process."""

    url: str
    log: Path
    proc: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    """``start_server(bundle_folder, *cli_options)``: a uvicorn server in a subprocess,
    ready; stopped at the end of the session."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    started: list[tuple[subprocess.Popen[bytes], Any]] = []

    def start(folder: Path, *options: str) -> Server:
        port = free_port()
        work = tmp_path_factory.mktemp("server")
        log = work / "server.log"
        fh = open(log, "wb")  # noqa: SIM115 (closed at the end of the session)
        cmd = [sys.executable, "-m", "manyheads.cli", "serve", "-b", str(folder)]
        cmd += ["--port", str(port), "--cache-dir", str(work / "cache"), *options]
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        started.append((proc, fh))
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    return Server(url, log, proc)
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"the server exited: {log.read_text()}")
            time.sleep(0.2)
        proc.kill()
        pytest.fail(f"the server did not become ready: {log.read_text()}")

    yield start
    for proc, fh in started:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        fh.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless chromium driven by Selenium (the playground and report tests);
    skipped where it is not installed, unless ``MANYHEADS_REQUIRE_BROWSER=1``."""
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not (chromium and chromedriver):
        if os.environ.get("MANYHEADS_REQUIRE_BROWSER") == "1":
            pytest.fail(
                "chromium and chromedriver are needed (apt install chromium chromium-driver)"
            )
        pytest.skip("chromium / chromedriver not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(chromedriver), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
