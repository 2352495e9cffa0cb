"""Hostile sessions at scale (`tox -e fuzz`): 100,000 seeded TCP and HTTP sessions against one reference broker,
then its health. The generator, the runner and the per-session invariants are tests/broker/hostile/,
the same as tests/broker/test_fuzz.py's 10,000.

Writes bench-results/fuzz.json: sessions, seconds, sessions/s, frames and error codes seen with counts, HTTP
statuses, the broker's peak RSS and threads afterwards, tracebacks in its stderr (must be 0), and the first
failing sessions, each printed so it replays alone (`--only INDEX` with the same `--seed`). Exit status 1 when a
session broke an invariant, the broker is not healthy afterwards, or the time budget ran out first.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from reference_broker.launcher import running_broker
from tests.broker.hostile.health import check_health, peak_rss_bytes, run_sessions, thread_names, tracebacks
from tests.broker.hostile.session import BROKER_FLAGS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.broker_fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--seed", default="1", help="any string; session i is drawn from random.Random(f'{seed}:{i}')")
    parser.add_argument("--only", type=int, help="play only this session index (to replay a reported failure)")
    parser.add_argument("--workers", type=int, default=32, help="sessions played at once")
    parser.add_argument("--budget-seconds", type=float, default=1800.0,
                        help="no session starts after this; sessions left out fail the run")
    parser.add_argument("--rss-limit-mib", type=int, default=128,
                        help="the broker's peak RSS must stay under this (it levels off at ~60 MiB)")
    parser.add_argument("--output", default="bench-results/fuzz.json")
    args = parser.parse_args(argv)
    indices = [args.only] if args.only is not None else range(args.sessions)

    with running_broker(*BROKER_FLAGS) as broker:
        pid = broker.process.pid
        baseline_threads = thread_names((broker.host, broker.http_port))
        print(f"seed {args.seed}: {len(indices)} sessions, {args.workers} at a time, broker pid {pid} "
              f"{' '.join(BROKER_FLAGS)}", flush=True)

        def progress(report) -> None:
            print(f"  {report.sessions:>7} sessions  {report.sessions / report.seconds:6.0f}/s  "
                  f"{report.failed_sessions} failed  broker peak RSS {peak_rss_bytes(pid) >> 20} MiB", flush=True)

        report = run_sessions(broker.tcp_address, (broker.host, broker.http_port), args.seed, indices,
                              workers=args.workers, budget_seconds=args.budget_seconds, progress=progress)
        health_problem = None
        try:
            health = check_health(broker, args.rss_limit_mib << 20, baseline_threads)
        except AssertionError as error:
            health, health_problem = None, str(error)
        peak_rss = peak_rss_bytes(pid)
        traceback_lines = tracebacks(broker.log)

    result = {
        "seed": args.seed,
        "sessions": report.sessions,
        "seconds": round(report.seconds, 2),
        "sessions_per_second": round(report.sessions / report.seconds, 1),
        "workers": args.workers,
        "broker_flags": list(BROKER_FLAGS),
        "frames": dict(report.frames),
        "error_codes": dict(report.error_codes.most_common()),
        "http_statuses": {str(status): count for status, count in sorted(report.http_statuses.items())},
        "compressed_sessions": dict(report.layers),
        "endings": dict(report.endings),
        "sessions_timed_out": report.timed_out,
        "sessions_not_run": report.not_run,
        "failed_sessions": report.failed_sessions,
        "failures": [outcome.describe() for outcome in report.failures],
        "broker_peak_rss_bytes": peak_rss,
        "broker_rss_limit_bytes": args.rss_limit_mib << 20,
        "broker_threads_after": health.threads if health else None,
        "ping_seconds_after": round(health.ping_seconds, 4) if health else None,
        "tracebacks": len(traceback_lines),
        "healthy_after": health_problem is None,
        "health_problem": health_problem,
    }
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as output:
        json.dump(result, output, indent=2)
        output.write("\n")

    print(f"{report.sessions} sessions in {report.seconds:.1f} s ({result['sessions_per_second']}/s), "
          f"{sum(report.frames.values())} frames, {report.failed_sessions} failed, {report.not_run} not run; "
          f"broker peak RSS {peak_rss >> 20} MiB; {len(traceback_lines)} traceback lines; "
          f"{'healthy' if health_problem is None else 'NOT healthy'} afterwards; wrote {args.output}")
    if report.failures:
        print("\n" + report.describe_failures())
        print(f"\nreplay one alone: python -m benchmarks.broker_fuzz --seed {args.seed} --only <index>")
    if health_problem:
        print("\n" + health_problem)
    failed = report.failed_sessions or report.not_run or health_problem or traceback_lines
    return 1 if failed else 0


if __name__ == "__main__":
    started = time.monotonic()
    status = main()
    print(f"({time.monotonic() - started:.0f} s in all)")
    sys.exit(status)
