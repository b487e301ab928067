"""Progress bars that show on a terminal and stay quiet when output is piped."""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm


def progress_bar(*, total: int, desc: str, enabled: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr, shown only when ``enabled`` and stderr is a terminal."""
    show = enabled and sys.stderr.isatty()
    return tqdm(total=total, desc=desc, disable=not show, file=sys.stderr, leave=False, **kwargs)
