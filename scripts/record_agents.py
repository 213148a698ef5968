"""Records what Claude Code and Codex send to a model server, for tests/fixtures/agents/.

A stand-in server on loopback answers Anthropic Messages and OpenAI Responses with scripted
replies (streamed as the agents ask) and records every request; each agent (found by
scripts/ensure_agents.sh) runs one session in a temporary project:

  turn 1: the user's prompt          -> the stand-in calls a read-only tool on hello.txt
  turn 2: that tool's result         -> a second tool call, on notes.txt
  turn 3: the second result          -> the final text

Requests for the main model are saved in order; anything else the agent sends (a small-model
title or quota call, a model list) is saved apart, labelled. Machine-specific text (the
temporary paths, the host name) is replaced, so re-recording on another machine gives the same
files but for what the agents themselves changed.

    .venv/bin/python scripts/record_agents.py [--out tests/fixtures/agents]
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.agent_cli: how the agents are found and launched

from tests.support.agent_cli import claude_env, codex_env, ensure_agents, run_agent  # noqa: E402

MAIN_MODEL = "main-model"
SIDE_MODEL = "side-model"
PROMPT = "Read hello.txt, then notes.txt, and tell me what they say."
FINAL_TEXT = "hello.txt says hello; notes.txt holds two notes."
FILES = {"hello.txt": "hello from the fixture\n", "notes.txt": "first note\nsecond note\n"}
# Headers whose values vary between runs or machines for no reason worth recording.
DROPPED_HEADERS = {"content-length", "host", "connection", "accept-encoding"}
AGENT_TIMEOUT = 180


class Recorder:
    """Every request the stand-in saw, in order, and the scripted reply it chose."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []

    def add(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(record)


def tool_results(body: dict[str, Any]) -> int:
    """How many tool results the conversation holds, in either dialect: the script's turn."""
    count = 0
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for block in content if block.get("type") == "tool_result")
    for item in body.get("input", []) if isinstance(body.get("input"), list) else []:
        count += item.get("type") in ("function_call_output", "custom_tool_call_output")
    return count


def anthropic_tool_names(body: dict[str, Any]) -> set[str]:
    return {tool.get("name", "") for tool in body.get("tools", [])}


def anthropic_reply(body: dict[str, Any], project: Path) -> list[dict[str, Any]]:
    """Content blocks: a Read of the next file while the script has files left, then text."""
    done = tool_results(body)
    is_main = body.get("model") == MAIN_MODEL and "Read" in anthropic_tool_names(body)
    if not is_main:
        return [{"type": "text", "text": "Reading two files"}]
    names = list(FILES)
    if done < len(names):
        path = str(project / names[done])
        return [
            {"type": "text", "text": f"I'll read {names[done]}."},
            {"type": "tool_use", "id": f"toolu_{done + 1:02d}", "name": "Read",
             "input": {"file_path": path}},
        ]  # fmt: skip
    return [{"type": "text", "text": FINAL_TEXT}]


def anthropic_events(body: dict[str, Any], blocks: list[dict[str, Any]]) -> list[tuple]:
    """The Messages stream of those blocks, as api.anthropic.com writes it."""
    stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
    message = {
        "id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant",
        "model": body.get("model"), "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1},
    }  # fmt: skip
    events: list[tuple] = [("message_start", {"type": "message_start", "message": message})]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start",
             {"type": "content_block_start", "index": index, "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": index,
                                     "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]  # fmt: skip
    events += [
        ("message_delta", {"type": "message_delta", "usage": {"output_tokens": 5},
                           "delta": {"stop_reason": stop, "stop_sequence": None}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return events


def codex_call(body: dict[str, Any], file_name: str) -> dict[str, Any]:
    """A function call of whichever shell tool this Codex offers, reading one file."""
    names: set[str] = set()
    for tool in body.get("tools", []):
        names.add(tool.get("name", ""))
        names.update(inner.get("name", "") for inner in tool.get("tools", []))
    if "exec_command" in names:
        name, arguments = "exec_command", {"cmd": f"cat {file_name}"}
    elif "shell_command" in names:
        name, arguments = "shell_command", {"command": f"cat {file_name}"}
    else:
        name, arguments = "shell", {"command": ["cat", file_name]}
    return {
        "type": "function_call", "id": f"fc_{time.monotonic_ns()}", "status": "completed",
        "call_id": f"call_{file_name.split('.')[0]}", "name": name,
        "arguments": json.dumps(arguments),
    }  # fmt: skip


def responses_item(body: dict[str, Any]) -> dict[str, Any]:
    done = tool_results(body)
    names = list(FILES)
    if body.get("tools") and done < len(names):
        return codex_call(body, names[done])
    text = FINAL_TEXT if body.get("tools") else "Reading two files"
    return {
        "type": "message", "id": f"msg_{time.monotonic_ns()}", "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }  # fmt: skip


def responses_events(body: dict[str, Any], item: dict[str, Any]) -> list[tuple]:
    """The Responses stream of one output item, as api.openai.com writes it."""
    response = {
        "id": f"resp_{time.monotonic_ns()}", "object": "response", "status": "in_progress",
        "model": body.get("model"), "output": [], "created_at": int(time.time()),
    }  # fmt: skip
    opened = {**item, "status": "in_progress"}
    if item["type"] == "message":
        opened["content"] = []
    else:
        opened["arguments"] = ""
    completed = {
        **response, "status": "completed", "output": [item],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }  # fmt: skip
    events = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": opened},
        *_responses_deltas(item),
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": completed},
    ]
    return [(event["type"], {**event, "sequence_number": n}) for n, event in enumerate(events)]


def _responses_deltas(item: dict[str, Any]) -> list[dict[str, Any]]:
    if item["type"] == "function_call":
        return [{"type": "response.function_call_arguments.delta", "output_index": 0,
                 "item_id": item["id"], "delta": item["arguments"]}]  # fmt: skip
    part = item["content"][0]
    common = {"output_index": 0, "item_id": item["id"], "content_index": 0}
    return [
        {"type": "response.content_part.added", **common, "part": {**part, "text": ""}},
        {"type": "response.output_text.delta", **common, "delta": part["text"]},
        {"type": "response.output_text.done", **common, "text": part["text"]},
        {"type": "response.content_part.done", **common, "part": part},
    ]


class StandIn(BaseHTTPRequestHandler):
    """Records each request, then answers it with the script's next reply."""

    protocol_version = "HTTP/1.1"
    recorder: Recorder  # set on the subclass make_handler makes
    project: Path

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the records say it all

    def do_GET(self) -> None:
        self.answer(None)

    def do_HEAD(self) -> None:
        self.answer(None)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        self.answer(body)

    def answer(self, body: Any) -> None:
        headers = {
            k.lower(): v for k, v in self.headers.items() if k.lower() not in DROPPED_HEADERS
        }
        self.recorder.add({"method": self.command, "path": self.path, "headers": headers,
                      "body": body})  # fmt: skip
        route = self.path.split("?")[0]
        if self.command == "POST" and route == "/v1/messages/count_tokens":
            self.send_json(200, {"input_tokens": 1000})
        elif self.command == "POST" and route == "/v1/messages":
            self.send_stream(anthropic_events(body, anthropic_reply(body, self.project)))
        elif self.command == "POST" and route == "/v1/responses":
            self.send_stream(responses_events(body, responses_item(body)))
        elif route == "/v1/models":
            models = [{"id": m, "object": "model"} for m in (MAIN_MODEL, SIDE_MODEL)]
            self.send_json(200, {"object": "list", "data": models})
        else:
            self.send_json(404, {"error": {"message": f"no {route} here"}})

    def send_json(self, status: int, document: dict[str, Any]) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_stream(self, events: list[tuple]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")  # the stream ends with the connection
        self.end_headers()
        for name, data in events:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


def make_handler(recorder: Recorder, project: Path) -> type[StandIn]:
    return type("BoundStandIn", (StandIn,), {"recorder": recorder, "project": project})


def run(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = run_agent(command, env, cwd, AGENT_TIMEOUT)
    return {
        "returncode": done.returncode,
        "seconds": round(done.seconds, 1),
        "stdout": done.stdout,
        "stderr": done.stderr[-4000:],
    }


def scrub(document: Any, replacements: list[tuple[str, str]]) -> Any:
    """The same document with each machine-specific string replaced, longest first; whole
    words only, so that a short host name ("vm") leaves the words containing it alone."""
    text = json.dumps(document)
    for old, new in sorted(replacements, key=lambda pair: -len(pair[0])):
        pattern = rf"(?<![\w.-]){re.escape(json.dumps(old)[1:-1])}(?![\w.-])"
        text = re.sub(pattern, json.dumps(new)[1:-1].replace("\\", "\\\\"), text)
    return json.loads(text)


def is_main(record: dict[str, Any]) -> bool:
    body = record["body"] if isinstance(record["body"], dict) else {}
    route = record["path"].split("?")[0]
    if route == "/v1/messages":
        return body.get("model") == MAIN_MODEL and "Read" in anthropic_tool_names(body)
    return route == "/v1/responses" and bool(body.get("tools"))


def label(record: dict[str, Any]) -> str:
    body = record["body"] if isinstance(record["body"], dict) else {}
    route = record["path"].split("?")[0]
    if route in ("/v1/messages", "/v1/responses"):
        tools = len(body.get("tools") or [])
        return f"{body.get('model')} with {tools} tools, not the main conversation"
    return f"{record['method']} {route}"


def record_session(agent: str, version: str, command: list[str], env: dict[str, str],
                   work: Path, recorder: Recorder) -> dict[str, Any]:  # fmt: skip
    """Runs one agent's session and sorts what it sent into main and side requests."""
    project = work / "project"
    result = run(command, env, project)
    records = list(recorder.requests)
    main = [r for r in records if is_main(r)]
    side = [{"label": label(r), **r} for r in records if not is_main(r)]
    replacements = [
        (str(project), "/work/project"),
        (str(work / "home"), "/work/home"),
        (str(work), "/work"),
        (socket.gethostname(), "host"),
    ]
    return scrub(
        {
            "agent": agent,
            "version": version,
            "command": [Path(command[0]).name, *command[1:]],
            "prompt": PROMPT,
            "result": result,
            "main": main,
            "side": side,
        },
        replacements,
    )


def session(agent: str, bin_dir: Path, out: Path) -> dict[str, Any]:
    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="record-agents-") as temp:
        work = Path(temp).resolve()
        project, home = work / "project", work / "home"
        project.mkdir()
        for name, text in FILES.items():
            (project / name).write_text(text)
        server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(recorder, project))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base_url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            command, env, version = agent_command(agent, bin_dir, home, base_url)
            document = record_session(agent, version, command, env, work, recorder)
        finally:
            server.shutdown()
    path = out / f"{agent.replace('-', '_')}.json"
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    return document


def agent_command(agent: str, bin_dir: Path, home: Path, base_url: str) -> tuple:
    if agent == "claude-code":
        env = claude_env(home, base_url, "sk-record", MAIN_MODEL, SIDE_MODEL)
        version = subprocess.check_output([bin_dir / "claude", "--version"], text=True)
        return [str(bin_dir / "claude"), "-p", PROMPT], env, version.split()[0]
    env = codex_env(home, f"{base_url}/v1", "sk-record", MAIN_MODEL)
    version = subprocess.check_output([bin_dir / "codex", "--version"], text=True)
    command = [str(bin_dir / "codex"), "exec", "--skip-git-repo-check", PROMPT]
    return command, env, version.split()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "agents")
    parser.add_argument("agents", nargs="*", default=["claude-code", "codex"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bin_dir = ensure_agents()
    failed = False
    for agent in args.agents:
        document = session(agent, bin_dir, args.out)
        result = document["result"]
        print(
            f"{agent} {document['version']}: exit {result['returncode']} in "
            f"{result['seconds']} s, {len(document['main'])} main requests, "
            f"{len(document['side'])} side requests"
        )
        failed |= result["returncode"] != 0 or len(document["main"]) < 3
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
