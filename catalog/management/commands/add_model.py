from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.aliases import add_alias_argument
from catalog.management.options import error_messages, family_by_slug
from catalog.models import CatalogModel
from inference.engine.formats import ACTIVATION_ROUNDINGS
from inference.engine.mtp.files import missing_heads


def draft_model(model_id: str | None) -> CatalogModel | None:
    if not model_id:
        return None
    entry = CatalogModel.objects.filter(public_id=model_id).first()
    if entry is None:
        raise CommandError(f"--draft-model: the catalog has no model {model_id!r}")
    return entry


def speculation_arguments(parser: CommandParser) -> None:
    group = parser.add_argument_group("speculative decoding")
    group.add_argument(
        "--speculative",
        choices=[c for c, _ in CatalogModel._meta.get_field("speculative").choices],
        default=None,
        help="speculative decoding when a request does not say (ngram: prompt lookup; "
        "draft_model: the --draft-model's guesses; mtp: the model's own MTP head). Unset: "
        "mtp where the model's files ship a head, else off",
    )
    group.add_argument(
        "--draft-model", help="catalog id of a smaller chat model with the same vocabulary"
    )
    group.add_argument("--draft-tokens", type=int, default=4, help="tokens a draft proposes")


def default_speculation(options: dict) -> str:
    """mtp for a local text chat model whose files ship an MTP head, else off."""
    local = options["local"]
    if not local or options["vision"] or purpose_of(options) != CatalogModel.Purpose.CHAT:
        return "off"
    return "off" if missing_heads(Path(local)) else "mtp"


class Command(BaseCommand):
    help = "Add an MLX model directory or a Hugging Face repo to the catalog."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model_id", help="public model id clients send as `model`")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--local", metavar="DIR", help="an MLX model directory")
        where.add_argument("--hf", metavar="REPO", help="a Hugging Face repo id (owner/name)")
        _adapter_arguments(parser, where)
        parser.add_argument("--family", help="family slug (default: detected)")
        parser.add_argument("--name", default="", help="display name")
        parser.add_argument("--pinned", action="store_true", help="never evicted nor unloaded")
        parser.add_argument("--preload", action="store_true", help="load when the server starts")
        parser.add_argument("--compute-format", default="auto")
        parser.add_argument(
            "--activations",
            choices=ACTIVATION_ROUNDINGS,
            default="15bit",
            help="how the CPU kernels round activations on decode's integer path",
        )
        parser.add_argument("--context-length", type=int)
        parser.add_argument(
            "--parallel",
            choices=[c for c in CatalogModel.Parallel.values if c],
            default="",
            help="split it over an MLX distributed group (README: one model over several hosts)",
        )
        add_alias_argument(parser)
        parser.add_argument(
            "--default-for-unknown-ids",
            action="store_true",
            help="serve requests for ids nothing else matches",
        )
        parser.add_argument(
            "--context-overflow",
            choices=CatalogModel.ContextOverflow.values,
            default=CatalogModel.ContextOverflow.ERROR,
            help="prompts over the context: refuse them, or drop old turns",
        )
        parser.add_argument("--max-tokens", type=int, help="default max_tokens for requests")
        speculation_arguments(parser)
        parser.add_argument("--max-output-tokens", type=int, help="largest max_tokens accepted")
        parser.add_argument(
            "--if-missing", action="store_true", help="do nothing when the id already exists"
        )
        parser.add_argument("--vision", action="store_true", help="a chat model that reads images")
        add_kind_arguments(parser)

    def handle(self, *args, model_id: str, **options) -> None:
        if options["embedding"] and options["rerank"]:
            raise CommandError("a model is for --embedding or for --rerank, not both")
        if CatalogModel.objects.filter(public_id=model_id).exists():
            if options["if_missing"]:
                self.stdout.write(f"{model_id} is already in the catalog; nothing to do.")
                return
            raise CommandError(f"the catalog already has a model with id {model_id!r}")
        entry = CatalogModel(
            public_id=model_id,
            display_name=options["name"],
            source=_source(options),
            location=options["hf"] or options["local"] or options["adapter"],
            base_model=_base(options["base"], options["adapter"]),
            family=family_by_slug(options["family"]),
            pinned=options["pinned"],
            preload=options["preload"],
            compute_format=options["compute_format"],
            activations=options["activations"],
            parallel=options["parallel"],
            context_length=options["context_length"],
            aliases=options["aliases"],
            default_for_unknown_ids=options["default_for_unknown_ids"],
            context_overflow=options["context_overflow"],
            default_max_tokens=options["max_tokens"],
            max_output_tokens=options["max_output_tokens"],
            speculative=options["speculative"] or default_speculation(options),
            draft_model=draft_model(options["draft_model"]),
            draft_tokens=options["draft_tokens"],
            vision=options["vision"],
            purpose=purpose_of(options),
            pooling=options["pooling"],
            normalize=not options["no_normalize"],
            query_prefix=options["query_prefix"],
            document_prefix=options["document_prefix"],
            max_input_tokens=options["max_input_tokens"],
            truncate_inputs=options["truncate"],
        )
        try:
            entry.full_clean()
        except ValidationError as exc:
            raise CommandError(f"not added: {error_messages(exc)}") from None
        entry.save()
        self.stdout.write(self.style.SUCCESS(f"added {model_id} ({entry.location})"))


def _source(options: dict) -> str:
    if options["adapter"]:
        return CatalogModel.Source.LORA
    return CatalogModel.Source.HUGGING_FACE if options["hf"] else CatalogModel.Source.LOCAL


def _base(base_id: str | None, adapter: str | None) -> CatalogModel | None:
    if bool(base_id) != bool(adapter):
        raise CommandError("--adapter DIR and --base ID go together")
    if base_id is None:
        return None
    base = CatalogModel.objects.filter(public_id=base_id).first()
    if base is None:
        raise CommandError(f"no catalog model {base_id!r} to be the adapter's base")
    return base


def _adapter_arguments(parser: CommandParser, where) -> None:
    """--adapter DIR (instead of --local/--hf) --base ID: a LoRA adapter over a catalog model."""
    where.add_argument(
        "--adapter",
        metavar="DIR",
        help="a LoRA adapter folder (adapter_config.json, adapters.safetensors) over --base",
    )
    parser.add_argument("--base", metavar="ID", help="the catalog model a LoRA adapter applies to")


def purpose_of(options: dict) -> str:
    if options["embedding"]:
        return CatalogModel.Purpose.EMBEDDING
    if options["rerank"]:
        return CatalogModel.Purpose.RERANK
    return CatalogModel.Purpose.CHAT


def add_kind_arguments(parser: CommandParser) -> None:
    """What the model is for, when not chat, and the settings of that kind."""
    embedding = parser.add_argument_group("embedding and reranking models")
    embedding.add_argument(
        "--embedding", action="store_true", help="serve it on /v1/embeddings (not chat)"
    )
    embedding.add_argument(
        "--rerank",
        action="store_true",
        help="serve it on /v1/rerank: a cross-encoder (BERT, XLM-RoBERTa) or a decoder "
        "reranker answering yes or no (Qwen3-Reranker); --max-input-tokens caps a pair",
    )
    embedding.add_argument(
        "--pooling", choices=CatalogModel.Pooling.values, default=CatalogModel.Pooling.AUTO
    )
    embedding.add_argument(
        "--no-normalize", action="store_true", help="return vectors as the model makes them"
    )
    embedding.add_argument("--query-prefix", default="", help='for input_type "query"')
    embedding.add_argument("--document-prefix", default="", help='for input_type "document"')
    embedding.add_argument("--max-input-tokens", type=int, help="longest input accepted")
    embedding.add_argument(
        "--truncate", action="store_true", help="cut longer inputs instead of refusing them"
    )
