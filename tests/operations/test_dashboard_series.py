"""The dashboard's history (observability/series.py): samples of the real engine's health and of
real requests' records, the ring's bound, the sampler's thread, /dashboard/series, and the
model a refused request asked for."""

import dataclasses
import time
from types import SimpleNamespace

from inference import runtime
from inference.edge.body import STRANGER_BODY_BYTES
from inference.observability import records
from inference.observability.history import history, rss_bytes
from inference.observability.series import ALL, QUANTITIES, Sampler, Series, percentile
from tests.support.helpers import CHAT, SHORT_CHAT

BODY = {**SHORT_CHAT, "max_tokens": 5}


def latest_record() -> SimpleNamespace:
    """The last finished request as the series observes it (records.recent keeps dicts)."""
    return SimpleNamespace(**records.recent[0])


def test_a_sample_of_real_requests_and_the_engine(client, tiny_entry):
    series = Series()
    for _ in range(2):  # the same prompt twice: the second reads it from the prefix cache
        assert client.post(CHAT, BODY, content_type="application/json").status_code == 200
        series.observe(latest_record())
    series.sample(runtime.engine_handle().health(), rss_bytes())
    (sample,) = series.samples()
    q = sample.quantities
    # Decoded in the engine's last 10 seconds, which these requests just were.
    assert q["generated_tokens_per_second"]["tiny"] > 0
    assert q["running"]["tiny"] == 0 and q["queued"] == {ALL: 0}
    assert q["prompt_tokens_per_second"]["tiny"] > 0
    assert 0 < q["prefix_cache_hit_rate"]["tiny"] < 1
    assert 0 < q["time_to_first_token"]["tiny p50"] <= q["time_to_first_token"]["tiny p95"]
    assert q["memory"]["weights"] > 0 and q["memory"]["process RSS"] > q["memory"]["weights"]
    assert q["draft_acceptance"]["tiny"] is None  # no drafter: nothing verified
    series.sample(runtime.engine_handle().health(), rss_bytes())  # nothing finished since
    q = series.samples()[-1].quantities
    assert q["prompt_tokens_per_second"]["tiny"] == 0.0
    assert q["time_to_first_token"] == {} and q["prefix_cache_hit_rate"] == {}


def test_a_refused_request_counts_nothing(client, tiny_entry):
    series = Series()
    assert (
        client.post(CHAT, {**BODY, "model": "nope"}, content_type="application/json").status_code
        == 404
    )
    series.observe(latest_record())
    series.sample(None, 1)
    q = series.samples()[0].quantities
    assert q["prompt_tokens_per_second"] == {} and q["time_to_first_token"] == {}
    assert q["memory"] == {"weights": None, "prefix cache": None, "process RSS": 1}


def test_speculation_is_counted_per_interval(client, tiny_entry):
    client.post(CHAT, BODY, content_type="application/json")
    health = runtime.engine_handle().health()
    tiny = next(m for m in health.models if m.id == "tiny")

    def drafted(total: int, kept: int):
        model = dataclasses.replace(tiny, draft_tokens=total, accepted_draft_tokens=kept)
        return dataclasses.replace(health, state=dataclasses.replace(health.state, models=(model,)))

    series = Series()
    for total, kept in ((10, 5), (30, 20), (30, 20), (4, 1)):  # the last: reloaded, from zero
        series.sample(drafted(total, kept), None)
    acceptance = [s.quantities["draft_acceptance"]["tiny"] for s in series.samples()]
    assert acceptance == [0.5, 0.75, None, 0.25]


def test_the_ring_keeps_the_last_span_and_aligns_columns():
    series = Series(interval=1, span=3)
    for at in range(5):
        series.observe(
            SimpleNamespace(
                model=f"m{at}", prompt_tokens=10, cached_tokens=5, time_to_first_token=0.5
            )
        )
        series.sample(None, 100 + at, at=float(at))
    document = series.document()
    assert document["at"] == [2.0, 3.0, 4.0]
    assert set(document["quantities"]) == set(QUANTITIES)
    # m0 and m1 fell out of the ring; the others have a value only in their own sample.
    prompt = document["quantities"]["prompt_tokens_per_second"]
    assert set(prompt) == {"m2", "m3", "m4"}
    assert [v is not None for v in prompt["m3"]] == [False, True, False]
    assert document["quantities"]["memory"]["process RSS"] == [102, 103, 104]
    assert document["quantities"]["prefix_cache_hit_rate"]["m4"] == [None, None, 0.5]


def test_percentiles_by_nearest_rank():
    ordered = [float(n) for n in range(1, 21)]
    assert percentile(ordered, 0.5) == 10 and percentile(ordered, 0.95) == 19
    assert percentile([3.0], 0.95) == 3.0


def test_the_sampler_samples_on_its_own_thread(client, tiny_entry):
    client.post(CHAT, BODY, content_type="application/json")
    series = Series(interval=0.05, span=10)
    sampler = Sampler(series, runtime.engine_handle().health, rss_bytes)
    sampler.start()
    time.sleep(0.5)
    sampler.stop()
    samples = series.samples()
    assert len(samples) >= 3
    assert all(s.quantities["memory"]["weights"] > 0 for s in samples)
    assert samples[0].at < samples[-1].at


def test_dashboard_series_is_for_staff(client, admin_client, tiny_entry):
    assert client.get("/dashboard/series").status_code == 401
    admin_client.post(CHAT, BODY, content_type="application/json")
    history.sample(runtime.engine_handle().health(), rss_bytes())  # not waiting for the thread
    document = admin_client.get("/dashboard/series").json()
    assert document["interval_seconds"] == 5 and document["span_seconds"] == 3600
    assert len(document["at"]) >= 1
    memory = document["quantities"]["memory"]
    assert memory["weights"][-1] > 0 and memory["process RSS"][-1] > 0
    assert admin_client.get("/dashboard/state").json()["series_interval_seconds"] == 5


def test_refused_requests_keep_the_model_they_asked_for(client, tiny_entry, settings):
    unknown = client.post(CHAT, {**BODY, "model": "no-such-model"}, content_type="application/json")
    assert unknown.status_code == 404
    assert records.recent[0]["asked_model"] == "no-such-model" and records.recent[0]["model"] == ""
    invalid = client.post(
        CHAT, {"model": "tiny", "messages": "hi"}, content_type="application/json"
    )
    assert invalid.status_code == 400
    assert records.recent[0]["asked_model"] == "tiny" and records.recent[0]["status"] == 400
    assert client.post(CHAT, b"{not json", content_type="application/json").status_code == 400
    assert records.recent[0]["asked_model"] == ""
    settings.REQUIRE_API_KEY = True  # no key sent: refused before the body is read
    refused = client.post(
        CHAT, {**BODY, "model": "asked-without-key"}, content_type="application/json"
    )
    assert refused.status_code == 401
    assert records.recent[0]["asked_model"] == "asked-without-key"
    # A refused stranger's long body is not read for its model.
    long = {**BODY, "model": "long-without-key", "stop": ["x" * (STRANGER_BODY_BYTES)]}
    assert client.post(CHAT, long, content_type="application/json").status_code == 401
    assert records.recent[0]["asked_model"] == ""
    settings.REQUIRE_API_KEY = False
    served = client.post(CHAT, BODY, content_type="application/json")
    assert served.status_code == 200
    assert records.recent[0]["asked_model"] == "tiny" and records.recent[0]["model"] == "tiny"
