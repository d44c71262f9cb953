"""Rich outputs: a code action with pandas and matplotlib, its table and chart saved on the host.

The sandbox image needs the two packages baked in. Build it once (it prints the tag):

    codeact image build --pip matplotlib --pip pandas

then run ``python examples/rich_outputs.py --image TAG`` (without ``--image`` the same image is
built, or reused, on first use from ``SandboxConfig(pip=...)``). It writes ``out/chart-N.png``
and ``out/table-N.html`` and prints what the model would have been told.
"""

from __future__ import annotations

import argparse
import base64
from pathlib import Path

from codeact import Runtime, SandboxConfig, render_observation

ACTION = """
import matplotlib.pyplot as plt
import pandas as pd

sales = pd.DataFrame({"month": ["Jan", "Feb", "Mar", "Apr"], "units": [120, 135, 98, 160]})
sales["change"] = sales["units"].pct_change().round(3)
sales.plot(x="month", y="units", kind="bar", legend=False, title="Units sold")
plt.tight_layout()
display(sales)                        # a table: text/html + text/plain
print("best month:", sales.loc[sales["units"].idxmax(), "month"])
# the figure is left open: it is captured (image/png) at the end of the cell, then closed
"""


def run(image: str | None, out: Path) -> list[Path]:
    """Run the action in a fresh sandbox; write its rich outputs under ``out``; return the files."""
    config = SandboxConfig(image=image) if image else SandboxConfig(pip=("matplotlib", "pandas"))
    with Runtime([], config) as rt, rt.session() as session:
        result = session.run(ACTION)
    if not result.ok:
        raise SystemExit(f"the action failed: {result.error or result.reason}")
    print(render_observation(result))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for n, bundle in enumerate(result.outputs, 1):
        if "image/png" in bundle:
            path = out / f"chart-{n}.png"
            path.write_bytes(base64.b64decode(bundle["image/png"]))
        elif "text/html" in bundle:
            path = out / f"table-{n}.html"
            path.write_text(bundle["text/html"], encoding="utf-8")
        else:
            continue
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="a sandbox image built with --pip matplotlib --pip pandas")
    parser.add_argument("--out", type=Path, default=Path("out"), help="where the chart and table go")
    args = parser.parse_args()
    for path in run(args.image, args.out):
        print("wrote", path)


if __name__ == "__main__":
    main()
