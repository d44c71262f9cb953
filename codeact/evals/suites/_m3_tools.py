"""Tools of the ``multitool`` suite (in the spirit of M3ToolEval; our own tasks and data):
decoding, DNA, trade, travel, and a stateful text browser. Each factory returns fresh tools."""

from __future__ import annotations

import base64
import codecs
from typing import Any

from ...errors import ToolError
from ...runtime.toolset import Toolset, tool

__all__ = ["CODON", "MESSAGES", "SEQUENCES", "SITE", "browser_tools", "decoding_tools", "dna_tools",
           "encode_message", "trade_tools", "travel_tools"]


# -- decoding ------------------------------------------------------------------------------------

def encode_message(plain: str) -> str:
    """ROT13, then reversed, then base64 (how the messages were made)."""
    return base64.b64encode(codecs.encode(plain, "rot13")[::-1].encode()).decode()


MESSAGES = {7: encode_message("meet at the north gate at noon"), 8: encode_message("the key is under the mat")}


def decoding_tools() -> Toolset:
    @tool
    def get_message(message_id: int) -> str:
        """The encoded text of a message.

        Args:
            message_id: Message number.
        """
        if message_id not in MESSAGES:
            raise ToolError("not_found", f"no message {message_id}")
        return MESSAGES[message_id]

    @tool
    def base64_decode(text: str) -> str:
        """Decode base64 text to a UTF-8 string.

        Args:
            text: Base64 text.
        """
        try:
            return base64.b64decode(text, validate=True).decode()
        except ValueError as exc:
            raise ToolError("invalid_arguments", f"not base64: {exc}") from None

    @tool
    def rot13(text: str) -> str:
        """Apply ROT13 (it is its own inverse).

        Args:
            text: Any text.
        """
        return codecs.encode(text, "rot13")

    @tool
    def reverse(text: str) -> str:
        """Reverse a string.

        Args:
            text: Any text.
        """
        return text[::-1]

    return Toolset([get_message, base64_decode, rot13, reverse])


# -- DNA -----------------------------------------------------------------------------------------

_BASES = "TCAG"
_AMINO = "FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG"
CODON = {a + b + c: _AMINO[16 * i + 4 * j + k] for i, a in enumerate(_BASES) for j, b in enumerate(_BASES)
         for k, c in enumerate(_BASES)}
SEQUENCES = {
    "seq-A": "ATGGCGCGCTTAGCCGGA",
    "seq-B": "TTACTTGCCAAAGGTCAT",
    "seq-C": "ATATTAAATGCATTTAAA",
    "seq-D": "GGCGCCATGCCGGGCTAA",
    "seq-E": "ATGAAACCCGGGTTTTGA",
}


# Alike by design (each factory here): a suite's tools are fixtures the model reads (names, docstrings,
# errors); each factory spells its own out rather than generating them.
def dna_tools() -> Toolset:
    @tool
    def get_sequence(name: str) -> str:
        """A DNA sequence by name ("seq-A" … "seq-E").

        Args:
            name: Sequence name.
        """
        if name not in SEQUENCES:
            raise ToolError("not_found", f"no sequence {name!r}; names: {', '.join(SEQUENCES)}")
        return SEQUENCES[name]

    def _check(sequence: str) -> str:
        seq = sequence.upper()
        if set(seq) - set("ACGT"):
            raise ToolError("invalid_arguments", "a DNA sequence has only A, C, G, T")
        return seq

    @tool
    def reverse_complement(sequence: str) -> str:
        """The reverse complement of a DNA sequence.

        Args:
            sequence: Letters A, C, G, T.
        """
        return _check(sequence)[::-1].translate(str.maketrans("ACGT", "TGCA"))

    @tool
    def gc_content(sequence: str) -> float:
        """Fraction of G and C bases, rounded to 4 decimals.

        Args:
            sequence: Letters A, C, G, T.
        """
        seq = _check(sequence)
        return round((seq.count("G") + seq.count("C")) / len(seq), 4) if seq else 0.0

    @tool
    def translate(sequence: str) -> str:
        """Translate DNA codons (from the first base) into one-letter amino acids, up to the first stop.

        Args:
            sequence: Letters A, C, G, T.
        """
        seq, protein = _check(sequence), []
        for i in range(0, len(seq) - 2, 3):
            amino = CODON[seq[i:i + 3]]
            if amino == "*":
                break
            protein.append(amino)
        return "".join(protein)

    return Toolset([get_sequence, reverse_complement, gc_content, translate])


# -- trade ---------------------------------------------------------------------------------------

PRICES = {"US": (8.40, "USD"), "EU": (7.10, "EUR"), "CN": (52.0, "CNY"), "IN": (610.0, "INR")}
TARIFFS = {"US": 0.0, "EU": 0.04, "CN": 0.25, "IN": 0.10}
USD_PER = {"USD": 1.0, "EUR": 1.09, "CNY": 0.14, "INR": 0.012}


def trade_tools() -> Toolset:
    @tool(cacheable=True)
    def get_price(product: str, market: str) -> dict[str, Any]:
        """Unit price of a product in a market, in the market's currency.

        Args:
            product: Product name, e.g. "copper wire".
            market: "US", "EU", "CN" or "IN".
        """
        if product != "copper wire" or market not in PRICES:
            raise ToolError("not_found", f"no price for {product!r} in {market!r}")
        price, currency = PRICES[market]
        return {"product": product, "market": market, "unit_price": price, "currency": currency}

    @tool(cacheable=True)
    def get_tariff(product: str, market: str) -> float:
        """Import tariff rate (0.25 = 25%) on a product bought from a market.

        Args:
            product: Product name.
            market: "US", "EU", "CN" or "IN".
        """
        if market not in TARIFFS:
            raise ToolError("not_found", f"no market {market!r}")
        return TARIFFS[market]

    @tool(cacheable=True)
    def convert_currency(amount: float, from_currency: str, to_currency: str) -> float:
        """Convert money between USD, EUR, CNY and INR (rounded to cents).

        Args:
            amount: The amount.
            from_currency: ISO code.
            to_currency: ISO code.
        """
        if from_currency not in USD_PER or to_currency not in USD_PER:
            raise ToolError("invalid_arguments", f"currencies: {', '.join(USD_PER)}")
        return round(amount * USD_PER[from_currency] / USD_PER[to_currency], 2)

    return Toolset([get_price, get_tariff, convert_currency])


# -- travel --------------------------------------------------------------------------------------

FLIGHTS: list[dict[str, Any]] = [
    {"flight": "UA 881", "price_usd": 1240.0, "stops": 1},
    {"flight": "NH 9", "price_usd": 1390.0, "stops": 0},
    {"flight": "AC 7", "price_usd": 1015.0, "stops": 2},
    {"flight": "DL 275", "price_usd": 1180.0, "stops": 1},
]
HOTELS: list[dict[str, Any]] = [
    {"hotel": "Shinjuku Nest", "rating": 3.6, "price_per_night_usd": 95.0},
    {"hotel": "Asakusa Garden", "rating": 4.2, "price_per_night_usd": 140.0},
    {"hotel": "Ginza Grand", "rating": 4.7, "price_per_night_usd": 260.0},
    {"hotel": "Ueno Lodge", "rating": 4.0, "price_per_night_usd": 128.0},
]


def travel_tools() -> Toolset:
    @tool(cacheable=True)
    def search_flights(origin: str, destination: str, date: str) -> list[dict[str, Any]]:
        """Flights on a date: flight, price_usd, stops.

        Args:
            origin: City.
            destination: City.
            date: "YYYY-MM-DD".
        """
        if (origin, destination, date) != ("Pittsburgh", "Tokyo", "2026-09-10"):
            return []
        return [dict(f) for f in FLIGHTS]

    @tool(cacheable=True)
    def search_hotels(city: str, check_in: str, nights: int) -> list[dict[str, Any]]:
        """Hotels with a room: hotel, rating (0-5), price_per_night_usd.

        Args:
            city: City.
            check_in: "YYYY-MM-DD".
            nights: Number of nights.
        """
        if city != "Tokyo" or nights < 1:
            return []
        return [dict(h) for h in HOTELS]

    return Toolset([search_flights, search_hotels])


# -- a stateful text browser ---------------------------------------------------------------------

_KITCHEN = ["Chef Knife $42.00", "Cutting Board $18.50", "Spatula $6.99", "Saucepan $29.00", "Colander $12.75",
            "Whisk $5.40", "Toaster $39.90", "Blue Kettle $34.50", "Ladle $7.25", "Grater $9.80"]
_GARDEN = ["Trowel $11.20", "Hose 20m $24.00", "Seed Pack $3.10", "Pruner $19.99", "Gloves $8.50", "Rake $21.00",
           "Watering Can $14.30", "Planter $26.75", "Twine $2.95"]
SITE: dict[str, dict[str, Any]] = {
    "https://shop.example/": {"title": "Home", "lines": ["Welcome to shop.example", "Sections:"],
                              "links": {"Kitchen": "https://shop.example/kitchen",
                                        "Garden": "https://shop.example/garden"}},
    "https://shop.example/kitchen": {"title": "Kitchen", "lines": _KITCHEN, "links": {}},
    "https://shop.example/garden": {"title": "Garden", "lines": _GARDEN, "links": {}},
}
for _line in _KITCHEN:
    _name, _price = _line.rsplit(" ", 1)
    _url = "https://shop.example/kitchen/" + _name.lower().replace(" ", "-")
    SITE["https://shop.example/kitchen"]["links"][_name] = _url
    SITE[_url] = {"title": _name, "lines": [_name, f"Price: {_price}", "In stock"], "links": {}}
SCREEN = 4


def browser_tools() -> Toolset:
    """A browser with one tab: the page, the scroll position and the history are per episode."""
    state: dict[str, Any] = {"url": None, "top": 0, "history": []}

    def view() -> dict[str, Any]:
        if state["url"] is None:
            raise ToolError("not_found", "no page open; visit a URL first")
        page = SITE[state["url"]]
        top = state["top"]
        shown = page["lines"][top:top + SCREEN]
        links = [t for t in page["links"] if page["title"] == "Home" or any(ln.startswith(t + " ") for ln in shown)]
        return {"url": state["url"], "title": page["title"], "lines": shown, "links": links,
                "position": f"lines {top + 1}-{top + len(shown)} of {len(page['lines'])}"}

    def open_url(url: str) -> dict[str, Any]:
        if url not in SITE:
            raise ToolError("not_found", f"404 for {url}")
        if state["url"] is not None:
            state["history"].append(state["url"])
        state["url"], state["top"] = url, 0
        return view()

    @tool
    def visit(url: str) -> dict[str, Any]:
        """Open a URL; returns what is on screen (lines, visible links, position).

        Args:
            url: e.g. "https://shop.example/".
        """
        return open_url(url)

    @tool
    def click(link: str) -> dict[str, Any]:
        """Follow a link visible on the current screen.

        Args:
            link: The link text exactly as shown in "links".
        """
        current = view()
        if link not in current["links"]:
            raise ToolError("not_found", f"no link {link!r} on screen; visible: {current['links']}")
        return open_url(SITE[state["url"]]["links"][link])

    @tool
    def scroll_down() -> dict[str, Any]:
        """Scroll one screen down (a screen shows 4 lines)."""
        view()  # a page must be open
        total = len(SITE[state["url"]]["lines"])
        state["top"] = min(state["top"] + SCREEN, max(total - 1, 0))
        return view()

    @tool
    def back() -> dict[str, Any]:
        """Go back to the previous page."""
        if not state["history"]:
            raise ToolError("not_found", "no previous page")
        state["url"], state["top"] = state["history"].pop(), 0
        return view()

    return Toolset([visit, click, scroll_down, back])
