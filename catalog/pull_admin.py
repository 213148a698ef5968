"""The admin's hub pulls: a pull runs `manage.py pull --job` in its own process, started by
catalog/pulls.py as Ollama's /api/pull starts it; the list shows bytes, total and speed,
refreshes while one runs, and has a cancel button per running pull (SIGTERM: the command
keeps its partial files and says cancelled), a resume action (the same pull again), and for a
failed pull its reason in plain words, its log and a Retry button."""

from __future__ import annotations

import os
import signal

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.timezone import now

from catalog.forms import PlainAdminFields
from catalog.job_admin import FailedJobs
from catalog.models import HubPull
from catalog.pulls import start_pull


@admin.register(HubPull)
class HubPullAdmin(PlainAdminFields, FailedJobs, admin.ModelAdmin):
    list_display = (
        "model_id",
        "source",
        "status",
        "progress_bar",
        "outcome_actions",
        "imported",
        "created",
        "cancel_button",
    )
    list_filter = ("status",)
    fields = ("repo", "revision", "filename", "model_id", "family", "aliases")
    # What a started pull's page shows besides what it was started with.
    job_fields = ("status", "progress_bar", "outcome", "imported", "created", "finished")
    readonly_fields = ("progress_bar", "outcome")
    actions = ("cancel", "resume")
    change_list_template = "admin/catalog/hubpull/change_list.html"

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a pull is started, watched, cancelled and deleted; never edited

    def get_urls(self):
        view = self.admin_site.admin_view(self.cancel_view)
        cancel = path("<int:pk>/cancel/", view, name="catalog_hubpull_cancel")
        return [cancel, *self.job_urls(), *super().get_urls()]

    def get_fields(self, request, obj=None):
        return self.fields if obj is None else (*self.fields, *self.job_fields)

    @admin.display(description="from")
    def source(self, job: HubPull) -> str:
        named = f"{job.repo}@{job.revision}"
        return f"{named}:{job.filename}" if job.filename else named

    @admin.display(description="progress")
    def progress_bar(self, job: HubPull):
        mib = 2**20
        return format_html(
            '<progress max="100" value="{}"></progress> {}% · {} / {} MiB · {} MiB/s',
            job.progress,
            job.progress,
            f"{job.bytes_done / mib:.1f}",
            f"{job.bytes_total / mib:.1f}",
            f"{job.speed / mib:.1f}",
        )

    @admin.display(description="")
    def cancel_button(self, job: HubPull):
        if job.status not in HubPull.ACTIVE:
            return ""
        # A submit button of the list's own form (it carries the CSRF token), posted elsewhere.
        url = reverse("admin:catalog_hubpull_cancel", args=[job.pk])
        return format_html(
            '<button type="submit" formaction="{}" class="button">Cancel</button>', url
        )

    def cancel_view(self, request: HttpRequest, pk: int) -> HttpResponseRedirect:
        if request.method == "POST" and self.has_add_permission(request):
            job = get_object_or_404(HubPull, pk=pk)
            self.message_user(request, cancel_pull(job))
        return HttpResponseRedirect(reverse("admin:catalog_hubpull_changelist"))

    def save_model(self, request, job: HubPull, form, change: bool) -> None:
        super().save_model(request, job, form, change)
        start_pull(job)
        self.message_user(request, f"Pulling {job.repo} as {job.model_id} in the background.")

    def retry_refusal(self, job: HubPull) -> str | None:
        try:
            job.clean()
        except ValidationError as exc:
            return " ".join(exc.messages)
        return None

    def restart(self, request, job: HubPull) -> None:
        start_pull(job)
        self.message_user(request, f"Pulling {job.repo} as {job.model_id} again.")

    @admin.action(description="Cancel (keeps what was downloaded)", permissions=["add"])
    def cancel(self, request, queryset) -> None:
        for job in queryset:
            self.message_user(request, cancel_pull(job))

    @admin.action(description="Resume (pull again from where it stopped)", permissions=["add"])
    def resume(self, request, queryset) -> None:
        for job in queryset:
            if job.status in (HubPull.Status.CANCELLED, HubPull.Status.FAILED):
                HubPull.objects.filter(pk=job.pk).update(
                    status=HubPull.Status.QUEUED, message="", finished=None
                )
                start_pull(job)
                self.message_user(request, f"Resuming {job.model_id}.")
            else:
                self.message_user(request, f"{job.model_id} is {job.status}.", messages.WARNING)

    def changelist_view(self, request, extra_context=None):
        HubPull.reap_lost()
        running = HubPull.objects.filter(status__in=HubPull.ACTIVE).exists()
        return super().changelist_view(request, {**(extra_context or {}), "refresh": running})


def cancel_pull(job: HubPull) -> str:
    """SIGTERM to the pull's process, which unwinds like Ctrl-C and marks its row cancelled;
    a row whose process is gone (a reboot) is marked here."""
    if job.status not in HubPull.ACTIVE:
        return f"{job.model_id} is {job.status}; nothing to cancel."
    if job.pid:
        try:
            os.kill(job.pid, signal.SIGTERM)
            return f"Cancelling {job.model_id}."
        except ProcessLookupError:
            pass
    HubPull.objects.filter(pk=job.pk).update(
        status=HubPull.Status.CANCELLED, message="cancelled", finished=now()
    )
    return f"Cancelled {job.model_id}."
