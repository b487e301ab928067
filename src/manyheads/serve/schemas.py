"""The service's request and response bodies as pydantic models: the OpenAPI schema, and
the checks every body goes through. A mistake is a 422 whose ``code`` says which part
of the body is wrong (``bad_texts``, ``bad_heads``, ``bad_labels``, ``bad_kind``,
``bad_head_type``, ``bad_groups``; ``bad_request`` for a body that is not an object)
and whose message says how."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    RootModel,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .._text import unicode_problem
from ..heads.kinds import HEAD_TYPES, KINDS

__all__ = [
    "DriftResponse",
    "ErrorResponse",
    "FeedbackRequest",
    "FeedbackResponse",
    "HeadChange",
    "HeadDrift",
    "HeadFromLabels",
    "HeadInfo",
    "HeadPayload",
    "HeadsResponse",
    "PredictRequest",
    "PredictResponse",
    "RequestProblem",
    "RollbackRequest",
    "RollbackResponse",
    "TrainRequest",
    "TrainResponse",
    "parse",
    "parse_named",
]

# a field's code, and its message when pydantic (not one of our checks) refuses it
_FIELDS = {
    "texts": ("bad_texts", "'texts' must be a list of strings"),
    "heads": ("bad_heads", "'heads' must be a non-empty list of head names"),
    "labels": ("bad_labels", "'labels' must be a list, one label per text"),
    "kind": ("bad_kind", f"'kind' must be one of {', '.join(KINDS)}"),
    "head": ("bad_head_type", f"'head' must be one of {', '.join(HEAD_TYPES)}"),
    "groups": ("bad_groups", "'groups' must be a list of strings or integers, one per text"),
    "to": ("bad_generation", "'to' must be a whole number (a generation)"),
}
_CODES = {code for code, _ in _FIELDS.values()} | {"bad_feedback"}
_FEEDBACK_SHAPE = "the body must be a JSON list of {'text': ..., 'labels': {head: label}}"


class RequestProblem(Exception):
    """A body that its model refused: ``code`` and ``message`` of the 422 answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _valid_unicode(values: list[Any], field: str) -> None:
    for i, value in enumerate(values):
        problem = unicode_problem(value) if isinstance(value, str) else None
        if problem is not None:
            code = _FIELDS[field][0]
            raise PydanticCustomError(code, f"'{field}' #{i} {problem}")


def _valid_texts(texts: list[str]) -> list[str]:
    _valid_unicode(texts, "texts")
    return texts


Texts = Annotated[list[StrictStr], AfterValidator(_valid_texts)]


class PredictRequest(BaseModel):
    texts: Texts = Field(description="Texts to classify (1 to max_texts).")
    heads: list[StrictStr] | None = Field(None, description="Subset of heads (default: all).")

    @field_validator("heads")
    @classmethod
    def _heads(cls, heads: list[str] | None) -> list[str] | None:
        if heads is not None and not heads:
            raise PydanticCustomError("bad_heads", _FIELDS["heads"][1])
        return heads


class PredictResponse(BaseModel):
    results: list[dict[str, Any]] = Field(
        description="Per text, {head: answer}: multiclass / binary heads answer "
        "{label, score, scores}, multilabel and hierarchical heads {labels, scores}."
    )
    seconds: float


class TrainRequest(BaseModel):
    texts: Texts
    labels: list[Any] = Field(
        description="One per text; a list of labels for multilabel, of paths ('a::b') for "
        "hierarchical."
    )
    kind: Literal["multiclass", "binary", "multilabel", "hierarchical"] = "multiclass"
    head: Literal["linear", "mlp", "auto"] = "linear"
    groups: list[StrictStr | StrictInt] | None = Field(
        None, description="Group of each text (kept together in the validation split)."
    )

    @field_validator("groups")
    @classmethod
    def _groups(cls, groups: list[Any] | None) -> list[Any] | None:
        if groups is not None:
            _valid_unicode(groups, "groups")
        return groups

    @model_validator(mode="after")
    def _one_per_text(self) -> TrainRequest:
        if len(self.labels) != len(self.texts):
            raise PydanticCustomError("bad_labels", _FIELDS["labels"][1])
        if self.groups is not None and len(self.groups) != len(self.texts):
            raise PydanticCustomError("bad_groups", _FIELDS["groups"][1])
        return self


class TrainResponse(BaseModel):
    name: str = Field(description="The head trained.")
    kind: str = Field(description="multiclass, binary, multilabel or hierarchical.")
    n_classes: int = Field(description="Its classes (labels).")
    n_train: int = Field(description="Rows it was fitted on.")
    n_val: int = Field(description="Rows it was calibrated and scored on.")
    metrics: dict[str, Any] = Field(description="Validation accuracy, F1s, ECE, ...")
    seconds: float = Field(description="Embedding and fitting time.")
    replaced: bool = Field(description="Whether a head of that name was replaced.")


class FeedbackRow(BaseModel):
    text: StrictStr = Field(description="The text as it was classified.")
    labels: dict[StrictStr, Any] = Field(
        description="The right label for any of the heads ({head: label}); a list of labels "
        "for multilabel, of paths for hierarchical."
    )

    @field_validator("text")
    @classmethod
    def _text(cls, text: str) -> str:
        problem = unicode_problem(text)
        if problem is not None:
            raise PydanticCustomError("bad_feedback", f"a feedback text {problem}")
        return text

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, Any]) -> dict[str, Any]:
        if not labels:
            raise PydanticCustomError("bad_feedback", "a feedback row needs at least one label")
        return labels


class FeedbackRequest(RootModel[list[FeedbackRow]]):
    """A list of corrections: ``[{"text": ..., "labels": {head: label}}, ...]``."""


class FeedbackResponse(BaseModel):
    kept: dict[str, int] = Field(description="Corrections kept (on disk), per head.")
    rows: int = Field(description="Rows kept.")


class RollbackRequest(BaseModel):
    to: StrictInt | None = Field(
        None, description="The generation to make current (default: the one before)."
    )


class RollbackResponse(BaseModel):
    name: str
    action: str
    generation: int = Field(description="The head's generation now current.")


class HeadPayload(BaseModel):
    record: dict[str, Any] = Field(description="The head's JSON record, as bundles store it.")
    tensors: str = Field(description="The head's safetensors file, base64-encoded.")


class HeadFromLabels(BaseModel):
    """A head made from label names: the other body ``PUT /v1/heads/{name}`` takes."""

    labels: dict[str, str | None] | list[str] = Field(
        description="Each label's name mapped to its description (or null), or a list of "
        "names; hierarchical: paths (parent::child)."
    )
    kind: Literal["multiclass", "binary", "multilabel", "hierarchical"] = "multiclass"
    path_sep: str = Field("::", description="What separates a hierarchical label's parts.")


class HeadInfo(BaseModel):
    name: str
    kind: str
    labels: list[Any]
    metrics: dict[str, Any]
    generation: int = Field(1, description="1 when trained; each update or rollback adds one.")
    last_update: dict[str, Any] | None = Field(
        None, description="The last update judged: when, promoted or not, why."
    )
    feedback: dict[str, int] = Field(
        default_factory=dict,
        description="Corrections kept: total, pending (not in its training data), new (not "
        "judged by an update).",
    )


class HeadsResponse(BaseModel):
    heads: list[HeadInfo]


class HeadChange(BaseModel):
    name: str
    action: str
    heads: list[str]


class HeadDrift(BaseModel):
    """One head's drift: its window of answers against its reference (the answers it
    gave on its validation split), see ``manyheads.learn.drift``."""

    name: str
    kind: str | None
    window: int = Field(description="Answers in the head's window.")
    reference_n: int | None = Field(description="Rows of the reference (None: none kept).")
    psi: float | None = Field(description="Population stability index of the labels given.")
    js: float | None = Field(description="Jensen-Shannon distance (base 2) of the labels.")
    psi_threshold: float | None = Field(description="The labels' PSI that alarms.")
    confidence_psi: float | None = Field(description="PSI of the confidence histogram.")
    confidence_js: float | None
    confidence_threshold: float | None
    mean_confidence: float | None
    reference_confidence: float | None
    confidence_change: float | None = Field(description="Mean confidence minus reference's.")
    no_label_share: float | None = Field(description="Share of answers with no label.")
    reference_no_label_share: float | None
    inputs_t2: float | None = Field(
        description="Hotelling's T² of the window's trunk vectors against the texts the "
        "head was built on (None: no inputs' reference, or no vectors yet)."
    )
    inputs_threshold: float | None = Field(description="The inputs' T² that alarms.")
    inputs_window: int | None = Field(description="Texts whose vectors are in the window.")
    alarm: bool
    reason: str


class DriftResponse(BaseModel):
    window: int | None = Field(description="The answers a head's window holds at most.")
    alarm: bool = Field(description="Whether any head alarms.")
    heads: list[HeadDrift]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


MODELS: dict[str, type[BaseModel]] = {
    m.__name__: m
    for m in (
        PredictRequest, PredictResponse, TrainRequest, TrainResponse, HeadPayload,
        HeadInfo, HeadsResponse, HeadChange, HeadDrift, DriftResponse, ErrorResponse,
    )
}  # fmt: skip


def parse_named(doc: dict[str, Any]) -> HeadFromLabels:
    """A ``PUT`` body making a head from label names, or :class:`RequestProblem`."""
    try:
        return HeadFromLabels.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        if field == "kind":
            raise RequestProblem(*_FIELDS["kind"]) from None
        if field == "path_sep":
            raise RequestProblem("bad_path_sep", "'path_sep' must be text") from None
        raise RequestProblem(
            "bad_labels",
            "'labels' must map each label to its description (text or null), or be a list of names",
        ) from None


def parse(model: type[BaseModel], doc: Any) -> Any:
    """``doc`` (parsed JSON) as ``model``, or :class:`RequestProblem` (the first mistake)."""
    listed = issubclass(model, RootModel)
    if listed and not isinstance(doc, list):
        raise RequestProblem("bad_feedback", _FEEDBACK_SHAPE)
    if not listed and not isinstance(doc, dict):
        raise RequestProblem("bad_request", "the body must be a JSON object with 'texts'")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] in _CODES:
            raise RequestProblem(first["type"], first["msg"]) from None
        if listed:
            where = ".".join(str(p) for p in first["loc"])
            raise RequestProblem(
                "bad_feedback", f"feedback row {where}: {first['msg']} ({_FEEDBACK_SHAPE})"
            ) from None
        field = str(first["loc"][0]) if first["loc"] else ""
        code, message = _FIELDS.get(field, ("bad_request", f"bad request body: {first['msg']}"))
        raise RequestProblem(code, message) from None
