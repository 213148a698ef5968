import pytest

from config.sizes import parse_size


@pytest.mark.parametrize(
    ("text", "value"),
    [("1000", 1000), ("8GiB", 8 * 2**30), ("512MB", 512 * 10**6), ("1.5 gib", int(1.5 * 2**30))],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "8 parsecs", "-1GB"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="not a byte size"):
        parse_size(text)
