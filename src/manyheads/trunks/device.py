"""Where a trunk runs: the device a user names (``cpu``, ``cuda``, ``cuda:N``, ``auto``),
checked once, and what running there needs (the half-precision type of a GPU, the token
budget of a batch from its free memory, tokenising overlapped with the device's work).

Nothing here imports torch for a machine that shows no GPU: ``auto`` on a machine
without an NVIDIA or AMD driver is the CPU at once, so a bundle whose trunk needs no
torch loads as fast as before.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ConfigError

__all__ = [
    "CPU",
    "DEVICE_CHOICES",
    "PRECISIONS",
    "Device",
    "DeviceLike",
    "device_name",
    "overlapped",
    "resolve_device",
]

DEVICE_CHOICES = "cpu, cuda, cuda:N or auto"
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""A trunk's arithmetic: ``auto`` is half precision on a GPU (bf16 where it has it,
else fp16) and fp32 on the CPU."""

_CUDA = re.compile(r"cuda(?::(\d+))?")
# files an NVIDIA (or AMD ROCm) driver puts on a machine; without any, no GPU is there
_DRIVER_SIGNS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/gpus", "/dev/kfd")


@dataclass(frozen=True)
class Device:
    """A device resolved: ``kind`` ``"cpu"`` or ``"cuda"``, and the GPU's ``index``."""

    kind: str = "cpu"
    index: int = 0

    @property
    def accelerated(self) -> bool:
        """Whether it is a GPU (its trunk computes the heads' first layer there too)."""
        return self.kind != "cpu"

    @property
    def torch_name(self) -> str:
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    def __str__(self) -> str:
        return self.torch_name


CPU = Device()
DeviceLike = str | Device | None


def _gpu_driver_seen() -> bool:
    return any(os.path.exists(p) for p in _DRIVER_SIGNS)


def _cuda_count() -> tuple[int, str]:
    """How many GPUs torch sees, and torch's version ("" when torch is missing)."""
    if importlib.util.find_spec("torch") is None:
        return 0, ""
    import torch

    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except (RuntimeError, AssertionError):  # a CPU build, or a driver torch cannot use
        count = 0
    return count, str(torch.__version__)


def device_name(value: Any) -> str:
    """``value`` as a device name, checked without asking for a GPU: ``cpu``, ``auto`` or
    ``cuda:N`` (``cuda`` is ``cuda:0``); one line else (:class:`ConfigError` naming
    ``{device}``)."""
    text = value.strip().lower() if isinstance(value, str) else None
    if text in ("cpu", "auto"):
        return str(text)
    found = _CUDA.fullmatch(text) if text is not None else None
    if found is None:
        raise ConfigError(
            f"{{device}} must be one of {DEVICE_CHOICES}, got {value!r}", options=("device",)
        )
    return f"cuda:{int(found.group(1) or 0)}"


def resolve_device(value: DeviceLike) -> Device:
    """The device ``value`` names, checked: ``None`` and ``"cpu"`` are the CPU;
    ``"auto"`` the first GPU torch sees, else the CPU; ``"cuda"`` / ``"cuda:N"`` that
    GPU, refused in one line (:class:`ConfigError` naming ``{device}``) where torch
    sees none."""
    if isinstance(value, Device):
        return value
    if value is None:
        return CPU
    name = device_name(value)
    if name == "cpu":
        return CPU
    if name == "auto":
        if not _gpu_driver_seen():
            return CPU
        count, _ = _cuda_count()
        return Device("cuda", 0) if count else CPU
    text = str(value).strip().lower()  # as given, for the messages
    index = int(name.partition(":")[2])
    count, version = _cuda_count()
    if not count:
        why = (
            "torch is not installed"
            if not version
            else f"torch {version} sees no CUDA GPU on this machine"
        )
        raise ConfigError(
            f"{{device}} {text}: {why} (install a CUDA build of torch on a machine with a "
            "GPU, or use cpu or auto)",
            options=("device",),
        )
    if index >= count:
        raise ConfigError(
            f"{{device}} {text}: torch sees {count} GPU(s), numbered 0 to {count - 1}",
            options=("device",),
        )
    return Device("cuda", index)


def check_precision(value: Any) -> str:
    """``value`` when it is one of :data:`PRECISIONS`; one line else."""
    if value not in PRECISIONS:
        raise ConfigError(
            f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}",
            options=("precision",),
        )
    return str(value)


def torch_dtype(torch: Any, device: Device, precision: str) -> Any:
    """The torch dtype a model runs in on ``device`` at ``precision`` (``auto``: bf16 on
    a GPU that has it, else fp16; fp32 on the CPU)."""
    if precision == "auto":
        if not device.accelerated:
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def token_budget(torch: Any, device: Device, bytes_per_token: int, share: float = 0.25) -> int:
    """Padded tokens one batch may hold on ``device``: a ``share`` of its free memory
    over what a token costs in one layer's activations (no limit on the CPU, whose
    batches are counted in rows)."""
    if not device.accelerated:
        return 1 << 62
    free, _ = torch.cuda.mem_get_info(device.torch_name)
    return int(max(4096, min(free * share / max(1, bytes_per_token), 1 << 22)))


T = TypeVar("T")
U = TypeVar("U")


def overlapped(items: Iterable[T], prepare: Callable[[T], U]) -> Iterator[U]:
    """``prepare(item)`` of each item in order, the next one prepared on a thread while
    the caller works on the current one (tokenising the next chunk of texts while the
    device encodes this one: the Rust tokenizer releases the GIL)."""
    with ThreadPoolExecutor(1, thread_name_prefix="manyheads-prepare") as pool:
        pending: Future[U] | None = None
        for item in items:
            ahead = pool.submit(prepare, item)
            if pending is not None:
                yield pending.result()
            pending = ahead
        if pending is not None:
            yield pending.result()
