#!/usr/bin/env python3
"""replay.py - replay transcripts.jsonl against an nsqd and check every expectation (stdlib only).

Two modes:
  1. launch mode (default): for each flag set found in the transcripts, start a FRESH nsqd with the
     recorded flags (`--nsqd-bin`, default: nsqd on PATH, or $NSQD_BIN), run that group's transcripts in
     file order, stop it (by PID). A fake auth server is started when the flags name
     --auth-http-address=HOST:PORT (behaviour: see nsqwire.FakeAuthd / README).
       python3 replay.py --runs 3
  2. target mode: replay against a broker that is already running; you choose which flag set(s) it was
     started with.
       python3 replay.py --target 127.0.0.1:4150 --http-target 127.0.0.1:4151 --flagset default
     The groups assume a fresh broker (the first default transcripts look at an empty /stats).

Exit status 0 only if every transcript passed in every run.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # noqa: E402
from nsqwire import (Closed, Conn, FakeAuthd, Nsqd, authd_addr_from_flags, decode_spec,  # noqa: E402
                     http_request, json_match, substitute)

HERE = os.path.dirname(os.path.abspath(__file__))
HEX16 = re.compile(rb"[0-9a-f]{16}")
LENIENT_KEYS = set()   # JSON keys ignored when comparing (--lenient-keys)
SETTLED_WITHIN_S = 0.5  # how long a GET's answer may take to show state the broker updates asynchronously


def _strip(obj):
    if not LENIENT_KEYS:
        return obj
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in LENIENT_KEYS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def jmatch(expected, actual):
    return json_match(_strip(expected), _strip(actual))


class Fail(Exception):
    pass


def _ts_ok(ts):
    return abs(ts / 1e9 - time.time()) < 3600


def match_frame(exp, f, caps):
    """Return (error_or_None, new_bindings)."""
    if exp["type"] != f.ftype:
        return "frame type %d, expected %d (data %r)" % (f.ftype, exp["type"], f.data[:120]), {}
    if f.size != 4 + len(f.data):
        return "bad frame size", {}
    if f.ftype == 2:
        if len(f.data) < 26:
            return "message frame shorter than 26 bytes", {}
        b = {}
        if f.attempts != exp["attempts"]:
            return "attempts %d, expected %d" % (f.attempts, exp["attempts"]), {}
        mid = f.msg_id
        eid = exp["id"]
        if eid == "*":
            if not HEX16.fullmatch(mid):
                return "message id %r is not 16 lowercase hex chars" % mid, {}
        else:
            want = substitute(eid, caps) if "${" in eid else eid
            if mid.decode("latin1") != want:
                return "message id %r, expected %r" % (mid, want), {}
        ets = exp["timestamp"]
        if ets == "*":
            if not _ts_ok(f.timestamp):
                return "implausible timestamp %d" % f.timestamp, {}
        elif isinstance(ets, str):
            if str(f.timestamp) != substitute(ets, caps):
                return "timestamp %d, expected %s" % (f.timestamp, ets), {}
        elif f.timestamp != ets:
            return "timestamp mismatch", {}
        want_body = decode_spec(exp["body"])
        if f.body != want_body:
            return "body %r, expected %r" % (f.body[:120], want_body[:120]), {}
        if "capture" in exp:
            b[exp["capture"]] = mid.decode("latin1")
            b[exp["capture"] + ".ts"] = f.timestamp
        return None, b
    if "json" in exp:
        try:
            obj = json.loads(f.data)
        except ValueError:
            return "expected JSON, got %r" % f.data[:200], {}
        r = jmatch(exp["json"], obj)
        return (("json " + r) if r else None), {}
    want = decode_spec(exp["data"], caps if exp.get("subst") else None)
    if f.data != want:
        return "data %r, expected %r" % (f.data[:200], want[:200]), {}
    return None, {}


def match_frames(expected, frames, caps, unordered):
    if not unordered:
        binds = {}
        for i, (e, f) in enumerate(zip(expected, frames)):
            err, b = match_frame(e, f, dict(caps, **binds))
            if err:
                return "frame %d: %s" % (i, err)
            binds.update(b)
        caps.update(binds)
        return None
    first_err = None
    for perm in itertools.permutations(frames):
        binds = {}
        err = None
        for i, (e, f) in enumerate(zip(expected, perm)):
            err, b = match_frame(e, f, dict(caps, **binds))
            if err:
                err = "frame %d: %s" % (i, err)
                break
            binds.update(b)
        if err is None:
            caps.update(binds)
            return None
        first_err = first_err or err
    return "unordered: no assignment matches (%s)" % first_err


def check_http(exp, st, hdrs, body):
    if st != exp["status"]:
        return "HTTP status %d, expected %d (body %r)" % (st, exp["status"], body[:200])
    for h, v in exp.get("headers", {}).items():
        if hdrs.get(h) != v:
            return "header %s: %r, expected %r" % (h, hdrs.get(h), v)
    if "json" in exp:
        try:
            obj = json.loads(body)
        except ValueError:
            return "expected JSON body, got %r" % body[:200]
        r = jmatch(exp["json"], obj)
        return ("json " + r) if r else None
    if "body_regex" in exp:
        if not re.fullmatch(exp["body_regex"], body.decode("utf-8", "replace")):
            return "body does not match regex: %r" % body[:300]
        return None
    if "body" in exp and body != decode_spec(exp["body"]):
        return "body %r, expected %r" % (body[:200], decode_spec(exp["body"])[:200])
    return None


def replay_one(tr, host, tcp_port, http_host, http_port, check_timing=True):
    conns, caps = {}, {}
    t_ref = time.monotonic()
    pending_http = None
    try:
        for i, step in enumerate(tr["steps"]):
            cname = step.get("conn", "A")
            where = "step %d" % i
            if "connect" in step:
                conns[step["connect"]] = Conn(host, tcp_port)
            elif "send" in step:
                data = decode_spec(step["send"], caps if step.get("subst") else None)
                try:
                    conns[cname].send(data)
                except OSError as e:
                    raise Fail("%s: send failed: %s" % (where, e))
                t_ref = time.monotonic()
            elif "expect" in step:
                c = conns[cname]
                exp = step["expect"]
                deadline = time.monotonic() + step.get("within_ms", 3000) / 1000
                frames = []
                try:
                    while len(frames) < len(exp):
                        f = c.read_frame(deadline)
                        if f is None:
                            break
                        frames.append(f)
                except Closed as e:
                    raise Fail("%s: connection %s closed (%s) after %d/%d frames %r" % (
                        where, cname, e.how, len(frames), len(exp), [x.data[:80] for x in frames]))
                if len(frames) < len(exp):
                    raise Fail("%s: conn %s got %d/%d frames within %d ms: %r" % (
                        where, cname, len(frames), len(exp), step.get("within_ms", 3000),
                        [x.data[:80] for x in frames]))
                err = match_frames(exp, frames, caps, step.get("unordered", False))
                if err:
                    raise Fail("%s (conn %s): %s" % (where, cname, err))
                if check_timing and "accept_ms" in step:
                    ms = (frames[-1].t - t_ref) * 1000
                    lo, hi = step["accept_ms"]
                    if not lo <= ms <= hi:
                        raise Fail("%s: arrived after %.0f ms, outside accept window [%d, %d]" % (where, ms, lo, hi))
            elif "expect_silence_ms" in step:
                c = conns[cname]
                try:
                    f = c.read_frame(time.monotonic() + step["expect_silence_ms"] / 1000)
                except Closed as e:
                    raise Fail("%s: conn %s closed (%s) during expected silence" % (where, cname, e.how))
                if f is not None:
                    raise Fail("%s: conn %s: unexpected frame type %d %r during silence" % (
                        where, cname, f.ftype, f.data[:120]))
            elif "expect_close" in step:
                c = conns[cname]
                how, frames = c.wait_closed(time.monotonic() + step.get("within_ms", 2000) / 1000)
                if frames:
                    raise Fail("%s: unexpected frames before close: %r" % (where, [x.data[:80] for x in frames]))
                if how is None:
                    raise Fail("%s: conn %s not closed within %d ms" % (where, cname, step.get("within_ms", 2000)))
                if check_timing and "accept_ms" in step:
                    ms = (time.monotonic() - t_ref) * 1000
                    lo, hi = step["accept_ms"]
                    if not lo <= ms <= hi:
                        raise Fail("%s: closed after %.0f ms, outside accept window [%d, %d]" % (where, ms, lo, hi))
            elif "close" in step:
                conns[step["close"]].close()
            elif "shutdown_write" in step:
                conns[step["shutdown_write"]].shutdown_write()
            elif "upgrade" in step:
                conns[cname].upgrade(step["upgrade"])
            elif "wait_ms" in step:
                time.sleep(step["wait_ms"] / 1000)
            elif "http" in step:
                h = step["http"]
                body = decode_spec(h["body"]) if "body" in h else b""
                pending_http = http_request(http_host, http_port, h["method"], h["path"], body, h.get("headers"))
                t_ref = time.monotonic()
            elif "expect_http" in step:
                asked = tr["steps"][i - 1]["http"]
                err = check_http(step["expect_http"], *pending_http)
                # What a GET shows (/stats) the broker may not have updated yet: a command with no answer, sent after
                # the one whose answer was awaited (SUB's OK, then RDY 1), takes effect asynchronously, in nsqd too.
                # Asked again until it matches, within a bound (the timing windows stay measured from the first ask).
                deadline = time.monotonic() + SETTLED_WITHIN_S
                while err and asked["method"] == "GET" and time.monotonic() < deadline:
                    time.sleep(0.02)
                    err = check_http(step["expect_http"], *http_request(http_host, http_port, "GET", asked["path"],
                                                                        b"", asked.get("headers")))
                if err:
                    raise Fail("%s (%s %s): %s" % (where, asked["method"], asked["path"], err))
            else:
                raise Fail("%s: unknown step %r" % (where, step))
        return None
    except Fail as e:
        return str(e)
    except Exception as e:  # noqa: BLE001
        return "%s: %s" % (type(e).__name__, e)
    finally:
        for c in conns.values():
            c.close()
        for t in tr.get("cleanup_topics", []):
            try:
                http_request(http_host, http_port, "POST", "/topic/delete?topic=" + urllib.parse.quote(t, safe=""))
            except OSError:
                pass
        time.sleep(0.05)


def load(path):
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def groups_of(trs):
    order, groups = [], {}
    for tr in trs:
        key = tr.get("flagset") or json.dumps(tr["nsqd_flags"])
        if key not in groups:
            groups[key] = (tr["nsqd_flags"], [])
            order.append(key)
        groups[key][1].append(tr)
    return [(k, groups[k][0], groups[k][1]) for k in order]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transcripts", default=os.path.join(HERE, "transcripts.jsonl"))
    ap.add_argument("--nsqd-bin", default=os.environ.get("NSQD_BIN", "nsqd"))
    ap.add_argument("--nsqlookupd-bin", default=os.environ.get("NSQLOOKUPD_BIN", "nsqlookupd"),
                    help="transcripts-cluster.jsonl only")
    ap.add_argument("--nsq-tail-bin", default=os.environ.get("NSQ_TAIL_BIN", "nsq_tail"),
                    help="transcripts-cluster.jsonl only (the go-nsq consumer of rec R-15)")
    ap.add_argument("--port-base", type=int, default=None,
                    help="transcripts-cluster.jsonl only: first of the ports used (default 24250; see README)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--tcp-port", type=int, default=24150)
    ap.add_argument("--http-port", type=int, default=24151)
    ap.add_argument("--target", help="HOST:PORT of an already-running broker (target mode)")
    ap.add_argument("--http-target", help="HOST:PORT of its HTTP API (target mode)")
    ap.add_argument("--flagset", action="append", help="only these flag sets (repeatable)")
    ap.add_argument("--only", default="", help="comma-separated transcript ids")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-timing", action="store_true", help="do not check accept_ms windows")
    ap.add_argument("--json-report", help="write a JSON report here")
    ap.add_argument("--lenient-keys", default="",
                    help="comma-separated JSON keys to ignore wherever they appear, e.g. "
                         "topology_zone,topology_region,global_msg_count (fields of this master build that the "
                         "v1.3.0 tag does not emit)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    LENIENT_KEYS.update(k for k in args.lenient_keys.split(",") if k)
    trs = load(args.transcripts)
    if args.only:
        ids = set(args.only.split(","))
        trs = [t for t in trs if t["id"] in ids]
    if args.flagset:
        trs = [t for t in trs if t.get("flagset") in args.flagset]
    import replay_cluster
    if replay_cluster.is_cluster(trs):
        # transcripts-cluster.jsonl: a fresh environment per transcript (launch mode only)
        ok, report = replay_cluster.run(trs, args, sys.modules[__name__])
        if args.json_report:
            with open(args.json_report, "w") as f:
                json.dump(report, f, indent=1)
        sys.exit(0 if ok else 1)
    groups = groups_of(trs)
    if args.flagset:
        groups = [g for g in groups if g[0] in args.flagset]

    report = {"runs": []}
    all_ok = True
    for run in range(1, args.runs + 1):
        t_run = time.time()
        passed, failed = 0, []
        per_group = {}
        for key, flags, group in groups:
            authd = nsqd = None
            if args.target:
                host, tcp = args.target.rsplit(":", 1)
                hh, hp = (args.http_target or "%s:%d" % (host, args.http_port)).rsplit(":", 1)
                tcp, hp = int(tcp), int(hp)
            else:
                host, tcp, hh, hp = args.host, args.tcp_port, args.host, args.http_port
                ad = authd_addr_from_flags(flags)
                if ad:
                    authd = FakeAuthd(*ad).start()
                nsqd = Nsqd(args.nsqd_bin, flags, tcp, hp, host).start()
            t_g = time.time()
            gp = 0
            try:
                for tr in group:
                    t0 = time.time()
                    err = replay_one(tr, host, tcp, hh, hp, check_timing=not args.no_timing)
                    if err:
                        failed.append({"id": tr["id"], "title": tr["title"], "error": err})
                        print("  FAIL %s [%s] %s\n       %s" % (tr["id"], key, tr["title"], err), flush=True)
                    else:
                        passed += 1
                        gp += 1
                        if args.verbose:
                            print("  ok   %s [%s] %.2fs %s" % (tr["id"], key, time.time() - t0, tr["title"]), flush=True)
            finally:
                if nsqd:
                    nsqd.stop()
                if authd:
                    authd.stop()
            per_group[key] = {"passed": gp, "total": len(group), "seconds": round(time.time() - t_g, 1)}
        secs = time.time() - t_run
        total = sum(len(g[2]) for g in groups)
        print("run %d: %d passed, %d failed (of %d) in %.1fs  %s" % (
            run, passed, len(failed), total, secs,
            " ".join("%s=%d/%d" % (k, v["passed"], v["total"]) for k, v in per_group.items())), flush=True)
        report["runs"].append({"run": run, "passed": passed, "failed": failed, "total": total,
                               "seconds": round(secs, 1), "groups": per_group})
        all_ok = all_ok and not failed
    if args.json_report:
        with open(args.json_report, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
