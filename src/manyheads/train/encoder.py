"""The transformer as fine-tuning trains it: the trunk's own tokenizer, pooling and L2
normalisation, each text truncated to ``max_length`` tokens (special tokens kept), so
the task layers see the vectors the heads fitted later will see."""

from __future__ import annotations

import inspect
import json
import math
import numbers
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._progress import transformers_bars
from ..errors import ConfigError, ManyheadsError, require
from ..trunks.base import check_texts
from ..trunks.device import DeviceLike, resolve_device
from ..trunks.transformer import TransformerTrunk, sentence_transformers_settings, special_span

__all__ = ["TrainingEncoder", "positive_float", "positive_int", "training_embeddings"]


def positive_int(name: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{name} must be {what}, got {value!r}")
    return int(value)


def positive_float(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")
    return float(value)


class TrainingEncoder:
    """Tokenizer + transformer + pooling + L2 normalisation, as TransformerTrunk does it."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_length: int,
        pooling: str | None,
        device: DeviceLike = "cpu",
    ) -> None:
        self.torch = require("torch", "transformers")
        transformers = require("transformers", "transformers")
        # TransformerTrunk validates the folder and resolves pooling, window and tokenizer
        self.trunk = TransformerTrunk(model_dir, pooling=pooling)
        self.root = self.trunk.path
        self.model_dir, self.st_pooling, _ = sentence_transformers_settings(self.root)
        self.pooling = self.trunk.pooling
        positions = int(
            json.loads((self.model_dir / "config.json").read_text(encoding="utf-8")).get(
                "max_position_embeddings", 512
            )
        )
        self.max_length = min(max_length, positions)
        self.tokenizer = self.trunk.tokenizer
        try:
            model = transformers.AutoModel.from_pretrained(
                str(self.model_dir), local_files_only=True, use_safetensors=True
            )
        except (OSError, ValueError) as exc:
            raise ManyheadsError(f"cannot load the model in {self.model_dir}: {exc}") from exc
        # trained in float32 wherever it runs (a GPU too: its optimiser state stays exact)
        self.device = resolve_device(device).torch_name
        self.model = model.float().to(self.device)

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, truncated to ``max_length`` with special tokens kept."""
        limit = self.max_length
        out: list[list[int]] = []
        for enc in self.tokenizer.encode_batch(texts, add_special_tokens=True):
            ids = list(enc.ids)
            if len(ids) > limit:
                head, tail = special_span(enc)
                width = limit - head - (len(ids) - tail)
                if width < 1:
                    raise ConfigError(
                        f"max_length {limit} leaves no room for text between the special tokens"
                    )
                ids = ids[:head] + ids[head : head + width] + ids[tail:]
            out.append(ids)
        return out

    def embed(self, batch: list[list[int]]) -> Any:
        """Pooled, L2-normalised embeddings (a torch tensor) of a batch of token id lists."""
        torch = self.torch
        width = max(len(ids) for ids in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, : len(seq)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            m = mask.unsqueeze(-1).to(hidden.dtype)
            if self.pooling == "max":
                pooled = hidden.masked_fill(m == 0, float("-inf")).max(dim=1).values
            else:
                pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1, eps=1e-12)

    def embed_all(self, ids: list[list[int]], batch_size: int) -> Any:
        """Embeddings of every text in eval mode, without gradients (batched by length)."""
        torch = self.torch
        was_training = self.model.training
        self.model.eval()
        out = torch.zeros((len(ids), self.trunk.dim), dtype=torch.float32, device=self.device)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                out[idx] = self.embed([ids[i] for i in idx]).float()
        self.model.train(was_training)
        return out


def training_embeddings(
    model_dir: str | Path,
    texts: Sequence[str],
    *,
    max_length: int = 128,
    pooling: str | None = None,
    batch_size: int = 64,
) -> np.ndarray:
    """Embeddings as the fine-tuning code computes them (eval mode, texts truncated).

    The same pooling and L2 normalisation as :class:`TransformerTrunk`; for texts
    of at most ``max_length`` tokens the result equals ``TransformerTrunk(model_dir)``'s.
    """
    texts = check_texts(texts)
    max_length = positive_int("max_length", max_length)
    batch_size = positive_int("batch_size", batch_size)
    with transformers_bars(False):
        encoder = TrainingEncoder(model_dir, max_length=max_length, pooling=pooling)
    if not texts:
        return np.zeros((0, encoder.trunk.dim), dtype=np.float32)
    vectors = encoder.embed_all(encoder.token_ids(texts), batch_size)
    return np.asarray(vectors.numpy(), dtype=np.float32)


_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def save_encoder(
    encoder: TrainingEncoder,
    tmp: Path,
    *,
    pooling_changed: bool,
    info: dict[str, Any],
) -> None:
    """Write the fine-tuned model folder into ``tmp`` (same layout as the source)."""
    root, model_dir = encoder.root, encoder.model_dir
    sub = model_dir.relative_to(root)
    target = tmp / sub
    target.mkdir(parents=True, exist_ok=True)
    model = encoder.model
    kwargs: dict[str, Any] = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True
    model.save_pretrained(str(target), **kwargs)
    for stray in target.glob("*.bin"):  # only safetensors ever go out
        stray.unlink()
    if not any(target.glob("*.safetensors")):
        raise ManyheadsError(f"saving the model wrote no *.safetensors file into {target}")
    for name in _TOKENIZER_FILES:
        src = model_dir / name
        if src.is_file():
            shutil.copy2(src, target / name)
    modules_file = root / "modules.json"
    pool_cfg = {
        "word_embedding_dimension": encoder.trunk.dim,
        "pooling_mode_cls_token": encoder.pooling == "cls",
        "pooling_mode_mean_tokens": encoder.pooling == "mean",
        "pooling_mode_max_tokens": encoder.pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    if modules_file.is_file():
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        shutil.copy2(modules_file, tmp / "modules.json")
        for extra in ("config_sentence_transformers.json", "sentence_bert_config.json"):
            if (root / extra).is_file():
                shutil.copy2(root / extra, tmp / extra)
        if sub != Path(".") and (model_dir / "sentence_bert_config.json").is_file():
            shutil.copy2(model_dir / "sentence_bert_config.json", target)
        for module in modules:
            path = str(module.get("path", ""))
            mtype = str(module.get("type", ""))
            if not path or mtype.endswith("Transformer"):
                continue
            src = root / path
            if src.is_dir():
                shutil.copytree(src, tmp / path)
            if mtype.endswith("Pooling") and pooling_changed:
                (tmp / path).mkdir(parents=True, exist_ok=True)
                (tmp / path / "config.json").write_text(json.dumps(pool_cfg, indent=2))
    elif pooling_changed:
        # a plain Hugging Face folder means mean pooling; say the chosen one explicitly
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {
                "idx": 1,
                "name": "1",
                "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling",
            },
            {
                "idx": 2,
                "name": "2",
                "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize",
            },
        ]
        (tmp / "modules.json").write_text(json.dumps(modules, indent=2))
        (tmp / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": encoder.trunk.max_length, "do_lower_case": False})
        )
        (tmp / "1_Pooling").mkdir()
        (tmp / "1_Pooling" / "config.json").write_text(json.dumps(pool_cfg, indent=2))
        (tmp / "2_Normalize").mkdir()
    (tmp / "finetune.json").write_text(json.dumps(info, indent=2, default=str))
