"""What a chat's run record keeps: the model, usage, each call placed on the run's timeline,
approvals and searches; never context values, and message contents only if configured."""

from __future__ import annotations

from app.chat.loop import ChatResult, ChatRun
from app.chat.model import Usage
from app.services.runs import RunRecording


def usage_document(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def fill_chat_record(
    run: RunRecording, chat: ChatRun, progress: ChatResult, *, keep_messages: bool
) -> None:
    """What is kept of a chat: never context values; message contents only if configured."""
    tool_ids = {tool.name: tool.tool_id for tool in chat.tools}
    run.model = chat.model
    if chat.provider is not None:  # the operator's endpoint: no provider named
        run.extra["provider"] = chat.provider
    run.iterations = progress.iterations
    run.usage = usage_document(progress.usage)
    if progress.finish_reason is not None:
        run.extra["finish_reason"] = progress.finish_reason
    run.tool_calls = [
        {
            "id": call.id,
            "name": call.name,
            "tool_id": tool_ids.get(call.name),
            "status": call.status,
            "duration_ms": call.duration_ms,
            "started_ms": call.started_ms,
            "arguments": call.arguments,
            **({"note": call.note} if call.note else {}),
            **({"approval": call.approval} if call.approval is not None else {}),
        }
        for call in progress.tool_calls
    ]
    run.extra["model_calls"] = progress.model_calls
    kept = {"approvals": progress.approvals, "searches": progress.searches}  # each search's tools
    run.extra.update((name, value) for name, value in kept.items() if value)
    if keep_messages:
        run.extra["messages"] = progress.messages
