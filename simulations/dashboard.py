"""Simulation dashboard: compare strategies as the papers do, live, in a browser (Plotly Dash).

    python -m simulations.dashboard --runs runs/            # or: fedtext-dashboard --runs runs/
    python -m simulations.dashboard --runs simulations/results --port 8050

Serves http://127.0.0.1:8050. In the sidebar pick **experiments** (a compare-runner output
folder, or hand-started runs of one dataset/partition/shots; several = small multiples side by
side) from a searchable multi-select, filter by method, seed and status, and read:

* **accuracy vs cumulative bytes** (up + down, up or down; log x), the view these papers
  are about, on top, with the page's one legend (every line of every chart; a line's colour
  is its method's on every chart);
* accuracy, client accuracy, loss, model queries, client memory and wall time against the
  chosen **x-axis** (round, wall time, simulated device time where recorded, cumulative
  bytes up / down / both, cumulative queries; log toggle); the grid's accuracy chart is left
  out when it would repeat the top one (x = the bytes picked on top, log);
* per method (or variant) the **mean over seeds with a ± std band**, or every run on its
  own (toggle); a band of one point (a one-round run on a log axis) is an error bar;
* round axes tick whole numbers only, log axes label decades (or 1-2-5) only; memory,
  queries and wall time are drawn from 0; every chart's title sits below Plotly's toolbar;
* the run list (tick runs to restrict the charts and to see their **config diff**: the keys
  whose values differ between the ticked runs, one column per run; click a cell for the run's
  **drill-down**: its provenance (git commit or Flower app bundle, package versions, SuperNodes,
  Flower's run id), its rounds with dropped clients and the method's metrics, its config as a
  key/value table, the keys that differ from the ticked (else the listed) runs first, and
  its summary) and the comparison table (mean ± std), downloadable as CSV or markdown. A run
  whose record files are malformed (checked as :mod:`fedtext.records` reads them) is always
  listed, ``malformed`` with the reason in its note, and never charted or counted;
* under them, the exploration views of :mod:`simulations.dashboard_explore`: any numeric
  ``rounds.jsonl`` field (method metrics included) against any x-axis, one run's clients
  (spread, median, worst client), and a sweep of a summary field against a config key.

Byte counts in every table are text in units that keep small and large ones readable, to 3
significant figures (``528 B``, ``12.1 KB``, ``2.38 MB``; KB = 1,024 B, as ``simulations.tables``:
:func:`~simulations.dashboard_data.byte_text`); the run list sorts in its callback, by the
numbers (:func:`~simulations.dashboard_data.sort_rows`), so a bytes column sorts by its count.
Every table's column headers explain themselves on hover: what the column holds and its unit
(one definition per column, :data:`~simulations.dashboard_data.COLUMN_HELP`).

Table cells wrap, so the run list and the comparison table fit a 1,280 px window; a table
wider still scrolls sideways inside its card; the stylesheet is
``simulations/assets/dashboard.css`` (served by Dash itself: the page needs no network).

Every ``--refresh`` seconds the page stats the record files; only when one changed are
the changed files re-read (``rounds.jsonl`` from where the last read stopped) and the
charts redrawn. It reads nothing but the run records (:mod:`simulations.dashboard_data`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, State, ctx, dash_table, dcc, html, no_update

from simulations.dashboard_data import (
    BYTE_COLUMNS, CHARTS, EPSILON_COLUMN, STATUSES, X_AXES, Chart, Line, RunStore, byte_text, chart_lines, comparison,
    config_diff, config_table, epsilon_text, header_tooltips, integer_dtick, log_ticks, round_series, run_detail,
    run_provenance, runs_table, short_number, sort_rows,
)
from simulations.tables import to_markdown

# The grid under the prominent accuracy-vs-bytes chart: (graph id, chart) against the chosen x.
GRID = [("acc-x", "accuracy"), ("client-x", "client-accuracy"), ("loss-x", "loss"),
        ("queries-x", "queries"), ("memory-x", "memory"), ("wall-x", "wall")]
BYTES_DIRECTIONS = {"bytes": "up + down", "bytes-up": "up", "bytes-down": "down"}
DEFAULT_STATUSES = ["running", "finished", "failed", "stale"]
FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'
TITLE_TOP = 34  # px from a chart's top to its title: below the toolbar (about 30 px high)
GRAPH_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "svg"}}
ASSETS = Path(__file__).resolve().parent / "assets"  # the page's stylesheet (served locally, works offline)


def rgba(hex_color: str, alpha: float) -> str:
    """``#636EFA`` at opacity ``alpha`` as CSS ``rgba(99,110,250,0.18)`` (bands, faint points)."""
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def chart_title(chart: Chart, x_axis: str, limit: int = 56) -> str:
    """``<metric> vs <x-axis>``, the x-axis without its parenthesis (the axis title has it),
    the metric's too when the whole would be longer than ``limit`` characters (it must fit
    a chart half the page wide)."""
    x_title = X_AXES[x_axis].title.split(" (")[0].lower()
    text = f"{chart.title} vs {x_title}"
    return text if len(text) <= limit else f"{chart.title.split(' (')[0]} vs {x_title}"


MIN_LOG_SPAN = math.log10(4)  # decades: the narrowest log x-axis drawn


def log_axis(xs: list[float]) -> dict[str, Any]:
    """A log x-axis's range and ticks for the values ``xs`` (> 0): the range padded by 5 % of
    its span in decades on each side, so the end points' markers are not cut, and at least
    :data:`MIN_LOG_SPAN` decades wide (a factor of 4: one-round runs that all sent about the
    same bytes are one point in the middle, not spread over a range of 0.001 %); labelled ticks
    at :func:`log_ticks`' major values (``20k``, ``1M``: :func:`short_number`), unlabelled
    minor ticks between them. Empty for no values."""
    xs = [x for x in xs if x > 0]
    if not xs:
        return {}
    lo, hi = math.log10(min(xs)), math.log10(max(xs))
    pad = max(0.05 * (hi - lo), (MIN_LOG_SPAN - (hi - lo)) / 2)
    lo, hi = lo - pad, hi + pad
    axis: dict[str, Any] = {"range": [lo, hi], "autorange": False, "ticks": "outside", "ticklen": 5}
    major, minor = log_ticks(10 ** lo, 10 ** hi)
    if major:
        axis.update({"tickmode": "array", "tickvals": major, "ticktext": [short_number(v) for v in major],
                     "minor": {"tickmode": "array", "tickvals": minor, "ticks": "outside", "ticklen": 3,
                               "showgrid": True, "gridcolor": "#f6f7f9"}})
    return axis


def figure(lines: list[Line], chart: Chart, x_axis: str, log_x: bool, experiments: list[str],
           height: int = 320, legend: bool = True) -> dict[str, Any]:
    """A plotly figure as a plain dict (no validation pass: fast with hundreds of lines);
    one subplot per experiment side by side (small multiples), one legend entry per line name
    (none with ``legend=False``: the page shows one legend, on its top chart). A band of
    one point (a one-round run on a log axis) is drawn as an error bar, a band of several as
    a filled area; a ``from_zero`` chart's y-axes start at 0; log x-axes label decades (or
    1-2-5) only (:func:`log_axis`)."""
    n = max(1, len(experiments))
    gap = 0.06 if n > 1 else 0.0
    layout: dict[str, Any] = {
        # the title sits at the top left, below the band Plotly's toolbar (modebar) takes
        # at the top right, so the toolbar never covers it, however long the title is
        "title": {"text": chart_title(chart, x_axis), "font": {"size": 14},
                  "x": 0, "xref": "container", "xanchor": "left", "y": 1, "yref": "container",
                  "yanchor": "top", "pad": {"l": 10, "t": TITLE_TOP}},
        "height": height, "margin": {"l": 55, "r": 10, "t": TITLE_TOP + (46 if n > 1 else 28), "b": 45},
        "font": {"family": FONT, "color": "#1f2933"}, "paper_bgcolor": "#fff", "plot_bgcolor": "#fff",
        # Plotly hides the legend of a figure with one trace unless told: the one legend names
        # even a single method
        "showlegend": legend, "legend": {"font": {"size": 10}}, "hovermode": "closest", "annotations": [],
    }
    integer_x = x_axis == "round" and not log_x  # rounds are whole numbers: no tick between two
    top = max((max(line.x) for line in lines if line.x), default=1)
    for i in range(n):
        sfx = "" if i == 0 else str(i + 1)
        lo, hi = i / n + (gap / 2 if i else 0), (i + 1) / n - (gap / 2 if i < n - 1 else 0)
        layout[f"xaxis{sfx}"] = {"domain": [lo, hi], "anchor": f"y{sfx}", "type": "log" if log_x else "linear",
                                 "title": {"text": X_AXES[x_axis].title, "font": {"size": 11}},
                                 "gridcolor": "#eceff3", "zeroline": False}
        if integer_x:
            layout[f"xaxis{sfx}"].update({"tickmode": "linear", "tick0": 0, "tickformat": "d",
                                          "dtick": integer_dtick(top, max(3, 10 // n))})
        if log_x:  # each subplot's own range: experiments side by side may differ by decades
            own = [x for line in lines if _subplot(line, experiments) == i for x in line.x]
            layout[f"xaxis{sfx}"].update(log_axis(own))
        layout[f"yaxis{sfx}"] = {"anchor": f"x{sfx}", "gridcolor": "#eceff3", "zeroline": False}
        if chart.from_zero:
            layout[f"yaxis{sfx}"]["rangemode"] = "tozero"
        if n > 1:
            layout["annotations"].append({"text": f"<b>{experiments[i]}</b>", "x": (lo + hi) / 2, "y": 1.0,
                                          "xref": "paper", "yref": "paper", "yanchor": "bottom",
                                          "showarrow": False, "font": {"size": 11}})
    data: list[dict[str, Any]] = []
    shown: set[str] = set()
    for line in lines:
        i = _subplot(line, experiments)
        axes = {"xaxis": "x" if i == 0 else f"x{i + 1}", "yaxis": "y" if i == 0 else f"y{i + 1}"}
        whiskers = line.lo is not None and len(line.x) == 1  # a filled band of one point draws nothing
        if line.lo is not None and not whiskers:
            data.append({"type": "scatter", "mode": "lines", "x": line.x + line.x[::-1], "y": line.hi + line.lo[::-1],
                         "fill": "toself", "fillcolor": rgba(line.color, 0.18), "line": {"width": 0},
                         "hoverinfo": "skip", "showlegend": False, "legendgroup": line.name,
                         "name": f"{line.name} band", "meta": "band", **axes})
        trace = {"type": "scatter", "mode": "lines+markers", "x": line.x, "y": line.y, "name": line.name,
                 "legendgroup": line.name, "showlegend": legend and line.name not in shown, "meta": "line",
                 "line": {"color": line.color, "width": 2}, "marker": {"size": 5}, **axes}
        if whiskers:  # the band's extent above and below the point (± std, or the clients' min-max)
            trace["error_y"] = {"type": "data", "symmetric": False, "array": [line.hi[0] - line.y[0]],
                                "arrayminus": [line.y[0] - line.lo[0]], "color": line.color, "thickness": 1.5,
                                "width": 6}
            trace["marker"] = {"size": 8}
        if line.run_id:
            trace["customdata"] = [line.run_id] * len(line.x)  # a click opens the run's drill-down
        data.append(trace)
        shown.add(line.name)
    if not data:
        layout["annotations"].append({"text": "no data for the selected runs", "x": 0.5, "y": 0.5, "xref": "paper",
                                      "yref": "paper", "showarrow": False, "font": {"color": "#888"}})
    return {"data": data, "layout": layout}


def _subplot(line: Line, experiments: list[str]) -> int:
    """The subplot (0-based, left to right) a line is drawn in: its experiment's."""
    return experiments.index(line.experiment) if line.experiment in experiments else 0


def legend_everywhere(figs: list[dict[str, Any]]) -> None:
    """Complete the first figure's legend (the page's one legend) with the lines only the
    others draw (a run with memory but no bytes recorded): a legend-only entry each, the
    line's colour and marker, no point (``x = y = [None]``)."""
    top = figs[0]
    named = {t["name"] for t in top["data"] if t.get("showlegend")}
    for fig in figs[1:]:
        for t in fig["data"]:
            if t["meta"] == "line" and t["name"] not in named:
                named.add(t["name"])
                top["data"].append({"type": "scatter", "mode": "lines+markers", "x": [None], "y": [None],
                                    "name": t["name"], "legendgroup": t["name"], "showlegend": True,
                                    "meta": "legend", "line": t["line"], "marker": {"size": 5},
                                    "hoverinfo": "skip"})


def repeats_top(x_axis: str, log_x: bool, bytes_dir: str) -> bool:
    """Whether the grid's accuracy chart would repeat the top one (accuracy against the
    bytes picked on top, log x): then the grid leaves it out. With log x off it is the same
    data on a linear axis, a different view: kept."""
    return x_axis == bytes_dir and log_x


def filter_ids(table, methods: list[str] | None, seeds: list[Any] | None, statuses: list[str] | None,
               ticked: list[str] | None) -> list[str]:
    """The run ids the charts draw: the experiment's runs that pass the filters (an empty
    method or seed filter = all), restricted to the ticked rows when any are ticked."""
    keep = table
    if methods:
        keep = keep[keep["label"].isin(methods)]
    if seeds:
        keep = keep[keep["seed"].astype(str).isin([str(s) for s in seeds])]
    keep = keep[keep["status"].isin(statuses or [])]
    ids = keep["run_id"].tolist()
    if ticked:
        ids = [i for i in ids if i in set(ticked)]
    return ids


def render(store: RunStore, experiments: list[str], methods: list[str] | None, seeds: list[Any] | None,
           statuses: list[str] | None, mode: str, x_axis: str, log_x: bool, bytes_dir: str,
           ticked: list[str] | None = None) -> tuple[list[dict[str, Any]], Any]:
    """Everything a chart refresh returns: the prominent accuracy-vs-bytes figure, the grid's
    figures and the comparison table (what the chart callback sends; timed in the tests).

    One legend, on the top figure, naming every line of every chart (:func:`legend_everywhere`):
    a line's colour is its method's on every chart, so one key serves all seven. Plotly's
    ``legendgroup`` links traces within one figure only (each ``dcc.Graph`` is its own plot),
    so a click on a legend entry hides that line on the top chart alone; the Methods filter
    hides a method everywhere."""
    everything = runs_table(store)
    labels = everything["label"].dropna().unique().tolist()  # a variant's colour: the same in every experiment
    ids = filter_ids(everything[everything["experiment"].isin(experiments)], methods, seeds, statuses, ticked)
    series = round_series(store, ids)
    figs = [figure(chart_lines(series, CHARTS["accuracy"], bytes_dir, mode, True, labels), CHARTS["accuracy"],
                   bytes_dir, True, experiments, height=420)]
    for _, key in GRID:
        lines = chart_lines(series, CHARTS[key], x_axis, mode, log_x, labels)
        figs.append(figure(lines, CHARTS[key], x_axis, log_x, experiments, legend=False))
    legend_everywhere(figs)
    return figs, comparison(store, ids)


def default_experiment(table) -> list[str]:
    """The experiment of the most recently started run (run ids start with a timestamp)."""
    ok = table[table["status"] != "malformed"]
    if ok.empty:
        return []
    return [ok.sort_values("run_id").iloc[-1]["experiment"]]


def _control(label: str, component: Any, help_text: str | None = None) -> html.Div:
    children = [html.Label(label, className="control-label"), component]
    if help_text:
        children.append(html.Div(help_text, className="control-help"))
    return html.Div(children, className="control")


def _controls() -> list[Any]:
    """The sidebar: what to chart. Multi-selects are searchable dropdowns, so twenty
    experiments take one line until opened."""
    return [
        _control("Experiments", dcc.Dropdown(id="experiment", multi=True, searchable=True, clearable=True,
                                             placeholder="pick experiments…", optionHeight=30, maxHeight=360),
                 "several = side by side (small multiples)"),
        _control("Methods", dcc.Dropdown(id="method-filter", value=[], multi=True, placeholder="all methods")),
        _control("Seeds", dcc.Dropdown(id="seed-filter", value=[], multi=True, placeholder="all seeds")),
        _control("Status", dcc.Checklist(id="status-filter", options=list(STATUSES), value=DEFAULT_STATUSES,
                                         inline=True, className="options inline")),
        _control("Seeds drawn as", dcc.RadioItems(
            id="mode", value="mean", className="options",
            options=[{"label": "mean ± std", "value": "mean"}, {"label": "individual runs", "value": "runs"}])),
        _control("X-axis (the grid)", dcc.RadioItems(
            id="x-axis", value="round", className="options",
            options=[{"label": a.title.split(" (")[0], "value": k} for k, a in X_AXES.items()])),
        _control("Scale", dcc.Checklist(id="log-x", options=[{"label": "log x", "value": "log"}], value=[],
                                        className="options")),
    ]


# Cells wrap between words and after a hyphen (a run id "20261122-123011-fedprompt-sst2-s0"
# takes two lines): a table narrower than its content grows taller instead of wider. With the
# values every row shares said once above the table (RUN_SHARED), the run list and the
# comparison table fit a 1,280 px window (909 px inside the card beside the sidebar).
TABLE_CELL = {"fontSize": 12, "padding": "3px 4px", "textAlign": "left", "whiteSpace": "normal",
              "height": "auto", "minWidth": "36px", "maxWidth": "260px", "lineHeight": "1.3", "fontFamily": FONT}
TABLE_HEADER = {"fontWeight": 600, "backgroundColor": "#f0f3f7", "fontSize": 11, "verticalAlign": "bottom"}
# tables never wider than their card: content wider still (many ticked runs in the config
# diff, many method metrics in the drill-down) scrolls sideways inside it
TABLE_BOX = {"overflowX": "auto", "maxWidth": "100%"}
ROUND_BYTES = ("bytes_up", "bytes_down")  # a drilled-down run's rounds: byte counts, shown as text
WIDE_COLUMNS = [  # ids and notes wrap onto a second line rather than squeeze the numbers
    {"if": {"column_id": "run_id"}, "minWidth": "80px", "maxWidth": "220px"},
    {"if": {"column_id": "experiment"}, "maxWidth": "160px"},
    {"if": {"column_id": "label"}, "minWidth": "70px"},  # "fedprompt" on one line
    {"if": {"column_id": "method"}, "minWidth": "70px"},
    {"if": {"column_id": "note"}, "minWidth": "72px", "maxWidth": "260px"},
    {"if": {"column_id": "key"}, "minWidth": "120px", "fontWeight": 600},
    {"if": {"column_id": "value"}, "maxWidth": "420px"},
]
# a byte count ("12.1 KB") on one line, as a number would be (its header still wraps: "bytes / down")
BYTES_ON_ONE_LINE = [{"if": {"column_id": c}, "whiteSpace": "nowrap"} for c in (*BYTE_COLUMNS, *ROUND_BYTES)]
# The columns of the run list and the comparison table that, holding one value in every row
# (one experiment's dataset, partition, status), are said once in a line above the table
# instead of once a row: what fits the run list in a 1,280 px window.
RUN_SHARED = ["experiment", "dataset", "partition", "seed", "holdout", "status"]
COMPARE_SHARED = ["dataset", "partition"]
# the run list's headers: words a narrow column can wrap between (its data keep the ids)
RUN_HEADERS = {"run_id": "run id", "rounds_done": "rounds", "final_accuracy": "final acc",
               "best_accuracy": "best acc", "p_accuracy": "P acc", "np_accuracy": "NP acc",
               "total_bytes_up": "bytes up", "total_bytes_down": "bytes down", "epsilon": "ε", "dp_delta": "δ"}
# what a header's tooltip says (dashboard_data.COLUMN_HELP), said once under the tables
HEADER_HELP = "? Hover a column header for what the column holds and its unit."
# header tooltips: shown after 300 ms, until the pointer leaves (the longest take a while to read)
TOOLTIPS = {"tooltip_delay": 300, "tooltip_duration": None}
# a drilled-down run's config: the keys that differ from the compared runs' are highlighted
CONFIG_TABLE_COLUMNS = [{"name": "key", "id": "key"}, {"name": "this run", "id": "value"},
                        {"name": "other values in the compared runs", "id": "others"}]
DIFFERS = [{"if": {"filter_query": '{others} != ""'}, "backgroundColor": "#fff6d9"}]


def card(title: str, body: list[Any], hint: Any = None, extra: Any = None, title_id: str | None = None,
         **kwargs) -> html.Section:
    """A card of the main column: its title (``title_id``: an id to update it by), a muted
    ``hint`` beside it, an ``extra`` control at the head's end, then ``body``."""
    head = [html.H2(title, id=title_id) if title_id else html.H2(title)]
    head += [html.Span(hint, className="hint")] if hint is not None else []
    head += [extra] if extra is not None else []  # a component with no children is falsy
    return html.Section([html.Div(head, className="card-head"), *body], className="card", **kwargs)


def _content() -> list[Any]:
    """The main column: the prominent accuracy-vs-bytes chart first, then the grid, the run
    list, the ticked runs' config diff, a run's drill-down and the comparison table."""
    table = {"style_cell": TABLE_CELL, "style_header": TABLE_HEADER, "style_table": TABLE_BOX,
             "style_cell_conditional": WIDE_COLUMNS, **TOOLTIPS}
    return [
        card("Accuracy vs communication", [dcc.Graph(id="acc-bytes", config=GRAPH_CONFIG)],
             extra=dcc.RadioItems(id="bytes-dir", value="bytes", inline=True, className="options",
                                  options=[{"label": f"bytes {v}", "value": k} for k, v in BYTES_DIRECTIONS.items()]),
             id="card-bytes"),
        card("Against the chosen x-axis",
             [html.Div([dcc.Graph(id=gid, config=GRAPH_CONFIG) for gid, _ in GRID], className="grid",
                       id="grid")],
             hint="two charts a row; one when several experiments are side by side", id="card-grid"),
        card("Runs", [html.Div(id="runs-shared", className="table-note"), dash_table.DataTable(
            # sorted in refresh_runs (sort_rows): a bytes column by its count, not its text
            id="runs", row_selectable="multi", selected_row_ids=[], sort_action="custom", sort_by=[],
            page_size=50, **table,
            style_data_conditional=[
                *BYTES_ON_ONE_LINE,
                {"if": {"filter_query": '{status} = "malformed"'}, "backgroundColor": "#fde2e2"},
                {"if": {"filter_query": '{status} = "failed"'}, "backgroundColor": "#fff1d6"},
                {"if": {"filter_query": '{status} = "stale"'}, "backgroundColor": "#ececec"},
                {"if": {"filter_query": '{status} = "running"'}, "backgroundColor": "#e3f1ff"},
            ],
        ), html.Div(HEADER_HELP, className="table-help")],
            hint="tick runs to restrict the charts and compare their configs; click a cell for the run's "
                 "provenance, rounds and config", id="card-runs"),
        card("Config diff", [html.Div(id="config-diff-note", className="empty-note"),
                             dash_table.DataTable(id="config-diff", merge_duplicate_headers=True, **table)],
             hint="the keys whose values differ between the ticked runs, one column per run", id="card-diff"),
        card("Run", [
            html.Pre(id="detail-provenance", className="block"),
            dash_table.DataTable(id="detail-rounds", style_data_conditional=BYTES_ON_ONE_LINE, **table),
            html.Div(id="detail-config-note", className="empty-note"),
            dash_table.DataTable(id="detail-config", style_data_conditional=DIFFERS,
                                 tooltip_header=header_tooltips([c["id"] for c in CONFIG_TABLE_COLUMNS], "config"),
                                 **{**table, "style_table": {**TABLE_BOX, "maxHeight": "460px",
                                                             "overflowY": "auto"}}),
            html.Pre(id="detail-summary", className="block"),
        ], hint="click a run's cell in the run list, or a line's point in individual-runs mode",
            title_id="detail-title", id="detail"),
        card("Comparison", [dcc.Download(id="download"), html.Div(id="compare-shared", className="table-note"),
                            dash_table.DataTable(id="compare", **table),
                            html.Div(HEADER_HELP, className="table-help")],
             hint="mean ± std over the charted runs of a method",
             extra=html.Div([html.Button("CSV", id="csv-btn", className="btn"),
                             html.Button("Markdown", id="md-btn", className="btn")], className="buttons"),
             id="card-compare"),
    ]


def shared_values(df, candidates: list[str]) -> dict[str, Any]:
    """The ``candidates`` columns of ``df`` holding one value in every row (none for an empty
    table): what a table says once above it instead of in every row."""
    if df.empty:
        return {}
    return {c: df[c].iloc[0] for c in candidates
            if c in df.columns and df[c].astype(str).nunique(dropna=False) == 1 and not df[c].isna().all()}


def shared_line(what: str, shared: dict[str, Any]) -> str:
    """``All 18 listed runs: dataset sst2; partition dirichlet`` ("" when nothing is shared)."""
    return f"{what}: " + "; ".join(f"{k} {v}" for k, v in shared.items()) if shared else ""


def _note_tooltips(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The full text of a run's id and note on hover (cells cut long text with an ellipsis)."""
    return [{c: {"value": str(r[c]), "type": "text"} for c in ("run_id", "note") if r.get(c)} for r in rows]


def round_rows(rounds) -> list[dict[str, Any]]:
    """A drilled-down run's rounds (:func:`~simulations.dashboard_data.run_detail`) as the
    table's rows: numbers to 4 decimals, the byte counts as text (:func:`byte_text`:
    ``528 B``, ``12.1 KB``); the table is not sortable, so text sorts nothing wrong."""
    rows = rounds.round(4).to_dict("records")
    for row in rows:
        for c in ROUND_BYTES:
            if c in row:
                row[c] = byte_text(row[c]) if not isinstance(row[c], str) else row[c]
    return rows


def _diff_table(table, runs) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Config-diff rows and two-line headers (the run's label above its id) for a DataTable."""
    labels = runs.set_index("run_id")["label"].to_dict() if not runs.empty else {}
    columns = [{"name": ["", "key"], "id": "key"}] + [
        {"name": [str(labels.get(c) or ""), c], "id": c} for c in table.columns]
    rows = [{"key": key, **{c: v if isinstance(v, str) else json.dumps(v) for c, v in row.items()}}
            for key, row in table.iterrows()]
    return rows, columns


def make_app(runs_dir: Path, refresh_s: float = 2.0, experiment: str | None = None) -> Dash:
    """The Dash app over ``runs_dir`` (its record files stat'ed every ``refresh_s`` seconds);
    ``experiment``: the one every run belongs to (:class:`~simulations.dashboard_data.RunStore`)."""
    store = RunStore(runs_dir, experiment)
    runs_table(store)  # parse the records (and import the method registry) before the first page load
    app = Dash(__name__, title="fedtext dashboard", assets_folder=str(ASSETS))
    app.layout = html.Div([
        html.Header([html.H1("fedtext · compare strategies"), html.Span(f"records: {runs_dir}", id="root",
                                                                        className="records")],
                    className="topbar"),
        dcc.Interval(id="tick", interval=int(refresh_s * 1000)),
        dcc.Store(id="version"),
        html.Div([
            html.Aside(_controls(), className="sidebar", id="sidebar"),
            html.Main(_content(), className="content", id="content"),
        ], className="shell"),
    ])

    @app.callback(Output("version", "data"), Input("tick", "n_intervals"), State("version", "data"))
    def poll(_, last):
        version = store.version()  # stat only; nothing downstream runs when no file changed
        return no_update if version == last else version

    @app.callback(Output("experiment", "options"), Output("experiment", "value"),
                  Output("method-filter", "options"), Output("seed-filter", "options"),
                  Input("version", "data"), Input("experiment", "value"))
    def choices(_, chosen):
        table = runs_table(store)
        experiments = sorted(table["experiment"].dropna().unique())
        # first load: the latest experiment; afterwards what the user ticked (none = no charts)
        value = default_experiment(table) if chosen is None else [e for e in chosen if e in experiments]
        mine = table[table["experiment"].isin(value)]
        labels = sorted(mine["label"].dropna().unique())
        seeds = sorted({s for s in mine["seed"] if s is not None}, key=str)
        return (experiments, value if value != chosen else no_update,
                labels, [{"label": str(s), "value": s} for s in seeds])

    @app.callback(Output("log-x", "value"), Input("x-axis", "value"))
    def log_default(x_axis):
        return ["log"] if X_AXES[x_axis].log else []

    @app.callback(Output("runs", "data"), Output("runs", "columns"), Output("runs", "tooltip_data"),
                  Output("runs-shared", "children"), Output("runs", "tooltip_header"),
                  Input("version", "data"), Input("experiment", "value"), Input("method-filter", "value"),
                  Input("seed-filter", "value"), Input("status-filter", "value"), Input("runs", "sort_by"))
    def refresh_runs(_, experiments, methods, seeds, statuses, sort_by):
        table = runs_table(store)
        shown = set(filter_ids(table[table["experiment"].isin(experiments or [])], methods, seeds, statuses, None))
        # malformed runs are always listed (whatever experiment their broken config suggests)
        df = table[table["run_id"].isin(shown) | (table["status"] == "malformed")]
        # accuracies to 3 digits as in the comparison table: narrower columns
        df = df.round({c: 3 for c in df.columns if "accuracy" in c})
        df["id"] = df["run_id"]
        # left out: a column no listed run has a value in (holdout, P/NP accuracy, options,
        # note), the method where it is every run's label, a column every run shares (said above)
        # a malformed run (listed whatever is picked, its config unread) has no method, dataset
        # or seed: the others' shared values are said with it aside, its status is its own
        readable = df[df["status"] != "malformed"]
        empty = [c for c in df.columns if c != "run_id" and df[c].replace("", None).isna().all()]
        if (readable["method"] == readable["label"]).all():
            empty.append("method")
        shared = shared_values(readable, [c for c in RUN_SHARED if c not in empty and c != "status"])
        shared |= shared_values(df, ["status"])
        as_text = (*BYTE_COLUMNS, EPSILON_COLUMN)  # numbers to sort by, text to show
        numeric = [c for c in df.columns if df[c].dtype.kind in "if" and c not in as_text]
        columns = [{"name": RUN_HEADERS.get(c, c), "id": c, **({"type": "numeric"} if c in numeric else {})}
                   for c in df.columns if c != "id" and c not in empty and c not in shared]
        # sorted here, by the numbers (a bytes column by its count), then the counts as text
        df = sort_rows(df, sort_by).astype({c: object for c in as_text})
        for c in BYTE_COLUMNS:
            df[c] = df[c].map(byte_text)
        df[EPSILON_COLUMN] = df[EPSILON_COLUMN].map(epsilon_text)
        rows = df.to_dict("records")
        what = "The listed run" if len(readable) == 1 else f"All {len(readable)} listed runs"
        what += f" ({len(df) - len(readable)} malformed aside)" if len(readable) < len(df) else ""
        return (rows, columns, _note_tooltips(rows), shared_line(what, shared),
                header_tooltips([c["id"] for c in columns], "runs"))

    @app.callback(Output("config-diff", "data"), Output("config-diff", "columns"),
                  Output("config-diff-note", "children"), Output("config-diff", "tooltip_header"),
                  Input("version", "data"), Input("runs", "selected_row_ids"))
    def refresh_diff(_, ticked):
        ticked = list(ticked or [])
        if len(ticked) < 2:
            return [], [], "Tick two or more runs in the run list to see how their configs differ.", {}
        table = config_diff(store, ticked)
        rows, columns = _diff_table(table, runs_table(store))
        if table.empty:
            return [], [], f"The {len(table.columns)} ticked runs have the same config.", {}
        keys = "1 key differs" if len(rows) == 1 else f"{len(rows)} keys differ"
        return (rows, columns, f"{keys} between the {len(table.columns)} ticked runs.",
                header_tooltips([c["id"] for c in columns], "config-diff"))

    @app.callback(
        [Output("acc-bytes", "figure")] + [Output(gid, "figure") for gid, _ in GRID]
        + [Output("compare", "data"), Output("compare", "columns"), Output("grid", "className"),
           Output("acc-x", "style"), Output("compare-shared", "children"), Output("compare", "tooltip_header")],
        Input("version", "data"), Input("experiment", "value"), Input("method-filter", "value"),
        Input("seed-filter", "value"), Input("status-filter", "value"), Input("mode", "value"),
        Input("x-axis", "value"), Input("log-x", "value"), Input("bytes-dir", "value"),
        Input("runs", "selected_row_ids"),
    )
    def refresh_charts(_, experiments, methods, seeds, statuses, mode, x_axis, log_x, bytes_dir, ticked):
        figs, table = render(store, experiments or [], methods, seeds, statuses, mode, x_axis,
                             "log" in (log_x or []), bytes_dir, ticked)
        wide = len(experiments or []) > 1  # small multiples get the full width
        hide = repeats_top(x_axis, "log" in (log_x or []), bytes_dir)  # the top chart again: left out
        shared = shared_values(table, COMPARE_SHARED)  # in the downloads, not in the columns shown
        shown = [c for c in table.columns if c not in shared]
        return figs + [table.to_dict("records"), [{"name": c, "id": c} for c in shown],
                       "grid one" if wide else "grid", {"display": "none"} if hide else {},
                       shared_line("Every row", shared), header_tooltips(shown, "compare")]

    @app.callback(Output("detail-title", "children"), Output("detail-rounds", "data"),
                  Output("detail-rounds", "columns"), Output("detail-summary", "children"),
                  Output("detail-provenance", "children"), Output("detail-config", "data"),
                  Output("detail-config", "columns"), Output("detail-config-note", "children"),
                  Output("detail-rounds", "tooltip_header"),
                  Input("runs", "active_cell"), Input("acc-x", "clickData"), Input("acc-bytes", "clickData"),
                  State("runs", "selected_row_ids"), State("runs", "data"),
                  prevent_initial_call=True)
    def drill_down(cell, click_x, click_bytes, ticked, listed):
        run_id = None
        if ctx.triggered_id == "runs" and cell:
            run_id = cell.get("row_id")
        else:
            click = click_x if ctx.triggered_id == "acc-x" else click_bytes
            points = (click or {}).get("points") or []
            run_id = points[0].get("customdata") if points else None  # individual-runs mode only
        if not run_id:
            return (no_update,) * 9
        rounds, text = run_detail(store, run_id)
        listed = {r["run_id"]: r.get("status") for r in listed or []}
        readable = [i for i in listed if listed[i] != "malformed"]  # a malformed run has no config to compare
        config, note = _config_rows(run_id, [i for i in ticked or [] if listed.get(i) != "malformed"], readable)
        return (f"Run {run_id}", round_rows(rounds), [{"name": c, "id": c} for c in rounds.columns], text,
                run_provenance(store, run_id), config, CONFIG_TABLE_COLUMNS, note,
                header_tooltips(rounds.columns, "rounds"))

    def _config_rows(run_id: str, ticked: list[str], listed: list[str]) -> tuple[list[dict[str, str]], str]:
        """The drill-down's config table and its line: compared with the ticked runs when any
        are ticked (the config diff's runs), else with the runs the list shows."""
        compared, which = (ticked, "ticked") if ticked else (listed, "listed")
        others = [i for i in dict.fromkeys(compared) if i != run_id]
        table = config_table(store, run_id, others)
        if table.empty:
            return [], "No readable config."
        differ = int((table["others"] != "").sum())
        if not others:
            return table.to_dict("records"), "Its config (no other run to compare it with)."
        keys = "1 key differs" if differ == 1 else f"{differ} keys differ"
        return (table.to_dict("records"),
                f"Its config: {keys} from the {len(others)} other {which} run(s), listed first.")

    @app.callback(Output("download", "data"), Input("csv-btn", "n_clicks"), Input("md-btn", "n_clicks"),
                  State("compare", "data"), prevent_initial_call=True)
    def download(csv_clicks, md_clicks, rows):
        import pandas as pd

        table = pd.DataFrame(rows or [])  # every column, the shared ones the page says above it too
        if ctx.triggered_id == "md-btn":
            return dcc.send_string(to_markdown(table), "comparison.md")
        return dcc.send_string(table.to_csv(index=False), "comparison.csv")

    from simulations import dashboard_explore

    # any metric, per client, sweep: their cards and callbacks, drawn with this module's parts
    dashboard_explore.register(app, store, sys.modules[__name__])
    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Serve the fedtext simulation dashboard on localhost.")
    ap.add_argument("--runs", type=Path, default=Path("runs"), help="folder of run records, any depth (default runs/)")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    ap.add_argument("--refresh", type=float, default=2.0, help="seconds between checks of the records")
    ap.add_argument("--experiment", help="the experiment every run under --runs belongs to, e.g. for "
                    "--runs simulations/results/<exp>/runs (nothing above --runs is read; default: each run's "
                    "experiment.json under --runs, else its dataset, partition and shots)")
    args = ap.parse_args(argv)
    if not args.runs.is_dir():
        print(f"fedtext-dashboard: no such folder {args.runs.resolve()}", file=sys.stderr)
        return 2
    print(f"fedtext dashboard: http://{args.host}:{args.port} (records: {args.runs.resolve()})", flush=True)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per refresh request
    make_app(args.runs.resolve(), args.refresh, args.experiment).run(host=args.host, port=args.port, debug=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
