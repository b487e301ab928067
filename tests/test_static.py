"""The static trunk: encoding, static model folders (model2vec, sentence-transformers),
table files in bundles, and (heavy) the table distilled from MiniLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from manyheads import Bundle
from manyheads.errors import ConfigError, ManyheadsError
from manyheads.trunks import load_trunk, minilm_path, spec_name
from manyheads.trunks.static import StaticTrunk, load_static_file, write_static_file

TEXTS = [
    "A library for parsing XML files",
    "Bibliothèque de traitement d'images",
    "",
    "😀",
    "the the the",
]


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    return (minilm_path() / "tokenizer.json").read_text("utf-8")


@pytest.fixture(scope="module")
def table(tokenizer_json: str) -> np.ndarray:
    rows = json.loads(tokenizer_json)["model"]["vocab"]
    rng = np.random.default_rng(0)
    return rng.normal(size=(len(rows), 8)).astype(np.float16).astype(np.float32)


def test_a_text_is_the_mean_of_its_known_tokens(table: np.ndarray, tokenizer_json: str) -> None:
    trunk = StaticTrunk(table, tokenizer_json, source="test")
    X = trunk.encode(TEXTS)
    for i, text in enumerate(TEXTS):
        ids = [t for t in trunk.tokenizer.encode(text, add_special_tokens=False).ids if t != 100]
        if not ids:
            assert not X[i].any()  # nothing known: a zero vector
            continue
        mean = table[ids].mean(axis=0)
        np.testing.assert_allclose(X[i], mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)
    assert trunk.dim == 8 and trunk.name == "static:test"
    np.testing.assert_array_equal(trunk.encode(TEXTS, batch_size=2), X)


def test_the_fingerprint_covers_the_table_and_the_tokenizer(
    table: np.ndarray, tokenizer_json: str
) -> None:
    base = StaticTrunk(table, tokenizer_json).fingerprint
    other = table.copy()
    other[5, 0] += 1
    assert StaticTrunk(other, tokenizer_json).fingerprint != base
    doc = json.loads(tokenizer_json)
    doc["normalizer"]["lowercase"] = False
    assert StaticTrunk(table, json.dumps(doc)).fingerprint != base
    assert StaticTrunk(table, tokenizer_json).fingerprint == base


def test_model2vec_folders_load_and_encode_as_model2vec_does(
    tmp_path: Path, table: np.ndarray, tokenizer_json: str
) -> None:
    from model2vec import StaticModel
    from tokenizers import Tokenizer

    model = StaticModel(table, Tokenizer.from_str(tokenizer_json), normalize=True)
    model.save_pretrained(str(tmp_path / "m2v"))
    trunk = load_trunk(f"static:{tmp_path / 'm2v'}")
    assert isinstance(trunk, StaticTrunk) and trunk.name == "static:m2v"
    expected = model.encode(TEXTS, max_length=None)
    np.testing.assert_allclose(trunk.encode(TEXTS), expected, rtol=1e-5, atol=1e-6)


def test_sentence_transformers_static_folders_load(
    tmp_path: Path, table: np.ndarray, tokenizer_json: str
) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer

    module = StaticEmbedding(Tokenizer.from_str(tokenizer_json), embedding_weights=table)
    st = SentenceTransformer(modules=[module], device="cpu")
    st.save(str(tmp_path / "st"))
    trunk = load_trunk(f"static:{tmp_path / 'st'}")
    texts = [t for t in TEXTS if t and t != "😀"]  # its EmbeddingBag keeps [UNK]
    with torch.inference_mode():
        expected = st.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(trunk.encode(texts), expected, rtol=1e-4, atol=1e-5)


def test_a_bundle_keeps_its_table_and_checks_it(
    tmp_path: Path, table: np.ndarray, tokenizer_json: str
) -> None:
    trunk = StaticTrunk(table, tokenizer_json)
    texts = [f"{w} {i}" for i in range(30) for w in ("database server", "image editor")]
    bundle = Bundle(trunk=trunk, cache=None)
    bundle.fit_head("what", texts, [t.split()[1] for t in texts])
    bundle.save(tmp_path / "b")
    files = sorted(p.name for p in (tmp_path / "b").glob("static-*.safetensors"))
    assert len(files) == 1
    spec = json.loads((tmp_path / "b" / "bundle.json").read_text())["trunk"]["spec"]
    assert spec["type"] == "static" and spec["file"] == files[0] and spec_name(spec) == "static"
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.trunk_fingerprint == bundle.trunk_fingerprint
    assert loaded.predict(["database"]) == bundle.predict(["database"])
    # the file is the one bundle.json names: a changed byte is refused, in one line
    path = tmp_path / "b" / files[0]
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(ManyheadsError, match="does not match the sha256 in bundle.json"):
        Bundle.load(tmp_path / "b").predict(["x"])
    path.unlink()
    with pytest.raises(ManyheadsError, match="the static trunk's table .* is missing"):
        Bundle.load(tmp_path / "b").predict(["x"])


def test_one_line_errors(tmp_path: Path, table: np.ndarray, tokenizer_json: str) -> None:
    with pytest.raises(ConfigError, match=r"a static table must be a 2-d array, got shape \(3,\)"):
        StaticTrunk(np.ones(3), tokenizer_json)
    with pytest.raises(ConfigError, match="the static table has 10 rows but its tokenizer has"):
        StaticTrunk(table[:10], tokenizer_json)
    with pytest.raises(ManyheadsError, match="cannot read the tokenizer of the static trunk"):
        StaticTrunk(table, "{not json")
    with pytest.raises(ManyheadsError, match="static:/no/such: no such folder"):
        load_trunk("static:/no/such")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ManyheadsError, match="cannot read the static table"):
        load_static_file(bad)
    from safetensors.numpy import save_file

    save_file({"other": np.ones((2, 2), dtype=np.float32)}, str(bad))
    with pytest.raises(ManyheadsError, match="is not a static table file"):
        load_static_file(bad)
    with pytest.raises(ConfigError, match="unknown setting"):
        load_trunk({"type": "static", "colour": 1})


def test_table_files_round_trip(tmp_path: Path, table: np.ndarray, tokenizer_json: str) -> None:
    sha = write_static_file(tmp_path / "t.safetensors", table, tokenizer_json, {"source": "x"})
    got, tok, meta = load_static_file(tmp_path / "t.safetensors")
    np.testing.assert_array_equal(got.astype(np.float32), table)
    assert tok == tokenizer_json and meta == {"source": "x"} and len(sha) == 64


@pytest.mark.heavy
def test_static_is_distilled_once_deterministically_and_encodes_without_torch(
    tmp_path: Path,
) -> None:
    """``static`` distils from the MiniLM that ships into the cache folder; a second
    distillation gives the same table; a saved bundle predicts without torch."""
    env = {**os.environ, "MANYHEADS_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    script = (
        "from manyheads import Bundle\n"
        "b = Bundle(trunk='fast', cache=None)\n"
        "texts = [f'{w} {i}' for i in range(30) for w in ('database server', 'image editor')]\n"
        "b.fit_head('what', texts, [t.split()[1] for t in texts], part_weights='auto')\n"
        "b.save(r'{out}')\n"
        "print(b.trunk.parts[0].fingerprint)\n"
    )
    first = subprocess.run(
        [sys.executable, "-c", script.replace("{out}", str(tmp_path / "b1"))],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.split()[-1]  # fmt: skip
    cached = list((tmp_path / "cache" / "static").glob("*.safetensors"))
    assert len(cached) == 1
    cached[0].unlink()
    second = subprocess.run(
        [sys.executable, "-c", script.replace("{out}", str(tmp_path / "b2"))],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.split()[-1]  # fmt: skip
    assert first == second
    check = (
        "import sys\n"
        "from manyheads import Bundle\n"
        f"b = Bundle.load(r'{tmp_path / 'b1'}')\n"
        "print(b.predict(['image viewer'])[0]['what']['label'])\n"
        "print(b.trunk_name, 'torch' in sys.modules, 'onnxruntime' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["editor", "fast", "False", "False"]
