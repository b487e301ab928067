"""The trained byte encoder as a trunk: encodes with onnxruntime from its graph (or
with torch where there is none)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._io import GRAPH_FILE
from ...errors import ConfigError, ManyheadsError, require
from ..base import SpecFile, TrunkBase, check_texts, config_fingerprint, l2_normalise
from ..onnxrt import SideBySide
from .config import SPREADS, ByteConfig, byte_ids, expected_shapes
from .graph import export_graph, graph_initializers


class ByteTrunk(TrunkBase):
    """The trained byte encoder as a trunk. ``tier`` picks the nested dimension served
    (default: the largest); vectors are the first ``tier`` numbers, L2-normalised.

    With onnxruntime, ``encode`` runs its batches side by side, one thread each
    (``MANYHEADS_THREADS`` of them, default the usable CPUs), each batch on one core:
    the graph's operations are too small to share between cores well (``spread =
    "ops"`` runs one batch at a time over every core instead; bench/byte_speed.py
    times both)."""

    spread = "batches"
    type_name = "byte"
    has_tiers = True
    keeps_files = True
    hashed_files = (GRAPH_FILE,)

    @classmethod
    def spec_settings(cls) -> set[str]:
        # "graph" / "graph_sha256": what earlier versions wrote for "file" / "sha256"
        return {"config", "tier", "file", "sha256", "graph", "graph_sha256"}

    @classmethod
    def _graph_of(cls, options: dict[str, Any]) -> tuple[Any, Any]:
        if "file" in options or "sha256" in options:
            return options.get("file"), options.get("sha256")
        return options.get("graph"), options.get("graph_sha256")

    @classmethod
    def spec_files(cls, options: dict[str, Any]) -> list[SpecFile]:
        file, sha = cls._graph_of(options)
        key = "file" if "file" in options or "sha256" in options else "graph"
        return [] if file is None else [SpecFile(f"the byte trunk's {key!r}", file, sha, True)]

    @classmethod
    def from_spec(cls, options: dict[str, Any], base: Path | None) -> TrunkBase:
        file, sha = cls._graph_of(options)
        return cls(
            options.get("config"),
            tier=options.get("tier"),
            graph=file,
            graph_sha256=sha,
            folder=base,
        )

    def __init__(
        self,
        config: ByteConfig | dict[str, Any] | None = None,
        *,
        state: dict[str, np.ndarray] | None = None,
        tier: int | None = None,
        name: str = "byte",
        batch_size: int = 32,
        graph: str | None = None,
        graph_sha256: str | None = None,
        folder: str | Path | None = None,
    ) -> None:
        if isinstance(config, dict):
            config = ByteConfig.from_json(config)
        self.config = config or ByteConfig()
        self._name = name
        if tier is None:
            tier = self.config.dims[-1]
        if tier not in self.config.dims:
            raise ConfigError(
                f"byte trunk tier must be one of {list(self.config.dims)}, got {tier!r}"
            )
        self._dim = int(tier)  # the tier: a vector's first `tier` numbers
        self.batch_size = int(batch_size)
        self._state: dict[str, np.ndarray] = {}
        self._module: Any = None
        self._held_by: str | None = None  # SHA-256 of a graph known to hold these weights
        self._session: Any = None
        self._session_spread = self.spread  # the spread the session was opened for
        self._side = SideBySide("manyheads-byte")  # the threads of spread "batches"
        self._hashed: str | None = None
        # the ONNX graph of these weights (a file in ``folder``), if written
        self.graph, self.graph_sha256 = graph, graph_sha256
        self.folder = Path(folder) if folder is not None else None
        if graph is not None and (self.folder is None or not (self.folder / graph).is_file()):
            raise ManyheadsError(f"the byte trunk's graph {graph} is missing from {self.folder}")
        if state:
            self.load_state(state)

    @property
    def tier(self) -> int:
        return self._dim

    def _weights(self) -> dict[str, np.ndarray]:
        """The weights: as given, else read once from the graph's initializers (a bundle
        whose graph holds every weight unchanged stores them there only)."""
        if not self._state and self.graph is not None and self.folder is not None:
            where = self.folder / self.graph
            found = graph_initializers(where, set(expected_shapes(self.config)), self.graph_sha256)
            self._state = self._checked(found, f" (read from {where})")
            self._held_by = self.graph_sha256
        if not self._state:
            raise ManyheadsError("the byte trunk has no weights yet: train it first")
        return self._state

    def weights_in_graph(self) -> bool:
        """Whether the graph file holds every weight under its name, unchanged (the
        exporter may merge equal tensors; then the weights are stored beside it)."""
        if self.graph is None or self.folder is None or not self._state:
            return False
        if self._held_by is not None and self._held_by == self.graph_sha256:
            return True  # read from that graph, or checked against it already
        try:
            found = graph_initializers(self.folder / self.graph, set(self._state))
        except ManyheadsError:  # no onnx package here: keep the weights beside the graph
            return False
        held = found.keys() == self._state.keys() and all(
            found[k].dtype == v.dtype and np.array_equal(found[k], v)
            for k, v in self._state.items()
        )
        self._held_by = self.graph_sha256 if held else None
        return held

    @property
    def fingerprint(self) -> str:
        if self._hashed is None:
            state = self._weights()
            h = hashlib.sha256()
            for key in sorted(state):
                h.update(key.encode())
                h.update(np.ascontiguousarray(state[key]).tobytes())
            extra = {**self.config.to_json(), "tier": self.tier}
            self._hashed = config_fingerprint("byte", extra, h.digest())
        return self._hashed

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"type": "byte", "config": self.config.to_json(), "tier": self.tier}
        if self.graph is not None:
            spec["file"], spec["sha256"] = self.graph, self.graph_sha256
        return spec

    def state(self) -> dict[str, np.ndarray]:
        return dict(self._weights())

    def _checked(self, state: dict[str, np.ndarray], where: str = "") -> dict[str, np.ndarray]:
        expected = expected_shapes(self.config)
        got = {k: tuple(np.asarray(v).shape) for k, v in state.items()}
        if got != expected:
            missing = sorted(set(expected) - set(got))
            wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
            raise ManyheadsError(
                "byte trunk weights do not match its config"
                + where
                + (f"; missing {missing[:3]}" if missing else "")
                + (f"; wrong shape {wrong[:3]}" if wrong else "")
            )
        return {
            k: np.asarray(v, dtype=np.int8 if k == "bag.q" else np.float32)
            for k, v in state.items()
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self._state = self._checked(state)
        self._held_by = None
        self._module = None
        self._session = None
        self._hashed = None

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(self.config.dims)

    def with_tier(self, tier: int) -> ByteTrunk:
        """The same weights serving another nested dimension (same graph, batch size
        and spread)."""
        out = ByteTrunk(
            self.config, state=self._state, tier=tier, name=self.name, batch_size=self.batch_size
        )
        out.graph, out.graph_sha256, out.folder = self.graph, self.graph_sha256, self.folder
        if "spread" in vars(self):  # set on this trunk rather than on the class
            out.spread = self.spread
        return out

    def drop_graph(self) -> None:
        """Forget this trunk's ONNX graph (its weights read from it first): the next
        ``Bundle.save`` exports a new one, written by this version of manyheads (a
        bundle saved by an older one keeps its older graph until then)."""
        self._state = dict(self._weights())
        self.graph = self.graph_sha256 = self.folder = None
        self._session = None
        self._held_by = None

    def save_files(self, folder: Path) -> None:
        """Put this trunk's ONNX graph into ``folder`` (exported from the weights the first
        time, with torch; copied afterwards). Called by ``Bundle.save``. A tier's
        sub-bundle names its parent's graph (``../../model-SHA.onnx``): saved anywhere
        else, the bundle gets a copy of its own."""
        from ..._io import atomic_write_bytes, write_hashed

        if self.graph is not None and self.folder is not None:
            if Path(self.graph).name != self.graph:
                source = self.folder / self.graph
                if source.resolve() != (folder / self.graph).resolve():
                    self.graph, self.folder = source.name, source.parent
            target = folder / self.graph
            if not target.exists():
                atomic_write_bytes(target, (self.folder / self.graph).read_bytes())
            self.folder = folder
            return
        name, sha = write_hashed(folder, export_graph(self._ensure(), self.config), GRAPH_FILE)
        self.graph, self.graph_sha256, self.folder = name, sha, folder

    def share_graph(self, parent: Path, graph: str, sha256: str) -> None:
        """Use the graph file of the bundle at ``parent`` (its tier sub-bundles live in
        ``parent/tiers/<dim>/`` and name it ``../../GRAPH``)."""
        self.graph, self.graph_sha256 = f"../../{graph}", sha256
        self.folder = parent / "tiers" / str(self.tier)

    def _onnx(self) -> Any:
        """An onnxruntime session on the graph, or None (no graph, or no onnxruntime);
        opened anew when ``spread`` changed since (its thread count follows it)."""
        if self.spread not in SPREADS:
            raise ConfigError(
                f"byte trunk spread must be one of {', '.join(SPREADS)}, got {self.spread!r}"
            )
        if self._session is not None and self._session_spread != self.spread:
            self._session = None
        if self._session is None and self.graph is not None and self.folder is not None:
            import importlib.util

            if importlib.util.find_spec("onnxruntime") is None:
                return None
            from ..onnxrt import open_session

            threads = 1 if self.spread == "batches" else None  # None: every usable CPU
            self._session = open_session(
                self.folder / self.graph, self.graph_sha256, threads=threads, hint=""
            )
            self._session_spread = self.spread
        return self._session

    def _ensure(self) -> Any:
        if self._module is None:
            torch = require("torch", "transformers")
            from .model import build_module

            module = build_module(self.config)
            module.load_state_dict({k: torch.from_numpy(v) for k, v in self._weights().items()})
            module.eval()
            self._module = module
        return self._module

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ids, lengths = byte_ids(texts, self.config.max_bytes, self.config.stride)
        order = np.argsort(lengths, kind="stable")  # similar lengths together: less padding
        out = np.empty((len(texts), self.tier), dtype=np.float32)
        size = batch_size or self.batch_size
        session = self._onnx()
        pool = None
        if session is not None:
            pool = self._side.pool() if self.spread == "batches" else None
            if pool is not None:  # a batch for every thread, when there are texts enough
                size = max(1, min(size, -(-len(texts) // self._side.size)))

            def run(batch: np.ndarray) -> np.ndarray:
                return session.run(["embedding"], {"ids": batch})[0]

        else:
            torch = require("torch", "transformers")
            module = self._ensure()

            def run(batch: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return module(torch.from_numpy(batch)).numpy()

        groups = [order[start : start + size] for start in range(0, len(texts), size)]

        def one(rows: np.ndarray) -> None:
            out[rows] = run(ids[rows, : int(lengths[rows].max())])[:, : self.tier]

        if pool is not None and len(groups) > 1:
            for _ in pool.map(one, groups):  # onnxruntime lets go of the GIL while it runs
                pass
        else:
            for rows in groups:
                one(rows)
        return l2_normalise(out)

    def __repr__(self) -> str:
        return f"ByteTrunk(tier={self.tier}, dims={list(self.config.dims)})"
