"""Metrics, request records, the JSON request log and the dashboard's data, from real requests."""

import json
import logging

from prometheus_client.parser import text_string_to_metric_families

from inference.observability import records
from tests.support.helpers import CHAT, SHORT_CHAT, stream

BODY = {**SHORT_CHAT, "max_tokens": 5}


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_real_requests(client, tiny_entry):
    before = scrape(client)
    assert client.post(CHAT, BODY, content_type="application/json").status_code == 200
    status, _, _ = stream({**BODY, "stream": True})  # recorded when the stream is finished
    assert status == 200
    assert (
        client.post(CHAT, {**BODY, "model": "nope"}, content_type="application/json").status_code
        == 404
    )
    after = scrape(client)
    endpoint = "/v1/chat/completions"

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("inference_requests_total", endpoint=endpoint, model="tiny", status="200") == 2
    assert grew("inference_requests_total", endpoint=endpoint, model="", status="404") == 1
    assert grew("inference_generation_tokens_total", model="tiny") == 10
    assert grew("inference_prompt_tokens_total", model="tiny") > 0
    assert grew("inference_time_to_first_token_seconds_count", model="tiny") == 2
    assert grew("inference_inter_token_latency_seconds_count", model="tiny") == 8
    assert grew("inference_request_duration_seconds_count", endpoint=endpoint, model="tiny") == 2
    assert value(after, "inference_models_loaded") >= 1
    assert value(after, "inference_model_memory_bytes", model="tiny") > 0
    for gauge in ("inference_requests_running", "inference_requests_queued"):
        assert value(after, gauge) == 0
    assert ("inference_engine_restarts_total", ()) in after
    assert ("inference_model_evictions_total", ()) in after
    assert value(after, "process_resident_memory_bytes") > 0


def test_each_request_gets_an_id_and_a_record(client, tiny_entry):
    response = client.post(CHAT, BODY, content_type="application/json")
    request_id = response["X-Request-ID"]
    latest = records.recent[0]
    assert latest["id"] == request_id
    assert latest["endpoint"] == "/v1/chat/completions"
    assert latest["model"] == "tiny" and latest["status"] == 200
    assert latest["completion_tokens"] == 5 and latest["finish_reason"] == "length"
    assert latest["time_to_first_token"] > 0 and latest["duration"] >= latest["time_to_first_token"]


def test_json_request_log_when_asked(client, tiny_entry, settings, caplog):
    settings.REQUEST_LOG_JSON = True
    caplog.set_level(logging.INFO, logger="inference.requests")
    response = client.post(CHAT, BODY, content_type="application/json")
    line = json.loads(caplog.records[-1].getMessage())
    assert line["id"] == response["X-Request-ID"]
    assert line["endpoint"] == "/v1/chat/completions" and line["model"] == "tiny"
    assert line["status"] == 200 and line["finish_reason"] == "length"
    assert line["key"] == "anonymous"
    assert line["completion_tokens"] == 5 and line["prompt_tokens"] > 0
    assert line["duration"] > 0 and line["time_to_first_token"] > 0
    settings.REQUEST_LOG_JSON = False
    caplog.clear()
    client.post(CHAT, BODY, content_type="application/json")
    assert not [r for r in caplog.records if r.name == "inference.requests"]


def test_dashboard_requires_staff_and_shows_the_pool(client, admin_client, tiny_entry):
    assert client.get("/").status_code == 302
    assert client.get("/dashboard/state").status_code == 401
    page = admin_client.get("/")
    assert page.status_code == 200
    assert b'id="catalog"' in page.content
    admin_client.post(CHAT, BODY, content_type="application/json")
    state = admin_client.get("/dashboard/state").json()
    assert state["engine"]["ready"] is True
    assert state["backend"]["device"]
    assert state["engine"]["prefix_cache_disk"]["max_bytes"] > 0  # the disk tier, on by default
    # The process's engine may still hold models earlier tests loaded.
    assert "tiny" in [m["id"] for m in state["pool"]["models"]]
    assert state["pool"]["catalog"][0]["loaded"] is True
    assert state["recent"][0]["model"] == "tiny"


def test_playground_chat_needs_staff_and_csrf(tiny_entry, admin_user):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    assert browser.post("/dashboard/chat", BODY, content_type="application/json").status_code == 401
    browser.force_login(admin_user)
    refused = browser.post("/dashboard/chat", BODY, content_type="application/json")
    assert refused.status_code == 403  # no CSRF token
    browser.get("/playground")  # sets the CSRF cookie
    token = browser.cookies["csrftoken"].value
    answer = browser.post(
        "/dashboard/chat", BODY, content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert answer.status_code == 200
    assert answer.json()["usage"]["completion_tokens"] == 5
    assert records.recent[0]["key"] == "staff:admin"


def test_a_request_marks_its_model_used(client, tiny_entry):
    assert tiny_entry.last_used is None
    client.post(CHAT, BODY, content_type="application/json")
    tiny_entry.refresh_from_db()
    first = tiny_entry.last_used
    assert first is not None
    client.post(CHAT, BODY, content_type="application/json")
    tiny_entry.refresh_from_db()
    assert tiny_entry.last_used == first  # written at most once a minute
