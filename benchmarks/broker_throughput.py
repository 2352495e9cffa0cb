"""Broker throughput (`tox -e bench`): the reference broker against the real nsqd v1.3.0, publish then consume.

For each mode, each load generator ("tool") and each broker, a fresh broker (free loopback ports, a fresh
temporary --data-path) takes N messages of 100 bytes (MPUB batches of 200) on a topic with one channel, and
then gives them all to consumers (RDY 2500, FIN each). Measured: publish and consume msgs/s and the
broker's peak RSS (VmHWM) after each phase.

modes   memory: --mem-queue-size larger than the run, so every message stays in memory
        disk:   nsqd's default --mem-queue-size=10000, so the backlog spills to the disk queue
tools   python: benchmarks/load_python.py, 2 publisher processes (8 MPUBs in flight each), 2 consumers
        go:     nsq's bench/bench_writer and bench/bench_reader (with --bench-bin-dir or NSQ_BENCH_DIR)
brokers reference (`python -m reference_broker`), and nsqd with --nsqd-bin or NSQD_BIN

Targets (issue): the reference broker reaches >= 60 % of nsqd's publish rate and >= 50 % of its consume
rate, in both modes, with the same tool. Afterwards the backlog memory benchmark (broker_backlog.py) runs
unless --backlog-messages 0. Both write their section of bench-results/broker.json. The exit status is 1
only if a run failed (timeout, error); a missed target is reported, not an error.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from . import broker_backlog, load_go, load_python
from .brokers import NSQD, REFERENCE, BrokerProgram, running
from .phases import PhaseResult, PhaseTimeout
from .report import NOT_BUILT, add_nsqd_arguments, machine, now, nsqd_program, table, update_section, version_of

LOAD = load_python.Load(topic="bench", channel="consumers", body_size=100)
TARGETS = {"publish": 0.60, "consume": 0.50}  # reference msgs/s over nsqd msgs/s, same mode and tool
DISK_MODE_MEM_QUEUE_SIZE = 10_000  # nsqd's default
MODES = ("memory", "disk")


def mode_flags(mode: str, messages: int) -> list[str]:
    """The broker flags that make a mode (the same for both brokers: the reference takes nsqd's flags)."""
    if mode == "disk":
        return []  # the default, on purpose: this is how nsqd runs out of the box
    # The Go writer is stopped at the first /stats poll past N, so it may publish somewhat more than N.
    return [f"--mem-queue-size={2 * messages + 100_000}"]


@dataclass(frozen=True)
class PythonTool:
    publishers: int
    consumers: int
    name: str = "python"

    def publish(self, broker, messages: int, timeout: float) -> PhaseResult:
        return load_python.publish(broker.tcp_address, LOAD, messages, self.publishers, timeout)

    def consume(self, broker, messages: int, timeout: float) -> PhaseResult:
        return load_python.consume(broker.tcp_address, LOAD, messages, self.consumers, timeout)

    def describe(self) -> str:
        return (f"benchmarks/load_python.py: {self.publishers} publisher processes, {LOAD.pipeline_window} MPUBs "
                f"in flight each; {self.consumers} consumer processes")


@dataclass(frozen=True)
class GoTool:
    bench_dir: str
    name: str = "go"

    def publish(self, broker, messages: int, timeout: float) -> PhaseResult:
        return load_go.publish(broker, LOAD, messages, self.bench_dir, timeout)

    def consume(self, broker, messages: int, timeout: float) -> PhaseResult:
        return load_go.consume(broker, LOAD, messages, self.bench_dir, timeout)

    def describe(self) -> str:
        return (f"nsq v1.3.0 bench_writer/bench_reader from {self.bench_dir}: GOMAXPROCS connections "
                f"({os.cpu_count()}), one MPUB in flight each; stopped at N via /stats polling")


def measure(program: BrokerProgram, mode: str, tool, messages: int, timeout: float) -> dict:
    """One broker, one mode, one tool: publish N, wait for the channel to hold them, consume them all."""
    label = f"[{mode:6} {tool.name:6} {program.name:9}]"
    with running(program, *mode_flags(mode, messages)) as broker:
        broker.create_channel(LOAD.topic, LOAD.channel)
        publish = tool.publish(broker, messages, timeout)
        _progress(label, "publish", publish)
        peak_after_publish = broker.peak_rss_mib()
        backlog = broker.wait_for_handover(LOAD.topic, LOAD.channel, timeout)
        consume = tool.consume(broker, backlog, timeout)
        _progress(label, "consume", consume)
        return {"publish": publish.as_json(), "consume": consume.as_json(),
                "peak_rss_mib": {"after_publish": peak_after_publish, "end": broker.peak_rss_mib()}}


def _progress(label: str, phase: str, result: PhaseResult) -> None:
    print(f"{label} {phase:7} {result.messages:>10,} msgs in {result.seconds:7.2f} s = "
          f"{result.msgs_per_second:>9,} msgs/s", flush=True)


def compare(runs: dict[str, dict | str]) -> dict | None:
    """Reference over nsqd, per phase, against the targets; None unless both brokers have figures."""
    reference, nsqd = runs.get(REFERENCE), runs.get(NSQD)
    if not (_has_figures(reference) and _has_figures(nsqd)):
        return None
    verdicts = {}
    for phase, target in TARGETS.items():
        ratio = reference[phase]["msgs_per_second"] / nsqd[phase]["msgs_per_second"]
        verdicts[phase] = {"ratio": round(ratio, 3), "target": target, "pass": ratio >= target}
    return verdicts


def run_all(programs: dict[str, BrokerProgram | None], tools: list, modes: list[str], messages: int,
            timeout: float) -> dict:
    """Every mode x tool x broker; a broker that is not built gets NOT_BUILT instead of figures."""
    results: dict = {}
    for mode in modes:
        results[mode] = {"flags": mode_flags(mode, messages) or [f"(defaults: --mem-queue-size="
                                                                 f"{DISK_MODE_MEM_QUEUE_SIZE})"]}
        for tool in tools:
            runs: dict[str, dict | str] = {}
            for name, program in programs.items():
                if program is None:
                    runs[name] = NOT_BUILT
                    continue
                try:
                    runs[name] = measure(program, mode, tool, messages, timeout)
                except (PhaseTimeout, RuntimeError, OSError) as error:
                    print(f"[{mode:6} {tool.name:6} {name:9}] FAILED: {error}", flush=True)
                    runs[name] = {"error": str(error)}
            results[mode][tool.name] = {"runs": runs, "reference_vs_nsqd": compare(runs)}
    return results


def headline(results: dict, tools: list) -> dict:
    """The verdict that answers the issue: every phase of every mode meets its target, judged with nsq's own
    Go bench tools when they ran (python_generator_check shows where the Python generator falls behind them
    against nsqd, i.e. where it, not nsqd, sets the pace), else with the Python generator."""
    tool = "go" if any(t.name == "go" for t in tools) else "python"
    verdicts = [results[mode][tool]["reference_vs_nsqd"] for mode in results]
    if any(v is None for v in verdicts):
        return {"tool": tool, "verdict": "n/a (needs figures from both the reference broker and nsqd)"}
    passed = all(phase["pass"] for v in verdicts for phase in v.values())
    return {"tool": tool, "verdict": "PASS" if passed else "FAIL"}


def python_generator_check(results: dict) -> dict | None:
    """Is the Python load generator fast enough? Against nsqd, per mode and phase, it should reach at least
    90 % of what nsq's Go bench tools reach; where it does not, it is the bottleneck there, not nsqd."""
    check = {}
    for mode, entry in results.items():
        python_run = entry.get("python", {}).get("runs", {}).get(NSQD)
        go_run = entry.get("go", {}).get("runs", {}).get(NSQD)
        if not (_has_figures(python_run) and _has_figures(go_run)):
            continue
        check[mode] = {phase: {"python_msgs_per_second": python_run[phase]["msgs_per_second"],
                               "go_msgs_per_second": go_run[phase]["msgs_per_second"],
                               "python_keeps_up": python_run[phase]["msgs_per_second"]
                               >= 0.9 * go_run[phase]["msgs_per_second"]}
                       for phase in TARGETS}
    return check or None


def _has_figures(run) -> bool:
    return isinstance(run, dict) and "error" not in run


def _rate_cell(run) -> str:
    """What stands in a table cell instead of a figure: "not run", NOT_BUILT or "error"; "" if there is one."""
    if run is None:
        return "not run"
    if not isinstance(run, dict):
        return str(run)
    return "error" if "error" in run else ""


def summary_table(results: dict, tools: list, modes: list[str]) -> str:
    rows = []
    for mode in modes:
        for tool in tools:
            entry = results[mode][tool.name]
            reference, nsqd = entry["runs"].get(REFERENCE), entry["runs"].get(NSQD)
            for phase, target in TARGETS.items():
                verdict = (entry["reference_vs_nsqd"] or {}).get(phase)
                rows.append([mode, tool.name, phase, _rate(reference, phase), _rate(nsqd, phase),
                             f"{verdict['ratio']:.0%}" if verdict else "-", f">= {target:.0%}",
                             ("PASS" if verdict["pass"] else "FAIL") if verdict else "n/a"])
            rows.append([mode, tool.name, "peak RSS MiB", _rss(reference), _rss(nsqd), "", "", ""])
    header = ["mode", "tool", "phase", "reference msgs/s", "nsqd msgs/s", "ratio", "target", "verdict"]
    return table(rows, header, text_columns=3)


def _rate(run, phase: str) -> str:
    return _rate_cell(run) or f"{run[phase]['msgs_per_second']:,}"


def _rss(run) -> str:
    return _rate_cell(run) or f"{run['peak_rss_mib']['end']:,}"


def _any_run_failed(results: dict) -> bool:
    runs = [run for mode in results.values() for tool in mode.values() if isinstance(tool, dict)
            for run in tool["runs"].values()]
    return any(isinstance(run, dict) and "error" in run for run in runs)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per run (default 1M)")
    parser.add_argument("--modes", default="memory,disk", help="memory, disk or both (default)")
    parser.add_argument("--tools", default=None,
                        help="python, go or both (default: both when the bench tools are given, else python)")
    parser.add_argument("--bench-bin-dir", default=os.environ.get("NSQ_BENCH_DIR") or None,
                        help="directory with nsq's bench_writer and bench_reader (env NSQ_BENCH_DIR)")
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--phase-timeout", type=float, default=300, help="seconds per phase (default 300)")
    parser.add_argument("--brokers", default=f"{REFERENCE},{NSQD}",
                        help="brokers to measure (default both; nsqd only with --nsqd-bin)")
    parser.add_argument("--backlog-messages", type=int, default=2_000_000,
                        help="size of the backlog memory benchmark afterwards (default 2M; 0 skips it)")
    parser.add_argument("--backlog-timeout", type=float, default=900,
                        help="seconds for the backlog's publish, and for its handover (default 900)")
    parser.add_argument("--backlog-brokers", default=f"{REFERENCE},{NSQD}",
                        help="brokers for the backlog benchmark (default both)")
    add_nsqd_arguments(parser)
    return parser.parse_args(argv)


def select_tools(args: argparse.Namespace) -> list:
    names = (args.tools or ("python,go" if args.bench_bin_dir else "python")).split(",")
    tools = []
    if "python" in names:
        tools.append(PythonTool(args.publishers, args.consumers))
    if "go" in names:
        if not args.bench_bin_dir:
            raise SystemExit("--tools go needs --bench-bin-dir (or NSQ_BENCH_DIR)")
        for name in (load_go.WRITER, load_go.READER):
            if not os.access(load_go.tool_path(args.bench_bin_dir, name), os.X_OK):
                raise SystemExit(f"no executable {name} in {args.bench_bin_dir}")
        tools.append(GoTool(args.bench_bin_dir))
    if not tools:
        raise SystemExit(f"--tools {args.tools}: expected python, go or python,go")
    return tools


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    nsqd = nsqd_program(args.nsqd_bin)
    wanted = args.brokers.split(",")
    programs = {name: program for name, program in ((REFERENCE, BrokerProgram.reference()), (NSQD, nsqd))
                if name in wanted}
    tools, modes = select_tools(args), args.modes.split(",")
    if not modes or any(mode not in MODES for mode in modes):
        raise SystemExit(f"--modes {args.modes}: expected memory, disk or memory,disk")
    print(f"throughput: {args.messages:,} messages of {LOAD.body_size} B per run; modes {', '.join(modes)}; "
          f"tools {', '.join(t.name for t in tools)}; nsqd {args.nsqd_bin or NOT_BUILT}", flush=True)

    results = run_all(programs, tools, modes, args.messages, args.phase_timeout)
    section = {
        "measured_at": now(),
        "machine": machine(),
        "messages_per_run": args.messages,
        "load": {"mpub_batch": LOAD.batch, "body_bytes": LOAD.body_size, "rdy": LOAD.rdy},
        "tools": {tool.name: tool.describe() for tool in tools},
        "brokers": {name: version_of(program) if program else NOT_BUILT for name, program in programs.items()},
        "targets": {f"{phase}_ratio": target for phase, target in TARGETS.items()},
        "modes": results,
        "headline": headline(results, tools),
        "python_generator_check": python_generator_check(results),
    }
    path = update_section(args.output, "throughput", section)
    print(summary_table(results, tools, modes))
    print(f"headline ({section['headline']['tool']} tools): {section['headline']['verdict']}")
    print(f"written to {path} (section 'throughput')", flush=True)

    failed = _any_run_failed(results)
    if args.backlog_messages > 0:
        backlog_programs = broker_backlog.selected_programs(args.backlog_brokers.split(","), nsqd)
        failed |= not broker_backlog.run(backlog_programs, args.backlog_messages, args.publishers,
                                         args.backlog_timeout, args.output)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
