"""Progress bars that show on a terminal and stay quiet when output is piped."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm


def progress_bar(*, total: int | None, desc: str, enabled: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr, shown only when ``enabled`` and stderr is a terminal."""
    show = enabled and sys.stderr.isatty()
    return tqdm(total=total, desc=desc, disable=not show, file=sys.stderr, leave=False, **kwargs)


@contextlib.contextmanager
def transformers_bars(enabled: bool) -> Iterator[None]:
    """Turn transformers' own progress bars (loading, saving) off unless ``enabled``."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        yield
        return
    was = hf_logging.is_progress_bar_enabled()
    if was and not enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was and not enabled:
            hf_logging.enable_progress_bar()
