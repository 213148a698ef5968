"""The catalog's models, one module per kind: how models are prompted (`prompting`), the models
themselves (`catalog`), and the jobs that make them (`jobs`). Everything is named here too, as
Django's app registry and the migrations (catalog.models.validate_pattern) expect."""

from catalog.models.catalog import CatalogModel
from catalog.models.jobs import GGUFImport, HubPull, reap_lost_jobs, refuse_taken_id
from catalog.models.prompting import ModelFamily, PromptMetadataPattern, validate_pattern

__all__ = [
    "CatalogModel",
    "GGUFImport",
    "HubPull",
    "ModelFamily",
    "PromptMetadataPattern",
    "reap_lost_jobs",
    "refuse_taken_id",
    "validate_pattern",
]
