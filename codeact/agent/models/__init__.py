"""Model clients: OpenAI Chat Completions, Anthropic Messages, and a scripted stand-in."""

from codeact.agent.models._http import HTTPOptions
from codeact.agent.models.anthropic import AnthropicClient
from codeact.agent.models.base import ModelClient, ToolChoice, ToolDef
from codeact.agent.models.factory import load_script, make_model
from codeact.agent.models.openai import OpenAIChatClient, OpenAIClient
from codeact.agent.models.scripted import ScriptedModel, ScriptedRequest

__all__ = [
    "AnthropicClient",
    "HTTPOptions",
    "ModelClient",
    "OpenAIChatClient",
    "OpenAIClient",
    "ScriptedModel",
    "ScriptedRequest",
    "ToolChoice",
    "ToolDef",
    "load_script",
    "make_model",
]
