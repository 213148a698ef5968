"""The catalog admin's forms: list settings (aliases, family patterns, stop tokens) typed one
value per line in a textarea, instead of a JSON box that refuses `gpt-4o-mini` without its
brackets and quotes (the model field's own validators still check the list); help texts shown
as written; and the catalog model's form, which keeps a context within the model's own."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.html import escape as escape_html
from django.utils.text import capfirst

from catalog.models import CatalogModel

# The admin's list settings, by model: which are edited one per line, and which of them keep
# their spaces and read escapes (a stop string may start with a space or hold a newline).
LIST_FIELDS = {"aliases", "name_patterns", "model_types", "extra_stop_tokens", "stop_strings"}
VERBATIM_FIELDS = {"extra_stop_tokens", "stop_strings"}

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
ESCAPED = {value: f"\\{key}" for key, value in ESCAPES.items()}


def unescape(line: str) -> str:
    r"""`\n`, `\t`, `\r` and `\\` become what they name; any other backslash stays."""
    out, chars = [], iter(line)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, "")
        out.append(ESCAPES.get(following, char + following))
    return "".join(out)


def escape(value: str) -> str:
    return "".join(ESCAPED.get(char, char) for char in value)


class LinesWidget(forms.Textarea):
    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__({"rows": 3, "cols": 60, "spellcheck": "false", **(attrs or {})})


class LinesField(forms.Field):
    """A list of strings typed one per line; blank lines are ignored. `verbatim` keeps each
    line's spaces and reads `\\n`, `\\t`, `\\r` and `\\\\` escapes (for stop strings)."""

    widget = LinesWidget

    def __init__(self, *, verbatim: bool = False, **kwargs: Any) -> None:
        self.verbatim = verbatim
        kwargs.pop("encoder", None)  # what a JSONField hands its form field
        kwargs.pop("decoder", None)
        kwargs.pop("max_length", None)
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, str):  # the text as typed, shown again with its errors
            return value
        if value is None:
            return ""
        lines = [str(item) for item in value]
        return "\n".join(escape(line) if self.verbatim else line for line in lines)

    def to_python(self, value: Any) -> list[str]:
        if isinstance(value, list):
            return value
        text = value or ""
        refuse_json(text)
        lines = text.splitlines()
        if self.verbatim:
            return [unescape(line) for line in lines if line.strip()]
        return [line.strip() for line in lines if line.strip()]

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(data) != list(initial or [])
        except ValidationError:
            return True


def refuse_json(text: str) -> None:
    """A list typed as JSON (what this box took before) is refused with how to write it; read
    as one line, it would silently become one odd value."""
    stripped = text.strip()
    if not stripped.startswith("["):
        return
    try:
        parsed = json.loads(stripped)
    except ValueError:
        return  # a line that only starts with "[" (a regex class, "[/INST]") is a value
    if isinstance(parsed, list):
        example = "\n".join(str(item) for item in parsed[:2]) or "gpt-4o-mini"
        raise ValidationError(
            f"Write one value per line, without JSON brackets or quotes, e.g.:\n{example}",
            code="json",
        )


def lines_formfield(db_field: Any, **kwargs: Any) -> forms.Field:
    """The one-per-line field for a model's list setting, with the model field's label, help
    and blank-ness."""
    help_text = str(db_field.help_text or "")
    verbatim = db_field.name in VERBATIM_FIELDS
    how = "One per line."
    if verbatim:
        how += r" Spaces count; write a newline as \n, a tab as \t, a backslash as \\."
    return LinesField(
        verbatim=verbatim,
        required=not db_field.blank,
        label=kwargs.get("label") or capfirst(db_field.verbose_name),
        help_text=f"{how} {help_text}".strip(),
        initial=[],
    )


class PlainAdminFields:
    """Before admin.ModelAdmin in an admin's bases: list settings edited one per line, and
    help texts shown as written (the admin renders them as HTML, which would swallow
    `<think>` and `<tool_call>`)."""

    def formfield_for_dbfield(self, db_field: Any, request: Any, **kwargs: Any) -> Any:
        if db_field.name in LIST_FIELDS and isinstance(db_field, models.JSONField):
            field = lines_formfield(db_field, **kwargs)
        else:
            field = super().formfield_for_dbfield(db_field, request, **kwargs)  # type: ignore[misc]
        if field is not None and field.help_text:
            field.help_text = escape_html(str(field.help_text))
        return field


class CatalogModelForm(forms.ModelForm):
    """The catalog admin's form: beyond the model's own checks, a context within the model's
    own (commands may go past it; see CatalogModel.clean_context_fits)."""

    class Meta:
        model = CatalogModel
        fields = "__all__"

    def _post_clean(self) -> None:
        super()._post_clean()  # the instance built from the form and fully cleaned
        if "context_length" not in self.fields or self.has_error("context_length"):
            return
        try:
            self.instance.clean_context_fits()
        except ValidationError as exc:
            self._update_errors(exc)
