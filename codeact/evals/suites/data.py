"""Data processing: two tables (customers, orders) written as CSV into a fresh workspace per
episode, read through paged tools, with per-month exchange rates; answers need loops, joins and
aggregation. The data is generated from a fixed seed, and so are the expected answers and the
reference scripts (code mode: one program; JSON mode: the calls a careful model would make).
"""

from __future__ import annotations

import csv
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from ...errors import ToolError
from ...runtime.toolset import Toolset, tool
from ..checks import exact, list_equal, numeric, set_equal
from ..suite import Suite, Task
from ._script import answer, call, calls, py

__all__ = ["CUSTOMERS", "ORDERS", "RATES", "SUITE", "make_tools"]

PAGE = 25
MONTHS = [f"2024-{m:02d}" for m in range(1, 7)]
_CURRENCY = {"US": "USD", "DE": "EUR", "JP": "JPY", "BR": "BRL"}
_NAMES = ["Ada Park", "Bruno Lima", "Chen Wei", "Dora Klein", "Eko Sato", "Farah Ali", "Gus Moreau",
          "Hana Mori", "Ivo Braga", "Jill Stone", "Kurt Vogel", "Lena Costa"]


def _generate() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[tuple[str, str], float]]:
    rng = random.Random(7)
    customers = [
        {"id": f"C{i + 1:02d}", "name": name, "country": rng.choice(list(_CURRENCY)),
         "tier": rng.choice(["gold", "silver", "bronze"])}
        for i, name in enumerate(_NAMES)
    ]
    base = {"USD": (1.0, 20, 500), "EUR": (1.09, 20, 500), "JPY": (0.0068, 3000, 70000), "BRL": (0.2, 100, 2500)}
    rates = {(cur, m): (1.0 if cur == "USD" else round(rate * rng.uniform(0.97, 1.03), 6))
             for cur, (rate, _, _) in base.items() for m in MONTHS}
    orders: list[dict[str, Any]] = []
    for _ in range(90):
        cust = rng.choice(customers)
        cur = _CURRENCY[cust["country"]]
        _, low, high = base[cur]
        amount = float(rng.randint(low, high)) if cur == "JPY" else round(rng.uniform(low, high), 2)
        date = f"{rng.choice(MONTHS)}-{rng.randint(1, 28):02d}"
        status = rng.choices(["completed", "refunded", "pending"], weights=[70, 15, 15])[0]
        orders.append({"customer_id": cust["id"], "date": date, "amount": amount, "currency": cur, "status": status})
    orders.sort(key=lambda o: o["date"])
    for i, order in enumerate(orders):
        order["id"] = f"O{i + 1:03d}"
    orders = [{"id": o["id"], **{k: v for k, v in o.items() if k != "id"}} for o in orders]
    return customers, orders, rates


CUSTOMERS, ORDERS, RATES = _generate()


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _read_csv(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        if "amount" in row:
            row["amount"] = float(row["amount"])
    return rows


def make_tools() -> Toolset:
    """Tables written into a fresh workspace directory, removed when the runtime closes."""
    workspace = Path(tempfile.mkdtemp(prefix="codeact-data-"))
    _write_csv(workspace / "customers.csv", CUSTOMERS)
    _write_csv(workspace / "orders.csv", ORDERS)

    def load(name: str) -> list[dict[str, Any]]:
        path = workspace / f"{name}.csv"
        if name not in ("customers", "orders") or not path.is_file():
            raise ToolError("not_found", f"no table {name!r}; tables: customers, orders")
        return _read_csv(path)

    @tool(cacheable=True)
    def list_tables() -> list[dict[str, Any]]:
        """The tables in the workspace: name, row count and columns."""
        out = []
        for name in ("customers", "orders"):
            rows = load(name)
            out.append({"name": name, "rows": len(rows), "columns": list(rows[0])})
        return out

    @tool(cacheable=True)
    def read_table(name: str, offset: int = 0, limit: int = PAGE) -> dict[str, Any]:
        """Read up to ``limit`` rows (at most 25) of a table, starting at row ``offset``.

        Args:
            name: "customers" or "orders".
            offset: First row to return (0-based).
            limit: Rows per page, 1 to 25.

        Returns:
            {"table", "rows": [row dicts], "offset", "next_offset" (None at the end), "total"}.
        """
        if not 1 <= limit <= PAGE or offset < 0:
            raise ToolError("invalid_arguments", f"limit must be 1..{PAGE} and offset >= 0")
        rows = load(name)
        end = min(offset + limit, len(rows))
        return {"table": name, "rows": rows[offset:end], "offset": offset,
                "next_offset": end if end < len(rows) else None, "total": len(rows)}

    @tool(cacheable=True)
    def get_exchange_rate(currency: str, month: str) -> dict[str, Any]:
        """US dollars per unit of ``currency`` for a month.

        Args:
            currency: "USD", "EUR", "JPY" or "BRL".
            month: "YYYY-MM", January to June 2024.
        """
        if (currency, month) not in RATES:
            raise ToolError("not_found", f"no rate for {currency} in {month}")
        return {"currency": currency, "month": month, "usd_per_unit": RATES[currency, month]}

    toolset = Toolset([list_tables, read_table, get_exchange_rate])
    toolset.on_close(lambda: shutil.rmtree(workspace, ignore_errors=True))
    return toolset


# -- expected answers, computed from the data ----------------------------------------------------

def _usd(order: dict[str, Any]) -> float:
    return float(order["amount"]) * RATES[order["currency"], order["date"][:7]]


def _q1_revenue() -> float:
    total = 0.0
    for o in ORDERS:
        if o["status"] == "completed" and o["date"][:7] <= "2024-03":
            total += _usd(o)
    return round(total, 2)


def _spend() -> dict[str, float]:
    spend: dict[str, float] = {}
    for o in ORDERS:
        if o["status"] == "completed":
            spend[o["customer_id"]] = spend.get(o["customer_id"], 0.0) + _usd(o)
    return spend


def _top_customer() -> str:
    spend = _spend()
    best = max(spend, key=lambda c: spend[c])
    return str(next(c["name"] for c in CUSTOMERS if c["id"] == best))


def _refund_countries() -> list[str]:
    refunded = {o["customer_id"] for o in ORDERS if o["status"] == "refunded"}
    return sorted({c["country"] for c in CUSTOMERS if c["tier"] == "gold" and c["id"] in refunded})


def _monthly(orders: list[dict[str, Any]]) -> list[int]:
    counts = Counter(o["date"][:7] for o in orders if o["status"] == "completed")
    return [counts.get(m, 0) for m in MONTHS]


# -- reference scripts ---------------------------------------------------------------------------

_READ_ALL = '''
def read_all(name):
    rows, offset = [], 0
    while offset is not None:
        page = read_table(name=name, offset=offset, limit=25)
        rows += page["rows"]
        offset = page["next_offset"]
    return rows

orders = read_all("orders")
'''


def _pages(name: str, rows: int) -> dict[str, Any]:
    return calls(*(call("read_table", name=name, offset=o, limit=PAGE) for o in range(0, rows, PAGE)))


def _rates(orders: list[dict[str, Any]]) -> dict[str, Any]:
    keys = sorted({(o["currency"], o["date"][:7]) for o in orders if o["currency"] != "USD"})
    return calls(*(call("get_exchange_rate", currency=c, month=m) for c, m in keys))


_TABLES = calls(call("list_tables"))
_COMPLETED = [o for o in ORDERS if o["status"] == "completed"]
_Q1 = [o for o in _COMPLETED if o["date"][:7] <= "2024-03"]
_STATUS = dict(Counter(o["status"] for o in ORDERS))

Q1_REVENUE = Task(
    id="data.q1_revenue_usd",
    instruction="What was the total revenue in US dollars of completed orders in Q1 2024 (January to March)? "
    "Convert each order with its month's exchange rate. Round to cents.",
    tools=make_tools,
    expected=_q1_revenue(),
    check=numeric(_q1_revenue(), abs_tol=0.011),
    scripts={
        "code": [py(_READ_ALL + '''
rates, total = {}, 0.0
for o in orders:
    month = o["date"][:7]
    if o["status"] != "completed" or month > "2024-03":
        continue
    if (o["currency"], month) not in rates:
        rates[o["currency"], month] = get_exchange_rate(currency=o["currency"], month=month)["usd_per_unit"]
    total += o["amount"] * rates[o["currency"], month]
final_answer(round(total, 2))
''')],
        "json": [_TABLES, _pages("orders", len(ORDERS)), _rates(_Q1),
                 answer(_q1_revenue(), f"{_q1_revenue():.2f} USD of completed orders in January to March 2024.")],
    },
)

# Alike by design (the other tasks here and in the other suites): tasks are declarative data, one Task
# literal each with its instruction, expected answer, check and reference replies.
TOP_CUSTOMER = Task(
    id="data.top_customer",
    instruction="Which customer spent the most in US dollars on completed orders (Jan-Jun 2024)? "
    "Convert with each order's month rate. Answer with the customer's name.",
    tools=make_tools,
    expected=_top_customer(),
    scripts={
        "code": [py(_READ_ALL + '''
customers = {c["id"]: c["name"] for c in read_all("customers")}
rates, spend = {}, {}
for o in orders:
    if o["status"] != "completed":
        continue
    key = (o["currency"], o["date"][:7])
    if key not in rates:
        rates[key] = get_exchange_rate(currency=key[0], month=key[1])["usd_per_unit"]
    spend[o["customer_id"]] = spend.get(o["customer_id"], 0) + o["amount"] * rates[key]
final_answer(customers[max(spend, key=spend.get)])
''')],
        "json": [_TABLES, _pages("orders", len(ORDERS)), _pages("customers", len(CUSTOMERS)), _rates(_COMPLETED),
                 answer(_top_customer())],
    },
)

STATUS_COUNTS = Task(
    id="data.status_counts",
    instruction="How many orders are there in each status? Answer with a JSON object mapping status to count.",
    tools=make_tools,
    expected=_STATUS,
    check=exact(_STATUS),
    scripts={
        "code": [py(_READ_ALL + '''
counts = {}
for o in orders:
    counts[o["status"]] = counts.get(o["status"], 0) + 1
final_answer(counts)
''')],
        "json": [_pages("orders", len(ORDERS)), answer(_STATUS, "Orders by status:")],
    },
)

REFUND_COUNTRIES = Task(
    id="data.refund_countries",
    instruction="In which countries live the gold-tier customers who have at least one refunded order? "
    "Answer with a comma-separated list of country codes.",
    tools=make_tools,
    expected=_refund_countries(),
    check=set_equal(_refund_countries()),
    scripts={
        "code": [py(_READ_ALL + '''
refunded = {o["customer_id"] for o in orders if o["status"] == "refunded"}
final_answer(sorted({c["country"] for c in read_all("customers") if c["tier"] == "gold" and c["id"] in refunded}))
''')],
        "json": [_pages("orders", len(ORDERS)), _pages("customers", len(CUSTOMERS)),
                 answer(_refund_countries(), ", ".join(_refund_countries()))],
    },
)

MONTHLY = Task(
    id="data.monthly_completed",
    instruction="How many completed orders were there in each month from January to June 2024? "
    "Answer with a list of six counts in month order.",
    tools=make_tools,
    expected=_monthly(ORDERS),
    check=list_equal(_monthly(ORDERS)),
    scripts={
        "code": [py(_READ_ALL + '''
months = [f"2024-{m:02d}" for m in range(1, 7)]
final_answer([sum(1 for o in orders if o["status"] == "completed" and o["date"].startswith(m)) for m in months])
''')],
        # A typical slip: counting from the first page only.
        "json": [calls(call("read_table", name="orders", offset=0, limit=PAGE)), answer(_monthly(ORDERS[:PAGE]))],
    },
)

SUITE = Suite(
    "data",
    [Q1_REVENUE, TOP_CUSTOMER, STATUS_COUNTS, REFUND_COUNTRIES, MONTHLY],
    description="Tables in a per-episode workspace, paged reads, exchange rates: loops and aggregation.",
)
