"""Every option and argument of the commands, declared once as a :class:`Param`, and
:func:`command`, which gives a command function taking ``**options`` the parameters it
lists, in that order: typer reads them (flags, help, defaults) from the function's
signature, and the function receives their values by name, the names the library's
functions take."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from .. import jobs
from ..bundle import BUILTIN_BUNDLES, has_bundle

__all__ = ["REQUIRED", "Param", "argument", "command", "declared", "option", "take"]

F = TypeVar("F", bound=Callable[..., Any])
REQUIRED: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One parameter of a command: its ``name`` (the keyword the library takes, shown
    as the value's name in help: ``--text-field TEXT_FIELD``), the ``type`` of its value,
    ``info`` (the typer option or argument that reads it: flags, help) and its
    ``default`` (:data:`REQUIRED`: none)."""

    name: str
    type: Any
    info: Any
    default: Any = REQUIRED

    def parameter(self) -> inspect.Parameter:
        """The parameter as a command function's signature holds it."""
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=self.default,
            annotation=Annotated[self.type, self.info],
        )


def option(
    name: str, type_: Any, flags: str, help: str | None, default: Any = REQUIRED, **more: Any
) -> Param:
    """The option ``name`` written as ``flags`` (space-separated: ``--task -t``)."""
    return Param(name, type_, typer.Option(*flags.split(), help=help, **more), default)


def argument(name: str, type_: Any, help: str, default: Any = REQUIRED) -> Param:
    """The argument ``name`` (shown as ``NAME``)."""
    return Param(name, type_, typer.Argument(help=help), default)


def command(*params: Param) -> Callable[[F], F]:
    """Give a command function taking ``**options`` the signature of ``params``, which
    typer reads; the function is called with each one's value by its name."""
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise ValueError(f"a command's parameters must have distinct names, got {names}")
    signature = inspect.Signature([p.parameter() for p in params], return_annotation=None)

    def give(func: F) -> F:
        func.__dict__.update(__signature__=signature, declared=params)
        return func

    return give


def declared(func: Callable[..., Any]) -> tuple[Param, ...]:
    """The parameters :func:`command` gave ``func``."""
    params: tuple[Param, ...] = func.__dict__["declared"]
    return params


def take(options: dict[str, Any], *names: str) -> tuple[Any, ...]:
    """The values of ``names``, taken out of ``options``."""
    return tuple(options.pop(name) for name in names)


def bundle_note(value: str | None) -> str | None:
    """Say which bundle answers when a built-in name is also a folder here."""
    name = jobs.DEFAULT_BUNDLE if value is None else value
    if name in BUILTIN_BUNDLES and has_bundle(Path(name)):
        typer.echo(
            f"manyheads: note: {name!r} is the built-in bundle; the bundle folder ./{name} "
            f"here is used when written as a path: -b ./{name}",
            err=True,
        )
    return value


# -- shared by several commands ---------------------------------------------------------

# a string, not a Path: "./content" (a folder) and "content" (the built-in) differ
BUNDLE = option(
    "bundle",
    str,
    "--bundle -b",
    f"Bundle folder (a built-in bundle by name: {', '.join(BUILTIN_BUNDLES)}).",
    callback=bundle_note,
)
ANY_BUNDLE = option(
    "bundle",
    str | None,
    "--bundle -b",
    f"Bundle folder, or a built-in bundle: {', '.join(BUILTIN_BUNDLES)} "
    f"(default: {jobs.DEFAULT_BUNDLE}); a folder named like one is written as a path "
    "(./content).",
    None,
    callback=bundle_note,
)
DATA = argument("data", Path, "CSV, TSV, JSONL or Parquet file.")
TASKS = option(
    "task",
    list[str],
    "--task -t",
    "A head to train: NAME[=FIELD][:KIND], FIELD defaulting to NAME and KIND to "
    "multiclass (or binary, multilabel, hierarchical), e.g. topic, lang=language, "
    "tags:multilabel, tags:hierarchical; repeat for more heads.",
)
TRUNK = option(
    "trunk",
    str | None,
    "--trunk",
    "Trunk of a new bundle: minilm+tfidf (default), minilm, hashing, tfidf, ngram, static "
    "(static:PATH), fast (static+ngram), a model folder path, or several joined by '+' "
    "(with weights: minilm@1+tfidf@0.5); or byte (a byte trunk trained here on the file's "
    "tasks).",
    None,
)
TRUNCATE = option(
    "truncate",
    int | None,
    "--truncate",
    "A new bundle's transformer parts read only a text's first TRUNCATE tokens (as a "
    "classifier fine-tuned on a short window reads them): faster on long texts, blind to "
    "the rest of them. Default: long texts are read whole, in windows averaged.",
    None,
)
TEXT_FIELD = option("text_field", str, "--text-field", "Field holding the text.", "text")
LABEL_SEP = option(
    "label_sep", str, "--label-sep", "Separator of multilabel fields given as strings.", ","
)
C = option(
    "C",
    str,
    "--C",
    "Inverse regularisation strength, or 'auto' (default) to pick it on the validation split.",
    "auto",
)
SEED = option(
    "seed", int, "--seed", "Seed of the split and of training (same seed, same heads).", 0
)
JSON = option("as_json", bool, "--json", "Print one JSON object.", False)
HEADS = option(
    "heads", str | None, "--heads", "Comma-separated subset of heads (default: all).", None
)
TIER = option(
    "tier",
    int | None,
    "--tier",
    "Byte bundles: the tier (embedding size) to answer at (default: the bundle's).",
    None,
)
MAX_CHARS = option(
    "max_chars", int, "--max-chars", "Most characters in one text (see --long-texts).", 100_000
)
LONG_TEXTS = option(
    "long_texts",
    str,
    "--long-texts",
    "Texts over --max-chars: 'refuse' (an error naming the text) or 'window' (read in "
    "pieces of --max-chars, probabilities averaged).",
    "refuse",
)
BATCH_SIZE = option("batch_size", int, "--batch-size", "Texts per trunk pass.", 256)
MAX_LABELS = option("max_labels", int, "--max-labels", "Most labels (classes) of one head.", 1000)
CACHE_DIR = option(
    "cache_dir",
    Path | None,
    "--cache-dir",
    "Embedding cache folder (default: $MANYHEADS_CACHE_DIR or the user cache folder).",
    None,
)
DEVICE = option(
    "device",
    str,
    "--device",
    "Where the trunk runs: auto (a GPU where torch sees one, else the CPU), cpu, cuda or cuda:N.",
    "auto",
)
NO_CACHE = option("no_cache", bool, "--no-cache", "Do not use the embedding cache.", False)
CACHE = (CACHE_DIR, NO_CACHE)
# how a transformer trunk is fine-tuned (finetune, absorb --finetune)
TUNING = (
    option("max_length", int, "--max-length", "Tokens per text while training (truncated).", 128),
    option("batch_size", int, "--batch-size", None, 16),
    option("lr", float, "--lr", "Trunk learning rate.", 2e-5),
)


def fields(group_field: Param) -> tuple[Param, Param, Param]:
    """The fields of a file of rows: the text's, ``group_field``, the label separator."""
    return (TEXT_FIELD, group_field, LABEL_SEP)
