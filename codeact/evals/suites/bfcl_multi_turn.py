"""BFCL v4 multi-turn (``bfcl-multi-turn[:CATEGORY]``), read from the installed ``bfcl-eval`` package.

Categories: ``base``, ``miss_func``, ``miss_param``, ``long_context`` (all four without one). The
tasks, BFCL's stateful classes (file system, messaging, trading, travel, vehicle, …), their function
docs and the ground truth come from the package at run time; nothing of BFCL is copied here. Each
episode gets its own instances of the task's classes, loaded with the task's initial state; their
public methods become host tools (stubs in code mode, definitions in JSON mode). BFCL's user turns
drive the conversation (:mod:`._bfcl_agents`), and the episode is graded by BFCL's own
``multi_turn_checker`` (state and execution-result comparison, turn by turn).

The scripted model replays BFCL's ground truth: in JSON mode each ground-truth call as one tool call
(one per reply, since BFCL runs a turn's calls in order and they change state), then a text reply
ending the turn; in code mode one code action per turn making the same calls.

Install: ``pip install 'codeact[bfcl]'`` or, without the package's heavy declared dependencies
(torch via sentence-transformers, faiss, vendor SDKs), ``scripts/ensure-bfcl.sh``.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import itertools
import json
import re
import threading
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

from ...runtime.toolset import Tool, Toolset
from ...tool_stubs import ToolSpec
from ..checks import Check
from ..suite import Suite, Task
from ._bfcl_agents import BfclCodeAgent, BfclJsonAgent, TurnPlan
from ._script import call, calls, py

__all__ = ["CATEGORIES", "decode_calls", "grade", "ground_truth_scripts", "load_entries", "schema_violations", "suite"]

CATEGORIES: tuple[str, ...] = ("base", "miss_func", "miss_param", "long_context")
_VERSION = "BFCL_v4"
#: BFCL's own per-turn step limit (``MAXIMUM_STEP_LIMIT``), times the task's turns.
_STEPS_PER_TURN = 20
_INSTALL = ("the bfcl-multi-turn suite needs the bfcl-eval package: run scripts/ensure-bfcl.sh "
            "(or pip install 'codeact[bfcl]')")
_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
_run_ids = itertools.count()


def _bfcl(module: str) -> Any:
    try:
        return importlib.import_module(f"bfcl_eval.{module}")
    except ImportError as exc:
        raise ValueError(f"{_INSTALL} ({exc})") from None


def _lines(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@functools.cache
def _data() -> Any:
    _bfcl("constants.executable_backend_config")  # the package is there
    return resources.files("bfcl_eval") / "data"


@functools.cache
def _func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    mapping = _bfcl("constants.executable_backend_config").MULTI_TURN_FUNC_DOC_FILE_MAPPING
    return tuple(_lines(_data() / "multi_turn_func_doc" / mapping[class_name]))


@functools.cache
def load_entries(category: str) -> tuple[tuple[dict[str, Any], list[list[str]]], ...]:
    """BFCL's test entries of a category with their ground truth, as the package ships them."""
    if category not in CATEGORIES:
        raise ValueError(f"bfcl-multi-turn has no category {category!r}; categories: {', '.join(CATEGORIES)}")
    name = f"{_VERSION}_multi_turn_{category}.json"
    answers = {a["id"]: a["ground_truth"] for a in _lines(_data() / "possible_answer" / name)}
    return tuple((e, answers[e["id"]]) for e in _lines(_data() / name))


def _schema(node: Any) -> Any:
    """BFCL's parameter types in JSON Schema (``dict`` → object, ``float`` → number, ``any`` → any)."""
    if isinstance(node, list):
        return [_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _schema(v) for k, v in node.items() if k != "type"}
    if "properties" in node:
        out["properties"] = {k: _schema(v) for k, v in node["properties"].items()}
    kind = node.get("type")
    if isinstance(kind, str) and kind != "any":
        out["type"] = _SCHEMA_TYPES.get(kind, kind)
    return out


def _instances(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Fresh instances of the entry's classes, loaded as BFCL loads them (``execute_multi_turn_func_call``)."""
    config = _bfcl("constants.executable_backend_config")
    long_context = "long_context" in entry["id"] or "composite" in entry["id"]
    out = {}
    for class_name in entry["involved_classes"]:
        instance = getattr(importlib.import_module(config.CLASS_FILE_PATH_MAPPING[class_name]), class_name)()
        if class_name not in config.STATELESS_CLASSES:
            instance._load_scenario(copy.deepcopy(entry["initial_config"].get(class_name, {})),
                                    long_context=long_context)
        out[class_name] = instance
    return out


def _methods(instances: Mapping[str, Any]) -> dict[str, Any]:
    """Public method name → bound method; a later class wins a shared name, as in BFCL."""
    found: dict[str, Any] = {}
    for instance in instances.values():
        for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
            if not name.startswith("_"):
                found[name] = method
    return found


def _signatures(entry: Mapping[str, Any]) -> dict[str, list[str]]:
    """Public method name → its parameter names (without ``self``), from the classes alone."""
    config = _bfcl("constants.executable_backend_config")
    found: dict[str, list[str]] = {}
    for class_name in entry["involved_classes"]:
        cls = getattr(importlib.import_module(config.CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                found[name] = list(inspect.signature(fn).parameters)[1:]
    return found


def _host_fn(method: Callable[..., Any], lock: threading.Lock) -> Callable[..., Any]:
    def run(**arguments: Any) -> Any:
        with lock:  # one episode's state, changed by one call at a time
            # BFCL's classes keep (and later change) the lists they are given: not the record's own
            result = method(**copy.deepcopy(arguments))
        # the math class answers mpmath numbers: as text, as BFCL shows the model a value it cannot dump
        return json.loads(json.dumps(result, default=str))

    return run


def make_tools(entry: Mapping[str, Any]) -> Toolset:
    """One episode's tools: the documented public methods of fresh instances of the entry's classes."""
    methods = _methods(_instances(entry))
    docs = {d["name"]: d for c in entry["involved_classes"] for d in _func_docs(c)}
    lock = threading.Lock()
    tools = [Tool(ToolSpec(name=name, description=doc.get("description", ""), input_schema=_schema(doc["parameters"])),
                  fn=_host_fn(methods[name], lock))
             for name, doc in docs.items() if name in methods]
    return Toolset(tools)


def _parse(call_text: str, params: Mapping[str, list[str]]) -> tuple[str, dict[str, Any]]:
    """``name(a, b=1)`` → name and keyword arguments (positional ones named from the method)."""
    node = ast.parse(call_text, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a BFCL call: {call_text!r}")
    name = node.func.id
    arguments = {params[name][i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})
    return name, arguments


def _turn_texts(entry: Mapping[str, Any]) -> list[str]:
    prompt = _bfcl("constants.default_prompts").DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    return ["\n\n".join(str(m["content"]) for m in turn if m.get("role") == "user") or prompt
            for turn in entry["question"]]


def _plan(entry: Mapping[str, Any]) -> TurnPlan:
    added = {int(i): list(names) for i, names in (entry.get("missed_function") or {}).items()}
    return TurnPlan(_turn_texts(entry), added, frozenset(n for names in added.values() for n in names))


def ground_truth_scripts(entry: Mapping[str, Any], truth: list[list[str]]) -> dict[str, list[Any]]:
    """BFCL's ground truth as reference replies: per turn, JSON tool calls or one code action."""
    params = _signatures(entry)
    json_turns: list[Any] = []
    code_turns: list[Any] = []
    for i, turn in enumerate(truth):
        for text in turn:
            name, arguments = _parse(text, params)
            json_turns.append(calls(call(name, **arguments)))
        json_turns.append(f"Turn {i + 1} done.")
        code_turns.append(py("\n".join([*turn, f"final_answer('turn {i + 1} done')"])) if turn
                          else f"Turn {i + 1}: nothing to call.")
    return {"json": json_turns, "code": code_turns}


def schema_violations(entry: Mapping[str, Any], truth: list[list[str]]) -> list[str]:
    """The ground-truth calls whose arguments BFCL's own function docs reject (as the host does)."""
    from ...errors import ToolArgumentsError

    tools, params = make_tools(entry), _signatures(entry)
    bad = []
    for text in (t for turn in truth for t in turn):
        name, arguments = _parse(text, params)
        try:
            tools[name].spec.validate_arguments(arguments)
        except ToolArgumentsError as exc:
            bad.append(f"{text}: {'; '.join(exc.problems)}")
    return bad


def decode_calls(answer: Any) -> list[list[list[str]]] | None:
    """An episode's answer as BFCL's decoded model result (per turn, per step, call strings)."""
    turns = answer.get("turns") if isinstance(answer, Mapping) else None
    if not isinstance(turns, list):
        return None
    return [[[str(c) for c in turn]] if turn else [] for turn in turns]


def grade(entry: Mapping[str, Any], truth: list[list[str]], answer: Any) -> dict[str, Any]:
    """BFCL's verdict on an episode's answer: ``{"valid": bool, ...}`` from ``multi_turn_checker``."""
    decoded = decode_calls(answer)
    if decoded is None or len(decoded) != len(truth):  # as BFCL's runner: a cut-short run fails
        got = "no calls" if decoded is None else f"{len(decoded)} turns"
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error_message": f"{got} for the {len(truth)} turns of the task"}
    checker = _bfcl("eval_checker.multi_turn_eval.multi_turn_checker").multi_turn_checker
    utils = _bfcl("eval_checker.multi_turn_eval.multi_turn_utils")
    # BFCL keeps its instances in its module's globals under the model name: a name of our own per
    # grading keeps runs apart, and the instances are dropped afterwards.
    model = f"codeact_{next(_run_ids)}"
    prefix = re.sub(r"[-./:]", "_", model) + "_"
    try:
        result: dict[str, Any] = checker(decoded, truth, dict(entry), entry["id"].rsplit("_", 1)[0], model)
    finally:
        for key in [k for k in vars(utils) if k.startswith(prefix)]:
            del vars(utils)[key]
    return result


def _task(entry: dict[str, Any], truth: list[list[str]], category: str) -> Task:
    plan = _plan(entry)

    def bfcl_multi_turn_checker(answer: Any) -> bool:
        return bool(grade(entry, truth, answer).get("valid"))

    def agent(mode: str, *args: Any, **kwargs: Any) -> Any:
        return (BfclCodeAgent if mode == "code" else BfclJsonAgent)(plan, *args, **kwargs)

    n, gt_calls = len(plan.texts), sum(map(len, truth))
    # BFCL's step limit per turn, plus room for the scripted model's one call per reply
    return Task(id=entry["id"], instruction=plan.texts[0], tools=functools.partial(make_tools, entry),
                check=Check("bfcl_multi_turn_checker", bfcl_multi_turn_checker),
                budget={"max_turns": _STEPS_PER_TURN * n + gt_calls, "max_tool_calls": 50 * n + gt_calls},
                scripts=ground_truth_scripts(entry, truth), tags=(category,), agent=agent)


def suite(category: str | None = None) -> Suite:
    """The tasks of one category (all four when None), in BFCL's order."""
    chosen = CATEGORIES if category is None else (category,)
    tasks = [_task(e, t, c) for c in chosen for e, t in load_entries(c)]
    name = "bfcl-multi-turn" + (f":{category}" if category else "")
    return Suite(name, tasks, description=f"BFCL v4 multi-turn ({', '.join(chosen)}), graded by BFCL's checker")
