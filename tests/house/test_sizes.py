"""Size settings ("8GiB", "512MB", "1000000") are read with pydantic's ByteSize."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings import byte_size

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


@pytest.mark.parametrize(
    ("text", "value"),
    [("1000", 1000), ("8GiB", 8 * 2**30), ("512MB", 512 * 10**6), ("1.5 gib", int(1.5 * 2**30))],
)
def test_byte_sizes(monkeypatch, text, value):
    monkeypatch.setenv("SOME_SIZE", text)
    assert byte_size("SOME_SIZE", "1GiB") == value


def test_the_default_applies_when_unset(monkeypatch):
    monkeypatch.delenv("SOME_SIZE", raising=False)
    assert byte_size("SOME_SIZE", "4MiB") == 4 * 2**20
    assert byte_size("SOME_SIZE", 12345) == 12345


@pytest.mark.parametrize("text", ["", "lots", "8 parsecs", "-1GB"])
def test_a_bad_size_names_the_setting(monkeypatch, text):
    monkeypatch.setenv("SOME_SIZE", text)
    with pytest.raises(ImproperlyConfigured, match=r"SOME_SIZE=.* is not a byte size"):
        byte_size("SOME_SIZE", "1GiB")
