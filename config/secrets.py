import secrets
from pathlib import Path


def read_or_create_secret(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        key = secrets.token_urlsafe(50)
        path.write_text(key)
        path.chmod(0o600)
        return key
