"""Checks that keep bad catalog entries in the admin form instead of failing at load time."""

import re
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

public_id_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$",
    "Use letters, digits, '.', '_', ':' and '-' (no slashes or spaces); start with a letter "
    "or digit.",
)

# owner/name as the Hugging Face hub spells it.
HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def validate_hf_repo(value: str) -> None:
    if not HF_REPO.match(value) or ".." in value or value.endswith(".git"):
        raise ValidationError(f"{value!r} is not a Hugging Face repo id like 'owner/name'.")


def validate_adapter_dir(value: str) -> None:
    """A folder mlx-lm's `load(adapter_path=)` reads."""
    path = Path(value)
    if not path.is_absolute():
        raise ValidationError("Give an absolute path.")
    missing = [
        n for n in ("adapter_config.json", "adapters.safetensors") if not (path / n).is_file()
    ]
    if missing:
        raise ValidationError(f"{value} has no {' and no '.join(missing)}: not an mlx-lm adapter.")


def validate_model_dir(value: str) -> None:
    path = Path(value)
    if not path.is_absolute():
        raise ValidationError("Give an absolute path.")
    if not path.is_dir():
        raise ValidationError(f"{value} is not a directory on this server.")
    if not (path / "config.json").is_file():
        raise ValidationError(f"{value} has no config.json: not an MLX model directory.")
    if not any(path.glob("*.safetensors")):
        raise ValidationError(f"{value} has no .safetensors weights.")


def validate_string_list(value: object) -> None:
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise ValidationError('Give a JSON list of non-empty strings, e.g. ["<|im_end|>"].')


def validate_regex_list(value: object) -> None:
    validate_string_list(value)
    for pattern in value:  # type: ignore[union-attr]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValidationError(f"{pattern!r} is not a valid regular expression: {exc}") from exc
