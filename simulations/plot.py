"""The dashboard's charts as PNG and SVG files, headless, from run records only.

    python -m simulations.plot simulations/results/fedbpt_sst2
    python -m simulations.plot simulations/results --x round bytes wall --charts accuracy client-accuracy

For every chart (``--charts``, default ``accuracy``) and x-axis (``--x``, default ``round``
and ``bytes``) it writes ``<out>/<chart>-vs-<x>.png`` and ``.svg`` (``--out``, default
``<dir>/figures``): per method or variant the mean over seeds with a ± std band, an error
bar where the band has one point (``--mode runs``: one line per run), memory, queries and
wall time from 0 (:class:`~simulations.dashboard_data.Chart`'s ``from_zero``), one subplot
per experiment found under the folder
(small multiples), the same lines and colours as the dashboard
(:func:`simulations.dashboard_data.chart_lines`). A figure is ``--size W H`` inches at
``--dpi`` (PNG pixels = W·dpi × H·dpi).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulations.dashboard_data import CHARTS, X_AXES, RunStore, chart_lines, round_series, runs_table


def plot(results: str | Path, out: str | Path | None = None, x_axes: list[str] | None = None,
         charts: list[str] | None = None, mode: str = "mean", size: tuple[float, float] = (7.0, 4.0),
         dpi: int = 120, formats: tuple[str, ...] = ("png", "svg"), log_x: bool | None = None,
         experiment: str | None = None) -> list[Path]:
    """Write the figures; returns their paths. ``log_x=None`` takes each axis's default
    (log for bytes and queries); ``experiment``: the one every run belongs to
    (:class:`~simulations.dashboard_data.RunStore`)."""
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    results = Path(results)
    store = RunStore(results, experiment)
    table = runs_table(store)
    table = table[table["status"] != "malformed"]
    if table.empty:
        raise ValueError(f"no readable run records under {results}")
    experiments = sorted(table["experiment"].unique())
    series = round_series(store)  # malformed runs are left out there too
    labels = table["label"].unique().tolist()
    out = Path(out) if out is not None else results / "figures"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for chart_key in charts or ["accuracy"]:
        chart = CHARTS[chart_key]
        for x_axis in x_axes or ["round", "bytes"]:
            log = X_AXES[x_axis].log if log_x is None else log_x
            lines = chart_lines(series, chart, x_axis, mode, log, labels)
            fig, axes = plt.subplots(1, len(experiments), figsize=size, dpi=dpi, squeeze=False,
                                     layout="constrained", sharey=False)
            for ax, exp in zip(axes[0], experiments):
                for line in (ln for ln in lines if ln.experiment == exp):
                    if line.lo is not None and len(line.x) == 1:  # a band of one point: an error bar
                        ax.errorbar(line.x, line.y, yerr=[[line.y[0] - line.lo[0]], [line.hi[0] - line.y[0]]],
                                    color=line.color, capsize=3, linewidth=1.2)
                    elif line.lo is not None:
                        ax.fill_between(line.x, line.lo, line.hi, color=line.color, alpha=0.18, linewidth=0)
                    ax.plot(line.x, line.y, marker="o", markersize=3, linewidth=1.6, color=line.color,
                            label=line.name)
                if chart.from_zero:  # memory, queries, wall time: a ratio reads true only from 0
                    ax.set_ylim(bottom=0)
                if log:
                    ax.set_xscale("log")
                elif x_axis == "round":  # rounds are whole numbers: no tick between two
                    ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
                ax.set_xlabel(X_AXES[x_axis].title, fontsize=8)
                ax.set_title(exp, fontsize=9)
                ax.tick_params(labelsize=7)
                ax.grid(alpha=0.3)
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=7)
            axes[0][0].set_ylabel(chart.title, fontsize=8)
            for fmt in formats:
                path = out / f"{chart_key}-vs-{x_axis}.{fmt}"
                # no timestamps and fixed SVG element ids: the same records give the same bytes
                meta = {"Date": None} if fmt == "svg" else {"Software": None}
                with plt.rc_context({"svg.hashsalt": "fedtext"}):
                    fig.savefig(path, dpi=dpi, format=fmt, metadata=meta)
                written.append(path)
            plt.close(fig)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the dashboard's charts as PNG/SVG from run records.")
    ap.add_argument("results", type=Path, help="folder of run records, any depth (e.g. simulations/results/<exp>)")
    ap.add_argument("--out", type=Path, help="output folder (default <results>/figures)")
    ap.add_argument("--x", nargs="+", default=["round", "bytes"], choices=list(X_AXES), help="x-axes")
    ap.add_argument("--charts", nargs="+", default=["accuracy"], choices=list(CHARTS), help="metrics")
    ap.add_argument("--mode", choices=["mean", "runs"], default="mean",
                    help="mean ± std over seeds per method (default) or one line per run")
    ap.add_argument("--size", type=float, nargs=2, default=(7.0, 4.0), metavar=("W", "H"), help="inches")
    ap.add_argument("--dpi", type=int, default=120)
    ap.add_argument("--formats", nargs="+", default=["png", "svg"], choices=["png", "svg", "pdf"])
    ap.add_argument("--log-x", choices=["auto", "on", "off"], default="auto",
                    help="log x-axis: auto = log for bytes and queries")
    ap.add_argument("--experiment", help="the experiment every run under the folder belongs to, e.g. for "
                    "simulations/results/<exp>/runs (nothing above the folder is read)")
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        print(f"fedtext plot: no such folder {args.results.resolve()}", file=sys.stderr)
        return 2
    try:
        paths = plot(args.results, args.out, args.x, args.charts, args.mode, tuple(args.size), args.dpi,
                     tuple(args.formats), {"auto": None, "on": True, "off": False}[args.log_x], args.experiment)
    except ValueError as exc:
        print(f"fedtext plot: {exc}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
