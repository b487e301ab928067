"""Absorbing teachers into one bundle: Hugging Face folders, heads of other bundles, files
of answers; soft targets; the report; every bad input in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import write_jsonl

from manyheads import Bundle
from manyheads.absorb import absorb_teachers, load_teacher, parse_teacher, soften
from manyheads.absorb.measure import agreement, label_scores
from manyheads.absorb.teachers import HFTeacher
from manyheads.cache import EmbeddingCache
from manyheads.cli import main
from manyheads.errors import ConfigError, DataError, ManyheadsError
from manyheads.heads.linear import LinearHead


def _rows(debian_rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    return [{k: r[k] for k in ("text", "library", "section", "group")} for r in debian_rows[:n]]


@pytest.fixture
def data_file(tmp_path: Path, debian_rows) -> Path:
    return write_jsonl(tmp_path / "texts.jsonl", _rows(debian_rows, 800))


@pytest.fixture
def answers_file(tmp_path: Path, debian_rows) -> Path:
    """A teacher that cannot run here: its answers (the gold ``library`` labels)."""
    rows = [{"text": r["text"], "label": r["library"]} for r in debian_rows[:800]]
    return write_jsonl(tmp_path / "answers.jsonl", rows)


def _sample_texts() -> list[str]:
    import gzip

    path = Path(__file__).resolve().parent.parent / "examples" / "debian-en-test.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line)["text"] for _, line in zip(range(200), fh, strict=False)]


def _tiny_classifier(folder: Path, *, multilabel: bool = False) -> Path:
    """A 2-layer BERT sequence classifier (MiniLM's word pieces) with labels whose
    answers depend on the text's words, saved offline like any fine-tuned model."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from manyheads.trunks.transformer import minilm_path

    tokenizer_dir = minilm_path()

    labels = ["library", "other", "python"]
    torch.manual_seed(1)
    config = BertConfig(
        vocab_size=len(
            json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"]
        ),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=3,
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
        problem_type="multi_label_classification" if multilabel else None,
    )
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        # every token attends to every other equally, so the [CLS] vector the classifier
        # reads is a bag of the text's tokens; a steep classifier makes its answers differ
        for layer in model.bert.encoder.layer:
            for part in (layer.attention.self.query, layer.attention.self.key):
                part.weight.zero_()
                part.bias.zero_()
            layer.attention.output.dense.weight.mul_(50.0)
        model.bert.pooler.dense.weight.mul_(50.0)
        # logits standardised on real texts, so every label is some text's answer
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        tok.enable_truncation(64)
        tok.enable_padding()
        enc = tok.encode_batch(_sample_texts())
        logits = model(
            input_ids=torch.tensor([e.ids for e in enc]),
            attention_mask=torch.tensor([e.attention_mask for e in enc]),
        ).logits
        mean, std = logits.mean(0), logits.std(0) / 3
        model.classifier.weight.div_(std[:, None])
        model.classifier.bias.sub_(mean).div_(std)
    model.eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    shutil.copy(tokenizer_dir / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory) -> Path:
    return _tiny_classifier(tmp_path_factory.mktemp("teacher"))


# -- soft targets -------------------------------------------------------------------


def test_a_linear_head_learns_the_probabilities_it_is_given():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 20)).astype(np.float32)
    Z = X @ rng.normal(size=(20, 3))
    P = np.exp(Z) / np.exp(Z).sum(1, keepdims=True)
    y = np.array(["a", "b", "c"])[P.argmax(1)]
    # columns in another order than the head's classes
    head = LinearHead(C=10.0, calibrate=False).fit(
        X, y, soft_target=(["c", "a", "b"], P[:, [2, 0, 1]])
    )
    assert np.abs(head.predict_proba(X) - P).mean() < 0.01
    hard = LinearHead(C=10.0, calibrate=False).fit(X, y)
    assert np.abs(hard.predict_proba(X) - P).mean() > 0.05  # hard labels learn another thing
    M = 1 / (1 + np.exp(-Z))
    multi = [[c for c, v in zip("abc", row, strict=True) if v > 0.5] for row in M]
    ml = LinearHead(kind="multilabel", C=10.0, calibrate=False)
    ml.fit(X, multi, soft_target=(list("abc"), M))
    assert np.abs(ml.predict_proba(X) - M).mean() < 0.01
    with pytest.raises(DataError, match=r"label 'c' was not seen in training"):
        LinearHead().fit(X, y, soft_target=(["a", "b"], P[:, :2]))
    # a teacher's label it never chose on these texts is still a class (multilabel too)
    never = LinearHead(kind="multilabel", C=10.0)
    never.fit(X, [[] for _ in y], soft_target=(["z"], np.full((len(y), 1), 0.1)))
    assert never.classes_.tolist() == ["z"]
    assert abs(float(never.predict_proba(X).mean()) - 0.1) < 0.02
    with pytest.raises(DataError, match=r"soft targets must be probabilities in \[0, 1\]"):
        LinearHead().fit(X, y, soft_target=(["a", "b", "c"], P * 3))


def test_soften_keeps_the_decision_and_flattens_the_answer():
    class T:
        kind = "multiclass"

    from manyheads.absorb import TeacherAnswers

    logits = np.array([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]], dtype=np.float32)
    p1 = soften(T(), TeacherAnswers(probs=np.zeros_like(logits), logits=logits), 1.0)
    p2 = soften(T(), TeacherAnswers(probs=p1, logits=None), 2.0)
    assert (p1.argmax(1) == p2.argmax(1)).all()
    assert (p2.max(1) < p1.max(1)).all()
    np.testing.assert_allclose(p2.sum(1), 1.0, rtol=1e-5)


def test_agreement_and_scores():
    assert agreement("multiclass", ["a", "b", "a"], ["a", "a", "a"]) == pytest.approx(2 / 3)
    assert agreement("multilabel", [["x", "y"], []], [["y", "x"], ["x"]]) == 0.5
    scores = label_scores("multiclass", ["a", "b"], ["a", "a"])
    assert scores["accuracy"] == 0.5 and scores["macro_f1"] == pytest.approx((2 / 3 + 0) / 2)


# -- teachers ------------------------------------------------------------------------


def test_a_file_of_answers_is_absorbed(tmp_path, data_file, answers_file, debian_rows):
    bundle = Bundle(trunk="hashing")
    texts = [r["text"] for r in debian_rows[:800]]
    report = absorb_teachers(
        bundle, tmp_path / "b", texts, [load_teacher("library", str(answers_file))], speed_texts=0
    )
    (head,) = report.heads
    gold = [r["library"] for r in debian_rows[:800]]
    majority = max(gold.count("yes"), gold.count("no")) / len(gold)
    assert head.kind == "multiclass" and head.heldout == report.split["heldout"] == 80
    assert head.agreement > majority + 0.03  # it learnt the answers, not the majority
    assert report.teachers_bytes is None and report.speed == {}  # it does not run here
    again = Bundle.load(tmp_path / "b")
    assert again.head_info["library"]["field"] == "library"
    assert again.predict(["A shared library for parsing XML."])[0]["library"]["label"] in {
        "yes",
        "no",
    }


def test_a_hugging_face_teacher_is_absorbed_and_labels_once(tmp_path, tiny_teacher, debian_rows):
    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    teacher = load_teacher("fruit", str(tiny_teacher))
    assert isinstance(teacher, HFTeacher) and teacher.labels == ["library", "other", "python"]
    texts = [r["text"] for r in debian_rows[:300]]
    eval_rows = debian_rows[300:360]
    gold = {"fruit": teacher.decide(teacher.answer([r["text"] for r in eval_rows]).probs)}
    gold["fruit"][:10] = [None] * 10  # texts not labelled for this head are not scored
    report = absorb_teachers(
        Bundle(trunk="hashing", cache=cache),
        tmp_path / "b",
        texts,
        [teacher],
        eval_texts=[r["text"] for r in eval_rows],
        eval_labels=gold,
        speed_texts=50,
    )
    (head,) = report.heads
    assert head.teacher is not None and head.teacher["accuracy"] == 1.0  # its own answers
    assert head.teacher["n"] == head.student["n"] == 50
    assert head.student is not None and 0 <= head.student["accuracy"] <= 1
    assert report.teachers_bytes == teacher.size_bytes() > 0 and report.bundle_bytes > 0
    assert report.speed["texts"] == 30 and report.speed["speedup"] > 0
    stored = cache.count(f"teacher:{teacher.fingerprint}")
    assert stored >= 300  # the answers are cached ...
    calls = []
    original = HFTeacher._run

    def counting(self, batch):  # type: ignore[no-untyped-def]
        calls.append(len(batch))
        return original(self, batch)

    HFTeacher._run = counting  # type: ignore[method-assign]
    try:
        teacher.answer(texts, cache=cache)
    finally:
        HFTeacher._run = original  # type: ignore[method-assign]
    assert calls == []  # ... so labelling the same texts again runs nothing
    feats = teacher.features(texts[:5])
    assert feats.shape == (5, 32)


def test_a_multilabel_teacher_and_a_bundle_head_teacher(tmp_path, tiny_model_dir, debian_rows):
    folder = _tiny_classifier(tmp_path / "ml", multilabel=True)
    assert load_teacher("fruits", str(folder)).kind == "multilabel"
    source = Bundle(trunk="hashing")
    rows = debian_rows[:600]
    source.fit_head(
        "library", [r["text"] for r in rows], [r["library"] for r in rows], kind="binary"
    )
    source.save(tmp_path / "source")
    teacher = load_teacher("lib", f"{tmp_path / 'source'}#library")
    assert teacher.kind == "binary" and teacher.labels == ["no", "yes"]
    report = absorb_teachers(
        Bundle(trunk="hashing"),
        tmp_path / "b",
        [r["text"] for r in debian_rows[600:1400]],
        [teacher],
        speed_texts=0,
    )
    # the same trunk and a head of the same kind: the student answers as its teacher
    assert report.heads[0].agreement >= 0.95


# -- bad input, one line each -------------------------------------------------------


def test_a_folder_without_id2label_is_refused(tmp_path, tiny_teacher):
    folder = tmp_path / "t"
    shutil.copytree(tiny_teacher, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["id2label"], config["label2id"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"teacher 't': .*config.json has no id2label"):
        load_teacher("t", str(folder))


def test_a_teacher_without_its_own_tokenizer_is_refused(tmp_path, tiny_teacher):
    folder = tmp_path / "t"
    shutil.copytree(tiny_teacher, folder)
    (folder / "tokenizer.json").unlink()  # transformers would make up a 5-token one
    with pytest.raises(ConfigError, match=r"teacher 't': .*t has no tokenizer: no tokenizer.json"):
        load_teacher("t", str(folder))
    from tokenizers import Tokenizer, models

    specials = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    Tokenizer(models.WordPiece(vocab=specials, unk_token="[UNK]")).save(
        str(folder / "tokenizer.json")
    )
    with pytest.raises(
        ConfigError, match=r"teacher 't': the tokenizer in .* knows 5 tokens but the model embeds"
    ):
        load_teacher("t", str(folder))


def test_a_config_that_is_not_utf8_is_one_line(tmp_path, tiny_teacher):
    folder = tmp_path / "t"
    shutil.copytree(tiny_teacher, folder)
    text = (folder / "config.json").read_text().replace('"library"', '"libr\u00e9ry"')
    (folder / "config.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(
        ConfigError, match=r"teacher 't': cannot read .*config.json: not UTF-8 text"
    ):
        load_teacher("t", str(folder))


def test_a_model_that_cannot_load_is_one_line_naming_the_teacher(tmp_path, tiny_teacher, capfd):
    folder = tmp_path / "t"
    shutil.copytree(tiny_teacher, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    teacher = load_teacher("t", str(folder))
    capfd.readouterr()
    with pytest.raises(ManyheadsError, match="teacher .t.: cannot load the model") as caught:
        teacher.answer(["a text", "another text"])
    message = str(caught.value)
    assert message.startswith(f"teacher 't': cannot load the model in {folder.resolve()}: ")
    assert "size mismatch" in message and "\n" not in message and "text 1" not in message
    printed = capfd.readouterr()
    assert printed.err == "" and printed.out == ""  # the library's own report kept back


def test_a_bundle_head_that_does_not_exist_is_refused(tmp_path, debian_rows):
    b = Bundle(trunk="hashing")
    rows = debian_rows[:200]
    b.fit_head("library", [r["text"] for r in rows], [r["library"] for r in rows])
    b.save(tmp_path / "b")
    with pytest.raises(ConfigError, match=r"bundle .* has no head 'nope' \(its heads: library\)"):
        load_teacher("x", f"{tmp_path / 'b'}#nope")


def test_answers_for_other_texts_are_refused(tmp_path, answers_file, debian_rows):
    teacher = load_teacher("library", str(answers_file))
    texts = [r["text"] for r in debian_rows[:100]] + ["a text nobody answered"]
    with pytest.raises(DataError, match=r"answers none of 1 of the 101 texts .*must be the data's"):
        absorb_teachers(Bundle(trunk="hashing"), tmp_path / "b", texts, [teacher])


def test_a_teacher_that_fails_on_a_text_is_named(tmp_path, tiny_teacher, debian_rows):
    teacher = load_teacher("fruit", str(tiny_teacher))
    original = teacher._run

    def fragile(batch):  # type: ignore[no-untyped-def]
        if any("BROKEN" in t for t in batch):
            raise RuntimeError("index out of range in self")
        return original(batch)

    teacher._run = fragile  # type: ignore[method-assign]
    texts = [r["text"] for r in debian_rows[:40]] + ["a BROKEN text"]
    with pytest.raises(ManyheadsError) as info:
        teacher.answer(texts)
    assert str(info.value) == (
        "teacher 'fruit' failed on text 41 ('a BROKEN text'): index out of range in self"
    )


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("noequals", "bad teacher 'noequals': expected NAME=SOURCE"),
        ("=x", "bad teacher '=x': expected NAME=SOURCE"),
        ("bad name=x", "bad teacher 'bad name=x': "),
    ],
)
def test_bad_teacher_arguments(arg, message):
    with pytest.raises(ConfigError) as info:
        parse_teacher(arg)
    assert str(info.value).startswith(message)


def test_bad_answers_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "scores": {"x": 2}}\n')
    with pytest.raises(DataError, match=r"line 1: the score of 'x' must be a number in \[0, 1\]"):
        load_teacher("t", str(bad))
    bad.write_text('{"text": "a"}\n')
    with pytest.raises(DataError, match=r'line 1: a row needs "scores" or "label"'):
        load_teacher("t", str(bad))
    with pytest.raises(ConfigError, match=r"is not a folder, a BUNDLE#HEAD or a JSONL file"):
        load_teacher("t", str(tmp_path / "missing.jsonl"))


def test_finetune_needs_a_transformer_trunk(tmp_path, answers_file, debian_rows):
    teacher = load_teacher("library", str(answers_file))
    with pytest.raises(ConfigError, match="fine-tuning needs a trunk with exactly one transformer"):
        absorb_teachers(
            Bundle(trunk="hashing"),
            tmp_path / "b",
            [r["text"] for r in debian_rows[:100]],
            [teacher],
            finetune=True,
        )


# -- the command ---------------------------------------------------------------------


def test_cli_absorb_json_and_eval(tmp_path, capsys, data_file, answers_file, debian_rows):
    eval_file = write_jsonl(
        tmp_path / "gold.jsonl",
        [{"text": r["text"], "library": r["library"]} for r in debian_rows[800:900]],
    )
    code = main(
        [
            "absorb", str(data_file), "-b", str(tmp_path / "b"), "--trunk", "hashing",
            "--teacher", f"library={answers_file}", "--eval", str(eval_file),
            "--group-field", "group", "--json",
        ]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    report = json.loads(out.out)
    (head,) = report["heads"]
    assert head["name"] == "library" and head["student"]["n"] == 100
    assert head["teacher"] is None  # the answers file does not answer the labelled texts
    assert 0.5 < head["agreement"] <= 1 and head["student"]["accuracy"] > 0.5


def test_cli_absorb_errors_are_one_line(tmp_path, capsys, data_file, answers_file):
    code = main(["absorb", str(data_file), "-b", str(tmp_path / "b"), "--teacher", "oops"])
    err = capsys.readouterr().err
    assert code != 0 and err.strip().count("\n") == 0
    assert "bad --teacher 'oops': expected NAME=SOURCE" in err
    eval_file = write_jsonl(tmp_path / "gold.jsonl", [{"text": "x", "other": "y"}])
    code = main(
        [
            "absorb", str(data_file), "-b", str(tmp_path / "b"), "--trunk", "hashing",
            "--teacher", f"library={answers_file}", "--eval", str(eval_file),
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and err.strip().count("\n") == 0
    assert "has no column named like a teacher (library)" in err and "--eval" in err


# -- N fine-tuned models merged into one trunk -----------------------------------------


@pytest.mark.heavy
def test_finetune_merges_the_teachers_into_one_trunk(tmp_path, tiny_model_dir, tiny_teacher):
    texts = _sample_texts()
    folder = _tiny_classifier(tmp_path / "ml", multilabel=True)
    teachers = [load_teacher("fruit", str(tiny_teacher)), load_teacher("fruits", str(folder))]
    # a new composite: its fitted part is fitted first, the fine-tuned part kept in the folder
    bundle = Bundle(trunk=f"{tiny_model_dir}+tfidf")
    before = bundle.trunk_fingerprint
    report = absorb_teachers(
        bundle,
        tmp_path / "b",
        texts,
        teachers,
        finetune=True,
        finetune_options={"epochs": 1, "max_length": 32},
        speed_texts=20,
    )
    assert report.finetune is not None and report.finetune.steps > 0
    tasks = json.loads((report.finetune.out_dir / "finetune.json").read_text())["tasks"]
    assert tasks["fruit"]["teacher"] and tasks["fruits"]["kind"] == "multilabel"
    again = Bundle.load(tmp_path / "b")
    assert again.trunk_fingerprint != before
    assert report.finetune.out_dir.parent == (tmp_path / "b").resolve()
    assert set(again.heads) == {"fruit", "fruits"}
    spec = again.trunk_reference["spec"]
    assert spec["parts"][0]["path"] == report.finetune.out_dir.name  # relative
    assert report.finetune.out_dir.is_dir()
    answer = again.predict(["A library for parsing XML."])[0]
    assert set(answer) == {"fruit", "fruits"}
    # a bundle with other heads is not given a new trunk under them
    with pytest.raises(ConfigError, match=r"bundle has heads trained on the old one \(fruit\)"):
        absorb_teachers(again, tmp_path / "b", texts, teachers[1:], finetune=True)
