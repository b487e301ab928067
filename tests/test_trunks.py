from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import manyheads
from manyheads import ConfigError, HashingTrunk, ManyheadsError, TransformerTrunk, load_trunk
from manyheads.trunks import Trunk


def test_hashing_trunk_shape_norm_and_determinism():
    trunk = HashingTrunk(dim=512)
    texts = ["a python library", "Ein Werkzeug für Dateien", "x"]
    a = trunk.encode(texts)
    b = HashingTrunk(dim=512).encode(texts)
    assert a.shape == (3, 512) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(a, b)
    assert isinstance(trunk, Trunk)


def test_hashing_similar_texts_are_closer():
    v = HashingTrunk().encode(["python library for xml", "python library for json", "Schriftart"])
    assert v[0] @ v[1] > v[0] @ v[2]


def test_hashing_fingerprint_follows_config():
    assert HashingTrunk(dim=256).fingerprint == HashingTrunk(dim=256).fingerprint
    assert HashingTrunk(dim=256).fingerprint != HashingTrunk(dim=512).fingerprint
    assert HashingTrunk(ngram_range=(1, 3)).fingerprint != HashingTrunk().fingerprint


def test_hashing_spec_round_trip():
    trunk = HashingTrunk(dim=300, ngram_range=(2, 3))
    again = load_trunk(json.loads(json.dumps(trunk.spec())))
    assert again.fingerprint == trunk.fingerprint


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dim": 4}, r"dim must be an integer in \[8, 4194304\], got 4"),
        ({"analyzer": "byte"}, "analyzer must be one of"),
        ({"ngram_range": (3, 2)}, r"ngram_range must satisfy 1 <= lo <= hi <= 10, got \(3, 2\)"),
    ],
)
def test_hashing_bad_parameters(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        HashingTrunk(**kwargs)


def test_encode_refuses_non_strings():
    with pytest.raises(manyheads.DataError, match="text #1 is int, expected str"):
        HashingTrunk().encode(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(manyheads.DataError, match="not a single string"):
        HashingTrunk().encode("just one string")


def test_unknown_trunk_name():
    with pytest.raises(ManyheadsError, match="unknown trunk 'nope': give one of minilm, hashing"):
        load_trunk("nope")


def test_unknown_trunk_spec_type():
    with pytest.raises(ManyheadsError, match="unknown trunk type 'weird'"):
        load_trunk({"type": "weird"})


# -- transformer folders ---------------------------------------------------


def test_transformer_trunk_encodes_normalised(tiny_model_dir: Path):
    trunk = TransformerTrunk(tiny_model_dir)
    out = trunk.encode(["a python library", "fonts for the web", ""])
    assert out.shape == (3, 32) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    assert trunk.pooling == "mean" and trunk.max_length == 64


def test_transformer_batching_and_sorting_do_not_change_vectors(tiny_model_dir: Path):
    trunk = TransformerTrunk(tiny_model_dir)
    texts = ["short", "a much longer text about python library modules and data files", "mid text"]
    together = trunk.encode(texts, batch_size=8)
    alone = np.stack([trunk.encode([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_sentence_transformers_folder_settings_are_honoured(tiny_st_dir: Path):
    trunk = TransformerTrunk(tiny_st_dir)
    assert trunk.pooling == "cls"
    assert trunk.max_length == 16


def test_long_texts_are_windowed_not_cut(tiny_st_dir: Path):
    trunk = TransformerTrunk(tiny_st_dir)
    head = "python library for xml data " * 2
    long_a = head + "fonts images audio video " * 20
    long_b = head + "kernel driver network server " * 20
    windows, owners, _ = trunk._windows([long_a])
    assert len(windows) > 1 and all(len(w) <= 16 for w in windows)
    assert set(owners.tolist()) == {0}
    # every window keeps the special tokens around its piece
    assert all(w[0] == windows[0][0] and w[-1] == windows[0][-1] for w in windows)
    va, vb = trunk.encode([long_a, long_b])
    # texts that only differ after the first window still get different vectors
    assert not np.allclose(va, vb, atol=1e-3)


def _read_in_steps(encoding, budget: int) -> list[int]:
    """Every step of ``encoding`` at ``budget``: the work each did."""
    done = []
    while not encoding.done:
        done.append(encoding.step(budget))
    return done


def test_texts_read_a_few_windows_at_a_time_get_the_vectors_of_encode(tiny_st_dir: Path):
    trunk = TransformerTrunk(tiny_st_dir)  # 16-token windows
    long = "python library for xml data " * 2 + "fonts images audio video " * 40
    texts = [long, "a short text", "kernel driver network server " * 30, ""]
    assert trunk.work_unit == "tokens"
    work = trunk.work(texts)
    windows, owners, _ = trunk._windows(texts)
    assert work == [
        sum(len(w) for w, o in zip(windows, owners, strict=True) if o == i) for i in range(4)
    ]
    encoding = trunk.encoding(texts)
    assert encoding.divisible and encoding.work == encoding.left == sum(work)
    steps = _read_in_steps(encoding, 40)  # two 16-token windows a step
    assert len(steps) > 10 and max(steps) <= 40
    assert sum(steps) == encoding.work and encoding.left == 0
    np.testing.assert_allclose(encoding.result(), trunk.encode(texts), atol=1e-6)
    one = trunk.encoding(["a short text"])  # one window: one step
    assert not one.divisible and len(_read_in_steps(one, 1)) == 1


def test_a_plain_trunk_reads_a_batch_in_one_step_and_a_composite_its_parts_in_turn(
    tiny_st_dir: Path,
):
    from manyheads.trunks import CompositeTrunk

    long = "fonts images audio video " * 40
    texts = [long, "a python library"]
    hashing = HashingTrunk(dim=64)
    assert hashing.work_unit == "characters" and hashing.work(texts) == [len(long), 16]
    encoding = hashing.encoding(texts)
    assert not encoding.divisible
    assert _read_in_steps(encoding, 10) == [len(long) + 16]
    np.testing.assert_array_equal(encoding.result().toarray(), hashing.encode(texts))

    transformer = TransformerTrunk(tiny_st_dir)
    both = CompositeTrunk([hashing, transformer], [1.0, 2.0])
    assert both.work_unit == "tokens" and both.work(texts) == transformer.work(texts)
    encoding = both.encoding(texts)
    assert encoding.divisible and len(_read_in_steps(encoding, 16)) > 10
    want = both.encode_features(texts).toarray()
    np.testing.assert_allclose(encoding.result().toarray(), want, atol=1e-6)
    cheap = CompositeTrunk([hashing, HashingTrunk(dim=32)])
    assert cheap.work(texts) == [len(long), 16] and not cheap.encoding(texts).divisible


def test_an_encoding_not_done_has_no_vectors(tiny_st_dir: Path):
    encoding = TransformerTrunk(tiny_st_dir).encoding(["fonts images audio video " * 10])
    encoding.step(16)
    with pytest.raises(ManyheadsError, match=r"the encoding is not done: \d+ of \d+ work left"):
        encoding.result()
    with pytest.raises(ManyheadsError, match="the encoding is not done: 16 of 16 work left"):
        HashingTrunk(dim=8).encoding(["x" * 16]).result()


def test_transformer_fingerprint_changes_with_weights(tiny_model_copy: Path):
    from safetensors.numpy import load_file, save_file

    before = TransformerTrunk(tiny_model_copy).fingerprint
    assert TransformerTrunk(tiny_model_copy).fingerprint == before
    weights = tiny_model_copy / "model.safetensors"
    tensors = load_file(str(weights))
    key = sorted(tensors)[0]
    tensors[key] = tensors[key] + 1.0
    save_file(tensors, str(weights))
    assert TransformerTrunk(tiny_model_copy).fingerprint != before


def test_transformer_spec_round_trip(tiny_model_dir: Path):
    trunk = TransformerTrunk(tiny_model_dir)
    assert load_trunk(trunk.spec()).fingerprint == trunk.fingerprint
    assert load_trunk(str(tiny_model_dir)).fingerprint == trunk.fingerprint


def test_transformer_folder_errors(tmp_path: Path, tiny_model_copy: Path):
    with pytest.raises(ManyheadsError, match="does not exist"):
        TransformerTrunk(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManyheadsError, match="has no config.json"):
        TransformerTrunk(tmp_path / "empty")
    (tiny_model_copy / "model.safetensors").rename(tiny_model_copy / "pytorch_model.bin")
    with pytest.raises(ManyheadsError, match=r"has no \*\.safetensors weights"):
        TransformerTrunk(tiny_model_copy)


def test_transformer_bad_max_length(tiny_model_dir: Path):
    with pytest.raises(ConfigError, match=r"max_length must be an integer in \[8, 64\], got 500"):
        TransformerTrunk(tiny_model_dir, max_length=500)
    with pytest.raises(ConfigError, match="pooling must be one of"):
        TransformerTrunk(tiny_model_dir, pooling="median")


@pytest.mark.minilm
def test_minilm_default_trunk():
    trunk = load_trunk("minilm")
    assert trunk.dim == 384 and trunk.name == "minilm"
    assert trunk.spec()["type"] == "minilm"  # stored by name: bundles move between machines
    v = trunk.encode(
        ["A Python library for parsing XML", "Python module to read XML files", "TrueType fonts"]
    )
    assert v.shape == (3, 384)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_texts_are_judged_once_on_their_way_through(monkeypatch):
    import manyheads.trunks.base as base

    seen: list[str] = []
    judge = base._judge_texts
    monkeypatch.setattr(base, "_judge_texts", lambda texts: seen.extend(texts) or judge(texts))
    bundle = manyheads.Bundle(trunk="hashing+ngram", cache=None)
    texts = ["a library for XML", "a tool for fonts", "a game"] * 4
    bundle.fit_head("kind", texts, ["lib", "tool", "game"] * 4, val_fraction=0.25)
    seen.clear()
    bundle.predict(["one text", "another"])
    assert sorted(seen) == ["another", "one text"]  # predict judged them; nothing after
    with pytest.raises(manyheads.DataError, match="text #1 is int"):
        base.check_texts([*base.CheckedTexts(["a"]), 1])  # a plain list again: judged
    with pytest.raises(manyheads.DataError, match="text #2 holds a lone surrogate"):
        base.check_texts(["a", "b", "c\ud800"])  # the fast look finds it, the loop names it


# -- reading long texts: windows (default) or the first window only ------------------


def test_a_truncating_trunk_reads_a_long_text_s_first_window_only(tiny_st_dir: Path):
    """``truncating``: a text longer than the window is its first window (what follows
    changes nothing, and costs nothing); the default reads every window; the default's
    spec and fingerprint do not name the setting (bundles made before keep theirs)."""
    from manyheads.trunks import truncating

    whole = TransformerTrunk(tiny_st_dir)
    cut = truncating(str(tiny_st_dir), 12)
    assert "overflow" not in whole.spec() and whole.max_length == 16
    assert cut.spec()["overflow"] == "truncate" and cut.spec()["max_length"] == 12
    assert cut.fingerprint != whole.fingerprint
    assert load_trunk(cut.spec()).fingerprint == cut.fingerprint  # the spec builds it again
    long = "parser library bindings " * 20
    more = long + "with a tail that only the windows read " * 5
    a, b = cut.encode([long, more, "short"])[:2], whole.encode([long, more])
    np.testing.assert_allclose(a[0], a[1], atol=1e-6)  # the same first window
    assert not np.allclose(b[0], b[1], atol=1e-5)  # the default reads the tail too
    assert cut.work([long, "short"])[0] <= 12 < whole.work([long])[0]
    short = ["a short text", "another one"]  # within 12 tokens: read alike
    np.testing.assert_allclose(
        cut.encode(short), TransformerTrunk(tiny_st_dir, max_length=12).encode(short), atol=1e-6
    )


def test_truncating_a_composite_cuts_its_transformer_parts_only(tiny_st_dir: Path):
    from manyheads.trunks import truncating

    composite = truncating(f"{tiny_st_dir}+hashing", 10)
    parts = composite.spec()["parts"]
    assert parts[0]["overflow"] == "truncate" and parts[0]["max_length"] == 10
    assert parts[1] == load_trunk("hashing").spec()
    for trunk, tokens, message in (
        ("hashing", 64, "truncate: trunk 'hashing' has no part that reads text in token"),
        (str(tiny_st_dir), 4, "truncate must be a number of tokens, at least 8, got 4"),
        (str(tiny_st_dir), True, "truncate must be a number of tokens"),
        (str(tiny_st_dir), 10_000, "truncate 10000: max_length must be an integer in"),
    ):
        with pytest.raises(ConfigError, match=message):
            truncating(trunk, tokens)
    with pytest.raises(ConfigError, match="overflow must be one of windows, truncate"):
        TransformerTrunk(tiny_st_dir, overflow="cut")
