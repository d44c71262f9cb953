"""Model clients: OpenAI Chat Completions, Anthropic Messages, and a scripted stand-in."""

from typing import TYPE_CHECKING, Any

from codeact._deprecated import deprecated_alias
from codeact.agent.models._http import HTTPOptions
from codeact.agent.models.anthropic import AnthropicClient
from codeact.agent.models.base import ModelClient, ToolChoice, ToolDef
from codeact.agent.models.factory import load_script, make_model
from codeact.agent.models.openai import OpenAIClient
from codeact.agent.models.scripted import ScriptedModel, ScriptedRequest

__all__ = [
    "AnthropicClient",
    "HTTPOptions",
    "ModelClient",
    "OpenAIClient",
    "ScriptedModel",
    "ScriptedRequest",
    "ToolChoice",
    "ToolDef",
    "load_script",
    "make_model",
]

if TYPE_CHECKING:
    from codeact.agent.models.openai import OpenAIChatClient as OpenAIChatClient  # deprecated: warns at run time
else:
    def __getattr__(name: str) -> Any:
        return deprecated_alias(__name__, name,
                                {"OpenAIChatClient": ("codeact.agent.models.OpenAIClient", OpenAIClient)})
