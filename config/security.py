"""A Content-Security-Policy on the HTML pages (Django 5.2 has none of its own): what a
page may load, so that text an attacker gets onto one (a model's name, a reply in the
playground) cannot run as script."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"


class ContentSecurityPolicyMiddleware:
    """CONTENT_SECURITY_POLICY on every HTML response (the API's JSON and streams run no
    script). Async as well as sync, so that the async views and their streams stay on the
    event loop instead of being handed to a thread for this middleware's sake."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self._acall(request)
        return self._with_policy(self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return self._with_policy(await self.get_response(request))

    @staticmethod
    def _with_policy(response: HttpResponse) -> HttpResponse:
        policy = settings.CONTENT_SECURITY_POLICY
        html = response.get("Content-Type", "").startswith("text/html")
        if policy and html and HEADER not in response:
            response[HEADER] = policy
        return response
