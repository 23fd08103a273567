"""Slash commands typed in the chat, through the same services as the dashboard's buttons.

``/compact [focus]``, ``/clear``, ``/history``, ``/context``, ``/pin [#seq]``, ``/unpin #seq``,
``/fork [#seq]``, ``/recall words`` and ``/help``. A command is never sent to the model and
never written to the log: what it changes is a record over the log (audited and pushed to every
page, as a button's change is), or, for ``/fork``, a new session (the one typed in is left as it
was); what it answers is a note in the chat of the page that typed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.humanize.templatetags.humanize import intcomma
from pydantic_ai.messages import ModelRequest, UserPromptPart

from ctxhub.governance.recall import query_terms
from sessions import services
from sessions.chat import turns
from sessions.consumers_report import top_consumers
from sessions.figures import job_words, percent
from sessions.models import AgentSession, MessageKind
from sessions.services import Invalid, NotFound
from sessions.xray import xray

HELP = {
    "/compact [focus]": "summarise the history now (the focus says what the summary keeps)",
    "/clear": (
        "drop the conversation so far: the system prompt, instructions and pinned messages "
        "stay (the log keeps everything; undo under Records)"
    ),
    "/history": "the effective history's figures",
    "/context": "what the next request carries, by category, and its top consumers",
    "/pin [#seq]": "keep a message verbatim (default: your latest message)",
    "/unpin #seq": "stop keeping a message verbatim",
    "/fork [#seq]": (
        "a new session with the log up to a message (default: the latest) and the records "
        "over it, to go on from there another way"
    ),
    "/recall words": (
        "search what the next request no longer carries in full (masked, cut, evicted, "
        "dropped, summarised), as the model's recall tool does"
    ),
    "/help": "this list",
}


@dataclass(frozen=True)
class Note:
    """A command's answer: a title line and detail lines."""

    command: str
    text: str
    lines: list[str] = field(default_factory=list)
    link: tuple[str, str] | None = None
    """Where the answer leads, and the words of the link."""


def is_command(text: str) -> bool:
    return text.lstrip().startswith("/")


def run(session: AgentSession, actor: Any, text: str) -> Note:
    """Run the command in ``text``; a ServiceError says why it was refused."""
    word, _, rest = text.strip()[1:].partition(" ")
    name, argument = word.lower(), rest.strip()
    handler = _COMMANDS.get(name)
    if handler is None:
        raise Invalid(f"/{word} is not a command; /help lists them", field="prompt")
    return handler(session, actor, argument)


def _no_turn_running(session: AgentSession, what: str) -> None:
    if turns.running_turn(session) is not None:
        raise turns.TurnRunning(f"a turn is running: stop it or wait for its answer before {what}")


def _compact(session: AgentSession, actor: Any, focus: str) -> Note:
    _no_turn_running(session, "compacting")
    request = services.request_compaction(session, actor=actor, focus=focus)
    job = request.job
    job.refresh_from_db()
    if not job.active:
        said = job_words(job)
        return Note("compact", f"{said[0].upper()}{said[1:].rstrip('.')}.")
    again = "" if request.created else " (the same request was already queued)"
    return Note("compact", f"Compaction queued{again}; its progress shows above the timeline.")


def _clear(session: AgentSession, actor: Any, argument: str) -> Note:
    _no_turn_running(session, "clearing")
    cleared = services.clear(session, actor=actor)
    return Note(
        "clear",
        f"Cleared before message #{cleared.record.from_seq}: {cleared.summary()}. "
        "The log keeps everything; undo it under Records.",
    )


def _history(session: AgentSession, actor: Any, argument: str) -> Note:
    return Note("history", services.history_figures(session).line())


def _context(session: AgentSession, actor: Any, argument: str) -> Note:
    context = services.governed_context(session)
    view = xray(context)
    added = f", {intcomma(view.messages_added)} added by governance" if view.messages_added else ""
    head = (
        f"{view.model}: {intcomma(view.governed)} of {intcomma(view.window)} tokens "
        f"({percent(view.percent)} of the window); {intcomma(view.messages_after)} of "
        f"{intcomma(view.messages_before)} messages sent{added}."
    )
    lines = [
        f"{c.label}: {intcomma(c.tokens)} ({percent(c.percent)})"
        for c in view.categories
        if c.tokens
    ]
    if not view.fits:
        lines.append(f"Over budget: {view.reason or 'the policy cannot make it fit'}")
    lines += [
        f"Top: {row.label} {intcomma(row.sent)} sent / {intcomma(row.stored)} stored"
        for row in top_consumers(context).by_argument[:5]
    ]
    return Note("context", head, lines)


def _seq(argument: str) -> int:
    raw = argument.lstrip("#").strip()
    if not raw.isdigit() or len(raw) > 9:
        raise Invalid(f"{argument!r} is not a message number (#12 or 12)", field="prompt")
    return int(raw)


def _latest_user_message(session: AgentSession) -> int:
    requests = session.messages.filter(kind=MessageKind.REQUEST).order_by("-seq")
    for row in requests.only("seq", "payload")[:200]:
        message = row.message
        if isinstance(message, ModelRequest) and any(
            isinstance(part, UserPromptPart) for part in message.parts
        ):
            return row.seq
    raise NotFound("there is no message of yours to pin yet", field="prompt")


def _pin(session: AgentSession, actor: Any, argument: str) -> Note:
    seq = _seq(argument) if argument else _latest_user_message(session)
    services.pin(session, seq, actor=actor)
    return Note("pin", f"Pinned message #{seq}: governance keeps it verbatim.")


def _unpin(session: AgentSession, actor: Any, argument: str) -> Note:
    if not argument:
        raise Invalid("say which message: /unpin #12", field="prompt")
    seq = _seq(argument)
    services.unpin(session, seq, actor=actor)
    return Note("unpin", f"Unpinned message #{seq}.")


def _fork(session: AgentSession, actor: Any, argument: str) -> Note:
    if argument:
        seq = _seq(argument)
    else:
        last = session.messages.order_by("-seq").values_list("seq", flat=True).first()
        if last is None:
            raise NotFound("there is no message to fork at yet", field="prompt")
        seq = last
    made = services.fork_session(session, seq, actor=actor)
    return Note(
        "fork",
        f"Forked at message #{seq} into a new session; this one goes on as it was.",
        link=(made.get_absolute_url(), made.title),
    )


def _recall(session: AgentSession, actor: Any, argument: str) -> Note:
    if not query_terms(argument):
        raise Invalid("say what to look for: /recall deploy key staging", field="prompt")
    hits = services.recall(session, argument, 5)
    if not hits:
        return Note("recall", f"Nothing hidden from the next request matches {argument!r}.")
    lines = [
        f"#{hit.seq} {hit.kind}{f' of {hit.tool_name}' if hit.tool_name else ''} "
        f"({hit.fate}): {' '.join(hit.excerpt.split())}"
        for hit in hits
    ]
    first = hits[0].seq
    return Note(
        "recall",
        f"{len(hits)} passage{'s' if len(hits) != 1 else ''} hidden from the next request "
        f"match {argument!r}:",
        lines,
        link=(f"{session.get_absolute_url()}?at={first}", f"Show message #{first}"),
    )


def _help(session: AgentSession, actor: Any, argument: str) -> Note:
    return Note("help", "Commands:", [f"{name} — {what}" for name, what in HELP.items()])


_COMMANDS = {
    "compact": _compact,
    "clear": _clear,
    "history": _history,
    "context": _context,
    "pin": _pin,
    "unpin": _unpin,
    "fork": _fork,
    "recall": _recall,
    "help": _help,
}
