import pytest

from inference.engine.stops import StopStringMatcher

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


def feed_all(stops, pieces):
    matcher = StopStringMatcher(tuple(stops))
    released = []
    for piece in pieces:
        text, hit = matcher.feed(piece)
        released.append(text)
        if hit:
            return released, True
    released.append(matcher.flush())
    return released, False


@pytest.mark.parametrize(
    ("stops", "pieces", "text", "hit"),
    [
        ([], ["Hello", " world"], "Hello world", False),
        (["END"], ["Hello", " E", "N", "D", " more"], "Hello ", True),
        (["END"], ["Hello E", "NOUGH"], "Hello ENOUGH", False),
        (["\n\n"], ["a\n", "\nb"], "a", True),
        (["ab", "b"], ["xab"], "x", True),  # the earliest match wins
        (["stop"], ["unstoppable"], "un", True),
        (["<|x|>"], ["<", "|", "x", "|", ">"], "", True),
    ],
)
def test_stop_strings(stops, pieces, text, hit):
    released, was_hit = feed_all(stops, pieces)
    assert "".join(released) == text
    assert was_hit is hit


def test_never_releases_a_partial_stop_string():
    matcher = StopStringMatcher(("STOP",))
    assert matcher.feed("go S") == ("go ", False)
    assert matcher.feed("T") == ("", False)
    assert matcher.feed("ay") == ("STay", False)
