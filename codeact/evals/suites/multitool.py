"""Multi-tool tasks in the spirit of M3ToolEval (our own tasks and tools): decoding chains, DNA,
trade with tariffs and currencies, travel planning with traps, and a stateful text browser."""

from __future__ import annotations

import base64
import codecs

from ..checks import numeric, set_equal
from ..suite import Suite, Task
from ._m3_tools import (
    CODON,
    FLIGHTS,
    HOTELS,
    MESSAGES,
    PRICES,
    SEQUENCES,
    TARIFFS,
    USD_PER,
    browser_tools,
    decoding_tools,
    dna_tools,
    trade_tools,
    travel_tools,
)
from ._script import answer, call, calls, py

__all__ = ["SUITE"]

# -- decoding ------------------------------------------------------------------------------------

_STEP1 = base64.b64decode(MESSAGES[7]).decode()
_STEP2 = _STEP1[::-1]
_PLAIN = codecs.encode(_STEP2, "rot13")

# Alike by design (the other tasks here and in the other suites): tasks are declarative data, one Task
# literal each with its instruction, expected answer, check and reference replies.
DECODE = Task(
    id="m3.decode",
    instruction="Message 7 was encoded with ROT13, then reversed, then base64-encoded. What does it say?",
    tools=decoding_tools,
    expected=_PLAIN,
    scripts={
        "code": [py('final_answer(rot13(text=reverse(text=base64_decode(text=get_message(message_id=7)))))',
                    "Undo the steps in reverse order.")],
        "json": [
            calls(call("get_message", message_id=7)),
            calls(call("base64_decode", text=MESSAGES[7])),
            calls(call("reverse", text=_STEP1)),
            calls(call("rot13", text=_STEP2)),
            answer(_PLAIN),
        ],
    },
)

# -- DNA -----------------------------------------------------------------------------------------


def _revcomp(seq: str) -> str:
    return seq[::-1].translate(str.maketrans("ACGT", "TGCA"))


def _translate(seq: str) -> str:
    out = []
    for i in range(0, len(seq) - 2, 3):
        if CODON[seq[i:i + 3]] == "*":
            break
        out.append(CODON[seq[i:i + 3]])
    return "".join(out)


def _gc(seq: str) -> float:
    return round((seq.count("G") + seq.count("C")) / len(seq), 4)


_RC_B = _revcomp(SEQUENCES["seq-B"])
_GC_RICH = sorted(name for name, seq in SEQUENCES.items() if _gc(seq) > 0.5)

DNA_TRANSLATE = Task(
    id="m3.dna_translate",
    instruction="Translate the reverse complement of DNA sequence seq-B into a protein "
    "(one-letter codes, up to the first stop codon).",
    tools=dna_tools,
    expected=_translate(_RC_B),
    scripts={
        "code": [py('final_answer(translate(sequence=reverse_complement(sequence=get_sequence(name="seq-B"))))')],
        "json": [
            calls(call("get_sequence", name="seq-B")),
            calls(call("reverse_complement", sequence=SEQUENCES["seq-B"])),
            calls(call("translate", sequence=_RC_B)),
            answer(_translate(_RC_B)),
        ],
    },
)

DNA_GC = Task(
    id="m3.dna_gc",
    instruction="Which of the sequences seq-A, seq-B, seq-C, seq-D and seq-E have a GC content above 0.5? "
    "Answer with a comma-separated list of names.",
    tools=dna_tools,
    expected=_GC_RICH,
    check=set_equal(_GC_RICH),
    scripts={
        "code": [py('''
names = ["seq-A", "seq-B", "seq-C", "seq-D", "seq-E"]
gc = {n: gc_content(sequence=get_sequence(name=n)) for n in names}
print(gc)
final_answer([n for n in names if gc[n] > 0.5])
''')],
        "json": [
            calls(*(call("get_sequence", name=n) for n in SEQUENCES)),
            calls(*(call("gc_content", sequence=s) for s in SEQUENCES.values())),
            answer(_GC_RICH, ", ".join(_GC_RICH)),
        ],
    },
)

# -- trade ---------------------------------------------------------------------------------------

_QTY = 120


def _landed_local(market: str) -> float:
    return round(PRICES[market][0] * _QTY * (1 + TARIFFS[market]), 2)


def _landed_usd(market: str) -> float:
    return round(_landed_local(market) * USD_PER[PRICES[market][1]], 2)


_BEST_MARKET = min(PRICES, key=_landed_usd)

TRADE = Task(
    id="m3.trade",
    instruction="We need 120 units of 'copper wire'. The landed cost is unit price x quantity x (1 + tariff). "
    "Which market (US, EU, CN or IN) has the lowest landed cost in US dollars? Answer with the market code.",
    tools=trade_tools,
    expected=_BEST_MARKET,
    scripts={
        # A typical slip: the code forgets the tariff.
        "code": [py('''
cost = {}
for m in ["US", "EU", "CN", "IN"]:
    p = get_price(product="copper wire", market=m)
    cost[m] = convert_currency(amount=p["unit_price"] * 120, from_currency=p["currency"], to_currency="USD")
print(cost)
final_answer(min(cost, key=cost.get))
''')],
        "json": [
            calls(*(call("get_price", product="copper wire", market=m) for m in PRICES),
                  *(call("get_tariff", product="copper wire", market=m) for m in PRICES)),
            calls(*(call("convert_currency", amount=_landed_local(m), from_currency=PRICES[m][1], to_currency="USD")
                    for m in PRICES if PRICES[m][1] != "USD")),
            answer(_BEST_MARKET),
        ],
    },
)

# -- travel --------------------------------------------------------------------------------------

_FLIGHT = min((f for f in FLIGHTS if f["stops"] <= 1), key=lambda f: f["price_usd"])
_HOTEL = min((h for h in HOTELS if h["rating"] >= 4.0), key=lambda h: h["price_per_night_usd"])
_TOTAL = _FLIGHT["price_usd"] + 3 * _HOTEL["price_per_night_usd"]
_TRAP = min(f["price_usd"] for f in FLIGHTS) + 3 * _HOTEL["price_per_night_usd"]

TRAVEL = Task(
    id="m3.travel",
    instruction="Plan a trip from Pittsburgh to Tokyo leaving 2026-09-10 with 3 nights in a hotel: the cheapest "
    "flight with at most one stop and the cheapest hotel rated 4.0 or better. What is the total cost in USD?",
    tools=travel_tools,
    expected=_TOTAL,
    check=numeric(_TOTAL, abs_tol=0.01),
    scripts={
        "code": [py('''
flights = [f for f in search_flights(origin="Pittsburgh", destination="Tokyo", date="2026-09-10") if f["stops"] <= 1]
hotels = [h for h in search_hotels(city="Tokyo", check_in="2026-09-10", nights=3) if h["rating"] >= 4.0]
flight = min(flights, key=lambda f: f["price_usd"])
hotel = min(hotels, key=lambda h: h["price_per_night_usd"])
final_answer(flight["price_usd"] + 3 * hotel["price_per_night_usd"])
''')],
        # A typical slip: the cheapest flight has two stops.
        "json": [
            calls(call("search_flights", origin="Pittsburgh", destination="Tokyo", date="2026-09-10"),
                  call("search_hotels", city="Tokyo", check_in="2026-09-10", nights=3)),
            answer(round(_TRAP, 2), f"Total: {_TRAP:.2f} USD."),
        ],
    },
)

# -- browser -------------------------------------------------------------------------------------

BROWSER_PRICE = Task(
    id="m3.browser_price",
    instruction="On https://shop.example/ find the price of the Blue Kettle (Kitchen section). Answer in USD.",
    tools=browser_tools,
    expected=34.5,
    check=numeric(34.5, abs_tol=0.001),
    scripts={
        "code": [py('''
visit(url="https://shop.example/")
page = click(link="Kitchen")
while "Blue Kettle" not in page["links"]:
    page = scroll_down()
page = click(link="Blue Kettle")
price = next(line for line in page["lines"] if line.startswith("Price:"))
final_answer(float(price.split("$")[1]))
''')],
        "json": [
            calls(call("visit", url="https://shop.example/")),
            calls(call("click", link="Kitchen")),
            calls(call("scroll_down")),
            calls(call("click", link="Blue Kettle")),
            answer(34.5, "The Blue Kettle costs $34.50."),
        ],
    },
)


def _cheap_garden() -> int:
    from ._m3_tools import SITE

    prices = [float(line.rsplit("$", 1)[1]) for line in SITE["https://shop.example/garden"]["lines"]]
    return sum(1 for p in prices if p < 20)


BROWSER_COUNT = Task(
    id="m3.browser_count",
    instruction="How many products in the Garden section of https://shop.example/ cost less than $20?",
    tools=browser_tools,
    expected=_cheap_garden(),
    check=numeric(_cheap_garden()),
    scripts={
        "code": [py('''
page = visit(url="https://shop.example/garden")
lines = list(page["lines"])
while True:
    shown, total = page["position"].split("-")[1].split(" of ")
    if int(shown) >= int(total):
        break
    page = scroll_down()
    lines += page["lines"]
final_answer(sum(1 for line in lines if float(line.rsplit("$", 1)[1]) < 20))
''')],
        "json": [
            calls(call("visit", url="https://shop.example/garden")),
            calls(call("scroll_down")),
            calls(call("scroll_down")),
            answer(_cheap_garden(), f"{_cheap_garden()} products cost less than $20."),
        ],
    },
)

SUITE = Suite(
    "multitool",
    [DECODE, DNA_TRANSLATE, DNA_GC, TRADE, TRAVEL, BROWSER_PRICE, BROWSER_COUNT],
    description="Decoding, DNA, trade, travel and a stateful browser (in the spirit of M3ToolEval).",
)
