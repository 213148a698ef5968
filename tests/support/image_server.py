"""A local HTTP server for remote-image tests: /image answers a PNG, /redirect?to=URL a 302 to
URL, /chain/N N redirects in a row before the image, /trickle a 200 whose body comes one byte
every 0.2 s (a slow-loris source), /missing a 404. It counts the requests it got."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.support.vision_models import png_bytes

IMAGE = png_bytes((255, 0, 0))


@dataclass
class ImageServer:
    url: str
    paths: list[str] = field(default_factory=list)


def _handler(served: ImageServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            served.paths.append(self.path)
            path = urlsplit(self.path)
            if path.path == "/image":
                self._answer(200, IMAGE)
            elif path.path == "/redirect":
                self._redirect(parse_qs(path.query)["to"][0])
            elif path.path.startswith("/chain/"):
                left = int(path.path.rsplit("/", 1)[1])
                self._redirect(f"/chain/{left - 1}" if left > 1 else "/image")
            elif path.path == "/trickle":
                self._trickle()
            else:
                self._answer(404, b"not here: 10.9.8.7 says no")

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _redirect(self, to: str) -> None:
            self.send_response(302)
            self.send_header("Location", to)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _trickle(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(IMAGE)))
            self.end_headers()
            try:
                for byte in IMAGE:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:  # the fetcher gave up: what is being tested
                pass

    return Handler


@contextmanager
def image_server(host: str = "127.0.0.1") -> Iterator[ImageServer]:
    served = ImageServer(url="")
    server = ThreadingHTTPServer((host, 0), _handler(served))
    server.daemon_threads = True
    served.url = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
