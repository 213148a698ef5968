"""Settings, all overridable from the environment (or a .env file beside manage.py)."""

import os
import socket
from pathlib import Path

import environ
from corsheaders.defaults import default_headers as default_cors_headers
from django.core.exceptions import ImproperlyConfigured
from pydantic import ByteSize, TypeAdapter, ValidationError

from config.secrets import create_private_file, private_dir, read_or_create_secret
from inference import blas
from storedresponses.durations import parse_duration

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")


def byte_size(name: str, default: str | int) -> int:
    """A size setting such as "8GiB", "512MB" or "1000000" (pydantic's ByteSize units)."""
    text = env.str(name, default=str(default))
    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError:
        raise ImproperlyConfigured(
            f"{name}={text!r} is not a byte size (examples: 8GiB, 512MB, 1000000)"
        ) from None


def physical_memory() -> int:
    # sysconf answers on both Linux and macOS.
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# First, before anything imports MLX: an optimized BLAS under its CPU backend (Linux only).
BLAS = blas.preload(env.bool("BLAS_PRELOAD", default=True), env.str("BLAS_LIBRARY", default=None))

DEBUG = env.bool("DEBUG", default=False)
VAR_DIR = Path(env.str("VAR_DIR", default=str(BASE_DIR / "var")))
# The default SQLite file (staff sessions, stored conversations), the secrets, uploads and logs
# live here: made owner-only (0700) when this creates it; the `files` check warns otherwise.
private_dir(VAR_DIR)

# Without SECRET_KEY set, each install makes its own random key once and keeps it in var/.
SECRET_KEY = env.str("SECRET_KEY", default="") or read_or_create_secret(VAR_DIR / "secret_key")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "catalog",
    "apikeys",
    "storedresponses",
    "batches",
    "inference",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "config.security.ContentSecurityPolicyMiddleware",
]

# Behind a TLS-terminating proxy (README "Running it on a network"). Only trust the proxy's
# X-Forwarded-Proto when a proxy always sets it: a client could send it otherwise.
if env.bool("TRUST_PROXY_SSL_HEADER", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The session and CSRF cookies only over HTTPS (the admin, the dashboard).
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("SECURE_COOKIES", default=False)
# Strict-Transport-Security on HTTPS responses (0: none); a browser then refuses plain HTTP to
# this host for that long, so raise it once HTTPS works.
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
# Plain HTTP redirected to HTTPS, except the probes: load balancers check instances directly.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_REDIRECT_EXEMPT = [r"^health(/|$)", r"^metrics$"]
# Sent on every HTML page (the dashboard, the playground, the admin): their scripts are static
# files, the admin's templates carry inline styles; empty: none.
CONTENT_SECURITY_POLICY = env.str(
    "CONTENT_SECURITY_POLICY",
    default="default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'",
)

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Requests write their records and stored responses while others read: WAL lets readers
    # go on beside the one writer; IMMEDIATE takes the write lock when a transaction begins
    # (a deferred one that later writes fails at once with "database is locked" instead of
    # waiting), and the timeout is how long a writer waits for the lock.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": env.float("SQLITE_TIMEOUT", default=20),
        }
    )
    if DATABASES["default"]["NAME"] not in ("", ":memory:"):
        # Created owner-only before SQLite makes it with the umask's mode (0644 as a rule);
        # its -wal and -shm files take the database file's mode.
        create_private_file(Path(DATABASES["default"]["NAME"]))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise warns on every start when it is missing; owner-only, as var/ itself.
private_dir(STATIC_ROOT)
STORAGES = {
    # Where the admin keeps uploaded GGUF files (MEDIA_ROOT); without it an upload is a 500.
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve admin assets straight from the apps when collectstatic has not run (dev, tests).
WHITENOISE_USE_FINDERS = True

# Uploaded GGUF files (admin imports) before conversion.
MEDIA_ROOT = VAR_DIR / "media"
# The folders an upload makes under it: owner-only, as var/ (Django's default is the umask's).
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
# Where imported models (GGUF conversions, hub pulls) are written.
MODEL_STORAGE_DIR = Path(env.str("MODEL_STORAGE_DIR", default=str(VAR_DIR / "models")))
# The Hugging Face hub `manage.py pull` downloads from: huggingface_hub's own variable, so a
# mirror set for it serves both the pulls and the first load of a model named by its repo.
HF_ENDPOINT = env.str("HF_ENDPOINT", default="https://huggingface.co").rstrip("/")


def lmstudio_models_dir() -> Path:
    """LM Studio's models folder: ~/.lmstudio/models, or ~/.cache/lm-studio/models where only
    that older location exists."""
    current, older = Path.home() / ".lmstudio/models", Path.home() / ".cache/lm-studio/models"
    return older if older.is_dir() and not current.is_dir() else current


# GGUF models other tools downloaded, which `import_gguf --ollama/--lmstudio` and the admin's
# "Import from Ollama / LM Studio" page list and import. OLLAMA_MODELS is Ollama's own variable.
OLLAMA_MODELS_DIR = Path(
    env.str("OLLAMA_MODELS_DIR", default=env.str("OLLAMA_MODELS", default="~/.ollama/models"))
).expanduser()
LMSTUDIO_MODELS_DIR = Path(
    env.str("LMSTUDIO_MODELS_DIR", default=str(lmstudio_models_dir()))
).expanduser()
# Bytes the model pool may hold in weights before it evicts the least recently used model.
POOL_MEMORY_BUDGET = byte_size("POOL_MEMORY_BUDGET", physical_memory() // 2)
# Continuous batching: sequences decoded together per model; the share of each engine step that
# reading newcomers' prompts may take while others stream (0.5: a step at most doubles), and the
# most prompt tokens one step reads (the share paces it; this caps it on fast hardware).
ENGINE_MAX_BATCH = env.int("ENGINE_MAX_BATCH", default=32)
ENGINE_PREFILL_SHARE = env.float("ENGINE_PREFILL_SHARE", default=0.5)
ENGINE_PREFILL_STEP = env.int("ENGINE_PREFILL_STEP", default=2048)
# Batch-priority work (the Batch API's lines) runs in what interactive requests leave: it may
# hold this share of a model's batch while no interactive request is there (the rest stays free,
# so one starts at once), and this many slots beside interactive work (each row slows every
# decode step: bench/batch_priority.py, c=4 streams of the demo model on 2 cores, quiet: 0
# slots kept the streams at x0.93 tok/s and x1.04 TTFT while the batch ran in the lulls at 0.13
# lines/s; 1 slot x0.71 and x1.23 at 0.53 lines/s); it waits in a queue of its own,
# MAX_QUEUED_BATCH_REQUESTS sequences, past which a line gets a 429 with Retry-After
# (interactive requests are never refused for it).
ENGINE_BATCH_SHARE = env.float("ENGINE_BATCH_SHARE", default=0.75)
ENGINE_BATCH_SLOTS = env.int("ENGINE_BATCH_SLOTS", default=0)
MAX_QUEUED_BATCH_REQUESTS = env.int("MAX_QUEUED_BATCH_REQUESTS", default=64)
if not 0 < ENGINE_BATCH_SHARE <= 1:
    raise ImproperlyConfigured("ENGINE_BATCH_SHARE is a share of the batch: above 0, at most 1")
if ENGINE_BATCH_SLOTS < 0 or MAX_QUEUED_BATCH_REQUESTS < 1:
    raise ImproperlyConfigured(
        "ENGINE_BATCH_SLOTS must be at least 0 and MAX_QUEUED_BATCH_REQUESTS at least 1"
    )
# Reusable prompt KV cache per model: a conversation's next turn prefills only its new tokens.
PROMPT_CACHE_BYTES = byte_size("PROMPT_CACHE_BYTES", "1GiB")
# The prefix cache's disk tier: prompts' KV kept in this folder across restarts and the pool's
# evictions, the least recently used going first past PREFIX_CACHE_DISK_BYTES (0 turns it off);
# only prompts of at least PREFIX_CACHE_DISK_MIN_TOKENS are worth a file.
PREFIX_CACHE_DIR = Path(env.str("PREFIX_CACHE_DIR", default=str(VAR_DIR / "prefix-cache")))
PREFIX_CACHE_DISK_BYTES = byte_size("PREFIX_CACHE_DISK_BYTES", "8GiB")
PREFIX_CACHE_DISK_MIN_TOKENS = env.int("PREFIX_CACHE_DISK_MIN_TOKENS", default=512)
# Seconds after which an unused, unpinned model is unloaded (0: keep until evicted).
MODEL_IDLE_TTL = env.float("MODEL_IDLE_TTL", default=0)
# The vectorized CPU kernels (kernels/) for quantized models on a Linux CPU, and their threads
# per operation (0: one per core).
CPU_KERNELS = env.bool("CPU_KERNELS", default=True)
CPU_KERNEL_THREADS = env.int("CPU_KERNEL_THREADS", default=0)
# Where the compute format a load measured (stored or float32, by timing both) is kept, by
# weights, machine and software, so that later starts load at once ("" to time at every start).
COMPUTE_FORMAT_VERDICTS = env.str(
    "COMPUTE_FORMAT_VERDICTS", default=str(VAR_DIR / "compute-formats.json")
)
# The control API (pool status, warm, unload) takes this bearer token, or a staff session.
# Unset, each install makes one and keeps it in var/, where manage.py's commands find it too.
ADMIN_TOKEN = env.str("ADMIN_TOKEN", default="") or read_or_create_secret(VAR_DIR / "admin_token")
# /v1 takes `Authorization: Bearer <key>` whenever an API key exists; this demands one even
# before any exists (on unless DEBUG: set it to false only on a trusted network).
REQUIRE_API_KEY = env.bool("REQUIRE_API_KEY", default=not DEBUG)
# `manage.py serve` refuses a non-loopback HOST while /v1 takes no key (REQUIRE_API_KEY false
# and no key in the database): anyone who reached the port could use it. This says that is
# what the operator wants (a trusted network).
ALLOW_ANONYMOUS_ON_NETWORK = env.bool("ALLOW_ANONYMOUS_ON_NETWORK", default=False)
# Requests one API key may have running at once, unless the key sets its own (0: no limit).
# Where keys are not required, the callers without one share this limit too.
API_KEY_MAX_CONCURRENT = env.int("API_KEY_MAX_CONCURRENT", default=16)
# /metrics names every loaded model: set, it takes this bearer token (or the admin token) and
# answers 401 without; empty, anyone may scrape it.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# Replicas behind a load balancer. Several instances on one PostgreSQL count each key's running
# requests together when SHARED_LIMITS is on: a slot is a leased row (apikeys.ConcurrencySlot)
# instead of a counter in this process. Off, or on SQLite, each process counts its own.
SHARED_LIMITS = env.bool("SHARED_LIMITS", default=False)
# A running request's slot is renewed every third of this; an instance killed mid-request frees
# its slots this long after its last renewal (the database's clock decides, not the instances').
SHARED_LIMITS_LEASE_SECONDS = env.float("SHARED_LIMITS_LEASE_SECONDS", default=15)
# This instance's name: on the dashboard, in /health, on /metrics (the server_instance label of
# inference_server_instance_info: Prometheus adds its own `instance`) and on its slots.
INSTANCE_NAME = env.str("INSTANCE_NAME", default="") or f"{socket.gethostname()}-{os.getpid()}"
# Browsers on these origins may call /v1 (CORS); empty: none.
CORS_ALLOWED_ORIGINS = env.list("CORS_ALLOWED_ORIGINS", default=[])
CORS_URLS_REGEX = r"^/v1/.*$"
# The Anthropic SDK sends its key and version in headers of its own.
CORS_ALLOW_HEADERS = (*default_cors_headers, "x-api-key", "anthropic-version", "anthropic-beta")
# Sequences that may wait for a place in a decode batch; past that, /v1 answers 429 with
# Retry-After instead of queueing without bound. Several times MAX_REQUEST_SEQUENCES: one
# request at its limit must not fill the queue alone (waiting sequences get slots by fair
# share, not in arrival order, so a newcomer behind a big request still starts at once).
MAX_QUEUED_REQUESTS = env.int("MAX_QUEUED_REQUESTS", default=256)
# Sequences (prompts x n) one request may ask for; more is a 400, never a 429 that no retry
# could satisfy. The queue's size caps it too.
MAX_REQUEST_SEQUENCES = env.int("MAX_REQUEST_SEQUENCES", default=64)
# Prompt tokens one request may have read (every prompt x n, before prefix-cache hits); more is a
# 400 too_many_prompt_tokens.
MAX_REQUEST_PROMPT_TOKENS = env.int("MAX_REQUEST_PROMPT_TOKENS", default=65536)
# Characters one request's prompts may hold (each distinct prompt once: messages, tools,
# prefill), checked before anything is rendered or tokenized, so that a prompt no token limit
# would take is refused at once (400 too_many_prompt_characters). The default allows 16
# characters per token of MAX_REQUEST_PROMPT_TOKENS (English text takes about 4); 0: no limit.
MAX_REQUEST_PROMPT_CHARS = env.int(
    "MAX_REQUEST_PROMPT_CHARS", default=16 * MAX_REQUEST_PROMPT_TOKENS
)
# Threads that render, tokenize and compile grammars for requests, beside the engine's thread.
PROMPT_THREADS = env.int("PROMPT_THREADS", default=2)
# Inputs one /v1/embeddings request may carry (OpenAI's limit is 2048); more is a 400.
EMBEDDINGS_MAX_INPUTS = env.int("EMBEDDINGS_MAX_INPUTS", default=2048)
# Messages one chat request may carry.
MAX_MESSAGES = env.int("MAX_MESSAGES", default=1024)
# Images in chat requests (vision models only). Remote http(s) image URLs are fetched only when
# IMAGE_FETCH_REMOTE is on (off by default: the server would fetch URLs its clients name);
# data: URLs and Anthropic base64 sources always work.
IMAGE_FETCH_REMOTE = env.bool("IMAGE_FETCH_REMOTE", default=False)
# Seconds one whole fetch may take: resolving, connecting, every read and every redirect.
IMAGE_FETCH_TIMEOUT = env.float("IMAGE_FETCH_TIMEOUT", default=10.0)
# Fetched only from public addresses (serving/image_fetch.py). Hosts a URL (and each redirect)
# must name, when set: exact names or "*.example.com" (its subdomains); empty: any host.
IMAGE_FETCH_ALLOWED_HOSTS = env.list("IMAGE_FETCH_ALLOWED_HOSTS", default=[])
# Non-public networks the operator trusts to fetch from anyway (CIDRs, e.g. an internal image
# store at 10.1.2.0/24): checked on every hop like public ones. Empty: none.
IMAGE_FETCH_PRIVATE_NETWORKS = env.list("IMAGE_FETCH_PRIVATE_NETWORKS", default=[])
IMAGE_MAX_BYTES = env.int("IMAGE_MAX_BYTES", default=20 * 2**20)
IMAGE_MAX_PIXELS = env.int("IMAGE_MAX_PIXELS", default=25_000_000)
IMAGE_MAX_PER_REQUEST = env.int("IMAGE_MAX_PER_REQUEST", default=16)
# Seconds the engine may go without finishing a step while it has work (model loads excepted)
# before it counts as wedged and is restarted. A long prompt's prefill chunk on a slow CPU
# takes tens of seconds, hence the margin.
ENGINE_STALL_TIMEOUT = env.float("ENGINE_STALL_TIMEOUT", default=300)
# A distributed group (`mlx.launch ... manage.py serve`, README "One model over several
# hosts"): the MLX backend to join with ("any": what the launcher set up; "ring", "mpi",
# "jaccl"), and the seconds rank 0 waits on one turn of the group before it counts a follower
# as lost (503 engine_unavailable until the group is restarted).
DISTRIBUTED_BACKEND = env.str("DISTRIBUTED_BACKEND", default="any")
DISTRIBUTED_TIMEOUT = env.float("DISTRIBUTED_TIMEOUT", default=20)
# The group's shared secret (at least 16 characters, the same on every rank): rank 0 signs each
# turn with it and followers check it before unpickling. A group refuses to start without one.
DISTRIBUTED_SECRET = env.str("DISTRIBUTED_SECRET", default="")
# On SIGTERM/SIGINT: seconds running requests get to finish before they end with an error.
DRAIN_TIMEOUT = env.float("DRAIN_TIMEOUT", default=30)
# Lets POST /control/engine/fault crash or stall the engine (recovery drills, tests). Never
# turn it on in production.
ENGINE_FAULT_INJECTION = env.bool("ENGINE_FAULT_INJECTION", default=False)
# Where `manage.py warm|unload|pool` reach the running server.
SERVER_URL = env.str("SERVER_URL", default=f"http://127.0.0.1:{env.int('PORT', default=8000)}")
# Seconds a request may take from arrival to its last token (model load included).
REQUEST_TIMEOUT = env.float("REQUEST_TIMEOUT", default=600)
# Streams send an SSE comment after this many quiet seconds (queued, or reading a long prompt)
# so that proxies with read timeouts keep the connection; 0 turns it off.
SSE_KEEPALIVE_SECONDS = env.float("SSE_KEEPALIVE_SECONDS", default=5)
# How long POST /v1/responses keeps what it stores (for retrieval and previous_response_id):
# 30d, 12h, 45m, 90s or seconds; 0 keeps them forever. Older ones are purged by the server's own
# timer (RESPONSES_PURGE_INTERVAL) and by `manage.py purge_responses`.
try:
    RESPONSES_RETENTION = parse_duration(env.str("RESPONSES_RETENTION", default="30d"))
except ValueError as exc:
    raise ImproperlyConfigured(f"RESPONSES_RETENTION: {exc}") from None
# What POST /v1/responses may store (sizes as the stored JSON text; 0: no cap). An input item,
# and a response (its items, instructions, tools...), over these gets a 413 before any
# generation; a key (or the anonymous callers together) past its total gets a 429 for
# store=true requests. A previous_response_id chain deeper, or whose items weigh more, than
# the last two gets a 400 before any of it is loaded.
RESPONSES_MAX_ITEM_BYTES = byte_size("RESPONSES_MAX_ITEM_BYTES", "1MiB")
RESPONSES_MAX_STORED_BYTES = byte_size("RESPONSES_MAX_STORED_BYTES", "8MiB")
RESPONSES_MAX_BYTES_PER_KEY = byte_size("RESPONSES_MAX_BYTES_PER_KEY", "256MiB")
RESPONSES_MAX_CHAIN_DEPTH = env.int("RESPONSES_MAX_CHAIN_DEPTH", default=1000)
RESPONSES_MAX_CHAIN_BYTES = byte_size("RESPONSES_MAX_CHAIN_BYTES", "32MiB")
# How often `manage.py serve` purges responses past RESPONSES_RETENTION, on its own thread.
try:
    RESPONSES_PURGE_INTERVAL = parse_duration(env.str("RESPONSES_PURGE_INTERVAL", default="1h"))
except ValueError as exc:
    raise ImproperlyConfigured(f"RESPONSES_PURGE_INTERVAL: {exc}") from None
# OpenAI's Files and Batch API (batches/, inference/batches/). A file uploaded to /v1/files may
# be MAX_FILE_BYTES (OpenAI's batch input cap), streamed to disk rather than held to
# MAX_REQUEST_BODY; a key's files together (the anonymous callers' likewise) MAX_FILE_BYTES_PER_KEY.
MAX_FILE_BYTES = byte_size("MAX_FILE_BYTES", "200MiB")
MAX_FILE_BYTES_PER_KEY = byte_size("MAX_FILE_BYTES_PER_KEY", "10GiB")
# Lines of one batch running at once (never more than its key's concurrency limit), and the
# most lines a batch may have (OpenAI's 50,000).
BATCH_CONCURRENCY = env.int("BATCH_CONCURRENCY", default=4)
BATCH_MAX_LINES = env.int("BATCH_MAX_LINES", default=50_000)
if BATCH_CONCURRENCY < 1 or BATCH_MAX_LINES < 1:
    raise ImproperlyConfigured("BATCH_CONCURRENCY and BATCH_MAX_LINES must be at least 1")
# How often the batch runner deletes files past their expires_after.
try:
    FILES_SWEEP_INTERVAL = parse_duration(env.str("FILES_SWEEP_INTERVAL", default="10m"))
except ValueError as exc:
    raise ImproperlyConfigured(f"FILES_SWEEP_INTERVAL: {exc}") from None
# Largest request body /v1 accepts (bytes); a larger one is refused at the door
# (inference/edge/door.py) with 413 before any of it is read or written anywhere.
DATA_UPLOAD_MAX_MEMORY_SIZE = byte_size("MAX_REQUEST_BODY", "4MiB")
# Bodies within that stay in memory (Django spools larger ones to a temporary file).
FILE_UPLOAD_MAX_MEMORY_SIZE = max(DATA_UPLOAD_MAX_MEMORY_SIZE, 2_621_440)
# A GGUF file uploaded in the admin (catalog's GGUF imports) from a signed-in staff session may
# be this large; anyone else's body there is held to MAX_REQUEST_BODY.
MAX_GGUF_UPLOAD = byte_size("MAX_GGUF_UPLOAD", "256GiB")
# Connections uvicorn serves at once (each stream holds one); past it, new ones get a 503.
SERVER_MAX_CONNECTIONS = env.int("SERVER_MAX_CONNECTIONS", default=512)

# One JSON line per /v1 request on stdout (id, endpoint, model, key name, tokens, timings,
# status, finish reason), for log shippers.
REQUEST_LOG_JSON = env.bool("REQUEST_LOG_JSON", default=False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "bare": {"format": "%(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "requests": {
            "class": "logging.StreamHandler",
            "formatter": "bare",
            "stream": "ext://sys.stdout",
        },
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django": {"level": "INFO", "propagate": True},
        "inference.requests": {"handlers": ["requests"], "level": "INFO", "propagate": False},
    },
}
