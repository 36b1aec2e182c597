"""Tool calls in /v1/chat/completions: the request's tools and tool choice checked
(chat/tool_answer.py holds the rest: tool messages, the prompt, and the answer shaped as OpenAI's
`message.tool_calls` or streamed `delta.tool_calls`, shared with the llama-cpp-python shim).
"""
from __future__ import annotations

from ..chat.tool_answer import ToolAnswer, message_fields, tool_prompt  # noqa: F401  (this module's names)
from ..chat.tools import ToolError, ToolSetup, check_tool_choice, check_tools, tool_format


def tool_setup(body: dict, template_source: str) -> ToolSetup:
    """The request's `tools`, `tool_choice` and `parallel_tool_calls`, checked."""
    for legacy in ("functions", "function_call"):  # OpenAI's older spelling: not silently ignored
        if body.get(legacy) is not None:
            raise ToolError(f"'{legacy}' is not supported: use 'tools' and 'tool_choice'", legacy)
    tools = check_tools(body["tools"]) if body.get("tools") is not None else []
    choice = check_tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls", True)
    if parallel is None:
        parallel = True
    if not isinstance(parallel, bool):
        raise ToolError("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    return ToolSetup(tools, choice, parallel, tool_format(template_source))
