"""The report of a comparison: the markdown table (mean ± std over splits, ratios to the strongest simple
baseline and to CoSim) and the chart, rebuilt from a results folder's JSON records."""

import statistics
from functools import partial
from pathlib import Path

from recbole_fbsm.storage.run_records import group_result, load_records, recorded_with, result_groups
from recbole_fbsm.storage.safe_files import write_atomic

# every table shows each model's ratio to these, when they are in it: the strongest simple content baseline
# (ItemKNNCBF, tuned or not) and the paper's cosine
RATIO_BASELINES = ("ItemKNNCBF", "CoSim")
# the hybrid scenario adds the cold items' ratio to the strongest baseline that ranks cold items at all
COLD_RATIO_BASELINE = "ItemKNNCBF"
CHART_METRICS = ("recall@10", "ndcg@10")
METRIC_NAMES = dict(
    recall="Recall",
    ndcg="NDCG",
    precision="Precision",
    hit="Hit",
    mrr="MRR",
    rec="Rec",
    dcg="DCG",
    heavy_factor="heaviest 1% x",
)


def mean_std(values):
    """Mean and sample standard deviation (n - 1); the deviation of a single value is 0."""
    values = [float(v) for v in values]
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def mean_std_cell(values, digits=4):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    mean, std = mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _escape(text, limit=160):
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def _column_label(metric, group):
    return metric if group is None else f"{metric} {group}"


def summarise(records, models_first=()):
    """Group the records by model: rows in the order of ``models_first``, then the others by name."""
    by_model = {}
    for record in records:
        by_model.setdefault(record["model"], []).append(record)
    order = [m for m in models_first if m in by_model] + sorted(m for m in by_model if m not in models_first)
    rows = []
    for model in order:
        group = sorted(by_model[model], key=lambda r: r["seed"])
        ok = [r for r in group if r["status"] == "ok"]
        rows.append({"model": model, "records": group, "ok": ok, "failed": [r for r in group if r["status"] != "ok"]})
    return rows


# longer than 60 lines: table.md top to bottom (title, command, settings, the hybrid note, header, rows, ratios,
# failures), each part a few lines that read in the order the file shows them
def build_table(rows, settings, command=None, resume=None):
    ok_records = [r for row in rows for r in row["ok"]]
    metrics = list(dict.fromkeys(k for record in ok_records for k in record.get("test_result", {})))
    valid_metrics = {r.get("valid_metric") for r in ok_records}
    same_valid = len(valid_metrics) == 1 and None not in valid_metrics
    valid_header = f"valid {valid_metrics.copy().pop()}" if same_valid else "valid score"
    seeds = sorted({r["seed"] for row in rows for r in row["records"]})

    lines = [f"# Model comparison on {settings['dataset']}", ""]
    if command:
        lines += [f"Command: `{command}`" + (f" (to resume or add runs: {resume})" if resume else ""), ""]
    files = ", ".join(f"`{f['path']}`" for f in settings["config_files"]) or "none"
    overrides = " ".join(f"`--{k}={v}`" for k, v in settings["overrides"].items()) or "none"
    lines += [
        f"Item splits (seed = split_seed): {', '.join(map(str, seeds))}. Your config files: {files}. "
        f"Overrides: {overrides}.",
        "",
        *property_file_lines(rows),
        "Cells: mean ± standard deviation over the splits (sample std, n − 1; 0 for a single split). "
        f"Metrics on the test items; `{valid_header}`: the validation score of the epoch kept "
        "(best on validation); `time (s)`: wall seconds of one run (load, split, train, evaluate).",
        "",
    ]
    groups = result_groups(ok_records)
    if groups != (None,):
        lines += [
            "Hybrid scenario: every metric for **all** items (warm and cold candidates ranked together), "
            "the **cold** items alone and the **warm** items alone (`test_result`, `test_result_cold`, "
            "`test_result_warm` of the records); the ratios are on all items, and on the cold items to "
            f"{COLD_RATIO_BASELINE} (the warm-only models rank cold items at random).",
            "",
        ]
    columns = [(metric, group) for metric in metrics for group in groups]
    # the ratio columns compare the validation metric's test value, else the first metric's
    valid_names = {str(v).lower() for v in valid_metrics}
    ratio_metric = next((m for m in metrics if m.lower() in valid_names), metrics[0] if metrics else None)
    baselines = (
        [b for b in RATIO_BASELINES if any(row["model"] == b and row["ok"] for row in rows)] if ratio_metric else []
    )
    ratios = [(groups[0], b) for b in baselines]  # (group, baseline) of each ratio column
    if groups != (None,) and COLD_RATIO_BASELINE in baselines:
        ratios.append(("cold", COLD_RATIO_BASELINE))
    ratio_headers = [f"{_column_label(ratio_metric, g)} / {b}" for g, b in ratios]
    metric_headers = [_column_label(m, g) for m, g in columns]
    header = ["model", "splits", valid_header, *metric_headers, *ratio_headers, "time (s)", "status"]
    ratio_rows = [(g, next(r for r in rows if r["model"] == b)) for g, b in ratios]
    cells = [_table_row(row, columns, same_valid, ratio_rows, ratio_metric) for row in rows]
    lines += markdown_table(header, cells, text_columns=(0, -1))
    lines += users_direction_lines(rows)
    failures = [r for row in rows for r in row["failed"]]
    if baselines:
        lines += [
            "",
            f"`{ratio_headers[0].rsplit(' / ', 1)[0]} / MODEL`: the mean over the splits of the per-split ratio of the "
            f"test {ratio_metric} to that model's on the same split (each split's ratio in brackets).",
        ]
    if failures:
        lines += ["", "Failed runs (full messages and tracebacks in the JSON files):", ""]
        for r in failures:
            lines.append(f"- {r['model']}, seed {r['seed']}: {_escape(r.get('error', ''), limit=1000)}")
    return "\n".join(lines) + "\n"


def users_direction_lines(rows):
    """Who should see a new item: each model's users direction (the records' ``audience``), raw and calibrated."""
    with_audience = [(row["model"], [r["audience"] for r in row["ok"] if r.get("audience")]) for row in rows]
    with_audience = [(model, runs) for model, runs in with_audience if runs]
    if not with_audience:
        return []
    key = with_audience[0][1][0]["chosen_on"].split()[-1]
    heavy = next(k for k in with_audience[0][1][0]["test_raw"] if k.startswith("heavy_factor@"))
    header = ["model", "alpha (per split)", f"{key} raw", f"{key} calibrated", f"{heavy} raw", f"{heavy} calibrated"]
    cells = [
        [model, ", ".join(f"{a['alpha']:g}" for a in runs)]
        + [
            mean_std_cell([a[part].get(k) for a in runs])
            for k in (key, heavy)
            for part in ("test_raw", "test_calibrated")
        ]
        for model, runs in with_audience
    ]
    intro = (
        "Who should see a new item (the users direction): for each cold test item, the training users ranked by "
        "the model's score, divided by |I_u|^alpha (alpha chosen on validation; 0: the raw sum); "
        f"{key} over the users who liked it, and how many times its share of users the heaviest 1% hold in the "
        "top slots."
    )
    return ["", intro, "", *markdown_table(header, cells)]


def _table_row(row, columns, same_valid, ratio_rows, ratio_metric):
    """One model's cells: splits, validation score, test metrics ((metric, group) columns), ratios, time, status."""
    ok, failed = row["ok"], row["failed"]
    splits = f"{len(ok)}" if not failed else f"{len(ok)}/{len(row['records'])}"
    if ok:
        valid = mean_std_cell([r.get("best_valid_score") for r in ok])
        if not same_valid:
            valid += f" ({', '.join(sorted({str(r.get('valid_metric')) for r in ok}))})"
        cells = [mean_std_cell([group_result(r, g).get(m) for r in ok]) for m, g in columns]
        time_cell = mean_std_cell([r.get("wall_seconds") for r in ok], digits=1)
    else:
        valid, cells, time_cell = "–", ["–"] * len(columns), "–"
    samples = sorted({int(r["eval_user_sample"]) for r in ok if r.get("eval_user_sample")})
    if not failed:
        status = "ok" + (f"; evaluated on {', '.join(map(str, samples))} random users per split" if samples else "")
    else:
        which = ", ".join(str(r["seed"]) for r in failed)
        status = _escape(f"failed (seed {which}): {failed[0].get('error', 'unknown error')}")
    ratios = [ratio_cell(row, baseline_row, ratio_metric, group) for group, baseline_row in ratio_rows]
    return [row["model"], splits, valid, *cells, *ratios, time_cell, status]


def markdown_table(header, rows, text_columns=(0,)):
    """A markdown table's lines (compare's and the docs'): numbers right-aligned, ``text_columns`` left-aligned."""
    left = {i % len(header) for i in text_columns}
    rule = "|" + "|".join("---" if i in left else "---:" for i in range(len(header))) + "|"
    lines = ["| " + " | ".join(cells) + " |" for cells in (header, *rows)]
    return [lines[0], rule, *lines[1:]]


def ratio_cell(row, baseline_row, metric, group=None):
    """Mean of the per-split ratios row / baseline of ``metric`` on the splits both have, and each ratio."""
    base = {r["seed"]: group_result(r, group).get(metric) for r in baseline_row["ok"]}
    ratios = [
        group_result(r, group)[metric] / base[r["seed"]]
        for r in row["ok"]
        if metric in group_result(r, group) and base.get(r["seed"])
    ]
    if not ratios:
        return "–"
    mean = sum(ratios) / len(ratios)
    return f"{mean:.3f} ({', '.join(f'{v:.3f}' for v in ratios)})"


def chart_figure(rows, dataset):
    """Grouped bars of each model's mean test Recall@10 and NDCG@10 with std error bars (a matplotlib Figure on an
    Agg canvas), or None when there is nothing to draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # a bare Figure renders with Agg; pyplot's backend is left alone

    rows = [row for row in rows if row["ok"]]
    if not rows:
        return None
    metrics = shown_metrics(dict.fromkeys(k for row in rows for record in row["ok"] for k in record["test_result"]))
    if not metrics:
        return None
    groups = result_groups([r for row in rows for r in row["ok"]])
    # the hybrid scenario: the first metric for all, cold and warm items (the table has the rest)
    bars = [(metric, None) for metric in metrics] if groups == (None,) else [(metrics[0], g) for g in groups]
    figure = Figure(figsize=(max(6.0, 0.9 * len(rows) + 2.5) + 1.5, 4.5), dpi=150)  # + 1.5: the legend
    figure.set_canvas(FigureCanvasAgg(figure))
    axes = figure.add_subplot(1, 1, 1)
    width = 0.8 / len(bars)
    n_splits = set()
    for k, (metric, group) in enumerate(bars):
        results = [[group_result(r, group) for r in row["ok"]] for row in rows]
        values = [[result[metric] for result in row if metric in result] for row in results]
        n_splits.update(map(len, values))
        means, stds = zip(*(mean_std(v) if v else (0.0, 0.0) for v in values))
        positions = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(rows))]
        label = metric_label(metric) + ("" if group is None else f" {group}")
        axes.bar(positions, means, width, yerr=stds, capsize=3, label=label)
    axes.set_xticks(range(len(rows)))
    axes.set_xticklabels([row["model"] for row in rows], rotation=30, ha="right")
    axes.set_ylabel("test score (mean over splits)")
    splits = "/".join(str(n) for n in sorted(n_splits))
    scenario = "item cold start" if groups == (None,) else "hybrid scenario (all, cold, warm items)"
    axes.set_title(f"{dataset}: {scenario}, {splits} split(s), error bars: std")
    # the legend beside the axes, never over a bar or its error bar (inside, "best" can only pick the least bad place)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    figure.tight_layout()
    return figure


def shown_metrics(metrics):
    """The metrics a chart or a console line shows: Recall@10 and NDCG@10 when there, else the first two."""
    return [m for m in CHART_METRICS if m in metrics] or list(metrics)[:2]


def metric_label(metric):
    """RecBole's metric key as a reader writes it: ``recall@10`` -> ``Recall@10``."""
    name, _, k = metric.partition("@")
    return f"{METRIC_NAMES.get(name, name)}@{k}" if k else METRIC_NAMES.get(name, name)


def property_file_lines(rows):
    """Per model, the plugin's property files its runs loaded (before your config files and overrides)."""
    lines = []
    for row in rows:
        loaded = dict.fromkeys(p for record in row["ok"] for p in record.get("property_files") or [])
        if loaded:
            lines.append(f"- {row['model']}: " + ", ".join(f"`{p}`" for p in loaded))
    if not lines:
        return []
    return [
        "Property files loaded (lowest priority first; your config files and overrides come after):",
        "",
        *lines,
        "",
    ]


def write_report(results_dir, settings, models_first=(), command=None, log=print, resume=None):
    """Rebuild table.md and chart.png from the folder's JSON files recorded with ``settings``."""
    results_dir = Path(results_dir)
    records = load_records(results_dir)
    kept = [r for r in records if recorded_with(r, settings)]
    other = [r for r in records if not recorded_with(r, settings)]
    if other:
        names = ", ".join(f"{r['model']}-{r['seed']}" for r in other)
        log(f"left out of the table: {len(other)} result(s) recorded with other settings ({names})")
    rows = summarise(kept, models_first)
    table_path, chart_path = results_dir / "table.md", results_dir / "chart.png"
    table = build_table(rows, settings, command=command, resume=resume)
    write_atomic(table_path, table.encode("utf-8"))
    figure = chart_figure(rows, settings["dataset"])
    if figure is not None:
        write_atomic(chart_path, partial(figure.savefig, format="png"))
    chart = chart_path if figure is not None else None
    return {"table": table_path, "chart": chart, "records": kept, "markdown": table}
