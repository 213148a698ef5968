from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference"

    def ready(self) -> None:
        # Registers the start-up check on file modes (config/checks.py).
        from config import checks  # noqa: F401
