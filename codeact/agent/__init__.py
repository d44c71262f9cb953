"""Agents over one toolset: code actions (``CodeActAgent``) and JSON function calls
(``FunctionCallingAgent``), the model clients they talk to, episodes and traces.

    from codeact.agent import CodeActAgent, Budget
    from codeact.agent.models import make_model

    episode = CodeActAgent(make_model("openai:gpt-4o-mini"), [get_weather]).run("Which city is warmer?")

Floor 4 of the layers (docs/architecture.md): imports ``runtime`` and below, never a higher floor.
"""

from .code_agent import CodeActAgent, extract_code
from .episode import Budget, Episode
from .json_agent import FunctionCallingAgent
from .messages import Message, ModelResponse, ToolCall, ToolResult, Usage
from .models import AnthropicClient, ModelClient, OpenAIChatClient, ScriptedModel, make_model
from .prompts import CODE_SYSTEM_PROMPT, JSON_SYSTEM_PROMPT, execute_python_tool
from .trace import ReplayModel, load_trace

__all__ = [
    "CODE_SYSTEM_PROMPT",
    "JSON_SYSTEM_PROMPT",
    "AnthropicClient",
    "Budget",
    "CodeActAgent",
    "Episode",
    "FunctionCallingAgent",
    "Message",
    "ModelClient",
    "ModelResponse",
    "OpenAIChatClient",
    "ReplayModel",
    "ScriptedModel",
    "ToolCall",
    "ToolResult",
    "Usage",
    "execute_python_tool",
    "extract_code",
    "load_trace",
    "make_model",
]
