"""Staff powers are Django permissions (catalog.CatalogModel's Meta): a staff session without
one gets a 403 where the admin token or a superuser goes through."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from catalog.models import CatalogModel


@pytest.fixture
def tiny_entry(db, tiny_dir):
    return CatalogModel.objects.create(public_id="tiny-perm", location=str(tiny_dir))


def staff_client(django_user_model, *permissions: str, name: str = "operator") -> Client:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=permissions))
    browser = Client()
    browser.force_login(user)
    return browser


CHAT = {"model": "tiny-perm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_staff_without_permissions_may_look_but_not_operate(django_user_model, tiny_entry):
    browser = staff_client(django_user_model)
    assert browser.get("/dashboard/state").status_code == 200  # the dashboard: any staff
    for url in ("/control/models/tiny-perm/warm", "/control/models/tiny-perm/unload"):
        refused = browser.post(url)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "permission_denied"
    assert browser.get("/control/pool").status_code == 403
    assert browser.get("/playground").status_code == 403
    assert browser.post("/dashboard/chat", CHAT, content_type="application/json").status_code == 403
    changelist = browser.get("/admin/catalog/ggufimport/")
    assert changelist.status_code == 403  # importing models is a permission of its own


def test_each_permission_grants_its_power(django_user_model, tiny_entry):
    browser = staff_client(django_user_model, "operate_pool", "use_playground", "import_models")
    warmed = browser.post("/control/models/tiny-perm/warm")
    assert warmed.status_code == 200 and warmed.json()["id"] == "tiny-perm"
    assert browser.get("/control/pool").status_code == 200
    assert browser.post("/control/models/tiny-perm/unload").json()["unloaded"] is True
    assert browser.get("/playground").status_code == 200
    answer = browser.post("/dashboard/chat", CHAT, content_type="application/json")
    assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
    assert browser.get("/admin/catalog/ggufimport/").status_code == 200
    assert browser.get("/admin/catalog/ggufimport/add/").status_code == 200


def test_admin_pool_actions_need_the_pool_permission(django_user_model, tiny_entry):
    browser = staff_client(django_user_model, "view_catalogmodel", "change_catalogmodel")
    page = browser.get("/admin/catalog/catalogmodel/").content.decode()
    assert 'value="enable"' in page and 'value="warm"' not in page
    operator = staff_client(django_user_model, "view_catalogmodel", "operate_pool", name="pool")
    page = operator.get("/admin/catalog/catalogmodel/").content.decode()
    assert 'value="warm"' in page and 'value="unload"' in page
