"""The choices of a catalog model's fields (CatalogModel names each: CatalogModel.Source...)."""

from django.db import models


class Source(models.TextChoices):
    LOCAL = "local", "Local MLX directory"
    HUGGING_FACE = "hf", "Hugging Face repo"
    GGUF = "gguf", "Imported GGUF"
    LORA = "lora", "LoRA adapter over a base model"


class Purpose(models.TextChoices):
    CHAT = "chat", "Chat and completions"
    EMBEDDING = "embedding", "Embeddings"
    RERANK = "rerank", "Reranking"


class Pooling(models.TextChoices):
    AUTO = "auto", "auto (the model's sentence-transformers config, else last for "
    "decoders and mean for encoders)"
    LAST = "last", "last token"
    MEAN = "mean", "mean of the tokens"
    CLS = "cls", "first ([CLS]) token"


class Parallel(models.TextChoices):
    NONE = "", "no: whole on each rank"
    TENSOR = "tensor", "tensor parallel"
    PIPELINE = "pipeline", "pipeline parallel"


class ContextOverflow(models.TextChoices):
    ERROR = "error", "refuse it (context_length_exceeded / prompt is too long)"
    TRUNCATE_MIDDLE = "truncate_middle", "drop the oldest turns, keep system and latest"
