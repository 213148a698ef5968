import pytest

from catalog.models import CatalogModel, ModelFamily

ADD_URL = "/admin/catalog/catalogmodel/add/"


def form(**fields):
    data = {
        "public_id": "new-model",
        "display_name": "",
        "source": "local",
        "location": "",
        "family": "",
        "enabled": "on",
        "system_prompt": "",
        "default_max_tokens": "",
        "default_temperature": "",
        "default_top_p": "",
        "context_length": "",
        "compute_format": "auto",
        "_save": "Save",
    }
    return {**data, **fields}


def test_admin_requires_login(client, db):
    response = client.get("/admin/catalog/catalogmodel/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_admin_lists_catalog_and_families(admin_client, tiny_dir):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    page = admin_client.get("/admin/catalog/catalogmodel/")
    assert page.status_code == 200
    assert b"tiny" in page.content
    assert b'<div id="site-name"><a href="/admin/">MLX server</a></div>' in page.content
    families = admin_client.get("/admin/catalog/modelfamily/")
    assert families.status_code == 200
    for family in ModelFamily.objects.all():
        assert family.name.encode() in families.content


def test_admin_adds_a_local_model(admin_client, tiny_dir):
    response = admin_client.post(ADD_URL, form(location=str(tiny_dir)))
    assert response.status_code == 302, response.content
    assert CatalogModel.objects.get(public_id="new-model").location == str(tiny_dir)


def test_admin_accepts_a_hub_repo_without_fetching_it(admin_client):
    response = admin_client.post(ADD_URL, form(source="hf", location="mlx-community/Qwen3-4bit"))
    assert response.status_code == 302
    assert CatalogModel.objects.filter(public_id="new-model").exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"location": "/definitely/not/here"}, b"is not a directory on this server"),
        ({"location": "relative/path"}, b"Give an absolute path"),
        ({"location": "/tmp"}, b"has no config.json"),
        ({"source": "hf", "location": "not a repo"}, b"is not a Hugging Face repo id"),
        ({"source": "hf", "location": "../../etc"}, b"is not a Hugging Face repo id"),
        ({"public_id": "has space", "location": "/tmp"}, b"no slashes or spaces"),
        ({"public_id": "a/b", "location": "/tmp"}, b"no slashes or spaces"),
        ({"default_temperature": "5"}, b"less than or equal to 2.0"),
    ],
)
def test_admin_form_errors_instead_of_crashes(admin_client, fields, message):
    response = admin_client.post(ADD_URL, form(**fields))
    assert response.status_code == 200
    assert message in response.content
    assert not CatalogModel.objects.exists()


def test_family_form_validates_lists(admin_client):
    response = admin_client.post(
        "/admin/catalog/modelfamily/add/",
        {
            "slug": "custom",
            "name": "Custom",
            "adapter": "chatml",
            "priority": "50",
            "name_patterns": '["(unclosed"]',
            "model_types": "[]",
            "extra_stop_tokens": '"not a list"',
            "stop_strings": "[]",
            "chat_template": "",
            "_save": "Save",
        },
    )
    assert response.status_code == 200
    assert b"is not a valid regular expression" in response.content
    assert b"Give a JSON list of non-empty strings" in response.content
    assert not ModelFamily.objects.filter(slug="custom").exists()
