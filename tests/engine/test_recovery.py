"""Overflow recovery: a session whose first request overflows recovers and completes, through
the real OpenAI HTTP provider against a local fake server and through a FunctionModel."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest
from pydantic_ai import Agent, ModelContextWindowExceededError
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from ctxhub.governance import ContextGovernor, Policy, count_tokens, pairing_problems
from ctxhub.governance.recovery import OverflowRecovery, is_context_overflow, stated_sizes
from tests.fakes.openai_server import FakeOpenAI, fake_openai, prompt_chars
from tests.messages import reply, tool_call, tool_result, user, words

__all__ = ["fake_openai"]  # the fixture, imported for pytest


def _long_history(turns: int = 30) -> list[ModelMessage]:
    history: list[ModelMessage] = [
        user("Audit the repository", system="You are careful."),
        reply("Ok."),
    ]
    for k in range(turns):
        history += [
            user(f"check file {k}"),
            tool_call("read_file", id=f"c{k}", path=f"f{k}.py"),
            tool_result("read_file", words(300, f"w{k}"), id=f"c{k}"),
            reply(f"file {k} is fine"),
        ]
    return history


def _openai(fake: FakeOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=fake.base_url, api_key="x"))


def _valid_openai_request(body: dict[str, object]) -> None:
    """Every tool message answers an earlier assistant tool call, and every call is answered."""
    open_calls: set[str] = set()
    for message in body["messages"]:  # type: ignore[attr-defined]
        for call in message.get("tool_calls") or []:
            open_calls.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls
            open_calls.discard(message["tool_call_id"])
    assert not open_calls


async def test_an_overflowing_first_request_recovers_through_the_openai_provider(
    fake_openai: FakeOpenAI,
) -> None:
    history = _long_history()
    fake_openai.max_prompt_chars = 20_000
    governor = ContextGovernor(Policy())  # recovery is part of the governor
    agent = Agent(_openai(fake_openai), capabilities=[governor])
    result = await agent.run("and now summarise", message_history=history)
    assert result.output == "Done."
    assert fake_openai.overflows >= 1
    assert governor.recovery is not None
    assert 1 <= len(governor.recovery.events) <= 3
    first, last = fake_openai.requests[0], fake_openai.requests[-1]
    assert prompt_chars(first) > fake_openai.max_prompt_chars
    assert prompt_chars(last) <= fake_openai.max_prompt_chars
    _valid_openai_request(last)
    messages = last["messages"]
    assert messages[0] == {"role": "system", "content": "You are careful."}
    assert messages[-1]["content"] == "and now summarise"
    # The run's history keeps every message: only the request on the wire was shrunk.
    assert len(result.all_messages()) == len(history) + 2


async def test_an_overflowing_streamed_request_recovers(fake_openai: FakeOpenAI) -> None:
    fake_openai.max_prompt_chars = 20_000
    agent = Agent(_openai(fake_openai), capabilities=[ContextGovernor(Policy())])
    async with agent.run_stream("and now summarise", message_history=_long_history()) as stream:
        output = await stream.get_output()
    assert output.strip() == "Done."
    assert fake_openai.overflows >= 1
    assert fake_openai.requests[-1]["stream"] is True
    _valid_openai_request(fake_openai.requests[-1])


async def test_without_recovery_the_overflow_fails_the_run(fake_openai: FakeOpenAI) -> None:
    fake_openai.max_prompt_chars = 20_000
    agent = Agent(_openai(fake_openai), capabilities=[ContextGovernor(Policy(), recover=False)])
    with pytest.raises(ModelContextWindowExceededError):
        await agent.run("and now summarise", message_history=_long_history())
    assert fake_openai.overflows == 1


async def test_recovery_composes_as_its_own_capability(fake_openai: FakeOpenAI) -> None:
    fake_openai.max_prompt_chars = 20_000
    recovery = OverflowRecovery()
    capabilities = [ContextGovernor(Policy(), recover=False), recovery]
    result = await Agent(_openai(fake_openai), capabilities=capabilities).run(
        "and now summarise", message_history=_long_history()
    )
    assert result.output == "Done."
    assert 1 <= len(recovery.events) <= 3


async def test_recovery_gives_up_after_three_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.max_prompt_chars = 10  # nothing fits, not even the latest request
    recovery = OverflowRecovery()
    agent = Agent(_openai(fake_openai), capabilities=[ContextGovernor(Policy(), recovery=recovery)])
    with pytest.raises(ModelContextWindowExceededError):
        await agent.run("and now summarise", message_history=_long_history())
    assert len(recovery.events) <= 3
    assert fake_openai.overflows == len(recovery.events) + 1
    sizes = [prompt_chars(r) for r in fake_openai.requests]
    assert sizes == sorted(sizes, reverse=True)


async def test_an_overflowing_first_request_recovers_through_a_function_model() -> None:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        if len(messages) > 40:
            raise ModelContextWindowExceededError(model_name="fn", message="prompt is too long")
        return ModelResponse(parts=[TextPart("recovered")])

    history = _long_history()
    agent = Agent(FunctionModel(model), capabilities=[ContextGovernor(Policy())])
    result = await agent.run("and now summarise", message_history=history)
    assert result.output == "recovered"
    assert len(seen[0]) > 40 >= len(seen[-1])
    assert 2 <= len(seen) <= 4
    last = seen[-1]
    assert pairing_problems(last) == []
    assert last[0] is history[0]  # the system prompt and first request stay
    prompt = last[-1].parts[-1]
    assert isinstance(prompt, UserPromptPart)
    assert prompt.content == "and now summarise"


def test_provider_overflow_errors_are_recognised() -> None:
    request = httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    body = {
        "message": "too long",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
    openai_error = openai.BadRequestError(
        "Error code: 400", response=httpx2.Response(400, request=request), body=body
    )
    assert is_context_overflow(openai_error)

    class AnthropicLikeError(Exception):
        pass

    anthropic = AnthropicLikeError("prompt is too long: 210000 tokens > 200000 maximum")
    gemini = RuntimeError(
        "400 INVALID_ARGUMENT. The input token count (1200000) exceeds the maximum number of "
        "tokens allowed (1048576)."
    )
    assert is_context_overflow(anthropic)
    assert is_context_overflow(gemini)
    assert stated_sizes(anthropic) == (200_000, 210_000)
    assert stated_sizes(gemini) == (1_048_576, 1_200_000)
    wrapped = RuntimeError("request failed")
    wrapped.__cause__ = openai_error
    assert is_context_overflow(wrapped)
    assert not is_context_overflow(RuntimeError("rate limit reached, retry in 20s"))
    assert not is_context_overflow(ValueError(json.dumps({"code": "invalid_api_key"})))


def test_stated_sizes_of_openai_messages() -> None:
    error = RuntimeError(
        "This model's maximum context length is 8,192 tokens. However, your messages resulted "
        "in 9,000 tokens."
    )
    assert stated_sizes(error) == (8_192, 9_000)
    assert stated_sizes(RuntimeError("prompt is too long")) is None


def test_any_size_over_limit_pair_is_read() -> None:
    assert stated_sizes(RuntimeError("Request too large: 507414 > 120000")) == (120_000, 507_414)
    assert stated_sizes(RuntimeError("input is too long (130,000 tokens > 128,000)")) == (
        128_000,
        130_000,
    )


async def test_the_retries_escalate_to_the_least_the_policy_allows() -> None:
    """An overflow that states no sizes, and a model that takes only a tiny request: three
    retries of a quarter each would still be too long; escalating, the last one fits."""
    seen: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(len(messages))
        if len(messages) > 4:
            raise ModelContextWindowExceededError(model_name="fn", message="prompt is too long")
        return ModelResponse(parts=[TextPart("fits")])

    recovery = OverflowRecovery()
    agent = Agent(FunctionModel(model), capabilities=[ContextGovernor(Policy(), recovery=recovery)])
    result = await agent.run("and now summarise", message_history=_long_history())
    assert result.output == "fits"
    assert len(recovery.events) <= 3
    assert seen == sorted(seen, reverse=True)
    shares = [1 - e.target_tokens / e.tokens_before for e in recovery.events]
    assert shares == sorted(shares)  # each retry removes a larger share


@pytest.mark.parametrize("separate", [False, True])
async def test_a_run_remembers_the_size_that_went_through(separate: bool) -> None:
    """After one recovery, the later requests of the run are sent within the size that worked:
    no failed request at every later step. The run's state is gone when it ends: another run
    under the same id sends its history whole, though it is larger than that size."""
    refused: list[int] = []
    sent: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) > 30:
            refused.append(len(messages))
            raise ModelContextWindowExceededError(model_name="fn", message="prompt is too long")
        sent.append(len(messages))
        if len(sent) <= 8:
            call = ToolCallPart(
                "read_file", {"path": f"g{len(sent)}.py"}, tool_call_id=f"g{len(sent)}"
            )
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    recovery = OverflowRecovery()
    capabilities: list[AbstractCapability[None]] = (
        [ContextGovernor(Policy(), recover=False), recovery]
        if separate
        else [ContextGovernor(Policy(), recovery=recovery)]
    )
    agent = Agent(FunctionModel(model), capabilities=capabilities)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return words(300, path)

    result = await agent.run(
        "and now check eight more", message_history=_long_history(), run_id="audit"
    )
    assert result.output == "done"
    assert len(sent) == 9
    # Only the first request needed retries; every later one was sent small enough at once.
    assert 1 <= len(refused) <= 3
    assert len(recovery.events) == len(refused)

    received: list[list[ModelMessage]] = []

    def again(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(messages)
        return ModelResponse(parts=[TextPart("still fine")])

    big = [
        user("Read the big file"),
        tool_call("read_file", id="b1", path="big.py"),
        tool_result("read_file", words(6000, "big"), id="b1"),
        reply("It is long."),
    ]
    learned = min(event.target_tokens for event in recovery.events)
    assert count_tokens(big) > learned
    other = Agent(FunctionModel(again), capabilities=capabilities)
    await other.run("anything else?", message_history=big, run_id="audit")
    assert len(received) == 1
    assert received[0][: len(big)] == big
    assert len(recovery.events) == len(refused)
