"""The bundle's methods that hand a head over to training, beside ``fit_head`` (in
``core.py``): heads made from label names (:mod:`manyheads.train.zero_shot`: add one,
read its names back, change its descriptions) and an update's refit of a head from its
own weights (:func:`manyheads.train.fit.refit_head`), and the guarded update of heads
from their corrections (:mod:`manyheads.learn.update`). :class:`Fitting` gives a
:class:`~manyheads.bundle.Bundle` these; loading and predicting never import them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DataError
from .feedback import update_lock
from .production import drop_folded, folder_of

if TYPE_CHECKING:
    from ..learn.update import UpdateReport

__all__ = ["Fitting"]


class Fitting:
    """A bundle's methods that hand heads over to training (besides ``fit_head``)."""

    heads: Any
    head_info: Any
    training_data: Any
    fit_head: Any
    save: Any

    def update_heads(
        self, heads: Sequence[str] | str | None = None, **options: Any
    ) -> UpdateReport:
        """Refit heads from their kept data and corrections, promote each only when it is
        not worse, save: see :mod:`manyheads.learn.update` for the rule and the
        options (``min_feedback``, ``held_back``, ``margin``, ``keep``, ``seed``,
        ``dry_run``, ``full``; ``wait=False``: refuse rather than wait for an update running
        elsewhere on the folder; ``save=False``: leave saving, and dropping the
        corrections folded in from the log (:meth:`drop_folded`), to the caller)."""
        from ..learn.update import UpdateSettings, update_heads

        wait, save = options.pop("wait", True), options.pop("save", True)
        settings = UpdateSettings(**options)
        folder = folder_of(self)
        with update_lock(folder, wait=wait):
            report = update_heads(self, heads, settings)
            if save and not settings.dry_run and any(h.rows_feedback for h in report.heads):
                self.save(folder)
                drop_folded(self, folder)
        return report

    def refit_head(
        self,
        name: str,
        texts: Sequence[str],
        labels: Sequence[Any],
        *,
        groups: Sequence[Any] | None = None,
        seed: int = 0,
        features: Any = None,
        search: bool = True,
        candidate: bool = False,
    ) -> Any:
        """Fit linear head ``name`` again from its weights on all its rows (a searched C
        walked from its value unless ``search`` is false; part weights kept; a new label
        grows it; ``candidate``: fitted only to be judged, a fit on all rows to follow): see
        :func:`manyheads.train.fit.refit_head`. None for a head that is not linear."""
        from ..train.fit import refit_head

        return refit_head(
            self,  # type: ignore[arg-type]
            name,
            texts,
            labels,
            groups=groups,
            seed=seed,
            features=features,
            search=search,
            candidate=candidate,
        )

    def add_head_from_labels(
        self,
        name: str,
        labels: Mapping[str, str | None] | Sequence[str],
        kind: str = "multiclass",
        *,
        path_sep: str = "::",
        templates: Sequence[str] | None = None,
    ) -> Any:
        """Add (or replace) head ``name`` made from ``labels``: each label's name mapped
        to an optional description (or a list of names). The trunk encodes them; the
        head answers at once, and learns from rows (``fit_head`` on its name, updates)
        with these weights as its prior. See :mod:`manyheads.train.zero_shot`."""
        from ..train.zero_shot import add_head_from_labels

        return add_head_from_labels(
            self,
            name,
            labels,
            kind,
            path_sep=path_sep,
            templates=templates,
        )

    def head_labels(self, name: str) -> dict[str, str] | None:
        """The label names and descriptions head ``name`` was made from (None: it was
        trained on rows alone)."""
        from ..train.zero_shot import made_from

        found = made_from(self.head_info[name]) if name in self.heads else None
        return None if found is None else found[0].as_dict()

    def relabel_head(self, name: str, labels: Mapping[str, str | None]) -> Any:
        """Change descriptions of head ``name``'s labels (``{label: description}``; a
        label it was not made from is refused) and build it again: from the names alone,
        or, when it has learnt from kept rows, fitted on them again with the new prior."""
        from ..train.zero_shot import check_label_names

        current = self.head_labels(name)
        if current is None:
            raise DataError(f"head {name!r} was not made from label names; nothing to relabel")
        if not isinstance(labels, Mapping) or not labels:
            raise DataError(f"head {name!r}: relabel takes a mapping of labels to descriptions")
        unknown = [k for k in labels if k not in current]
        if unknown:
            raise DataError(
                f"head {name!r} has no label {unknown[0]!r}; its labels: {', '.join(current)}"
            )
        info = self.head_info[name]
        head = self.heads[name]
        merged = {**current, **{k: (v or "") for k, v in labels.items()}}
        kind = str(info["kind"])
        path_sep = getattr(head, "path_sep", "::")
        check_label_names(name, merged, kind, path_sep)
        templates = (info.get("made") or {}).get("templates")
        kept = self.training_data(name)
        if kept is None:
            return self.add_head_from_labels(
                name, merged, kind, path_sep=path_sep, templates=templates
            )
        # the new descriptions first (the prior is read from them), then the rows again
        self.add_head_from_labels(name, merged, kind, path_sep=path_sep, templates=templates)
        recipe = dict(info.get("fit") or {})
        keys = ("C", "thresholds", "val_fraction", "class_weight")
        options = {k: recipe[k] for k in keys if k in recipe}
        texts, rows, groups = kept
        return self.fit_head(name, texts, rows, kind, groups=groups, path_sep=path_sep, **options)
