"""What a stub's text says (issue 28): no empty ``Args:`` entries, a pydantic return model's class
named as the model is, and the schema's limits (``Field(ge=1)``) in words."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from codeact import Toolset, tool
from codeact.tool_stubs import ToolSpec, render_stubs


class Forecast(BaseModel):
    """A day's forecast."""

    city: str
    days: int = Field(ge=1, le=14, description="How many days.")
    high_c: float


@tool
def forecast(city: str, days: Annotated[int, Field(ge=1, le=14)] = 3, seconds: float = 1.0) -> Forecast:
    """Forecast for a city.

    Args:
        city: The city.
    """
    return Forecast(city=city, days=days, high_c=1.0)


def _stub() -> str:
    return render_stubs(Toolset([forecast]).specs, prompt=True)


def test_a_parameter_without_words_gets_no_empty_args_line() -> None:
    text = _stub()
    assert "        seconds:" not in text and "    city: The city." in text
    bare = ToolSpec(name="sleep", description="Sleep.",
                    input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}})
    assert "Args:" not in render_stubs([bare], prompt=True)  # nothing to say: no section


def test_the_return_class_is_named_as_the_model_and_its_limits_show() -> None:
    text = _stub()
    assert "class Forecast(TypedDict):" in text and ") -> Forecast:" in text
    assert "days: int  # How many days; >= 1, <= 14" in text  # the model's field
    assert "        days: >= 1, <= 14" in text  # the parameter's Field(ge=1, le=14)
    compile(render_stubs(Toolset([forecast]).specs), "<stubs>", "exec")


def test_limits_in_words() -> None:
    spec = ToolSpec(name="find", description="Find.", input_schema={"type": "object", "properties": {
        "q": {"type": "string", "description": "Query.", "minLength": 2, "maxLength": 50, "pattern": "^[a-z]+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "step": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}}, "required": ["q"]})
    text = render_stubs([spec], prompt=True)
    assert 'q: Query. (at least 2 characters, at most 50 characters, matching "^[a-z]+$")' in text
    assert "tags: at most 3 items" in text and "step: > 0, a multiple of 0.5" in text
