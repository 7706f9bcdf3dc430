"""Simulation dashboard: compare runs side by side, live, in a browser (Plotly Dash).

    python -m simulations.dashboard --runs runs/            # or: fedtext-dashboard --runs runs/
    python -m simulations.dashboard --runs simulations/results/feddls_amazon/runs --port 8050

Serves http://127.0.0.1:8050 with the run list (select runs to compare; none selected =
all), overlaid charts of the selected runs (global accuracy vs round; accuracy vs
cumulative bytes uploaded and downloaded on log axes; per-client accuracy spread; model
queries; client peak memory; wall time) and the mean ± std comparison table, which
downloads as CSV or markdown. The page re-reads the records every ``--refresh`` seconds,
so a running simulation updates live. It reads nothing but the run records
(:mod:`simulations.dashboard_data`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import plotly.colors
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, ctx, dash_table, dcc, html

from simulations.dashboard_data import comparison, round_series, runs_table
from simulations.tables import to_markdown

CHARTS = [  # (id, title, x, y, log x)
    ("acc-round", "Global accuracy vs round", "round", "global_accuracy", False),
    ("acc-up", "Accuracy vs cumulative bytes uploaded", "cum_bytes_up", "global_accuracy", True),
    ("acc-down", "Accuracy vs cumulative bytes downloaded", "cum_bytes_down", "global_accuracy", True),
    ("spread", "Per-client accuracy (mean, min-max band) vs round", "round", "client_acc_mean", False),
    ("queries", "Cumulative model queries vs round", "round", "cum_model_queries", False),
    ("memory", "Client peak memory (MB) vs round", "round", "client_peak_rss_mb", False),
    ("wall", "Wall time (s) vs round", "round", "wall_time_s", False),
]


def figure(series, chart: tuple[str, str, str, str, bool]) -> go.Figure:
    """One overlaid chart: a line per selected run."""
    _, title, x, y, log_x = chart
    fig = go.Figure()
    palette = plotly.colors.qualitative.Plotly
    if not series.empty:
        for i, (label, g) in enumerate(series.groupby("label", sort=False)):
            color = palette[i % len(palette)]  # the same colour for a run in every chart
            g = g.dropna(subset=[y])
            if x.startswith("cum_bytes"):
                g = g[g[x] > 0]  # a log axis has no 0
            if y == "client_acc_mean" and not g.empty:
                band_x = list(g[x]) + list(g[x])[::-1]
                band_y = list(g["client_acc_max"]) + list(g["client_acc_min"])[::-1]
                fig.add_trace(go.Scatter(x=band_x, y=band_y, fill="toself", opacity=0.2, line={"width": 0},
                                         fillcolor=color, showlegend=False, hoverinfo="skip", name=f"{label} range"))
            fig.add_trace(go.Scatter(x=g[x], y=g[y], mode="lines+markers", name=label, line={"color": color}))
    fig.update_layout(title=title, height=320, margin={"l": 40, "r": 10, "t": 40, "b": 30},
                      xaxis={"type": "log" if log_x else "linear", "title": x}, legend={"font": {"size": 10}})
    return fig


def make_app(runs_dir: Path, refresh_s: float = 2.0) -> Dash:
    """The Dash app over ``runs_dir`` (re-read every ``refresh_s`` seconds)."""
    app = Dash(__name__, title="fedtext dashboard")
    app.layout = html.Div([
        html.H2("fedtext: compare strategies"),
        html.Div(f"records: {runs_dir}", id="root"),
        dcc.Interval(id="tick", interval=int(refresh_s * 1000)),
        html.H3("Runs"),
        dash_table.DataTable(
            id="runs", row_selectable="multi", selected_row_ids=[], sort_action="native",
            style_cell={"fontSize": 12, "padding": "2px 6px"},
            style_data_conditional=[
                {"if": {"filter_query": '{status} = "malformed"'}, "backgroundColor": "#fde2e2"},
                {"if": {"filter_query": '{status} = "failed"'}, "backgroundColor": "#fff1d6"},
                {"if": {"filter_query": '{status} = "running"'}, "backgroundColor": "#e3f1ff"},
            ],
        ),
        html.H3("Charts (selected runs; none selected = all)"),
        html.Div([dcc.Graph(id=c[0], style={"width": "49%", "display": "inline-block"}) for c in CHARTS]),
        html.H3("Comparison (mean ± std over runs of a method)"),
        html.Button("CSV", id="csv-btn"), html.Button("Markdown", id="md-btn"),
        dcc.Download(id="download"),
        dash_table.DataTable(id="compare", style_cell={"fontSize": 12, "padding": "2px 6px"}),
    ], style={"fontFamily": "sans-serif", "margin": "12px"})

    @app.callback(Output("runs", "data"), Output("runs", "columns"), Input("tick", "n_intervals"))
    def refresh_runs(_):
        df = runs_table(runs_dir).round(4)
        df["id"] = df["run_id"]
        columns = [{"name": c, "id": c} for c in df.columns if c != "id"]
        return df.to_dict("records"), columns

    @app.callback(
        [Output(c[0], "figure") for c in CHARTS] + [Output("compare", "data"), Output("compare", "columns")],
        Input("tick", "n_intervals"), Input("runs", "selected_row_ids"),
    )
    def refresh_charts(_, selected):
        ids = list(selected) if selected else None
        series = round_series(runs_dir, ids)
        table = comparison(runs_dir, ids)
        return [figure(series, c) for c in CHARTS] + [
            table.to_dict("records"), [{"name": c, "id": c} for c in table.columns]
        ]

    @app.callback(Output("download", "data"), Input("csv-btn", "n_clicks"), Input("md-btn", "n_clicks"),
                  State("runs", "selected_row_ids"), prevent_initial_call=True)
    def download(csv_clicks, md_clicks, selected):
        table = comparison(runs_dir, list(selected) if selected else None)
        if ctx.triggered_id == "md-btn":
            return dcc.send_string(to_markdown(table), "comparison.md")
        return dcc.send_string(table.to_csv(index=False), "comparison.csv")

    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Serve the fedtext simulation dashboard on localhost.")
    ap.add_argument("--runs", type=Path, default=Path("runs"), help="folder of run records (default runs/)")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    ap.add_argument("--refresh", type=float, default=2.0, help="seconds between re-reads of the records")
    args = ap.parse_args(argv)
    if not args.runs.is_dir():
        print(f"fedtext-dashboard: no such folder {args.runs.resolve()}", file=sys.stderr)
        return 2
    print(f"fedtext dashboard: http://{args.host}:{args.port} (records: {args.runs.resolve()})", flush=True)
    make_app(args.runs.resolve(), args.refresh).run(host=args.host, port=args.port, debug=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
