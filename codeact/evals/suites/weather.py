"""The seeds' weather tasks: compare two cities, convert units, an ambiguous city, a service that
times out once, and cities reporting in mixed °C/°F (demo data, not live weather).

Stations report in their own unit ("C" or "F"), so comparing raw numbers is the classic slip.
Each episode gets fresh tools: the Tokyo station times out on its first request per episode.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ...errors import ToolError
from ...runtime.toolset import Toolset, tool
from ..checks import numeric, set_equal
from ..suite import Suite, Task
from ._script import answer, call, calls, py

__all__ = ["STATIONS", "SUITE", "make_tools"]

#: city → (temperature, units, conditions); °C equivalents: 18, 20, 18, 15, 33, -2, 8, 10, 8.
STATIONS: dict[str, tuple[float, str, str]] = {
    "Pittsburgh": (18.0, "C", "cloudy"),
    "Beijing": (68.0, "F", "clear"),
    "Tokyo": (18.0, "C", "rain"),
    "San Francisco": (15.0, "C", "fog"),
    "Cairo": (91.4, "F", "sunny"),
    "Moscow": (28.4, "F", "snow"),
    "Springfield, Illinois": (46.4, "F", "overcast"),
    "Springfield, Missouri": (50.0, "F", "windy"),
    "Reykjavik": (8.0, "C", "drizzle"),
}
OBSERVED_AT = "2026-08-27T14:00:00Z"
TIMEOUT_S = 0.2


def make_tools() -> Toolset:
    """Fresh weather tools: the Tokyo station is slow on its first request."""
    lock = threading.Lock()
    tokyo_requests = [0]

    @tool(timeout_s=TIMEOUT_S)
    def get_weather(city: str) -> dict[str, Any]:
        """Current weather at a city's station, in the station's own units.

        Args:
            city: City name, e.g. "Pittsburgh"; add the region when several cities share the name.

        Returns:
            {"city", "temperature", "units": "C" or "F", "conditions", "observed_at"}.
        """
        matches = [name for name in STATIONS if name == city or name.split(",")[0] == city]
        if len(matches) > 1:
            raise ToolError("not_found", f"ambiguous city {city!r}: say which one: {', '.join(matches)}")
        if not matches:
            raise ToolError("not_found", f"no station for {city!r}")
        name = matches[0]
        if name == "Tokyo":
            with lock:
                tokyo_requests[0] += 1
                first = tokyo_requests[0] == 1
            if first:
                # Well past the timeout, so a host stalled for a moment still sees it pass first.
                time.sleep(TIMEOUT_S * 5)  # the station does not answer in time, once
        temperature, units, conditions = STATIONS[name]
        return {"city": name, "temperature": temperature, "units": units, "conditions": conditions,
                "observed_at": OBSERVED_AT}

    @tool(cacheable=True)
    def convert_temperature(value: float, from_units: str, to_units: str) -> float:
        """Convert a temperature between Celsius ("C") and Fahrenheit ("F").

        Args:
            value: The temperature.
            from_units: "C" or "F".
            to_units: "C" or "F".
        """
        if {from_units, to_units} - {"C", "F"}:
            raise ToolError("invalid_arguments", "units are 'C' or 'F'")
        if from_units == to_units:
            return value
        return round((value - 32) * 5 / 9, 4) if from_units == "F" else round(value * 9 / 5 + 32, 4)

    return Toolset([get_weather, convert_temperature])


_TO_C = '''
def to_c(obs):
    return obs["temperature"] if obs["units"] == "C" else (obs["temperature"] - 32) * 5 / 9
'''

# Alike by design (the other tasks here and in the other suites): tasks are declarative data, one Task
# literal each with its instruction, expected answer, check and reference replies.
COMPARE = Task(
    id="weather.compare",
    instruction="How many degrees Celsius warmer is Beijing than Pittsburgh right now? "
    "Answer with the difference in °C (negative if Beijing is colder).",
    tools=make_tools,
    expected=2.0,
    check=numeric(2.0, abs_tol=0.05),
    scripts={
        "code": [py(_TO_C + '''
p = get_weather(city="Pittsburgh")
b = get_weather(city="Beijing")
final_answer(round(to_c(b) - to_c(p), 2))
''', "Both stations may use different units, so I convert to Celsius first.")],
        "json": [
            calls(call("get_weather", city="Pittsburgh"), call("get_weather", city="Beijing")),
            calls(call("convert_temperature", value=68.0, from_units="F", to_units="C"),
                  say="Beijing reports in °F; converting."),
            answer(2.0, "Beijing is 2.0 °C warmer (20.0 °C vs 18.0 °C)."),
        ],
    },
)

CONVERT = Task(
    id="weather.convert",
    instruction="What is the current temperature in Beijing in degrees Celsius?",
    tools=make_tools,
    expected=20.0,
    check=numeric(20.0, abs_tol=0.05),
    scripts={
        "code": [py(_TO_C + '''
final_answer(round(to_c(get_weather(city="Beijing")), 1))
''')],
        "json": [
            calls(call("get_weather", city="Beijing")),
            calls(call("convert_temperature", value=68.0, from_units="F", to_units="C")),
            answer(20.0, "It is 20.0 °C in Beijing."),
        ],
    },
)

AMBIGUOUS = Task(
    id="weather.ambiguous_city",
    instruction="What is the temperature in Springfield, Missouri right now, in °F? Answer with the number.",
    tools=make_tools,
    expected=50.0,
    check=numeric(50.0, abs_tol=0.05),
    scripts={
        # A typical slip: the code takes the first candidate the error lists (Illinois).
        "code": [
            py('w = get_weather(city="Springfield")\nw'),
            py('''
import re
try:
    w = get_weather(city="Springfield")
except ToolError as e:
    first = re.search(r"say which one: ([^,]+, [^,]+)", e.message).group(1)
    w = get_weather(city=first)
final_answer(w["temperature"])
''', "The name is ambiguous; I'll take the first candidate."),
        ],
        "json": [
            calls(call("get_weather", city="Springfield")),
            calls(call("get_weather", city="Springfield, Missouri"), say="Two Springfields; the task says Missouri."),
            answer(50, "50 °F in Springfield, Missouri."),
        ],
    },
)

TIMEOUT = Task(
    id="weather.timeout",
    instruction="What is the temperature in Tokyo right now, in °C?",
    tools=make_tools,
    expected=18.0,
    check=numeric(18.0, abs_tol=0.05),
    budget={"max_turns": 4},
    scripts={
        "code": [py('''
for attempt in range(3):
    try:
        w = get_weather(city="Tokyo")
        break
    except ToolError as e:
        if not e.retryable:
            raise
        print("attempt", attempt + 1, "failed:", e.code)
final_answer(w["temperature"] if w["units"] == "C" else (w["temperature"] - 32) * 5 / 9)
''', "The service can be slow; I retry retryable errors.")],
        "json": [
            calls(call("get_weather", city="Tokyo")),
            calls(call("get_weather", city="Tokyo"), say="The station timed out (retryable); trying again."),
            answer(18, "It is 18 °C in Tokyo, with rain."),
        ],
    },
)

_FIVE = ["Pittsburgh", "Beijing", "San Francisco", "Cairo", "Moscow"]

WARMEST = Task(
    id="weather.warmest",
    instruction="Which of these cities is the warmest right now: Pittsburgh, Beijing, San Francisco, Cairo, "
    "Moscow? Stations report in °C or °F. Answer with the city name.",
    tools=make_tools,
    expected="Cairo",
    scripts={
        "code": [py(_TO_C + f'''
temps = {{c: to_c(get_weather(city=c)) for c in {_FIVE!r}}}
print(temps)
final_answer(max(temps, key=temps.get))
''')],
        "json": [
            calls(*(call("get_weather", city=c) for c in _FIVE)),
            calls(*(call("convert_temperature", value=v, from_units="F", to_units="C") for v in (68.0, 91.4, 28.4))),
            answer("Cairo"),
        ],
    },
)

_SIX = [*_FIVE, "Reykjavik"]

AT_LEAST_20 = Task(
    id="weather.at_least_20c",
    instruction="Which of Pittsburgh, Beijing, San Francisco, Cairo, Moscow and Reykjavik are at 20 °C or "
    "warmer right now? Answer with a comma-separated list of city names.",
    tools=make_tools,
    expected=["Beijing", "Cairo"],
    check=set_equal(["Beijing", "Cairo"]),
    scripts={
        "code": [py(_TO_C + f'''
hot = [c for c in {_SIX!r} if to_c(get_weather(city=c)) >= 20]
final_answer(hot)
''')],
        # A typical slip: comparing raw readings, so Moscow's 28.4 °F passes as 28.4 °C.
        "json": [
            calls(*(call("get_weather", city=c) for c in _SIX)),
            answer(["Beijing", "Cairo", "Moscow"]),
        ],
    },
)

MEAN = Task(
    id="weather.mean",
    instruction="What is the average temperature in °C across Pittsburgh, Beijing, Cairo and Moscow right now? "
    "Round to two decimals.",
    tools=make_tools,
    expected=17.25,
    check=numeric(17.25, abs_tol=0.01),
    scripts={
        "code": [
            py('''
temps = [get_weather(city=c)["temp"] for c in ["Pittsburgh", "Beijing", "Cairo", "Moscow"]]
'''),
            py(_TO_C + '''
temps = [to_c(get_weather(city=c)) for c in ["Pittsburgh", "Beijing", "Cairo", "Moscow"]]
final_answer(round(sum(temps) / len(temps), 2))
''', "The field is called temperature, and units vary."),
        ],
        "json": [
            calls(*(call("get_weather", city=c) for c in ("Pittsburgh", "Beijing", "Cairo", "Moscow"))),
            calls(*(call("convert_temperature", value=v, from_units="F", to_units="C") for v in (68.0, 91.4, 28.4))),
            answer(17.25, "The average is 17.25 °C ((18 + 20 + 33 - 2) / 4)."),
        ],
    },
)

SUITE = Suite(
    "weather",
    [COMPARE, CONVERT, AMBIGUOUS, TIMEOUT, WARMEST, AT_LEAST_20, MEAN],
    description="The seeds' weather tasks: compare, convert, ambiguous city, a timed-out service, mixed °C/°F.",
)
