"""The service's limits and options (:class:`ServeConfig`), and the listening check made
before anything is loaded."""

from __future__ import annotations

from dataclasses import dataclass

from ..bundle.feedback import FeedbackLimits
from ..bundle.pieces import check_long_texts
from ..errors import ConfigError, positive_int
from ..heads.record import HeadLimits
from .batcher import check_batching

__all__ = ["ServeConfig", "check_listen"]


@dataclass(frozen=True)
class ServeConfig:
    """Limits and options of the service (checked on creation)."""

    max_batch: int = 64
    max_wait_ms: float = 10.0
    max_texts: int = 1000
    max_chars: int = 100_000
    long_texts: str = "refuse"  # or "window": longer texts are read in pieces
    max_body_bytes: int = 16 * 1024 * 1024
    max_train_texts: int = 100_000
    max_pass_chars: int = 100_000  # characters in one trunk pass (one longer text: alone)
    # tokens in one trunk pass, for a trunk that reads token windows (a transformer):
    # a text of more is read over several passes, a few windows each
    max_pass_tokens: int = 512
    max_labels: int = HeadLimits.max_labels  # labels of one head (PUT, train)
    max_label_chars: int = HeadLimits.max_label_chars  # characters of one label
    max_heads: int = HeadLimits.max_heads  # heads of the bundle
    body_timeout_s: float = 30.0  # longest wait for the next piece of a request body
    api_keys: tuple[str, ...] = ()
    watch: bool = False
    watch_interval: float = 1.0
    # learning from corrections (POST /v1/feedback): with learn, a head is updated in
    # the background once it has learn_after corrections no update has judged
    learn: bool = False
    learn_after: int = 100
    learn_check_s: float = 5.0  # how often the corrections are counted
    max_feedback: int = 100_000  # corrections the bundle keeps before updates fold them in
    tier: int | None = None  # a byte bundle's heads at this tier (its tiers/<tier>/)
    device: str = "auto"  # where the trunk runs: auto, cpu, cuda, cuda:N
    # texts in one pass when the trunk runs on a GPU (max_pass_chars and max_pass_tokens
    # grow by as much as gpu_batch is over max_batch): a GPU is fed big batches
    gpu_batch: int = 1024

    def pass_limits(self, on_gpu: bool) -> tuple[int, int, int]:
        """``(texts, characters, tokens)`` one trunk pass may hold: ``max_batch``,
        ``max_pass_chars`` and ``max_pass_tokens``; on a GPU, ``gpu_batch`` texts and
        the characters and tokens in proportion."""
        if not on_gpu:
            return self.max_batch, self.max_pass_chars, self.max_pass_tokens
        grow = max(1.0, self.gpu_batch / self.max_batch)
        return (
            max(self.max_batch, self.gpu_batch),
            int(self.max_pass_chars * grow),
            int(self.max_pass_tokens * grow),
        )

    @property
    def feedback_limits(self) -> FeedbackLimits:
        return FeedbackLimits(max_rows=self.max_feedback, max_chars=self.max_chars)

    @property
    def limits(self) -> HeadLimits:
        return HeadLimits(
            max_labels=self.max_labels,
            max_label_chars=self.max_label_chars,
            max_heads=self.max_heads,
        )

    def __post_init__(self) -> None:
        check_batching(self.max_batch, self.max_wait_ms, self.max_pass_chars, self.max_pass_tokens)
        HeadLimits(self.max_labels, self.max_label_chars, self.max_heads)  # checks the caps
        if not isinstance(self.body_timeout_s, int | float) or not self.body_timeout_s > 0:
            raise ConfigError(f"body_timeout_s must be > 0, got {self.body_timeout_s!r}")
        if self.tier is not None and (
            not isinstance(self.tier, int) or isinstance(self.tier, bool) or self.tier < 1
        ):
            raise ConfigError(f"tier must be a positive integer, got {self.tier!r}")
        for name in (
            "max_texts",
            "max_chars",
            "max_body_bytes",
            "max_train_texts",
            "learn_after",
            "max_feedback",
            "gpu_batch",
        ):
            positive_int(getattr(self, name), name)
        check_long_texts(self.long_texts)
        if not isinstance(self.learn_check_s, int | float) or not self.learn_check_s > 0:
            raise ConfigError(f"learn_check_s must be > 0, got {self.learn_check_s!r}")
        if not self.watch_interval > 0:
            raise ConfigError(f"watch_interval must be > 0, got {self.watch_interval!r}")


def check_listen(host: str, port: int) -> None:
    """Refuse a port outside 1-65535, or an address this process cannot listen on
    (in use, not ours), in one line, before anything is loaded or announced."""
    import socket

    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"--port must be between 1 and 65535, got {port!r}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
