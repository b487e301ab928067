"""Absorbing teachers from a file of texts into a bundle folder: the job behind
``manyheads absorb``."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..absorb import AbsorbReport, absorb_teachers, load_teacher, parse_teacher
from ..absorb.absorb import AbsorbSettings
from ..bundle import Bundle, bundle_folder, check_writable, has_bundle
from ..bundle.store import folder_lock
from ..data import LabelSpec, load_dataset
from ..errors import ConfigError
from .file_settings import FileSettings
from .options import (
    new_trunk,
    other_trunk,
    parse_C,
    refuse_foreign_folder,
    refuse_truncate,
)

__all__ = ["absorb_file"]

# how an absorbing job fine-tunes, unless told otherwise
_FINETUNE: dict[str, Any] = {"epochs": 1, "max_length": 128, "batch_size": 16, "lr": 2e-5}


def absorb_file(
    data: str | Path,
    bundle_path: str | Path,
    teachers: Sequence[str],
    *,
    trunk: str | None = None,
    truncate: int | None = None,
    eval_file: str | Path | None = None,
    **options: Any,
) -> AbsorbReport:
    """Absorb every ``NAME=SOURCE`` teacher into the bundle folder (created if missing,
    with ``trunk``, its transformer parts reading a text's first ``truncate`` tokens
    only when given) from the unlabelled texts of ``data``; ``eval_file`` holds gold
    labels in columns named like the teachers. ``options``: how the files are read and
    the texts cached (the fields of :class:`~manyheads.jobs.file_settings.FileSettings`:
    ``text_field``, ``group_field``, ``label_sep``, ``cache_dir``, ``no_cache``), the
    fields of :class:`~manyheads.absorb.absorb.AbsorbSettings` (``C`` may be text, as a
    command line gives it), and fine-tuning's ``epochs`` (default 1), ``max_length``
    (128), ``batch_size`` (16) and ``lr`` (2e-5). See
    :func:`manyheads.absorb.absorb_teachers`."""
    pairs = [parse_teacher(t) for t in teachers]
    if not pairs:
        raise ConfigError("give at least one {teacher} NAME=SOURCE", options=("teacher",))
    files, options = FileSettings.split(options, "absorb_file")
    tuning = {**_FINETUNE, **{k: options.pop(k) for k in _FINETUNE if k in options}}
    if "C" in options:
        options["C"] = parse_C(options["C"])
    settings = AbsorbSettings.of({**options, "finetune_options": tuning}, "absorb_file")
    folder = bundle_folder(bundle_path)
    check_writable(folder)
    exists = has_bundle(folder)
    if exists:
        refuse_truncate(truncate, folder)
    else:
        refuse_foreign_folder(folder)
    trunk_of_new = None if exists else new_trunk(trunk, truncate)  # before the teachers
    dataset = load_dataset(data, text_field=files.text_field, group_field=files.group_field)
    loaded = [load_teacher(name, source) for name, source in pairs]
    gold: dict[str, list[Any]] | None = None
    eval_texts = None
    if eval_file is not None:
        labelled = load_dataset(
            eval_file,
            text_field=files.text_field,
            labels=[LabelSpec(name=t.name, field=t.name, kind=t.kind) for t in loaded],
            label_sep=files.label_sep,
            partial=True,
        )
        gold = {
            name: labels for name, labels in labelled.labels.items() if name not in labelled.missing
        }
        if not gold:
            raise ConfigError(
                f"{{eval_file}} {eval_file} has no column named like a teacher "
                f"({', '.join(t.name for t in loaded)})",
                options=("eval_file",),
            )
        eval_texts = labelled.texts
    cache = files.cache()
    # an existing bundle: no other writer saves in between (the trunk may change)
    with folder_lock(folder) if exists else contextlib.nullcontext():
        if exists:
            bundle = Bundle.load(folder, cache=cache, device=files.device)
            if trunk is not None and other_trunk(bundle, trunk) is not None:
                raise ConfigError(
                    f"bundle {folder} uses trunk {bundle.trunk_name!r}; {{trunk}} "
                    f"{trunk!r} is another. Absorb into a new bundle to change trunks.",
                    options=("trunk",),
                )
        else:
            assert trunk_of_new is not None  # a new bundle
            bundle = Bundle(trunk=trunk_of_new, cache=cache, device=files.device)
        return absorb_teachers(
            bundle,
            folder,
            dataset.texts,
            loaded,
            groups=dataset.groups,
            eval_texts=eval_texts,
            eval_labels=gold,
            settings=settings,
        )
