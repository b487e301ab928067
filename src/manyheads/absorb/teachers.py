"""Teachers: the classifiers a team already runs, as sources of answers to learn from.

A teacher is named ``NAME=SOURCE``; the source is one of

- a local Hugging Face ``AutoModelForSequenceClassification`` folder (safetensors): its
  labels are the config's ``id2label``; it is multilabel when ``problem_type`` says
  ``multi_label_classification``, else multiclass; it exposes logits;
- ``PATH#HEAD``: a head of another manyheads bundle (any trunk): its calibrated
  probabilities;
- a JSONL file of a teacher's answers to the texts (``{"text", "scores": {label: p}}`` or
  ``{"text", "label"}``, a list of labels for a multilabel teacher): for teachers that
  cannot run here (an LLM, an API). Scores that sum to 1 on every row make a multiclass
  teacher, others a multilabel one.

:meth:`Teacher.answer` labels texts a batch at a time; a model teacher's outputs are kept
in the embedding cache under ``teacher:FINGERPRINT`` and the text's hash, so labelling
the same texts again costs nothing. :meth:`Teacher.features` gives what the teacher's
last layer sees, for comparing teachers (``manyheads diagnose --teacher``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from .._text import loads_json
from ..data import read_records
from ..errors import ConfigError, DataError, ManyheadsError, require
from ..heads.kinds import MULTICLASS, MULTILABEL, Kind, check_head_name, kind_of
from ..trunks.base import check_texts, file_sha256
from ..trunks.windows import padded
from .base import (
    TEACHER_BATCH,
    Teacher,
    TeacherAnswers,
    bundle_bytes,
    folder_bytes,
    one_line,
    probabilities,
)

if TYPE_CHECKING:
    from ..cache import EmbeddingCache

__all__ = [
    "AnswersTeacher",
    "BundleTeacher",
    "HFTeacher",
    "Teacher",
    "TeacherAnswers",
    "bundle_bytes",
    "folder_bytes",
    "load_teacher",
    "parse_teacher",
    "probabilities",
]
# the module a sequence-classification model's classifier lives in, by architecture
_CLASSIFIER_NAMES = ("classifier", "score", "classification_head", "logits_proj")


def parse_teacher(arg: str) -> tuple[str, str]:
    """``NAME=SOURCE`` as ``(name, source)``; the name becomes the head's name."""
    name, sep, source = str(arg).partition("=")
    if not sep or not name.strip() or not source.strip():
        raise ConfigError(f"bad {{teacher}} {arg!r}: expected NAME=SOURCE", options=("teacher",))
    try:
        name = check_head_name(name.strip())
    except DataError as exc:
        raise ConfigError(f"bad {{teacher}} {arg!r}: {exc}", options=("teacher",)) from None
    return name, source.strip()


# -- a Hugging Face sequence-classification folder ----------------------------------


class HFTeacher(Teacher):
    """A local ``AutoModelForSequenceClassification`` folder, run with torch. Texts are
    truncated to the model's window (as the model's own pipeline does)."""

    has_logits = True

    def __init__(self, name: str, folder: Path) -> None:
        from ..trunks.transformer import TransformerTrunk

        self.name, self.source = name, str(folder)
        config_file = folder / "config.json"
        if not config_file.is_file():
            raise ConfigError(
                f"teacher {name!r}: {folder} has no config.json; give a Hugging Face "
                "sequence-classification folder, a BUNDLE#HEAD or a JSONL of answers"
            )
        try:
            config = loads_json(config_file.read_bytes())
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"teacher {name!r}: cannot read {config_file}: not UTF-8 text ({exc.reason} at "
                f"byte {exc.start})"
            ) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"teacher {name!r}: cannot read {config_file}: {exc}") from None
        id2label = config.get("id2label") if isinstance(config, dict) else None
        if not isinstance(id2label, dict) or not id2label:
            raise ConfigError(
                f"teacher {name!r}: {config_file} has no id2label, so its outputs have no "
                "label names; save the model with its labels (config.id2label)"
            )
        try:
            ids = sorted(int(k) for k in id2label)
        except ValueError:
            raise ConfigError(f"teacher {name!r}: id2label keys must be integers") from None
        if ids != list(range(len(ids))):
            raise ConfigError(f"teacher {name!r}: id2label must number its labels 0..n-1")
        self.labels = [str(id2label[str(i)] if str(i) in id2label else id2label[i]) for i in ids]
        if len(set(self.labels)) != len(self.labels):
            raise ConfigError(f"teacher {name!r}: id2label names a label twice")
        problem = config.get("problem_type")
        if problem == "regression" or len(self.labels) < 2:
            raise ConfigError(f"teacher {name!r}: a regression model is not a classifier")
        self.kind = "multilabel" if problem == "multi_label_classification" else "multiclass"
        # the window the model was saved with (its tokenizer's model_max_length), as its
        # own pipeline truncates; safetensors and the tokenizer checked like a trunk's
        try:
            self._trunk = TransformerTrunk(folder, max_length=_saved_window(folder, config))
        except ManyheadsError as exc:
            raise ConfigError(f"teacher {name!r}: {one_line(exc)}") from None
        self.fingerprint = self._trunk.fingerprint
        self._folder = self._trunk.model_dir
        self._model: Any = None
        self._features: list[Any] = []

    def prepare(self) -> None:
        self._ensure_model()

    def _ensure_model(self) -> Any:
        if self._model is None:
            from ..trunks.transformer import load_pretrained

            require("torch", "transformers")
            model = load_pretrained(
                self._folder, "AutoModelForSequenceClassification", f"teacher {self.name!r}: "
            ).to(self.device.torch_name)
            for attr in _CLASSIFIER_NAMES:
                module = getattr(model, attr, None)
                if module is not None:
                    module.register_forward_hook(self._keep_input)
                    break
            self._model = model
        return self._model

    def _keep_input(self, module: Any, inputs: Any, output: Any) -> None:
        x = inputs[0]
        self._features.append(x[:, 0] if x.ndim == 3 else x)

    def _forward(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        torch = require("torch", "transformers")
        model = self._ensure_model()
        limit = self._trunk.max_length
        encoded = self._trunk.tokenizer.encode_batch(texts)
        rows = [e.ids if len(e.ids) <= limit else e.ids[: limit - 1] + e.ids[-1:] for e in encoded]
        ids, mask = padded(rows)
        self._features.clear()
        where = self.device.torch_name
        with torch.inference_mode():
            logits = model(
                input_ids=torch.from_numpy(ids).to(where),
                attention_mask=torch.from_numpy(mask).to(where),
            )
        feats = self._features[0].float().cpu().numpy() if self._features else None
        self._features.clear()
        return logits.logits.float().cpu().numpy(), feats

    def _run(self, texts: list[str]) -> np.ndarray:
        return self._forward(texts)[0]

    def _answers(self, out: np.ndarray) -> TeacherAnswers:
        return TeacherAnswers(probs=probabilities(out, self.kind), logits=out)

    def features(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        parts = []
        for start in range(0, len(texts), TEACHER_BATCH):
            _, feats = self._forward(texts[start : start + TEACHER_BATCH])
            if feats is None:
                raise ManyheadsError(
                    f"teacher {self.name!r}: no classifier module found "
                    f"({', '.join(_CLASSIFIER_NAMES)}) to read its features from"
                )
            parts.append(feats)
        return np.concatenate(parts).astype(np.float32)

    def size_bytes(self) -> int:
        return folder_bytes(self._trunk.path)


def _saved_window(folder: Path, config: dict[str, Any]) -> int:
    positions = int(config.get("max_position_embeddings", 512))
    limit = min(positions, 512)
    try:
        saved = loads_json((folder / "tokenizer_config.json").read_bytes())
        wanted = saved.get("model_max_length")
    except (OSError, ValueError, AttributeError):
        wanted = None
    if isinstance(wanted, int) and 8 <= wanted < limit:
        return wanted
    return limit


# -- a head of another bundle ------------------------------------------------------


class BundleTeacher(Teacher):
    """``PATH#HEAD``: one head of a manyheads bundle; its calibrated probabilities."""

    def __init__(self, name: str, path: str, head: str) -> None:
        from ..bundle import Bundle

        self.name, self.source = name, f"{path}#{head}"
        self._bundle = Bundle.load(path, cache=None)
        if head not in self._bundle.heads:
            names = ", ".join(sorted(self._bundle.head_info)) or "none"
            raise ConfigError(
                f"teacher {name!r}: bundle {path} has no head {head!r} (its heads: {names})"
            )
        info = self._bundle.head_info[head]
        kind = kind_of(str(info.get("kind", "multiclass")))
        if not kind.soft_targets:
            raise ConfigError(
                f"teacher {name!r}: head {head!r} is {kind}; absorb multiclass, binary "
                "or multilabel heads"
            )
        self.kind, self._head = kind, head
        self.labels = [str(label) for label in self._bundle.labels(head)]
        record, tensors = self._bundle.export_head(head)
        digest = json.dumps(record, sort_keys=True, default=str).encode()
        for key in sorted(tensors):
            digest += key.encode() + np.ascontiguousarray(tensors[key]).tobytes()
        self.fingerprint = hashlib.sha256(
            self._bundle.trunk_fingerprint.encode() + digest
        ).hexdigest()[:16]
        self._path = Path(path)

    def _run(self, texts: list[str]) -> np.ndarray:
        return self._bundle.predict_proba(texts, heads=[self._head])[self._head]

    def features(self, texts: Sequence[str]) -> np.ndarray:
        X = self._bundle.embed(check_texts(texts), use_cache=False)
        dense = X.toarray() if sp.issparse(X) else X  # type: ignore[union-attr]
        return np.asarray(dense, dtype=np.float32)

    def thresholds(self, kind: Kind) -> np.ndarray:
        """The head's own thresholds."""
        return np.asarray(self._bundle.heads[self._head].thresholds_, dtype=np.float32)

    def size_bytes(self) -> int:
        return bundle_bytes(self._bundle, self._path)


# -- answers written down (an LLM, an API) -------------------------------------------


class AnswersTeacher(Teacher):
    """A JSONL file of answers: every text to learn from must be answered there."""

    runs_here = False

    def __init__(self, name: str, path: Path) -> None:
        self.name, self.source = name, str(path)
        answers: dict[str, dict[str, float]] = {}
        multilabel = False
        sums_to_one = True
        where = f"teacher {name!r}"
        try:  # JSONL (or .jsonl.gz), read like any data file
            for location, row in read_records(path):
                if not isinstance(row.get("text"), str):
                    raise DataError(f'{where}: {location} has no "text" string')
                scores = _row_scores(row, f"{where}: {location}")
                if "label" in row and isinstance(row["label"], list):
                    multilabel = True
                if "scores" in row and not math.isclose(sum(scores.values()), 1.0, abs_tol=0.02):
                    sums_to_one = False
                answers[row["text"]] = scores
        except DataError as exc:
            message = str(exc)
            raise DataError(
                message if message.startswith(where) else f"{where}: {message}"
            ) from None
        where = f"{where}: {path}"
        if not answers:
            raise DataError(f"{where}: no answers in it")
        kind = MULTILABEL if multilabel or not sums_to_one else MULTICLASS
        self.kind = kind
        self.labels = sorted({label for s in answers.values() for label in s})
        if kind.exclusive and len(self.labels) < 2:
            raise DataError(f"{where}: every answer is {self.labels[0]!r}; nothing to learn")
        self._answers_by_text = answers
        self.fingerprint = file_sha256(path)[:16]

    def _outputs(
        self, texts: list[str], cache: EmbeddingCache | None, progress: bool
    ) -> np.ndarray:
        """The written answers (nothing to cache, nothing to wait for)."""
        missing = [t for t in texts if t not in self._answers_by_text]
        if missing:
            raise DataError(
                f"teacher {self.name!r}: {self.source} answers none of {len(missing)} of the "
                f"{len(texts)} texts (first: {missing[0][:60]!r}); its texts must be the "
                "data's texts"
            )
        col = {label: j for j, label in enumerate(self.labels)}
        out = np.zeros((len(texts), len(self.labels)), dtype=np.float32)
        for i, text in enumerate(texts):
            for label, p in self._answers_by_text[text].items():
                out[i, col[label]] = p
        return out

    def covers(self, texts: Sequence[str]) -> bool:
        """Whether every one of ``texts`` has an answer here."""
        return all(t in self._answers_by_text for t in texts)

    def features(self, texts: Sequence[str]) -> np.ndarray:
        return self.answer(texts).probs


def _row_scores(row: dict[str, Any], where: str) -> dict[str, float]:
    if "scores" in row:
        scores = row["scores"]
        if not isinstance(scores, dict) or not scores:
            raise DataError(f'{where}: "scores" must be an object of label: probability')
        out: dict[str, float] = {}
        for label, p in scores.items():
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
                raise DataError(f"{where}: the score of {label!r} must be a number in [0, 1]")
            out[str(label)] = float(p)
        return out
    if "label" in row:
        label = row["label"]
        if isinstance(label, list):
            if not all(isinstance(x, str) and x for x in label):
                raise DataError(f'{where}: "label" must be a label or a list of labels')
            return {x: 1.0 for x in label}
        if isinstance(label, str) and label:
            return {label: 1.0}
        raise DataError(f'{where}: "label" must be a label or a list of labels')
    raise DataError(f'{where}: a row needs "scores" or "label"')


def load_teacher(name: str, source: str) -> Teacher:
    """The teacher ``name`` from ``source`` (a folder, ``PATH#HEAD`` or a JSONL file)."""
    name = check_head_name(name)
    if "#" in source:
        path, _, head = source.rpartition("#")
        if not path or not head:
            raise ConfigError(f"teacher {name!r}: expected BUNDLE#HEAD, got {source!r}")
        return BundleTeacher(name, path, head)
    where = Path(source).expanduser()
    if where.is_dir():
        return HFTeacher(name, where)
    if where.is_file():
        return AnswersTeacher(name, where)
    raise ConfigError(
        f"teacher {name!r}: {source!r} is not a folder, a BUNDLE#HEAD or a JSONL file"
    )
