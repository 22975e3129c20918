"""The Anthropic Messages API as a ``Provider``: tool use, retries with backoff, prompt caching.

The only module that imports ``anthropic``. The API key comes from ``ANTHROPIC_API_KEY`` (or
the ``anthropic_api_key`` setting); the base URL from the ``anthropic_base_url`` setting, else
``ANTHROPIC_BASE_URL`` as the SDK itself reads it. The SDK retries 408/409/429/5xx and
connection errors with exponential backoff (honouring ``retry-after``) ``max_retries`` times.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from ..base.errors import ConfigError, PromptTooLongError, ProviderError
from .llm import JSON, LLMRequest, LLMResponse, ToolCall, Turn, Usage

CACHE = {"type": "ephemeral"}
RETRIED = frozenset({408, 409, 429})  # and 5xx: the statuses the SDK retries
# The API's refusal of a prompt over the model's window: "prompt is too long: 208310 tokens > 200000 maximum".
TOO_LONG = re.compile(r"prompt is too long(?::\s*(\d+)\s*tokens\s*>\s*(\d+)\s*maximum)?", re.IGNORECASE)


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 3,
        timeout: float = 120.0,
    ) -> None:
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ConfigError(
                "The agent loop's anthropic provider needs an API key: set ANTHROPIC_API_KEY in the server's "
                'environment (for Claude Desktop, in the server\'s "env" block), or use llm_provider = "sampling" '
                "to run the agent on the host's own model."
            )
        import anthropic

        self.model = model
        self._client = anthropic.AsyncAnthropic(
            api_key=key, base_url=base_url or None, max_retries=max_retries, timeout=timeout
        )
        self._anthropic = anthropic

    async def complete(self, request: LLMRequest) -> LLMResponse:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            # Cache breakpoints: the tools, the agent's fixed system text, core memory (changes only
            # when memory does), and the end of the conversation (the next step reads it from cache).
            "system": _system_blocks(request),
            "messages": _cache_last(request.messages),
        }
        if request.tools:
            tools: list[JSON] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in request.tools
            ]
            tools[-1] = {**tools[-1], "cache_control": CACHE}
            kwargs["tools"] = tools
        a = self._anthropic
        try:
            response = await self._client.messages.create(**kwargs)
        except a.AuthenticationError as exc:
            raise ProviderError(f"Anthropic refused the API key ({exc.status_code}): check ANTHROPIC_API_KEY.") from exc
        except a.APIStatusError as exc:
            too_long = TOO_LONG.search(_detail(exc)) if exc.status_code in (400, 413) else None
            if too_long is not None:
                raise PromptTooLongError(
                    f"The Anthropic API refused the prompt as longer than the model's context window: {_detail(exc)}. "
                    "Set context_window to the model's window (or below it).",
                    tokens=int(too_long.group(1) or 0),
                    maximum=int(too_long.group(2) or 0),
                ) from exc
            if exc.status_code in RETRIED or exc.status_code >= 500:
                raise ProviderError(
                    f"The Anthropic API answered {exc.status_code} after retries: {_detail(exc)}. "
                    "Try again later, or check the model name and max_tokens."
                ) from exc
            raise ProviderError(  # not retried: the same request would be refused again
                f"The Anthropic API refused the request ({exc.status_code}): {_detail(exc)}. Retrying will not "
                "help: check the model name, max_tokens and context_window."
            ) from exc
        except a.APIConnectionError as exc:
            raise ProviderError(
                f"Could not reach the Anthropic API ({exc}): check the network or anthropic_base_url."
            ) from exc
        except a.AnthropicError as exc:
            raise ProviderError(f"The Anthropic client failed: {exc}") from exc
        except ValueError as exc:  # a 200 whose body is not JSON (json.JSONDecodeError): a proxy's page, a cut body
            raise _malformed(exc) from exc
        try:
            return _response(response)
        except (AttributeError, TypeError, ValueError) as exc:  # a JSON answer without the Messages API's fields
            raise _malformed(exc) from exc


def _response(response: Any) -> LLMResponse:
    text = "".join(b.text for b in response.content if b.type == "text")
    calls = tuple(ToolCall(b.id, b.name, dict(b.input or {})) for b in response.content if b.type == "tool_use")
    u = response.usage
    usage = Usage(
        input_tokens=u.input_tokens or 0,
        output_tokens=u.output_tokens or 0,
        cache_read_input_tokens=getattr(u, "cache_read_input_tokens", 0) or 0,
        cache_creation_input_tokens=getattr(u, "cache_creation_input_tokens", 0) or 0,
    )
    return LLMResponse(
        text=text,
        tool_calls=calls,
        stop_reason=response.stop_reason or "end_turn",
        usage=usage,
        model=str(response.model or ""),
    )


def _malformed(exc: Exception) -> ProviderError:
    return ProviderError(
        f"The Anthropic API (or a proxy in front of it) answered with a malformed message ({type(exc).__name__}: "
        f"{str(exc)[:200]}). Try again; if it persists, check anthropic_base_url."
    )


def _system_blocks(request: LLMRequest) -> list[JSON]:
    cut = request.stable_prefix
    parts = [request.system[:cut], request.system[cut:]] if 0 < cut < len(request.system) else [request.system]
    return [{"type": "text", "text": p, "cache_control": CACHE} for p in parts if p]


def _cache_last(messages: Sequence[Turn]) -> list[JSON]:
    """Mark the end of the conversation so the next step reads everything before it from the cache."""
    out: list[JSON] = [{"role": m["role"], "content": list(m["content"])} for m in messages]
    if out:
        content: list[JSON] = [dict(b) for b in out[-1]["content"]]
        content[-1] = {**content[-1], "cache_control": CACHE}
        out[-1]["content"] = content
    return out


def _detail(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(exc, "message", exc))
