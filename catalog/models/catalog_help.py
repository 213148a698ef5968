"""The longer help texts of a catalog model's fields, as the admin shows them under each box
(kept here so the model reads as its fields; the migrations hold copies of them)."""

ALIASES = (
    "Other ids clients may send as `model` for this one: exact ids, or globs "
    "where * is any text, e.g. claude-sonnet-4-5-20250929, claude-haiku-* or "
    "gpt-5*. The model's own id wins, then an exact alias, then the glob with the most "
    "characters besides *. Replies name the id the client sent."
)

DEFAULT_FOR_UNKNOWN_IDS = (
    "Serve requests for ids that name no model and match no alias (of this "
    "model's purpose). At most one enabled model per purpose. Off: such requests get 404."
)

PURPOSE = (
    "What clients may use it for: /v1/chat/completions, /v1/completions and "
    "/v1/messages, or /v1/embeddings, or /v1/rerank (a cross-encoder, or a decoder "
    "reranker that answers yes or no, as Qwen3-Reranker)."
)

VISION = (
    "A vision-language chat model (loaded through mlx-vlm): messages may carry "
    "images. Text-only models refuse image parts."
)

QUERY_PREFIX = (
    'Embedding models: text put before inputs sent with input_type "query", e.g. '
    '"Instruct: Given a web search query, retrieve relevant passages\nQuery: " '
    '(Qwen3-Embedding) or "query: " (e5).'
)

DOCUMENT_PREFIX = (
    'Embedding models: text put before inputs sent with input_type "document", '
    'e.g. "passage: " (e5) or "search_document: " (nomic).'
)

MAX_INPUT_TOKENS = (
    "Embedding models: the longest input in tokens; reranking models: the longest "
    "query and document read together (a longer document is cut to fit). Empty: the "
    "context length."
)

LOCATION = (
    "Absolute path of the MLX directory, or the Hugging Face repo id; for a LoRA "
    "adapter, its folder (adapter_config.json and adapters.safetensors, as mlx-lm's "
    "trainer writes them)."
)

BASE_MODEL = (
    "LoRA adapters: the chat model whose weights it applies to. Both are served, "
    "under their own ids, sharing the base's weights in memory."
)

FAMILY = "Leave empty to detect it from the model's chat template, else its name and config.json."

COMPUTE_FORMAT = (
    "auto: on a Linux CPU, the stored weights through the CPU kernels or float32 "
    "through OpenBLAS, whichever measures faster at load (float32 only when it fits the "
    "pool's budget); the stored format on a GPU."
)

ACTIVATIONS = (
    "How the CPU kernels round activations where they meet the stored 4/8-bit "
    "weights in integers (decode's few rows, and prompts on AVX-512 VNNI). 15bit: two bytes "
    "a value, within ~1e-4 of float32. 8bit: one byte, as llama.cpp's Q8 activations: half "
    "the integer products, decode ~10-17% faster at 1-2B on two cores, prompts up to 2x, "
    "next-token choices further from float32's. Refused where it cannot apply (float "
    "formats, a GPU, no kernels)."
)

KV_CACHE = (
    "How the attention keys and values of prompts and answers are kept. auto: "
    "float16 on a CPU, the model's own format on a GPU. 8bit halves float16's memory "
    "(top-1 agreement with float16 in the README); 4bit quarters it, at a larger cost."
)

PARALLEL = (
    "When the server runs as rank 0 of an MLX distributed group (mlx.launch): "
    "tensor splits every layer between the ranks, pipeline gives each rank a run of layers; "
    "otherwise each rank holds the whole model. Ignored outside a group."
)

DEFAULT_MAX_TOKENS = (
    "max_tokens for requests that do not say (empty: up to the max output "
    "tokens, else the room left in the context). At most the max output tokens."
)

SPECULATIVE = (
    "The default when a request does not say (its `speculative` field). ngram: "
    "each step also checks a few tokens copied from where the latest tokens occurred "
    "earlier in the prompt or answer; answers that repeat their context (code edits, "
    "quotes) come faster. draft_model: each step checks the draft model's guesses. mtp: "
    "each step checks the guesses of the model's own multi-token-prediction head (Qwen3.5, "
    "Qwen3-Next, DeepSeek V3, GLM-4.5+, MiMo checkpoints ship one). "
    "Output is the same either way. Off: one token per step."
)

DRAFT_MODEL = (
    "A smaller chat model with the same vocabulary whose guesses "
    "`speculative: draft_model` checks. Loaded with this model (its memory counted "
    "with it) and unloaded with it."
)

DRAFT_TOKENS = (
    "Most tokens a draft proposes per step (a request's "
    "speculative.num_speculative_tokens overrides it)."
)

CONTEXT_LENGTH = (
    "Tokens of prompt and answer together. Blank: the model's own context (its "
    "config's, shown greyed in the box). A shorter one saves memory; a longer one than "
    "the model's own is refused here, and so is 0."
)

CONTEXT_OVERFLOW = (
    "Chat prompts longer than the context: refuse them with an error agents "
    "recognise (Claude Code then compacts), or drop whole old turns (a user message with "
    "the replies and tool results after it), then the latest turn's oldest tool "
    "exchanges, until the prompt leaves room for min(max_tokens, a quarter of the "
    "context) tokens of reply. System messages, tools, the latest user message and the "
    "last exchange are always kept; replies say how many messages were dropped."
)
