"""What the chat page keeps: each staff member's conversations, turn by turn, with the model,
system prompt and sampling they were held with, so a page reload (or another browser) picks a
conversation up where it stopped."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Conversation(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, help_text="The catalog id the turns were sent to.")
    system_prompt = models.TextField(blank=True)
    # {"temperature": 0.7, "top_p": 0.9, "max_tokens": 256}: what the page sent, not defaults.
    sampling = models.JSONField(default=dict, blank=True)
    # [{"role": "user" | "assistant", "content": str, ...}]: the page's turns as it shows them
    # (an assistant turn also holds its reasoning, tool calls, finish reason and usage).
    turns = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-updated",)

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"

    def summary(self) -> dict:
        return {
            "id": self.pk,
            "title": str(self),
            "model": self.model,
            "turn_count": len(self.turns),
            "updated": self.updated.isoformat(),
        }

    def document(self) -> dict:
        return {
            **self.summary(),
            "system_prompt": self.system_prompt,
            "sampling": self.sampling,
            "turns": self.turns,
        }
