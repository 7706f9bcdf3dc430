"""Simulation dashboard: compare strategies as the papers do, live, in a browser (Plotly Dash).

    python -m simulations.dashboard --runs runs/            # or: fedtext-dashboard --runs runs/
    python -m simulations.dashboard --runs simulations/results --port 8050

Serves http://127.0.0.1:8050. Pick an **experiment** (a compare-runner output folder, or
hand-started runs of one dataset/partition/shots; several = small multiples side by side),
filter by method, seed and status, and read:

* **accuracy vs cumulative bytes** (up + down, up or down; log x), the view these papers
  are about, on top;
* accuracy, client accuracy, loss, model queries, client memory and wall time against the
  chosen **x-axis** (round, wall time, simulated device time where recorded, cumulative
  bytes up / down / both, cumulative queries; log toggle);
* per method (or variant) the **mean over seeds with a ± std band**, or every run on its
  own (toggle); one colour per method on every chart;
* the run list (tick runs to restrict the charts; click a cell for the run's
  **drill-down**: its provenance (git commit, package versions, SuperNodes, Flower's
  run id), its rounds with dropped clients and the method's metrics, and its config)
  and the comparison table (mean ± std), downloadable as CSV or markdown. A run whose
  record files are malformed (checked as :mod:`fedtext.records` reads them) is always
  listed, ``malformed`` with the reason in its note, and never charted or counted.

Every ``--refresh`` seconds the page stats the record files; only when one changed are
the changed files re-read (``rounds.jsonl`` from where the last read stopped) and the
charts redrawn. It reads nothing but the run records (:mod:`simulations.dashboard_data`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, State, ctx, dash_table, dcc, html, no_update

from simulations.dashboard_data import (
    CHARTS, STATUSES, X_AXES, Chart, Line, RunStore, chart_lines, comparison, round_series, run_detail,
    run_provenance, runs_table,
)
from simulations.tables import to_markdown

# The grid under the prominent accuracy-vs-bytes chart: (graph id, chart) against the chosen x.
GRID = [("acc-x", "accuracy"), ("client-x", "client-accuracy"), ("loss-x", "loss"),
        ("queries-x", "queries"), ("memory-x", "memory"), ("wall-x", "wall")]
BYTES_DIRECTIONS = {"bytes": "up + down", "bytes-up": "up", "bytes-down": "down"}
DEFAULT_STATUSES = ["running", "finished", "failed", "stale"]


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def figure(lines: list[Line], chart: Chart, x_axis: str, log_x: bool, experiments: list[str],
           height: int = 320) -> dict[str, Any]:
    """A plotly figure as a plain dict (no validation pass: fast with hundreds of lines);
    one subplot per experiment side by side (small multiples), one legend entry per line name."""
    n = max(1, len(experiments))
    gap = 0.06 if n > 1 else 0.0
    layout: dict[str, Any] = {
        "title": {"text": f"{chart.title} vs {X_AXES[x_axis].title.lower()}", "font": {"size": 14}},
        "height": height, "margin": {"l": 50, "r": 10, "t": 50 if n > 1 else 40, "b": 40},
        "legend": {"font": {"size": 10}}, "hovermode": "closest", "annotations": [],
    }
    for i in range(n):
        sfx = "" if i == 0 else str(i + 1)
        lo, hi = i / n + (gap / 2 if i else 0), (i + 1) / n - (gap / 2 if i < n - 1 else 0)
        layout[f"xaxis{sfx}"] = {"domain": [lo, hi], "anchor": f"y{sfx}", "type": "log" if log_x else "linear",
                                 "title": {"text": X_AXES[x_axis].title, "font": {"size": 11}}}
        layout[f"yaxis{sfx}"] = {"anchor": f"x{sfx}"}
        if n > 1:
            layout["annotations"].append({"text": f"<b>{experiments[i]}</b>", "x": (lo + hi) / 2, "y": 1.0,
                                          "xref": "paper", "yref": "paper", "yanchor": "bottom",
                                          "showarrow": False, "font": {"size": 11}})
    data: list[dict[str, Any]] = []
    shown: set[str] = set()
    for line in lines:
        i = experiments.index(line.experiment) if line.experiment in experiments else 0
        axes = {"xaxis": "x" if i == 0 else f"x{i + 1}", "yaxis": "y" if i == 0 else f"y{i + 1}"}
        if line.lo is not None:
            data.append({"type": "scatter", "mode": "lines", "x": line.x + line.x[::-1], "y": line.hi + line.lo[::-1],
                         "fill": "toself", "fillcolor": _rgba(line.color, 0.18), "line": {"width": 0},
                         "hoverinfo": "skip", "showlegend": False, "legendgroup": line.name,
                         "name": f"{line.name} band", "meta": "band", **axes})
        trace = {"type": "scatter", "mode": "lines+markers", "x": line.x, "y": line.y, "name": line.name,
                 "legendgroup": line.name, "showlegend": line.name not in shown, "meta": "line",
                 "line": {"color": line.color, "width": 2}, "marker": {"size": 5}, **axes}
        if line.run_id:
            trace["customdata"] = [line.run_id] * len(line.x)  # a click opens the run's drill-down
        data.append(trace)
        shown.add(line.name)
    if not data:
        layout["annotations"].append({"text": "no data for the selected runs", "x": 0.5, "y": 0.5, "xref": "paper",
                                      "yref": "paper", "showarrow": False, "font": {"color": "#888"}})
    return {"data": data, "layout": layout}


def _filter_ids(table, methods: list[str] | None, seeds: list[Any] | None, statuses: list[str] | None,
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
    figures and the comparison table (what the chart callback sends; timed in the tests)."""
    everything = runs_table(store)
    labels = everything["label"].dropna().unique().tolist()  # a variant's colour: the same in every experiment
    ids = _filter_ids(everything[everything["experiment"].isin(experiments)], methods, seeds, statuses, ticked)
    series = round_series(store, ids)
    figs = [figure(chart_lines(series, CHARTS["accuracy"], bytes_dir, mode, True, labels), CHARTS["accuracy"],
                   bytes_dir, True, experiments, height=420)]
    for _, key in GRID:
        lines = chart_lines(series, CHARTS[key], x_axis, mode, log_x, labels)
        figs.append(figure(lines, CHARTS[key], x_axis, log_x, experiments))
    return figs, comparison(store, ids)


def default_experiment(table) -> list[str]:
    """The experiment of the most recently started run (run ids start with a timestamp)."""
    ok = table[table["status"] != "malformed"]
    if ok.empty:
        return []
    return [ok.sort_values("run_id").iloc[-1]["experiment"]]


def make_app(runs_dir: Path, refresh_s: float = 2.0) -> Dash:
    """The Dash app over ``runs_dir`` (its record files stat'ed every ``refresh_s`` seconds)."""
    store = RunStore(runs_dir)
    runs_table(store)  # parse the records (and import the method registry) before the first page load
    app = Dash(__name__, title="fedtext dashboard")
    small = {"fontSize": 12}
    control = {"display": "inline-block", "verticalAlign": "top", "marginRight": "14px"}
    app.layout = html.Div([
        html.H2("fedtext: compare strategies"),
        html.Div(f"records: {runs_dir}", id="root"),
        dcc.Interval(id="tick", interval=int(refresh_s * 1000)),
        dcc.Store(id="version"),
        html.Div([
            html.Div([html.B("Experiment (several = side by side)"),
                      dcc.Checklist(id="experiment", inputStyle={"marginRight": "4px"})], style=control),
            html.Div([html.B("Methods (none ticked = all)"),
                      dcc.Checklist(id="method-filter", value=[], inputStyle={"marginRight": "4px"})], style=control),
            html.Div([html.B("Seeds (none ticked = all)"),
                      dcc.Checklist(id="seed-filter", value=[], inline=True)], style=control),
            html.Div([html.B("Status"), dcc.Checklist(id="status-filter", options=list(STATUSES),
                                                          value=DEFAULT_STATUSES, inline=True)], style=control),
        ]),
        html.Div([
            html.Div([html.B("Seeds"), dcc.RadioItems(
                id="mode", value="mean", inline=True,
                options=[{"label": "mean ± std", "value": "mean"}, {"label": "individual runs", "value": "runs"}])],
                style=control),
            html.Div([html.B("X-axis"), dcc.RadioItems(
                id="x-axis", value="round", inline=True, inputStyle={"marginLeft": "8px"},
                options=[{"label": a.title.split(" (")[0], "value": k} for k, a in X_AXES.items()])], style=control),
            html.Div([dcc.Checklist(id="log-x", options=[{"label": "log x", "value": "log"}], value=[])],
                     style=control),
        ], style={"marginTop": "6px"}),
        html.H3("Accuracy vs communication"),
        dcc.RadioItems(id="bytes-dir", value="bytes", inline=True,
                       options=[{"label": f"bytes {v}", "value": k} for k, v in BYTES_DIRECTIONS.items()]),
        dcc.Graph(id="acc-bytes"),
        html.H3("Against the chosen x-axis"),
        html.Div([dcc.Graph(id=gid, style={"width": "49%", "display": "inline-block"}) for gid, _ in GRID]),
        html.H3("Runs (tick to restrict the charts; click a cell for the run's provenance, rounds and config)"),
        dash_table.DataTable(
            id="runs", row_selectable="multi", selected_row_ids=[], sort_action="native", page_size=50,
            style_cell={**small, "padding": "2px 6px"},
            style_data_conditional=[
                {"if": {"filter_query": '{status} = "malformed"'}, "backgroundColor": "#fde2e2"},
                {"if": {"filter_query": '{status} = "failed"'}, "backgroundColor": "#fff1d6"},
                {"if": {"filter_query": '{status} = "stale"'}, "backgroundColor": "#ececec"},
                {"if": {"filter_query": '{status} = "running"'}, "backgroundColor": "#e3f1ff"},
            ],
        ),
        html.Div(id="detail", children=[
            html.H4("Run", id="detail-title"),
            html.Pre(id="detail-provenance", style={"fontSize": 11, "background": "#f6f6f6"}),
            dash_table.DataTable(id="detail-rounds", style_cell={**small, "padding": "2px 6px"},
                                 style_table={"overflowX": "auto"}),
            html.Pre(id="detail-config", style={"fontSize": 11, "maxHeight": "300px", "overflow": "auto",
                                                "background": "#f6f6f6"}),
        ]),
        html.H3("Comparison (mean ± std over the charted runs of a method)"),
        html.Button("CSV", id="csv-btn"), html.Button("Markdown", id="md-btn"),
        dcc.Download(id="download"),
        dash_table.DataTable(id="compare", style_cell={**small, "padding": "2px 6px"}),
    ], style={"fontFamily": "sans-serif", "margin": "12px"})

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

    @app.callback(Output("runs", "data"), Output("runs", "columns"),
                  Input("version", "data"), Input("experiment", "value"), Input("method-filter", "value"),
                  Input("seed-filter", "value"), Input("status-filter", "value"))
    def refresh_runs(_, experiments, methods, seeds, statuses):
        table = runs_table(store)
        shown = set(_filter_ids(table[table["experiment"].isin(experiments or [])], methods, seeds, statuses, None))
        # malformed runs are always listed (whatever experiment their broken config suggests)
        df = table[table["run_id"].isin(shown) | (table["status"] == "malformed")].round(4)
        df["id"] = df["run_id"]
        columns = [{"name": c, "id": c} for c in df.columns if c != "id"]
        return df.to_dict("records"), columns

    @app.callback(
        [Output("acc-bytes", "figure")] + [Output(gid, "figure") for gid, _ in GRID]
        + [Output("compare", "data"), Output("compare", "columns")],
        Input("version", "data"), Input("experiment", "value"), Input("method-filter", "value"),
        Input("seed-filter", "value"), Input("status-filter", "value"), Input("mode", "value"),
        Input("x-axis", "value"), Input("log-x", "value"), Input("bytes-dir", "value"),
        Input("runs", "selected_row_ids"),
    )
    def refresh_charts(_, experiments, methods, seeds, statuses, mode, x_axis, log_x, bytes_dir, ticked):
        figs, table = render(store, experiments or [], methods, seeds, statuses, mode, x_axis,
                             "log" in (log_x or []), bytes_dir, ticked)
        return figs + [table.to_dict("records"), [{"name": c, "id": c} for c in table.columns]]

    @app.callback(Output("detail-title", "children"), Output("detail-rounds", "data"),
                  Output("detail-rounds", "columns"), Output("detail-config", "children"),
                  Output("detail-provenance", "children"),
                  Input("runs", "active_cell"), Input("acc-x", "clickData"), Input("acc-bytes", "clickData"),
                  prevent_initial_call=True)
    def drill_down(cell, click_x, click_bytes):
        run_id = None
        if ctx.triggered_id == "runs" and cell:
            run_id = cell.get("row_id")
        else:
            click = click_x if ctx.triggered_id == "acc-x" else click_bytes
            points = (click or {}).get("points") or []
            run_id = points[0].get("customdata") if points else None  # individual-runs mode only
        if not run_id:
            return no_update, no_update, no_update, no_update, no_update
        rounds, text = run_detail(store, run_id)
        return (f"Run {run_id}", rounds.round(4).to_dict("records"),
                [{"name": c, "id": c} for c in rounds.columns], text, run_provenance(store, run_id))

    @app.callback(Output("download", "data"), Input("csv-btn", "n_clicks"), Input("md-btn", "n_clicks"),
                  State("compare", "data"), State("compare", "columns"), prevent_initial_call=True)
    def download(csv_clicks, md_clicks, rows, columns):
        import pandas as pd

        table = pd.DataFrame(rows or [], columns=[c["id"] for c in columns or []])
        if ctx.triggered_id == "md-btn":
            return dcc.send_string(to_markdown(table), "comparison.md")
        return dcc.send_string(table.to_csv(index=False), "comparison.csv")

    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Serve the fedtext simulation dashboard on localhost.")
    ap.add_argument("--runs", type=Path, default=Path("runs"), help="folder of run records, any depth (default runs/)")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    ap.add_argument("--refresh", type=float, default=2.0, help="seconds between checks of the records")
    args = ap.parse_args(argv)
    if not args.runs.is_dir():
        print(f"fedtext-dashboard: no such folder {args.runs.resolve()}", file=sys.stderr)
        return 2
    print(f"fedtext dashboard: http://{args.host}:{args.port} (records: {args.runs.resolve()})", flush=True)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per refresh request
    make_app(args.runs.resolve(), args.refresh).run(host=args.host, port=args.port, debug=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
