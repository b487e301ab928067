"""A new trunk type is one class plus one registry line: a tiny type defined here, one
that keeps a file of its own in the bundle folder, trains heads, saves, loads, answers,
is refused by export, and has its file's path checked by the store like any built-in
type's."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import manyheads
from manyheads._io import write_hashed
from manyheads.errors import BundleError, ConfigError, ManyheadsError
from manyheads.trunks import TRUNK_TYPES, TrunkBase, check_spec, register_trunk_type
from manyheads.trunks.base import check_texts, l2_normalise
from manyheads.trunks.registry import (
    SpecFile,
    spec_files,
    spec_keeps_files,
    spec_name,
    trunk_type,
)

WORDS_FILE = ("words", ".json")


class WordListTrunk(TrunkBase):
    """Counts of a list of words (kept as a content-named file in the bundle) and of
    text length buckets."""

    type_name = "test-words"
    keeps_files = True
    hashed_files: ClassVar[tuple[tuple[str, str], ...]] = (WORDS_FILE,)

    def __init__(
        self,
        words: Sequence[str] = ("library", "tool", "font", "data"),
        *,
        buckets: int = 4,
        file: str | None = None,
        sha256: str | None = None,
        folder: Path | None = None,
    ) -> None:
        if not isinstance(buckets, int) or buckets < 1:
            raise ConfigError(
                f"test-words trunk buckets must be a positive integer, got {buckets!r}"
            )
        self.words, self.buckets = list(words), buckets
        self.file, self.sha256 = file, sha256
        self._name = "words"
        self._dim = len(self.words) + buckets
        blob = json.dumps(self.words).encode()
        self._fingerprint = hashlib.sha256(blob + bytes([buckets])).hexdigest()[:16]

    _not_settings = ("words", "folder")

    @classmethod
    def from_spec(cls, options: dict[str, Any], base: Path | None) -> TrunkBase:
        file = options.get("file")
        if file is None:
            return cls(buckets=options.get("buckets", 4))
        assert base is not None
        words = json.loads((base / file).read_text("utf-8"))
        return cls(words, buckets=options.get("buckets", 4), file=file, sha256=options["sha256"])

    @classmethod
    def spec_files(cls, options: dict[str, Any]) -> list[SpecFile]:
        file = options.get("file")
        sha = options.get("sha256")
        return [] if file is None else [SpecFile("the word list 'file'", file, sha, True)]

    @classmethod
    def spec_name(cls, options: dict[str, Any]) -> str | None:
        return "words"

    def save_files(self, folder: Path) -> None:
        self.file, self.sha256 = write_hashed(folder, json.dumps(self.words).encode(), WORDS_FILE)

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"type": self.type_name, "buckets": self.buckets}
        if self.file is not None:
            spec["file"], spec["sha256"] = self.file, self.sha256
        return spec

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        texts = check_texts(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            low = text.lower()
            out[i, : len(self.words)] = [low.count(w) for w in self.words]
            out[i, len(self.words) + min(len(text) // 40, self.buckets - 1)] = 1.0
        return l2_normalise(out)


@pytest.fixture
def registered() -> Iterator[type[TrunkBase]]:
    register_trunk_type(WordListTrunk)
    yield WordListTrunk
    del TRUNK_TYPES[WordListTrunk.type_name]


def test_a_trunk_type_of_ones_own_trains_saves_loads_and_answers(registered, debian_rows, tmp_path):
    rows = debian_rows[:200]
    texts = [r["text"] for r in rows]
    bundle = manyheads.Bundle(trunk=WordListTrunk(["library", "tool", "font", "python"]))
    bundle.fit_head("library", texts, [r["library"] for r in rows], "binary", seed=0)
    bundle.fit_head("role", texts, [r["role"] for r in rows], "multilabel", seed=0)
    want = bundle.predict(texts[:20])
    bundle.save(tmp_path / "b")
    spec = json.loads((tmp_path / "b" / "bundle.json").read_text())["trunk"]["spec"]
    assert spec["type"] == "test-words" and spec["file"].startswith("words-")
    assert (tmp_path / "b" / spec["file"]).is_file()
    assert spec_keeps_files(spec) and spec_name(spec) == "words"
    loaded = manyheads.Bundle.load(tmp_path / "b")
    assert isinstance(loaded.trunk, WordListTrunk)
    assert loaded.trunk.words == ["library", "tool", "font", "python"]
    assert loaded.predict(texts[:20]) == want
    # a second save keeps its file (the store's garbage collection knows its kind)
    loaded.fit_head("library", texts, [r["library"] for r in rows], "binary", seed=1)
    loaded.save(tmp_path / "b")
    assert (tmp_path / "b" / spec["file"]).is_file()
    with pytest.raises(ConfigError, match="export needs a trunk with one transformer part"):
        from manyheads.export.onnx import export_bundle

        export_bundle(loaded, tmp_path / "exported")


def test_its_settings_are_checked_and_its_files_kept_inside_the_bundle(registered, tmp_path):
    assert trunk_type("test-words") is WordListTrunk
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) 'colour'"):
        check_spec({"type": "test-words", "colour": "red"})
    with pytest.raises(ConfigError, match="buckets=1.5; expected an integer"):
        check_spec({"type": "test-words", "buckets": 1.5})
    spec = {"type": "test-words", "file": "../w.json", "sha256": "0" * 64}
    assert spec_files(spec) == [SpecFile("the word list 'file'", "../w.json", "0" * 64, True)]
    bundle = manyheads.Bundle(trunk=WordListTrunk())
    bundle.save(tmp_path / "b")
    doc = json.loads((tmp_path / "b" / "bundle.json").read_text())
    doc["trunk"]["spec"] = spec
    (tmp_path / "b" / "bundle.json").write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="the word list 'file' .* leads outside the bundle"):
        manyheads.Bundle.load(tmp_path / "b")


def test_a_type_name_is_taken_once_and_unknown_types_are_named(registered):
    class Other(WordListTrunk):
        type_name = "test-words"

    with pytest.raises(ConfigError, match="trunk type 'test-words' is taken by WordListTrunk"):
        register_trunk_type(Other)
    with pytest.raises(
        ManyheadsError, match="unknown trunk type 'nope'; known: minilm, .*test-words"
    ):
        manyheads.load_trunk({"type": "nope"})


def test_every_built_in_type_declares_itself():
    for name in TRUNK_TYPES:
        cls = trunk_type(name)
        assert cls.type_name == name
        assert cls.spec_settings(), name
