import hashlib
import time
import uuid
from functools import cache
from importlib.metadata import PackageNotFoundError, version


def completion_id(prefix: str = "chatcmpl") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


@cache
def system_fingerprint() -> str:
    """Changes when the software that shapes outputs changes."""
    parts = []
    for package in ("mlx", "mlx-lm", "mlx-django-server"):
        try:
            parts.append(f"{package}={version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package}=?")
    return "fp_" + hashlib.sha256(";".join(parts).encode()).hexdigest()[:10]
