"""What ``Bundle.predict`` does around the trunk's work: blank texts answered with no
label (:func:`with_blanks`), and a predict call whose trunk work is done a step at a
time (:func:`predict_steps`, behind ``Bundle.predict_steps``): the service answers a
long text over several trunk passes and other requests between them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ManyheadsError
from ..heads import FusedHeads
from ..heads.decode import Scores
from ..heads.kinds import kind_of
from ..trunks import Features
from ..trunks.base import Encoding, TrunkBase
from .pieces import mean_of_pieces, pieces_of
from .state import HeadSet

__all__ = ["PredictSteps", "predict_steps", "with_blanks"]

Answers = list[dict[str, Any]]


def _blank_answer(kind: str, scores: Scores) -> dict[str, Any]:
    """What a head answers for an empty text: no label (see ``Bundle.predict``)."""
    answer = kind_of(kind).blank_answer()
    if scores != "none":
        answer["scores"] = {}
    return answer


def with_blanks(
    fused: FusedHeads,
    texts: list[str],
    names: list[str],
    scores: Scores,
    answer: Callable[[list[str]], Answers],
) -> Answers:
    """``answer(filled)`` for the texts that are not blank, no label for the blank ones
    (empty or whitespace only: no head computes them), in order."""
    blank = [not t.strip() for t in texts]
    if not any(blank):
        return answer(texts) if texts else []
    filled = [t for t, b in zip(texts, blank, strict=True) if not b]
    answered = iter(answer(filled) if filled else [])
    kinds = {n: fused.specs[n].kind for n in names}
    return [
        {n: _blank_answer(kinds[n], scores) for n in names} if b else next(answered) for b in blank
    ]


def predict_steps(
    state: HeadSet,
    trunk: TrunkBase,
    texts: list[str],
    names: list[str],
    max_chars: int | None,
    scores: Scores,
    *,
    whole: Callable[[list[str]], Answers],
) -> PredictSteps:
    """The answers of the heads ``names`` of ``state`` for ``texts``, ``trunk``'s work done
    a step at a time: ``trunk.encoding`` of the texts (or of their pieces of
    ``max_chars``), the heads applied to the vectors at the end.

    A transformer reads a few token windows per step; the answers are
    ``Bundle.predict``'s up to float rounding (the heads apply here to the joined
    vectors, an exported graph's heads too). When the trunk reads the texts in one
    piece (cheap per character; an int8 graph), or its int8 graph rechecks unsure
    answers with its float one, ``whole(filled)`` answers the texts that are not blank
    in the first step, as ``Bundle.predict`` does (``divisible`` is False)."""
    fused = state.fused
    assert fused is not None
    filled = [t for t in texts if t.strip()]
    cut = pieces_of(filled, max_chars)
    pieces = filled if cut is None else cut[0]
    encoding = None if not pieces or trunk.precise_twin() else trunk.encoding(pieces)

    def from_vectors(X: Features) -> Answers:
        probs = fused.probabilities(X, names)
        if cut is not None:
            probs = mean_of_pieces(probs, cut[1], cut[2], len(filled))
        return with_blanks(
            fused, texts, names, scores, lambda _: fused.answers(probs, names, scores)
        )

    return PredictSteps(
        encoding if encoding is not None and encoding.divisible else None,
        whole=lambda: with_blanks(fused, texts, names, scores, whole),
        finish=from_vectors,
    )


class PredictSteps:
    """``step(budget)`` until ``done``, then ``answers()``.

    ``encoding``: the texts' trunk work, a step at a time; its vectors go to
    ``finish`` for the answers. Without one (``divisible`` is False), the first
    step answers the texts ``whole``.
    """

    def __init__(
        self,
        encoding: Encoding | None,
        *,
        whole: Callable[[], Answers],
        finish: Callable[[Features], Answers],
    ) -> None:
        self._encoding = encoding
        self._whole = whole
        self._finish = finish
        self._answers: Answers | None = None

    @property
    def divisible(self) -> bool:
        """Whether the work takes more than one step."""
        return self._encoding is not None

    @property
    def left(self) -> int:
        """Trunk work not yet done (0 for work done in one piece)."""
        return 0 if self._encoding is None or self.done else self._encoding.left

    @property
    def done(self) -> bool:
        return self._answers is not None

    def step(self, budget: int) -> int:
        """Do trunk work worth at most ``budget`` (at least one piece); the work done."""
        if self._answers is not None:
            return 0
        if self._encoding is None:
            self._answers = self._whole()
            return 0
        work = self._encoding.step(budget)
        if self._encoding.done:
            self._answers = self._finish(self._encoding.result())
        return work

    def answers(self) -> Answers:
        if self._answers is None:
            raise ManyheadsError(f"the answers are not ready: {self.left} trunk work left")
        return self._answers
