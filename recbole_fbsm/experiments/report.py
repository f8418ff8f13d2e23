"""The tables of run records, one builder for a comparison's table.md and the docs' results tables (``doc_tables``):
mean ± std over the splits, per-split ratios to a baseline; and a comparison's chart."""

import statistics
from functools import partial
from pathlib import Path

from recbole_fbsm.storage.run_records import (
    GROUPS,
    USER_GROUPS,
    group_result,
    load_records,
    recorded_with,
    result_groups,
)
from recbole_fbsm.storage.safe_files import write_atomic

# table.md shows each model's ratio to these when they are in it (the hybrid scenario: ItemKNNCBF on cold items too)
RATIO_BASELINES = ("ItemKNNCBF", "CoSim")
CHART_METRICS = ("recall@10", "ndcg@10")
METRIC_NAMES = dict(recall="Recall", ndcg="NDCG", precision="Precision", hit="Hit", mrr="MRR", rec="Rec", dcg="DCG") | {
    "heavy_factor": "heaviest 1% x"
}
GROUP_LABELS = {"users": "(users, calibrated)", "users-raw": "(users, raw sum)"}


class TableError(ValueError):
    """A table that cannot be rendered: a bad spec, a missing folder, a model or metric without records."""


def mean_std(values):
    """Mean and sample standard deviation (n - 1); the deviation of a single value is 0."""
    values = [float(v) for v in values]
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def metric_label(metric):
    """RecBole's metric key as a reader writes it: ``recall@10`` -> ``Recall@10``."""
    name, at, k = metric.partition("@")
    return METRIC_NAMES.get(name, name) + at + k


def summarise(records, models_first=()):
    """Group the records by model: rows in the order of ``models_first``, then the others by name."""
    by_model = {}
    for record in sorted(records, key=lambda r: r["seed"]):
        by_model.setdefault(record["model"], []).append(record)
    order = [m for m in models_first if m in by_model] + sorted(m for m in by_model if m not in models_first)
    return [
        {"model": m, "records": by_model[m], "ok": [r for r in by_model[m] if r["status"] == "ok"]}
        | {"failed": [r for r in by_model[m] if r["status"] != "ok"]}
        for m in order
    ]


def split_group(column):
    """(group or None, rest) of a column: ``cold:recall@20`` -> ("cold", "recall@20")."""
    group, colon, rest = column.partition(":")
    if colon and group not in (*GROUPS, *USER_GROUPS):
        raise TableError(
            f"results-table column '{column}': expected GROUP:COLUMN with GROUP one of "
            f"{', '.join((*GROUPS, *USER_GROUPS))}"
        )
    return (group, rest) if colon else (None, column)


def _group_result(record, group):
    """``group_result``, where a missing group is an error rather than no metrics."""
    result = group_result(record, group)
    if not result:
        raise TableError(
            f"results-table: {record['model']} (seed {record['seed']}) has no test_result_{group}: "
            f"a {group} column needs records of the {'item' if group in USER_GROUPS else 'hybrid'} scenario"
        )
    return result


class Table:
    """The cells of some models' records (``summarise``'s rows, by row token), one column kind at a time: ``valid``,
    a test metric, ``GROUP:`` one, ``/MODEL`` or ``/max(A B)`` (the mean per-split ratio of the validation metric's
    test value), ``s/run``, ``splits``, ``alpha`` (the users direction's), ``status``."""

    def __init__(self, rows, where, strict=True):
        """``strict``: a metric missing from a run is an error (the docs), else left out (table.md)."""
        self.rows, self.where, self.strict = {row["model"]: row for row in rows}, where, strict
        self.valid_metric = str(next((r["valid_metric"] for row in rows for r in row["ok"]), "score")).lower()

    def runs(self, token):
        if token not in self.rows:
            raise TableError(f"{self.where}: no records of model {token}")
        return {r["seed"]: r for r in self.rows[token]["ok"]}

    def header(self, column):
        group, column = split_group(column)
        suffix = f" {GROUP_LABELS.get(group, group)}" if group else ""
        if column == "valid":
            return f"valid {metric_label(self.valid_metric)}"
        if column.startswith("/"):
            return f"/ {column[1:]}{suffix} (per split)"
        if column in ("s/run", "splits", "alpha", "status"):
            return column
        return ("test " if column == self.valid_metric else "") + metric_label(column) + suffix

    def base_value(self, baseline, seed, group):
        """The baseline's (``max(A B)``: the better one's) test value on one split; None when one lacks the split."""
        names = baseline[4:-1].split() if baseline.startswith("max(") else [baseline]
        values = [_group_result(r[seed], group)[self.valid_metric] for r in map(self.runs, names) if seed in r]
        return max(values) if len(values) == len(names) else None

    def cell(self, token, column):
        group, column = split_group(column)
        runs, row = self.runs(token), self.rows[token]
        seeds = sorted(runs)
        if column == "splits":
            return f"{len(seeds)}/{len(row['records'])}" if row["failed"] else str(len(seeds))
        if column == "status" and row["failed"]:  # the first error on one line, cut at 160 characters
            failed = row["failed"]
            text = " ".join(f"failed (seed {', '.join(str(r['seed']) for r in failed)}): {failed[0]['error']}".split())
            return (text[:159] + "…" if len(text) > 160 else text).replace("|", "\\|")
        if column == "status":
            return "ok"
        if not seeds:
            return "–"
        if column == "s/run":
            return f"{sum(runs[s]['wall_seconds'] for s in seeds) / len(seeds):.0f}"
        if column == "alpha":
            return ", ".join(f"{runs[s]['audience']['alpha']:g}" for s in seeds)
        if column.startswith("/"):
            bases = {s: self.base_value(column[1:], s, group) for s in seeds}
            ratios = [_group_result(runs[s], group)[self.valid_metric] / bases[s] for s in seeds if bases[s]]
            each = f" ({', '.join(f'{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
            return f"{sum(ratios) / len(ratios):.3f}{each}" if ratios else "–"
        if column == "valid":
            values = [runs[s]["best_valid_score"] for s in seeds]
        else:
            missing = [s for s in seeds if column not in _group_result(runs[s], group)]
            if missing and self.strict:
                raise TableError(f"{self.where}: {token} has no test {column} (seeds {missing})")
            values = [_group_result(runs[s], group)[column] for s in seeds if s not in missing]
        if not values:  # table.md: a metric only other models' runs return
            return "–"
        # one split: its value alone (a std of one value would read as no spread)
        return f"{float(values[0]):.4f}" if len(values) == 1 else "{:.4f} ± {:.4f}".format(*mean_std(values))

    def markdown(self, tokens, columns, labels=None, text_columns=(0,)):
        """A markdown table's lines: a row per token, ``columns`` as (column, bold)."""

        header = ["model", *(f"**{self.header(c)}**" if b else self.header(c) for c, b in columns)]
        rows = [
            [(labels or {}).get(t, t), *(f"**{self.cell(t, c)}**" if b else self.cell(t, c) for c, b in columns)]
            for t in tokens
        ]
        left = {i % len(header) for i in text_columns}
        rule = "|" + "|".join("---" if i in left else "---:" for i in range(len(header))) + "|"
        lines = ["| " + " | ".join(cells) + " |" for cells in (header, *rows)]
        return [lines[0], rule, *lines[1:]]


def build_table(rows, settings, command=None, resume=None):
    """table.md: the command, the settings, the comparison's table, the users direction's."""
    ok = [r for row in rows for r in row["ok"]]
    groups = result_groups(ok)
    metrics = dict.fromkeys(k for record in ok for k in record.get("test_result", {}))
    table = Table(rows, "table.md", strict=False)
    baselines = [b for b in RATIO_BASELINES if b in table.rows and table.runs(b)]
    ratios = [(groups[0], b) for b in baselines]
    if len(groups) > 1 and "ItemKNNCBF" in baselines:
        ratios.append(("cold", "ItemKNNCBF"))
    columns = ["splits", *(["valid"] if ok else []), *(m if g is None else f"{g}:{m}" for m in metrics for g in groups)]
    columns += [f"/{b}" if g is None else f"{g}:/{b}" for g, b in ratios] + ["s/run", "status"]
    seeds = sorted({r["seed"] for row in rows for r in row["records"]})
    files = ", ".join(f"`{f['path']}`" for f in settings["config_files"]) or "none"
    overrides = " ".join(f"`--{k}={v}`" for k, v in settings["overrides"].items()) or "none"
    lines = [f"# Model comparison on {settings['dataset']}", ""]
    if command:
        lines += [f"Command: `{command}`" + (f" (to resume or add runs: {resume})" if resume else ""), ""]
    lines += [
        f"Item splits (seed = split_seed): {', '.join(map(str, seeds))}. Your config files: {files}. "
        f"Overrides: {overrides}.",
        "",
        "Cells: mean ± standard deviation over the splits (sample std, n − 1; a single split's value alone); metrics "
        "on the test items; `valid`: the validation score of the epoch kept (best on validation); `/ MODEL`: the mean "
        "over the splits of the per-split ratio of the validation metric's test value to that model's (each split's "
        "in brackets); `s/run`: wall seconds of one run (load, split, train, evaluate).",
        "",
    ]
    lines += table.markdown([row["model"] for row in rows], [(c, False) for c in columns], text_columns=(0, -1))
    return "\n".join(lines + users_direction_lines(rows)) + "\n"


def users_direction_lines(rows):
    """Who should see a new item: each model's users direction (the records' ``audience``), raw and calibrated."""
    audience = [row for row in rows if any(r.get("audience") for r in row["ok"])]
    if not audience:
        return []
    first = next(r["audience"] for r in audience[0]["ok"] if r.get("audience"))
    key = first["chosen_on"].split()[-1]
    heavy = next(k for k in first["test_raw"] if k.startswith("heavy_factor@"))
    lines = [
        "",
        "Who should see a new item (the users direction): for each cold test item, the training users ranked by "
        "the model's score, divided by |I_u|^alpha (alpha chosen on validation; 0: the raw sum); "
        f"{key} over the users who liked it, and how many times its share of users the heaviest 1% hold in the "
        "top slots.",
        "",
    ]
    columns = ["alpha"] + [f"{part}:{k}" for k in (key, heavy) for part in ("users-raw", "users")]
    lines += Table(audience, "table.md").markdown([r["model"] for r in audience], [(c, False) for c in columns])
    return lines


def shown_metrics(metrics):
    """The metrics a chart or a console line shows: Recall@10 and NDCG@10 when there, else the first two."""
    return [m for m in CHART_METRICS if m in metrics] or list(metrics)[:2]


def chart_figure(rows, dataset):
    """Grouped bars of each model's mean test Recall@10 and NDCG@10 (the hybrid scenario: the first metric's groups)
    with std error bars, the legend beside the axes; None when there is nothing to draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # a bare Figure renders with Agg; pyplot's backend is left alone

    rows = [row for row in rows if row["ok"]]
    ok = [r for row in rows for r in row["ok"]]
    metrics, groups = shown_metrics(dict.fromkeys(k for r in ok for k in r["test_result"])), result_groups(ok)
    if not metrics:
        return None
    bars = [(metric, None) for metric in metrics] if groups == (None,) else [(metrics[0], g) for g in groups]
    figure = Figure(figsize=(0.9 * len(rows) + 5, 4.5), dpi=150, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for k, (metric, group) in enumerate(bars):
        results = [[group_result(r, group) for r in row["ok"]] for row in rows]
        values = [[result[metric] for result in row if metric in result] for row in results]
        means, stds = zip(*(mean_std(v) if v else (0.0, 0.0) for v in values))
        positions = [i + (k - (len(bars) - 1) / 2) * 0.8 / len(bars) for i in range(len(rows))]
        label = metric_label(metric) + ("" if group is None else f" {group}")
        axes.bar(positions, means, 0.8 / len(bars), yerr=stds, capsize=3, label=label)
    axes.set_xticks(range(len(rows)), [row["model"] for row in rows], rotation=30, ha="right")
    axes.set(ylabel="test score (mean over splits)", title=f"{dataset}: error bars: std over the splits")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: it hides no bar
    return figure


def write_report(results_dir, settings, models_first=(), command=None, log=print, resume=None):
    """Rebuild table.md and chart.png from the folder's JSON files recorded with ``settings``."""
    results_dir = Path(results_dir)
    records = load_records(results_dir)
    kept = [r for r in records if recorded_with(r, settings)]
    if len(kept) < len(records):
        names = ", ".join(f"{r['model']}-{r['seed']}" for r in records if r not in kept)
        log(f"left out of the table: {len(records) - len(kept)} result(s) recorded with other settings ({names})")
    rows = summarise(kept, models_first)
    table = build_table(rows, settings, command=command, resume=resume)
    write_atomic(results_dir / "table.md", table.encode("utf-8"))
    figure = chart_figure(rows, settings["dataset"])
    if figure is not None:
        write_atomic(results_dir / "chart.png", partial(figure.savefig, format="png"))
    chart = results_dir / "chart.png" if figure is not None else None
    return {"table": results_dir / "table.md", "chart": chart, "records": kept, "markdown": table}
