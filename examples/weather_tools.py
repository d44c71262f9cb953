"""Example tools: the seeds' weather service (deterministic, offline)."""

from typing import Literal

from codeact import tool

_WEATHER = {
    "Pittsburgh": {"temperature": 12.0, "unit": "celsius", "condition": "cloudy"},
    "Beijing": {"temperature": 68.0, "unit": "fahrenheit", "condition": "sunny"},
    "San Francisco": {"temperature": 59.0, "unit": "fahrenheit", "condition": "foggy"},
}


@tool(cacheable=True)
def get_weather(city: str) -> dict:
    """Current weather for a city, in the unit the local service reports.

    Args:
        city: City name, e.g. "Pittsburgh".
    """
    if city not in _WEATHER:
        from codeact import ToolError

        raise ToolError("not_found", f"no weather station for {city!r}")
    return {"city": city, **_WEATHER[city]}


@tool
def convert_temperature(value: float, to: Literal["celsius", "fahrenheit"]) -> float:
    """Convert a temperature to the given unit.

    Args:
        value: The temperature in the other unit.
        to: The unit to convert to.
    """
    return round((value - 32) * 5 / 9, 2) if to == "celsius" else round(value * 9 / 5 + 32, 2)
