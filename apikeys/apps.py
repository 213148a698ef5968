from django.apps import AppConfig


class ApiKeysConfig(AppConfig):
    name = "apikeys"
    verbose_name = "API keys"
    default_auto_field = "django.db.models.BigAutoField"
