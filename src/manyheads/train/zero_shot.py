"""Heads from label names: a head exists the moment its labels are named, and grows into
a trained head as examples arrive.

**The weights.** Each label's text is built from its name and description by a few
prompt templates (:data:`TEMPLATES`; a hierarchical label's name is its path, and a
node without a description takes its nearest ancestor's); the trunk encodes them
(:meth:`~manyheads.trunks.base.TrunkBase.encode_labels`: the parts of a composite that
map texts by meaning do, the others give zeros) and a label's vector is the mean of
its templates', scaled back to their length. A text's logit for a label is then
``SCALE`` times the cosine of their vectors (20: the similarity scale sentence
transformers are trained at, MultipleNegativesRankingLoss's, so the probabilities are
those the training aimed for): one more block of the fused matrix product.

- multiclass: a softmax over the labels' logits (two labels or more);
- binary: two labels, the logit of the second (sorted) against the first; one label
  ``X`` ("is this about X") gets ``not X`` beside it, read as
  :data:`NEGATIVE_DESCRIPTION` (a text that names nothing: "not X" itself lies near X);
- multilabel: a label is given when the text is nearer to it than to the mean of the
  labels (its logit is the cosine with the label minus the cosine with that mean;
  threshold 0.5);
- hierarchical: the same among each node's siblings; the decoding never gives a node
  without its parent.

**Without labelled data** the temperature is 1 (the scale above) and the thresholds 0.5,
the rules just given. As soon as labelled rows exist (``fit_head`` on the head's name,
corrections and updates, the service's train endpoint) the head is fitted on them with
these weights as its prior (:class:`~manyheads.heads.linear.LinearHead`'s ``prior``:
the L2 penalty pulls towards them instead of towards zero, so a few rows move it a
little and many make an ordinary head), and calibrated as every head is. The head's
info keeps the names and descriptions (``label_names``) and how it was made (``made``:
``from`` labels, or labels and examples; how many ``examples``; the ``templates``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from .._text import unicode_problem
from ..errors import ConfigError, DataError
from ..heads import check_head_name, check_kind
from ..heads.labels import PATH_SEP
from ..heads.linear import LinearHead
from .settings import HeadSummary

__all__ = [
    "MAX_DESCRIPTION",
    "NEGATIVE_DESCRIPTION",
    "SCALE",
    "TEMPLATES",
    "LabelNames",
    "add_head_from_labels",
    "check_label_names",
    "made_from",
    "made_info",
    "prior_of",
    "zero_shot_head",
]

SCALE = 20.0
MAX_DESCRIPTION = 2000  # characters of one label's description
NEGATIVE_DESCRIPTION = "something else"
# each label's texts (measured in bench/zero_shot.py against the bare name)
TEMPLATES: tuple[str, ...] = ("{name}", "{name}: {description}", "This is about {name}.")


@dataclass(frozen=True)
class LabelNames:
    """Checked label names and their descriptions (``""``: none), in the order given."""

    names: tuple[str, ...]
    descriptions: tuple[str, ...]
    negative: str | None = None  # the class a one-label binary head gets beside its label

    def as_dict(self) -> dict[str, str]:
        """The labels as named (without a generated negative)."""
        pairs = zip(self.names, self.descriptions, strict=True)
        return {n: d for n, d in pairs if n != self.negative}


def check_label_names(head: str, labels: Any, kind: str, path_sep: str = PATH_SEP) -> LabelNames:
    """``labels`` (a mapping of name to description or None, or a list of names) checked:
    text, not empty, no name twice, descriptions of at most ``MAX_DESCRIPTION``
    characters, as many as the kind needs; one :class:`DataError` otherwise."""
    where = f"head {head!r}"
    if isinstance(labels, Mapping):
        pairs = list(labels.items())
    elif isinstance(labels, Sequence) and not isinstance(labels, str | bytes):
        pairs = [(name, None) for name in labels]
    else:
        raise DataError(
            f"{where}: labels must be a mapping of names to descriptions or a list of names, "
            f"got {type(labels).__name__}"
        )
    if not pairs:
        raise DataError(f"{where}: no labels named")
    names: list[str] = []
    descriptions: list[str] = []
    for name, description in pairs:
        if not isinstance(name, str) or not name.strip():
            raise DataError(f"{where}: a label name must be non-empty text, got {name!r}")
        if description is not None and not isinstance(description, str):
            raise DataError(
                f"{where}: label {name!r}: a description must be text, got "
                f"{type(description).__name__}"
            )
        for text in (name, description or ""):
            problem = unicode_problem(text)
            if problem:
                raise DataError(f"{where}: label {name[:40]!r}: {problem}")
        if description is not None and len(description) > MAX_DESCRIPTION:
            raise DataError(
                f"{where}: label {name[:40]!r}: a description of {len(description):,} "
                f"characters; at most {MAX_DESCRIPTION:,}"
            )
        name = name.strip()
        if name in names:
            raise DataError(f"{where}: label {name!r} is named twice")
        names.append(name)
        descriptions.append((description or "").strip())
    k = check_kind(kind)
    least = 1 if k.single_logit else 2
    if len(names) < least:
        raise DataError(
            f"{where}: a {kind} head needs at least two labels, got {len(names)} "
            "(for one, make it binary: 'is this about X')"
        )
    if k.single_logit and len(names) > 2:
        raise DataError(f"{where}: a binary head takes one or two labels, got {len(names)}")
    negative = None
    if k.single_logit and len(names) == 1:
        negative = f"not {names[0]}"
        names.append(negative)
        descriptions.append("")
    if k.uses_paths:
        for name in names:
            if any(not part.strip() for part in name.split(path_sep)):
                raise DataError(f"{where}: label {name!r} has an empty part (parts: {path_sep!r})")
    return LabelNames(tuple(names), tuple(descriptions), negative)


def _node_texts(labels: LabelNames, path_sep: str) -> dict[str, tuple[str, str]]:
    """Every node of a taxonomy (each prefix of each path): its name as read (the path's
    parts joined by " / ") and its description (its own, else its nearest ancestor's)."""
    own = labels.as_dict()
    out: dict[str, tuple[str, str]] = {}
    for path in labels.names:
        parts = path.split(path_sep)
        for i in range(1, len(parts) + 1):
            node = path_sep.join(parts[:i])
            ancestors = [path_sep.join(parts[:j]) for j in range(i, 0, -1)]
            description = next((own[a] for a in ancestors if own.get(a)), "")
            out[node] = (" / ".join(parts[:i]), description)
    return out


def _texts(name: str, description: str, templates: Sequence[str]) -> list[str]:
    """A label's texts: each template filled (one needing a description it lacks is
    skipped)."""
    out = [
        t.format(name=name, description=description)
        for t in templates
        if description or "{description}" not in t
    ]
    return out or [name]


def _vectors(trunk: Any, items: Sequence[tuple[str, str]], templates: Sequence[str]) -> np.ndarray:
    """Each ``(name, description)``'s vector: the mean of its templates' vectors, scaled
    to their mean length and divided by its square, so that its dot product with a
    text's vector is the cosine of the two (for a composite: of their meaning parts)."""
    texts = [_texts(n, d, templates) for n, d in items]
    flat = [t for group in texts for t in group]
    V = np.asarray(trunk.encode_labels(flat), dtype=np.float64)
    out = np.zeros((len(items), V.shape[1]))
    at = 0
    for i, group in enumerate(texts):
        block = V[at : at + len(group)]
        at += len(group)
        length = float(np.linalg.norm(block, axis=1).mean())
        mean = block.mean(axis=0)
        norm = float(np.linalg.norm(mean))
        if length > 0 and norm > 0:
            out[i] = mean / norm / length
    return out


def zero_shot_head(
    trunk: Any,
    labels: LabelNames,
    kind: str,
    *,
    path_sep: str = PATH_SEP,
    templates: Sequence[str] = TEMPLATES,
) -> LinearHead:
    """A fitted :class:`LinearHead` from label names (the rules of the module docstring)."""
    k = check_kind(kind)
    head = LinearHead(kind, path_sep=path_sep)
    names = list(labels.names)
    ys: list[Any] = names if not k.is_set else [[n] for n in names]
    head._fit_start(np.zeros((len(names), 1), np.float32), ys)
    classes = head.classes_.tolist()
    described = dict(zip(labels.names, labels.descriptions, strict=True))
    if k.uses_paths:
        nodes = _node_texts(labels, path_sep)
        items = [nodes[c] for c in classes]
    else:  # a generated negative reads as "something else": no word of the label
        items = [
            (NEGATIVE_DESCRIPTION, "") if c == labels.negative else (c, described[c])
            for c in classes
        ]
    V = _vectors(trunk, items, templates)
    if k.single_logit:  # the second class against the first
        coef = (V[1] - V[0])[None, :]
    elif k.exclusive:
        coef = V
    elif k.uses_paths:  # each node against the mean of its siblings (itself among them)
        parent = [c.rpartition(path_sep)[0] if path_sep in c else "" for c in classes]
        coef = np.empty_like(V)
        for i, p in enumerate(parent):
            siblings = [j for j, q in enumerate(parent) if q == p]
            coef[i] = V[i] - V[siblings].mean(axis=0)
    else:  # multilabel: each label against the mean of the labels
        coef = V - V.mean(axis=0, keepdims=True)
    head.coef_ = np.ascontiguousarray(coef * SCALE, dtype=np.float32)
    head.intercept_ = np.zeros(coef.shape[0], dtype=np.float32)
    head.temperature_ = 1.0
    head.thresholds_ = np.full(k.n_thresholds(len(classes)), 0.5, dtype=np.float32)
    head.C_ = 1.0
    head.n_features_in_ = int(V.shape[1])
    head.n_iter_ = 0
    return head


def made_from(info: Mapping[str, Any]) -> tuple[LabelNames, list[str]] | None:
    """The label names and templates a head was made from (None: not from names, or a
    record of them that does not read)."""
    made = info.get("made")
    labels = info.get("label_names")
    if not isinstance(made, Mapping) or not isinstance(labels, Mapping) or not labels:
        return None
    found = made.get("templates")
    templates = [str(t) for t in found] if isinstance(found, list) and found else list(TEMPLATES)
    try:
        return check_label_names("", labels, str(info.get("kind")), PATH_SEP), templates
    except (DataError, ConfigError):
        return None


def prior_of(bundle: Any, name: str) -> LinearHead | None:
    """The head made from the label names head ``name`` was made from (its prior when
    it learns from rows); None for a head not made from names, or on another trunk."""
    info = bundle.head_info.get(name) if name in bundle.heads else None
    found = None if info is None else made_from(info)
    if info is None or found is None or not bundle.trunk.encodes_meaning:
        return None
    head = bundle.heads[name]
    path_sep = getattr(head, "path_sep", PATH_SEP)
    return zero_shot_head(
        bundle.trunk, found[0], str(info["kind"]), path_sep=path_sep, templates=found[1]
    )


def made_info(labels: LabelNames, templates: Sequence[str], examples: int) -> dict[str, Any]:
    """The info fields of a head made from names: ``label_names`` and ``made``."""
    how = "labels" if not examples else "labels and examples"
    return {
        "label_names": labels.as_dict(),
        "made": {"from": how, "examples": int(examples), "templates": list(templates)},
    }


def add_head_from_labels(
    bundle: Any,
    name: str,
    labels: Any,
    kind: str = "multiclass",
    *,
    path_sep: str = PATH_SEP,
    templates: Sequence[str] | None = None,
) -> HeadSummary:
    """Add (or replace) head ``name`` of ``bundle``, made from ``labels`` (see the module
    docstring); everything is checked before the trunk encodes anything."""
    name = check_head_name(name)
    k = check_kind(kind)
    if not isinstance(path_sep, str) or not path_sep:
        raise ConfigError(f"path_sep must be non-empty text, got {path_sep!r}")
    chosen = list(TEMPLATES if templates is None else templates)
    if not chosen or not all(isinstance(t, str) and "{name}" in t for t in chosen):
        raise ConfigError("templates must be texts that each hold '{name}'")
    checked = check_label_names(name, labels, k, path_sep)
    bundle.limits.check_labels(list(checked.names), f"head {name!r}")
    if name not in bundle.heads:
        bundle.limits.check_head_count(len(bundle.heads) + 1, f"head {name!r}")
    if bundle.trunk_needs_fit:
        raise ConfigError(
            f"head {name!r}: the trunk is fitted on texts first (its TF-IDF part); train a "
            "head on rows, or use a trunk that needs no fit (minilm, static)"
        )
    t0 = time.perf_counter()
    head = zero_shot_head(bundle.trunk, checked, k, path_sep=path_sep, templates=chosen)
    info = {
        "kind": k,
        "field": name,
        "trunk_fingerprint": bundle.trunk_fingerprint,
        "metrics": {},
        "n_train": 0,
        "n_val": 0,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "head_type": "linear",
        **made_info(checked, chosen, 0),
    }
    bundle.add_head(name, head, info=info)
    return HeadSummary(
        name=name,
        kind=k,
        n_classes=len(head.classes_),
        n_train=0,
        n_val=0,
        metrics={},
        seconds=time.perf_counter() - t0,
        embed_seconds=0.0,
    )
