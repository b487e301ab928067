"""The service's background updates (``serve --learn``), each run in a process of its own:
refitting a head is seconds of CPU that, in the serving process, would hold the
interpreter the answers need. The process starts at the lowest priority (``nice 19``)
on one thread for numpy, scipy and torch, so what an update costs the answers is a
share of one core, loads the bundle from its folder, updates the heads that are due
(:meth:`~manyheads.bundle.Bundle.update_heads`, which saves, holding the folder's update
lock) and prints its report as JSON; the service then loads the saved bundle and serves
it between two trunk passes. A service that stops kills an update still running: a
save is atomic, so the folder keeps the old head or the new."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import ManyheadsError

__all__ = ["Learner"]

_ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


class Learner:
    """Runs one update at a time, each in a fresh process."""

    def __init__(self, cache: Any) -> None:
        from ..cache import EmbeddingCache

        # the process opens the cache itself: by its path, or as the service was given it
        if isinstance(cache, EmbeddingCache):
            self.cache = str(cache.path)
        else:
            self.cache = "none" if cache is None else str(cache)
        self._proc: subprocess.Popen[bytes] | None = None

    def _run(self, folder: Path, heads: list[str], min_feedback: int) -> dict[str, Any]:
        nice = shutil.which("nice")
        cmd = [nice, "-n", "19"] if nice else []
        cmd += [sys.executable, "-m", "manyheads.serve.learner", str(folder), self.cache]
        cmd += [str(min_feedback), *heads]
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **_ONE_THREAD},
        )
        self._proc = proc
        try:
            out, err = proc.communicate()
        finally:
            self._proc = None
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            last = lines[-1][:500] if lines else f"exit status {proc.returncode}"
            raise ManyheadsError(f"the update failed: {last}")
        return dict(json.loads(out))

    async def update(self, folder: Path, heads: list[str], min_feedback: int) -> dict[str, Any]:
        """Update ``heads`` of the bundle at ``folder`` in a process; its report."""
        import asyncio

        return await asyncio.to_thread(self._run, folder, heads, min_feedback)

    def close(self) -> None:
        """Stop an update still running (killed: the folder keeps a whole bundle)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()


def main(argv: list[str]) -> None:
    """``python -m manyheads.serve.learner FOLDER CACHE MIN_FEEDBACK HEAD...``."""
    from ..bundle import Bundle

    folder, cache, min_feedback, *heads = argv
    setting: Any = None if cache == "none" else cache
    bundle = Bundle.load(folder, cache=setting)
    report = bundle.update_heads(heads, min_feedback=int(min_feedback), wait=False)
    print(json.dumps(report.to_dict()))


if __name__ == "__main__":
    main(sys.argv[1:])
