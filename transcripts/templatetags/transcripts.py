"""A session's transcript on its page: ``{% transcript_panel session %}`` draws where the session
was read from when it came from an agent's transcript, and nothing otherwise."""

from __future__ import annotations

from typing import Any

from django import template
from django.template.loader import render_to_string

from sessions.access import may_see
from sessions.models import AgentSession
from transcripts.models import Transcript

register = template.Library()

KEPT_SHOWN = 50


@register.simple_tag(takes_context=True)
def transcript_panel(context: template.Context, session: AgentSession) -> str:
    transcript = Transcript.objects.filter(session=session).select_related("file", "parent").first()
    if transcript is None:
        return ""
    request: Any = context["request"]
    children = [
        child
        for child in AgentSession.objects.filter(transcript__parent=session).order_by("created_at")
        if may_see(request.user, child)
    ]
    parent = (
        transcript.parent
        if transcript.parent and may_see(request.user, transcript.parent)
        else None
    )
    kept = session.kept_lines.all()
    return render_to_string(
        "transcripts/_panel.html",
        {
            "session": session,
            "transcript": transcript,
            "file": transcript.file,
            "parent": parent,
            "children": children,
            "kept": kept[:KEPT_SHOWN],
            "kept_count": kept.count(),
            "compactions": session.compactions.filter(summarizer=transcript.file.format).count(),
        },
        request=request,
    )
