"""Progress on stderr, when a caller asks for it: a bar on a terminal, plain lines for a
stage that takes a while when stderr is a file or a pipe, so a job run from a script or
a CI log says what it is doing."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm

LINE_AFTER = 1.0  # a stage that ends sooner says nothing, off a terminal
LINE_EVERY = 30.0  # seconds between two lines of one long stage, off a terminal


def progress_bar(
    *, total: int | None, desc: str, enabled: bool = True, **kwargs: Any
) -> tqdm | LineProgress:
    """When ``enabled``: a tqdm bar on stderr if it is a terminal, else
    :class:`LineProgress` lines; when not, a bar that shows nothing."""
    if enabled and not sys.stderr.isatty():
        return LineProgress(total=total, desc=desc, unit=str(kwargs.get("unit", "")))
    return tqdm(total=total, desc=desc, disable=not enabled, file=sys.stderr, leave=False, **kwargs)


class LineProgress:
    """The part of tqdm's interface the jobs use, written as plain lines on stderr, for a
    log: what the stage is at (its step: ``set_postfix_str``, a head's name) once it has
    run :data:`LINE_AFTER` seconds, again every :data:`LINE_EVERY` seconds, and a line
    when it ends; a stage that ends sooner says nothing (so a quick command, or one that
    fails at once, prints only its own lines)."""

    def __init__(self, *, total: int | None, desc: str, unit: str = "") -> None:
        self.total, self.desc, self.unit = total, desc, f" {unit}" if unit else ""
        self.n = 0
        self._step = ""
        self._start = time.monotonic()
        self._said_any = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._tell, daemon=True)
        self._thread.start()

    def _counts(self) -> str:
        of = "" if self.total is None else f"/{self.total:,}"
        return f"{self.n:,}{of}{self.unit}"

    def _line(self, text: str) -> None:
        print(f"{self.desc}: {text}", file=sys.stderr, flush=True)
        self._said_any = True

    def _now(self) -> str:
        step = f"{self._step}, " if self._step else ""
        return f"{step}{self._counts()} after {time.monotonic() - self._start:.0f} s"

    def _tell(self) -> None:
        wait = LINE_AFTER
        while not self._stop.wait(wait):
            with self._lock:
                self._line(self._now())
            wait = LINE_EVERY

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        step = "" if self.total is None else f" ({self.n + 1}/{self.total})"
        with self._lock:
            self._step = f"{text}{step}"
            if self._said_any:
                self._line(self._step)

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        """Figures a bar shows beside itself (a loss): not written."""

    def _end(self, how: str) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        with self._lock:
            if self._said_any:
                self._line(f"{how}, {self._counts()} in {time.monotonic() - self._start:.1f} s")

    def close(self) -> None:
        self._end("done")

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        self._end("done" if kind is None else "stopped")


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


@contextlib.contextmanager
def transformers_quiet() -> Iterator[list[str]]:
    """Keep transformers' own messages off stderr while it loads a model or tokenizer
    (its log lines, progress bars and Python warnings); its errors still raise, and the
    caller says them in one line. Yields the log lines it kept back, for that line
    (:func:`reported_cause`)."""
    import logging
    import warnings

    said: list[str] = []
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        yield said
        return

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    keep = _Keep(logging.WARNING)
    root = hf_logging.get_logger()
    hf_logging.disable_default_handler()
    root.addHandler(keep)
    try:
        with transformers_bars(False), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield said
    finally:
        root.removeHandler(keep)
        hf_logging.enable_default_handler()


def reported_cause(exc: BaseException, said: list[str]) -> str:
    """One line for a failure of a foreign loader: the first line of ``exc``, or, when it
    points at a report it logged (kept back in ``said``), that report's first problem."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if "report" in first.lower():
        for message in said:
            for line in message.splitlines():
                cells = [c.strip() for c in line.split("|")]
                if len(cells) >= 3 and cells[1] in ("MISMATCH", "MISSING", "UNEXPECTED"):
                    return f"{cells[0]}: {cells[2]}"
    return first if len(first) <= 300 else first[:297] + "..."
