"""Stored responses: retrieval, deletion, input items, previous_response_id chains, key scoping,
retention (the purge command and the automatic purge) and the admin list."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from apikeys.models import ApiKey
from storedresponses import retention
from storedresponses.durations import parse_duration
from storedresponses.models import StoredResponse
from tests.api.responses.test_responses import FORCED
from tests.helpers import assert_error
from tests.responses_support import (
    RESPONSES,
    create,
    stream,
    valid_item_list,
    valid_response,
)


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


def test_automatic_purge_at_most_once_an_hour(client, tiny_entry, settings, monkeypatch):
    settings.RESPONSES_RETENTION = 3600
    monkeypatch.setattr(retention, "_last_auto_purge", None)
    old_response("resp_expired", timedelta(hours=2))
    create(client)
    assert not StoredResponse.objects.filter(pk="resp_expired").exists()
    old_response("resp_expired_later", timedelta(hours=2))
    create(client)  # within the hour: no second purge
    assert StoredResponse.objects.filter(pk="resp_expired_later").exists()


def test_no_automatic_purge_when_kept_forever(client, tiny_entry, settings, monkeypatch):
    settings.RESPONSES_RETENTION = 0
    monkeypatch.setattr(retention, "_last_auto_purge", None)
    old_response("resp_ancient", timedelta(days=3650))
    create(client)
    assert StoredResponse.objects.filter(pk="resp_ancient").exists()


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
