"""The `/metrics` page written as TorchServe writes it (its Prometheus Java simpleclient 0.9.0 text format), so
TorchServe's own regexes and dashboards match it byte for byte where they look:

    # HELP Requests2XX Torchserve prometheus counter metric with unit: Count
    # TYPE Requests2XX counter
    Requests2XX{Level="Host",Hostname="h",} 3.0

Rules (simpleclient 0.9.0 `TextFormat.write004`):
- every label set ends with a comma inside the braces (`{a="x",}`), labels in their declared order (TorchServe's:
  `Level, Hostname`, `model_name, model_version, hostname`, a handler's dimensions then `Hostname`); a histogram's
  `le` comes last;
- values are Java's `Double.toString`: `1.0`, `0.001`, `1.2345678E7`, `1.0E-4`, and `+Inf`, `-Inf`, `NaN`;
- a counter is typed `counter` under the name its samples carry (`ts_inference_requests_total`, `Requests2XX`:
  no `_total` is added to a name that lacks it), with no `_created` series (simpleclient 0.9.0 writes none);
- HELP text escapes `\\` and newlines, label values also `"`.

Decision: the page is written here rather than by prometheus-client's exposition, which adds `_created` series,
drops the trailing comma and would force `_total` onto TorchServe's counters; prometheus-client still holds the
values (server_metrics.py). Parsers (Prometheus, prometheus-client's own) read both forms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Set
from decimal import Decimal
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def java_double(value: float) -> str:
    """Java's `Double.toString` (as simpleclient writes sample values)."""
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    if 1e-3 <= abs(v) < 1e7:
        return repr(v)  # Python writes this range without an exponent and with at least one decimal, as Java
    _, digits, exponent = Decimal(repr(abs(v))).normalize().as_tuple()
    text = "".join(map(str, digits))
    mantissa = text[0] + "." + (text[1:] or "0")
    return ("-" if v < 0 else "") + f"{mantissa}E{int(exponent) + len(text) - 1}"


def _escape(text: str, quote: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if quote else text


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    ordered = sorted(labels.items(), key=lambda kv: kv[0] == "le")  # stable: declared order, `le` last
    return "{" + "".join(f'{k}="{_escape(str(v), True)}",' for k, v in ordered) + "}"


def render(families: Iterable[Any], counters: Set[str]) -> bytes:
    """The text page of prometheus-client metric families; a gauge family named in `counters` (one that only grows,
    kept as a gauge so its name gets no `_total`) is typed `counter`."""
    lines: list[str] = []
    for family in families:
        kind = family.type
        name = family.name
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        if kind == "counter":
            name = name + "_total"  # prometheus-client strips it from the family; the samples carry it
        elif kind == "gauge" and family.name in counters:
            kind = "counter"
        elif kind not in ("gauge", "histogram", "summary"):
            kind = "untyped"
        lines.append(f"# HELP {name} {_escape(family.documentation, False)}")
        lines.append(f"# TYPE {name} {kind}")
        lines += [f"{s.name}{_labels(s.labels)} {java_double(s.value)}" for s in samples]
    return ("\n".join(lines) + "\n").encode() if lines else b""
