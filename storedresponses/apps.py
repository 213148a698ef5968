from django.apps import AppConfig


class StoredResponsesConfig(AppConfig):
    name = "storedresponses"
    verbose_name = "Stored responses"
    default_auto_field = "django.db.models.BigAutoField"
