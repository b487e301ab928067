"""Judging trunks for tasks before training anything: :func:`diagnose_trunks` encodes a
sample of labelled texts once with each trunk, through a :class:`~manyheads.Bundle`;
what is measured of the vectors is :mod:`manyheads.evaluate.diagnosis`'s (which also
compares teachers: :func:`~manyheads.evaluate.diagnosis.diagnose_teachers`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..bundle import Bundle
from ..errors import ConfigError
from ..evaluate.diagnosis import (
    DIAGNOSE_K,
    DIAGNOSE_SAMPLE,
    TrunkDiagnosis,
    TrunkSample,
    check_settings,
    rank_trunks,
)

__all__ = ["diagnose_trunks"]


def diagnose_trunks(
    texts: Sequence[str],
    tasks: Mapping[str, tuple[str, Sequence[Any]]],
    trunks: Sequence[str] | Mapping[str, Any],
    *,
    groups: Sequence[Any] | None = None,
    sample: int = DIAGNOSE_SAMPLE,
    k: int = DIAGNOSE_K,
    seed: int = 0,
    cache: Any = "default",
    progress: bool = False,
) -> TrunkDiagnosis:
    """Judge ``trunks`` on ``tasks`` (``{name: (kind, labels)}``, a label per text)
    from a sample of the texts. ``trunks``: names, as ``Bundle(trunk=...)`` takes them,
    or ``{name: trunk}`` (anything ``Bundle(trunk=...)`` takes; a fitted part is
    fitted here).

    ``sample`` rows are drawn at random (``seed``); a part of them (whole ``groups``
    when given) is held out to score the probe, and a trunk with fitted parts
    (``tfidf``'s idf) is fitted on the rest
    (:meth:`~manyheads.evaluate.diagnosis.TrunkSample.draw`). Each trunk encodes the
    sample once (through the embedding ``cache``, as ``Bundle.embed`` does); each task
    is then scored on those vectors, ``k`` neighbours, and the trunks of a task ranked
    (:func:`~manyheads.evaluate.diagnosis.rank_trunks`).
    """
    check_settings(sample, k, seed)
    if not trunks:
        raise ConfigError("give at least one {trunk}", options=("trunk",))
    built = dict(trunks) if isinstance(trunks, Mapping) else {str(t): str(t) for t in trunks}
    names = list(built) if isinstance(trunks, Mapping) else [str(t) for t in trunks]
    if len(set(names)) != len(names):
        raise ConfigError(f"{{trunk}} names must be distinct, got {names}", options=("trunk",))
    drawn = TrunkSample.draw(texts, tasks, groups, sample, k, seed)
    bundles = {name: Bundle(trunk=built[name], cache=cache) for name in names}  # checked first
    vectors: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for name, bundle in bundles.items():
        start = time.perf_counter()
        if bundle.trunk_needs_fit:
            bundle.fit_trunk(drawn.train_texts)
        vectors[name] = bundle.embed(drawn.texts, progress=progress)
        seconds[name] = time.perf_counter() - start
    return rank_trunks(drawn, vectors, seconds, progress=progress)
