"""Stored responses: retrieval, deletion, input items, previous_response_id chains, key scoping,
retention (the purge command and the automatic purge) and the admin list."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from importlib import import_module

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apikeys.auth import ANONYMOUS
from apikeys.models import ApiKey
from inference.serving.responses import store
from storedresponses import retention
from storedresponses.durations import parse_duration
from storedresponses.fields import JSONText
from storedresponses.models import StoredResponse
from tests.api.responses.test_responses import FORCED
from tests.support.helpers import assert_error
from tests.support.responses_support import (
    RESPONSES,
    create,
    stream,
    valid_item_list,
    valid_response,
)

measure_existing = import_module("storedresponses.migrations.0002_sizes").measure_existing


def get(client, response_id: str, suffix: str = "", **headers):
    return client.get(f"{RESPONSES}/{response_id}{suffix}", headers=headers)


def items_of(client, response_id: str, query: str = "") -> dict:
    response = client.get(f"{RESPONSES}/{response_id}/input_items{query}")
    assert response.status_code == 200, response.content
    body = response.json()
    valid_item_list(body)
    return body


def test_retrieval_returns_the_created_object(client, tiny_entry):
    created = create(client, metadata={"a": "b"}, instructions="Be brief.").json()
    retrieved = get(client, created["id"])
    assert retrieved.status_code == 200
    assert retrieved.json() == created
    valid_response(retrieved.json())
    row = StoredResponse.objects.get(pk=created["id"])
    assert row.api_key is None  # anonymous scope: keys are not required in these tests
    assert row.usage == created["usage"]
    assert row.output == created["output"]


def test_any_text_a_client_sends_is_stored_and_given_back(client, tiny_entry):
    # PostgreSQL refuses NUL in text and \u0000 in jsonb; found by schemathesis on PostgreSQL.
    odd = "nul\x00 here"
    extra = {"x\x00": [odd]}  # an unknown key of `text`, kept as sent
    created = create(client, input=odd, instructions=odd, user=odd, metadata={"k": odd}, text=extra)
    assert created.status_code == 200, created.content
    body = created.json()
    row = StoredResponse.objects.get(pk=body["id"])
    assert (row.instructions, row.user, row.metadata) == (odd, odd, {"k": odd})
    assert get(client, body["id"]).json() == body
    (item,) = items_of(client, body["id"])["data"]
    assert item["content"][0]["text"] == odd


def test_store_false_keeps_nothing(client, tiny_entry):
    created = create(client, store=False).json()
    assert created["store"] is False
    assert not StoredResponse.objects.exists()
    assert_error(get(client, created["id"]), 404)


def test_delete(client, tiny_entry):
    response_id = create(client).json()["id"]
    deleted = client.delete(f"{RESPONSES}/{response_id}")
    assert deleted.status_code == 200
    assert deleted.json() == {"id": response_id, "object": "response", "deleted": True}
    assert_error(get(client, response_id), 404)
    assert_error(client.delete(f"{RESPONSES}/{response_id}"), 404)


def test_input_items_of_a_string_input(client, tiny_entry):
    response_id = create(client, input="Hello there").json()["id"]
    body = items_of(client, response_id)
    (item,) = body["data"]
    assert item["id"].startswith("msg_")
    assert item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "Hello there"}]
    assert body["object"] == "list"
    assert (body["first_id"], body["last_id"], body["has_more"]) == (item["id"], item["id"], False)


CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
    {"role": "user", "content": "Thanks"},
]


def test_input_items_pages_and_orders(client, tiny_entry):
    response_id = create(client, input=CONVERSATION).json()["id"]
    asc = items_of(client, response_id, "?order=asc")["data"]
    assert [i["type"] for i in asc] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    assert asc[4]["content"][0]["type"] == "output_text"  # assistant turns are output messages
    assert len({i["id"] for i in asc}) == 6
    desc = items_of(client, response_id)["data"]  # newest first by default, as OpenAI
    assert desc == asc[::-1]
    page = items_of(client, response_id, "?order=asc&limit=4")
    assert page["data"] == asc[:4] and page["has_more"] is True
    assert page["last_id"] == asc[3]["id"]
    rest = items_of(client, response_id, f"?order=asc&limit=4&after={page['last_id']}")
    assert rest["data"] == asc[4:] and rest["has_more"] is False


def test_a_streamed_response_is_stored_when_it_finishes(client, tiny_entry):
    _, _, events = stream({"max_output_tokens": 3, "metadata": {"via": "stream"}})
    final = events[-1][1]["response"]
    retrieved = get(client, final["id"]).json()
    assert retrieved == final
    assert items_of(client, final["id"])["data"][0]["content"][0]["text"] == "Hi"


def test_a_streamed_response_with_store_false_is_not_kept(tiny_entry):
    stream({"max_output_tokens": 2, "store": False})
    assert not StoredResponse.objects.exists()


# ------------------------------------------------------------------------------- chains


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "output_text", "text": text}]}


def test_previous_response_id_rebuilds_the_conversation(client, tiny_entry):
    first = create(client, input="Hi").json()
    second = create(client, input="Again", previous_response_id=first["id"]).json()
    assert second["previous_response_id"] == first["id"]
    valid_response(second)
    # The same conversation written out: the chain's input, its output, then the new input.
    spelled = create(
        client,
        input=[
            {"role": "user", "content": "Hi"},
            assistant(first["output_text"]),
            {"role": "user", "content": "Again"},
        ],
    ).json()
    assert second["usage"]["input_tokens"] == spelled["usage"]["input_tokens"]
    assert second["output_text"] == spelled["output_text"]
    third = create(client, input="More", previous_response_id=second["id"]).json()
    spelled_three = create(
        client,
        input=[
            {"role": "user", "content": "Hi"},
            assistant(first["output_text"]),
            {"role": "user", "content": "Again"},
            assistant(second["output_text"]),
            {"role": "user", "content": "More"},
        ],
    ).json()
    assert third["usage"]["input_tokens"] == spelled_three["usage"]["input_tokens"]
    # input_items lists only each response's own input.
    assert len(items_of(client, third["id"])["data"]) == 1


def test_instructions_are_not_carried_over(client, tiny_entry):
    first = create(client, input="Hi", instructions="Answer in French.").json()
    second = create(client, input="Again", previous_response_id=first["id"]).json()
    assert second["instructions"] is None
    without = create(
        client,
        input=[
            {"role": "user", "content": "Hi"},
            assistant(first["output_text"]),
            {"role": "user", "content": "Again"},
        ],
    ).json()
    assert second["usage"]["input_tokens"] == without["usage"]["input_tokens"]


def test_function_call_round_trip_through_the_chain(client, tiny_entry):
    called = create(client, **FORCED, input="Weather in Paris?", max_output_tokens=20).json()
    (call,) = called["output"]
    answer = create(
        client,
        tools=FORCED["tools"],
        previous_response_id=called["id"],
        input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}],
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    valid_response(body)
    assert body["output"][0]["type"] == "message"
    assert body["usage"]["input_tokens"] > called["usage"]["input_tokens"]
    # Without the chain, the output answers no call.
    lone = create(
        client,
        input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}],
    )
    assert_error(lone, 400, "input.0.call_id")


def test_deleting_a_parent_keeps_the_child(client, tiny_entry):
    first = create(client).json()
    second = create(client, input="Again", previous_response_id=first["id"]).json()
    client.delete(f"{RESPONSES}/{first['id']}")
    retrieved = get(client, second["id"]).json()
    assert retrieved["previous_response_id"] is None
    assert retrieved["output"] == second["output"]
    assert create(client, previous_response_id=second["id"]).status_code == 200


# ------------------------------------------------------------------------------ scoping


@pytest.fixture
def two_keys(db):
    secrets = {}
    for name in ("alice", "bob"):
        key = ApiKey(name=name)
        secrets[name] = key.new_secret()
        key.save()
    return secrets


def as_key(client, secret: str, method: str, path: str, body: dict | None = None):
    headers = {"Authorization": f"Bearer {secret}"}
    if body is None:
        return getattr(client, method)(path, headers=headers)
    return client.post(path, body, content_type="application/json", headers=headers)


def test_a_key_sees_only_its_own_responses(client, tiny_entry, two_keys):
    alice, bob = two_keys["alice"], two_keys["bob"]
    body = {"model": "tiny", "input": "Hi", "max_output_tokens": 2}
    created = as_key(client, alice, "post", RESPONSES, body).json()
    path = f"{RESPONSES}/{created['id']}"
    assert StoredResponse.objects.get(pk=created["id"]).api_key.name == "alice"
    assert as_key(client, alice, "get", path).json() == created
    assert_error(as_key(client, bob, "get", path), 404)
    assert_error(as_key(client, bob, "get", f"{path}/input_items"), 404)
    assert_error(as_key(client, bob, "delete", path), 404)
    follow_up = {**body, "previous_response_id": created["id"]}
    assert_error(
        as_key(client, bob, "post", RESPONSES, follow_up),
        404,
        "previous_response_id",
        "previous_response_not_found",
    )
    assert as_key(client, alice, "post", RESPONSES, follow_up).status_code == 200
    assert as_key(client, alice, "get", path).status_code == 200  # bob's delete did nothing


def test_deleting_a_key_deletes_its_responses(client, tiny_entry, two_keys):
    body = {"model": "tiny", "input": "Hi", "max_output_tokens": 1}
    as_key(client, two_keys["alice"], "post", RESPONSES, body)
    as_key(client, two_keys["bob"], "post", RESPONSES, body)
    ApiKey.objects.get(name="alice").delete()
    assert [r.api_key.name for r in StoredResponse.objects.all()] == ["bob"]


def test_anonymous_callers_share_the_anonymous_scope(client, tiny_entry):
    response_id = create(client).json()["id"]
    assert get(client, response_id).status_code == 200
    key = ApiKey(name="late")
    secret = key.new_secret()
    key.save()  # from now on keys are required: the anonymous responses are out of reach
    assert_error(get(client, response_id, Authorization=f"Bearer {secret}"), 404)


# ---------------------------------------------------------------------------- retention


def old_response(response_id: str, age: timedelta) -> StoredResponse:
    return StoredResponse.objects.create(
        id=response_id,
        model="tiny",
        status="completed",
        created_at=timezone.now() - age,
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("45m", 2700), ("90s", 90), ("3600", 3600), ("0", 0)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-1d", "soon", "3 days", "1y"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_purge_command(db, capsys, settings):
    old_response("resp_old", timedelta(days=2))
    old_response("resp_new", timedelta(minutes=5))
    call_command("purge_responses", "--older-than", "1d")
    assert list(StoredResponse.objects.values_list("id", flat=True)) == ["resp_new"]
    assert "deleted 1 stored responses" in capsys.readouterr().out
    settings.RESPONSES_RETENTION = 60  # the default: the setting
    call_command("purge_responses")
    assert not StoredResponse.objects.exists()


def test_purge_command_refuses_unclear_requests(db, settings):
    settings.RESPONSES_RETENTION = 0
    with pytest.raises(CommandError, match="keep forever"):
        call_command("purge_responses")
    with pytest.raises(CommandError, match="not a duration"):
        call_command("purge_responses", "--older-than", "soon")


def test_a_request_never_purges(client, tiny_entry, settings):
    # Purging is the timer's and the command's, never a client's request to wait for.
    settings.RESPONSES_RETENTION = 3600
    old_response("resp_expired", timedelta(hours=2))
    assert create(client).status_code == 200
    assert StoredResponse.objects.filter(pk="resp_expired").exists()


def chained(count: int, age: timedelta, prefix: str) -> list[StoredResponse]:
    """`count` responses of that age, each following the one before."""
    rows: list[StoredResponse] = []
    for index in range(count):
        row = old_response(f"{prefix}{index}", age)
        row.previous_response = rows[-1] if rows else None
        text = {"type": "input_text", "text": "x" * 100}
        row.input_items = [{"id": f"msg_{prefix}{index}", "type": "message", "role": "user"}]
        row.input_items[0].update(status="completed", content=[text])
        row.save()
        rows.append(row)
    return rows


def test_purge_deletes_in_batches_without_reading_the_json(db):
    expired = chained(5, timedelta(days=2), "resp_old")
    fresh = old_response("resp_fresh", timedelta(minutes=1))
    fresh.previous_response = expired[-1]
    fresh.save()
    with CaptureQueriesContext(connection) as queries:
        assert retention.purge_older_than(86400, batch=2) == 5
    assert list(StoredResponse.objects.values_list("id", flat=True)) == ["resp_fresh"]
    assert StoredResponse.objects.get(pk="resp_fresh").previous_response_id is None
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert reads and not any("input_items" in sql for sql in reads), reads
    deletes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("DELETE")]
    assert len(deletes) == 3  # 2 + 2 + 1


def test_purge_command_takes_a_batch_size(db, capsys):
    chained(3, timedelta(days=2), "resp_old")
    call_command("purge_responses", "--older-than", "1d", "--batch-size", "1")
    assert not StoredResponse.objects.exists()
    assert "deleted 3 stored responses" in capsys.readouterr().out
    with pytest.raises(CommandError, match="at least 1"):
        call_command("purge_responses", "--older-than", "1d", "--batch-size", "0")


@pytest.mark.django_db(transaction=True)
def test_the_timer_purges_on_its_own_thread(settings):
    settings.RESPONSES_RETENTION = 3600
    old_response("resp_expired", timedelta(hours=2))
    old_response("resp_kept", timedelta(minutes=5))
    timer = retention.PurgeTimer(every=3600)
    timer.start()
    try:
        deadline = time.monotonic() + 30
        while timer.rounds < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        timer.stop()
    assert timer.rounds == 1  # at start, then not again within the interval
    assert list(StoredResponse.objects.values_list("id", flat=True)) == ["resp_kept"]


def test_one_timer_per_process_and_none_when_kept_forever(transactional_db, settings, monkeypatch):
    monkeypatch.setattr(retention, "_timer", None)
    settings.RESPONSES_RETENTION = 0
    assert retention.start_purge_timer() is None
    settings.RESPONSES_RETENTION = 3600
    settings.RESPONSES_PURGE_INTERVAL = 0  # purged by the command only
    assert retention.start_purge_timer() is None
    # A timer that has nothing to purge, since nothing is old enough: it only has to start.
    settings.RESPONSES_PURGE_INTERVAL = 3600
    settings.RESPONSES_RETENTION = 10 * 365 * 86400
    try:
        timer = retention.start_purge_timer()
        assert timer is not None and timer.is_alive() and timer.name == "purge-responses"
        assert retention.start_purge_timer() is timer
    finally:
        retention.stop_purge_timer()
    assert not timer.is_alive()


# --------------------------------------------------------------------------- size limits


@pytest.fixture
def nowhere(db):
    """A model whose files do not exist: any engine work for it fails, so a request for it
    that gets its 413 or 429 was refused before any."""
    from catalog.models import CatalogModel

    return CatalogModel.objects.create(public_id="nowhere", location="/nonexistent/model")


def reasoning_item(size: int) -> dict:
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r" * size}]}


def test_the_stored_size_is_measured(client, tiny_entry):
    created = create(client, **FORCED, input=CONVERSATION, max_output_tokens=20).json()
    row = StoredResponse.objects.get(pk=created["id"])
    columns = [f for f in StoredResponse._meta.concrete_fields if isinstance(f, JSONText)]
    texts = {f.name: f.get_prep_value(getattr(row, f.name)) for f in columns}
    assert row.stored_bytes == sum(len(text or "") for text in texts.values())
    assert row.items_bytes == len(texts["input_items"]) + len(texts["output"])


def test_the_migration_measures_responses_stored_before(db):
    from django.apps import apps

    row = chained(1, timedelta(minutes=1), "resp_before")[0]
    StoredResponse.objects.update(stored_bytes=0, items_bytes=0)
    measure_existing(apps, None)
    measured = StoredResponse.objects.get(pk=row.pk)
    row.measure()
    assert (measured.stored_bytes, measured.items_bytes) == (row.stored_bytes, row.items_bytes)
    assert row.items_bytes > 100


def test_a_huge_reasoning_item_is_refused_before_any_work(client, nowhere):
    # Found on main: 3 MiB of reasoning stored while input_tokens was 31.
    body = {"model": "nowhere", "input": [{"role": "user", "content": "Hi"}]}
    body["input"].append(reasoning_item(3 * 2**20))
    response = client.post(RESPONSES, body, content_type="application/json")
    error = assert_error(response, 413, "input.1", "item_too_large")
    assert "RESPONSES_MAX_ITEM_BYTES" in error["message"] and "store: false" in error["message"]
    assert not StoredResponse.objects.exists()


def test_a_string_input_over_the_cap_is_named_input(client, nowhere, settings):
    settings.RESPONSES_MAX_ITEM_BYTES = 1000
    response = create(client, model="nowhere", input="x" * 1000)
    assert_error(response, 413, "input", "item_too_large")
    assert create(client, model="nowhere", input="x" * 100).status_code != 413


def test_store_false_is_not_measured(client, tiny_entry, settings):
    settings.RESPONSES_MAX_ITEM_BYTES = 1000
    settings.RESPONSES_MAX_BYTES_PER_KEY = 1
    big = [{"role": "user", "content": "Hi"}, reasoning_item(5000)]
    assert create(client, input=big, store=False).status_code == 200
    assert not StoredResponse.objects.exists()


def test_a_response_over_the_cap_names_its_largest_field(client, nowhere, settings):
    settings.RESPONSES_MAX_STORED_BYTES = 4000
    tool = {"type": "function", "name": "f", "description": "d" * 3000, "parameters": {}}
    response = create(client, model="nowhere", tools=[tool, {**tool, "name": "g"}])
    error = assert_error(response, 413, "tools", "response_too_large")
    assert "RESPONSES_MAX_STORED_BYTES" in error["message"]
    items = [{"role": "user", "content": "y" * 1500} for _ in range(3)]
    assert_error(create(client, model="nowhere", input=items), 413, "input", "response_too_large")
    assert not StoredResponse.objects.exists()


def test_output_over_the_cap_is_refused_not_stored(client, tiny_entry, settings):
    # Output is measured when it is saved: the 413 names the item, nothing is kept.
    settings.RESPONSES_MAX_ITEM_BYTES = 300
    body = {"input": "Hi", "max_output_tokens": 60, "text": {"format": {"type": "text"}}}
    allowed = create(client, **body, store=False).json()  # the same greedy reply
    assert len(json.dumps(allowed["output"][0])) > 300
    assert_error(create(client, **body), 413, "output.0", "item_too_large")
    assert not StoredResponse.objects.exists()
    status, _, events = stream({**body, "temperature": 0})
    assert status == 200 and events[-1][0] == "error"
    assert not StoredResponse.objects.exists()


def test_a_key_over_its_quota_gets_a_429(client, tiny_entry, nowhere, two_keys, settings):
    alice, bob = two_keys["alice"], two_keys["bob"]
    body = {"model": "tiny", "input": "Hi", "max_output_tokens": 2}
    assert as_key(client, alice, "post", RESPONSES, body).status_code == 200
    used = StoredResponse.objects.get().stored_bytes
    settings.RESPONSES_MAX_BYTES_PER_KEY = used + 10
    refused = as_key(client, alice, "post", RESPONSES, {**body, "model": "nowhere"})
    error = assert_error(refused, 429, None, "insufficient_quota")
    assert error["type"] == "insufficient_quota" and "this API key's" in error["message"]
    assert StoredResponse.objects.count() == 1
    # store=false is not counted; another key has its own quota.
    assert as_key(client, alice, "post", RESPONSES, {**body, "store": False}).status_code == 200
    assert as_key(client, bob, "post", RESPONSES, body).status_code == 200
    settings.RESPONSES_MAX_BYTES_PER_KEY = 0  # no quota
    assert as_key(client, alice, "post", RESPONSES, body).status_code == 200


def test_anonymous_callers_share_one_quota(client, tiny_entry, nowhere, settings):
    assert create(client).status_code == 200
    settings.RESPONSES_MAX_BYTES_PER_KEY = StoredResponse.objects.get().stored_bytes + 10
    error = assert_error(create(client, model="nowhere"), 429, None, "insufficient_quota")
    assert "anonymous" in error["message"]


# ------------------------------------------------------------------------- chain walks


def test_a_chain_past_its_depth_is_refused(client, nowhere, settings):
    rows = chained(3, timedelta(minutes=1), "resp_chain")
    settings.RESPONSES_MAX_CHAIN_DEPTH = 2
    response = create(client, model="nowhere", previous_response_id=rows[-1].id)
    error = assert_error(response, 400, "previous_response_id", "chain_too_long")
    assert "RESPONSES_MAX_CHAIN_DEPTH" in error["message"]


def test_a_chain_past_its_weight_is_refused(client, nowhere, settings):
    rows = chained(3, timedelta(minutes=1), "resp_chain")
    settings.RESPONSES_MAX_CHAIN_BYTES = rows[0].items_bytes * 2
    response = create(client, model="nowhere", previous_response_id=rows[-1].id)
    assert_error(response, 400, "previous_response_id", "chain_too_large")


def test_a_chain_walk_reads_only_ids_sizes_and_items(db):
    rows = chained(4, timedelta(minutes=1), "resp_chain")
    StoredResponse.objects.filter(pk__in=[r.pk for r in rows]).update(tools="[]", usage="{}")
    with CaptureQueriesContext(connection) as queries:
        items = store._conversation_before(ANONYMOUS, rows[-1].id)
    assert items == [row.input_items[0] for row in rows]
    reads = [q["sql"] for q in queries]
    assert len(reads) == 5  # one per link, then the items of all four at once
    assert all('"tools"' not in sql and '"usage"' not in sql for sql in reads)
    assert sum('"input_items"' in sql for sql in reads) == 1


# -------------------------------------------------------------------------------- admin

ADMIN_LIST = "/admin/storedresponses/storedresponse/"


def test_admin_lists_searches_and_filters(admin_client, client, tiny_entry):
    first = create(client, input="Hi").json()["id"]
    second = create(client, input="Again", max_output_tokens=1).json()["id"]
    page = admin_client.get(ADMIN_LIST)
    assert page.status_code == 200
    assert first.encode() in page.content and second.encode() in page.content
    found = admin_client.get(ADMIN_LIST, {"q": first})
    assert first.encode() in found.content and second.encode() not in found.content
    status = StoredResponse.objects.get(pk=second).status
    filtered = admin_client.get(ADMIN_LIST, {"status__exact": status, "model": "tiny"})
    assert filtered.status_code == 200


def test_admin_is_read_only_but_deletes(admin_client, client, tiny_entry):
    response_id = create(client, input="Hello admin").json()["id"]
    assert admin_client.get(f"{ADMIN_LIST}add/").status_code == 403
    view = admin_client.get(f"{ADMIN_LIST}{response_id}/change/")
    assert view.status_code == 200
    assert b"Hello admin" in view.content  # the input items are shown
    assert b'name="_save"' not in view.content
    edit = admin_client.post(f"{ADMIN_LIST}{response_id}/change/", {"model": "other"})
    assert edit.status_code == 403
    assert StoredResponse.objects.get(pk=response_id).model == "tiny"
    deleted = admin_client.post(f"{ADMIN_LIST}{response_id}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert not StoredResponse.objects.exists()


def test_stored_json_is_the_wire_json(client, tiny_entry):
    created = create(client, **FORCED, max_output_tokens=20).json()
    row = StoredResponse.objects.get(pk=created["id"])
    assert json.loads(json.dumps(row.output)) == created["output"]
    assert row.tool_choice == {"type": "function", "name": "get_weather"}
