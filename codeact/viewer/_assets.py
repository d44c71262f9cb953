"""The viewer page's inline style and script (no network: everything is in the one file)."""

from __future__ import annotations

STYLE = """
:root { --ok: #2e8b57; --err: #c0392b; --model: #6c5ce7; --exec: #0984e3; --cached: #8395a7;
        --bg: #fafafa; --line: #ddd; --muted: #666; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #222;
       background: var(--bg); }
main { max-width: 1280px; margin: 0 auto; padding: 1em 1.5em 3em; }
h1 { font-size: 1.4em; margin: .4em 0; } h2 { font-size: 1.2em; margin: 1.6em 0 .4em; }
h3 { font-size: 1.05em; margin: 0 0 .3em; }
.muted { color: var(--muted); }
table { border-collapse: collapse; margin: .6em 0; font-variant-numeric: tabular-nums; background: #fff; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f0f0f0; }
.pair { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 1em; }
.episode { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .8em 1em; margin: .8em 0; }
.episode.failed { border-left: 4px solid var(--err); }
.episode.answered { border-left: 4px solid var(--ok); }
.badge { display: inline-block; padding: 0 .5em; border-radius: 3px; font-size: .85em; color: #fff; background: #888; }
.badge.answered, .badge.ok { background: var(--ok); }
.badge.error, .badge.incomplete, .badge.err { background: var(--err); }
.badge.code { background: var(--exec); } .badge.json { background: var(--model); }
.facts { display: flex; flex-wrap: wrap; gap: .2em 1.2em; margin: .3em 0 .6em; color: var(--muted); font-size: .9em; }
.facts b { color: #222; font-weight: 600; }
.timeline { margin: .4em 0 .8em; }
.lane { display: flex; align-items: stretch; min-height: 20px; margin: 2px 0; }
.lane-label { width: 64px; flex: none; font-size: .8em; color: var(--muted); padding-top: 2px; }
.tracks { flex: 1; display: flex; flex-direction: column; gap: 2px; }
.track { position: relative; height: 18px; background: #f4f4f4; border-radius: 2px; }
.axis { position: relative; height: 16px; margin-left: 64px; font-size: .75em; color: var(--muted); }
.axis span { position: absolute; transform: translateX(-50%); }
.bar { position: absolute; top: 1px; height: 16px; border: 0; border-radius: 2px; padding: 0; text-indent: 3px;
       font: 11px/16px system-ui, sans-serif; color: #fff; overflow: hidden; white-space: nowrap; cursor: pointer;
       text-align: left; }
.bar.model { background: var(--model); } .bar.exec { background: var(--exec); }
.bar.call { background: var(--ok); } .bar.cached { background: var(--cached); }
.bar.error { background: var(--err); } .bar.estimated { opacity: .75; }
.bar:focus, .bar:hover { outline: 2px solid #222; z-index: 2; }
ol.steps { list-style: none; padding: 0; margin: 0; }
.step { border-top: 1px solid var(--line); padding: .4em 0; }
.step-head { font-size: .9em; color: var(--muted); }
.step-head b { color: #222; }
.step.error .step-head b { color: var(--err); }
pre { background: #f6f8fa; border: 1px solid #eee; border-radius: 4px; padding: .5em .7em; margin: .3em 0;
      max-height: 24em; overflow: auto; white-space: pre-wrap; word-break: break-word; font-size: 12.5px; }
pre.code { background: #fbfaf4; } pre.stderr, pre.error { background: #fdf0ef; border-color: #f3c5c0; }
.label { font-size: .75em; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); margin-top: .3em; }
details.call { margin: .2em 0; border: 1px solid #eee; border-radius: 4px; padding: .1em .5em; background: #fff; }
details.call.error { border-color: #f3c5c0; background: #fff8f7; }
details.call summary { cursor: pointer; font-size: .9em; }
details.call.flash { box-shadow: 0 0 0 3px #ffd54f; }
.note { color: #8a6d00; font-size: .9em; }
img.output { display: block; max-width: 100%; height: auto; border: 1px solid #eee; margin: .3em 0; background: #fff; }
iframe.output { display: block; width: 100%; height: 16em; border: 1px solid #eee; margin: .3em 0; background: #fff; }
details.prompt summary { cursor: pointer; font-size: .9em; }
.bar.sandbox { background: #b0bec5; color: #222; }
"""

SCRIPT = """
(function () {
  "use strict";
  function show(id) {
    var el = document.getElementById(id);
    if (!el) { return; }
    if (el.tagName === "DETAILS") { el.open = true; }
    el.scrollIntoView({block: "center"});
    el.classList.add("flash");
    setTimeout(function () { el.classList.remove("flash"); }, 1200);
  }
  document.addEventListener("click", function (ev) {
    var bar = ev.target.closest ? ev.target.closest(".bar") : null;
    if (bar && bar.dataset.target) { ev.preventDefault(); show(bar.dataset.target); }
  });
  document.documentElement.dataset.ready = "1";
})();
"""
