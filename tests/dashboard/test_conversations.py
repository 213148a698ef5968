"""The chat page's conversations: each staff member's own, created, listed, opened, saved,
renamed and deleted through /dashboard/conversations; nobody else's reachable."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from dashboard.models import Conversation

TURNS = [
    {"role": "user", "content": "Hi, **there**"},
    {
        "role": "assistant",
        "content": "Hello!",
        "reasoning": "A greeting.",
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 12, "completion_tokens": 3},
        "tokens_per_second": 21.5,
    },
]


def member(django_user_model, name: str, *, chat: bool = True, csrf: bool = False) -> Client:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    if chat:
        user.user_permissions.add(Permission.objects.get(codename="use_playground"))
    browser = Client(enforce_csrf_checks=csrf)
    browser.force_login(user)
    return browser


def create(browser: Client, **fields) -> dict:
    body = {"model": "tiny", "title": "First", "turns": TURNS, **fields}
    response = browser.post("/dashboard/conversations", body, content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.django_db
def test_a_conversation_is_kept_whole_and_listed_newest_first(django_user_model):
    browser = member(django_user_model, "ada")
    sampling = {"temperature": 0.7, "max_tokens": 64, "tools": [{"type": "function"}]}
    first = create(browser, system_prompt="Be brief.", sampling=sampling)
    second = create(browser, title="Second", turns=[])
    opened = browser.get(f"/dashboard/conversations/{first['id']}").json()
    assert opened["turns"] == TURNS  # an answer's reasoning, usage and speed come back too
    assert opened["system_prompt"] == "Be brief."
    assert opened["sampling"] == sampling
    listed = browser.get("/dashboard/conversations").json()["data"]
    assert [row["id"] for row in listed] == [second["id"], first["id"]]
    assert listed[1] | {"updated": None} == {
        "id": first["id"],
        "title": "First",
        "model": "tiny",
        "turn_count": 2,
        "updated": None,
    }


@pytest.mark.django_db
def test_saving_renaming_and_deleting(django_user_model):
    browser = member(django_user_model, "ada")
    made = create(browser, turns=TURNS[:1])
    url = f"/dashboard/conversations/{made['id']}"
    saved = browser.patch(url, {"turns": TURNS}, content_type="application/json").json()
    assert saved["turns"] == TURNS and saved["title"] == "First"
    renamed = browser.patch(url, {"title": "Greetings"}, content_type="application/json").json()
    assert renamed["title"] == "Greetings" and renamed["turns"] == TURNS
    assert browser.delete(url).json() == {"id": made["id"], "deleted": True}
    assert browser.get(url).status_code == 404
    assert not Conversation.objects.exists()


@pytest.mark.django_db
def test_another_members_conversations_do_not_exist_for_you(django_user_model):
    ada = member(django_user_model, "ada")
    made = create(ada)
    grace = member(django_user_model, "grace")
    url = f"/dashboard/conversations/{made['id']}"
    assert grace.get("/dashboard/conversations").json() == {"data": []}
    for response in (
        grace.get(url),
        grace.patch(url, {"title": "mine"}, content_type="application/json"),
        grace.delete(url),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["message"] == f"No conversation {made['id']}."
    assert Conversation.objects.get().title == "First"


@pytest.mark.django_db
def test_who_may_keep_conversations(django_user_model, client, settings):
    token = {"HTTP_AUTHORIZATION": f"Bearer {settings.ADMIN_TOKEN}"}
    refused = client.get("/dashboard/conversations", **token)
    assert refused.status_code == 403
    assert "staff login" in refused.json()["error"]["message"]
    assert client.get("/dashboard/conversations").status_code == 401
    no_chat = member(django_user_model, "bob", chat=False)
    assert no_chat.get("/dashboard/conversations").status_code == 403
    # A session's writes carry the CSRF token, as every other staff write does.
    guarded = member(django_user_model, "eve", csrf=True)
    body = {"model": "tiny"}
    posted = guarded.post("/dashboard/conversations", body, content_type="application/json")
    assert posted.status_code == 403 and posted.json()["error"]["message"] == "CSRF check failed."


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "wanted"),
    [
        ({"title": "no model"}, "needs the model"),
        ({"model": "tiny", "turns": [{"role": "system", "content": "x"}]}, "turns"),
        ({"model": "tiny", "sampling": {"temperature": 3}}, "temperature"),
        ({"model": "tiny", "colour": "blue"}, "colour"),
        ({"model": "tiny", "title": "x" * 201}, "title"),
    ],
)
def test_bad_fields_are_refused_with_the_reason(django_user_model, body, wanted):
    browser = member(django_user_model, "ada")
    response = browser.post("/dashboard/conversations", body, content_type="application/json")
    assert response.status_code == 400
    assert wanted in response.json()["error"]["message"] + str(response.json()["error"]["param"])
    assert not Conversation.objects.exists()
