"""`llama_cpp.llama_types`: the names llama-cpp-python gives its request and response dicts, for
the type hints of programs that import them. Its TypedDicts describe plain dicts, and the shim
returns plain dicts, so each name here is simply a dict type."""
from __future__ import annotations

from typing import Any, Dict, List, Union

JsonType = Union[None, int, str, bool, List[Any], Dict[str, Any]]

_DICT_TYPES = (  # llama_cpp/llama_types.py's TypedDicts and aliases of them, 0.3.x
    "EmbeddingUsage", "Embedding", "EmbeddingData", "CreateEmbeddingResponse", "CompletionLogprobs",
    "CompletionChoice", "CompletionUsage", "CreateCompletionResponse", "CompletionChunk", "Completion",
    "CreateCompletionStreamResponse", "ChatCompletionResponseFunctionCall", "ChatCompletionFunctionCall",
    "ChatCompletionResponseMessage", "ChatCompletionMessage", "ChatCompletionFunction", "ChatCompletionResponseFunction",
    "ChatCompletionTopLogprobToken", "ChatCompletionLogprobToken", "ChatCompletionLogprobs",
    "ChatCompletionResponseChoice", "ChatCompletionChoice", "CreateChatCompletionResponse", "ChatCompletion",
    "ChatCompletionMessageToolCallChunkFunction", "ChatCompletionMessageToolCallChunk",
    "ChatCompletionStreamResponseDeltaEmpty", "ChatCompletionChunkDeltaEmpty",
    "ChatCompletionStreamResponseDeltaFunctionCall", "ChatCompletionStreamResponseDelta", "ChatCompletionChunkDelta",
    "ChatCompletionStreamResponseChoice", "ChatCompletionChunkChoice", "CreateChatCompletionStreamResponse",
    "ChatCompletionChunk", "ChatCompletionStreamResponse", "ChatCompletionFunctions", "ChatCompletionFunctionCallOption",
    "ChatCompletionRequestResponseFormat", "ChatCompletionRequestMessageContentPartText",
    "ChatCompletionRequestMessageContentPartImageImageUrl", "ChatCompletionRequestMessageContentPartImage",
    "ChatCompletionRequestMessageContentPart", "ChatCompletionRequestSystemMessage",
    "ChatCompletionRequestUserMessage", "ChatCompletionMessageToolCallFunction", "ChatCompletionMessageToolCall",
    "ChatCompletionRequestAssistantMessageFunctionCall", "ChatCompletionRequestAssistantMessage",
    "ChatCompletionRequestToolMessage", "ChatCompletionRequestFunctionMessage", "ChatCompletionRequestMessage",
    "ChatCompletionRequestFunctionCallOption", "ChatCompletionRequestFunctionCall",
    "ChatCompletionFunctionParameters", "ChatCompletionToolFunction", "ChatCompletionTool",
    "ChatCompletionNamedToolChoiceFunction", "ChatCompletionNamedToolChoice", "ChatCompletionToolChoiceOption",
)
globals().update({name: Dict[str, Any] for name in _DICT_TYPES})
ChatCompletionMessageToolCalls = List[Dict[str, Any]]

__all__ = ["JsonType", "ChatCompletionMessageToolCalls", *_DICT_TYPES]
