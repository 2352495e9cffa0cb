"""HTML report with matplotlib plots, built from the analysis tables (aggregated in Spark first)
and the lifecycles' totals, so the driver only ever holds per-second series and histograms,
whatever the trace size."""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from conformance.spec import behaviours  # noqa: E402
from spark_analysis.decode.kinds import Status  # noqa: E402
from spark_analysis.derive.lifecycle import LATENCY_COLUMNS, Totals  # noqa: E402
from spark_analysis.read.storage import LOCAL, Storage, join  # noqa: E402
from spark_analysis.report.summary import message_events  # noqa: E402

NS_PER_S = 1_000_000_000
CDF_POINTS = 200
LATENCY_TITLES = ("publish -> first delivery", "last delivery -> FIN")
# Spark jobs in flight at once for the plots' queries; enough to hide per-job latency on a few cores.
CONCURRENT_JOBS = 4
EXAMPLES = 20  # violations shown with their evidence


def write(tables: Mapping[str, DataFrame], totals: Totals, summary: dict, out_dir: str,
          storage: Storage = LOCAL) -> str:
    data = _fetch(tables)
    sections = [
        ("Throughput per topic and channel", _throughput(data["delivered_per_second"], data["published_per_second"])),
        ("Latency: publish to first delivery, last delivery to FIN", _latency_cdfs(totals)),
        ("Attempts per delivery", _attempts(totals)),
        ("Requeues and timeouts over time", _requeues(data["requeues"])),
        ("Errors by code", _errors(summary)),
        ("Heartbeat gaps", _heartbeat_gaps(data["heartbeat_gaps"])),
        ("RDY and in flight per consumer connection", _flow_control(data["flow_control"])),
        ("Registrations with nsqlookupd", _registrations(summary["lookupd"])),
    ]
    path = join(out_dir, "report.html")
    storage.write_text(path, _page(summary, sections, data["violations"]))
    return path


def _fetch(tables: Mapping[str, DataFrame]) -> dict:
    """Every aggregate the plots draw, as pandas frames or rows; the Spark jobs run side by side (each costs
    mostly Spark's fixed latency), the plotting after them, in this thread (matplotlib is not thread-safe)."""
    second = (F.col("ts_ns") / NS_PER_S).cast("long").alias("second")
    deliveries = tables["deliveries"]
    queries = {
        "delivered_per_second": lambda: deliveries.groupBy(
            second, F.concat_ws("/", "topic", "channel").alias("series")).count().toPandas(),
        "published_per_second": lambda: tables["publishes"].where(F.col("status") == Status.OK).groupBy(
            second, F.col("topic").alias("series")).count().toPandas(),
        "requeues": lambda: deliveries.where("outcome IN ('REQ', 'timeout', 'abandoned')").groupBy(
            second, "outcome").count().toPandas(),
        "heartbeat_gaps": lambda: tables["heartbeats"].where("gap_ms IS NOT NULL").groupBy(
            F.round("gap_ms", -1).alias("gap_ms")).count().orderBy("gap_ms").toPandas(),
        "flow_control": lambda: tables["flow_control"].where("channel IS NOT NULL").limit(20001).toPandas(),
        "violations": lambda: [row.asDict() for row in tables["violations"].orderBy("ts_ns").limit(EXAMPLES).collect()],
    }
    with ThreadPoolExecutor(CONCURRENT_JOBS) as pool:
        futures = {name: pool.submit(query) for name, query in queries.items()}
        return {name: future.result() for name, future in futures.items()}


def _figure_html(figure) -> str:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return f'<img src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


def _relative_seconds(frame, column="second"):
    start = frame[column].min() if len(frame) else 0
    return frame[column] - start


def _throughput(deliveries, publishes) -> str:
    if deliveries.empty and publishes.empty:
        return "<p>No messages in this trace.</p>"
    start = min(frame["second"].min() for frame in (deliveries, publishes) if not frame.empty)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    for axis, frame, title in (
        (top, publishes, "published messages/s per topic"),
        (bottom, deliveries, "deliveries/s per topic/channel"),
    ):
        for series, group in frame.groupby("series"):
            group = group.sort_values("second")
            axis.plot(group["second"] - start, group["count"], label=series, linewidth=1.2)
        axis.set_title(title)
        axis.set_ylabel("per second")
        axis.legend(fontsize=7, ncol=3)
    bottom.set_xlabel("seconds since first message")
    return _figure_html(figure)


def _latency_cdfs(totals: Totals) -> str:
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    rows = []
    quantiles = [i / CDF_POINTS for i in range(CDF_POINTS + 1)]
    for axis, column, title in zip(axes, LATENCY_COLUMNS, LATENCY_TITLES, strict=True):
        per_channel = sorted((f"{topic}/{channel}", histogram) for (name, topic, channel), histogram
                             in totals.latencies.items() if name == column)
        for series, histogram in per_channel:
            q = histogram.quantiles(quantiles)
            axis.plot(q, quantiles, label=series, linewidth=1.2)
            rows.append((title, series, q[CDF_POINTS // 2], q[int(CDF_POINTS * 0.9)], q[int(CDF_POINTS * 0.99)], q[-1]))
        axis.set_xscale("symlog", linthresh=1)
        axis.set_xlabel("milliseconds")
        axis.set_ylabel("fraction of messages")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    table = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{html.escape(s)}</td>"
        + "".join(f"<td>{v:,.1f}</td>" for v in values)
        + "</tr>"
        for t, s, *values in rows
    )
    return _figure_html(figure) + (
        "<table><tr><th>latency</th><th>topic/channel</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th>"
        f"<th>max ms</th></tr>{table}</table>"
    )


def _attempts(totals: Totals) -> str:
    per_attempts = Counter()
    for (_, _, attempts, _), count in totals.deliveries.items():
        per_attempts[attempts] += count
    if not per_attempts:
        return "<p>No deliveries.</p>"
    ordered = sorted(per_attempts)
    labels, counts = [str(attempts) for attempts in ordered], [per_attempts[attempts] for attempts in ordered]
    figure, axis = plt.subplots(figsize=(7, 3.5))
    axis.bar(labels, counts)
    axis.set_yscale("log")
    axis.set_xlabel("attempts field of the message frame (C-12)")
    axis.set_ylabel("deliveries (log)")
    for x, y in zip(labels, counts, strict=True):
        axis.annotate(f"{y:,}", (x, y), ha="center", va="bottom", fontsize=8)
    return _figure_html(figure)


def _requeues(frame) -> str:
    if frame.empty:
        return "<p>No requeues or timeouts.</p>"
    figure, axis = plt.subplots(figsize=(10, 3.5))
    frame["t"] = _relative_seconds(frame)
    for outcome, group in frame.groupby("outcome"):
        group = group.sort_values("t")
        axis.plot(group["t"], group["count"], marker=".", linewidth=1, label=f"{outcome} (by delivery time)")
    axis.set_xlabel("seconds")
    axis.set_ylabel("deliveries per second")
    axis.legend(fontsize=8)
    return _figure_html(figure)


def _errors(summary: dict) -> str:
    counts = {
        **{f"nsqd {k}": v for k, v in summary["error_frames"].items()},
        **{f"capture/decode {k}": v for k, v in summary["errors"].items()},
    }
    if not counts:
        return "<p>No error frames and no capture or decode errors.</p>"
    figure, axis = plt.subplots(figsize=(8, 0.5 + 0.4 * len(counts)))
    names = sorted(counts, key=counts.get)
    axis.barh(names, [counts[n] for n in names])
    axis.set_xlabel("count")
    for y, name in enumerate(names):
        axis.annotate(f"{counts[name]:,}", (counts[name], y), va="center", fontsize=8)
    return _figure_html(figure)


def _registrations(lookupd: dict) -> str:
    """What each producer told nsqlookupd (R-03, R-04, R-05, R-06, R-07) and how it answered."""
    if not lookupd["connections"]:
        return "<p>No nsqlookupd connection (TCP protocol V1) in the capture.</p>"
    commands = ", ".join(f"{name} {count:,}" for name, count in lookupd["commands"].items())
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(value))}</td>" for value in (
            row["producer"] or "(no IDENTIFY seen)", row["action"], row["topic"], row["channel"] or "(topic)",
            row["status"], f"{row['count']:,}")) + "</tr>"
        for row in lookupd["registrations"]
    )
    return (f"<p>{lookupd['connections']:,} V1 connections from {len(lookupd['producers']):,} producers "
            f"({html.escape(', '.join(lookupd['producers']))}); commands: {html.escape(commands)}.</p>"
            "<table><tr><th>producer</th><th>command</th><th>topic</th><th>channel</th><th>answer</th>"
            f"<th>count</th></tr>{rows}</table>")


def _heartbeat_gaps(frame) -> str:
    if frame.empty:
        return "<p>Fewer than two heartbeats on every connection.</p>"
    figure, axis = plt.subplots(figsize=(8, 3.5))
    axis.bar(frame["gap_ms"], frame["count"], width=8)
    axis.set_xlim(0, max(2 * frame["gap_ms"].median(), frame["gap_ms"].max() + 10))
    axis.set_xlabel("time between consecutive heartbeats on a connection (ms, 10 ms bins; C-28 flags > 2x)")
    axis.set_ylabel("heartbeats")
    return _figure_html(figure)


def _flow_control(frame) -> str:
    if len(frame) > 20000:
        return "<p>Too many connections to plot RDY per connection.</p>"
    if frame.empty:
        return "<p>No consumer connections.</p>"
    figure, axis = plt.subplots(figsize=(10, 4))
    start = frame["ts_ns"].min()
    for conn_id, group in frame.groupby("conn_id"):
        group = group.sort_values("ts_ns")
        label = f"{conn_id.split('>')[0]} {group['channel'].iloc[0]}"
        inflight = group[group["in_flight"].notna()]
        (line,) = axis.plot((inflight["ts_ns"] - start) / NS_PER_S, inflight["in_flight"], linewidth=1, label=label)
        rdy = group[group["rdy"].notna()]
        if rdy.empty:  # no RDY whose count could be read (a client's "RDY a")
            continue
        # RDY holds until changed (D-02): draw each value up to the connection's last sample
        times = [*rdy["ts_ns"], group["ts_ns"].max()]
        axis.step(
            [(t - start) / NS_PER_S for t in times],
            [*rdy["rdy"], *rdy["rdy"].tail(1)],
            where="post",
            linestyle="--",
            color=line.get_color(),
            linewidth=0.8,
        )
    axis.set_xlabel("seconds (solid: max in flight per second; dashed: RDY)")
    axis.set_ylabel("messages")
    axis.legend(fontsize=6, ncol=3)
    return _figure_html(figure)


def _item_text(item_id: str) -> str:
    item = behaviours().get(item_id)
    return f"{item.level}: {item.text}" if item else ""


def _violations(summary: dict, examples: list[dict]) -> str:
    """The monitors' findings by item and side, what each item says (``nsq-conformance explain ITEM`` says more),
    the first ones with the frames that show them, and what the traffic left unjudged."""
    counts = "".join(
        f"<tr><td><b>{html.escape(item)}</b></td><td>{html.escape(side)}</td><td>{count:,}</td>"
        f"<td>{html.escape(_item_text(item))}<br><code>nsq-conformance explain {html.escape(item)}</code></td></tr>"
        for item, sides in summary["violations"].items() for side, count in sides.items()
    ) or "<tr><td colspan=4>none found</td></tr>"
    shown = "".join(
        f"<tr><td>{html.escape(row['item'])}</td><td>{html.escape(row['side'])}</td>"
        f"<td><code>{html.escape(row['conn_id'])}</code></td><td>{html.escape(row['expected'])}</td>"
        f"<td>{html.escape(row['observed'])}</td>"
        f"<td><pre>{html.escape(chr(10).join(row['evidence']))}</pre></td></tr>" for row in examples)
    unjudged = "".join(
        f"<tr><td>{html.escape(item)}</td><td>{html.escape(why)}</td><td>{count:,}</td></tr>"
        for item, reasons in summary["not_judged"].items() for why, count in reasons.items())
    failed = "".join(f"<li><code>{html.escape(failure)}</code></li>" for failure in summary["monitor_failures"])
    return ((f"<p><b>Monitors that failed on this traffic</b> (their items are not judged; a bug of the toolkit's, "
             f"please report it):</p><ul>{failed}</ul>" if failed else "")
            + f"<table><tr><th>item</th><th>broken by</th><th>count</th><th>the rule</th></tr>{counts}</table>"
            + (f"<h3>The first {len(examples)}, with the frames that show them</h3><table><tr><th>item</th>"
               f"<th>by</th><th>connection</th><th>expected</th><th>observed</th><th>evidence</th></tr>{shown}</table>"
               if examples else "")
            + (f"<h3>Not judged: what the capture does not show</h3><table><tr><th>item</th><th>why</th>"
               f"<th>times</th></tr>{unjudged}</table>" if unjudged else ""))


def _inputs(summary: dict) -> str:
    """The header: what was analysed, and how fast."""
    given = summary.get("input", {})
    size, seconds = given.get("bytes", 0), given.get("analysis_seconds", 0)
    events = message_events(summary["totals"])
    rows = [
        ("analysed", "<br>".join(f"<code>{html.escape(path)}</code>" for path in given.get("files", []))),
        ("size", f"{size:,} bytes ({size / 1e6:,.1f} MB)"),
        ("NSQ connections", f"{summary['totals']['tcp_connections_nsqd_tcp_port']:,} to nsqd"
                            f" ({summary['tls_connections']:,} of them TLS, opaque after the upgrade),"
                            f" {summary['lookupd']['connections']:,} to nsqlookupd,"
                            f" {summary['other_connections']:,} other TCP connections"),
        ("message events", f"{events:,} (published, delivered, FIN, REQ, TOUCH)"),
        ("analysis time", f"{seconds:,.1f} s (Spark session start excluded)"),
    ]
    if seconds:
        rows.append(("rate", f"{events / seconds:,.0f} message events/s, {size / 1e6 / seconds:,.1f} MB/s"))
    return "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows)


def _page(summary: dict, sections, examples: list[dict]) -> str:
    totals = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:,}</td></tr>" for k, v in summary["totals"].items())
    violations = _violations(summary, examples)
    body = "".join(f"<h2>{html.escape(title)}</h2>{content}" for title, content in sections)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>NSQ trace report</title>
<style>body{{font-family:sans-serif;max-width:1150px;margin:auto}}
td,th{{padding:2px 8px;text-align:left}} table{{border-collapse:collapse}}
tr:nth-child(even){{background:#f3f3f3}} img{{max-width:100%}}</style></head>
<body><h1>NSQ trace report</h1><table>{_inputs(summary)}</table>
<h2>Totals (truth-file terms)</h2><table>{totals}</table>
<h2>Rules broken (the catalogue's monitors)</h2>{violations}
{body}</body></html>"""


def minutes_section(per_minute) -> str:
    """``watch``'s per-minute metrics (watch.MINUTES_SCHEMA, an Arrow table): counts and latency over time, then
    the table itself."""
    rows = per_minute.to_pylist()
    if not rows:
        return "<p>no messages yet</p>"
    figure, (counts, latency) = plt.subplots(1, 2, figsize=(12, 3.2))
    times = [row["minute"] for row in rows]
    for column in ("published", "delivered", "redelivered", "timeouts"):
        counts.plot(times, [row[column] for row in rows], marker="o", label=column)
    counts.set_ylabel("per minute")
    counts.legend()
    for column in ("latency_p50_ms", "latency_p99_ms"):
        latency.plot(times, [row[column] for row in rows], marker="o", label=column.removeprefix("latency_"))
    latency.set_ylabel("publish -> first delivery, ms")
    latency.legend()
    figure.autofmt_xdate()
    header = "".join(f"<th>{name}</th>" for name in per_minute.schema.names)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(row[name]))}</td>" for name in per_minute.schema.names) + "</tr>"
        for row in rows)
    return f"{_figure_html(figure)}<table><tr>{header}</tr>{body}</table>"


def _cell(value) -> str:
    if isinstance(value, list):  # a map column: (requirement, count) pairs
        return ", ".join(f"{key} {count}" for key, count in value) or "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return "-" if value is None else str(value)
