"""API keys for /v1: only a hash of each secret is stored; the secret is shown once."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.core.validators import MinValueValidator
from django.db import models

from catalog.models import CatalogModel

SECRET_PREFIX = "sk-mlx-"
# Enough of the secret to find its row and to tell keys apart in a list; never enough to guess it.
LOOKUP_LENGTH = len(SECRET_PREFIX) + 8


def digest(secret: str) -> str:
    # Secrets are 256 random bits, so a fast hash is as strong as a slow one here.
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKey(models.Model):
    name = models.CharField(max_length=100, unique=True)
    lookup = models.CharField(max_length=LOOKUP_LENGTH, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    active = models.BooleanField(default=True)
    allowed_models = models.ManyToManyField(
        CatalogModel, blank=True, help_text="Leave empty to allow every enabled model."
    )
    max_concurrent_requests = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Requests this key may have running at once (empty: the server's default).",
    )
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return self.name

    @property
    def masked(self) -> str:
        return f"{self.lookup}…"

    def new_secret(self) -> str:
        """Gives this key a fresh secret and returns it: the only time it can be read."""
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        self.lookup = secret[:LOOKUP_LENGTH]
        self.secret_hash = digest(secret)
        return secret

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.secret_hash, digest(secret))


class ConcurrencySlot(models.Model):
    """One request running on some server instance, counted against its key's limit by every
    instance that shares this database (SHARED_LIMITS, apikeys/slots.py). It is a lease: the
    instance renews it while the request runs, so an instance that dies without releasing its
    slots frees them when they expire, instead of leaking them forever."""

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="slots")
    instance = models.CharField(max_length=200)  # INSTANCE_NAME: whose request, for operators
    request_id = models.CharField(max_length=64)
    expires_at = models.DateTimeField()

    class Meta:
        # Acquiring counts a key's live leases; expiry sweeps by time.
        indexes = [models.Index(fields=["key", "expires_at"])]

    def __str__(self) -> str:
        return f"{self.key_id} on {self.instance} ({self.request_id})"
