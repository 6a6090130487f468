# Draws a Strata run report: reads the report document (JSON, made and checked by
# report_document.cpp) named on the command line and writes one self-contained HTML file to
# stdout. Plots are matplotlib's SVG, inline. Every line of a plot is an SVG group whose id is
# plot-<metric>-run<index>, holding one path through every recorded step, so the page can be
# checked against metrics.jsonl.
import html
import io
import json
import math
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(3)  # strata tries the next interpreter, or says what to install

matplotlib.rcParams.update({
    "svg.fonttype": "none",  # text stays text: smaller, selectable
    "path.simplify": False,  # a point per recorded step, never merged away
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 9,
})

MARKERS_UP_TO = 60  # points per line drawn with a marker each; longer lines are plain


def esc(value):
    return html.escape(str(value))


def svg_of(figure, salt):
    # A salt per figure keeps the ids of clip paths and markers unique within the page.
    matplotlib.rcParams["svg.hashsalt"] = salt
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def number(value):
    return math.nan if value is None else value


def plot_svg(plot, runs):
    figure, axes = plt.subplots(figsize=(7.2, 3.0))
    for series in plot["series"]:
        index = series["run"]
        values = [number(v) for v in series["values"]]
        marker = "o" if len(values) <= MARKERS_UP_TO else None
        (line,) = axes.plot(series["steps"], values, marker=marker, markersize=3, linewidth=1.2,
                            color=f"C{index % 10}", label=runs[index]["label"])
        line.set_gid(f"plot-{plot['id']}-run{index}")
        skipped = set(runs[index]["skipped_steps"])
        if plot["id"] == "loss" and skipped:
            at = [(s, v) for s, v in zip(series["steps"], values) if s in skipped]
            (marks,) = axes.plot([s for s, _ in at], [v for _, v in at], "x", color="red", markersize=6,
                                 label=f"{runs[index]['label']}: skipped steps")
            marks.set_gid(f"plot-loss-skipped-run{index}")
    if plot["y_scale"] == "log2":
        axes.set_yscale("log", base=2)
    axes.set_xlabel("step")
    axes.set_ylabel(plot["y_label"])
    if len(runs) > 1 or any(runs[s["run"]]["skipped_steps"] for s in plot["series"]):
        axes.legend(loc="best", fontsize=8)
    return svg_of(figure, plot["id"])


def table(headers, rows, css_class=""):
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def runs_section(runs):
    names = [name for name, _ in runs[0]["summary"]]
    rows = [[esc(name)] + [esc(run["summary"][i][1]) for run in runs] for i, name in enumerate(names)]
    rows.insert(0, ["directory"] + [f"<code>{esc(run['dir'])}</code>" for run in runs])
    return "<h2>Runs</h2>" + table([""] + [run["label"] for run in runs], rows)


def plots_section(document):
    runs = document["runs"]
    parts = ["<h2>Training curves</h2>"]
    for plot in document["plots"]:
        parts.append(f'<figure class="plot" id="figure-{esc(plot["id"])}"><figcaption>{esc(plot["title"])}'
                     "</figcaption>")
        if "note" in plot:
            parts.append(f'<p class="note">{esc(plot["note"])}</p>')
        else:
            parts.append(plot_svg(plot, runs))
            for series in plot["series"]:
                if "thinned_from" in series:
                    parts.append(f'<p class="note">{esc(runs[series["run"]]["label"])}: {series["thinned_from"]} '
                                 f'steps drawn as {len(series["steps"])} points, the lowest and highest value of '
                                 "each equal run of steps</p>")
        parts.append("</figure>")
    return "".join(parts)


def config_section(document):
    runs = document["runs"]
    diff = document["config_diff"]
    heading = "<h2>Configuration</h2>"
    agreeing = f"<p>{diff['agreeing']} keys are the same in every run.</p>"
    if len(runs) == 1:
        return heading + "<p>One run: nothing to compare.</p>"
    if not diff["differing"]:
        return heading + agreeing + "<p>The runs' configs are identical.</p>"
    rows = [[f"<code>{esc(d['key'])}</code>"] +
            [f"<code>{esc(v)}</code>" if v is not None else '<span class="note">not set</span>' for v in d["values"]]
            for d in diff["differing"]]
    return heading + f"<p>{len(diff['differing'])} keys differ:</p>" + table(
        ["key"] + [run["label"] for run in runs], rows) + agreeing


def seconds(value):
    return "—" if value is None else f"{value:.4g} s"


def planner_section(document):
    runs = document["runs"]
    rows, bars = [], []
    for index, entry in enumerate(document["planner"]):
        label = runs[index]["label"]
        if "missing" in entry:
            rows.append([esc(label), f'<span class="note">{esc(entry["missing"])}</span>', "", "", "", "", ""])
            continue
        predicted, measured = entry.get("predicted_s"), entry.get("measured_s")
        ratio = f"{measured / predicted:.2f}" if predicted and measured else "—"
        terms = ", ".join(f"{esc(name)} {value:.3g} s" for name, value in entry.get("terms", []))
        steps = f" (median of {int(entry['measured_steps'])} steps)" if measured is not None else ""
        rows.append([esc(label), esc(entry["plan"]), esc(entry["cluster"]), seconds(predicted),
                     seconds(measured) + esc(steps), ratio, terms])
        if predicted and measured:
            bars.append((label, predicted, measured))
    parts = ["<h2>Planner: predicted and measured step time</h2>",
             table(["run", "layout", "cluster", "predicted", "measured", "measured / predicted",
                    "predicted terms"], rows)]
    if bars:
        figure, axes = plt.subplots(figsize=(7.2, 0.5 + 0.6 * len(bars)))
        positions = range(len(bars))
        axes.barh([p + 0.2 for p in positions], [b[1] for b in bars], height=0.4, label="predicted")
        axes.barh([p - 0.2 for p in positions], [b[2] for b in bars], height=0.4, label="measured")
        axes.set_yticks(list(positions), [b[0] for b in bars])
        axes.set_xlabel("seconds per step")
        axes.legend(loc="best", fontsize=8)
        parts.append(f'<figure class="plot" id="figure-planner">{svg_of(figure, "planner")}</figure>')
    return "".join(parts)


def percent(share):
    return f"{100 * share:.2f}%"


def ops_run(label, entry):
    parts = [f"<h3>{esc(label)}</h3>"]
    if "missing" in entry:
        return "".join(parts) + f'<p class="note">{esc(entry["missing"])}</p>'
    verdict_class = "pass" if entry["quick_switch"] else "fail"
    parts.append(f'<p class="verdict {verdict_class}">backend {esc(entry["backend"])}, {esc(entry["precision"])}: '
                 f"{esc(entry['verdict'])}</p>")
    # The record groups runs by shape too; the summary adds the shapes of one (op, dtype, route) up.
    groups = {}
    for o in entry["ops"]:
        share, count = groups.get((o["op"], o["dtype"], o["route"]), (0.0, 0))
        groups[(o["op"], o["dtype"], o["route"])] = (share + o["share"], count + o["count"])
    ranked = sorted(groups.items(), key=lambda item: -item[1][0])
    op_rows = [[esc(op), esc(dtype), esc(route), percent(share), f"{count:.0f}"]
               for (op, dtype, route), (share, count) in ranked]
    headers = ["op", "dtype", "route", "share of the step's FLOPs", "runs per step"]
    parts.append(table(headers, op_rows[:12]))
    if len(op_rows) > 12:
        parts.append(f"<details><summary>all {len(op_rows)} ops</summary>{table(headers, op_rows)}</details>")
    if entry["ran_not_native"]:
        parts.append("<p>Ran other than natively during the run:</p>" + table(
            ["op", "dtype", "shape", "route", "runs"],
            [[esc(r["op"]), esc(r["dtype"]), esc(r["shape"]), esc(r["route"]), f"{r['count']:.0f}"]
             for r in entry["ran_not_native"]]))
    else:
        parts.append("<p>Every op the run executed ran natively.</p>")
    profile = entry.get("kernel_profile")
    if profile:
        total = sum(row["seconds"] for row in profile["ops"]) or 1.0
        runs = profile["graph_runs"]
        rows = [[esc(row["op"]), f"{1e3 * row['seconds'] / runs:.3f}", percent(row["seconds"] / total),
                 f"{row['flops'] / row['seconds'] / 1e9:.1f}" if row["seconds"] > 0 else "—"]
                for row in profile["ops"][:10]]
        parts.append(f"<p>Kernel time per op type (--profile, {runs:.0f} graph runs):</p>" +
                     table(["op", "ms per graph run", "share of kernel time", "GFLOP/s"], rows))
    return "".join(parts)


def ops_section(document):
    runs = document["runs"]
    return "<h2>Operators</h2>" + "".join(ops_run(runs[i]["label"], entry) for i, entry in enumerate(document["ops"]))


SEVERITIES = (("blocks", "blocks the move", "#b3261e"), ("change", "needs a change", "#d9822b"),
              ("risk", "performance or numerics risk", "#c9b037"), ("info", "information", "#8a8a8a"))


def scan_counts_svg(categories):
    figure, axes = plt.subplots(figsize=(7.2, 0.6 + 0.35 * len(categories)))
    left = [0] * len(categories)
    names = [row["category"] for row in categories]
    for severity, words, color in SEVERITIES:
        values = [row[severity] for row in categories]
        bars = axes.barh(names, values, left=left, color=color, label=words)
        for bar, name in zip(bars, names):
            bar.set_gid(f"scan-{severity}-{name}")
        left = [a + b for a, b in zip(left, values)]
    axes.invert_yaxis()
    axes.set_xlabel("findings")
    axes.legend(loc="best", fontsize=8)
    return svg_of(figure, "scan")


def api_table(title, rows, limit=15):
    if not rows:
        return ""
    body = [[f"{row['count']:.0f}", f"<code>{esc(row['api'])}</code>", esc(row["category"]), esc(row["tip"])]
            for row in rows]
    parts = [f"<p>{esc(title)}:</p>", table(["findings", "API", "category", "tip"], body[:limit])]
    if len(body) > limit:
        parts.append(f"<details><summary>all {len(body)}</summary>{table(['findings', 'API', 'category', 'tip'], body)}"
                     "</details>")
    return "".join(parts)


def scan_section(scan):
    answer = scan["answer"]
    verdict_class = "pass" if answer == "quick switch" else "fail"
    parts = [f"<h2>Migration scan: <code>{esc(scan['root'])}</code></h2>",
             f'<p class="verdict {verdict_class}" id="scan-verdict">backend {esc(scan["backend"])}, '
             f"{esc(scan['precision'])}: {esc(answer)}</p>",
             "<ul>" + "".join(f"<li>{esc(why)}</li>" for why in scan["why"]) + "</ul>",
             f"<p>{scan['files_scanned']:.0f} files, {scan['lines_scanned']:.0f} lines: {scan['findings']:.0f} "
             f"findings, {scan['unreadable']:.0f} unreadable files.</p>"]
    model = scan["model"]
    if not model["found"]:
        parts.append(f'<p>Model: <span class="note">none recognised ({esc(model["reason"])})</span></p>')
    else:
        family = f"Strata family {esc(model['family'])}" if model["supported"] else "not a Strata family"
        parts.append(f"<p>Model: {esc(model['evidence'])}: {family} ({esc(model['reason'])})</p>")
    if scan["categories"]:
        rows = [[esc(row["category"])] + [f"{row[s]:.0f}" for s, _, _ in SEVERITIES] for row in scan["categories"]]
        parts.append(table(["category"] + [words for _, words, _ in SEVERITIES], rows))
        parts.append(f'<figure class="plot" id="figure-scan">{scan_counts_svg(scan["categories"])}</figure>')
        parts.append("<p>Files with most findings:</p>" + table(
            ["file", "findings"], [[f"<code>{esc(r['file'])}</code>", f"{r['findings']:.0f}"] for r in scan["top_files"]]))
    parts.append(api_table("Blocks the move", scan["blockers"]))
    parts.append(api_table("Needs changes", scan["changes"]))
    parts.append(api_table("Risks to check", scan["risks"]))
    return "".join(parts)


STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 64em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
figure.plot { margin: 1em 0; }
figcaption { font-weight: bold; margin-bottom: 0.3em; }
.note { color: #777; font-style: italic; }
.verdict.pass { color: #176117; } .verdict.fail { color: #9a4a00; }
svg { max-width: 100%; height: auto; }
"""


def main():
    with open(sys.argv[1], encoding="utf-8") as source:
        document = json.load(source)
    labels = ", ".join(run["label"] for run in document["runs"])
    sections = [scan_section(document["scan"])] if "scan" in document else []
    if document["runs"]:
        sections += [runs_section(document["runs"]), plots_section(document), config_section(document),
                     planner_section(document), ops_section(document)]
    title = f"Strata run report: {esc(labels)}" if labels else f"Strata scan report: {esc(document['scan']['root'])}"
    sys.stdout.write("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                     f"<title>{title}</title><style>{STYLE}</style></head><body>"
                     f"<h1>{title}</h1>" + "".join(sections) + "</body></html>\n")


main()
