from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference"

    def ready(self) -> None:
        # The start-up check on file modes registers itself on import (config/checks.py); the
        # catalog's admin reaches the pool through its seam (catalog/pool_seam.py), filled
        # here: the catalog sits below inference and never imports it.
        from catalog import pool_seam
        from config import checks  # noqa: F401
        from inference.pool_ops import EnginePool

        pool_seam.register(EnginePool())
