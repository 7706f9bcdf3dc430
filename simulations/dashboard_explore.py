"""The dashboard's exploration views: any recorded metric, each client, a sweep over a config key.

The seven fixed charts of :mod:`simulations.dashboard` answer the question these papers ask
(accuracy against cumulative bytes, seeds as bands). These three views answer the next ones,
on the same selection (the sidebar's experiments, methods, seeds and statuses, and the
ticked runs):

* **Any metric** (:func:`numeric_fields`, :func:`metric_series`): any numeric field of
  ``rounds.jsonl`` the selected runs record, the method's own ``method_metrics`` included
  (``method_metrics.sigma`` for FedBPT, ``train_loss``, ``client_fit_s``, ...), against
  any x-axis of :data:`~simulations.dashboard_data.X_AXES` (round, cumulative bytes, ...),
  drawn by the main charts' own :func:`~simulations.dashboard_data.chart_lines` and
  :func:`~simulations.dashboard.figure` (mean ± std over seeds, or every run). A round
  where the field is null (not evaluated, not reported) is no point.
* **Per client** (:func:`client_accuracies`, :func:`client_spread`, :func:`worst_client`):
  one run's ``client_accuracy`` (each client's accuracy on its local test split, per
  round): the min-max band, the median, every client's line, the worst client (lowest
  accuracy in the last round that evaluated clients) and ``client_post_accuracy`` (after
  post-tuning) where recorded.
* **Sweep** (:func:`sweep_keys`, :func:`sweep_points`, :func:`sweep_summary`): a summary
  field (final accuracy, total bytes up + down, ...; :func:`summary_values`) against any
  config key whose value differs across the selected runs: one point per run, and per
  method the mean ± std over the runs sharing a key value. A key whose values are all
  numbers gets a numeric axis (log when its values span two decades), any other a
  categorical one.

The data functions take run dicts as :class:`~simulations.dashboard_data.RunStore` gives
them and return plain pandas frames (no Dash: unit-tested in
``tests/unit/test_dashboard_explore.py``); :func:`register` adds the three cards to a
dashboard app and wires their callbacks (``tests/system/test_dashboard_explore_browser.py``).

The views look and select as the main page does, with its own parts: ``page`` is the module
:mod:`simulations.dashboard`, which passes itself to :func:`register` (this module cannot
import it back: the project's import graph has no cycles, tests/unit/test_imports.py). Of
it they use ``figure`` (the grid's chart), ``card``, ``filter_ids`` (the selection),
``rgba``, ``FONT``, ``TITLE_TOP``, ``GRAPH_CONFIG``, ``TABLE_CELL``, ``TABLE_HEADER`` and
``TOOLTIPS``: its public names only. The per-client table's header tooltips are
:func:`~simulations.dashboard_data.column_help`'s, as every table's of the page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

import pandas as pd
from dash import Dash, Input, Output, State, dash_table, dcc, html, no_update

from fedtext.common.config import DERIVED_KEYS
from fedtext.records import ROUND_FIELDS, finite_number
from simulations.dashboard_data import (
    ABSENT, X_AXES, Chart, RunStore, chart_lines, color_of, config_diff, header_tooltips, integer_dtick, record_number,
    round_series, runs_table, value_text,
)

METHOD_PREFIX = "method_metrics."  # a method's own metric, as the any-metric list names it
PRIVACY_PREFIX = "privacy."  # a DP run's round privacy entry: privacy.epsilon = ε spent so far (at privacy.delta)
PRIVACY_FIRST = PRIVACY_PREFIX + "epsilon"  # the privacy entry's numbers are listed with ε first
METRIC_COLUMN = "metric"  # the picked field's column in metric_series (never clashes with a series column)
DEFAULT_FIELD = "global_accuracy"
DEFAULT_SUMMARY = "final_accuracy"
TOTAL_BYTES = "total_bytes"  # summary_values' derived field: total bytes up + down (the bytes axis' end)
SUMMARY_FIRST = ("final_accuracy", "best_accuracy", TOTAL_BYTES)  # the sweep's y list starts with these
NOT_SWEPT = ("seed",)  # varies across any set of seeds: offered, never the default key
#: keys that never split a sweep's series: seeds are what mean ± std is over; names and
#: folders say nothing of the run; derived keys follow from the dataset (the experiment)
NOT_SERIES = (*NOT_SWEPT, "run-name", "output-dir", "resume", *DERIVED_KEYS)
EXPERIMENT = "experiment"  # the series part that names a run's experiment (its name alone, no "key=")
GRAPHS = ("metric-graph", "client-graph", "sweep-graph")  # the views' chart ids (the main page's tests skip them)
LOG_SPAN = 100.0  # a numeric sweep key whose largest value is >= 100x its smallest (> 0) gets a log axis


# ------------------------------------------------------------------- any metric
def field_value(record: Mapping[str, Any], field: str) -> float | None:
    """The value of ``field`` in one ``rounds.jsonl`` record as a float, None when it is
    absent, null, not a finite number or a boolean (the records' own rule,
    :func:`fedtext.records.finite_number`). ``method_metrics.<name>`` reads the
    method's metric ``<name>`` (everything after the first dot: a name may hold dots),
    ``privacy.<name>`` the round's privacy entry's ``<name>`` (``privacy.epsilon``: the ε
    a DP run has spent by that round)."""
    for prefix in (METHOD_PREFIX, PRIVACY_PREFIX):
        if field.startswith(prefix):
            entry = record.get(prefix[:-1])
            return record_number(entry.get(field[len(prefix):]) if isinstance(entry, Mapping) else None)
    return record_number(record.get(field))


def numeric_fields(runs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every field the runs' ``rounds.jsonl`` hold a finite number in, in at least one
    round of one run: the record's own fields in :data:`fedtext.records.ROUND_FIELDS`
    order (a DP run's privacy numbers as ``privacy.<name>`` where ``privacy`` stands,
    :data:`PRIVACY_FIRST` first), then fields it does not know (a newer writer's) sorted,
    then each method metric as ``method_metrics.<name>`` sorted. ``round`` (the x-axis),
    booleans, text, lists and other objects (``client_accuracy``, ``dropped``) are left
    out; a field that is null in every round is too (nothing to draw)."""
    seen: set[str] = set()
    for run in runs:
        for record in run.get("rounds") or []:
            for key, value in record.items():
                prefix = {"method_metrics": METHOD_PREFIX, "privacy": PRIVACY_PREFIX}.get(key)
                if prefix and isinstance(value, Mapping):
                    seen.update(prefix + str(k) for k, v in value.items() if finite_number(v) is not None)
                elif key != "round" and finite_number(value) is not None:
                    seen.add(key)
    private = sorted((f for f in seen if f.startswith(PRIVACY_PREFIX)), key=lambda f: (f != PRIVACY_FIRST, f))
    known = [x for f in ROUND_FIELDS for x in (private if f == "privacy" else [f] if f in seen else [])]
    rest = sorted(seen - set(known))
    return known + [f for f in rest if not f.startswith(METHOD_PREFIX)] + [f for f in rest if f.startswith(METHOD_PREFIX)]


def metric_series(store: RunStore, run_ids: list[str] | None, field: str) -> pd.DataFrame:
    """:func:`~simulations.dashboard_data.round_series` of the runs (every x-axis column:
    round, cumulative bytes, ...) with the picked ``field`` per (run, round) in column
    :data:`METRIC_COLUMN` (NaN where the round does not record it as a number), ready
    for :func:`~simulations.dashboard_data.chart_lines` with ``Chart(y=METRIC_COLUMN)``."""
    series = round_series(store, run_ids)
    values = {(run["run_id"], record.get("round")): field_value(record, field)
              for run in store.loaded(run_ids) for record in run["rounds"]}
    series[METRIC_COLUMN] = [values.get(key) for key in zip(series["run_id"], series["round"])]
    series[METRIC_COLUMN] = series[METRIC_COLUMN].astype(float)
    return series


def metric_chart(field: str) -> Chart:
    """The :class:`~simulations.dashboard_data.Chart` of a picked field (its title is the
    field's name as the list shows it)."""
    return Chart(f"metric:{field}", field, METRIC_COLUMN)


# ------------------------------------------------------------------- per client
def _client_order(client: str) -> tuple[int, float, str]:
    """Partition ids as numbers where they are ("2" before "10"), others after, by text."""
    return (0, float(client), "") if client.isdigit() else (1, 0.0, client)


CLIENT_COLUMNS = ["round", "client", "accuracy", "kind"]


def client_accuracies(run: Mapping[str, Any]) -> pd.DataFrame:
    """One row per (round, client) of a run: ``accuracy`` on the client's local test
    split, ``kind`` ``"global"`` (``client_accuracy``: the global model of that round) or
    ``"post"`` (``client_post_accuracy``: after post-tuning, last round). Rows sorted by
    kind, round and client (numeric ids in number order); a garbled value is left out."""
    rows = []
    for record in run.get("rounds") or []:
        rnd = record.get("round")
        for kind, key in (("global", "client_accuracy"), ("post", "client_post_accuracy")):
            accs = record.get(key)
            if not isinstance(accs, Mapping):
                continue
            for client, value in accs.items():
                if (x := record_number(value)) is not None:
                    rows.append((rnd, str(client), x, kind))
    rows.sort(key=lambda r: (r[3] != "global", r[0], _client_order(r[1])))
    return pd.DataFrame(rows, columns=CLIENT_COLUMNS)


SPREAD_COLUMNS = ["round", "clients", "min", "median", "max", "worst_client"]


def client_spread(accuracies: pd.DataFrame) -> pd.DataFrame:
    """Per round, over the clients the global model was evaluated on (``kind ==
    "global"``): their number, the min, median (the mean of the middle two for an even
    number) and max accuracy, and the round's worst client (the lowest; on a tie the
    first id in number order)."""
    g = accuracies[accuracies["kind"] == "global"] if not accuracies.empty else accuracies
    rows = []
    for rnd, part in g.groupby("round", sort=True):
        # rows are in client order already: idxmin picks the first id of a tie
        worst = part.loc[part["accuracy"].idxmin(), "client"]
        rows.append((rnd, len(part), part["accuracy"].min(), float(part["accuracy"].median()),
                     part["accuracy"].max(), worst))
    return pd.DataFrame(rows, columns=SPREAD_COLUMNS)


def worst_client(accuracies: pd.DataFrame) -> tuple[str, int, float] | None:
    """The run's worst client: the lowest accuracy in the last round that evaluated the
    global model on clients (where the run ended up; a tie goes to the first id in number
    order), as ``(client, round, accuracy)``; None when no round evaluated clients."""
    spread = client_spread(accuracies)
    if spread.empty:
        return None
    last = spread.iloc[-1]  # its worst client's accuracy is the round's min
    return str(last["worst_client"]), int(last["round"]), float(last["min"])


def client_runs(runs: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The per-client view's run choices: the runs (not malformed) with at least one
    client accuracy, newest first, as dropdown options (``label · run id``)."""
    out = []
    for run in sorted(runs, key=lambda r: r["run_id"], reverse=True):
        if run.get("status") == "malformed":
            continue
        if any(isinstance(r.get("client_accuracy"), Mapping) and r["client_accuracy"] for r in run["rounds"]):
            out.append({"label": f"{run['label']} s{run['cfg'].get('seed', '?')} · {run['run_id']}",
                        "value": run["run_id"]})
    return out


# ------------------------------------------------------------------- sweep
def summary_values(summary: Mapping[str, Any]) -> dict[str, float]:
    """A run's summary (``summary.json``, or the partial one of a running run) as numbers:
    each finite numeric field but ``seed`` (it names the run) and :data:`TOTAL_BYTES` =
    ``total_bytes_up + total_bytes_down`` (the last x of the accuracy-vs-bytes chart)."""
    out = {k: x for k, v in summary.items() if k != "seed" and (x := record_number(v)) is not None}
    if "total_bytes_up" in out and "total_bytes_down" in out:
        out[TOTAL_BYTES] = out["total_bytes_up"] + out["total_bytes_down"]
    return out


def summary_fields(runs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The sweep's y choices: every field :func:`summary_values` gives for some run,
    :data:`SUMMARY_FIRST` first, the rest sorted."""
    seen: set[str] = set()
    for run in runs:
        seen.update(summary_values(run.get("summary_or_partial") or {}))
    return [f for f in SUMMARY_FIRST if f in seen] + sorted(seen - set(SUMMARY_FIRST))


def sweep_keys(store: RunStore, run_ids: list[str]) -> list[str]:
    """The config keys whose value differs across the runs
    (:func:`~simulations.dashboard_data.config_diff`'s rows, in the configs' order)."""
    return [str(k) for k in config_diff(store, run_ids).index] if len(run_ids) > 1 else []


def default_key(keys: list[str]) -> str | None:
    """The key a sweep starts on: the first that varies but for :data:`NOT_SWEPT`."""
    return next((k for k in keys if k not in NOT_SWEPT), keys[0] if keys else None)


POINT_COLUMNS = ["run_id", "method", "series", "run_label", "x", "y"]


def _series(items: list[tuple[Mapping[str, Any], Any]], key: str) -> dict[str, str]:
    """Each run's series, ``{run_id: name}``, for runs ``items`` = (run, its swept value x).

    A series is what one mean ± std is taken over, so its runs must differ in seed only.
    Within a method, another config key (or the run's experiment) splits the series when
    some swept value x holds runs with different values of it: averaging those would give a
    std of config (or dataset) differences, not of seeds. A key that only co-varies with x
    (a run-name or option that encodes the swept value) splits nothing. Name:
    ``method · experiment · key=value ...`` with the splitting keys only, in name order.
    """
    by_method: dict[str, list[tuple[dict[str, Any], Any, str]]] = {}
    for run, x in items:
        cfg = {**run["cfg"], EXPERIMENT: run.get("experiment", "")}
        by_method.setdefault(str(run["cfg"].get("method", "?")), []).append((cfg, x, run["run_id"]))
    names: dict[str, str] = {}
    for method, group in by_method.items():
        keys = set().union(*(cfg for cfg, _, _ in group)) - {key, "method", *NOT_SERIES}
        split = []
        for k in sorted(keys, key=lambda k: (k != EXPERIMENT, k)):
            values_at: dict[Any, set[str]] = {}
            for cfg, x, _ in group:
                values_at.setdefault(x, set()).add(value_text(cfg[k]) if k in cfg else ABSENT)
            if any(len(v) > 1 for v in values_at.values()):
                split.append(k)
        for cfg, _, run_id in group:
            parts = [str(cfg[k]) if k == EXPERIMENT else f"{k}={value_text(cfg[k]) if k in cfg else ABSENT}"
                     for k in split]
            names[run_id] = " · ".join([method, *parts])
    return names


def sweep_points(runs: Iterable[Mapping[str, Any]], key: str, y: str) -> tuple[pd.DataFrame, str]:
    """One point per run (malformed runs left out): its ``key`` value ``x``, summary
    field ``y`` (:func:`summary_values`) and series (:func:`_series`: the runs one mean ±
    std is over), with the axis the key gets: ``"linear"`` or ``"log"`` when every value is
    a number (runs without the key, or without ``y``, are left out), else ``"category"``
    (values as text, :data:`ABSENT` for a run without the key). Log: every value > 0 and
    the largest >= :data:`LOG_SPAN` times the smallest."""
    runs = [r for r in runs if r.get("status") != "malformed"]
    present = [r["cfg"][key] for r in runs if key in r["cfg"]]
    numeric = bool(present) and all(finite_number(v) is not None for v in present)
    kept = []
    for run in runs:
        value = summary_values(run.get("summary_or_partial") or {}).get(y)
        if value is None or (numeric and key not in run["cfg"]):
            continue
        x = float(run["cfg"][key]) if numeric else (value_text(run["cfg"][key]) if key in run["cfg"] else ABSENT)
        kept.append((run, x, value))
    series = _series([(run, x) for run, x, _ in kept], key)
    rows = [(run["run_id"], str(run["cfg"].get("method", "?")), series[run["run_id"]],
             f"{run['label']} s{run['cfg'].get('seed', '?')}", x, value) for run, x, value in kept]
    points = pd.DataFrame(rows, columns=POINT_COLUMNS)
    if not numeric:
        return points, "category"
    xs = points["x"]
    log = not xs.empty and xs.min() > 0 and xs.max() >= LOG_SPAN * xs.min()
    return points, "log" if log else "linear"


SUMMARY_COLUMNS = ["method", "series", "x", "mean", "std", "n"]


def sweep_summary(points: pd.DataFrame) -> pd.DataFrame:
    """Per (series, key value): the mean of ``y`` over its runs, the sample std (ddof=1,
    as the seed bands: NaN for one run) and the number of runs; sorted by series and x."""
    if points.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    g = points.groupby(["method", "series", "x"], sort=True)["y"]
    out = pd.DataFrame({"mean": g.mean(), "std": g.std(), "n": g.count()}).reset_index()
    return out[SUMMARY_COLUMNS]


# ------------------------------------------------------------------- figures
def _layout(page: ModuleType, title: str, x_title: str, y_title: str, height: int = 380) -> dict[str, Any]:
    """The main charts' look (title at the top left below Plotly's toolbar, white, light
    grid) for a single-subplot figure."""
    return {
        "title": {"text": title, "font": {"size": 14}, "x": 0, "xref": "container", "xanchor": "left",
                  "y": 1, "yref": "container", "yanchor": "top", "pad": {"l": 10, "t": page.TITLE_TOP}},
        "height": height, "margin": {"l": 60, "r": 10, "t": page.TITLE_TOP + 28, "b": 48},
        "font": {"family": page.FONT, "color": "#1f2933"}, "paper_bgcolor": "#fff", "plot_bgcolor": "#fff",
        "legend": {"font": {"size": 10}}, "hovermode": "closest", "annotations": [],
        "xaxis": {"title": {"text": x_title, "font": {"size": 11}}, "gridcolor": "#eceff3", "zeroline": False},
        "yaxis": {"title": {"text": y_title, "font": {"size": 11}}, "gridcolor": "#eceff3", "zeroline": False},
    }


def _empty(fig: dict[str, Any], text: str) -> dict[str, Any]:
    fig["layout"]["annotations"].append({"text": text, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper",
                                         "showarrow": False, "font": {"color": "#888"}})
    return fig


SERIES_SYMBOLS = ("diamond", "circle", "square", "triangle-up", "x", "star")  # a method's 1st, 2nd, ... series
SERIES_DASHES = ("solid", "dot", "dash", "dashdot")
CLIENT_LINE = "#9aa5b1"  # every client's own line: grey, under the band's edges
WORST_COLOR = "#D62728"


def client_figure(run: Mapping[str, Any] | None, page: ModuleType) -> dict[str, Any]:
    """The per-client chart of one run: the clients' min-max band, their median, each
    client's line (grey; hover names it), the worst client (red), the global model's
    accuracy on the global test split (dashed) and the post-tuned accuracies (diamonds)."""
    title = f"Client accuracy per round · {run['run_id']}" if run else "Client accuracy per round"
    fig = {"data": [], "layout": _layout(page, title, "Round", "Accuracy (client's local test split)")}
    if run is None:
        return _empty(fig, "no run with client accuracies in the selection")
    accs = client_accuracies(run)
    spread = client_spread(accs)
    if spread.empty:
        return _empty(fig, "this run records no client accuracies")
    data = fig["data"]
    x, lo, hi = spread["round"].tolist(), spread["min"].tolist(), spread["max"].tolist()
    one = len(x) == 1  # one evaluated round: a filled band and lines draw nothing; whiskers and markers do
    if not one:
        data.append({"type": "scatter", "mode": "lines", "x": x + x[::-1], "y": hi + lo[::-1], "fill": "toself",
                     "fillcolor": page.rgba("#636EFA", 0.16), "line": {"width": 0}, "hoverinfo": "skip",
                     "name": "min–max over clients", "meta": "band"})
    glob = accs[accs["kind"] == "global"]
    first = True
    for client, part in sorted(glob.groupby("client"), key=lambda kv: _client_order(kv[0])):
        data.append({"type": "scatter", "mode": "lines+markers" if one else "lines", "x": part["round"].tolist(),
                     "y": part["accuracy"].tolist(), "marker": {"size": 4, "color": CLIENT_LINE},
                     "name": "each client" if first else f"client {client}", "legendgroup": "clients",
                     "showlegend": first, "meta": "client", "line": {"color": CLIENT_LINE, "width": 1},
                     "hovertemplate": f"client {client}<br>round %{{x}}: %{{y:.3f}}<extra></extra>"})
        first = False
    median = spread["median"].tolist()
    data.append({"type": "scatter", "mode": "lines+markers", "x": x, "y": median,
                 "name": "median client" + (" (whiskers: min–max over clients)" if one else ""), "meta": "median",
                 "line": {"color": "#636EFA", "width": 2.5}, "marker": {"size": 5},
                 **({"error_y": {"type": "data", "symmetric": False, "array": [hi[0] - median[0]],
                                 "arrayminus": [median[0] - lo[0]], "visible": True, "color": "#636EFA"}}
                    if one else {})})
    worst = worst_client(accs)
    if worst is not None:
        client, rnd, acc = worst
        part = glob[glob["client"] == client]
        data.append({"type": "scatter", "mode": "lines+markers", "x": part["round"].tolist(),
                     "y": part["accuracy"].tolist(), "name": f"worst client {client} ({acc:.3f} in round {rnd})",
                     "meta": "worst", "line": {"color": WORST_COLOR, "width": 2}, "marker": {"size": 6}})
    rounds = sorted(run["rounds"], key=lambda r: r.get("round", 0))
    pts = [(r["round"], v) for r in rounds if (v := field_value(r, "global_accuracy")) is not None]
    if pts:
        data.append({"type": "scatter", "mode": "lines", "x": [p[0] for p in pts], "y": [p[1] for p in pts],
                     "name": "global model (global test split)", "meta": "global",
                     "line": {"color": "#1f2933", "width": 1.5, "dash": "dash"}})
    post = accs[accs["kind"] == "post"]
    if not post.empty:
        data.append({"type": "scatter", "mode": "markers", "x": post["round"].tolist(), "y": post["accuracy"].tolist(),
                     "name": "after post-tuning", "meta": "post", "text": [f"client {c}" for c in post["client"]],
                     "marker": {"symbol": "diamond-open", "size": 9, "color": "#00CC96"}})
    fig["layout"]["xaxis"].update({"tickmode": "linear", "tick0": 0, "tickformat": "d",
                                   "dtick": integer_dtick(max(x), 10)})
    return fig


def sweep_figure(points: pd.DataFrame, axis: str, key: str, y: str, page: ModuleType,
                 labels: Iterable[str] = ()) -> dict[str, Any]:
    """The sweep chart: each run a faint point (click-free; hover names it), per series
    (:func:`_series`: a method, split where other keys differ at one key value; coloured by
    its method) the mean ± std over the runs at each key value (error bars; a line through them on a
    numeric axis, markers only on a categorical one)."""
    fig = {"data": [], "layout": _layout(page, f"{y} vs {key}", key, y)}
    if points.empty:
        return _empty(fig, "pick a config key that varies across the selected runs")
    labels = list(labels)
    order = sorted(points["x"].unique(), key=str) if axis == "category" else None
    for (method, series), part in points.groupby(["method", "series"], sort=True):
        color = color_of(method, labels)
        fig["data"].append({"type": "scatter", "mode": "markers", "x": part["x"].tolist(), "y": part["y"].tolist(),
                            "name": f"{series} runs", "legendgroup": series, "showlegend": False, "meta": "run",
                            "customdata": part["run_id"].tolist(), "text": part["run_label"].tolist(),
                            "hovertemplate": "%{text}<br>%{x}: %{y:.4g}<extra></extra>",
                            "marker": {"color": page.rgba(color, 0.45), "size": 7}})
    summary = sweep_summary(points)
    nth: dict[str, int] = {}  # a method's series share its colour; symbol and dash tell them apart
    for (method, series), part in summary.groupby(["method", "series"], sort=True):
        color = color_of(method, labels)
        k = nth[method] = nth.get(method, -1) + 1
        n = int(part["n"].max())
        fig["data"].append({"type": "scatter", "mode": "markers" if axis == "category" else "lines+markers",
                            "x": part["x"].tolist(), "y": part["mean"].tolist(),
                            "error_y": {"type": "data", "array": part["std"].fillna(0.0).tolist(), "visible": True,
                                        "color": color, "thickness": 1.5, "width": 5},
                            "name": f"{series} mean ± std" + (f" (up to n={n})" if n > 1 else ""),
                            "legendgroup": series, "meta": "mean", "customdata": part["n"].tolist(),
                            "hovertemplate": "%{x}: %{y:.4g} ± %{error_y.array:.3g} (n=%{customdata})<extra></extra>",
                            "line": {"color": color, "width": 2, "dash": SERIES_DASHES[k % len(SERIES_DASHES)]},
                            "marker": {"color": color, "size": 10,
                                       "symbol": SERIES_SYMBOLS[k % len(SERIES_SYMBOLS)]}})
    xaxis = fig["layout"]["xaxis"]
    xaxis["type"] = axis
    if order is not None:
        xaxis.update({"categoryorder": "array", "categoryarray": order})
    return fig


# ------------------------------------------------------------------- the page
def _picker(label: str, dropdown_id: str, **dropdown: Any) -> html.Div:
    """A labelled dropdown of the views' control rows (the wide kind)."""
    return html.Div([html.Label(label, className="control-label"), dcc.Dropdown(id=dropdown_id, **dropdown)],
                    className="explore-control wide")


def layout(page: ModuleType) -> list[Any]:
    """The three cards, appended to the main column under the existing ones."""
    card, GRAPH_CONFIG = page.card, page.GRAPH_CONFIG
    dropdown = {"clearable": False, "searchable": True, "optionHeight": 28, "maxHeight": 360}
    table = {"style_cell": page.TABLE_CELL, "style_header": page.TABLE_HEADER,
             "style_table": {"overflowX": "auto", "maxWidth": "100%"}, **page.TOOLTIPS}
    return [
        card("Any recorded metric", [
            html.Div([
                _picker("field of rounds.jsonl", "metric-field", placeholder="pick a field…", **dropdown),
                html.Div([html.Label("x-axis", className="control-label"),
                          dcc.Dropdown(id="metric-x", value="round", clearable=False,
                                       options=[{"label": a.title.split(" (")[0], "value": k}
                                                for k, a in X_AXES.items()])], className="explore-control"),
                dcc.Checklist(id="metric-log", options=[{"label": "log x", "value": "log"}], value=[],
                              className="options explore-log"),
            ], className="explore-controls"),
            dcc.Graph(id="metric-graph", config=GRAPH_CONFIG),
        ], hint="every numeric field the selected runs record, method metrics (method_metrics.*) included; "
                "seeds drawn as the sidebar says", id="card-metric"),
        card("Per client", [
            html.Div([_picker("run", "client-run", placeholder="pick a run…", **dropdown)],
                     className="explore-controls"),
            dcc.Graph(id="client-graph", config=GRAPH_CONFIG),
            html.Div(dash_table.DataTable(id="client-table", page_size=10,
                                          tooltip_header=header_tooltips(SPREAD_COLUMNS, "clients"), **table),
                     className="table-wrap"),
        ], hint="each client's accuracy on its local test split, per round: spread, median, worst client",
            id="card-clients"),
        card("Sweep", [
            html.Div([
                _picker("config key (varies across the selected runs)", "sweep-key", placeholder="pick a key…",
                        **dropdown),
                _picker("summary field", "sweep-y", value=DEFAULT_SUMMARY, **dropdown),
            ], className="explore-controls"),
            html.Div(id="sweep-note", className="empty-note"),
            dcc.Graph(id="sweep-graph", config=GRAPH_CONFIG),
        ], hint="one point per run; per method (split where other keys differ) the mean ± std over seeds at each key value", id="card-sweep"),
    ]


SELECTION = [Input("version", "data"), Input("experiment", "value"), Input("method-filter", "value"),
             Input("seed-filter", "value"), Input("status-filter", "value"), Input("runs", "selected_row_ids")]


def selected_ids(page: ModuleType, store: RunStore, experiments: list[str] | None, methods: list[str] | None,
                 seeds: list[Any] | None, statuses: list[str] | None, ticked: list[str] | None) -> list[str]:
    """The runs the main charts draw (the sidebar's filters, the ticked rows): the same
    selection for these views (``page.filter_ids``)."""
    table = runs_table(store)
    return page.filter_ids(table[table["experiment"].isin(experiments or [])], methods, seeds, statuses, ticked)


def _keep(value: Any, options: list[Any], default: Any) -> Any:
    """The dropdown's value: the current one while it is still offered, else ``default``."""
    values = [o["value"] if isinstance(o, dict) else o for o in options]
    return value if value in values else default


def register(app: Dash, store: RunStore, page: ModuleType) -> None:
    """Append the three cards (:func:`layout`) to the app's main column (``#content``) and
    wire their callbacks to the sidebar's selection; ``page`` is :mod:`simulations.dashboard`."""
    app.layout["content"].children = list(app.layout["content"].children) + layout(page)

    @app.callback(Output("metric-field", "options"), Output("metric-field", "value"),
                  *SELECTION, State("metric-field", "value"))
    def metric_choices(_, experiments, methods, seeds, statuses, ticked, current):
        ids = selected_ids(page, store, experiments, methods, seeds, statuses, ticked)
        fields = numeric_fields(store.loaded(ids))
        value = _keep(current, fields, DEFAULT_FIELD if DEFAULT_FIELD in fields else (fields[0] if fields else None))
        return fields, value if value != current else no_update

    @app.callback(Output("metric-log", "value"), Input("metric-x", "value"))
    def metric_log_default(x_axis):
        return ["log"] if X_AXES[x_axis].log else []

    @app.callback(Output("metric-graph", "figure"), *SELECTION, Input("metric-field", "value"),
                  Input("metric-x", "value"), Input("metric-log", "value"), Input("mode", "value"))
    def metric_chart_(_, experiments, methods, seeds, statuses, ticked, field, x_axis, log_x, mode):
        ids = selected_ids(page, store, experiments, methods, seeds, statuses, ticked)
        labels = runs_table(store)["label"].dropna().unique().tolist()
        chart = metric_chart(field or DEFAULT_FIELD)
        lines = chart_lines(metric_series(store, ids, chart.title), chart, x_axis, mode or "mean",
                            "log" in (log_x or []), labels) if field else []
        return page.figure(lines, chart, x_axis, "log" in (log_x or []), list(experiments or []), height=380)

    @app.callback(Output("client-run", "options"), Output("client-run", "value"),
                  *SELECTION, State("client-run", "value"))
    def client_choices(_, experiments, methods, seeds, statuses, ticked, current):
        options = client_runs(store.loaded(selected_ids(page, store, experiments, methods, seeds, statuses, ticked)))
        value = _keep(current, options, options[0]["value"] if options else None)
        return options, value if value != current else no_update

    @app.callback(Output("client-graph", "figure"), Output("client-table", "data"), Output("client-table", "columns"),
                  Input("version", "data"), Input("client-run", "value"))
    def client_view(_, run_id):
        runs = store.loaded([run_id]) if run_id else []
        run = runs[0] if runs else None
        spread = client_spread(client_accuracies(run)) if run else pd.DataFrame(columns=SPREAD_COLUMNS)
        rows = spread.round(4).to_dict("records")
        return client_figure(run, page), rows, [{"name": c, "id": c} for c in SPREAD_COLUMNS]

    @app.callback(Output("sweep-key", "options"), Output("sweep-key", "value"),
                  Output("sweep-y", "options"), Output("sweep-y", "value"),
                  *SELECTION, State("sweep-key", "value"), State("sweep-y", "value"))
    def sweep_choices(_, experiments, methods, seeds, statuses, ticked, key, y):
        ids = selected_ids(page, store, experiments, methods, seeds, statuses, ticked)
        keys = sweep_keys(store, ids)
        fields = summary_fields(store.loaded(ids))
        new_key = _keep(key, keys, default_key(keys))
        new_y = _keep(y, fields, DEFAULT_SUMMARY if DEFAULT_SUMMARY in fields else (fields[0] if fields else None))
        return (keys, new_key if new_key != key else no_update, fields, new_y if new_y != y else no_update)

    @app.callback(Output("sweep-graph", "figure"), Output("sweep-note", "children"), *SELECTION,
                  Input("sweep-key", "value"), Input("sweep-y", "value"))
    def sweep_view(_, experiments, methods, seeds, statuses, ticked, key, y):
        ids = selected_ids(page, store, experiments, methods, seeds, statuses, ticked)
        if not key or not y:
            return sweep_figure(pd.DataFrame(columns=POINT_COLUMNS), "linear", "", "", page), (
                "No config key differs across the selected runs." if len(ids) > 1 else
                "Select two or more runs (experiments, filters or ticks) to sweep over a config key.")
        runs = store.loaded(ids)
        points, axis = sweep_points(runs, key, y)
        labels = runs_table(store)["label"].dropna().unique().tolist()
        left = len([r for r in runs if r["status"] != "malformed"]) - len(points)
        note = f"{len(points)} runs, {points['x'].nunique()} values of {key} ({axis} axis)" + (
            f"; {left} run(s) without {key} or {y} left out" if left else "")
        return sweep_figure(points, axis, key, y, page, labels), note
