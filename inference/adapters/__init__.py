"""Family adapters: how a model family is prompted and when its output ends.

Pure Python (no MLX, no ORM) so the catalog can list them and the engine can run them.
"""

from inference.adapters.base import FamilyAdapter, FamilyProfile
from inference.adapters.registry import adapter_choices, get_adapter

__all__ = ["FamilyAdapter", "FamilyProfile", "adapter_choices", "get_adapter"]
