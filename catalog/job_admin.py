"""What the admins of the background jobs (GGUF imports, hub pulls) share: who may start,
watch, cancel and resume them; a failed job's failure in plain words, its log one click away,
and a Retry button that starts the same job again."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import models
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from catalog.background import job_log_path
from catalog.job_logs import failure_text, readable_log


class ImportPermissions:
    """Before admin.ModelAdmin in a job admin's bases: adding a job (and its actions) takes the
    catalog.import_models permission, and holding it also shows the list."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("catalog.import_models")

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return self.has_add_permission(request) or super().has_view_permission(request, obj)


class FailedJobs(ImportPermissions):
    """A job admin's failure column, log view and Retry. The admin says how its job starts
    again (`restart`) and why one may not (`retry_refusal`)."""

    change_form_template = "admin/catalog/job_change_form.html"
    model: type[models.Model]
    admin_site: Any

    def restart(self, request: HttpRequest, job: Any) -> None:
        raise NotImplementedError

    def retry_refusal(self, job: Any) -> str | None:
        """Why the failed job cannot run again as it is (None: it can)."""
        return None

    def _url_name(self, action: str) -> str:
        return f"catalog_{self.model._meta.model_name}_{action}"

    def job_urls(self) -> list:
        retry = self.admin_site.admin_view(self.retry_view)
        log = self.admin_site.admin_view(self.log_view)
        return [
            path("<int:pk>/retry/", retry, name=self._url_name("retry")),
            path("<int:pk>/log/", log, name=self._url_name("log")),
        ]

    @admin.display(description="message")
    def outcome(self, job: Any) -> str:
        """A failed job's failure in plain words; else what it is doing or did."""
        if job.status == job.Status.FAILED:
            return failure_text(job.message, job_log_path(job))
        return job.message

    @admin.display(description="message")
    def outcome_actions(self, job: Any) -> str:
        """The list's message; a failed job's with its Retry button and log link under it (in
        the message's cell: a column of their own would push the table past the page)."""
        text = self.outcome(job)
        if job.status != job.Status.FAILED:
            return text
        # A submit button of the list's own form (it carries the CSRF token), posted elsewhere.
        url = reverse(f"admin:{self._url_name('retry')}", args=[job.pk])
        log = reverse(f"admin:{self._url_name('log')}", args=[job.pk])
        return format_html(
            '<span class="job-failure-text">{}</span><br>'
            '<button type="submit" formaction="{}" class="button retry">Retry</button> '
            '<a href="{}" class="job-log">log</a>',
            text,
            url,
            log,
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = self.model.objects.filter(pk=object_id).first()
        context = dict(extra_context or {})
        if job is not None:
            context["job_log_url"] = reverse(f"admin:{self._url_name('log')}", args=[job.pk])
            if job.status == job.Status.FAILED:
                context["job_failure"] = failure_text(job.message, job_log_path(job))
                context["job_retry_url"] = reverse(
                    f"admin:{self._url_name('retry')}", args=[job.pk]
                )
        return super().change_view(request, object_id, form_url, context)

    def retry_view(self, request: HttpRequest, pk: int) -> HttpResponseRedirect:
        back = reverse(f"admin:catalog_{self.model._meta.model_name}_changelist")
        if request.method != "POST" or not self.has_add_permission(request):
            self.message_user(request, "Retry takes a POST from staff who may import models.")
            return HttpResponseRedirect(back)
        job = get_object_or_404(self.model, pk=pk)
        refusal = self._refusal(job)
        if refusal:
            self.message_user(request, refusal, messages.ERROR)
            return HttpResponseRedirect(back)
        # Only the request that moves the row off "failed" starts it: a double click runs once.
        fresh = {"status": job.Status.QUEUED, "progress": 0, "message": "", "finished": None}
        claimed = self.model.objects.filter(pk=job.pk, status=job.Status.FAILED).update(
            pid=None, **fresh
        )
        if not claimed:
            self.message_user(request, f"{job.model_id} is already running again.")
            return HttpResponseRedirect(back)
        job.refresh_from_db()
        self.restart(request, job)
        return HttpResponseRedirect(back)

    def _refusal(self, job: Any) -> str | None:
        if job.status != job.Status.FAILED:
            return f"Not retried: {job.model_id} is {job.get_status_display().lower()}, not failed."
        reason = self.retry_refusal(job)
        return f"Not retried: {reason}" if reason else None

    def log_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = get_object_or_404(self.model, pk=pk)
        if not self.has_view_permission(request, job):
            raise Http404
        log = job_log_path(job)
        if not log.is_file():
            raise Http404(f"{job.model_id} has no log ({log} is missing).")
        response = HttpResponse(readable_log(log), content_type="text/plain; charset=utf-8")
        response["X-Content-Type-Options"] = "nosniff"
        return response
