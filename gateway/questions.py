"""Questions to the provider that are not turns of a session: counting a request's tokens,
listing the models. Authenticated as a turn is (``gateway.exchange``), relayed whole, and
nothing stored; the offline upstream answers them itself."""

from __future__ import annotations

from urllib.parse import quote

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from ctxhub.governance import count_tokens as count_tokens_of
from ctxhub.governance import tool_definition_tokens
from ctxhub.governance.tokens import tokenizer_for
from gateway import offline
from gateway.access import Caller, calling, upstream_headers
from gateway.errors import Refused, refusal
from gateway.exchange import copy_headers, read_request, request_headers
from gateway.formats import Format
from gateway.upstream import UpstreamTimeout, UpstreamUnreachable, call


async def count_tokens(request: HttpRequest, fmt: Format) -> HttpResponseBase:
    """Anthropic's ``count_tokens``: a question about a request, not a turn of the session, so
    nothing is stored; the upstream answers it (the offline one counts with the engine's
    tokenizer)."""
    try:
        who, parsed, _ = await read_request(request, fmt)
    except Refused as refused:
        return refusal(fmt.provider, refused)
    if fmt.is_offline:
        model = f"{fmt.provider}:{parsed.model}"
        tokens = count_tokens_of([m.view for m in parsed.messages], model=model)
        tools = tool_definition_tokens(parsed.tools, tokenizer_for(model)) if parsed.tools else 0
        return JsonResponse({"input_tokens": tokens + tools})
    return await _asked(request, fmt, who, fmt.base_url + fmt.path + "/count_tokens")


async def models(
    request: HttpRequest, fmt: Format, path: str, model: str | None
) -> HttpResponseBase:
    """The provider's models (``GET {path}``, or one ``model`` of them), as an SDK's
    ``models.list()`` asks: a question, nothing stored; the offline upstream lists its demo
    model."""
    try:
        who = await calling(
            request_headers(request), needs_provider_key=not fmt.is_offline, provider=fmt.provider
        )
    except Refused as refused:
        return refusal(fmt.provider, refused)
    if fmt.is_offline:
        return JsonResponse(offline.models(fmt.provider, model))
    url = fmt.base_url + path + (f"/{quote(model, safe='')}" if model is not None else "")
    query = request.META.get("QUERY_STRING", "")
    return await _asked(request, fmt, who, url + (f"?{query}" if query else ""), method="GET")


async def _asked(
    request: HttpRequest, fmt: Format, who: Caller, url: str, *, method: str = "POST"
) -> HttpResponseBase:
    """The upstream's answer to a question that is not a turn (counting, listing models),
    relayed whole as it came."""
    sent = upstream_headers(request_headers(request), who)
    try:
        answer = await call(url, request.body if method == "POST" else b"", sent, method=method)
        body = b"".join([chunk async for chunk in answer.chunks])
    except UpstreamTimeout as exc:
        return refusal(fmt.provider, Refused(504, f"the upstream did not answer in time ({exc})"))
    except UpstreamUnreachable as exc:
        return refusal(fmt.provider, Refused(502, f"the upstream could not be reached ({exc})"))
    relayed = HttpResponse(body, status=answer.status)
    copy_headers(relayed, answer, {})
    return relayed
